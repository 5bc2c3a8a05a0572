"""Reference vectors for the IMPLICIT Mamba2 and Llama LMs (tests/ref/implicit_mamba2.safetensors,
tests/ref/implicit_llama.safetensors).

What: an independent plain-PyTorch implementation of spec §2-§6 on top of the explicit layers of
gen_mamba2.py / gen_llama.py (imported, not copied; their mixers take the optional injection `u`):
  * injection u = Linear_inj(RMSNorm_inj(e)) with bias (§2.1), added to in_proj(x̂) before the split
    (Mamba2) or to q | k | v (Llama), in every layer at every iteration;
  * weight norm W_i = g_i v_i / ‖v_i‖ on every backbone Linear and the depthwise conv (§6), computed
    once per forward;
  * f(z, u) = norm_f(Block_n(… Block_1(z, u) …, u)), z0 = 0 (§2.2-§2.3);
  * training: torchdeq fixed_point_iter (§3.1, undamped, per-sample rel residual, lowest-residual
    f-output) + `grad` phantom steps z = τ f(z,u) + (1−τ) z (§5.1); unrolled mode (§5.2);
  * evaluation: the REF loop (§3.2) on the full sequence (simultaneous) and token by token with
    read-only caches committed by the final call (sequential, §4.1).
Everything is computed in float64 from the float32 weights and rounded once on write.
Self-checks (asserts, rerun on every regeneration):
  * weight norm equals torch._weight_norm(v, g, 0) and torch's weight_g shapes;
  * torch.autograd.gradcheck (float64) of one f call incl. injection and all g / v at a tiny size;
  * a 300-step undamped solve: residual decreases monotonically and ends < 1e-6; the 12-step
    training solve returns its last iterate;
  * phantom gradient from the converged z* approaches the IFT gradient (adjoint y = g + Jᵀy solved
    with autograd vjps) as k grows (k = 3, 30, 100), and the unrolled gradient matches a 4th-order
    central difference along a random direction;
  * sequential == simultaneous at convergence (f_thres 200, tol 1e-12).
Out of scope: dropout (0), EMA, noise injection, Anderson, IFT training, vocab padding, AdamW.

Run: /usr/bin/python3 tests/ref/gen_implicit.py   (or tests/ref/gen_all.sh)
"""
import json
import math
import os

import torch

import common as cm
import gen_llama as gl
import gen_mamba2 as gm

HERE = cm.HERE

# DEQ settings of every output in the files (spec §11 key names; copied into the "config" metadata).
DEQ = {
    "f_solver": "fixed_point_iter", "f_max_iter": 12, "f_tol": 1e-12, "f_stop_mode": "rel",
    "solve_damping": 1.0, "grad": 3, "tau": 0.8, "core": "sliced", "pretrain_iter": 4,
    "eval_f_max_iter": 8, "eval_f_tol": 1e-12, "conv_f_max_iter": 200, "conv_f_tol": 1e-12,
}
# Contraction recipe (spec §13.1): weight-norm gains g scaled after init so the map contracts
# (measured 0.69 per undamped step for Mamba2, 0.65 for Llama; 1.0 / 1.0 / 1.0 gives ~0.9 or worse).
GAIN_IN, GAIN_OUT, GAIN_INJ = 0.5, 2.0, 2.0
PROCEDURES = {
    "weight_norm": "W = g * v / ||v||, ||v|| = L2 norm of each output row (conv: of each channel's W taps), "
                   "computed once per forward from weight_g / weight_v",
    "injection": "u = (RMSNorm(e; injection_norm.weight) @ injection.W^T) + injection.bias, e = emb[ids]",
    "f": "f(z,u) = norm_f(Block_n(...Block_1(z,u)...,u)); Mamba2 block z + mixer(RMSNorm(z), u) with u added "
         "to in_proj(x) before the split; Llama block z += attn(RMSNorm(z), u) with u split q|k|v and added "
         "before RoPE, then z += SwiGLU(RMSNorm2(z))",
    "out": "phantom training forward: no-grad x=0; for k=1..f_max_iter: fx=f(x,u); per sample "
           "r=||fx-x||/(||fx||+1e-9); keep the lowest-r fx per sample; stop if max r < f_tol; x=fx. "
           "z=detach(best) = solve.z; grad times: z = tau*f(z,u) + (1-tau)*z; logits = z @ emb^T; "
           "loss = mean CE over targets != -100; grad.* = d loss / d param (tied emb: both paths)",
    "unrolled": "z = f(0,u); (pretrain_iter-1) times z = (1-tau)*z + tau*f(z,u); full backprop",
    "eval": "z=0; for count in 0..f_thres-2: zn=f(z,u); r=||zn-z||_F/(1e-6+||z||_F) over the whole batch "
            "tensor; z=(1-tau)*z+tau*zn; if r<f_tol break. logits = f(z,u) @ emb^T; steps = count+1",
    "seq": "per token t: u_t; z=0 (B,D); the eval loop with f_t using the caches of tokens < t read-only "
           "(Mamba2 step from the cached conv/ssm state, Llama attends to [cache ; itself]); the final "
           "f_t call commits this token's conv/ssm state or appends its post-RoPE k and v",
    "conv": "eval_conv / seq_conv: the same loops with f_thres = conv_f_max_iter",
}


