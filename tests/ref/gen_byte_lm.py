"""A small byte-level language model trained by PyTorch code, as a user would bring it here
(tests/test_byte_lm.sh, docs/interop.md "A model trained in PyTorch").

What: an explicit Llama (spec §1.1, §1.3, §1.5, §1.6: the independent forward of gen_llama.py) with
vocabulary 256, one id per byte (our `byte` tokenizer), trained here with torch.optim.AdamW on
interop/byte_text.txt (a paragraph about this engine) until it has learned the text, then written
the two ways PyTorch code writes it:
  byte_llama.safetensors   the reference's tensor names (spec §14) with "format": "pt" and the
                           reference's nested config (spec §11: backbone_type, backbone_config) as
                           JSON text in __metadata__["config"]
  hf_byte_llama/           the same weights as transformers' LlamaForCausalLM folder: config.json +
                           model.safetensors ("format": "pt", transformers' names, the tied head not
                           stored, as save_pretrained does)
and PyTorch's own outputs of that model, computed in float64 from the stored float32 weights, in
byte_llama_expected.txt (one `key value` per line, read by tests/test_byte_lm.sh):
  * the loss of `implicit eval --task lm`: the validation split of `implicit data prepare
    byte_text.txt --val_frac VAL_FRAC` (its last n - floor(n (1 - VAL_FRAC)) bytes) cut into windows
    of EVAL_LEN inputs, each followed by its next byte; mean cross-entropy over all targets;
  * the greedy continuation of PROMPT (argmax of the full causal forward, GEN_TOKENS steps): the
    token ids, the text, and at every step the top-1 / top-2 logit margin and max |logit|.
Error bounds, written beside the outputs so the test does not pick a tolerance from one machine:
  a float32 evaluation of this network is K chained accumulations of length at most n (per layer:
  q/k/v, q.k, att.v, out_proj, gate/up, down; then norm_f and the head; n = max(D, SwiGLU width,
  longest sequence)), so its logits may move by up to LOGIT_REL = K n u times max |logit|
  (u = 2^-24, first-order worst case). Hence
    greedy: a token is fixed while its margin exceeds 2 LOGIT_REL max|logit| (the top two can each
            move by that much); the generator asserts every margin is above MARGIN_FACTOR times that;
    loss:   |loss - loss64| <= 2 LOGIT_REL zmax (cross-entropy = logsumexp - picked logit, each
            1-Lipschitz in the largest logit error) + V u zmax (the float32 logsumexp of V terms).
  The float32 PyTorch forward (another summation order) is asserted to land well inside both.

Run: /usr/bin/python3 tests/ref/gen_byte_lm.py   (from gen_all.sh; about a minute on one core)
"""
import json
import math
import os

import torch

import common as cm
import gen_interop as gx
import gen_llama as gl

HERE = cm.HERE
OUT = os.path.join(HERE, "interop")
TEXT = os.path.join(OUT, "byte_text.txt")

CFG = {"vocab": 256, "d_model": 48, "n_layer": 2, "n_head": 4, "d_inner": 192, "rope_theta": 10000.0,
       "norm_eps": cm.NORM_EPS}
TRAIN = {"seed": 13, "steps": 1500, "batch": 8, "seq_len": 128, "lr": 3e-3, "lr_min": 3e-4, "betas": (0.9, 0.95),
         "weight_decay": 0.0}
VAL_FRAC = 0.9
EVAL_LEN = 64
PROMPT = "The same weights can run as a"
GEN_TOKENS = 64
MARGIN_FACTOR = 10.0
U32 = 2.0 ** -24
ACCUM_PER_LAYER = 6   # q/k/v, q.k, att.v, out_proj, gate/up, down


