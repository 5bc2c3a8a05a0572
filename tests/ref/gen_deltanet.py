"""Reference vectors for the DeltaNet-family LMs (tests/ref/deltanet.safetensors).

What: an independent plain-PyTorch implementation of spec fp-rnn §5.4 / §5.5 (FLA's GatedDeltaNet /
GatedDeltaProduct / DeltaNet LMs), written from the spec, no FLA: embedding -> n_layer pre-norm blocks
[h += mixer(RMSNorm(h)); h += SwiGLU(RMSNorm2(h))] -> norm_f -> untied lm_head. The mixer:
    zq, zk, zv = x Wq^T, x Wk^T, x Wv^T    (k, v rows ordered (n, h, d): nh Householder sets)
    q, k, v = silu(causal depthwise conv(z*))   (W taps, no bias; silu(z*) without short conv)
    q = l2norm(q) / sqrt(K), k = l2norm(k)       l2norm(x) = x / sqrt(|x|^2 + 1e-6)  (FLA)
    beta = c sigmoid(x Wb^T), c = 2 (allow_neg_eigval) or 1;   gated: g = -exp(A_log) softplus(x Wa^T + dt_bias)
    S = 0; per token: S *= exp(g); for j < nh: S += beta_j k_j (v_j - S^T k_j)^T; o = S^T q
    out = o_proj(RMSNorm_head(o) * silu(x Wg^T))  (gated)  |  o_proj(RMSNorm_head(o))  (deltanet)
Two models in one file, their tensors prefixed:
    "gdn."  gated_deltanet, n_householder 1, short conv (d_conv 4), allow_neg_eigval 0 (beta = sigmoid)
    "dp."   deltanet (no gates), n_householder 2 (DeltaProduct), no short conv, allow_neg_eigval 1
both d_model 16, 2 heads, key dim 4, value dim 8, 2 layers, d_inner 48 (SwiGLU hidden 32), vocab 11,
B 2, T 7, norm eps 1e-6. Per prefix: the parameters under the C model's names, input.ids,
input.targets (3 ignored positions per row), out.logits, out.loss, grad.<param>, the 10-step AdamW
trace (adamw.losses, adamw.grad_norms; settings of common.ADAMW), and metadata <prefix>.model,
<prefix>.config (our config key names).
Init: spec-like but larger so that every gradient is non-trivial: Linear U(+-1/sqrt(fan_in)), conv
U(+-0.5), norms 1 + 0.1 N(0,1), A_log = ln U(1, 16), dt_bias as Mamba, embedding and lm_head N(0, 0.5).
Self-checks (asserts, rerun on every regeneration): the delta rule equals its matrix form
(I - beta k k^T) S + beta k v^T; the conv equals a shifted-sum loop; the token-by-token mixer (conv
windows + S) equals the parallel one; torch.autograd.gradcheck (float64) of the recurrence.
Out of scope: dropout, vocab padding, num_v_heads != num_heads.

Run: /usr/bin/python3 tests/ref/gen_deltanet.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

import common as cm

HERE = cm.HERE
L2_EPS = 1e-6


def dims(c):
    H, K, nh = c["n_head"], c["delta_head_dim"], c["n_householder"]
    V = K * c["expand_v"]
    return H, K, V, nh


def init_params(c):
    D, L, Vocab, hm = c["d_model"], c["n_layer"], c["vocab"], c["mlp_hidden"]
    H, K, V, nh = dims(c)
    gated, W = c["model"] == "gated_deltanet", c["d_conv"] if c["short_conv"] else 0
    u = lambda rows, fan: cm.uniform_((rows, fan), 1 / math.sqrt(fan))
    p = {"word_emb.emb.weight": torch.randn(Vocab, D) * 0.5}
    for i in range(L):
        pre = f"backbone.layers.{i}."
        p[pre + "norm.weight"] = cm.perturb_ones(D)
        p[pre + "mixer.q_proj.weight"] = u(H * K, D)
        p[pre + "mixer.k_proj.weight"] = u(nh * H * K, D)
        p[pre + "mixer.v_proj.weight"] = u(nh * H * V, D)
        p[pre + "mixer.b_proj.weight"] = u(nh * H, D)
        if gated:
            p[pre + "mixer.a_proj.weight"] = u(H, D)
            p[pre + "mixer.A_log"] = torch.log(torch.rand(H) * 15.0 + 1.0)
            dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
            p[pre + "mixer.dt_bias"] = dt + torch.log(-torch.expm1(-dt))
        if W:
            p[pre + "mixer.q_conv1d.weight"] = cm.uniform_((H * K, 1, W), 0.5)
            p[pre + "mixer.k_conv1d.weight"] = cm.uniform_((nh * H * K, 1, W), 0.5)
            p[pre + "mixer.v_conv1d.weight"] = cm.uniform_((nh * H * V, 1, W), 0.5)
        if gated:
            p[pre + "mixer.g_proj.weight"] = u(H * V, D)
        p[pre + "mixer.o_norm.weight"] = cm.perturb_ones(V)
        p[pre + "mixer.o_proj.weight"] = u(D, H * V) / math.sqrt(2 * L)
        p[pre + "norm2.weight"] = cm.perturb_ones(D)
        p[pre + "mlp.w1.weight"] = u(hm, D)
        p[pre + "mlp.w3.weight"] = u(hm, D)
        p[pre + "mlp.fc2.weight"] = u(D, hm) / math.sqrt(2 * L)
    p["backbone.norm_f.weight"] = cm.perturb_ones(D)
    p["lm_head.weight"] = torch.randn(Vocab, D) * 0.5
    return p


def l2norm(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def short_conv(z, w):
    """Depthwise causal conv without bias: z (B,T,C), w (C,1,W) -> (B,T,C), zeros before t = 0."""
    W = w.shape[-1]
    zp = F.pad(z.transpose(1, 2), (W - 1, 0))
    return F.conv1d(zp, w, groups=z.shape[-1]).transpose(1, 2)


def delta_rule(q, k, v, beta, g):
    """q (B,T,H,K), k (B,T,n,H,K), v (B,T,n,H,V), beta (B,T,n,H), g (B,T,H) | None -> o (B,T,H,V), S_T."""
    Bsz, T, H, K = q.shape
    nh, V = k.shape[2], v.shape[-1]
    S = q.new_zeros(Bsz, H, K, V)
    outs = []
    for t in range(T):
        if g is not None:
            S = S * torch.exp(g[:, t])[..., None, None]
        for j in range(nh):
            kj, vj, bj = k[:, t, j], v[:, t, j], beta[:, t, j]
            u = torch.einsum("bhkv,bhk->bhv", S, kj)
            S = S + bj[..., None, None] * kj[..., :, None] * (vj - u)[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outs, 1), S


def mixer_inputs(w, x, c):
    """Everything up to the recurrence: (q, k, v, beta, g) in the kernel layouts."""
    Bsz, T, _ = x.shape
    H, K, V, nh = dims(c)
    zq, zk, zv = x @ w["q_proj.weight"].t(), x @ w["k_proj.weight"].t(), x @ w["v_proj.weight"].t()
    if c["short_conv"]:
        zq, zk, zv = (short_conv(z, w[n + "_conv1d.weight"]) for z, n in ((zq, "q"), (zk, "k"), (zv, "v")))
    q = l2norm(F.silu(zq).reshape(Bsz, T, H, K)) * K ** -0.5
    k = l2norm(F.silu(zk).reshape(Bsz, T, nh, H, K))
    v = F.silu(zv).reshape(Bsz, T, nh, H, V)
    beta = torch.sigmoid(x @ w["b_proj.weight"].t()).reshape(Bsz, T, nh, H) * (2.0 if c["allow_neg_eigval"] else 1.0)
    g = None
    if c["model"] == "gated_deltanet":
        g = -torch.exp(w["A_log"]) * F.softplus(x @ w["a_proj.weight"].t() + w["dt_bias"])
    return q, k, v, beta, g


def mixer_out(w, x, o, c):
    """RMSNorm per head (norm before the gate), output gate, o_proj."""
    Bsz, T, _ = x.shape
    H, K, V, nh = dims(c)
    on = cm.rmsnorm(o, w["o_norm.weight"], c["norm_eps"])
    if c["model"] == "gated_deltanet":
        on = on * F.silu((x @ w["g_proj.weight"].t()).reshape(Bsz, T, H, V))
    return on.reshape(Bsz, T, H * V) @ w["o_proj.weight"].t()


def mixer(w, x, c):
    q, k, v, beta, g = mixer_inputs(w, x, c)
    o, _ = delta_rule(q, k, v, beta, g)
    return mixer_out(w, x, o, c)


def layer_w(p, i):
    pre = f"backbone.layers.{i}.mixer."
    return {k[len(pre):]: v for k, v in p.items() if k.startswith(pre)}


def model_fwd(p, ids, c, acts=None):
    eps = c["norm_eps"]
    h = p["word_emb.emb.weight"][ids]
    for i in range(c["n_layer"]):
        pre = f"backbone.layers.{i}."
        h = h + mixer(layer_w(p, i), cm.rmsnorm(h, p[pre + "norm.weight"], eps), c)
        x2 = cm.rmsnorm(h, p[pre + "norm2.weight"], eps)
        h = h + (F.silu(x2 @ p[pre + "mlp.w1.weight"].t()) * (x2 @ p[pre + "mlp.w3.weight"].t())) @ p[pre + "mlp.fc2.weight"].t()
    return cm.rmsnorm(h, p["backbone.norm_f.weight"], eps) @ p["lm_head.weight"].t()


# ---- self-checks --------------------------------------------------------------------------------

def check_matrix_form(c):
    """The recurrence equals S <- (I - beta k k^T) S + beta k v^T (exp(g) first)."""
    g = torch.Generator().manual_seed(5)
    Bsz, T, H, K, V, nh = 2, 5, 2, 3, 4, 3
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    q, k, v = r(Bsz, T, H, K), l2norm(r(Bsz, T, nh, H, K)), r(Bsz, T, nh, H, V)
    beta, gg = 2 * torch.rand(Bsz, T, nh, H, generator=g, dtype=torch.float64), -torch.rand(Bsz, T, H, generator=g, dtype=torch.float64)
    o, S = delta_rule(q, k, v, beta, gg)
    S2 = torch.zeros(Bsz, H, K, V, dtype=torch.float64)
    eye = torch.eye(K, dtype=torch.float64)
    for t in range(T):
        S2 = S2 * torch.exp(gg[:, t])[..., None, None]
        for j in range(nh):
            kj, bj = k[:, t, j], beta[:, t, j][..., None, None]
            S2 = (eye - bj * kj[..., :, None] * kj[..., None, :]) @ S2 + bj * kj[..., :, None] * v[:, t, j][..., None, :]
        assert torch.allclose(torch.einsum("bhkv,bhk->bhv", S2, q[:, t]), o[:, t], atol=1e-12)
    assert torch.allclose(S, S2, atol=1e-12)
    ok = torch.autograd.gradcheck(lambda *a: delta_rule(*a)[0],
                                  [t_.clone().requires_grad_(True) for t_ in (q, k, v, beta, gg)], eps=1e-6, atol=1e-7)
    assert ok
    zc = r(Bsz, T, 6)
    wc = r(6, 1, 4)
    loop = sum(wc[:, 0, i] * F.pad(zc, (0, 0, 3, 0))[:, i:i + T] for i in range(4))
    assert torch.allclose(short_conv(zc, wc), loop, atol=1e-12)
    print("self-check: delta rule == matrix form, gradcheck, conv == shifted sums: ok")


def check_step(p, ids, c):
    """Token by token (conv windows of the projections + S) equals the parallel mixer of layer 0."""
    pp = {k: v.double() for k, v in p.items()}
    w = layer_w(pp, 0)
    x = cm.rmsnorm(pp["word_emb.emb.weight"][ids], pp["backbone.layers.0.norm.weight"], c["norm_eps"])
    want = mixer(w, x, c)
    Bsz, T, _ = x.shape
    H, K, V, nh = dims(c)
    Wc = c["d_conv"] if c["short_conv"] else 0
    S = torch.zeros(Bsz, H, K, V, dtype=torch.float64)
    win = {n: torch.zeros(Bsz, w[n + "_proj.weight"].shape[0], Wc, dtype=torch.float64) for n in "qkv"}
    for t in range(T):
        xt = x[:, t:t + 1]
        act = {}
        for n in "qkv":
            z = xt[:, 0] @ w[n + "_proj.weight"].t()
            if Wc:
                win[n] = torch.cat([win[n][:, :, 1:], z[:, :, None]], -1)
                z = (win[n] * w[n + "_conv1d.weight"][:, 0]).sum(-1)
            act[n] = F.silu(z)
        q = l2norm(act["q"].reshape(Bsz, H, K)) * K ** -0.5
        k = l2norm(act["k"].reshape(Bsz, nh, H, K))
        v = act["v"].reshape(Bsz, nh, H, V)
        beta = torch.sigmoid(xt[:, 0] @ w["b_proj.weight"].t()).reshape(Bsz, nh, H) * (2.0 if c["allow_neg_eigval"] else 1.0)
        if c["model"] == "gated_deltanet":
            gt = -torch.exp(w["A_log"]) * F.softplus(xt[:, 0] @ w["a_proj.weight"].t() + w["dt_bias"])
            S = S * torch.exp(gt)[..., None, None]
        for j in range(nh):
            u = torch.einsum("bhkv,bhk->bhv", S, k[:, j])
            S = S + beta[:, j][..., None, None] * k[:, j][..., :, None] * (v[:, j] - u)[..., None, :]
        o = torch.einsum("bhkv,bhk->bhv", S, q)[:, None]
        got = mixer_out(w, xt, o, c)
        assert torch.allclose(got[:, 0], want[:, t], atol=1e-12), t
    print(f"self-check {c['model']}: step == parallel mixer: ok")


def config(model, nh, short_conv, neg, seed):
    c = cm.config_base(vocab=11, d_model=16, n_layer=2, n_head=2, d_inner=48, d_conv=4 if short_conv else None,
                       norm_eps=1e-6, batch=2, seq_len=7, seed=seed)
    c.update(model=model, delta_head_dim=4, expand_v=2, n_householder=nh, short_conv=short_conv,
             allow_neg_eigval=neg, mlp_hidden=32, tied_head=False)
    return c


def our_config(c):
    """The C config keys (names of src/models/config.h)."""
    keys = ("model", "d_model", "n_layer", "n_head", "d_inner", "norm_eps", "delta_head_dim", "expand_v",
            "n_householder", "short_conv", "allow_neg_eigval")
    out = {k: c[k] for k in keys}
    out["vocab_size"] = c["vocab"]
    if c["d_conv"] is not None:
        out["d_conv"] = c["d_conv"]
    return out


def main():
    cm.setup_torch()
    tensors, meta = {}, {"format": "implicit.ref", "torch_version": torch.__version__,
                         "generator": "tests/ref/gen_deltanet.py", "adamw": json.dumps(cm.ADAMW, sort_keys=True)}
    check_matrix_form(None)
    for prefix, model, nh, conv, neg, seed in (("gdn", "gated_deltanet", 1, 1, 0, 606), ("dp", "deltanet", 2, 0, 1, 607)):
        c = config(model, nh, conv, neg, seed)
        torch.manual_seed(seed)
        p = init_params(c)
        ids, targets = cm.make_batch(c["batch"], c["seq_len"], c["vocab"])
        check_step(p, ids, c)

        def loss_fn(pp, acts=None, c=c):
            logits = model_fwd(pp, ids, c, acts)
            return logits, cm.masked_ce(logits, targets)
        p64 = {k: v.double() for k, v in p.items()}
        logits, loss, grads, _ = cm.loss_and_grads(p64, loss_fn)
        losses, norms = cm.adamw_trace(p64, lambda pp: loss_fn(pp)[1])
        cm.float32_drift(p64, loss_fn, logits, grads, losses, prefix)
        for k, v in p.items():
            tensors[f"{prefix}.{k}"] = v.float()
        tensors[f"{prefix}.input.ids"] = ids.to(torch.int32)
        tensors[f"{prefix}.input.targets"] = targets.to(torch.int32)
        tensors[f"{prefix}.out.logits"] = logits.float()
        tensors[f"{prefix}.out.loss"] = loss.float().reshape(1)
        for k, g in grads.items():
            tensors[f"{prefix}.grad.{k}"] = g.float()
        tensors[f"{prefix}.adamw.losses"] = losses
        tensors[f"{prefix}.adamw.grad_norms"] = norms
        meta[f"{prefix}.model"] = model
        meta[f"{prefix}.config"] = json.dumps(our_config(c), sort_keys=True)
        meta[f"{prefix}.ref_config"] = json.dumps(c, sort_keys=True)
        print(f"{prefix} ({model}): loss {loss.item():.6f}, adamw {losses[0]:.4f} -> {losses[-1]:.4f}")
    path = os.path.join(HERE, "deltanet.safetensors")
    size = cm.write_verified(path, tensors, meta)
    print(f"wrote {path}: {len(tensors)} tensors, {size} bytes")


if __name__ == "__main__":
    main()