# ---------------------------------------------------------------------------------------------
# The two model families: parameter layout, one block (full sequence) and one block step (one token)
# ---------------------------------------------------------------------------------------------

class Mamba2:
    model = "implicit_mamba2"
    wn = ("mixer.in_proj", "mixer.conv1d", "mixer.out_proj")       # weight-normed, per layer
    gain_in, gain_out = ("mixer.in_proj",), ("mixer.out_proj",)

    def __init__(self, c):
        self.c = c
        self.K = gm.dims(c)[3]

    def init_explicit(self):
        """Explicit init of gen_mamba2 (perturbed norms/D/conv bias), then §12-B1: an implicit model keeps
        the default out_proj init (the GPT-2 rescale is lost under weight norm), so it is redrawn."""
        p = gm.init_params(self.c)
        E = gm.dims(self.c)[0]
        for i in range(self.c["n_layer"]):
            p[f"backbone.layers.{i}.mixer.out_proj.weight"] = cm.uniform_((self.c["d_model"], E), 1 / math.sqrt(E))
        return p

    def block(self, pe, i, z, u):
        """z (B,T,D), u (B,T,K) -> z + mixer(RMSNorm(z), u)."""
        xn = cm.rmsnorm(z, pe[f"backbone.layers.{i}.norm.weight"])
        return z + gm.mixer_fwd(gm.layer_weights(pe, i), xn, self.c, u=u)[0]

    def new_cache(self, Bsz, dtype):
        E, H, C, K, N, P = gm.split_sizes(self.c)
        return [(torch.zeros(Bsz, C, self.c["d_conv"], dtype=dtype), torch.zeros(Bsz, H, P, N, dtype=dtype))
                for _ in range(self.c["n_layer"])]

    def block_step(self, pe, i, z, u_t, t, cache):
        """One token: z (B,D), u_t (B,K); reads cache[i] only. Returns z', this layer's new (conv, ssm) state."""
        xn = cm.rmsnorm(z, pe[f"backbone.layers.{i}.norm.weight"])
        o, cs, S = gm.mixer_step(gm.layer_weights(pe, i), xn, cache[i][0], cache[i][1], self.c, u=u_t)
        return z + o, (cs, S)

    @staticmethod
    def commit(cache, i, new):
        cache[i] = new


class Llama:
    model = "implicit_llama"
    wn = ("mixer.wq", "mixer.wk", "mixer.wv", "mixer.out_proj", "mlp.w1", "mlp.w3", "mlp.fc2")
    gain_in, gain_out = ("mixer.wq", "mixer.wk", "mixer.wv", "mlp.w1", "mlp.w3"), ("mixer.out_proj", "mlp.fc2")

    def __init__(self, c):
        self.c = c
        self.K = 3 * c["d_model"]

    def init_explicit(self):
        """Explicit init of gen_llama (perturbed norms), then §12-B1: out_proj and fc2 redrawn at the
        default U(±1/sqrt(fan_in)) without the GPT-2 rescale."""
        p = gl.init_params(self.c)
        D, h = self.c["d_model"], gl.hidden(self.c)
        for i in range(self.c["n_layer"]):
            p[f"backbone.layers.{i}.mixer.out_proj.weight"] = cm.uniform_((D, D), 1 / math.sqrt(D))
            p[f"backbone.layers.{i}.mlp.fc2.weight"] = cm.uniform_((D, h), 1 / math.sqrt(h))
        return p

    def block(self, pe, i, z, u):
        w = gl.layer(pe, i)
        z = z + gl.attention(w, cm.rmsnorm(z, w["norm.weight"]), self.c, u=u)
        return z + gl.swiglu(w, cm.rmsnorm(z, w["norm2.weight"]))

    def new_cache(self, Bsz, dtype):
        return [([], []) for _ in range(self.c["n_layer"])]

    def block_step(self, pe, i, z, u_t, t, cache):
        """One token at position t: attends to the cached post-RoPE k/v of tokens < t plus itself."""
        w = gl.layer(pe, i)
        dh = self.c["d_model"] // self.c["n_head"]
        ang = gl.rope_angles(torch.tensor([t]), dh, self.c["rope_theta"], z.dtype)[0]
        o, k, v = gl.attention_step(w, cm.rmsnorm(z, w["norm.weight"]), ang, cache[i][0], cache[i][1], self.c, u=u_t)
        z = z + o
        return z + gl.swiglu(w, cm.rmsnorm(z, w["norm2.weight"])), (k, v)

    @staticmethod
    def commit(cache, i, new):
        cache[i][0].append(new[0])
        cache[i][1].append(new[1])


