"""Reference vectors for the explicit Mamba2 LM (tests/ref/mamba2.safetensors, mamba2_long.safetensors).

What: an independent plain-PyTorch implementation of spec §1.1-§1.4 (embedding -> n_layer blocks
x + mixer(RMSNorm(x)) -> norm_f -> tied head), written from the spec (no mamba_ssm): in_proj split
zgate | xBC | dtraw, causal depthwise conv + silu, dt = softplus(dtraw + dt_bias), A = -exp(A_log), the
sequential scan as a python loop over t, D skip, gated RMSNorm (norm_before_gate=False), out_proj.
Init per §1.4/§1.8, then norm weights, D and conv bias are perturbed so their gradients are non-trivial.
Self-checks (asserts, rerun on every regeneration):
  * torch.autograd.gradcheck (float64) of the scan and of the whole mixer at a tiny size;
  * the full-sequence mixer/model equals the token-by-token `step` (conv_state, ssm_state of §1.4),
    and the prefill states equal the stepped states;
  * the chunked SSD form of bench/torch_bench.py (chunk 64) equals the sequential scan at T=80.
Out of scope: implicit models (gen_implicit.py reuses mixer_fwd / mixer_step with the optional
injection `u`, always None here), dropout (p = 0), vocab padding.

Run: /usr/bin/python3 tests/ref/gen_mamba2.py   (or tests/ref/gen_all.sh)
"""
import math
import os

import torch
import torch.nn.functional as F

import common as cm

HERE = cm.HERE


def dims(c):
    """Derived sizes: E inner width, H heads, C conv channels, K in_proj rows (spec §1.4)."""
    E = c["expand"] * c["d_model"]
    H = E // c["headdim"]
    C = E + 2 * c["d_state"]
    K = 2 * E + 2 * c["d_state"] + H
    return E, H, C, K


def init_params(c):
    """Spec §1.4/§1.8 init (explicit: out_proj / sqrt(n_layer)), then perturbations."""
    V, D, W, L = c["vocab"], c["d_model"], c["d_conv"], c["n_layer"]
    E, H, C, K = dims(c)
    p = {"word_emb.emb.weight": torch.randn(V, D) * 0.02}
    for i in range(L):
        pre = f"backbone.layers.{i}."
        p[pre + "norm.weight"] = cm.perturb_ones(D)
        p[pre + "mixer.in_proj.weight"] = cm.uniform_((K, D), 1 / math.sqrt(D))
        p[pre + "mixer.conv1d.weight"] = cm.uniform_((C, 1, W), 1 / math.sqrt(W))
        p[pre + "mixer.conv1d.bias"] = cm.uniform_((C,), 1 / math.sqrt(W)) + 0.05 * torch.randn(C)
        # dt log-uniform in [1e-3, 1e-1], floored at 1e-4; dt_bias = softplus^-1(dt).
        dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        p[pre + "mixer.dt_bias"] = dt + torch.log(-torch.expm1(-dt))
        p[pre + "mixer.A_log"] = torch.log(torch.rand(H) * 15.0 + 1.0)
        p[pre + "mixer.D"] = cm.perturb_ones(H)
        p[pre + "mixer.norm.weight"] = cm.perturb_ones(E)
        p[pre + "mixer.out_proj.weight"] = cm.uniform_((D, E), 1 / math.sqrt(E)) / math.sqrt(L)
    p["backbone.norm_f.weight"] = cm.perturb_ones(D)
    return p


def layer_weights(p, i):
    """The mixer's tensors of layer i under short names."""
    pre = f"backbone.layers.{i}.mixer."
    return {k: p[pre + k] for k in ("in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log",
                                    "D", "norm.weight", "out_proj.weight")}


def causal_conv(x, w, b):
    """Depthwise causal conv: y_t = b + sum_k w[:,k] * x_{t-W+1+k}, zero before t=0.
    x (B,T,C), w (C,W), b (C) -> (B,T,C). Written as W shifted multiply-adds (no F.conv1d)."""
    T, W = x.shape[1], w.shape[1]
    xp = F.pad(x, (0, 0, W - 1, 0))            # W-1 zero steps in front of time
    y = b.expand_as(x)
    for k in range(W):
        y = y + w[:, k] * xp[:, k:k + T, :]
    return y