def train(text):
    """AdamW on random windows of the text, cosine learning rate; float32, one thread."""
    torch.manual_seed(TRAIN["seed"])
    p = {k: v.clone().requires_grad_(True) for k, v in gl.init_params(CFG).items()}
    data = torch.tensor(list(text), dtype=torch.long)
    opt = torch.optim.AdamW(list(p.values()), lr=TRAIN["lr"], betas=TRAIN["betas"],
                            weight_decay=TRAIN["weight_decay"])
    T, B, S = TRAIN["seq_len"], TRAIN["batch"], TRAIN["steps"]
    for step in range(S):
        lr = TRAIN["lr_min"] + 0.5 * (TRAIN["lr"] - TRAIN["lr_min"]) * (1 + math.cos(math.pi * step / S))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - T - 1, (B,))
        x = torch.stack([data[s:s + T] for s in starts])
        y = torch.stack([data[s + 1:s + T + 1] for s in starts])
        loss = torch.nn.functional.cross_entropy(gl.model_fwd(p, x, CFG).reshape(-1, CFG["vocab"]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        if step % 250 == 0 or step == S - 1:
            print("  step %4d  lr %.2e  train loss %.4f" % (step, lr, loss.item()))
    return {k: v.detach().clone() for k, v in p.items()}


def eval_windows(text):
    """The windows `implicit eval --task lm --eval_lens EVAL_LEN` scores on the prepared file."""
    n = len(text)
    val = text[int(n * (1 - VAL_FRAC)):]
    w = (len(val) - 1) // EVAL_LEN
    seq = torch.tensor(list(val[:w * EVAL_LEN + 1]), dtype=torch.long)
    ids = torch.stack([seq[i * EVAL_LEN:(i + 1) * EVAL_LEN] for i in range(w)])
    tg = torch.stack([seq[i * EVAL_LEN + 1:(i + 1) * EVAL_LEN + 1] for i in range(w)])
    return ids, tg


def greedy(p, prompt_ids, n):
    """Argmax continuation by full causal forwards; per step (id, margin top1-top2, max |logit|)."""
    ids = list(prompt_ids)
    steps = []
    for _ in range(n):
        z = gl.model_fwd(p, torch.tensor([ids]), CFG)[0, -1]
        top = torch.topk(z, 2).values
        nxt = int(torch.argmax(z))
        steps.append((nxt, (top[0] - top[1]).item(), z.abs().max().item()))
        ids.append(nxt)
    return steps


def reference_config():
    c = CFG
    return {"backbone_type": "explicit", "vocab_size": c["vocab"], "pad_vocab": False, "dropout": 0.0,
            "tie_embeddings": True,
            "backbone_config": {"d_model": c["d_model"], "n_layer": c["n_layer"], "d_inner": c["d_inner"],
                                "block_type": "transformer", "mlp_type": "llama_mlp", "pre_norm": True,
                                "rms_norm": True, "norm_epsilon": c["norm_eps"],
                                "block_cfg": {"n_head": c["n_head"], "rope_theta": c["rope_theta"],
                                              "max_seq_len": 512}}}


def hf_config():
    c = CFG
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
            "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "head_dim": c["d_model"] // c["n_head"],
            "hidden_act": "silu", "hidden_size": c["d_model"], "initializer_range": 0.02,
            "intermediate_size": gl.hidden(c), "max_position_embeddings": 512, "mlp_bias": False,
            "num_attention_heads": c["n_head"], "num_hidden_layers": c["n_layer"],
            "num_key_value_heads": c["n_head"], "pretraining_tp": 1, "rms_norm_eps": c["norm_eps"],
            "rope_scaling": None, "rope_theta": c["rope_theta"], "tie_word_embeddings": True,
            "torch_dtype": "float32", "transformers_version": "4.46.0", "use_cache": True, "vocab_size": c["vocab"]}


def main():
    cm.setup_torch()
    with open(TEXT, "rb") as f:
        text = f.read()
    assert PROMPT.encode() in text, "the prompt is a piece of the text"
    p32 = train(text)
    p64 = {k: v.double() for k, v in p32.items()}
    h = gl.hidden(CFG)
    n_gen = len(PROMPT) + GEN_TOKENS
    n_acc = max(CFG["d_model"], h, EVAL_LEN, n_gen)
    stages = ACCUM_PER_LAYER * CFG["n_layer"] + 2
    logit_rel = stages * n_acc * U32

    with torch.no_grad():
        ids, tg = eval_windows(text)
        z64 = gl.model_fwd(p64, ids, CFG)
        loss64 = cm.masked_ce(z64, tg).item()
        zmax = z64.abs().max().item()
        loss_tol = 2 * logit_rel * zmax + CFG["vocab"] * U32 * zmax
        z32 = gl.model_fwd(p32, ids, CFG)
        loss32 = cm.masked_ce(z32, tg).item()
        drift = (z32.double() - z64).abs().max().item()
        assert drift < 0.1 * logit_rel * zmax, (drift, logit_rel * zmax)
        assert abs(loss32 - loss64) < 0.1 * loss_tol, (loss32, loss64, loss_tol)
        acc = (z64.argmax(-1) == tg).double().mean().item()
        print("eval: %d windows of %d, loss %.6f (ppl %.4f, token accuracy %.3f), max |logit| %.2f, "
              "float32 torch: logits off by %.1e, loss by %.1e; bounds %.1e, %.1e"
              % (ids.shape[0], EVAL_LEN, loss64, math.exp(loss64), acc, zmax, drift, abs(loss32 - loss64),
                 logit_rel * zmax, loss_tol))

        prompt_ids = list(PROMPT.encode())
        steps = greedy(p64, prompt_ids, GEN_TOKENS)
        gen = bytes(s[0] for s in steps)
        worst = min(s[1] / (2 * logit_rel * s[2]) for s in steps)
        print("greedy: %r -> %r; smallest margin / bound %.1f" % (PROMPT, gen.decode("latin-1"), worst))
        assert worst > MARGIN_FACTOR, "a greedy step is too close to a tie for an exact comparison"
        assert all(32 <= b < 127 or b == 10 for b in gen), "the continuation is printable ASCII"
        s32 = greedy(p32, prompt_ids, GEN_TOKENS)
        assert [s[0] for s in s32] == [s[0] for s in steps], "float32 torch takes the same greedy path"

    cfg_text = json.dumps(reference_config())
    cm.write_verified(os.path.join(OUT, "byte_llama.safetensors"), p32, {"format": "pt", "config": cfg_text})
    d = os.path.join(OUT, "hf_byte_llama")
    os.makedirs(d, exist_ok=True)
    gx.dump(os.path.join(d, "config.json"), hf_config())
    cm.write_verified(os.path.join(d, "model.safetensors"), {gx.hf_llama_name(k): v for k, v in p32.items()},
                      {"format": "pt"})

    lines = [
        "# PyTorch's outputs for byte_llama.safetensors and hf_byte_llama/ (tests/ref/gen_byte_lm.py,",
        "# torch %s, float64 from the stored float32 weights); read by tests/test_byte_lm.sh" % torch.__version__,
        "val_frac %g" % VAL_FRAC,
        "eval_len %d" % EVAL_LEN,
        "eval_windows %d" % ids.shape[0],
        "eval_loss %.10f" % loss64,
        "eval_ppl %.10f" % math.exp(loss64),
        "eval_logit_max %.6f" % zmax,
        "eval_loss_tol %.3e" % loss_tol,
        "logit_rel_bound %.3e" % logit_rel,
        "prompt %s" % PROMPT,
        "gen_tokens %d" % GEN_TOKENS,
        "gen_text %s" % gen.decode("ascii").replace("\\", "\\\\").replace("\n", "\\n"),
        "# step id margin max_abs_logit (a step's token is fixed while margin > 2 logit_rel_bound max_abs_logit)",
    ]
    lines += ["step %d %d %.6f %.6f" % (i, s[0], s[1], s[2]) for i, s in enumerate(steps)]
    with open(os.path.join(OUT, "byte_llama_expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote byte_llama.safetensors, hf_byte_llama/, byte_llama_expected.txt")
    read_export(p32, ids, z64, prompt_ids, steps)


def read_export(p32, ids, z64, prompt_ids, steps):
    """The folder `implicit export interop/byte_llama.safetensors interop/export_hf_byte_llama
    --layout hf` wrote, read as transformers code would (gen_interop's own name table and config
    reader): it must hold the trained weights, and its logits and greedy path are the source's."""
    d = os.path.join(OUT, "export_hf_byte_llama")
    if not os.path.isdir(d):
        print("skip the export: run `implicit export tests/ref/interop/byte_llama.safetensors "
              "tests/ref/interop/export_hf_byte_llama --layout hf`, then this script again")
        return
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t, meta = cm.read_safetensors(os.path.join(d, "model.safetensors"))
    assert meta == {"format": "pt"}, meta
    model, p, c = gx.from_hf(cfg, t)
    assert model == "llama" and sorted(p) == sorted(p32), "the export holds this model's tensors"
    for k, v in p.items():
        assert torch.equal(v, p32[k]), "%s: the export is of other weights (export again)" % k
    assert {k: c[k] for k in ("vocab", "d_model", "n_layer", "n_head", "d_inner")} == \
        {k: CFG[k] for k in ("vocab", "d_model", "n_layer", "n_head", "d_inner")} and c["rope_theta"] == CFG["rope_theta"]
    p64 = {k: v.double() for k, v in p.items()}
    with torch.no_grad():
        diff = (gl.model_fwd(p64, ids, c) - z64).abs().max().item()
        ids_e = [s[0] for s in greedy(p64, prompt_ids, GEN_TOKENS)]
    assert diff <= 1e-12 and ids_e == [s[0] for s in steps], (diff, ids_e)
    print("export_hf_byte_llama/: read back, logits of the source model (max |diff| %.1e), same greedy text" % diff)


if __name__ == "__main__":
    main()