# ---------------------------------------------------------------------------------------------
# Parameters: weight norm (§6) and the implicit parameter set (§14 names)
# ---------------------------------------------------------------------------------------------

def row_norm(v):
    """‖v_i‖₂ per output row (dim 0), shaped like weight_g: (out, 1) / (C, 1, 1)."""
    return v.flatten(1).norm(dim=1).reshape([v.shape[0]] + [1] * (v.dim() - 1))


def add_wn(p, base, W, gain):
    """Stores W as base.weight_g = ‖W_i‖·(1 + 0.1·N(0,1))·gain and base.weight_v = W. The per-row
    perturbation makes g ≠ ‖v‖, so a port that ignores g (or the division by ‖v‖) fails."""
    p[base + ".weight_g"] = row_norm(W) * (1.0 + 0.1 * torch.randn(row_norm(W).shape)) * gain
    p[base + ".weight_v"] = W


def init_implicit(fam, seed):
    """float32 implicit parameters in file order: embedding, injection, layers, norm_f."""
    c = fam.c
    torch.manual_seed(seed)
    pex = fam.init_explicit()
    D = c["d_model"]
    p = {"word_emb.emb.weight": pex.pop("word_emb.emb.weight"),
         "backbone.injection_norm.weight": cm.perturb_ones(D)}
    # Injection: Linear(D -> K) default init; REF zeroes its bias, perturbed here so it is exercised.
    add_wn(p, "backbone.injection", cm.uniform_((fam.K, D), 1 / math.sqrt(D)), GAIN_INJ)
    p["backbone.injection.bias"] = 0.05 * torch.randn(fam.K)
    for k, W in pex.items():
        rest = k.split(".", 3)[-1] if k.startswith("backbone.layers.") else None    # e.g. mixer.in_proj.weight
        base = rest[:-len(".weight")] if rest and rest.endswith(".weight") else None
        if base in fam.wn:
            gain = GAIN_IN if base in fam.gain_in else GAIN_OUT if base in fam.gain_out else 1.0
            add_wn(p, k[:-len(".weight")], W, gain)
        else:
            p[k] = W
    return p


def effective(p):
    """Parameter dict with explicit names: every X.weight_g / X.weight_v pair becomes
    X.weight = g * v / ‖v‖ (one computation per forward, gradients flow to g and v)."""
    pe = {}
    for k, t in p.items():
        if k.endswith(".weight_v"):
            g = p[k[:-1] + "g"]
            pe[k[:-2]] = g * t / row_norm(t)
        elif not k.endswith(".weight_g"):
            pe[k] = t
    return pe


def injection(pe, ids):
    """u (B,T,K) = Linear_inj(RMSNorm_inj(emb[ids])) with bias."""
    e = pe["word_emb.emb.weight"][ids]
    return inject(pe, e)


def inject(pe, e):
    """u from given embeddings e (B,T,D) (the gradcheck feeds e directly)."""
    return cm.rmsnorm(e, pe["backbone.injection_norm.weight"]) @ pe["backbone.injection.weight"].t() + \
        pe["backbone.injection.bias"]


