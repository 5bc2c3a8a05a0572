"""Reference vectors for the explicit Llama LM (tests/ref/llama.safetensors).

What: an independent plain-PyTorch implementation of spec §1.1, §1.3, §1.5, §1.6: embedding -> n_layer
blocks [x + attn(RMSNorm(x)); x + SwiGLU(RMSNorm2(x))] -> norm_f -> tied head. Attention: no biases, no
GQA, RoPE theta 500000 in the rotate-half (NeoX) layout on q and k, causal softmax with scale
1/sqrt(d_head). SwiGLU: fc2(silu(w1 x) * (w3 x)) with hidden h = floor(2*d_inner/3).
Init per §1.8 (Linear default U(+-1/sqrt(fan_in)), out_proj and fc2 divided by sqrt(2*n_layer),
embedding N(0, 0.02)), then the norm weights are perturbed so their gradients are non-trivial.
Self-checks (asserts, rerun on every regeneration):
  * RoPE equals the complex-number rotation of the pairs (x_i, x_{i+d/2}) by angle p*inv_freq_i;
  * incremental decoding with a KV cache (post-RoPE keys, values) equals the full causal pass;
  * torch.autograd.gradcheck (float64) of one block at a tiny size.
Out of scope: implicit models (gen_implicit.py reuses attention / attention_step with the optional
injection `u`, always None here), dropout, vocab padding.

Run: /usr/bin/python3 tests/ref/gen_llama.py   (or tests/ref/gen_all.sh)
"""
import math
import os

import torch
import torch.nn.functional as F

import common as cm

HERE = cm.HERE
LAYER_KEYS = ("norm.weight", "mixer.wq.weight", "mixer.wk.weight", "mixer.wv.weight", "mixer.out_proj.weight",
              "norm2.weight", "mlp.w1.weight", "mlp.w3.weight", "mlp.fc2.weight")


def hidden(c):
    """SwiGLU width of spec §1.6 (multiple_of 1)."""
    return (2 * c["d_inner"]) // 3


def init_params(c):
    V, D, L = c["vocab"], c["d_model"], c["n_layer"]
    h = hidden(c)
    res = 1.0 / math.sqrt(2 * L)          # GPT-2 residual rescale for out_proj / fc2 (n_res = 2)
    p = {"word_emb.emb.weight": torch.randn(V, D) * 0.02}
    for i in range(L):
        pre = f"backbone.layers.{i}."
        p[pre + "norm.weight"] = cm.perturb_ones(D)
        for k in ("wq", "wk", "wv"):
            p[pre + f"mixer.{k}.weight"] = cm.uniform_((D, D), 1 / math.sqrt(D))
        p[pre + "mixer.out_proj.weight"] = cm.uniform_((D, D), 1 / math.sqrt(D)) * res
        p[pre + "norm2.weight"] = cm.perturb_ones(D)
        p[pre + "mlp.w1.weight"] = cm.uniform_((h, D), 1 / math.sqrt(D))
        p[pre + "mlp.w3.weight"] = cm.uniform_((h, D), 1 / math.sqrt(D))
        p[pre + "mlp.fc2.weight"] = cm.uniform_((D, h), 1 / math.sqrt(h)) * res
    p["backbone.norm_f.weight"] = cm.perturb_ones(D)
    return p


def layer(p, i):
    pre = f"backbone.layers.{i}."
    return {k: p[pre + k] for k in LAYER_KEYS}


def rope_angles(pos, dh, theta, dtype):
    """pos (T,) integer positions -> angle table (T, dh): [p*inv_freq, p*inv_freq] (half repeated)."""
    inv = theta ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)         # i = 0..dh/2-1: theta^(-2i/dh)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    return torch.cat([ang, ang], dim=-1).to(dtype)


def rope(x, ang):
    """rot(x) = x*cos + rotate_half(x)*sin, rotate_half([x1, x2]) = [-x2, x1]; x (..., T, dh), ang (T, dh)."""
    half = x.shape[-1] // 2
    rh = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * ang.cos() + rh * ang.sin()


def qkv(w, xn, u=None):
    """q, k, v projections (pre-RoPE), each (..., D). u (..., 3D) | None: implicit injection (spec §2.1),
    split into equal q | k | v thirds in that order and added before RoPE."""
    q, k, v = (xn @ w[f"mixer.{n}.weight"].t() for n in ("wq", "wk", "wv"))
    if u is not None:
        uq, uk, uv = torch.chunk(u, 3, dim=-1)
        q, k, v = q + uq, k + uk, v + uv
    return q, k, v


