"""Reference vectors for the FP-Mamba LM (tests/ref/fp_mamba.safetensors, fp_mamba_kron.safetensors).

What: an independent plain-PyTorch implementation, written from spec fp-rnn §1.4, §1.5, §2, §3.1, §3.4,
of the residual LM (embedding -> n_layer x [r = r + FPMamba1(RMSNorm(r))] -> RMSNorm_f -> tied head over
the padded vocabulary -> masked CE) with FPMamba1 blocks:
    prepare (with autograd):  [x ; z] = in_proj(u);  x = silu(conv(x)) if conv (raw otherwise);
                              [dlow ; B ; C] = x_proj(x);  dt = softplus(dt_proj(dlow) + b_dt);  A = -exp(A_log)
    f(y):  s = shift(y);  p = [x ; s];  x~ = Q(p)(x - y) + y;  [By ; Cy] = W_bc s  (weight-normed);
           b = normalize(B + By), c = normalize(C + Cy) (clamp: the layer's eps);  o = S6(x~, dt, A, b, c, D);
           o = o * silu(z) if glu_in_loop;  f(y) = LayerNorm(o)
    FixedPointOptimizer (§1.4) under no_grad from Y = 0: relative inf-norm residual per token, max over
    time, per sequence; damped update (s0 0.99, decay 0.9, patience 15); best-so-far; continue while
    quantile_q(best) >= thr and max step >= 1e-3 and it < cap (training q = 1 - 0.25, cap = fp_max_iter;
    evaluation q = 1, cap 1000);
    then n_backwards undamped applications with autograd from Y* (a constant), and the output
    out = out_proj(silu(z + W_zy shift(y)) * y)  (glu_in_loop 0)  or  out_proj(y)  (glu_in_loop 1).
The mixer Q is gen_mixer.py's (`mixer`), the scan and the causal conv gen_mamba1.py's (`s6_scan`,
`causal_conv`): the same torch code the mixer and Mamba-1 references were checked with.
Tensor names are the C table's (fp_mamba_add_params, mixer_add_params, lm_resid.h), so the C test loads
the file with ckpt_load: word_emb.emb.weight, backbone.layers.{i}.norm.weight,
backbone.layers.{i}.mixer.{in_proj.weight, conv1d.weight, conv1d.bias, x_proj.weight, dt_proj.weight,
dt_proj.bias, A_log, D, bc_proj.weight_g/_v, zy_proj.weight_g/_v, mixer.<proj>.weight_g/_v/bias,
out_norm.weight, out_norm.bias, out_proj.weight}, backbone.norm_f.weight.

Cases (V 11 padded to 16, d_model 8, expand 2 (E 16), d_state 4, dt_rank 1, B 2, T 7, eps 1e-5 everywhere
unless said):
  fp_mamba.safetensors       Householder r=2, concat h-dep, no conv, glu_in_loop 0, n_backwards 1, 2 layers
  fp_mamba_kron.safetensors  Kronecker (4x4, column-wise), concat h-dep, conv, glu_in_loop 1,
                             n_backwards 2, 1 layer
  fp_mamba_ln.safetensors    Householder r=1, concat h-dep, conv, glu_in_loop 0, n_backwards 1, 2 layers;
                             LayerNorm blocks and norm_f (weight and bias, eps 1e-5: mamba_ssm's
                             rms_norm = False) and the layer's own eps (in-loop LayerNorm, mixer) 0.02
Parameters are NOT at their init: every tensor is perturbed (below), so every gradient is non-trivial.

Stored (besides the parameters; all outputs in float64 from the float32 weights, rounded once):
  input.ids, input.targets   I32 (B,T); 2 targets per row are -100 (ignored)
  out.logits, out.loss       training-mode forward (q = 0.75, cap fp_max_iter)
  grad.<param>               d out.loss / d param through the graded steps and the prepare part only
  solve.iters                I32 (n_layer): no-grad f evaluations of each layer's training solve
  solve.res_max              F32 [1]: the worst sample's best residual over the layers (the C fp_res_max)
  eval.logits, eval.iters, eval.res_max   the same in evaluation mode (q = 1, cap 1000), no backward
Metadata: format implicit.ref, model fp_mamba, config (the explicit keys, read by tests/refload.h),
implicit_cfg = a JSON object of C config keys -> values (the C test cfg_set()s each), generator.

Self-checks (asserts, rerun on every regeneration):
  * the solver on a constant map (Q = I through alpha -> 0, W_bc = 0; spec §10) stops after exactly 2
    evaluations and the graded step returns f from any Y*;
  * torch.autograd.gradcheck (float64) of one layer's graded part (Y* given, n_backwards 2) in both
    configurations, input and every parameter;
  * the solver's discrete decisions are not marginal: at every stop check q(best) is at least 1% away
    from the threshold, and every res < best comparison is decided by at least 1% (so a float32 port
    takes the same branches and runs the same number of iterations);
  * the evaluation solves converged (every sample's best residual < thr) and stopped before the cap;
    the Householder case's training solves stopped on the quantile before the cap, the Kronecker
    case's ran into it (both stop rules are exercised);
  * a float32 torch run of the same weights takes the same iteration counts; its drift from the float64
    reference is printed (what the C port should see).
Out of scope: sequential (token-by-token) mode, random l_max, AdamW traces, dropout.

Run: /usr/bin/python3 tests/ref/gen_fp_mamba.py
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as cm  # noqa: E402
import gen_mamba1 as gm1  # noqa: E402
import gen_mixer as gmx  # noqa: E402

HERE = cm.HERE
EPS = 1e-5
# FixedPointOptimizer constants of FPMamba1 (spec §1.4); the C solver keeps step sizes in float32
S0 = float(torch.tensor(0.99, dtype=torch.float32))
DECAY = float(torch.tensor(0.9, dtype=torch.float32))
PATIENCE, Q_OUT, STEP_MIN, RES_EPS, EVAL_CAP = 15, 0.25, 1e-3, 1e-8, 1000
MARGIN = 1e-2

BASE = dict(vocab=11, pad=8, d_model=8, expand=2, d_state=4, d_conv=4, dt_rank=1, batch=2, seq_len=7)
CASES = [
    # seeds and gate biases picked so that no solver decision is marginal (see the self-checks):
    # the Householder case stops its training solves on the quantile (6 and 8 evaluations) and its
    # evaluation solves after 9 and 8; the Kronecker case's training solve runs into the cap (16) and
    # its evaluation solve takes 46 evaluations, with damping decays
    dict(file="fp_mamba.safetensors", seed=103, n_layer=2, mixer_type="householder", mixer_rank=2, conv=0,
         glu_in_loop=0, n_back=1, max_iter=16, thr=0.1, alpha_bias=-1.25, train_stop="quantile"),
    dict(file="fp_mamba_kron.safetensors", seed=100, n_layer=1, mixer_type="kronecker", mixer_rank=1, conv=1,
         glu_in_loop=1, n_back=2, max_iter=16, thr=0.1, alpha_bias=-1.0, train_stop="cap"),
    # mamba_ssm's rms_norm = False: LayerNorm (with bias) blocks and norm_f at eps 1e-5, and the layer's
    # own eps (in-loop LayerNorm, mixer normalisations) set apart; 0.02 rather than the reference's
    # 1e-6 so that a port which swaps the two epsilons, or uses one for both, is visibly off
    dict(file="fp_mamba_ln.safetensors", seed=int(os.environ.get("FP_LN_SEED", 110)), n_layer=2,
         mixer_type="householder", mixer_rank=1, conv=1, glu_in_loop=0, n_back=1, max_iter=16, thr=0.1,
         alpha_bias=-1.25, train_stop="quantile", norm_type="layernorm", block_eps=1e-5, mixer_eps=0.02),
    # the reference's word-problem settings (LayerNorm blocks at 1e-5, the layer at 1e-6): the weights
    # and outputs behind its checkpoints in interop/ (gen_fp_interop.py), Householder and Kronecker
    dict(file="fp_ref_h.safetensors", seed=int(os.environ.get("FP_H_SEED", 121)), n_layer=2,
         mixer_type="householder", mixer_rank=2, conv=0, glu_in_loop=0, n_back=1, max_iter=16, thr=0.1,
         alpha_bias=-1.25, train_stop="quantile", norm_type="layernorm", block_eps=1e-5, mixer_eps=1e-6),
    dict(file="fp_ref_k.safetensors", seed=int(os.environ.get("FP_K_SEED", 133)), n_layer=1,
         mixer_type="kronecker", mixer_rank=1, conv=1, glu_in_loop=0, n_back=1, max_iter=16, thr=0.1,
         alpha_bias=-2.0, train_stop="quantile", norm_type="layernorm", block_eps=1e-5, mixer_eps=1e-6),
]
if os.environ.get("FP_ONLY"):
    CASES = [c for c in CASES if c["file"] == os.environ["FP_ONLY"]]


def full_cfg(case):
    c = dict(BASE)
    c.update(case)
    c["E"] = c["expand"] * c["d_model"]
    c["dp"] = 2 * c["E"]  # concat h-dep
    c["vocab_padded"] = -(-c["vocab"] // c["pad"]) * c["pad"]
    return c


def mixer_case(c):
    """gen_mixer's case tuple: (name, type, d, dp, rank, ac, proj_rank, kron_norm, eps)."""
    return ("m", c["mixer_type"], c["E"], c["dp"], c["mixer_rank"], "silu", -1, "column-wise", mixer_eps(c))