def f_full(fam, pe, z, u):
    """f(z, u) over the whole sequence: z (B,T,D), u (B,T,K) -> (B,T,D)."""
    for i in range(fam.c["n_layer"]):
        z = fam.block(pe, i, z, u)
    return cm.rmsnorm(z, pe["backbone.norm_f.weight"])


def f_step(fam, pe, z, u_t, t, cache):
    """f_t(z, u_t) for token t with the caches of tokens < t read only: z (B,D) -> (B,D) and the
    per-layer new cache entries (applied only by commit)."""
    news = []
    for i in range(fam.c["n_layer"]):
        z, new = fam.block_step(pe, i, z, u_t, t, cache)
        news.append(new)
    return cm.rmsnorm(z, pe["backbone.norm_f.weight"]), news


# ---------------------------------------------------------------------------------------------
# Solvers (§3.1 training solve, §3.2 evaluation loop)
# ---------------------------------------------------------------------------------------------

def picard_solve(fz, z0, max_iter, tol):
    """torchdeq fixed_point_iter, undamped, rel stop mode: per-sample residuals over the flattened
    (T·D) slice, stop when every sample is below tol, return per sample the lowest-residual f-output.
    Returns (best, stats) with stats = rel (B), abs (B) at the best step, step (B), iters, history."""
    Bsz = z0.shape[0]
    x, best = z0, z0.clone()
    best_rel = torch.full((Bsz,), 1e8, dtype=torch.float64)
    best_abs = torch.full((Bsz,), 1e8, dtype=torch.float64)
    best_step = torch.zeros(Bsz, dtype=torch.long)
    hist = []
    for k in range(1, max_iter + 1):
        fx = fz(x)
        d_abs = (fx - x).flatten(1).norm(dim=1).double()
        d_rel = d_abs / (fx.flatten(1).norm(dim=1).double() + 1e-9)
        hist.append(d_rel)
        better = d_rel < best_rel
        best[better] = fx[better]
        best_abs = torch.where(better, d_abs, best_abs)
        best_rel = torch.where(better, d_rel, best_rel)
        best_step = torch.where(better, torch.full_like(best_step, k), best_step)
        if d_rel.max() < tol:
            break
        x = fx
    return best, {"rel": best_rel, "abs": best_abs, "step": best_step, "iters": k, "hist": torch.stack(hist)}


def eval_loop(fz, z0, f_thres, tol, tau):
    """REF's evaluation loop (§3.2) without its final call: at most f_thres-1 damped steps, one global
    Frobenius ratio with the OLD iterate in the denominator. Returns (z, steps, last ratio)."""
    assert f_thres >= 2
    z = z0
    for count in range(f_thres - 1):
        zn = fz(z)
        r = ((zn - z).norm() / (1e-6 + z.norm())).item()
        z = (1 - tau) * z + tau * zn
        if r < tol:
            break
    return z, count + 1, r


def simultaneous(fam, pe, ids, f_thres, tol, tau):
    """Simultaneous eval: the loop on the full sequence, then one more f call. logits (B,T,V), steps, r."""
    u = injection(pe, ids)
    z0 = torch.zeros(ids.shape + (fam.c["d_model"],), dtype=u.dtype)
    z, steps, r = eval_loop(lambda zz: f_full(fam, pe, zz, u), z0, f_thres, tol, tau)
    return f_full(fam, pe, z, u) @ pe["word_emb.emb.weight"].t(), steps, r


def sequential(fam, pe, ids, f_thres, tol, tau):
    """Sequential eval (§4.1): per token the loop with read-only caches, then the final call commits.
    Returns logits (B,T,V) and the per-token loop counts (T)."""
    Bsz, T = ids.shape
    u = injection(pe, ids)
    cache = fam.new_cache(Bsz, u.dtype)
    outs, steps = [], []
    for t in range(T):
        z0 = torch.zeros(Bsz, fam.c["d_model"], dtype=u.dtype)
        z, s, _ = eval_loop(lambda zz: f_step(fam, pe, zz, u[:, t], t, cache)[0], z0, f_thres, tol, tau)
        out, news = f_step(fam, pe, z, u[:, t], t, cache)
        for i, new in enumerate(news):
            fam.commit(cache, i, new)
        outs.append(out @ pe["word_emb.emb.weight"].t())
        steps.append(s)
    return torch.stack(outs, 1), steps


# ---------------------------------------------------------------------------------------------
# Training forwards (§5.1 phantom, §5.2 unrolled) and the IFT gradient
# ---------------------------------------------------------------------------------------------

