"""Shared helpers for the PyTorch reference generators in tests/ref/.

What: a dependency-free safetensors writer/reader (json + struct), the RMSNorm / gated RMSNorm of
spec §1.2, masked next-token cross-entropy (§1.1), the batch maker, the AdamW trace and the writer that
assembles one reference file (layout described in tests/ref/README.md).
Why here: gen_mamba2.py, gen_llama.py and gen_lstm.py all emit the same file layout, so the C tests can
read every model's reference with one loader.
Out of scope: model math (in each gen_<model>.py) and the implicit solves (§2-§5, in gen_implicit.py,
which shares the safetensors I/O, the norms, the CE and the batch maker from here).

Run with Debian's /usr/bin/python3 (PyTorch 1.13); the pyenv python first on PATH has no torch.
"""
import importlib.util
import json
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
IGNORE_INDEX = -100
NORM_EPS = 1e-5

# AdamW settings every reference file is traced with; copied verbatim into the "adamw" metadata.
ADAMW = {
    "steps": 10,
    "lr": 1e-2,
    "betas": [0.9, 0.95],
    "eps": 1e-8,
    "weight_decay": 0.1,
    "decay_rule": ("weight_decay applies only to parameters with ndim >= 2, except word_emb.emb.weight "
                   "(the tied embedding/head); every 1-d tensor (norm weights, biases, A_log, dt_bias, D) "
                   "has weight_decay 0; conv1d.weight is 3-d and decays"),
    "clip": ("global L2 grad-norm clipping to max_norm 1.0 before every step via "
             "torch.nn.utils.clip_grad_norm_: coef = 1.0/(total_norm + 1e-6), grads scaled by "
             "min(coef, 1)"),
    "update": ("torch.optim.AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; "
               "p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)"),
    "record": ("adamw.losses[i] = loss before update i (adamw.losses[0] == out.loss); "
               "adamw.grad_norms[i] = pre-clip global grad norm at step i"),
}

_DTYPES = {torch.float32: ("F32", "<f4"), torch.int32: ("I32", "<i4")}