def mixer_eps(c):
    """The epsilon inside the layer (its in-loop LayerNorm and the mixer's normalisations)."""
    return c.get("mixer_eps", EPS)


def block_norm(c, x, w, b):
    """The residual stream's norm: RMSNorm (no bias) or LayerNorm with bias, eps block_eps."""
    eps = c.get("block_eps", EPS)
    if c.get("norm_type", "rmsnorm") == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), w, b, eps)
    return cm.rmsnorm(x, w, eps)


# ---- parameters ----------------------------------------------------------------------------------

def wn_pair(out, fin):
    """weight_v ~ U(+-1/sqrt(fan_in)); weight_g = ||v_i|| (1 + 0.1 N): g != ||v|| on purpose."""
    v = cm.uniform_((out, fin), 1 / math.sqrt(fin))
    return v.norm(dim=1, keepdim=True) * (1 + 0.1 * torch.randn(out, 1)), v


def init_params(c):
    V, D, E, N, R, W, L = c["vocab_padded"], c["d_model"], c["E"], c["d_state"], c["dt_rank"], c["d_conv"], c["n_layer"]
    p = {"word_emb.emb.weight": torch.randn(V, D) * 0.5}
    for i in range(L):
        pre = f"backbone.layers.{i}."
        m = pre + "mixer."
        p[pre + "norm.weight"] = cm.perturb_ones(D)
        if c.get("norm_type") == "layernorm":
            p[pre + "norm.bias"] = 0.1 * torch.randn(D)
        p[m + "in_proj.weight"] = cm.uniform_((2 * E, D), 1 / math.sqrt(D))
        if c["conv"]:
            p[m + "conv1d.weight"] = cm.uniform_((E, 1, W), 1 / math.sqrt(W))
            p[m + "conv1d.bias"] = cm.uniform_((E,), 1 / math.sqrt(W)) + 0.05 * torch.randn(E)
        p[m + "x_proj.weight"] = cm.uniform_((R + 2 * N, E), 1 / math.sqrt(E))
        p[m + "dt_proj.weight"] = cm.uniform_((E, R), R ** -0.5)
        dt = torch.exp(torch.rand(E) * (math.log(1.0) - math.log(0.01)) + math.log(0.01))
        p[m + "dt_proj.bias"] = dt + torch.log(-torch.expm1(-dt))
        p[m + "A_log"] = torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1) + 0.1 * torch.randn(E, N)
        p[m + "D"] = cm.perturb_ones(E)
        p[m + "bc_proj.weight_g"], p[m + "bc_proj.weight_v"] = wn_pair(2 * N, E)
        if not c["glu_in_loop"]:
            p[m + "zy_proj.weight_g"], p[m + "zy_proj.weight_v"] = wn_pair(E, E)
        for pname, out, gate in gmx.projections(c["mixer_type"], E, c["mixer_rank"]):
            p[m + f"mixer.{pname}.weight_g"], p[m + f"mixer.{pname}.weight_v"] = wn_pair(out, c["dp"])
            if gate:
                p[m + f"mixer.{pname}.bias"] = c["alpha_bias"] + 0.3 * torch.randn(out)
        p[m + "out_norm.weight"] = cm.perturb_ones(E)
        p[m + "out_norm.bias"] = 0.1 * torch.randn(E)
        p[m + "out_proj.weight"] = cm.uniform_((D, E), 1 / math.sqrt(E)) / math.sqrt(L)
    p["backbone.norm_f.weight"] = cm.perturb_ones(D)
    if c.get("norm_type") == "layernorm":
        p["backbone.norm_f.bias"] = 0.1 * torch.randn(D)
    return p


