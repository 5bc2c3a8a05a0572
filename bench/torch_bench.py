#!/usr/bin/python3
"""PyTorch reference timings for `make bench`: layers, training steps, implicit models.

What: one Mamba2 block (RMSNorm + mixer + residual, spec §1.3/§1.4) at two sizes and one Llama block
(RMSNorm + RoPE causal attention + residual, RMSNorm + SwiGLU + residual, §1.5/§1.6), B=32, T=256,
float32 on the CPU. The Mamba2 scan uses the chunked SSD form (chunk 64, matmuls inside a chunk, a
short loop over chunk boundaries), the fastest reasonable pure-PyTorch formulation; a python loop over
256 timesteps would be a strawman. The conv is F.conv1d(groups=C). Attention is explicit
softmax(q k^T / sqrt(d) + mask) v (torch 1.13 has no fused SDPA).
Output: one parseable line per case, e.g.
  torch mamba2_small fwdbwd_tok_s=12345.6 ms=663.1 B=32 T=256 D=64 N=16 E=128 P=16 chunk=64 threads=2
        blas=openblas-pthread blas_threads=2 blas_core=Haswell torch_blas_info=generic torch=1.13.0a0   (one line)
tokens/s = B*T / (median seconds of one forward+backward), after one warm-up run.
Implicit Mamba2 LM (imp_* cases, bench/bench_implicit.c has the same table and semantics; spec
implicit-lm §2-§6; same math as tests/ref/gen_implicit.py, rel. error ~1e-6 when written): 1 layer, V=240, weight norm W = g v/|v|
recomputed once per step, injection u = Linear(RMSNorm(emb)) + bias added to in_proj's output, f = norm_f
(block(z, u)), tau 0.8, tolerance 0 so no loop stops early:
  imp_train_*  "32+4": 32 undamped Picard calls under no_grad (per-sample lowest residual kept), 4 relaxed
               steps with autograd, tied head + CE, backward, clip 1, AdamW           -> step_tok_s
  imp_eval_*   damped evaluation loop, 31 calls + the final call, logits            -> eval_tok_s
  imp_gen_b*   greedy generation of 256 tokens, per token 7 loop calls of the Mamba2 step form with
               conv/ssm caches read-only + 1 committing call                          -> gen_tok_s (all
               sequences' tokens per second) and gen_ms_tok
Language models at the tinyshakespeare sizes (lm_llama, lm_mamba2, lm_imp_mamba2; bench/bench_lm.c has
the same cases and semantics, described at run_lm_cases' section): 4 layers, D 128, byte vocabulary,
training step at B 12 x T 64 (lm_*_train -> train_tok_s) and batch-1 greedy generation of 256 tokens
with a recurrent step (KV cache / conv + SSM state; lm_*_gen -> gen_tok_s); generation only for a Llama
at the shapes of llama2.c's stories15M and of a 110M model (lm_stories15m, lm_llama110m; V 32000).
Out of scope: GPUs, bf16, Anderson/IFT training, implicit Llama, FP-Mamba LM.

Run with Debian's torch: /usr/bin/python3 bench/torch_bench.py [--threads N] [--quick]
BLAS: Debian's python3-torch is built with BLAS_INFO=generic, i.e. it calls whatever libblas.so.3 the
alternatives system selects. To use OpenBLAS (libopenblas0-pthread):
  update-alternatives --set libblas.so.3-x86_64-linux-gnu \
      /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
(the state on the project machine when this was written), or, without root,
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3. The script finds which file provides
the soname libblas.so.3 in /proc/self/maps after a matmul and prints it (blas=openblas-pthread |
netlib-reference | ...), plus OpenBLAS's own thread count and kernel (blas_core). Where OpenBLAS would
pick its generic kernel on an AVX2 / AVX-512 host (a processor newer than its tables), OPENBLAS_CORETYPE
is set to Haswell / SkylakeX before torch loads (blas_core_set=, blas_core_default= say so); a
variable set by the caller is kept. --threads N sets torch.set_num_threads(N) and
OMP/OPENBLAS_NUM_THREADS=N before torch loads. On a loaded machine, more threads than free cores make
OpenMP spin-wait, and the numbers then say more about the load than about torch.
"""
import argparse
import ctypes
import math
import os
import sys
import time

# Implicit Mamba2 cases, the same table as bench/bench_implicit.c (the large ones at B=8: at B=32 one
# training step here takes about 25 s on one core):
#   name: (kind, size, B, T (generated tokens for "gen"), timed repeats, timed repeats with --quick)
IMP_CASES = {
    "imp_train_small": ("train", "small", 32, 256, 5, 2),
    "imp_train_large": ("train", "large", 8, 256, 3, 2),
    "imp_eval_small": ("eval", "small", 32, 256, 5, 2),
    "imp_eval_large": ("eval", "large", 8, 256, 3, 2),
    "imp_gen_b1": ("gen", "small", 1, 256, 5, 2),
    "imp_gen_b32": ("gen", "small", 32, 256, 5, 2),
}
IMP_SIZES = {"small": (64, 16, 128, 16), "large": (256, 128, 1024, 64)}   # D, N, E, P
IMP_V, IMP_TAU, IMP_SOLVE, IMP_GRAD, IMP_EVAL, IMP_GEN = 240, 0.8, 32, 4, 32, 8


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="torch.set_num_threads and OpenBLAS/OpenMP pool size (default: all cores)")
    ap.add_argument("--quick", action="store_true",
                    help="1 warm-up + 2 timed repeats (default 1 + 5; imp_*_large, lm_*: 1 + 3)")
    ap.add_argument("--cases", default="mamba2_small,mamba2_large,llama,train_small,train_large," + ",".join(IMP_CASES)
                    + ",lm_llama,lm_mamba2,lm_imp_mamba2,lm_stories15m,lm_llama110m",
                    help="comma-separated subset (lm_X: both lm_X_train and lm_X_gen)")
    return ap.parse_args(argv)


# OpenBLAS's x86-64 kernels for AVX2 + FMA and for AVX-512 (the names openblas_get_corename()
# reports; the same list as src/kernels/cpu/gemm.c). A DYNAMIC_ARCH OpenBLAS, as Debian's, gives a
# processor newer than its tables a generic SSE3 kernel ("Prescott") at 15-20% of the FMA peak.
WIDE_OPENBLAS_CORES = {"haswell", "zen", "dhyana", "skylakex", "cooperlake", "sapphirerapids"}
CORE_NOTE = ""


