"""Reference vectors for the LSTM baseline LM (tests/ref/lstm.safetensors).

What: embedding -> n_layer stacked LSTM layers (hidden = d_model, no residual, no per-layer norm)
-> norm_f RMSNorm -> tied head. Each layer is torch.nn.LSTM's cell written out explicitly:
    g = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh,   split in PyTorch's order i | f | g | o
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g),   h_t = sigmoid(o) * tanh(c_t),   h_{-1} = c_{-1} = 0
Init: nn.LSTM's default U(+-1/sqrt(hidden)) for all four tensors, embedding N(0, 0.02), norm_f perturbed
around 1 (the spec has no LSTM; this is [our choice]).
Self-checks (asserts, rerun on every regeneration): the explicit cell equals torch.nn.LSTM with the
same weights (float32 and float64, including final h and c), and torch.autograd.gradcheck (float64) of the
explicit layer at a tiny size.
Out of scope: dropout between layers, projections (proj_size), bidirectional.

Run: /usr/bin/python3 tests/ref/gen_lstm.py   (or tests/ref/gen_all.sh)
"""
import math
import os

import torch

import common as cm

HERE = cm.HERE
LAYER_KEYS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def init_params(c):
    V, D, L = c["vocab"], c["d_model"], c["n_layer"]
    b = 1 / math.sqrt(D)
    p = {"word_emb.emb.weight": torch.randn(V, D) * 0.02}
    for i in range(L):
        pre = f"backbone.layers.{i}."
        p[pre + "weight_ih"] = cm.uniform_((4 * D, D), b)
        p[pre + "weight_hh"] = cm.uniform_((4 * D, D), b)
        p[pre + "bias_ih"] = cm.uniform_((4 * D,), b)
        p[pre + "bias_hh"] = cm.uniform_((4 * D,), b)
    p["backbone.norm_f.weight"] = cm.perturb_ones(D)
    return p


def lstm_layer(x, w_ih, w_hh, b_ih, b_hh):
    """x (B,T,D_in) -> hs (B,T,Hd), cs (B,T,Hd). Zero initial state; gate order i, f, g, o."""
    Bsz, T, _ = x.shape
    Hd = w_hh.shape[1]
    h = x.new_zeros(Bsz, Hd)
    c = x.new_zeros(Bsz, Hd)
    xg = x @ w_ih.t() + b_ih                                 # input part for all t at once
    hs, cs = [], []
    for t in range(T):
        gi, gf, gg, go = torch.split(xg[:, t] + h @ w_hh.t() + b_hh, Hd, dim=-1)
        c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gg)
        h = torch.sigmoid(go) * torch.tanh(c)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs, 1), torch.stack(cs, 1)


def model_fwd(p, ids, c, acts=None):
    emb = p["word_emb.emb.weight"]
    h = emb[ids]
    for i in range(c["n_layer"]):
        pre = f"backbone.layers.{i}."
        h, cs = lstm_layer(h, *[p[pre + k] for k in LAYER_KEYS])
        if acts is not None and i == 0:
            acts["layer0.mixer_out"] = h      # no residual around an LSTM layer: mixer_out == out
            acts["layer0.out"] = h
            acts["layer0.cell"] = cs
    return cm.rmsnorm(h, p["backbone.norm_f.weight"]) @ emb.t()


def check_against_nn_lstm(p, ids, c):
    """Explicit layers == torch.nn.LSTM(num_layers=n_layer) loaded with the same tensors."""
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        pp = {k: v.to(dtype) for k, v in p.items()}
        ref = torch.nn.LSTM(c["d_model"], c["d_model"], num_layers=c["n_layer"], batch_first=True).to(dtype)
        with torch.no_grad():
            for i in range(c["n_layer"]):
                for k in LAYER_KEYS:
                    getattr(ref, f"{k}_l{i}").copy_(pp[f"backbone.layers.{i}.{k}"])
            x = pp["word_emb.emb.weight"][ids]
            want, (hn, cn) = ref(x)
            got = x
            for i in range(c["n_layer"]):
                got, cs = lstm_layer(got, *[pp[f"backbone.layers.{i}.{k}"] for k in LAYER_KEYS])
                assert cm.rel_err(got[:, -1], hn[i]) < tol and cm.rel_err(cs[:, -1], cn[i]) < tol, i
            e = cm.rel_err(got, want)
            assert e < tol, ("explicit LSTM vs nn.LSTM", e)
        print(f"lstm {dtype}: explicit cell vs torch.nn.LSTM rel err {e:.2e}")


def check_gradcheck():
    g = torch.Generator().manual_seed(3)
    D, Bsz, T = 3, 2, 4
    shapes = ((4 * D, D), (4 * D, D), (4 * D,), (4 * D,))
    args = [torch.randn(Bsz, T, D, generator=g, dtype=torch.float64)] + \
           [torch.randn(s, generator=g, dtype=torch.float64) * 0.5 for s in shapes]
    args = [a.requires_grad_(True) for a in args]
    assert torch.autograd.gradcheck(lambda *a: lstm_layer(*a), args, eps=1e-6, atol=1e-7)
    print("gradcheck: lstm layer ok (float64)")


def main():
    cm.setup_torch()
    seed = 77
    c = cm.config_base(vocab=32, d_model=32, n_layer=2, batch=2, seq_len=12, seed=seed)
    c["gate_order"] = "i,f,g,o"
    check_gradcheck()
    torch.manual_seed(seed)
    p = init_params(c)
    ids, targets = cm.make_batch(c["batch"], c["seq_len"], c["vocab"])
    check_against_nn_lstm(p, ids, c)

    cm.run_reference(os.path.join(HERE, "lstm.safetensors"), "lstm", c, p, ids, targets, model_fwd, "lstm")


if __name__ == "__main__":
    main()