def layer_w(p, i):
    pre = f"backbone.layers.{i}.mixer."
    return {k[len(pre):]: v for k, v in p.items() if k.startswith(pre)}


def wn(w, name):
    g, v = w[name + ".weight_g"], w[name + ".weight_v"]
    return g * v / v.norm(dim=1, keepdim=True)


# ---- the layer -----------------------------------------------------------------------------------

def shift(y):
    """s_t = y_{t-1}, s_0 = 0."""
    return F.pad(y, (0, 0, 1, 0))[:, :-1]


def prepare(w, u, c):
    E, N, R = c["E"], c["d_state"], c["dt_rank"]
    x, z = torch.split(u @ w["in_proj.weight"].t(), [E, E], dim=-1)
    if c["conv"]:
        x = F.silu(gm1.causal_conv(x, w["conv1d.weight"][:, 0, :], w["conv1d.bias"]))
    dl, Bm, Cm = torch.split(x @ w["x_proj.weight"].t(), [R, N, N], dim=-1)
    dt = F.softplus(dl @ w["dt_proj.weight"].t() + w["dt_proj.bias"])
    return {"x": x, "z": z, "B": Bm, "C": Cm, "dt": dt, "A": -torch.exp(w["A_log"])}


def f_step(w, pre, y, c):
    """One undamped application y -> f(y) of spec §3.1."""
    Bsz, T, E = y.shape
    N = c["d_state"]
    x = pre["x"]
    s = shift(y)
    p = torch.cat([x, s], dim=-1)
    P = {k[len("mixer."):]: v for k, v in w.items() if k.startswith("mixer.")}
    xt = gmx.mixer(mixer_case(c), P, p.reshape(-1, c["dp"]), (x - y).reshape(-1, E)).reshape(Bsz, T, E) + y
    By, Cy = torch.split(s @ wn(w, "bc_proj").t(), [N, N], dim=-1)
    b = F.normalize(pre["B"] + By, dim=-1, eps=mixer_eps(c))  # the reference's eps=norm_eps of the layer
    cc = F.normalize(pre["C"] + Cy, dim=-1, eps=mixer_eps(c))
    o, _ = gm1.s6_scan(xt, pre["dt"], pre["A"], b, cc, w["D"])
    if c["glu_in_loop"]:
        o = o * F.silu(pre["z"])
    return F.layer_norm(o, (E,), w["out_norm.weight"], w["out_norm.bias"], mixer_eps(c))