def openblas_core_for_host():
    """The OPENBLAS_CORETYPE that gives this host's OpenBLAS (torch's BLAS) the kernel of the host's
    ISA when it would pick a generic one, else None. Asked of libblas.so.3 in a child process, so
    that this one's OpenBLAS loads only once the variable is set."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return None, ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None, ""
    avx512, avx2 = "avx512f" in flags, "avx2" in flags and "fma" in flags
    if not (avx512 or avx2):
        return None, ""
    import subprocess
    probe = ("import ctypes; lib = ctypes.CDLL('libblas.so.3'); "
             "lib.openblas_get_corename.restype = ctypes.c_char_p; print(lib.openblas_get_corename().decode())")
    try:
        core = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, OPENBLAS_NUM_THREADS="1")).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, ""
    if not core or core.lower() in WIDE_OPENBLAS_CORES:
        return None, ""
    return ("SkylakeX" if avx512 else "Haswell"), core


if __name__ == "__main__":
    ARGS = parse_args()
    # OpenBLAS/OpenMP read their thread counts once at load: set them before torch is imported.
    if ARGS.threads > 0:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(ARGS.threads)
    # ... and OpenBLAS its kernel: not the generic one where it does not know the processor
    _core, _generic = openblas_core_for_host()
    if _core:
        os.environ["OPENBLAS_CORETYPE"] = _core
        CORE_NOTE = f" blas_core_set={_core} blas_core_default={_generic}"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Layers (own words, same math as tests/ref/gen_*.py)
# ---------------------------------------------------------------------------------------------

def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def ssd_chunked(xs, dt, A, Bm, Cm, Dk, chunk=64):
    """Chunked SSD evaluation of the Mamba2 scan (spec §1.4, "equivalent chunked form").
    xs (B,T,H,P), dt (B,T,H), A (H) < 0, Bm/Cm (B,T,N), Dk (H) -> y (B,T,H,P), final state (B,H,P,N).
    Inside a chunk of length Q with cumulative log-decay c_t = sum_{s<=t} dt_s A:
      y_t = sum_{s<=t} (C_t.B_s) exp(c_t - c_s) dt_s x_s  +  exp(c_t) C_t.S_in  +  D x_t
      S_out = exp(c_Q) S_in + sum_s exp(c_Q - c_s) dt_s x_s B_s^T
    T is zero-padded to a multiple of `chunk` (dt = 0 there, so padding changes nothing before it)."""
    Bsz, T, H, P = xs.shape
    N = Bm.shape[-1]
    pad = (-T) % chunk
    if pad:
        xs, dt = F.pad(xs, (0, 0, 0, 0, 0, pad)), F.pad(dt, (0, 0, 0, pad))
        Bm, Cm = F.pad(Bm, (0, 0, 0, pad)), F.pad(Cm, (0, 0, 0, pad))
    nc, Q = (T + pad) // chunk, chunk
    xdt = (xs * dt[..., None]).reshape(Bsz, nc, Q, H, P).permute(0, 3, 1, 2, 4)      # (B,H,c,Q,P)
    a = (dt * A).reshape(Bsz, nc, Q, H).permute(0, 3, 1, 2)                            # (B,H,c,Q)
    cum = torch.cumsum(a, dim=-1)                                                      # (B,H,c,Q)
    Bc = Bm.reshape(Bsz, 1, nc, Q, N)
    Cc = Cm.reshape(Bsz, 1, nc, Q, N)
    # Intra-chunk: causal decay matrix exp(c_t - c_s) for s <= t, zero above the diagonal
    # (masked before exp: c_t - c_s > 0 there and could overflow).
    seg = cum[..., :, None] - cum[..., None, :]                                        # (B,H,c,Q,Q)
    causal = torch.ones(Q, Q, dtype=torch.bool, device=xs.device).tril()
    decay = torch.exp(seg.masked_fill(~causal, float("-inf")))
    scores = (Cc @ Bc.transpose(-1, -2)) * decay                                       # (B,H,c,Q,Q)
    y = scores @ xdt                                                                   # (B,H,c,Q,P)
    # Per-chunk state contributions (P,N), then the short recurrence over chunk boundaries.
    to_end = torch.exp(cum[..., -1:] - cum)                                            # (B,H,c,Q)
    contrib = (xdt * to_end[..., None]).transpose(-1, -2) @ Bc                         # (B,H,c,P,N)
    chunk_decay = torch.exp(cum[..., -1])                                              # (B,H,c)
    S = xs.new_zeros(Bsz, H, P, N)
    entering = []
    for k in range(nc):
        entering.append(S)
        S = chunk_decay[:, :, k, None, None] * S + contrib[:, :, k]
    S_in = torch.stack(entering, dim=2)                                                # (B,H,c,P,N)
    # Inter-chunk: exp(c_t) * C_t . S_in
    y = y + torch.exp(cum)[..., None] * (Cc @ S_in.transpose(-1, -2))                  # (B,H,c,Q,P)
    y = y.permute(0, 2, 3, 1, 4).reshape(Bsz, nc * Q, H, P)[:, :T]
    return y + Dk[:, None] * xs[:, :T], S


def ssd_loop(xs, dt, A, Bm, Cm, Dk):
    """The sequential scan, used only by the self-check."""
    Bsz, T, H, P = xs.shape
    S = xs.new_zeros(Bsz, H, P, Bm.shape[-1])
    ys = []
    for t in range(T):
        S = torch.exp(dt[:, t] * A)[..., None, None] * S + \
            (dt[:, t, :, None] * xs[:, t])[..., None] * Bm[:, t, None, None, :]
        ys.append((S * Cm[:, t, None, None, :]).sum(-1) + Dk[:, None] * xs[:, t])
    return torch.stack(ys, 1), S


def mamba2_params(D, N, E, P, W=4):
    H = E // P
    C = E + 2 * N
    K = 2 * E + 2 * N + H
    u = lambda shape, b: ((torch.rand(shape) * 2 - 1) * b).requires_grad_(True)  # noqa: E731
    dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
    return {
        "norm": torch.ones(D, requires_grad=True),
        "in_proj": u((K, D), 1 / math.sqrt(D)),
        "conv_w": u((C, 1, W), 0.5), "conv_b": u((C,), 0.5),
        "dt_bias": (dt + torch.log(-torch.expm1(-dt))).requires_grad_(True),
        "A_log": torch.log(torch.rand(H) * 15 + 1).requires_grad_(True),
        "D": torch.ones(H, requires_grad=True),
        "gnorm": torch.ones(E, requires_grad=True),
        "out_proj": u((D, E), 1 / math.sqrt(E)),
        "dims": (D, N, E, P, H, C, W),
    }


def mamba2_mixer(p, xn, u3=None):
    """Mamba2 mixer of normalised xn (B,T,D) -> (B,T,D). u3: the implicit injection (spec implicit-lm
    §2.1) as its three row blocks (z, xBC, dt parts), added to in_proj's outputs, or None."""
    D, N, E, P, H, C, W = p["dims"]
    Bsz, T, _ = xn.shape
    # in_proj as three matmuls on row blocks of one weight: same math as one matmul + split, but the
    # backward avoids zero-filling and copying a (B,T,K) gradient for the split.
    Wz, Wx, Wdt = torch.split(p["in_proj"], [E, C, H], dim=0)
    z, xBC, dtraw = xn @ Wz.t(), xn @ Wx.t(), xn @ Wdt.t()
    if u3 is not None:
        z, xBC, dtraw = z + u3[0], xBC + u3[1], dtraw + u3[2]
    xBC = F.conv1d(F.pad(xBC.transpose(1, 2), (W - 1, 0)), p["conv_w"], p["conv_b"], groups=C)
    xBC = F.silu(xBC).transpose(1, 2)
    xs, Bm, Cm = torch.split(xBC, [E, N, N], dim=-1)
    dt = F.softplus(dtraw + p["dt_bias"])
    y, _ = ssd_chunked(xs.reshape(Bsz, T, H, P), dt, -torch.exp(p["A_log"]), Bm, Cm, p["D"], chunk=64)
    v = y.reshape(Bsz, T, E) * F.silu(z)
    return rmsnorm(v, p["gnorm"]) @ p["out_proj"].t()


def mamba2_block(p, x):
    """x + mixer(RMSNorm(x)); x (B,T,D)."""
    return x + mamba2_mixer(p, rmsnorm(x, p["norm"]))