# ---------------------------------------------------------------------------------------------
# safetensors: 8-byte little-endian u64 header length, JSON header padded with spaces to a multiple
# of 8, then the raw little-endian tensor bytes in header order.
# ---------------------------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata):
    """tensors: ordered dict name -> torch tensor (float32 or int32); metadata: dict str -> str, or
    None for a file without __metadata__ (what most writers produce)."""
    header = {} if metadata is None else {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    blobs = []
    off = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        tag, _ = _DTYPES[t.dtype]
        # struct with "<" keeps the byte order explicit whatever the host.
        flat = t.reshape(-1).tolist()
        fmt = "<%d%s" % (len(flat), "f" if tag == "F32" else "i")
        raw = struct.pack(fmt, *flat)
        header[name] = {"dtype": tag, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Returns (dict name -> tensor, metadata dict). Used to re-verify what was written."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + hlen
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        code = "f" if h["dtype"] == "F32" else "i"
        vals = struct.unpack("<%d%s" % ((e - b) // 4, code), data[base + b:base + e])
        dt = torch.float32 if code == "f" else torch.int32
        out[name] = torch.tensor(vals, dtype=dt).reshape(h["shape"])
    return out, meta


# ---------------------------------------------------------------------------------------------
# Layer helpers shared by the models (spec §1.2)
# ---------------------------------------------------------------------------------------------

def rmsnorm(x, w, eps=NORM_EPS):
    """y = x * (mean(x^2) + eps)^(-1/2) * w over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gated_rmsnorm(y, z, w, eps=NORM_EPS):
    """norm_before_gate = False: v = y * silu(z); rmsnorm(v) * w (one group of width E)."""
    return rmsnorm(y * torch.nn.functional.silu(z), w, eps)


def uniform_(shape, bound, dtype=torch.float32):
    """U(-bound, bound) from the global torch RNG (seeded by torch.manual_seed in each generator)."""
    return (torch.rand(shape, dtype=dtype) * 2.0 - 1.0) * bound


def perturb_ones(n, scale=0.1):
    """1 + scale*N(0,1): norm weights / D away from their init so their gradients are non-trivial."""
    return 1.0 + scale * torch.randn(n)


def masked_ce(logits, targets):
    """Mean next-token cross-entropy over positions whose target != IGNORE_INDEX (spec §1.1).
    logits (B,T,V), targets (B,T) int64. Written out, then asserted against F.cross_entropy."""
    V = logits.shape[-1]
    lg = logits.reshape(-1, V)
    tg = targets.reshape(-1)
    keep = tg != IGNORE_INDEX
    lse = torch.logsumexp(lg, dim=-1)
    picked = lg.gather(1, tg.clamp(min=0).unsqueeze(1)).squeeze(1)
    loss = ((lse - picked) * keep).sum() / keep.sum()
    ref = torch.nn.functional.cross_entropy(lg, tg, ignore_index=IGNORE_INDEX)
    assert torch.allclose(loss, ref, rtol=1e-6, atol=1e-6), (loss.item(), ref.item())
    return loss


def make_batch(B, T, V, n_ignore=3):
    """Random token stream of length T+1 per row: ids = first T, targets = next tokens, with
    n_ignore positions per row (never all of a row) set to IGNORE_INDEX. Uses the global RNG."""
    seq = torch.randint(0, V, (B, T + 1))
    ids = seq[:, :T].clone()
    targets = seq[:, 1:].clone()
    for b in range(B):
        pos = torch.randperm(T)[:min(n_ignore, T - 1)]
        targets[b, pos] = IGNORE_INDEX
    return ids, targets


def decays(name, p):
    """The decay rule of ADAMW['decay_rule']."""
    return p.dim() >= 2 and name != "word_emb.emb.weight"


def adamw_trace(params, loss_fn):
    """Runs ADAMW['steps'] AdamW steps from copies of `params` (dict name -> tensor) on loss_fn(params)
    and returns (losses, pre-clip grad norms), each float32 (steps,). The originals are untouched."""
    work = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    dec = [p for k, p in work.items() if decays(k, p)]
    nodec = [p for k, p in work.items() if not decays(k, p)]
    opt = torch.optim.AdamW(
        [{"params": dec, "weight_decay": ADAMW["weight_decay"]}, {"params": nodec, "weight_decay": 0.0}],
        lr=ADAMW["lr"], betas=tuple(ADAMW["betas"]), eps=ADAMW["eps"])
    losses, norms = [], []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(work)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(list(work.values()), max_norm=1.0)
        losses.append(loss.item())
        norms.append(float(gn))
        opt.step()
    return torch.tensor(losses, dtype=torch.float32), torch.tensor(norms, dtype=torch.float32)


def loss_and_grads(params, loss_fn):
    """One forward/backward at `params`: returns (logits, loss, dict name -> grad) and the activation
    dict the forward filled. loss_fn(params, acts) -> (logits, loss)."""
    work = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    acts = {}
    logits, loss = loss_fn(work, acts)
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in work.items()}
    for k, g in grads.items():
        assert g is not None and torch.isfinite(g).all(), k
    return logits.detach(), loss.detach(), grads, {k: v.detach() for k, v in acts.items()}


def write_ref(path, model, config, params, ids, targets, logits, loss, grads, losses, norms, acts):
    """Assembles one reference file in the README's layout and re-reads it to check the round trip."""
    tensors = {}
    for k, v in params.items():
        tensors[k] = v.float()
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
    meta = {
        "format": "implicit.ref",
        "model": model,
        "config": json.dumps(config, sort_keys=True),
        "adamw": json.dumps(ADAMW, sort_keys=True),
        "torch_version": torch.__version__,
        "generator": "tests/ref/" + {"mamba2": "gen_mamba2.py", "llama": "gen_llama.py",
                                     "lstm": "gen_lstm.py"}[model],
    }
    assert abs(losses[0].item() - loss.item()) <= 1e-5 * max(1.0, abs(loss.item())), "trace start != out.loss"
    size = write_verified(path, tensors, meta)
    print(f"wrote {path}: {len(tensors)} tensors, {size} bytes, loss {loss.item():.6f}, "
          f"adamw losses {losses[0]:.4f} -> {losses[-1]:.4f}")


def write_verified(path, tensors, meta):
    """Writes one safetensors file, reads it back with the independent reader, asserts the round trip is
    bit exact (names, order, dtypes, values, metadata) and that the file is under 1 MB. Returns its size."""
    write_safetensors(path, tensors, meta)
    back, bmeta = read_safetensors(path)
    assert bmeta == {str(k): str(v) for k, v in meta.items()}
    assert list(back.keys()) == list(tensors.keys())
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v.contiguous()), k
    size = os.path.getsize(path)
    assert size < 1 << 20, f"{path} is {size} bytes; keep reference files well under 1 MB"
    return size


def setup_torch():
    """Single-threaded float32 for reproducible bits across machines."""
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)


def config_base(**kw):
    """Every config key the README promises; null (None) where the model has no such size, so a reader
    that skips non-numbers never applies a meaningless 0."""
    cfg = {"vocab": None, "d_model": None, "n_layer": None, "d_state": None, "d_conv": None, "expand": None,
           "headdim": None, "n_head": None, "d_inner": None, "norm_eps": NORM_EPS, "rope_theta": None,
           "batch": None, "seq_len": None,
           "ignore_index": IGNORE_INDEX, "tied_head": True, "pad_vocab": False}
    for k, v in kw.items():
        cfg[k] = v
    return cfg


def rel_err(a, b):
    """max |a-b| / max(max|b|, tiny): the scale-aware error the asserts use."""
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()



def float32_drift(p64, loss_fn, logits64, grads64, losses64, tag):
    """How far a float32 evaluation of the same float32 weights lands from the float64 reference:
    printed so the C tests can pick tolerances (a C float32 port should see errors of this order)."""
    p32 = {k: v.float() for k, v in p64.items()}
    logits32, _, grads32, _ = loss_and_grads(p32, loss_fn)
    worst = max(((rel_err(grads32[k].double(), grads64[k]), k) for k in grads64), key=lambda t: t[0])
    print(f"{tag}: float32 torch vs float64 reference: logits rel err "
          f"{rel_err(logits32.double(), logits64):.2e}, worst grad rel err {worst[0]:.2e} ({worst[1]})")
    losses32, _ = adamw_trace(p32, lambda pp: loss_fn(pp)[1])
    print(f"{tag}: float32 AdamW trace vs float64: max |loss diff| "
          f"{(losses32.double() - losses64.double()).abs().max().item():.2e}")


def load_bench():
    """bench/torch_bench.py imported by path, so the generators can assert that the benchmark times
    the same math as the references (its chunked SSD and its blocks)."""
    path = os.path.join(HERE, "..", "..", "bench", "torch_bench.py")
    spec = importlib.util.spec_from_file_location("torch_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_reference(path, model, c, p, ids, targets, model_fwd, tag):
    """The pipeline every explicit generator shares: the masked-CE loss of model_fwd on (ids,
    targets), computed in float64 from the float32 weights p (rounded once when written, so the
    files carry no float32 noise), its gradients, a 10-step AdamW trace, the float32 drift report,
    and the verified file at path."""
    def loss_fn(pp, acts=None):
        logits = model_fwd(pp, ids, c, acts)
        return logits, masked_ce(logits, targets)
    p64 = {k: v.double() for k, v in p.items()}
    logits, loss, grads, acts = loss_and_grads(p64, loss_fn)
    losses, norms = adamw_trace(p64, lambda pp: loss_fn(pp)[1])
    float32_drift(p64, loss_fn, logits, grads, losses, tag)
    write_ref(path, model, c, p, ids, targets, logits, loss, grads, losses, norms, acts)