def fpo_solve(f, Y, q, cap, thr):
    """FixedPointOptimizer of spec §1.4 (no gradient). Returns (Y*, iterations, best (B,), margins):
    margins = the smallest relative distance from its threshold of any stop decision taken before the
    cap and of any res < best comparison, and the number of step decays."""
    Bsz = Y.shape[0]
    best = [math.inf] * Bsz
    step = torch.full((Bsz,), S0, dtype=torch.float32)
    pat = [PATIENCE] * Bsz
    it = decays = 0
    stop_margin, cmp_margin = math.inf, math.inf
    while True:
        if it > 0:
            bq = torch.quantile(torch.tensor(best, dtype=torch.float64), q).item()
            more = bq >= thr and step.max().item() >= STEP_MIN and it < cap
            if it < cap and thr > 0:
                stop_margin = min(stop_margin, abs(bq - thr) / thr)
            if not more:
                break
        Fy = f(Y)
        res = ((Y - Fy).abs().amax(-1) / (Fy.abs().amax(-1) + RES_EPS)).amax(-1)
        s = step.to(Y.dtype)[:, None, None]
        one_minus = (1 - step).to(Y.dtype)[:, None, None]  # the C update computes 1 - s in float
        Y = s * Fy + one_minus * Y
        it += 1
        for b, r in enumerate(res.tolist()):
            if math.isfinite(best[b]):
                cmp_margin = min(cmp_margin, abs(r - best[b]) / best[b])
            if r < best[b]:
                best[b] = r
                pat[b] = PATIENCE
            else:
                pat[b] -= 1
                if pat[b] == 0:
                    pat[b] = PATIENCE
                    step[b] = step[b] * torch.tensor(DECAY, dtype=torch.float32)
                    decays += 1
    return Y, it, best, (stop_margin, cmp_margin, decays)


