"""Reference vectors for the Mamba-1 baseline LM (tests/ref/mamba1.safetensors).

What: an independent plain-PyTorch implementation of spec fp-rnn §3.4 (residual LM wrapper: embedding ->
n_layer x [r = r + Mixer(RMSNorm(r))] -> RMSNorm_f -> tied head over the padded vocabulary, no MLP) with
the Mamba-1 mixer of §5.2 (mamba_ssm `Mamba`), written from the spec (no mamba_ssm):
    [x ; z] = in_proj(u);  x = silu(causal depthwise conv(x) + b);  [dlow ; B ; C] = x_proj(x)
    dt = softplus(dt_proj(dlow) + dt_bias);  A = -exp(A_log)
    H_t = exp(dt_t A) * H_{t-1} + dt_t B_t x_t  (per channel i, state j);  y_t = H_t C_t + D x_t
    out = out_proj(y * silu(z))
Names are mamba_ssm's under the project's shared ends: word_emb.emb.weight, backbone.layers.{i}.norm.weight,
backbone.layers.{i}.mixer.{in_proj.weight, conv1d.weight, conv1d.bias, x_proj.weight, dt_proj.weight,
dt_proj.bias, A_log, D, out_proj.weight}, backbone.norm_f.weight.
Init: spec §3.1/§3.4 (embedding N(0,0.02), Linear U(+-1/sqrt(fan_in)), conv U(+-1/sqrt(W)) weight and bias,
dt_proj.weight U(+-dt_rank^-1/2), dt_proj.bias = softplus^-1(dt) with dt log-uniform, A_log = ln(j+1),
D = 1, out_proj / sqrt(n_layer)), then DELIBERATE perturbations so that every gradient is non-trivial and the
scan's decays matter: dt log-uniform in [0.01, 1] instead of [1e-3, 0.1]; A_log + 0.1 N(0,1); D, the norm
weights and norm_f 1 + 0.1 N(0,1); conv bias + 0.05 N(0,1).
The vocabulary (11) is padded to a multiple of 8 (16 rows); the 5 extra logits take part in the softmax and
are never targeted.
Self-checks (asserts, rerun on every regeneration): torch.autograd.gradcheck (float64) of the scan and of the
whole mixer (input + all 9 weights) at a tiny size; the full-sequence model equals the token-by-token step with
conv_state (B,E,W) / ssm_state (B,E,N) (float64 1e-10); the prefill states equal the stepped states.
Out of scope: dropout, the fixed-point FP-Mamba (§3.1).

Output file layout: as the other explicit files (tests/ref/README.md), with this AdamW decay rule instead of
common.py's: no decay for names containing "bias" or "norm" and for A_log and D, decay for everything else,
the embedding included (spec §4.1, word problem & LM groups).

Run: /usr/bin/python3 tests/ref/gen_mamba1.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

import common as cm

HERE = cm.HERE
MIXER_KEYS = ("in_proj.weight", "conv1d.weight", "conv1d.bias", "x_proj.weight", "dt_proj.weight",
              "dt_proj.bias", "A_log", "D", "out_proj.weight")


def dims(c):
    """E inner width, R dt rank (0 = ceil(d_model/16)), N state size."""
    E = c["expand"] * c["d_model"]
    R = c["dt_rank"] or math.ceil(c["d_model"] / 16)
    return E, R, c["d_state"]


def init_params(c):
    V, D, W, L = c["vocab_padded"], c["d_model"], c["d_conv"], c["n_layer"]
    E, R, N = dims(c)
    p = {"word_emb.emb.weight": torch.randn(V, D) * 0.02}
    for i in range(L):
        pre = f"backbone.layers.{i}."
        p[pre + "norm.weight"] = cm.perturb_ones(D)
        p[pre + "mixer.in_proj.weight"] = cm.uniform_((2 * E, D), 1 / math.sqrt(D))
        p[pre + "mixer.conv1d.weight"] = cm.uniform_((E, 1, W), 1 / math.sqrt(W))
        p[pre + "mixer.conv1d.bias"] = cm.uniform_((E,), 1 / math.sqrt(W)) + 0.05 * torch.randn(E)
        p[pre + "mixer.x_proj.weight"] = cm.uniform_((R + 2 * N, E), 1 / math.sqrt(E))
        p[pre + "mixer.dt_proj.weight"] = cm.uniform_((E, R), R ** -0.5)
        lo, hi = c["dt_init_range"]
        dt = torch.exp(torch.rand(E) * (math.log(hi) - math.log(lo)) + math.log(lo)).clamp(min=1e-4)
        p[pre + "mixer.dt_proj.bias"] = dt + torch.log(-torch.expm1(-dt))
        p[pre + "mixer.A_log"] = torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1) + \
            0.1 * torch.randn(E, N)
        p[pre + "mixer.D"] = cm.perturb_ones(E)
        p[pre + "mixer.out_proj.weight"] = cm.uniform_((D, E), 1 / math.sqrt(E)) / math.sqrt(L)
    p["backbone.norm_f.weight"] = cm.perturb_ones(D)
    return p


def layer_weights(p, i):
    pre = f"backbone.layers.{i}.mixer."
    return {k: p[pre + k] for k in MIXER_KEYS}


def causal_conv(x, w, b):
    """y_t = b + sum_k w[:,k] x_{t-W+1+k} (zero before t=0). x (B,T,E), w (E,W), b (E)."""
    T, W = x.shape[1], w.shape[1]
    xp = F.pad(x, (0, 0, W - 1, 0))
    y = b.expand_as(x)
    for k in range(W):
        y = y + w[:, k] * xp[:, k:k + T, :]
    return y


def s6_scan(x, dt, A, Bm, Cm, D):
    """Selective scan, a python loop over t. x, dt (B,T,E), A (E,N), Bm, Cm (B,T,N), D (E)
    -> y (B,T,E), final H (B,E,N)."""
    Bsz, T, E = x.shape
    H = x.new_zeros(Bsz, E, A.shape[1])
    ys = []
    for t in range(T):
        H = torch.exp(dt[:, t, :, None] * A) * H + dt[:, t, :, None] * Bm[:, t, None, :] * x[:, t, :, None]
        ys.append((H * Cm[:, t, None, :]).sum(-1) + D * x[:, t])
    return torch.stack(ys, 1), H


def mixer_fwd(w, u, c, acts=None):
    """u (B,T,D) normed -> (B,T,D), prefill conv_state (B,E,W), ssm_state (B,E,N)."""
    E, R, N = dims(c)
    W, T = c["d_conv"], u.shape[1]
    xin, z = torch.split(u @ w["in_proj.weight"].t(), [E, E], dim=-1)
    x = F.silu(causal_conv(xin, w["conv1d.weight"][:, 0, :], w["conv1d.bias"]))
    dl, Bm, Cm = torch.split(x @ w["x_proj.weight"].t(), [R, N, N], dim=-1)
    dt = F.softplus(dl @ w["dt_proj.weight"].t() + w["dt_proj.bias"])
    y, H = s6_scan(x, dt, -torch.exp(w["A_log"]), Bm, Cm, w["D"])
    out = (y * F.silu(z)) @ w["out_proj.weight"].t()
    conv_state = F.pad(xin, (0, 0, max(0, W - T), 0))[:, -W:, :].transpose(1, 2)
    if acts is not None:
        acts.update({"x_conv": x, "dt": dt, "y_ssm": y})
    return out, conv_state, H


def mixer_step(w, u, conv_state, ssm_state, c):
    """One token: u (B,D), conv_state (B,E,W) (last W pre-conv inputs, oldest first), ssm_state (B,E,N)."""
    E, R, N = dims(c)
    xin, z = torch.split(u @ w["in_proj.weight"].t(), [E, E], dim=-1)
    cs = torch.cat([conv_state[:, :, 1:], xin[:, :, None]], dim=2)
    x = F.silu((cs * w["conv1d.weight"][:, 0, :]).sum(-1) + w["conv1d.bias"])
    dl, Bm, Cm = torch.split(x @ w["x_proj.weight"].t(), [R, N, N], dim=-1)
    dt = F.softplus(dl @ w["dt_proj.weight"].t() + w["dt_proj.bias"])
    H = torch.exp(dt[:, :, None] * -torch.exp(w["A_log"])) * ssm_state + dt[:, :, None] * Bm[:, None, :] * x[:, :, None]
    y = (H * Cm[:, None, :]).sum(-1) + w["D"] * x
    return (y * F.silu(z)) @ w["out_proj.weight"].t(), cs, H


def model_fwd(p, ids, c, acts=None):
    emb = p["word_emb.emb.weight"]
    r = emb[ids]
    for i in range(c["n_layer"]):
        a0 = {} if (acts is not None and i == 0) else None
        m, cs, H = mixer_fwd(layer_weights(p, i), cm.rmsnorm(r, p[f"backbone.layers.{i}.norm.weight"]), c, a0)
        r = r + m
        if a0 is not None:
            for k, v in a0.items():
                acts["layer0." + k] = v
            acts["layer0.mixer_out"] = m
            acts["layer0.out"] = r
            acts["layer0.conv_state"] = cs
            acts["layer0.ssm_state"] = H
    return cm.rmsnorm(r, p["backbone.norm_f.weight"]) @ emb.t()


def model_step_all(p, ids, c):
    E, R, N = dims(c)
    Bsz, T = ids.shape
    emb = p["word_emb.emb.weight"]
    st = [(emb.new_zeros(Bsz, E, c["d_conv"]), emb.new_zeros(Bsz, E, N)) for _ in range(c["n_layer"])]
    outs = []
    for t in range(T):
        r = emb[ids[:, t]]
        for i in range(c["n_layer"]):
            m, cs, H = mixer_step(layer_weights(p, i), cm.rmsnorm(r, p[f"backbone.layers.{i}.norm.weight"]),
                                  st[i][0], st[i][1], c)
            st[i] = (cs, H)
            r = r + m
        outs.append(cm.rmsnorm(r, p["backbone.norm_f.weight"]) @ emb.t())
    return torch.stack(outs, 1), st


def check_gradcheck():
    g = torch.Generator().manual_seed(5)
    Bsz, T, E, N = 2, 5, 3, 4
    d = dict(dtype=torch.float64)
    x = torch.randn(Bsz, T, E, generator=g, **d).requires_grad_(True)
    dt = (torch.rand(Bsz, T, E, generator=g, **d) * 0.8 + 0.1).requires_grad_(True)
    A = (-torch.rand(E, N, generator=g, **d) * 2 - 0.2).requires_grad_(True)
    Bm = torch.randn(Bsz, T, N, generator=g, **d).requires_grad_(True)
    Cm = torch.randn(Bsz, T, N, generator=g, **d).requires_grad_(True)
    Dk = torch.randn(E, generator=g, **d).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda *a: s6_scan(*a)[0], (x, dt, A, Bm, Cm, Dk), eps=1e-6, atol=1e-7)

    c = {"d_model": 4, "d_state": 3, "d_conv": 4, "expand": 2, "dt_rank": 2, "n_layer": 1,
         "vocab_padded": 8, "dt_init_range": [0.05, 1.0]}
    torch.manual_seed(13)
    w = {k: v.double().requires_grad_(True) for k, v in layer_weights(init_params(c), 0).items()}
    u = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    keys = list(w)
    assert torch.autograd.gradcheck(lambda uu, *ws: mixer_fwd(dict(zip(keys, ws)), uu, c)[0],
                                    (u, *[w[k] for k in keys]), eps=1e-6, atol=1e-7)
    print("gradcheck: s6 scan and mamba1 mixer ok (float64)")


def check_step(p, ids, c):
    p64 = {k: v.double() for k, v in p.items()}
    full = model_fwd(p64, ids, c, acts := {})
    stepped, st = model_step_all(p64, ids, c)
    e = cm.rel_err(stepped, full)
    assert e < 1e-10, ("step vs full", e)
    assert cm.rel_err(st[0][0], acts["layer0.conv_state"]) < 1e-12
    assert cm.rel_err(st[0][1], acts["layer0.ssm_state"]) < 1e-10
    print(f"mamba1: token-by-token step vs full sequence rel err {e:.2e}; prefill states ok")


def decays(name):
    """Spec §4.1 word problem / LM groups: no decay for biases, norms, A_log, D."""
    return not ("bias" in name or "norm" in name or name.endswith(".A_log") or name.endswith(".D"))


def adamw_trace(params, loss_fn):
    work = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    a = cm.ADAMW
    opt = torch.optim.AdamW(
        [{"params": [v for k, v in work.items() if decays(k)], "weight_decay": a["weight_decay"]},
         {"params": [v for k, v in work.items() if not decays(k)], "weight_decay": 0.0}],
        lr=a["lr"], betas=tuple(a["betas"]), eps=a["eps"])
    losses, norms = [], []
    for _ in range(a["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(work)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(work.values()), max_norm=1.0)))
        losses.append(loss.item())
        opt.step()
    return torch.tensor(losses, dtype=torch.float32), torch.tensor(norms, dtype=torch.float32)


def main():
    cm.setup_torch()
    seed = 1111
    c = cm.config_base(vocab=11, d_model=16, n_layer=2, d_state=4, d_conv=4, expand=2, batch=2, seq_len=9,
                       seed=seed)
    c.update({"dt_rank": 0, "pad_vocab": True, "pad_vocab_multiple": 8, "vocab_padded": 16,
              "dt_init_range": [0.01, 1.0]})
    check_gradcheck()
    torch.manual_seed(seed)
    p = init_params(c)
    ids, targets = cm.make_batch(c["batch"], c["seq_len"], c["vocab"])
    check_step(p, ids, c)

    def loss_fn(pp, acts=None):
        logits = model_fwd(pp, ids, c, acts)
        return logits, cm.masked_ce(logits, targets)
    p64 = {k: v.double() for k, v in p.items()}
    logits, loss, grads, acts = cm.loss_and_grads(p64, loss_fn)
    losses, norms = adamw_trace(p64, lambda pp: loss_fn(pp)[1])
    # the float32 drift report of the other generators (its AdamW part uses common.py's decay rule)
    logits32, _, grads32, _ = cm.loss_and_grads({k: v.float() for k, v in p.items()}, loss_fn)
    worst = max(((cm.rel_err(grads32[k].double(), grads[k]), k) for k in grads), key=lambda t: t[0])
    print(f"mamba1: float32 torch vs float64 reference: logits rel err {cm.rel_err(logits32.double(), logits):.2e}, "
          f"worst grad rel err {worst[0]:.2e} ({worst[1]})")

    tensors = {k: v.float() for k, v in p.items()}
    tensors["input.ids"] = ids.to(torch.int32)
    tensors["input.targets"] = targets.to(torch.int32)
    tensors["out.logits"] = logits.float()
    tensors["out.loss"] = loss.float().reshape(1)
    for k, g in grads.items():
        tensors["grad." + k] = g.float()
    tensors["adamw.losses"] = losses
    tensors["adamw.grad_norms"] = norms
    for k, a in acts.items():
        tensors["act." + k] = a.float()
    adamw = dict(cm.ADAMW)
    adamw["decay_rule"] = ("weight_decay 0.1 for every tensor except names containing 'bias' or 'norm' and "
                           "the A_log and D tensors (weight_decay 0); the embedding decays")
    meta = {"format": "implicit.ref", "model": "mamba1", "config": json.dumps(c, sort_keys=True),
            "adamw": json.dumps(adamw, sort_keys=True), "torch_version": torch.__version__,
            "generator": "tests/ref/gen_mamba1.py"}
    path = os.path.join(HERE, "mamba1.safetensors")
    size = cm.write_verified(path, tensors, meta)
    print(f"wrote {path}: {len(tensors)} tensors, {size} bytes, loss {loss.item():.6f}, "
          f"adamw losses {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