def phantom_fwd(fam, p, ids, targets, k, tau, solve_iter=None, z_init=None, acts=None):
    """Sliced core: no-grad solve (or the given z_init), detach, k steps z = τ f(z,u) + (1−τ) z.
    Returns (logits, loss); acts (if given) receives the solve output and its statistics."""
    pe = effective(p)
    u = injection(pe, ids)
    if z_init is None:
        with torch.no_grad():
            z0 = torch.zeros(ids.shape + (fam.c["d_model"],), dtype=u.dtype)
            z_init, st = picard_solve(lambda zz: f_full(fam, pe, zz, u), z0, solve_iter, DEQ["f_tol"])
        if acts is not None:
            acts.update({"z": z_init, "rel": st["rel"], "abs": st["abs"], "step": st["step"],
                         "iters": torch.tensor(st["iters"])})
    z = z_init.detach()
    for _ in range(k):
        z = tau * f_full(fam, pe, z, u) + (1 - tau) * z
    logits = z @ pe["word_emb.emb.weight"].t()
    return logits, cm.masked_ce(logits, targets)


def unrolled_fwd(fam, p, ids, targets, n_iter, tau):
    """z = f(0,u); (n_iter-1) times z = (1−τ) z + τ f(z,u); ordinary autograd through every call."""
    pe = effective(p)
    u = injection(pe, ids)
    z = f_full(fam, pe, torch.zeros(ids.shape + (fam.c["d_model"],), dtype=u.dtype), u)
    for _ in range(n_iter - 1):
        z = (1 - tau) * z + tau * f_full(fam, pe, z, u)
    logits = z @ pe["word_emb.emb.weight"].t()
    return logits, cm.masked_ce(logits, targets)


def ift_grads(fam, p, ids, targets, z_star, iters=400):
    """IFT gradient at the fixed point z*: y = g + Jᵀy (g = dL/dz*, J = ∂f/∂z at z*) by fixed-point
    iteration of autograd vjps, then dL/dθ = y·∂f/∂θ + the direct (tied head) term."""
    work = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
    pe = effective(work)
    u = injection(pe, ids)
    zs = z_star.detach().clone().requires_grad_(True)
    fz = f_full(fam, pe, zs, u)
    loss = cm.masked_ce(zs @ pe["word_emb.emb.weight"].t(), targets)
    names = list(work.keys())
    gz, *direct = torch.autograd.grad(loss, [zs] + [work[n] for n in names], allow_unused=True)
    y = gz.clone()
    for _ in range(iters):
        yn = gz + torch.autograd.grad(fz, zs, y, retain_graph=True)[0]
        done = (yn - y).norm() <= 1e-15 * yn.norm()
        y = yn
        if done:
            break
    assert done, "adjoint solve did not converge"
    indirect = torch.autograd.grad(fz, [work[n] for n in names], y)
    return {n: ind + (d if d is not None else 0) for n, ind, d in zip(names, indirect, direct)}


def flat(grads, names):
    return torch.cat([grads[n].reshape(-1) for n in names])


# ---------------------------------------------------------------------------------------------
# Self-checks
# ---------------------------------------------------------------------------------------------

def check_weight_norm(p):
    """Our W = g v/‖v‖ equals torch._weight_norm(v, g, 0), and g has torch.nn.utils.weight_norm's shape."""
    pe = effective({k: v.double() for k, v in p.items()})
    for k, v in p.items():
        if not k.endswith(".weight_v"):
            continue
        g = p[k[:-1] + "g"]
        ref = torch._weight_norm(v.double(), g.double(), 0)
        assert cm.rel_err(pe[k[:-2]], ref) < 1e-15, k
        mod = torch.nn.Conv1d(v.shape[0], v.shape[0], v.shape[2], groups=v.shape[0]) if v.dim() == 3 \
            else torch.nn.Linear(v.shape[1], v.shape[0])
        assert torch.nn.utils.weight_norm(mod).weight_g.shape == g.shape, (k, g.shape)
    print("weight norm: g v/|v| == torch._weight_norm(v, g, 0); weight_g shapes match torch")