def layer_fwd(w, u, c, mode, rec, ystar=None):
    """u (B,T,D) normed block input -> (B,T,D). mode "train" | "eval" picks q and cap; rec collects
    (iterations, best residuals, margins, cap). ystar given: no solve (the gradcheck)."""
    pre = prepare(w, u, c)
    if ystar is None:
        q, cap = (1 - Q_OUT, c["max_iter"]) if mode == "train" else (1.0, EVAL_CAP)
        with torch.no_grad():
            ystar, it, best, margins = fpo_solve(lambda yy: f_step(w, pre, yy, c),
                                                  u.new_zeros(u.shape[0], u.shape[1], c["E"]), q, cap, c["thr"])
        rec.append((it, best, margins, cap))
    y = ystar.detach()
    for _ in range(c["n_back"]):
        y = f_step(w, pre, y, c)  # undamped, with autograd
    if c["glu_in_loop"]:
        return y @ w["out_proj.weight"].t()
    g = F.silu(pre["z"] + shift(y) @ wn(w, "zy_proj").t())
    return (g * y) @ w["out_proj.weight"].t()


def model_fwd(p, ids, c, mode, rec):
    emb = p["word_emb.emb.weight"]
    r = emb[ids]
    for i in range(c["n_layer"]):
        pre = f"backbone.layers.{i}.norm."
        r = r + layer_fwd(layer_w(p, i), block_norm(c, r, p[pre + "weight"], p.get(pre + "bias")), c, mode, rec)
    return block_norm(c, r, p["backbone.norm_f.weight"], p.get("backbone.norm_f.bias")) @ emb.t()


# ---- self-checks -------------------------------------------------------------------------------

def check_constant_map(c):
    """alpha -> 0 (Q = I) and W_bc = 0 make f constant: the loop stops after 2 evaluations."""
    torch.manual_seed(7)
    p = {k: v.double() for k, v in init_params(c).items()}
    w = layer_w(p, 0)
    for k in list(w):
        if k.startswith("mixer.") and (k.endswith("alpha.weight_g") or k.endswith("proj_d.weight_g")):
            w[k] = torch.zeros_like(w[k])
        if k.endswith("alpha.bias") or k.endswith("proj_d.bias"):
            w[k] = torch.full_like(w[k], -60.0)
    w["bc_proj.weight_g"] = torch.zeros_like(w["bc_proj.weight_g"])
    u = torch.randn(2, 5, c["d_model"], dtype=torch.float64)
    rec = []
    out = layer_fwd(w, u, c, "train", rec)
    assert rec[0][0] == 2, ("constant map iterations", rec[0][0])
    other = layer_fwd(w, u, c, "train", [], ystar=torch.randn(2, 5, c["E"], dtype=torch.float64))
    assert cm.rel_err(other, out) < 1e-12


def check_gradcheck(c):
    torch.manual_seed(11)
    small = dict(c, d_model=4, E=8, dp=16, d_state=3, n_back=2, n_layer=1, vocab_padded=8)
    w = {k: v.double() for k, v in layer_w(init_params(small), 0).items()}
    keys = list(w)
    u = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    ys = torch.randn(2, 4, 8, dtype=torch.float64)
    ins = [u] + [w[k].clone().requires_grad_(True) for k in keys]
    assert torch.autograd.gradcheck(lambda uu, *ws: layer_fwd(dict(zip(keys, ws)), uu, small, "train", [], ystar=ys),
                                    ins, eps=1e-6, atol=1e-6, rtol=1e-5), c["mixer_type"]


def run_mode(p, ids, targets, c, mode):
    """One forward (and for "train" a backward) at p; returns logits, loss, grads, per-layer records."""
    work = {k: v.detach().clone().requires_grad_(mode == "train") for k, v in p.items()}
    rec = []
    logits = model_fwd(work, ids, c, mode, rec)
    loss = cm.masked_ce(logits, targets)
    grads = None
    if mode == "train":
        loss.backward()
        grads = {k: v.grad.detach().clone() for k, v in work.items()}
        for k, g in grads.items():
            assert torch.isfinite(g).all() and g.abs().max() > 0, k
    return logits.detach(), loss.detach(), grads, rec