def llama_params(D, n_head, d_inner):
    h = (2 * d_inner) // 3
    u = lambda shape, b: ((torch.rand(shape) * 2 - 1) * b).requires_grad_(True)  # noqa: E731
    return {
        "norm": torch.ones(D, requires_grad=True), "norm2": torch.ones(D, requires_grad=True),
        "wq": u((D, D), D ** -0.5), "wk": u((D, D), D ** -0.5), "wv": u((D, D), D ** -0.5),
        "wo": u((D, D), D ** -0.5),
        "w1": u((h, D), D ** -0.5), "w3": u((h, D), D ** -0.5), "fc2": u((D, h), h ** -0.5),
        "dims": (D, n_head, h),
    }


def rope_tables(T, dh, theta=500000.0):
    inv = theta ** (-torch.arange(0, dh, 2, dtype=torch.float32) / dh)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def llama_block(p, x, cos, sin, mask):
    D, nh, h = p["dims"]
    Bsz, T, _ = x.shape
    dh = D // nh
    xn = rmsnorm(x, p["norm"])
    heads = lambda t: t.reshape(Bsz, T, nh, dh).transpose(1, 2)  # noqa: E731
    q = rope(heads(xn @ p["wq"].t()), cos, sin)
    k = rope(heads(xn @ p["wk"].t()), cos, sin)
    v = heads(xn @ p["wv"].t())
    att = torch.softmax((q @ k.transpose(-1, -2)) * dh ** -0.5 + mask, dim=-1)
    o = (att @ v).transpose(1, 2).reshape(Bsz, T, D)
    x = x + o @ p["wo"].t()
    xn = rmsnorm(x, p["norm2"])
    return x + (F.silu(xn @ p["w1"].t()) * (xn @ p["w3"].t())) @ p["fc2"].t()


# ---------------------------------------------------------------------------------------------
# Implicit Mamba2 LM (spec implicit-lm §2-§6; same math as tests/ref/gen_implicit.py)
# ---------------------------------------------------------------------------------------------

IMP_WN = ("in_proj", "conv_w", "out_proj", "inj_w")   # every Linear / Conv1d weight (spec §6)


def imp_params(D, N, E, P, V):
    """1-layer implicit Mamba2 LM: the explicit block's tensors with every Linear/Conv1d weight as a
    weight-norm pair (name_g, name_v; g = ‖v row‖ so W = v at init), the injection u =
    Linear(RMSNorm(emb)) with bias, norm_f and the tied embedding."""
    blk = mamba2_params(D, N, E, P)
    K = 2 * E + 2 * N + E // P
    blk["inj_norm"] = torch.ones(D, requires_grad=True)
    blk["inj_w"] = (torch.rand(K, D) * 2 - 1) / math.sqrt(D)
    blk["inj_b"] = torch.zeros(K, requires_grad=True)
    blk["norm_f"] = torch.ones(D, requires_grad=True)
    blk["emb"] = (torch.randn(V, D) * 0.02).requires_grad_(True)
    for name in IMP_WN:
        v = blk.pop(name).detach().clone()
        blk[name + "_g"] = v.flatten(1).norm(dim=1).reshape((-1,) + (1,) * (v.dim() - 1)).requires_grad_(True)
        blk[name + "_v"] = v.requires_grad_(True)
    return blk


def imp_effective(p):
    """Effective weights W = g v/‖v‖ (per output row / conv channel), recomputed once per step
    (forward, evaluation or generated sequence), so autograd maps their gradient back to g and v."""
    pe = dict(p)
    for name in IMP_WN:
        g, v = p[name + "_g"], p[name + "_v"]
        pe[name] = g * v / v.flatten(1).norm(dim=1).reshape(g.shape)
    return pe


def imp_inject(pe, e):
    """u = Linear_inj(RMSNorm_inj(e)) + bias, e (..., D), as the three row blocks of in_proj's output
    (z, xBC, dt parts) so that adding it needs no split of a (B,T,K) tensor."""
    D, N, E, P, H, C, W = pe["dims"]
    xn = rmsnorm(e, pe["inj_norm"])
    ws, bs = torch.split(pe["inj_w"], [E, C, H], dim=0), torch.split(pe["inj_b"], [E, C, H])
    return tuple(xn @ w.t() + b for w, b in zip(ws, bs))


def imp_f(pe, z, u3):
    """f(z, u) = norm_f(z + mixer(RMSNorm(z), u)) on the whole sequence (chunked SSD)."""
    return rmsnorm(z + mamba2_mixer(pe, rmsnorm(z, pe["norm"]), u3), pe["norm_f"])


def imp_picard(f, z, iters, tol):
    """Gradient-free solve, torchdeq fixed_point_iter semantics (§3.1): undamped, per-sample relative
    residual ‖f(x)−x‖/(‖f(x)‖+1e-9), stop when every sample is below tol, return per sample the
    f-output with the lowest residual."""
    best, low = z.clone(), torch.full((z.shape[0],), 1e8, dtype=torch.float64)
    x = z
    for _ in range(iters):
        fx = f(x)
        d = (fx - x).flatten(1).norm(dim=1).double()
        rel = d / (fx.flatten(1).norm(dim=1).double() + 1e-9)
        better = rel < low
        low = torch.where(better, rel, low)
        best = torch.where(better.reshape((-1,) + (1,) * (z.dim() - 1)), fx, best)
        if rel.max().item() < tol:
            break
        x = fx
    return best


def imp_eval_loop(f, z, f_thres, tol, tau):
    """The reference's evaluation loop (§3.2) without its final call: f_thres−1 damped steps at most,
    one global ratio ‖f(z)−z‖/(1e-6+‖z‖) with the old iterate in the denominator."""
    for _ in range(f_thres - 1):
        zn = f(z)
        r = ((zn - z).norm() / (1e-6 + z.norm())).item()
        z = (1 - tau) * z + tau * zn
        if r < tol:
            break
    return z


def imp_f_step(pe, z, u, conv_state, ssm_state):
    """f of one token (spec §4): z (B,D), u (B,K) incl. bias, conv_state (B,C,W) the last W pre-conv
    inputs, ssm_state (B,H,P,N). Returns f(z) and the new states; the inputs are not modified, so the
    caller decides whether to commit. pe["A"] = −exp(A_log) and pe["conv_k"] = conv weight (C,W)
    are prepared once per sequence."""
    D, N, E, P, H, C, W = pe["dims"]
    Bsz = z.shape[0]
    zx = torch.addmm(u, rmsnorm(z, pe["norm"]), pe["in_proj"].t())
    zg, xBC, dtraw = torch.split(zx, [E, C, H], dim=-1)
    cs = torch.cat([conv_state[:, :, 1:], xBC[:, :, None]], dim=2)
    xBC = F.silu((cs * pe["conv_k"]).sum(-1) + pe["conv_b"])
    xs, Bm, Cm = torch.split(xBC, [E, N, N], dim=-1)
    xs = xs.reshape(Bsz, H, P)
    dt = F.softplus(dtraw + pe["dt_bias"])                                     # (B,H)
    S = torch.exp(dt * pe["A"])[:, :, None, None] * ssm_state + \
        (dt[:, :, None] * xs)[..., None] * Bm[:, None, None, :]
    y = (S @ Cm[:, None, :, None]).squeeze(-1) + pe["D"][:, None] * xs       # (B,H,P)
    out = rmsnorm(y.reshape(Bsz, E) * F.silu(zg), pe["gnorm"]) @ pe["out_proj"].t()
    return rmsnorm(z + out, pe["norm_f"]), cs, S


# ---------------------------------------------------------------------------------------------
# Environment report and timing
# ---------------------------------------------------------------------------------------------

BLAS_THREADS = "n/a"
BLAS_CORE = "n/a"


