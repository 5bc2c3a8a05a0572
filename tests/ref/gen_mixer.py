"""PyTorch reference for the Fixed-Point RNN channel mixers (spec fp-rnn §2), written from the spec.

What: one case per mixer type / option (householder, dplr, kronecker column-wise and spectral,
monarch, selectivedense, nonselective, mixture; identity / relu / silu; proj_rank -1 and > 0). For each
case `<c>`: the parameters under the C table's names (`<c>.proj_u.weight_g` ...), the inputs
`<c>.p` (M,dp) and `<c>.v` (M,d), the output `<c>.out` = Q(p_t) v_t per token, and the gradients of the
linear loss L = sum(<c>.wout * out): `<c>.grad.p`, `<c>.grad.v`, `<c>.grad.<param>` (every parameter
but the nonselective `base`, which is a fixed buffer in torch's `orthogonal` parametrisation).
Math in float64 from the float32 values, rounded once. Metadata `config` = the case table (JSON).
Self-checks: Kronecker against the explicit I - 2 (U^T kron W), DPLR r=1 == Householder r=1, the
Householder product against the explicit product of reflections, torch.autograd.gradcheck on every
case (float64), float32 drift.

Run with Debian's /usr/bin/python3 (PyTorch 1.13): /usr/bin/python3 tests/ref/gen_mixer.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

from common import HERE, setup_torch, write_verified, rel_err

M = 5
SEED = 2718

# name, type, d, dp, rank, ac, proj_rank, kron_norm, eps
CASES = [
    ("hh", "householder", 16, 32, 3, "silu", -1, "column-wise", 1e-5),
    ("hhlr", "householder", 16, 32, 2, "relu", 4, "column-wise", 1e-6),
    ("dplr", "dplr", 16, 32, 2, "identity", -1, "column-wise", 1e-5),
    ("kron", "kronecker", 12, 24, 1, "silu", -1, "column-wise", 1e-5),
    ("kspec", "kronecker", 16, 32, 1, "silu", 3, "spectral", 1e-6),
    ("mon", "monarch", 16, 32, 4, "silu", -1, "column-wise", 1e-5),
    ("sd", "selectivedense", 12, 24, 1, "silu", -1, "column-wise", 1e-5),
    ("nons", "nonselective", 16, 32, 1, "silu", -1, "column-wise", 1e-5),
    ("mix", "mixture", 12, 24, 3, "silu", 2, "column-wise", 1e-6),
]


def kron_factor(d):
    s = int(math.isqrt(d))
    while d % s:
        s -= 1
    return s, d // s


def projections(typ, d, r):
    """[(name, out, has_bias_and_sigmoid)] of one simple mixer (spec §2.1-§2.5)."""
    if typ in ("householder", "dplr"):
        return [("proj_u", r * d, False), ("proj_alpha", r, True)]
    if typ == "kronecker":
        m1, m2 = kron_factor(d)
        return [("proj_k", m1 * (m1 + 1) // 2 + m2 * (m2 + 1) // 2, False), ("proj_d", m1 + m2, True)]
    if typ == "monarch":
        return [("proj_m", d // r * (r * (r + 1) // 2), False), ("proj_alpha", d // r, True)]
    if typ == "selectivedense":
        return [("proj_l", d * (d + 1) // 2, False)]
    raise ValueError(typ)


def subs(typ, r, eps, kron_norm):
    """[(prefix, type, rank, spectral, eps)]: the simple mixers a case is made of (§2.7 for mixture)."""
    if typ == "mixture":
        return [(f"sub{k}.", "kronecker" if k % 2 else "householder", 1, False, 1e-5) for k in range(r)]
    return [("", typ, r, typ == "kronecker" and kron_norm == "spectral", eps)]


def make_params(case, gen):
    name, typ, d, dp, r, ac, R, kn, eps = case
    P = {}
    if typ == "nonselective":
        P["skew"] = 0.3 * torch.randn(d, d, generator=gen)
        A = (torch.rand(d, d, generator=gen) * 2 - 1) / math.sqrt(d)
        Q, Rm = torch.linalg.qr(A.double())
        Q = Q * torch.sign(torch.diagonal(Rm)).unsqueeze(0)  # R with a positive diagonal
        P["base"] = Q.float()
        return P
    for pre, styp, sr, _, _ in subs(typ, r, eps, kn):
        for pname, out, gate in projections(styp, d, sr):
            lins = [(f"{pre}{pname}", dp, out)] if R < 0 else [(f"{pre}{pname}.0", dp, R), (f"{pre}{pname}.1", R, out)]
            for k, (ln, fin, fout) in enumerate(lins):
                v = (torch.rand(fout, fin, generator=gen) * 2 - 1) / math.sqrt(fin)
                # g != ||v||, so a port that ignores g or the division fails
                g = v.norm(dim=1, keepdim=True) * (1 + 0.1 * torch.randn(fout, 1, generator=gen))
                if R > 0 and k == 0:
                    g = g * 2.0  # keep the factorised projection's output O(1)
                P[ln + ".weight_g"] = g
                P[ln + ".weight_v"] = v
                if gate and k == len(lins) - 1:
                    P[ln + ".bias"] = 0.3 * torch.randn(fout, generator=gen)
    return P


def wn(x, P, ln):
    g, v = P[ln + ".weight_g"], P[ln + ".weight_v"]
    W = g * v / v.norm(dim=1, keepdim=True)
    y = x @ W.T
    return y + P[ln + ".bias"] if ln + ".bias" in P else y


def proj(x, P, ln, R):
    return wn(x, P, ln) if R < 0 else wn(wn(x, P, ln + ".0"), P, ln + ".1")


def act(x, ac):
    return {"identity": lambda t: t, "relu": F.relu, "silu": F.silu}[ac](x)


def normalize(x, eps):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def triu(vals, m):
    """(..., m(m+1)/2) -> (..., m, m) upper triangular, filled in torch.triu_indices order."""
    L = vals.new_zeros(vals.shape[:-1] + (m, m))
    iu = torch.triu_indices(m, m)
    L[..., iu[0], iu[1]] = vals
    return L


def spectral_est(A):
    """§2.3: 16 alternating steps, u = normalize(A v) on even, v = normalize(A u) on odd; s = u^T A v."""
    m = A.shape[-1]
    v = A.new_ones(A.shape[:-1]) / math.sqrt(m)
    u = None
    for it in range(16):
        if it % 2 == 0:
            u = F.normalize((A @ v.unsqueeze(-1)).squeeze(-1), dim=-1)
        else:
            v = F.normalize((A @ u.unsqueeze(-1)).squeeze(-1), dim=-1)
    return (u * (A @ v.unsqueeze(-1)).squeeze(-1)).sum(-1)


def householder(p, v, P, pre, r, ac, R, eps, dplr=False):
    d = v.shape[-1]
    U = act(proj(p, P, pre + "proj_u", R), ac).reshape(-1, r, d)
    u = normalize(U, eps)
    alpha = torch.sigmoid(proj(p, P, pre + "proj_alpha", R))
    out = v
    for i in range(r):
        src = v if dplr else out  # DPLR: every term on the original v
        out = out - 2 * alpha[:, i:i + 1] * u[:, i] * (u[:, i] * src).sum(-1, keepdim=True)
    return out


def kron_factors(p, P, pre, d, ac, R, eps, spectral):
    m1, m2 = kron_factor(d)
    s1 = m1 * (m1 + 1) // 2
    Pk = act(proj(p, P, pre + "proj_k", R), ac)
    delta = torch.sigmoid(proj(p, P, pre + "proj_d", R))
    fac = []
    for vals, m, dl in ((Pk[:, :s1], m1, delta[:, :m1]), (Pk[:, s1:], m2, delta[:, m1:])):
        L = triu(vals, m)
        K = L @ L.transpose(-1, -2)
        K = K / K.norm(dim=-1, keepdim=True).clamp_min(eps)  # row normalisation ("column-wise")
        if spectral:
            K = K / (spectral_est(K) + eps)[:, None, None]
        fac.append(dl.unsqueeze(-1) * K)  # diag(delta) K
    return fac[0], fac[1], m1, m2


def kronecker(p, v, P, pre, ac, R, eps, spectral):
    d = v.shape[-1]
    U, W, m1, m2 = kron_factors(p, P, pre, d, ac, R, eps, spectral)
    X = v.reshape(-1, m1, m2)
    return (X - 2 * U.transpose(-1, -2) @ X @ W.transpose(-1, -2)).reshape(-1, d)


def monarch(p, v, P, b, ac, R, eps):
    d = v.shape[-1]
    K = d // b
    L = triu(act(proj(p, P, "proj_m", R), ac).reshape(-1, K, b * (b + 1) // 2), b)
    Mm = L @ L.transpose(-1, -2)
    c = Mm.norm(dim=-2).max(dim=-1).values  # largest column norm per block
    Mh = Mm / (c + eps)[..., None, None]
    alpha = torch.sigmoid(proj(p, P, "proj_alpha", R))
    vb = v.reshape(-1, K, b)
    return (vb - alpha.unsqueeze(-1) * (Mh @ vb.unsqueeze(-1)).squeeze(-1)).reshape(-1, d)


def selectivedense(p, v, P, ac, R, eps):
    d = v.shape[-1]
    L = triu(act(proj(p, P, "proj_l", R), ac), d)
    Mm = L @ L.transpose(-1, -2)
    w = v.new_ones(v.shape) / math.sqrt(d)
    e = None
    for _ in range(32):
        w = (Mm @ w.unsqueeze(-1)).squeeze(-1)
        e = w.norm(dim=-1, keepdim=True)
        w = w / (e + eps)
    Q = Mm / (e + eps).unsqueeze(-1)
    return (Q @ v.unsqueeze(-1)).squeeze(-1)


def mixer(case, P, p, v):
    name, typ, d, dp, r, ac, R, kn, eps = case
    if typ == "nonselective":
        S = P["skew"]
        O = P["base"] @ torch.matrix_exp(S - S.T)
        return v @ O.T
    out = v
    for pre, styp, sr, spec, seps in subs(typ, r, eps, kn):
        if styp in ("householder", "dplr"):
            out = householder(p, out, P, pre, sr, ac, R, seps, dplr=styp == "dplr")
        elif styp == "kronecker":
            out = kronecker(p, out, P, pre, ac, R, seps, spec)
        elif styp == "monarch":
            out = monarch(p, out, P, sr, ac, R, seps)
        else:
            out = selectivedense(p, out, P, ac, R, seps)
    return out


# ---- self-checks ------------------------------------------------------------------------------

def check_explicit(case, P, p, v):
    """Kronecker vs I - 2 (U^T kron W) on row-major vec; Householder vs the product of reflections."""
    name, typ, d, dp, r, ac, R, kn, eps = case
    out = mixer(case, P, p, v)
    if typ == "kronecker":
        U, W, _, _ = kron_factors(p, P, "", d, ac, R, eps, kn == "spectral")
        for t in range(p.shape[0]):
            Q = torch.eye(d, dtype=v.dtype) - 2 * torch.kron(U[t].T.contiguous(), W[t].contiguous())
            assert rel_err(out[t], Q @ v[t]) < 1e-12, name
    if typ == "householder":
        U = normalize(act(proj(p, P, "proj_u", R), ac).reshape(-1, r, d), eps)
        alpha = torch.sigmoid(proj(p, P, "proj_alpha", R))
        for t in range(p.shape[0]):
            Q = torch.eye(d, dtype=v.dtype)
            for i in range(r):
                Q = (torch.eye(d, dtype=v.dtype) - 2 * alpha[t, i] * torch.outer(U[t, i], U[t, i])) @ Q
            assert rel_err(out[t], Q @ v[t]) < 1e-12, name
    if typ == "householder" and R < 0:
        # DPLR r=1 == Householder r=1, on the first reflection's parameters
        P1 = dict(P)
        for k in ("weight_g", "weight_v"):
            P1["proj_u." + k] = P["proj_u." + k][:d]
            P1["proj_alpha." + k] = P["proj_alpha." + k][:1]
        P1["proj_alpha.bias"] = P["proj_alpha.bias"][:1]
        c1 = (name, "householder", d, dp, 1, ac, R, kn, eps)
        c2 = (name, "dplr", d, dp, 1, ac, R, kn, eps)
        assert rel_err(mixer(c1, P1, p, v), mixer(c2, P1, p, v)) < 1e-14


def main():
    setup_torch()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    tensors = {}
    table = []
    for case in CASES:
        name, typ, d, dp, r, ac, R, kn, eps = case
        P32 = make_params(case, gen)
        p32 = torch.randn(M, dp, generator=gen)
        v32 = torch.randn(M, d, generator=gen)
        w32 = torch.randn(M, d, generator=gen)
        P = {k: x.double().requires_grad_(k != "base") for k, x in P32.items()}
        p = p32.double().requires_grad_(True)
        v = v32.double().requires_grad_(True)
        out = mixer(case, P, p, v)
        (out * w32.double()).sum().backward()
        with torch.no_grad():
            check_explicit(case, {k: x.detach() for k, x in P.items()}, p.detach(), v.detach())
        # float64 gradcheck of the whole map, on p, v and every trained parameter
        keys = [k for k in P if k != "base"]
        fixed = {k: x.detach() for k, x in P.items()}

        def f(pp, vv, *ws):
            Q = dict(fixed)
            Q.update(dict(zip(keys, ws)))
            return mixer(case, Q, pp, vv)
        ins = [p.detach().clone().requires_grad_(True), v.detach().clone().requires_grad_(True)] + \
              [fixed[k].clone().requires_grad_(True) for k in keys]
        assert torch.autograd.gradcheck(f, ins, eps=1e-6, atol=1e-6, rtol=1e-5), name
        # float32 drift: what a float32 port should expect
        out32 = mixer(case, P32, p32, v32)
        print(f"{name:6s} {typ:15s} d={d} dp={dp} r={r} ac={ac} proj_rank={R} {kn}: "
              f"|out| {out.abs().max().item():.3g}, float32 drift {rel_err(out32.double(), out.detach()):.2e}")
        for k, x in P32.items():
            tensors[f"{name}.{k}"] = x.float()
        tensors[f"{name}.p"] = p32
        tensors[f"{name}.v"] = v32
        tensors[f"{name}.wout"] = w32
        tensors[f"{name}.out"] = out.detach().float()
        tensors[f"{name}.grad.p"] = (p.grad if p.grad is not None else torch.zeros_like(p)).float()
        tensors[f"{name}.grad.v"] = v.grad.float()
        for k in keys:
            tensors[f"{name}.grad.{k}"] = P[k].grad.float()
        table.append({"name": name, "mixer_type": typ, "d": d, "dp": dp, "mixer_rank": r, "mixer_ac": ac,
                      "mixer_proj_rank": R, "kron_norm": kn, "eps": eps, "M": M})
    meta = {"format": "implicit.ref", "model": "mixer", "generator": "tests/ref/gen_mixer.py",
            "torch_version": torch.__version__, "config": json.dumps(table),
            "loss": "sum(<c>.wout * <c>.out); grads in float64, rounded once"}
    path = os.path.join(HERE, "mixer.safetensors")
    size = write_verified(path, tensors, meta)
    print(f"wrote {path}: {len(tensors)} tensors, {size} bytes")


if __name__ == "__main__":
    main()
