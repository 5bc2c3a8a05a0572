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
Out of scope: implicit models, injection, dropout, vocab padding.

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


def attention(w, xn, c, acts=None):
    """Causal multi-head attention with RoPE. xn (B,T,D) normalised -> (B,T,D)."""
    Bsz, T, D = xn.shape
    nh = c["n_head"]
    dh = D // nh
    heads = lambda t: t.reshape(Bsz, T, nh, dh).transpose(1, 2)  # noqa: E731  (B,nh,T,dh)
    ang = rope_angles(torch.arange(T), dh, c["rope_theta"], xn.dtype)
    q = rope(heads(xn @ w["mixer.wq.weight"].t()), ang)
    k = rope(heads(xn @ w["mixer.wk.weight"].t()), ang)
    v = heads(xn @ w["mixer.wv.weight"].t())
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


def model_decode(p, ids, c):
    """Token-by-token decoding with a per-layer KV cache of post-RoPE keys and values: logits (B,T,V).
    Shares only rmsnorm/rope/swiglu with model_fwd; the attention is rewritten for one query."""
    emb = p["word_emb.emb.weight"]
    Bsz, T = ids.shape
    D, nh = c["d_model"], c["n_head"]
    dh = D // nh
    kc = [[] for _ in range(c["n_layer"])]
    vc = [[] for _ in range(c["n_layer"])]
    outs = []
    for t in range(T):
        h = emb[ids[:, t]]                                                      # (B,D)
        ang = rope_angles(torch.tensor([t]), dh, c["rope_theta"], h.dtype)[0]  # (dh)
        for i in range(c["n_layer"]):
            w = layer(p, i)
            xn = cm.rmsnorm(h, w["norm.weight"])
            q = rope((xn @ w["mixer.wq.weight"].t()).reshape(Bsz, nh, dh), ang)
            kc[i].append(rope((xn @ w["mixer.wk.weight"].t()).reshape(Bsz, nh, dh), ang))
            vc[i].append((xn @ w["mixer.wv.weight"].t()).reshape(Bsz, nh, dh))
            K = torch.stack(kc[i], dim=2)                                       # (B,nh,t+1,dh)
            Vv = torch.stack(vc[i], dim=2)
            s = torch.einsum("bhd,bhsd->bhs", q, K) / math.sqrt(dh)
            o = torch.einsum("bhs,bhsd->bhd", torch.softmax(s, dim=-1), Vv).reshape(Bsz, D)
            h = h + o @ w["mixer.out_proj.weight"].t()
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

    def loss_fn(pp, acts=None):
        logits = model_fwd(pp, ids, c, acts)
        return logits, cm.masked_ce(logits, targets)
    # Weights stored in float32; references computed in float64 from them and rounded once on write.
    p64 = {k: v.double() for k, v in p.items()}
    logits, loss, grads, acts = cm.loss_and_grads(p64, loss_fn)
    losses, norms = cm.adamw_trace(p64, lambda pp: loss_fn(pp)[1])
    cm.float32_drift(p64, loss_fn, logits, grads, losses, "llama")
    cm.write_ref(os.path.join(HERE, "llama.safetensors"), "llama", c, p, ids, targets, logits, loss, grads,
                 losses, norms, acts)


if __name__ == "__main__":
    main()