def attention(w, xn, c, acts=None, u=None):
    """Causal multi-head attention with RoPE. xn (B,T,D) normalised, u (B,T,3D) | None -> (B,T,D)."""
    Bsz, T, D = xn.shape
    nh = c["n_head"]
    dh = D // nh
    heads = lambda t: t.reshape(Bsz, T, nh, dh).transpose(1, 2)  # noqa: E731  (B,nh,T,dh)
    ang = rope_angles(torch.arange(T), dh, c["rope_theta"], xn.dtype)
    q, k, v = qkv(w, xn, u)
    q, k, v = rope(heads(q), ang), rope(heads(k), ang), heads(v)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    att = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    o = (att @ v).transpose(1, 2).reshape(Bsz, T, D)
    if acts is not None:
        acts.update({"q_rope": q, "k_rope": k, "v": v, "att": att})
    return o @ w["mixer.out_proj.weight"].t()


def swiglu(w, xn):
    return (F.silu(xn @ w["mlp.w1.weight"].t()) * (xn @ w["mlp.w3.weight"].t())) @ w["mlp.fc2.weight"].t()


def model_fwd(p, ids, c, acts=None):
    emb = p["word_emb.emb.weight"]
    h = emb[ids]
    for i in range(c["n_layer"]):
        w = layer(p, i)
        a0 = {} if (acts is not None and i == 0) else None
        m = attention(w, cm.rmsnorm(h, w["norm.weight"]), c, a0)
        h = h + m
        mid = h
        f = swiglu(w, cm.rmsnorm(h, w["norm2.weight"]))
        h = h + f
        if a0 is not None:
            for k, v in a0.items():
                acts["layer0." + k] = v
            acts.update({"layer0.mixer_out": m, "layer0.mid": mid, "layer0.mlp_out": f, "layer0.out": h})
    return cm.rmsnorm(h, p["backbone.norm_f.weight"]) @ emb.t()


def attention_step(w, xn, ang, kc, vc, c, u=None):
    """One query token against a KV cache. xn (B,D) normalised, ang (dh) RoPE angles of this position,
    kc / vc: lists of cached post-RoPE keys / values (B,nh,dh) of the earlier tokens (read only),
    u (B,3D) | None. The token attends to [cache ; itself]. Returns the output after out_proj (B,D)
    and this token's post-RoPE key and value (B,nh,dh); the caller decides whether to append them."""
    Bsz, D = xn.shape
    nh = c["n_head"]
    dh = D // nh
    q, k, v = (t.reshape(Bsz, nh, dh) for t in qkv(w, xn, u))
    q, k = rope(q, ang), rope(k, ang)
    K = torch.stack(list(kc) + [k], dim=2)                                   # (B,nh,t+1,dh)
    Vv = torch.stack(list(vc) + [v], dim=2)
    s = torch.einsum("bhd,bhsd->bhs", q, K) / math.sqrt(dh)
    o = torch.einsum("bhs,bhsd->bhd", torch.softmax(s, dim=-1), Vv).reshape(Bsz, D)
    return o @ w["mixer.out_proj.weight"].t(), k, v


def model_decode(p, ids, c):
    """Token-by-token decoding with a per-layer KV cache of post-RoPE keys and values: logits (B,T,V).
    Shares only rmsnorm/rope/qkv/swiglu with model_fwd; the attention is rewritten for one query."""
    emb = p["word_emb.emb.weight"]
    T = ids.shape[1]
    dh = c["d_model"] // c["n_head"]
    kc = [[] for _ in range(c["n_layer"])]
    vc = [[] for _ in range(c["n_layer"])]
    outs = []
    for t in range(T):
        h = emb[ids[:, t]]                                                      # (B,D)
        ang = rope_angles(torch.tensor([t]), dh, c["rope_theta"], h.dtype)[0]  # (dh)
        for i in range(c["n_layer"]):
            w = layer(p, i)
            o, k, v = attention_step(w, cm.rmsnorm(h, w["norm.weight"]), ang, kc[i], vc[i], c)
            kc[i].append(k)
            vc[i].append(v)
            h = h + o
            h = h + swiglu(w, cm.rmsnorm(h, w["norm2.weight"]))
        outs.append(cm.rmsnorm(h, p["backbone.norm_f.weight"]) @ emb.t())
    return torch.stack(outs, 1)