def _classify(path):
    for tag in ("openblas-pthread", "openblas-openmp", "openblas-serial", "openblas", "blis", "mkl", "atlas"):
        if tag in path:
            return tag
    return "netlib-reference" if "/blas/" in path else os.path.basename(path)


def active_blas():
    """Which library answers torch's sgemm_: torch (BLAS_INFO=generic) links the soname libblas.so.3,
    so the mapped file providing that soname decides (an LD_PRELOADed libblas.so.3 takes its place).
    Also reads OpenBLAS's own thread count into BLAS_THREADS."""
    global BLAS_THREADS
    a = torch.randn(64, 64)
    (a @ a).sum().item()
    mapped = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[-1].startswith("/"):
                    mapped.add(parts[-1])
    except OSError:
        return "unknown"
    blas = sorted(os.path.realpath(m) for m in mapped if os.path.basename(m).startswith("libblas.so"))
    other = sorted(os.path.realpath(m) for m in mapped
                   if any(s in os.path.basename(m) for s in ("openblas", "mkl_rt", "libmkl", "blis")))
    global BLAS_CORE
    for path in blas + other:
        try:  # OpenBLAS reports its pool size (OPENBLAS_NUM_THREADS at load, else all cores)
            lib = ctypes.CDLL(path)
            BLAS_THREADS = lib.openblas_get_num_threads()
            # and the kernel it chose for this CPU (a generic one, "Prescott", for processors newer
            # than its tables, unless OPENBLAS_CORETYPE says otherwise)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            BLAS_CORE = lib.openblas_get_corename().decode()
            break
        except (OSError, AttributeError):
            pass
    if blas:
        return _classify(blas[0])
    return (_classify(other[0]) + "(direct)") if other else "none-mapped"


def torch_blas_info():
    cfg = torch.__config__.show()
    for tok in cfg.replace(",", " ").split():
        if tok.startswith("BLAS_INFO="):
            return tok.split("=", 1)[1]
    return "unknown"