def check_gradcheck(fam_cls, c):
    """float64 gradcheck of one f call: inputs z, e (embeddings feeding u) and every parameter except
    the embedding (injection norm/g/v/bias, all layer g/v and plain tensors, norm_f)."""
    fam = fam_cls(c)
    p = {k: v.double() for k, v in init_implicit(fam, 3).items() if k != "word_emb.emb.weight"}
    names = list(p.keys())
    g = torch.Generator().manual_seed(9)
    z = torch.randn(2, 5, c["d_model"], generator=g, dtype=torch.float64, requires_grad=True)
    e = torch.randn(2, 5, c["d_model"], generator=g, dtype=torch.float64, requires_grad=True)

    def fcall(z_, e_, *ws):
        pe = effective(dict(zip(names, ws)))
        return f_full(fam, pe, z_, inject(pe, e_))
    assert torch.autograd.gradcheck(fcall, (z, e, *[p[k].requires_grad_(True) for k in names]),
                                    eps=1e-6, atol=1e-7)
    print(f"gradcheck: one {fam.model} f call incl. injection and weight norm ({len(names)} tensors) ok (float64)")


def check_residual(fam, pe, ids, n_iter=300):
    """Long undamped solve: each sample's relative residual decreases monotonically (until it reaches
    rounding level) and ends below 1e-6. Returns the converged z*."""
    u = injection(pe, ids)
    z0 = torch.zeros(ids.shape + (fam.c["d_model"],), dtype=torch.float64)
    zs, st = picard_solve(lambda zz: f_full(fam, pe, zz, u), z0, n_iter, 0.0)
    h = st["hist"]                                                   # (iters, B)
    live = h[:-1] > 1e-13
    assert bool(((h[1:] < h[:-1]) | ~live).all()), "residual not monotone"
    assert st["rel"].max() < 1e-6, st["rel"]
    k = int((h.max(1).values > 1e-8).sum())                          # rate measured around 1e-8
    rate = (h[k - 1] / h[k - 11]).max().item() ** 0.1
    print(f"{fam.model}: undamped solve residual monotone, {n_iter} iters -> max rel {st['rel'].max():.1e}; "
          f"after 12: {h[11].max():.2e}; contraction rate {rate:.3f}/step")
    return zs


def check_phantom_vs_ift(fam, p64, ids, targets, z_star, grads_train):
    """Phantom gradient from the converged z* with k = 3 and 30 against the IFT gradient."""
    names = list(p64.keys())
    ift = flat(ift_grads(fam, p64, ids, targets, z_star), names)
    res = {}
    for k in (3, 30, 100):
        _, _, gk, _ = cm.loss_and_grads(p64, lambda pp, a: phantom_fwd(fam, pp, ids, targets, k, DEQ["tau"],
                                                                        z_init=z_star))
        res[k] = ((flat(gk, names) - ift).norm() / ift.norm()).item()
    res["train"] = ((flat(grads_train, names) - ift).norm() / ift.norm()).item()
    print(f"{fam.model}: phantom vs IFT grad, global rel L2 diff: k=3 {res[3]:.2e}, k=30 {res[30]:.2e}, "
          f"k=100 {res[100]:.2e} (from converged z*); the written 12+3 training grads {res['train']:.2e}")
    assert res[30] < 1e-3 and res[30] < 1e-2 * res[3] and res[100] < 1e-9, res
    return res


def check_unrolled_fd(fam, p64, ids, targets, grads):
    """Unrolled grads (autograd) vs a central difference of the unrolled loss along a random direction."""
    g = torch.Generator().manual_seed(13)
    d = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in p64.items()}
    eps = 1e-5

    def loss_at(s):
        with torch.no_grad():
            return unrolled_fwd(fam, {k: v + s * d[k] for k, v in p64.items()}, ids, targets,
                                DEQ["pretrain_iter"], DEQ["tau"])[1].item()
    # 4th-order central difference: d moves every parameter by O(1), so the 2nd-order stencil's
    # truncation error (~1e-6 at eps 1e-5) would hide a wrong gradient term.
    fd = (8 * (loss_at(eps) - loss_at(-eps)) - (loss_at(2 * eps) - loss_at(-2 * eps))) / (12 * eps)
    an = sum((grads[k] * d[k]).sum() for k in p64).item()
    e = abs(fd - an) / abs(an)
    print(f"{fam.model}: unrolled grad . d = {an:.12f}, 4th-order central difference {fd:.12f} (rel {e:.1e})")
    assert e < 1e-8, (fd, an)


# ---------------------------------------------------------------------------------------------
# One reference file
# ---------------------------------------------------------------------------------------------