def check_rope(c):
    """rotate-half RoPE == complex rotation of (x_i, x_{i+dh/2}) by p * theta^(-2i/dh)."""
    dh, T = c["d_model"] // c["n_head"], 17
    x = torch.randn(3, T, dh, dtype=torch.float64)
    got = rope(x, rope_angles(torch.arange(T), dh, c["rope_theta"], torch.float64))
    i = torch.arange(dh // 2, dtype=torch.float64)
    freq = torch.tensor(c["rope_theta"], dtype=torch.float64) ** (-2 * i / dh)
    zc = torch.complex(x[..., :dh // 2], x[..., dh // 2:]) * \
        torch.polar(torch.ones(T, dh // 2, dtype=torch.float64), torch.arange(T)[:, None] * freq)
    want = torch.cat([zc.real, zc.imag], dim=-1)
    assert torch.allclose(got, want, atol=1e-12), (got - want).abs().max()
    print("rope: rotate-half == complex rotation")


def check_decode(p, ids, c):
    for pp, tol in (({k: v.double() for k, v in p.items()}, 1e-10), (p, 2e-5)):
        full = model_fwd(pp, ids, c)
        inc = model_decode(pp, ids, c)
        e = cm.rel_err(inc, full)
        assert e < tol, ("kv-cache decode vs full", e)
        print(f"llama {full.dtype}: KV-cache decode vs full pass rel err {e:.2e}")


def check_bench(p, c):
    """bench/torch_bench.py's llama_block == this file's block (so the bench times the same math)."""
    bench = cm.load_bench()
    w = {k: v.double() for k, v in layer(p, 0).items()}
    bp = {"norm": w["norm.weight"], "norm2": w["norm2.weight"], "wq": w["mixer.wq.weight"],
          "wk": w["mixer.wk.weight"], "wv": w["mixer.wv.weight"], "wo": w["mixer.out_proj.weight"],
          "w1": w["mlp.w1.weight"], "w3": w["mlp.w3.weight"], "fc2": w["mlp.fc2.weight"],
          "dims": (c["d_model"], c["n_head"], hidden(c))}
    T = 9
    x = torch.randn(2, T, c["d_model"], dtype=torch.float64)
    h = x + attention(w, cm.rmsnorm(x, w["norm.weight"]), c)
    want = h + swiglu(w, cm.rmsnorm(h, w["norm2.weight"]))
    cos, sin = bench.rope_tables(T, c["d_model"] // c["n_head"], c["rope_theta"])
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    got = bench.llama_block(bp, x, cos.double(), sin.double(), mask)
    e = cm.rel_err(got, want)
    assert e < 1e-6, ("bench llama_block", e)       # bench's RoPE tables are float32
    print(f"llama: bench/torch_bench.py llama_block vs reference block rel err {e:.2e}")


def check_gradcheck():
    c = cm.config_base(vocab=8, d_model=8, n_layer=1, n_head=2, d_inner=12, rope_theta=500000.0)
    torch.manual_seed(5)
    w = {k: v.double().requires_grad_(True) for k, v in layer(init_params(c), 0).items()}
    names = list(w.keys())
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)

    def block(x_, *ws):
        ww = dict(zip(names, ws))
        x_ = x_ + attention(ww, cm.rmsnorm(x_, ww["norm.weight"]), c)
        return x_ + swiglu(ww, cm.rmsnorm(x_, ww["norm2.weight"]))
    assert torch.autograd.gradcheck(block, (x, *[w[k] for k in names]), eps=1e-6, atol=1e-7)
    print("gradcheck: llama block ok (float64)")


def main():
    cm.setup_torch()
    seed = 2024
    c = cm.config_base(vocab=32, d_model=32, n_layer=2, n_head=4, d_inner=128, rope_theta=500000.0,
                       batch=2, seq_len=12, seed=seed)
    c.update(d_head=8, mlp_hidden=hidden(c))
    check_gradcheck()
    check_rope(c)
    torch.manual_seed(seed)
    p = init_params(c)
    ids, targets = cm.make_batch(c["batch"], c["seq_len"], c["vocab"])
    check_decode(p, ids, c)
    check_bench(p, c)

    cm.run_reference(os.path.join(HERE, "llama.safetensors"), "llama", c, p, ids, targets, model_fwd, "llama")


if __name__ == "__main__":
    main()