def ssm_scan(xs, dt, A, Bm, Cm, Dskip):
    """Sequential selective scan of spec §1.4, a python loop over t.
    xs (B,T,H,P), dt (B,T,H) > 0, A (H) < 0, Bm/Cm (B,T,N), Dskip (H) -> y (B,T,H,P), final S (B,H,P,N)."""
    Bsz, T, H, P = xs.shape
    N = Bm.shape[-1]
    S = xs.new_zeros(Bsz, H, P, N)
    ys = []
    for t in range(T):
        alpha = torch.exp(dt[:, t] * A)                                        # (B,H)
        S = alpha[:, :, None, None] * S + \
            dt[:, t, :, None, None] * xs[:, t, :, :, None] * Bm[:, t, None, None, :]
        ys.append((S * Cm[:, t, None, None, :]).sum(-1) + Dskip[None, :, None] * xs[:, t])
    return torch.stack(ys, 1), S


def split_sizes(c):
    E, H, C, K = dims(c)
    return E, H, C, K, c["d_state"], c["headdim"]


def mixer_fwd(w, x, c, acts=None, u=None):
    """Full-sequence Mamba2 mixer. x (B,T,D) already normalised -> (B,T,D). Fills acts (layer 0) and
    returns the prefill states (conv_state (B,C,W), ssm_state (B,H,P,N)) as well.
    u (B,T,K) | None: implicit injection (spec §2.1), added to in_proj(x) before the split."""
    E, H, C, K, N, P = split_sizes(c)
    Bsz, T, _ = x.shape
    W = c["d_conv"]
    zx = x @ w["in_proj.weight"].t()
    if u is not None:
        zx = zx + u
    z, xBC_pre, dtraw = torch.split(zx, [E, C, H], dim=-1)
    xBC = F.silu(causal_conv(xBC_pre, w["conv1d.weight"][:, 0, :], w["conv1d.bias"]))
    xs, Bm, Cm = torch.split(xBC, [E, N, N], dim=-1)
    dt = F.softplus(dtraw + w["dt_bias"])
    A = -torch.exp(w["A_log"])
    y, S = ssm_scan(xs.reshape(Bsz, T, H, P), dt, A, Bm, Cm, w["D"])
    y = y.reshape(Bsz, T, E)
    out = cm.gated_rmsnorm(y, z, w["norm.weight"]) @ w["out_proj.weight"].t()
    # Prefill: last W pre-conv xBC vectors, oldest first, left zero-padded when T < W.
    conv_state = F.pad(xBC_pre, (0, 0, max(0, W - T), 0))[:, -W:, :].transpose(1, 2)
    if acts is not None:
        acts.update({"zx": zx, "xBC_conv": xBC, "dt": dt, "y_ssm": y})
    return out, conv_state, S


def mixer_step(w, x, conv_state, ssm_state, c, u=None):
    """One token of spec §1.4's step. x (B,D) normalised, conv_state (B,C,W), ssm_state (B,H,P,N)
    -> out (B,D), new conv_state, new ssm_state. Independent of mixer_fwd's code paths.
    u (B,K) | None: implicit injection of this token, added before the split (so it reaches the
    conv state). The inputs are never modified: the caller decides whether to commit the new states."""
    E, H, C, K, N, P = split_sizes(c)
    Bsz = x.shape[0]
    zx = x @ w["in_proj.weight"].t()
    if u is not None:
        zx = zx + u
    z, xBC, dtraw = torch.split(zx, [E, C, H], dim=-1)
    cs = torch.cat([conv_state[:, :, 1:], xBC[:, :, None]], dim=2)
    xBC = F.silu((cs * w["conv1d.weight"][:, 0, :]).sum(-1) + w["conv1d.bias"])
    xs, Bm, Cm = torch.split(xBC, [E, N, N], dim=-1)
    xs = xs.reshape(Bsz, H, P)
    dt = F.softplus(dtraw + w["dt_bias"])                                      # (B,H)
    alpha = torch.exp(dt * -torch.exp(w["A_log"]))
    S = alpha[:, :, None, None] * ssm_state + dt[:, :, None, None] * xs[..., None] * Bm[:, None, None, :]
    y = (S * Cm[:, None, None, :]).sum(-1) + w["D"][None, :, None] * xs
    out = cm.gated_rmsnorm(y.reshape(Bsz, E), z, w["norm.weight"]) @ w["out_proj.weight"].t()
    return out, cs, S