def time_fwdbwd(fn, params, repeats, warmup):
    """Median seconds of fn() (a scalar loss) plus its backward, after `warmup` untimed runs."""
    leaves = [v for v in params.values() if isinstance(v, torch.Tensor)]
    times = []
    for i in range(warmup + repeats):
        for v in leaves:
            v.grad = None
        t0 = time.perf_counter()
        fn().backward()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    times.sort()
    return times[(len(times) - 1) // 2]          # median (lower median for an even count)


def self_check():
    """The chunked SSD must equal the sequential scan (T=80 crosses one chunk boundary and pads), and
    the implicit model's step form its full-sequence f (T=70)."""
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(2, 80, 3, 4, generator=g, dtype=torch.float64)
    dt = torch.rand(2, 80, 3, generator=g, dtype=torch.float64) * 0.3
    A = -torch.rand(3, generator=g, dtype=torch.float64) * 4 - 0.5
    Bm = torch.randn(2, 80, 5, generator=g, dtype=torch.float64)
    Cm = torch.randn(2, 80, 5, generator=g, dtype=torch.float64)
    Dk = torch.randn(3, generator=g, dtype=torch.float64)
    y1, s1 = ssd_chunked(xs, dt, A, Bm, Cm, Dk, chunk=64)
    y2, s2 = ssd_loop(xs, dt, A, Bm, Cm, Dk)
    err = max((y1 - y2).abs().max().item(), (s1 - s2).abs().max().item())
    if not err < 1e-9:
        sys.exit(f"torch_bench: chunked SSD self-check failed (max abs err {err:.3e})")
    # The implicit f token by token (step form, committed caches) equals f on the whole sequence.
    p = {k: (v.detach().double() if isinstance(v, torch.Tensor) else v)
         for k, v in imp_params(8, 4, 16, 4, 10).items()}
    D, N, E, P, H, C, W = p["dims"]
    pe = imp_effective(p)
    pe["A"], pe["conv_k"] = -torch.exp(pe["A_log"]), pe["conv_w"][:, 0, :]
    z = torch.randn(2, 70, D, generator=g, dtype=torch.float64)
    ids = torch.randint(0, 10, (2, 70), generator=g)
    u3 = imp_inject(pe, pe["emb"][ids])
    full = imp_f(pe, z, u3)
    u = torch.cat(u3, dim=-1)
    cs, S = z.new_zeros(2, C, W), z.new_zeros(2, H, P, N)
    for t in range(70):
        out, cs, S = imp_f_step(pe, z[:, t], u[:, t], cs, S)
        err = (out - full[:, t]).abs().max().item()
        if not err < 1e-9:
            sys.exit(f"torch_bench: implicit step-form self-check failed at t={t} (max abs err {err:.3e})")


def imp_time(fn, warmup, repeats):
    """Median seconds of fn() after `warmup` untimed calls (lower median for an even count)."""
    times = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[(len(times) - 1) // 2]


def imp_train_fn(p, ids, tgt):
    """One "32+4" phantom-gradient training step (spec §5.1) with AdamW (decay on the weight-norm
    g/v only, the C optimiser's no-decay set) and clip_grad_norm_ 1, as adamw_step."""
    Bsz, T = ids.shape
    D, V = p["dims"][0], p["emb"].shape[0]
    leaves = [v for v in p.values() if isinstance(v, torch.Tensor)]
    decay = [p[n + s] for n in IMP_WN for s in ("_g", "_v")]
    rest = [v for v in leaves if all(v is not d for d in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)

    def step():
        pe = imp_effective(p)
        u3 = imp_inject(pe, pe["emb"][ids])
        with torch.no_grad():   # f_tol 0: all 32 calls run
            z = imp_picard(lambda x: imp_f(pe, x, u3), torch.zeros(Bsz, T, D), IMP_SOLVE, 0.0)
        for _ in range(IMP_GRAD):
            z = IMP_TAU * imp_f(pe, z, u3) + (1 - IMP_TAU) * z
        loss = F.cross_entropy((z @ pe["emb"].t()).reshape(-1, V), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(leaves, 1.0)
        opt.step()
    return step


def imp_eval_fn(p, ids):
    """Simultaneous evaluation: IMP_EVAL−1 loop calls + the final call, then the logits."""
    Bsz, T = ids.shape

    def step():
        with torch.no_grad():
            pe = imp_effective(p)
            u3 = imp_inject(pe, pe["emb"][ids])
            z = imp_eval_loop(lambda x: imp_f(pe, x, u3), torch.zeros(Bsz, T, pe["dims"][0]), IMP_EVAL, 0.0, IMP_TAU)
            return imp_f(pe, z, u3) @ pe["emb"].t()
    return step


def imp_gen_fn(p, first, n_tok):
    """Greedy generation of n_tok tokens from first (B): per token IMP_GEN−1 loop calls with the
    caches read-only, then the committing call; the argmax of its logits is the next input."""
    D, N, E, P, H, C, W = p["dims"]
    Bsz = first.shape[0]

    def step():
        with torch.no_grad():
            pe = imp_effective(p)   # weights are fixed during generation: once per sequence
            pe["A"], pe["conv_k"] = -torch.exp(pe["A_log"]), pe["conv_w"][:, 0, :]
            cs, S = torch.zeros(Bsz, C, W), torch.zeros(Bsz, H, P, N)
            tok = first
            for _ in range(n_tok):
                u = torch.addmm(pe["inj_b"], rmsnorm(pe["emb"][tok], pe["inj_norm"]), pe["inj_w"].t())
                z = imp_eval_loop(lambda x, u=u, cs=cs, S=S: imp_f_step(pe, x, u, cs, S)[0],
                                  torch.zeros(Bsz, D), IMP_GEN, 0.0, IMP_TAU)
                zo, cs, S = imp_f_step(pe, z, u, cs, S)   # the final call commits
                tok = (zo @ pe["emb"].t()).argmax(-1)
    return step


def run_implicit(name, quick, tail):
    """One imp_* case (bench/bench_implicit.c has the same table and semantics)."""
    kind, size, Bsz, T, rep, qrep = IMP_CASES[name]
    repeats = qrep if quick else rep
    D, N, E, P = IMP_SIZES[size]
    p = imp_params(D, N, E, P, IMP_V)
    nparams = sum(v.numel() for v in p.values() if isinstance(v, torch.Tensor))
    ids = torch.randint(0, IMP_V, (Bsz, T))
    tgt = torch.randint(0, IMP_V, (Bsz, T))
    if kind == "train":
        s = imp_time(imp_train_fn(p, ids, tgt), 1, repeats)
        head = f"step_tok_s={Bsz * T / s:.1f} ms={s * 1e3:.1f} f_calls={IMP_SOLVE}+{IMP_GRAD}"
    elif kind == "eval":
        s = imp_time(imp_eval_fn(p, ids), 1, repeats)
        head = f"eval_tok_s={Bsz * T / s:.1f} ms={s * 1e3:.1f} f_calls={IMP_EVAL}"
    else:
        s = imp_time(imp_gen_fn(p, ids[:, 0], T), 1, repeats)
        head = f"gen_tok_s={Bsz * T / s:.1f} gen_ms_tok={s * 1e3 / T:.4f} ms={s * 1e3:.1f} " \
               f"f_calls_tok={IMP_GEN} tokens={T}"
    print(f"torch {name} {head} B={Bsz} T={T} D={D} params={nparams} repeats={repeats} {tail}", flush=True)


# ---------------------------------------------------------------------------------------------
# Language models at the tinyshakespeare sizes (bench/bench_lm.c has the same cases): byte
# vocabulary 256, 4 pre-norm blocks, D 128, tied embedding / head, B 12 x T 64 for training,
# batch 1 and 256 greedy tokens (first input 'T') for generation.
#   lm_llama       blocks of llama_block (RMSNorm, RoPE attention, 4 heads; RMSNorm, SwiGLU h 341)
#   lm_mamba2      blocks x + mamba2_mixer(RMSNorm(x)) (N 16, P 32, E 256, chunked SSD), then
#                  x + gated MLP (RMSNorm2, fc1 -> [value | gate], value * silu(gate), fc2; h 512)
#   lm_imp_mamba2  the same 4 blocks as f(z, u) = norm_f(Block_4(... Block_1(z, u) ..., u)), u =
#                  Linear(RMSNorm(emb)) + bias added to every layer's in_proj output, weight norm on
#                  every Linear / Conv1d weight (in_proj, conv, out_proj, fc1, fc2, injection)
# <case>_train: forward, CE, backward, clip_grad_norm_ 1, AdamW (lr 1e-4, betas (0.9, 0.95), decay 0.1
#   on >= 2-d tensors except the embedding; weight-norm g are (rows, 1): they decay, as in C).
#   Implicit: "8+2", 8 undamped no-grad f calls (torchdeq fixed_point_iter, tolerance 0) and 2 relaxed
#   calls z = 0.8 f(z) + 0.2 z with autograd; logits = z Emb^T (norm_f is inside f).   -> train_tok_s
# <case>_gen: under torch.inference_mode (at batch 1 about 17% faster than no_grad: per-op overhead
#   dominates), one token at a time through a real recurrent step: Llama with a KV cache
#   preallocated for the 256 positions (fused qkv and w1|w3 weights, RoPE tables built once),
#   Mamba2 with per-layer conv state (C, 4) and SSM state (H, P, N) updated in place;
#   implicit Mamba2: per token 15 damped loop calls with the caches read only, then 1 committing call
#   (eval cap 16, tolerance 0: the C side runs with f_tol 0 and reports gen_iters = 15). The per-
#   sequence preparation (fused weights, weight norm, zeroed states) is outside the timing, as
#   model_state_init on the C side.                                   -> gen_tok_s, gen_ms_tok
# Parameter counts equal the C models' (printed as params= on both sides).
# Runs with the default case list, or --cases with the line names or the case names (both lines).
# Out of scope: lm_fp_mamba (the torch FP-Mamba of tests/ref/gen_fp_mamba.py has no token-by-token
# mode and fixes bc_norm 1, while the LM runs use bc_norm 0).
# ---------------------------------------------------------------------------------------------

LM_CASES = ("lm_llama", "lm_mamba2", "lm_imp_mamba2")
# Generation only, Llama at the shapes of llama2.c's checkpoints (bench/bench_lm.c has the same cases):
#   name: (lm_params sizes, generated tokens)
LM_GEN_ONLY = {
    "lm_stories15m": (dict(V=32000, D=288, L=6, n_head=6, d_inner=1152), 64),    # 15.2M parameters
    "lm_llama110m": (dict(V=32000, D=768, L=12, n_head=12, d_inner=3072), 16),   # 109.5M parameters
}
LM_V, LM_D, LM_L, LM_B, LM_T, LM_GEN = 256, 128, 4, 12, 64, 256
LM_HEADS, LM_DINNER, LM_N, LM_P = 4, 512, 16, 32
LM_SOLVE, LM_GRAD, LM_EVAL, LM_TAU = 8, 2, 16, 0.8
LM_WN = ("in_proj", "conv_w", "out_proj", "fc1", "fc2")    # weight-normed per layer (implicit)


def lm_params(family, V=LM_V, D=LM_D, L=LM_L, n_head=LM_HEADS, d_inner=LM_DINNER, N=LM_N, P=LM_P):
    """{"emb", "norm_f", "layers": [dict per block], "family"}; family llama | mamba2 | imp_mamba2.
    The gated MLP's hidden width is d_inner rounded up to 128 (mlp_hidden in src/layers/mlp.c)."""
    u = lambda shape, b: ((torch.rand(shape) * 2 - 1) * b).requires_grad_(True)  # noqa: E731
    layers = []
    for _ in range(L):
        if family == "llama":
            layers.append(llama_params(D, n_head, d_inner))
            continue
        p = mamba2_params(D, N, 2 * D, P)
        h = -(-d_inner // 128) * 128
        p["norm2"] = torch.ones(D, requires_grad=True)
        p["fc1"], p["fc2"] = u((2 * h, D), D ** -0.5), u((D, h), h ** -0.5)
        if family == "imp_mamba2":
            for name in LM_WN:
                v = p.pop(name).detach()
                p[name + "_g"] = v.flatten(1).norm(dim=1).reshape((-1,) + (1,) * (v.dim() - 1)).requires_grad_(True)
                p[name + "_v"] = v.requires_grad_(True)
        layers.append(p)
    m = {"emb": (torch.randn(V, D) * 0.02).requires_grad_(True), "norm_f": torch.ones(D, requires_grad=True),
         "layers": layers, "family": family}
    if family == "imp_mamba2":
        K = layers[0]["in_proj_v"].shape[0]
        m["inj_norm"] = torch.ones(D, requires_grad=True)
        w = (torch.rand(K, D) * 2 - 1) / math.sqrt(D)
        m["inj_w_g"] = w.norm(dim=1, keepdim=True).requires_grad_(True)
        m["inj_w_v"] = w.requires_grad_(True)
        m["inj_b"] = torch.zeros(K, requires_grad=True)
    return m


def lm_leaves(m):
    """(decayed, not decayed) parameter lists: weight decay on >= 2-d tensors except the embedding
    (the C table's decay flag)."""
    ts = [m["emb"], m["norm_f"]] + [v for k, v in m.items() if k.startswith("inj_")] + \
        [v for p in m["layers"] for v in p.values() if isinstance(v, torch.Tensor)]
    return [t for t in ts if t.dim() >= 2 and t is not m["emb"]], [t for t in ts if t.dim() < 2 or t is m["emb"]]


def lm_wnorm(g, v):
    return g * v / v.flatten(1).norm(dim=1).reshape(g.shape)


def lm_effective(m):
    """Implicit: the model with effective weights W = g v/|v| (once per step or sequence); else m."""
    if m["family"] != "imp_mamba2":
        return m
    e = {k: v for k, v in m.items() if not k.startswith("inj_w_")}
    e["inj_w"] = lm_wnorm(m["inj_w_g"], m["inj_w_v"])
    e["layers"] = []
    for p in m["layers"]:
        q = {k: v for k, v in p.items() if not (k.endswith("_g") or k.endswith("_v"))}
        for name in LM_WN:
            q[name] = lm_wnorm(p[name + "_g"], p[name + "_v"])
        e["layers"].append(q)
    return e


def gated_mlp(p, xn):
    """fc2(value * silu(gate)), [value | gate] = fc1 xn (value half first, src/layers/mlp.h)."""
    val, gate = (xn @ p["fc1"].t()).chunk(2, dim=-1)
    return (val * F.silu(gate)) @ p["fc2"].t()


def lm_mamba2_block(p, x, u3=None):
    x = x + mamba2_mixer(p, rmsnorm(x, p["norm"]), u3)
    return x + gated_mlp(p, rmsnorm(x, p["norm2"]))


def lm_inject(e, x0):
    """u = Linear(RMSNorm(emb)) + bias, as the three row blocks (z, xBC, dt parts) of in_proj's output."""
    D, N, E, P, H, C, W = e["layers"][0]["dims"]
    xn = rmsnorm(x0, e["inj_norm"])
    return tuple(xn @ w.t() + b for w, b in zip(e["inj_w"].split([E, C, H]), e["inj_b"].split([E, C, H])))


def lm_imp_f(e, z, u3):
    for p in e["layers"]:
        z = lm_mamba2_block(p, z, u3)
    return rmsnorm(z, e["norm_f"])


def lm_logits(m, ids, solve=LM_SOLVE, grad=LM_GRAD):
    """Training forward: logits (B,T,V) of ids (B,T)."""
    Bsz, T = ids.shape
    e = lm_effective(m)
    x = e["emb"][ids]
    if m["family"] == "llama":
        D, nh, _ = e["layers"][0]["dims"]
        cos, sin = rope_tables(T, D // nh)
        mask = torch.full((T, T), float("-inf")).triu(1)
        for p in e["layers"]:
            x = llama_block(p, x, cos.to(x.dtype), sin.to(x.dtype), mask.to(x.dtype))
    elif m["family"] == "mamba2":
        for p in e["layers"]:
            x = lm_mamba2_block(p, x)
    else:
        u3 = lm_inject(e, x)
        with torch.no_grad():   # tolerance 0: all `solve` calls run
            z = imp_picard(lambda y: lm_imp_f(e, y, u3), torch.zeros_like(x), solve, 0.0)
        for _ in range(grad):
            z = LM_TAU * lm_imp_f(e, z, u3) + (1 - LM_TAU) * z
        return z @ e["emb"].t()
    return rmsnorm(x, e["norm_f"]) @ e["emb"].t()


def lm_train_fn(m, ids, tgt):
    decay, rest = lm_leaves(m)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)

    def step():
        loss = F.cross_entropy(lm_logits(m, ids).reshape(-1, LM_V), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(decay + rest, 1.0)
        opt.step()
    return step


def lm_gen_state(m, max_len, Bsz=1, dtype=torch.float32):
    """Per-sequence preparation (no autograd): effective weights, fused projections, RoPE tables and
    zeroed recurrent states (Llama: KV cache (L, B, heads, max_len, dh); Mamba2: conv (L, B, C, W) and
    SSM (L, B, H, P, N))."""
    with torch.no_grad():
        e = lm_effective(m)
        e = {k: (v.detach().to(dtype) if isinstance(v, torch.Tensor) else v) for k, v in e.items()}
        layers = []
        for p in e["layers"]:
            q = {k: (v.detach().to(dtype) if isinstance(v, torch.Tensor) else v) for k, v in p.items()}
            if m["family"] == "llama":
                q["wqkv"] = torch.cat([q["wq"], q["wk"], q["wv"]]).t().contiguous()
                q["w13"] = torch.cat([q["w1"], q["w3"]]).t().contiguous()
                q["wo_t"], q["fc2_t"] = q["wo"].t().contiguous(), q["fc2"].t().contiguous()
            else:
                q["A"], q["conv_k"] = -torch.exp(q["A_log"]), q["conv_w"][:, 0, :].contiguous()
                q["in_t"], q["out_t"] = q["in_proj"].t().contiguous(), q["out_proj"].t().contiguous()
                q["fc1_t"], q["fc2_t"] = q["fc1"].t().contiguous(), q["fc2"].t().contiguous()
            layers.append(q)
        e["layers"] = layers
        e["emb_t"] = e["emb"].t().contiguous()
        L = len(layers)
        if m["family"] == "llama":
            D, nh, _ = layers[0]["dims"]
            dh = D // nh
            cos, sin = rope_tables(max_len, dh)
            e["cos"], e["sin"] = cos.to(dtype), sin.to(dtype)
            e["kc"] = torch.zeros(L, Bsz, nh, max_len, dh, dtype=dtype)
            e["vc"] = torch.zeros(L, Bsz, nh, max_len, dh, dtype=dtype)
        else:
            D, N, E, P, H, C, W = layers[0]["dims"]
            e["cs"] = torch.zeros(L, Bsz, C, W, dtype=dtype)
            e["S"] = torch.zeros(L, Bsz, H, P, N, dtype=dtype)
            if m["family"] == "imp_mamba2":
                e["inj_t"] = e["inj_w"].t().contiguous()
    return e


def lm_m2_step(q, x, cs, S, u=None, commit=True):
    """One token of one Mamba2 block with its gated MLP: x (B,D) -> (B,D). cs (B,C,W), S (B,H,P,N):
    this layer's states, advanced in place when commit (else read only: the implicit loop calls)."""
    D, N, E, P, H, C, W = q["dims"]
    Bsz = x.shape[0]
    xn = rmsnorm(x, q["norm"])
    zx = torch.addmm(u, xn, q["in_t"]) if u is not None else xn @ q["in_t"]
    z, xBC, dtraw = zx.split([E, C, H], dim=-1)
    win = torch.cat([cs[:, :, 1:], xBC[:, :, None]], dim=2)
    xc = F.silu((win * q["conv_k"]).sum(-1) + q["conv_b"])
    xs, Bm, Cm = xc.split([E, N, N], dim=-1)
    xs = xs.reshape(Bsz, H, P)
    dt = F.softplus(dtraw + q["dt_bias"])                                      # (B,H)
    Sn = torch.exp(dt * q["A"])[:, :, None, None] * S + (dt[:, :, None] * xs)[..., None] * Bm[:, None, None, :]
    y = (Sn @ Cm[:, None, :, None]).squeeze(-1) + q["D"][:, None] * xs        # (B,H,P)
    if commit:
        cs.copy_(win)
        S.copy_(Sn)
    x = x + rmsnorm(y.reshape(Bsz, E) * F.silu(z), q["gnorm"]) @ q["out_t"]
    val, gate = (rmsnorm(x, q["norm2"]) @ q["fc1_t"]).chunk(2, dim=-1)
    return x + (val * F.silu(gate)) @ q["fc2_t"]


def lm_llama_step(q, x, kc, vc, t, e):
    """One token at position t of one Llama block: x (B,D) -> (B,D); writes its post-RoPE key and
    value into the preallocated cache slot t of kc / vc (B, heads, max_len, dh)."""
    D, nh, h = q["dims"]
    Bsz, dh = x.shape[0], D // nh
    q_, k, v = (rmsnorm(x, q["norm"]) @ q["wqkv"]).view(Bsz, 3, nh, dh).unbind(1)
    cos, sin = e["cos"][t], e["sin"][t]
    q_, k = rope(q_, cos, sin), rope(k, cos, sin)
    kc[:, :, t] = k
    vc[:, :, t] = v
    s = (q_[:, :, None, :] @ kc[:, :, :t + 1].transpose(-1, -2)) * dh ** -0.5      # (B,nh,1,t+1)
    o = (torch.softmax(s, dim=-1) @ vc[:, :, :t + 1]).reshape(Bsz, D)
    x = x + o @ q["wo_t"]
    a, b = (rmsnorm(x, q["norm2"]) @ q["w13"]).split(h, dim=-1)
    return x + (F.silu(a) * b) @ q["fc2_t"]


def lm_step(m, e, tok, t, n_eval=LM_EVAL):
    """Logits (B,V) of token ids tok (B) at position t, advancing the states in e."""
    x = e["emb"][tok]
    L = len(e["layers"])
    if m["family"] == "llama":
        for i in range(L):
            x = lm_llama_step(e["layers"][i], x, e["kc"][i], e["vc"][i], t, e)
    elif m["family"] == "mamba2":
        for i in range(L):
            x = lm_m2_step(e["layers"][i], x, e["cs"][i], e["S"][i])
    else:
        u = torch.addmm(e["inj_b"], rmsnorm(x, e["inj_norm"]), e["inj_t"])

        def f(z, commit):
            for i in range(L):
                z = lm_m2_step(e["layers"][i], z, e["cs"][i], e["S"][i], u, commit)
            return rmsnorm(z, e["norm_f"])
        z = imp_eval_loop(lambda y: f(y, False), torch.zeros_like(x), n_eval, 0.0, LM_TAU)
        return f(z, True) @ e["emb_t"]   # the final call commits
    return rmsnorm(x, e["norm_f"]) @ e["emb_t"]


def lm_self_check():
    """float64, small sizes, T 70 (crosses a chunk boundary): for each family the token-by-token step
    (KV cache / conv + SSM states) equals the full-sequence forward (implicit: one f call per token,
    committed, against f on the whole sequence at the same z), and the Llama LM equals
    tests/ref/gen_llama.py's model_fwd. When written, all three models also matched the C models of
    bench_lm (weights from a C checkpoint) to ~1e-6 in the training forward ("8+2"), the evaluation
    and the generation step (15+1 loop calls)."""
    g = torch.Generator().manual_seed(1)
    T = 70
    for fam in ("llama", "mamba2", "imp_mamba2"):
        m = lm_params(fam, V=11, D=16, L=2, n_head=2, d_inner=24, N=4, P=8)
        m64 = {k: (v.detach().double() if isinstance(v, torch.Tensor) else v) for k, v in m.items()}
        m64["layers"] = [{k: (v.detach().double() if isinstance(v, torch.Tensor) else v) for k, v in p.items()}
                         for p in m["layers"]]
        ids = torch.randint(0, 11, (2, T), generator=g)
        e = lm_gen_state(m64, T, Bsz=2, dtype=torch.float64)
        with torch.no_grad():
            if fam == "imp_mamba2":
                z = torch.randn(2, T, 16, generator=g, dtype=torch.float64)
                eff = lm_effective(m64)
                want = lm_imp_f(eff, z, lm_inject(eff, eff["emb"][ids]))
                got = []
                for t in range(T):
                    u = torch.addmm(e["inj_b"], rmsnorm(e["emb"][ids[:, t]], e["inj_norm"]), e["inj_t"])
                    zt = z[:, t]
                    for i in range(2):
                        zt = lm_m2_step(e["layers"][i], zt, e["cs"][i], e["S"][i], u, True)
                    got.append(rmsnorm(zt, e["norm_f"]))
            else:
                want = lm_logits(m64, ids)
                got = [lm_step(m64, e, ids[:, t], t) for t in range(T)]
        err = (torch.stack(got, 1) - want).abs().max().item()
        if not err < 1e-9:
            sys.exit(f"torch_bench: {fam} LM step-form self-check failed (max abs err {err:.3e})")
    # the Llama LM against the parity-tested reference (tests/ref/gen_llama.py, same tensor names as C)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
    import gen_llama as gl
    m = lm_params("llama", V=11, D=16, L=2, n_head=2, d_inner=24)
    c = {"n_layer": 2, "n_head": 2, "d_model": 16, "rope_theta": 500000.0}
    ref = {"word_emb.emb.weight": m["emb"], "backbone.norm_f.weight": m["norm_f"]}
    names = {"norm": "norm.weight", "norm2": "norm2.weight", "wq": "mixer.wq.weight", "wk": "mixer.wk.weight",
             "wv": "mixer.wv.weight", "wo": "mixer.out_proj.weight", "w1": "mlp.w1.weight", "w3": "mlp.w3.weight",
             "fc2": "mlp.fc2.weight"}
    for i, p in enumerate(m["layers"]):
        for k, n in names.items():
            ref[f"backbone.layers.{i}.{n}"] = p[k]
    ref = {k: v.detach().double() for k, v in ref.items()}
    m64 = dict(m, emb=ref["word_emb.emb.weight"], norm_f=ref["backbone.norm_f.weight"],
               layers=[{k: (v.detach().double() if isinstance(v, torch.Tensor) else v) for k, v in p.items()}
                       for p in m["layers"]])
    ids = torch.randint(0, 11, (2, 9), generator=g)
    with torch.no_grad():
        err = (lm_logits(m64, ids) - gl.model_fwd(ref, ids, c)).abs().max().item()
    if not err < 1e-6:   # the bench's RoPE tables are float32
        sys.exit(f"torch_bench: Llama LM vs tests/ref/gen_llama.py failed (max abs err {err:.3e})")


def run_lm_cases(args, tail):
    cases = args.cases.split(",")
    todo = [(base, kind) for base in LM_CASES for kind in ("train", "gen")
            if base in cases or f"{base}_{kind}" in cases]
    todo += [(base, "gen") for base in LM_GEN_ONLY if base in cases or f"{base}_gen" in cases]
    if not todo:
        return
    lm_self_check()
    repeats = 2 if args.quick else 3          # bench_lm's counts (one warm-up each)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(32, 127, (LM_B, LM_T), generator=g)   # printable bytes, as in text
    tgt = torch.randint(32, 127, (LM_B, LM_T), generator=g)
    models = {}
    for base, kind in todo:
        fam, sizes, n_gen = ("llama",) + LM_GEN_ONLY[base] if base in LM_GEN_ONLY else (base[3:], {}, LM_GEN)
        if base not in models:
            models[base] = lm_params(fam, **sizes)
        m = models[base]
        nparams = sum(t.numel() for t in sum(lm_leaves(m), []))
        imp = fam == "imp_mamba2"
        if kind == "train":
            s = imp_time(lm_train_fn(m, ids, tgt), 1, repeats)
            head = f"train_tok_s={LM_B * LM_T / s:.1f} ms={s * 1e3:.1f}" + \
                (f" f_calls={LM_SOLVE}+{LM_GRAD}" if imp else "") + f" B={LM_B} T={LM_T}"
        else:
            times = []
            for i in range(1 + repeats):
                e = lm_gen_state(m, n_gen)
                tok = torch.tensor([ord("T")])
                t0 = time.perf_counter()
                with torch.inference_mode():
                    for t in range(n_gen):
                        tok = lm_step(m, e, tok, t).argmax(-1)
                if i >= 1:
                    times.append(time.perf_counter() - t0)
            times.sort()
            s = times[(len(times) - 1) // 2]
            head = f"gen_tok_s={n_gen / s:.1f} gen_ms_tok={s * 1e3 / n_gen:.4f}" + \
                (f" f_calls_tok={LM_EVAL - 1}+1" if imp else "") + f" tokens={n_gen} B=1"
        print(f"torch {base}_{kind} {head} params={nparams} repeats={repeats} {tail}", flush=True)


def main(args):
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    self_check()
    warmup, repeats = (1, 2) if args.quick else (1, 5)
    Bsz, T = 32, 256
    blas = active_blas()
    tail = f"threads={torch.get_num_threads()} blas={blas} blas_threads={BLAS_THREADS} blas_core={BLAS_CORE}{CORE_NOTE} " \
           f"torch_blas_info={torch_blas_info()} " \
           f"torch={torch.__version__}"
    cases = args.cases.split(",")
    sizes = {"mamba2_small": (64, 16, 128, 16), "mamba2_large": (256, 128, 1024, 64)}
    for name in ("mamba2_small", "mamba2_large"):
        if name not in cases:
            continue
        D, N, E, P = sizes[name]
        p = mamba2_params(D, N, E, P)
        x = torch.randn(Bsz, T, D)
        s = time_fwdbwd(lambda: mamba2_block(p, x).square().mean(), p, repeats, warmup)
        print(f"torch {name} fwdbwd_tok_s={Bsz * T / s:.1f} ms={s * 1e3:.1f} B={Bsz} T={T} D={D} N={N} "
              f"E={E} P={P} chunk=64 {tail}", flush=True)
    if "llama" in cases:
        D, nh, d_inner = 256, 4, 1024
        p = llama_params(D, nh, d_inner)
        cos, sin = rope_tables(T, D // nh)
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = torch.randn(Bsz, T, D)
        s = time_fwdbwd(lambda: llama_block(p, x, cos, sin, mask).square().mean(), p, repeats, warmup)
        print(f"torch llama fwdbwd_tok_s={Bsz * T / s:.1f} ms={s * 1e3:.1f} B={Bsz} T={T} D={D} "
              f"n_head={nh} d_inner={d_inner} h={(2 * d_inner) // 3} {tail}", flush=True)

    # Full training step of the explicit Mamba2 LM at the state-tracking sizes (bench/bench_train.c):
    # embedding (V=240) -> 2 blocks -> norm_f -> tied head -> CE, then AdamW.
    tsizes = {"train_small": (64, 16, 128, 16), "train_large": (256, 128, 1024, 64)}
    for name in ("train_small", "train_large"):
        if name not in cases:
            continue
        D, N, E, P = tsizes[name]
        V = 240
        blocks = [mamba2_params(D, N, E, P) for _ in range(2)]
        emb = (torch.randn(V, D) * 0.02).requires_grad_(True)
        norm_f = torch.ones(D, requires_grad=True)
        leaves = [emb, norm_f] + [v for b in blocks for v in b.values() if isinstance(v, torch.Tensor)]
        opt = torch.optim.AdamW(leaves, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        ids = torch.randint(0, V, (Bsz, T))
        tgt = torch.randint(0, V, (Bsz, T))

        def train_step():
            h = emb[ids]
            for b in blocks:
                h = mamba2_block(b, h)
            logits = rmsnorm(h, norm_f) @ emb.t()
            loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            train_step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        times.sort()
        s = times[(len(times) - 1) // 2]
        nparams = sum(v.numel() for v in leaves)
        print(f"torch {name} step_tok_s={Bsz * T / s:.1f} ms={s * 1e3:.1f} B={Bsz} T={T} D={D} params={nparams} "
              f"{tail}", flush=True)

    # Implicit Mamba2 LM: "32+4" training step, simultaneous evaluation, sequential generation
    for name in IMP_CASES:
        if name in cases:
            run_implicit(name, args.quick, tail)

    # Language models at the tinyshakespeare sizes (bench/bench_lm.c)
    run_lm_cases(args, tail)


if __name__ == "__main__":
    main(ARGS)


# ---------------------------------------------------------------------------------------------
# FP-Mamba-H training step (bench/bench_fp.c has the same cases): the torch FP-Mamba LM of
# tests/ref/gen_fp_mamba.py in float32 (Householder r=1, concat h-dep, no conv, 1 layer, d_state 16,
# expand 2), V 67 (padded to 72), B 64, T 17. Threshold 0: every solve runs exactly l_max = 16 no-grad
# f evaluations, as bench_fp.c (threshold 1e-30), then 1 graded step, tied head + CE, backward, AdamW.
#   fp_h64 / fp_h512: d_model 64 / 512 -> step_tok_s, iters (mean no-grad evaluations per step, layer)
# Runs with the default case list or when named in --cases.
# ---------------------------------------------------------------------------------------------

FP_CASES = {"fp_h64": (64, 5, 2), "fp_h512": (512, 3, 1)}   # d_model, timed repeats, with --quick


def run_fp_cases(args):
    names = [n for n in FP_CASES if n in args.cases.split(",") or args.cases == parse_args([]).cases]
    if not names:
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
    import gen_fp_mamba as gfp
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    blas = active_blas()
    tail = f"threads={torch.get_num_threads()} blas={blas} blas_threads={BLAS_THREADS} blas_core={BLAS_CORE}{CORE_NOTE} torch={torch.__version__}"
    Bsz, T, V, l_max = 64, 17, 67, 16
    for name in names:
        D, rep, qrep = FP_CASES[name]
        repeats = qrep if args.quick else rep
        c = gfp.full_cfg(dict(vocab=V, pad=8, d_model=D, d_state=16, dt_rank=-(-D // 16), batch=Bsz, seq_len=T,
                              n_layer=1, mixer_type="householder", mixer_rank=1, conv=0, glu_in_loop=0, n_back=1,
                              max_iter=l_max, thr=0.0, alpha_bias=0.0))
        p = {k: v.float().requires_grad_(True) for k, v in gfp.init_params(c).items()}
        leaves = list(p.values())
        opt = torch.optim.AdamW(leaves, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        ids = torch.randint(0, V, (Bsz, T))
        tgt = torch.randint(0, V, (Bsz, T))
        iters = []

        def step():
            rec = []
            logits = gfp.model_fwd(p, ids, c, "train", rec)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            iters.append(sum(r[0] for r in rec) / len(rec))

        s = imp_time(step, 1, repeats)
        it = sum(iters[1:]) / len(iters[1:])
        nparams = sum(v.numel() for v in leaves)
        print(f"torch {name} step_tok_s={Bsz * T / s:.1f} ms={s * 1e3:.1f} iters={it:.1f} l_max={l_max} "
              f"f_evals={l_max}+1 B={Bsz} T={T} D={D} params={nparams} repeats={repeats} {tail}", flush=True)


if __name__ == "__main__":
    run_fp_cases(ARGS)