def main():
    cm.setup_torch()
    for case in CASES:
        c = full_cfg(case)
        check_constant_map(c)
        check_gradcheck(c)
        torch.manual_seed(c["seed"])
        p = init_params(c)
        ids, targets = cm.make_batch(c["batch"], c["seq_len"], c["vocab"], n_ignore=2)
        p64 = {k: v.double() for k, v in p.items()}
        logits, loss, grads, rec = run_mode(p64, ids, targets, c, "train")
        elogits, eloss, _, erec = run_mode(p64, ids, targets, c, "eval")
        tag = c["file"]
        for mode, rr in (("train", rec), ("eval", erec)):
            for i, (it, best, (sm, cmpm, ndec), cap) in enumerate(rr):
                print(f"{tag} {mode} layer {i}: {it} iterations (cap {cap}), best {[f'{b:.4f}' for b in best]}, "
                      f"margins: stop {sm:.3f} compare {cmpm:.3f}, step decays {ndec}")
                assert sm > MARGIN and cmpm > MARGIN, (tag, mode, i, sm, cmpm)
                if mode == "eval" or c["train_stop"] == "quantile":
                    assert it < cap, (tag, mode, i, "stopped by the cap")
                else:
                    assert it == cap, (tag, mode, i, "expected to run into the cap")
                if mode == "eval":
                    assert max(best) < c["thr"], (tag, i, best)
        # float32 torch: same iteration counts, drift printed
        p32 = {k: v.float() for k, v in p.items()}
        l32, _, g32, r32 = run_mode(p32, ids, targets, c, "train")
        el32, _, _, er32 = run_mode(p32, ids, targets, c, "eval")
        assert [r[0] for r in r32] == [r[0] for r in rec] and [r[0] for r in er32] == [r[0] for r in erec]
        worst = max(((cm.rel_err(g32[k].double(), grads[k]), k) for k in grads), key=lambda t: t[0])
        print(f"{tag}: float32 torch vs float64: logits {cm.rel_err(l32.double(), logits):.2e}, eval logits "
              f"{cm.rel_err(el32.double(), elogits):.2e}, worst grad {worst[0]:.2e} ({worst[1]})")

        tensors = {k: v.float() for k, v in p.items()}
        tensors["input.ids"] = ids.to(torch.int32)
        tensors["input.targets"] = targets.to(torch.int32)
        tensors["out.logits"] = logits.float()
        tensors["out.loss"] = loss.float().reshape(1)
        for k, g in grads.items():
            tensors["grad." + k] = g.float()
        tensors["solve.iters"] = torch.tensor([r[0] for r in rec], dtype=torch.int32)
        tensors["solve.res_max"] = torch.tensor([max(max(r[1]) for r in rec)], dtype=torch.float32)
        tensors["eval.logits"] = elogits.float()
        tensors["eval.iters"] = torch.tensor([r[0] for r in erec], dtype=torch.int32)
        tensors["eval.res_max"] = torch.tensor([max(max(r[1]) for r in erec)], dtype=torch.float32)
        config = cm.config_base(vocab=c["vocab"], d_model=c["d_model"], n_layer=c["n_layer"], d_state=c["d_state"],
                                d_conv=c["d_conv"], expand=c["expand"], batch=c["batch"], seq_len=c["seq_len"],
                                seed=c["seed"], pad_vocab=True)
        config["pad_vocab_multiple"] = c["pad"]
        config["norm_eps"] = c.get("block_eps", EPS)
        impl = {"model": "fp_mamba", "pad_vocab_multiple": c["pad"], "dt_rank": c["dt_rank"],
                "short_conv": c["conv"], "mixer_type": c["mixer_type"], "mixer_rank": c["mixer_rank"],
                "mixer_ac": "silu", "mixer_proj_rank": -1, "mixer_h_dep": 1, "symm_mixer": 0,
                "kron_norm": "column-wise", "bc_norm": 1, "glu_in_loop": c["glu_in_loop"],
                "fp_n_backwards": c["n_back"], "fp_max_iter": c["max_iter"], "fp_threshold": c["thr"],
                "fp_step0": 0.99, "fp_decay": 0.9, "fp_patience": PATIENCE, "fp_outlier_q": Q_OUT,
                "fp_eval_cap": EVAL_CAP, "norm_eps": c.get("block_eps", EPS), "dropout": 0}
        if "norm_type" in c:
            impl["norm_type"] = c["norm_type"]
        if "mixer_eps" in c:
            impl["mixer_norm_eps"] = c["mixer_eps"]
        meta = {"format": "implicit.ref", "model": "fp_mamba", "config": json.dumps(config, sort_keys=True),
                "implicit_cfg": json.dumps({k: str(v) for k, v in impl.items()}, sort_keys=True),
                "torch_version": torch.__version__, "generator": "tests/ref/gen_fp_mamba.py"}
        path = os.path.join(HERE, c["file"])
        size = cm.write_verified(path, tensors, meta)
        print(f"wrote {path}: {len(tensors)} tensors, {size} bytes, loss {loss.item():.6f} (eval {eloss.item():.6f}), "
              f"iterations train {tensors['solve.iters'].tolist()} eval {tensors['eval.iters'].tolist()}")


if __name__ == "__main__":
    main()