def model_fwd(p, ids, c, acts=None):
    """Explicit Mamba2 LM: logits (B,T,V). acts gets layer-0 intermediates and prefill states."""
    emb = p["word_emb.emb.weight"]
    h = emb[ids]
    for i in range(c["n_layer"]):
        a0 = {} if (acts is not None and i == 0) else None
        m, cs, S = mixer_fwd(layer_weights(p, i), cm.rmsnorm(h, p[f"backbone.layers.{i}.norm.weight"]), c, a0)
        h = h + m
        if a0 is not None:
            for k, v in a0.items():
                acts["layer0." + k] = v
            acts["layer0.mixer_out"] = m
            acts["layer0.out"] = h
            acts["layer0.conv_state"] = cs
            acts["layer0.ssm_state"] = S
    h = cm.rmsnorm(h, p["backbone.norm_f.weight"])
    return h @ emb.t()


def model_step_all(p, ids, c):
    """Token-by-token evaluation with per-layer (conv_state, ssm_state) from zero; returns logits
    (B,T,V) and the final states per layer."""
    E, H, C, K, N, P = split_sizes(c)
    Bsz, T = ids.shape
    emb = p["word_emb.emb.weight"]
    dt = emb.dtype
    states = [(torch.zeros(Bsz, C, c["d_conv"], dtype=dt), torch.zeros(Bsz, H, P, N, dtype=dt))
              for _ in range(c["n_layer"])]
    outs = []
    for t in range(T):
        h = emb[ids[:, t]]
        for i in range(c["n_layer"]):
            xn = cm.rmsnorm(h, p[f"backbone.layers.{i}.norm.weight"])
            m, cs, S = mixer_step(layer_weights(p, i), xn, states[i][0], states[i][1], c)
            states[i] = (cs, S)
            h = h + m
        outs.append(cm.rmsnorm(h, p["backbone.norm_f.weight"]) @ emb.t())
    return torch.stack(outs, 1), states


def check_gradcheck():
    """float64 gradcheck of the scan alone and of the full mixer (all 8 weights + input)."""
    g = torch.Generator().manual_seed(7)
    Bsz, T, H, P, N = 2, 5, 2, 3, 4
    xs = torch.randn(Bsz, T, H, P, generator=g, dtype=torch.float64, requires_grad=True)
    dt = (torch.rand(Bsz, T, H, generator=g, dtype=torch.float64) * 0.5 + 0.1).requires_grad_(True)
    A = (-torch.rand(H, generator=g, dtype=torch.float64) * 2 - 0.2).requires_grad_(True)
    Bm = torch.randn(Bsz, T, N, generator=g, dtype=torch.float64, requires_grad=True)
    Cm = torch.randn(Bsz, T, N, generator=g, dtype=torch.float64, requires_grad=True)
    Dk = torch.randn(H, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: ssm_scan(*a)[0], (xs, dt, A, Bm, Cm, Dk), eps=1e-6, atol=1e-7)

    c = {"d_model": 4, "d_state": 3, "d_conv": 4, "expand": 2, "headdim": 4, "n_layer": 1, "vocab": 8}
    torch.manual_seed(11)
    w = {k: v.double().requires_grad_(True) for k, v in layer_weights(init_params(c), 0).items()}
    # Larger dt than the init range so the decay path matters at this tiny size.
    with torch.no_grad():
        w["dt_bias"].add_(1.0)
    x = torch.randn(2, 6, 4, dtype=torch.float64, requires_grad=True)
    names = list(w.keys())

    def f(x_, *ws):
        return mixer_fwd(dict(zip(names, ws)), x_, c)[0]
    assert torch.autograd.gradcheck(f, (x, *[w[k] for k in names]), eps=1e-6, atol=1e-7)
    print("gradcheck: scan and mixer ok (float64)")