def compute_all(fam, p, ids, targets):
    """Every written output for parameters p (float64 for the reference, float32 for the drift report)."""
    D = DEQ
    r = {}
    r["logits"], r["loss"], r["grads"], acts = cm.loss_and_grads(
        p, lambda pp, a: phantom_fwd(fam, pp, ids, targets, D["grad"], D["tau"], solve_iter=D["f_max_iter"], acts=a))
    r["solve"] = acts
    r["u_logits"], r["u_loss"], r["u_grads"], _ = cm.loss_and_grads(
        p, lambda pp, a: unrolled_fwd(fam, pp, ids, targets, D["pretrain_iter"], D["tau"]))
    with torch.no_grad():
        pe = effective(p)
        r["u"] = injection(pe, ids)
        r["eval"] = simultaneous(fam, pe, ids, D["eval_f_max_iter"], D["eval_f_tol"], D["tau"])
        r["seq"] = sequential(fam, pe, ids, D["eval_f_max_iter"], D["eval_f_tol"], D["tau"])
        r["eval_conv"] = simultaneous(fam, pe, ids, D["conv_f_max_iter"], D["conv_f_tol"], D["tau"])
        r["seq_conv"] = sequential(fam, pe, ids, D["conv_f_max_iter"], D["conv_f_tol"], D["tau"])
    return r


def float32_drift(fam, p, ids, targets, r64):
    """How far the same procedures in float32 torch land from the float64 reference (C tolerances)."""
    r32 = compute_all(fam, p, ids, targets)
    rows = [f"solve.z {cm.rel_err(r32['solve']['z'].double(), r64['solve']['z']):.1e}",
            f"solve.rel_residual {cm.rel_err(r32['solve']['rel'], r64['solve']['rel']):.1e}"]
    for tag, a, b in (("out.logits", r32["logits"], r64["logits"]),
                      ("unrolled.logits", r32["u_logits"], r64["u_logits"]),
                      ("eval.logits", r32["eval"][0], r64["eval"][0]), ("seq.logits", r32["seq"][0], r64["seq"][0]),
                      ("eval_conv.logits", r32["eval_conv"][0], r64["eval_conv"][0]),
                      ("seq_conv.logits", r32["seq_conv"][0], r64["seq_conv"][0])):
        rows.append(f"{tag} {cm.rel_err(a.double(), b):.1e}")
    for tag, key in (("grad", "grads"), ("unrolled.grad", "u_grads")):
        w = max((cm.rel_err(r32[key][k].double(), r64[key][k]), k) for k in r64[key])
        rows.append(f"worst {tag} {w[0]:.1e} ({w[1]})")
    print(f"{fam.model}: float32 torch vs float64 reference: " + ", ".join(rows))
    print(f"{fam.model}: float32 loop counts: eval {r32['eval'][1]}, eval_conv {r32['eval_conv'][1]}, "
          f"seq_conv max {max(r32['seq_conv'][1])}")


def config_of(fam, seed):
    c = dict(fam.c)
    c.update(backbone_type="implicit", d_injection=fam.K, do_weight_norm=True, weight_norm_dim=0, dropout=0.0,
             init_z="zeros", seed=seed, gain_scale={"in": GAIN_IN, "out": GAIN_OUT, "injection": GAIN_INJ,
                                                    "in_names": list(fam.gain_in), "out_names": list(fam.gain_out)})
    c.update(DEQ)
    return c


