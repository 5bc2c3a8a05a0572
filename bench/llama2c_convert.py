#!/usr/bin/env python3
"""Write an implicit Llama checkpoint in llama2.c's format, with two tokenizers that agree.

    python3 bench/llama2c_convert.py CKPT.safetensors OUTDIR

reads a float32 Llama checkpoint of ours (tied head, as `implicit init --model llama` writes it) and
writes into OUTDIR:
  model.bin      llama2.c's legacy checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads,
                 n_kv_heads, vocab_size > 0 = shared classifier, seq_len), then the float32 weights
                 in run.c's order (token embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
                 rms_final, two unused RoPE tables of seq_len * head_size / 2 floats each).
                 The rows of wq and wk are reordered within each head: llama2.c rotates the pairs
                 (2i, 2i + 1), we rotate (i, i + head_size / 2) at the same frequency, so row 2i
                 takes our row i and row 2i + 1 our row i + head_size / 2 (q . k is unchanged).
  tok.bpe        a byte-level BPE of ours: the 256 bytes, then vocab - 256 merges whose tokens are
                 strings of ASCII letters (a letter pair, then a pair with one more letter, ...).
  tokenizer.bin  llama2.c's tokenizer with the same id -> bytes map (max_token_length, then per id
                 a float score, an int32 length and the bytes).
With a start token of id 1 (llama2.c's BOS; byte 0x01 for us) both programs then print the same
text for greedy decoding, up to what llama2.c's printing drops: single-byte tokens that are neither
printable nor white space (C locale), and a space right after token 1. `normalize` below applies
those two rules to our raw output, so the two texts can be compared byte for byte.
Standard library only (no numpy).
"""
import array
import json
import os
import re
import struct
import sys

LETTERS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        meta = header.pop("__metadata__", {})
        tensors = {}
        for name, t in header.items():
            if t["dtype"] != "F32":
                sys.exit("%s: tensor %s is %s, expected F32" % (path, name, t["dtype"]))
            a, b = t["data_offsets"]
            f.seek(base + a)
            data = array.array("f")
            data.frombytes(f.read(b - a))
            if sys.byteorder != "little":
                data.byteswap()
            tensors[name] = (t["shape"], data)
    return meta, tensors


def rope_rows(w, dim, head_size):
    """w (dim rows of dim floats): rows reordered within each head, halves -> interleaved pairs."""
    out = array.array("f", bytes(4 * len(w)))
    half = head_size // 2
    for h in range(dim // head_size):
        for i in range(half):
            for dst, src in ((2 * i, i), (2 * i + 1, i + half)):
                d, s = (h * head_size + dst) * dim, (h * head_size + src) * dim
                out[d:d + dim] = w[s:s + dim]
    return out


def token_strings(vocab):
    """The bytes of every id: 256 single bytes, then letter strings made by merges (a, b)."""
    toks = [bytes([i]) for i in range(256)]
    merges = []
    index = {t: i for i, t in enumerate(toks)}
    frontier = [bytes([c]) for c in LETTERS]
    while len(toks) < vocab:
        nxt = []
        for left in frontier:
            for c in LETTERS:
                if len(toks) == vocab:
                    break
                s = left + bytes([c])
                merges.append((index[left], c))
                index[s] = len(toks)
                toks.append(s)
                nxt.append(s)
        frontier = nxt
    return toks, merges


def normalize(raw):
    """Our raw output bytes (after a start token 1) as llama2.c prints the same tokens."""
    raw = re.sub(b"\x01 ", b"\x01", b"\x01" + raw)  # the space after BOS is stripped
    keep = set(range(0x20, 0x7F)) | set(b"\t\n\v\f\r")
    return bytes(c for c in raw if c in keep)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    src, outdir = sys.argv[1], sys.argv[2]
    meta, t = read_safetensors(src)
    cfg = json.loads(meta.get("config", "{}"))
    if cfg.get("model") != "llama":
        sys.exit("%s: model is %r, expected llama" % (src, cfg.get("model")))
    if not cfg.get("tie_embeddings", 1) or "head.weight" in t:
        sys.exit("%s: an untied head; this converter writes llama2.c's shared classifier only" % src)
    dim, n_layers, n_heads = cfg["d_model"], cfg["n_layer"], cfg["n_head"]
    vocab, seq_len, head_size = cfg["vocab_size"], cfg["max_seq_len"], dim // cfg["n_head"]
    emb_shape, emb = t["word_emb.emb.weight"]
    if emb_shape != [vocab, dim]:
        sys.exit("%s: embedding %s, expected [%d, %d] (a padded vocabulary?)" % (src, emb_shape, vocab, dim))
    hidden = t["backbone.layers.0.mlp.w1.weight"][0][0]
    L = "backbone.layers.%d."

    def per_layer(name, fix=None):
        out = array.array("f")
        for layer in range(n_layers):
            w = t[(L % layer) + name][1]
            out.extend(fix(w) if fix else w)
        return out

    rope = lambda w: rope_rows(w, dim, head_size)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "model.bin"), "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, n_layers, n_heads, n_heads, vocab, seq_len))
        parts = [emb, per_layer("norm.weight"), per_layer("mixer.wq.weight", rope),
                 per_layer("mixer.wk.weight", rope), per_layer("mixer.wv.weight"),
                 per_layer("mixer.out_proj.weight"), per_layer("norm2.weight"), per_layer("mlp.w1.weight"),
                 per_layer("mlp.fc2.weight"), per_layer("mlp.w3.weight"), t["backbone.norm_f.weight"][1],
                 array.array("f", bytes(4 * seq_len * head_size))]  # the two unused RoPE tables
        for p in parts:
            if sys.byteorder != "little":
                p = array.array("f", p)
                p.byteswap()
            f.write(p.tobytes())
    toks, merges = token_strings(vocab)
    with open(os.path.join(outdir, "tok.bpe"), "w") as f:
        f.write("implicit-bpe\nversion 1\nvocab %d\npretokenize none\neos -1\nmerges %d\n" % (vocab, len(merges)))
        for a, c in merges:
            f.write("%d %d\n" % (a, c))
    with open(os.path.join(outdir, "tokenizer.bin"), "wb") as f:
        f.write(struct.pack("<i", max(len(s) for s in toks)))
        for i, s in enumerate(toks):
            f.write(struct.pack("<fi", -float(i), len(s)) + s)
    print("wrote %s: dim %d, hidden %d, %d layers, %d heads, vocab %d, seq_len %d"
          % (os.path.join(outdir, "model.bin"), dim, hidden, n_layers, n_heads, vocab, seq_len))


if __name__ == "__main__":
    main()