def check_step_and_chunked(p, ids, c, tag):
    """full == step (float64 to 1e-10, float32 to 1e-5 rel), prefill states == stepped states, and
    the bench's chunked SSD == the sequential scan."""
    p64 = {k: v.double() for k, v in p.items()}
    for pp, tol in ((p64, 1e-10), (p, 2e-5)):
        acts = {}
        full = model_fwd(pp, ids, c, acts)
        step, states = model_step_all(pp, ids, c)
        e = cm.rel_err(step, full)
        assert e < tol, (tag, "step vs full", e)
        e_cs = cm.rel_err(states[0][0], acts["layer0.conv_state"])
        e_ss = cm.rel_err(states[0][1], acts["layer0.ssm_state"])
        assert e_cs < tol and e_ss < tol, (tag, "prefill states", e_cs, e_ss)
        print(f"{tag} {pp['backbone.norm_f.weight'].dtype}: step vs full rel err {e:.2e}, "
              f"conv_state {e_cs:.2e}, ssm_state {e_ss:.2e}")
    # Chunked SSD (chunk 64) against the python-loop scan on layer 0's real intermediates.
    bench = cm.load_bench()
    E, H, C, K, N, P = split_sizes(c)
    acts = {}
    with torch.no_grad():
        model_fwd(p64, ids, c, acts)
        xs, Bm, Cm = torch.split(acts["layer0.xBC_conv"], [E, N, N], dim=-1)
        Bsz, T = ids.shape
        xs = xs.reshape(Bsz, T, H, P)
        A = -torch.exp(p64["backbone.layers.0.mixer.A_log"])
        Dk = p64["backbone.layers.0.mixer.D"]
        y_seq, S_seq = ssm_scan(xs, acts["layer0.dt"], A, Bm, Cm, Dk)
        y_chk, S_chk = bench.ssd_chunked(xs, acts["layer0.dt"], A, Bm, Cm, Dk, chunk=64)
        e_y, e_s = cm.rel_err(y_chk, y_seq), cm.rel_err(S_chk, S_seq)
        assert e_y < 1e-10 and e_s < 1e-10, (tag, "chunked vs sequential", e_y, e_s)
        print(f"{tag}: chunked SSD (chunk 64, T={T}) vs sequential scan rel err y {e_y:.2e}, S {e_s:.2e}")
        # The bench's whole block (fused conv, split in_proj, chunked scan) == x + mixer(RMSNorm(x)).
        w = layer_weights(p64, 0)
        bp = {"norm": p64["backbone.layers.0.norm.weight"], "in_proj": w["in_proj.weight"],
              "conv_w": w["conv1d.weight"], "conv_b": w["conv1d.bias"], "dt_bias": w["dt_bias"],
              "A_log": w["A_log"], "D": w["D"], "gnorm": w["norm.weight"], "out_proj": w["out_proj.weight"],
              "dims": (c["d_model"], N, E, P, H, C, c["d_conv"])}
        x = torch.randn(Bsz, T, c["d_model"], dtype=torch.float64)
        want = x + mixer_fwd(w, cm.rmsnorm(x, bp["norm"]), c)[0]
        e_b = cm.rel_err(bench.mamba2_block(bp, x), want)
        assert e_b < 1e-10, (tag, "bench block", e_b)
        print(f"{tag}: bench/torch_bench.py mamba2_block vs reference block rel err {e_b:.2e}")


def generate(name, seed, vocab, d_model, n_layer, batch, seq_len):
    c = cm.config_base(vocab=vocab, d_model=d_model, n_layer=n_layer, d_state=8, d_conv=4, expand=2,
                       headdim=16, batch=batch, seq_len=seq_len, chunk_size=64, seed=seed)
    E, H, C, K = dims(c)
    # d_inner is the backbone MLP width (0 = no MLP); the SSM head count is mamba_nheads, not n_head.
    c.update(d_inner=0, mamba_nheads=H, d_ssm=E, ngroups=1, d_in_proj=K, conv_channels=C)
    torch.manual_seed(seed)
    p = init_params(c)
    ids, targets = cm.make_batch(batch, seq_len, vocab)
    check_step_and_chunked(p, ids, c, name)

    cm.run_reference(os.path.join(HERE, name + ".safetensors"), "mamba2", c, p, ids, targets, model_fwd, name)


def main():
    cm.setup_torch()
    check_gradcheck()
    generate("mamba2", seed=1234, vocab=32, d_model=32, n_layer=2, batch=2, seq_len=12)
    generate("mamba2_long", seed=4321, vocab=32, d_model=32, n_layer=1, batch=1, seq_len=80)


if __name__ == "__main__":
    main()