def generate(fam, seed):
    c = fam.c
    torch.manual_seed(seed)
    p = init_implicit(fam, seed)
    ids, targets = cm.make_batch(c["batch"], c["seq_len"], c["vocab"])
    check_weight_norm(p)
    p64 = {k: v.double() for k, v in p.items()}
    z_star = check_residual(fam, effective(p64), ids)
    r = compute_all(fam, p64, ids, targets)
    st = r["solve"]
    # f_tol 1e-12 is never met in 12 steps, and with a contraction the last iterate is the best one.
    assert int(st["iters"]) == DEQ["f_max_iter"] and bool((st["step"] == DEQ["f_max_iter"]).all()), st
    assert r["eval"][1] == DEQ["eval_f_max_iter"] - 1 and set(r["seq"][1]) == {DEQ["eval_f_max_iter"] - 1}
    e_dual = cm.rel_err(r["seq_conv"][0], r["eval_conv"][0])
    e_fix = cm.rel_err(r["eval_conv"][0], z_star @ p64["word_emb.emb.weight"].t())
    print(f"{fam.model}: eval loop steps {r['eval'][1]} (r {r['eval'][2]:.2e}); converged loops: simultaneous "
          f"{r['eval_conv'][1]} steps, sequential {min(r['seq_conv'][1])}..{max(r['seq_conv'][1])} per token; "
          f"seq_conv vs eval_conv rel err {e_dual:.1e}, eval_conv vs z* logits {e_fix:.1e}; "
          f"f_thres 8: seq vs eval {cm.rel_err(r['seq'][0], r['eval'][0]):.1e}")
    assert e_dual < 1e-9 and e_fix < 1e-9, (e_dual, e_fix)
    check_unrolled_fd(fam, p64, ids, targets, r["u_grads"])
    check_phantom_vs_ift(fam, p64, ids, targets, z_star, r["grads"])
    float32_drift(fam, p, ids, targets, r)
    write(fam, seed, p, ids, targets, r)


def write(fam, seed, p, ids, targets, r):
    """Tensors in the README's implicit layout; measured check values are printed, not stored, so the
    file bytes do not depend on the last digits of a diagnostic."""
    t = {k: v.float() for k, v in p.items()}
    t["input.ids"] = ids.to(torch.int32)
    t["input.targets"] = targets.to(torch.int32)
    t["act.u"] = r["u"].float()
    t["solve.z"] = r["solve"]["z"].float()
    t["solve.rel_residual"] = r["solve"]["rel"].float()
    t["solve.abs_residual"] = r["solve"]["abs"].float()
    t["out.logits"] = r["logits"].float()
    t["out.loss"] = r["loss"].float().reshape(1)
    t.update({"grad." + k: g.float() for k, g in r["grads"].items()})
    t["unrolled.logits"] = r["u_logits"].float()
    t["unrolled.loss"] = r["u_loss"].float().reshape(1)
    t.update({"unrolled.grad." + k: g.float() for k, g in r["u_grads"].items()})
    for tag in ("eval", "eval_conv"):
        t[tag + ".logits"] = r[tag][0].float()
        t[tag + ".steps"] = torch.tensor([r[tag][1]], dtype=torch.int32)
        if tag == "eval":
            t["eval.rel_diff"] = torch.tensor([r["eval"][2]], dtype=torch.float32)
    for tag in ("seq", "seq_conv"):
        t[tag + ".logits"] = r[tag][0].float()
        t[tag + ".steps"] = torch.tensor(r[tag][1], dtype=torch.int32)
    meta = {"format": "implicit.ref", "model": fam.model, "config": json.dumps(config_of(fam, seed), sort_keys=True),
            "deq": json.dumps(PROCEDURES, sort_keys=True),
            "generator": "tests/ref/gen_implicit.py", "torch_version": torch.__version__}
    path = os.path.join(HERE, fam.model + ".safetensors")
    size = cm.write_verified(path, t, meta)
    print(f"wrote {path}: {len(t)} tensors, {size} bytes, loss {r['loss'].item():.6f}, "
          f"unrolled loss {r['u_loss'].item():.6f}")


def mamba2_config(**kw):
    c = cm.config_base(vocab=32, d_model=32, n_layer=1, d_state=8, d_conv=4, expand=2, headdim=16,
                       batch=2, seq_len=10, chunk_size=64)
    c.update(kw)
    E, H, C, K = gm.dims(c)
    c.update(d_inner=0, mamba_nheads=H, d_ssm=E, ngroups=1, d_in_proj=K, conv_channels=C)
    return c


def llama_config(**kw):
    c = cm.config_base(vocab=32, d_model=32, n_layer=2, n_head=4, d_inner=128, rope_theta=500000.0,
                       batch=2, seq_len=10)
    c.update(kw)
    c.update(d_head=c["d_model"] // c["n_head"], mlp_hidden=gl.hidden(c))
    return c


def main():
    cm.setup_torch()
    check_gradcheck(Mamba2, mamba2_config(vocab=8, d_model=4, n_layer=2, d_state=3, headdim=4))
    check_gradcheck(Llama, llama_config(vocab=8, d_model=8, n_head=2, d_inner=12))
    generate(Mamba2(mamba2_config()), seed=5150)
    generate(Llama(llama_config()), seed=5151)


if __name__ == "__main__":
    main()
