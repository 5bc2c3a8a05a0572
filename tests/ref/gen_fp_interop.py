"""Fixed-Point-RNN reference checkpoints, for tests/test_fp_ref.c (docs/interop.md).

What: the weights of fp_ref_h.safetensors and fp_ref_k.safetensors (gen_fp_mamba.py: FP-Mamba LMs with
LayerNorm blocks at eps 1e-5 and the layer's eps 1e-6, the reference's word-problem settings) written the
way the Fixed-Point-RNN reference code names them, one folder per checkpoint under interop/:
  fp_rnn_h/   Householder r=2, 2 layers, no conv: model.safetensors with torch 2's weight-norm names
              (<proj>.parametrizations.weight.original0 = g, .original1 = v), format "pt", the tied
              lm_head.weight stored besides backbone.embedding.weight (as a state_dict has both)
  fp_rnn_k/   Kronecker, 1 layer, short conv: torch 1's weight-norm names (<proj>.weight_g, .weight_v),
              no metadata, no lm_head
  mamba_ssm_mamba1/  mamba_ssm's Mamba-1 LM (the reference's baseline) from mamba1.safetensors' weights
each with the reference's config.json beside (mamba_ssm's MambaConfig fields, the layer's keyword
arguments in ssm_cfg, as its word-problem code builds them; rms_norm false).
The names come from a torch module tree built here after the reference's module structure
(FPLMHeadModel -> backbone.embedding, backbone.layers[i].{norm, mixer}, backbone.norm_f, lm_head; FPMamba
-> in_proj, conv1d, bc_y_proj, z_y_proj (weight-normed), x_proj, dt_proj, A_log, mixer, D, out_norm,
out_proj; HouseholderProducts -> u_proj, alpha_proj; KroneckerProduct -> uv_project, diag), loaded with
the case's tensors and asked for its state_dict: torch.nn.utils.weight_norm gives the torch 1 names, and
torch 2's parametrisation names are those with weight_g / weight_v replaced. Nothing here reads the C
name tables. The expected logits and iteration counts stay in fp_ref_{h,k}.safetensors (eval.logits,
eval.iters), computed by gen_fp_mamba.py's independent implementation.

Second part, exports: reads the folder `implicit export interop/fp_rnn_k interop/export_fp_rnn_k --layout
fp-rnn` wrote (torch 2 names, the reference's config.json), loads it into the same module tree, checks it
holds the source's weights, runs gen_fp_mamba.py's forward in evaluation mode on them (float64) and writes
the logits and iteration counts to interop/export_fp_logits.safetensors, which test_fp_ref compares with
the C model's.

Run: /usr/bin/python3 tests/ref/gen_fp_interop.py   (from gen_all.sh, after gen_fp_mamba.py)
"""
import json
import math
import os

import torch
import torch.nn as nn

import common
import gen_mixer as gmx

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "interop")
wn = torch.nn.utils.weight_norm  # torch 1: weight_g / weight_v (dim 0: g is (out, 1))


class Mixer(nn.Module):
    def __init__(self, typ, dp, d, r):
        super().__init__()
        if typ == "householder":
            self.u_proj = wn(nn.Linear(dp, r * d, bias=False))
            self.alpha_proj = wn(nn.Linear(dp, r, bias=True))
        else:
            m1, m2 = gmx.kron_factor(d)
            self.uv_project = wn(nn.Linear(dp, m1 * (m1 + 1) // 2 + m2 * (m2 + 1) // 2, bias=False))
            self.diag = wn(nn.Linear(dp, m1 + m2, bias=True))


class FPMamba(nn.Module):
    """The parameters of the reference's FPMamba (d_inner E, d_state N, dt_rank R, mixer input 2E)."""
    def __init__(self, c):
        super().__init__()
        D, E, N, R, W = c["d_model"], c["E"], c["d_state"], c["dt_rank"], c["d_conv"]
        self.in_proj = nn.Linear(D, 2 * E, bias=False)
        if c["conv"]:
            self.conv1d = nn.Conv1d(E, E, W, groups=E, padding=W - 1, bias=True)
        self.bc_y_proj = wn(nn.Linear(E, 2 * N, bias=False))
        if not c["glu_in_loop"]:
            self.z_y_proj = wn(nn.Linear(E, E, bias=False))
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E, bias=True)
        self.A_log = nn.Parameter(torch.zeros(E, N))
        self.mixer = Mixer(c["mixer_type"], 2 * E, E, c["mixer_rank"])
        self.D = nn.Parameter(torch.ones(E))
        self.out_norm = nn.LayerNorm(E)
        self.out_proj = nn.Linear(E, D, bias=False)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.mixer = FPMamba(c)
        self.norm = nn.LayerNorm(c["d_model"])


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embedding = nn.Embedding(c["vocab_padded"], c["d_model"])
        self.layers = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        self.norm_f = nn.LayerNorm(c["d_model"])


class LM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.backbone = Backbone(c)
        self.lm_head = nn.Linear(c["d_model"], c["vocab_padded"], bias=False)
        self.lm_head.weight = self.backbone.embedding.weight  # tie_embeddings


# our tensor names (gen_fp_mamba.py) -> the module attribute that holds the same numbers
OURS_TO_MODULE = [
    ("in_proj.weight", "in_proj.weight"), ("conv1d.weight", "conv1d.weight"), ("conv1d.bias", "conv1d.bias"),
    ("bc_proj.weight_g", "bc_y_proj.weight_g"), ("bc_proj.weight_v", "bc_y_proj.weight_v"),
    ("zy_proj.weight_g", "z_y_proj.weight_g"), ("zy_proj.weight_v", "z_y_proj.weight_v"),
    ("x_proj.weight", "x_proj.weight"), ("dt_proj.weight", "dt_proj.weight"), ("dt_proj.bias", "dt_proj.bias"),
    ("A_log", "A_log"), ("D", "D"), ("out_norm.weight", "out_norm.weight"), ("out_norm.bias", "out_norm.bias"),
    ("out_proj.weight", "out_proj.weight"),
    ("mixer.proj_u.weight_g", "mixer.u_proj.weight_g"), ("mixer.proj_u.weight_v", "mixer.u_proj.weight_v"),
    ("mixer.proj_alpha.weight_g", "mixer.alpha_proj.weight_g"), ("mixer.proj_alpha.weight_v", "mixer.alpha_proj.weight_v"),
    ("mixer.proj_alpha.bias", "mixer.alpha_proj.bias"),
    ("mixer.proj_k.weight_g", "mixer.uv_project.weight_g"), ("mixer.proj_k.weight_v", "mixer.uv_project.weight_v"),
    ("mixer.proj_d.weight_g", "mixer.diag.weight_g"), ("mixer.proj_d.weight_v", "mixer.diag.weight_v"),
    ("mixer.proj_d.bias", "mixer.diag.bias"),
]


def module_tensor(model, path):
    obj = model
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def load_into(model, ours, c):
    """Copy every tensor of the case into the module tree; every parameter must be set exactly once."""
    done = set()
    with torch.no_grad():
        def put(path, t):
            dst = module_tensor(model, path)
            assert dst.shape == t.shape, (path, dst.shape, t.shape)
            dst.copy_(t)
            done.add(path)
        put("backbone.embedding.weight", ours["word_emb.emb.weight"])
        put("backbone.norm_f.weight", ours["backbone.norm_f.weight"])
        put("backbone.norm_f.bias", ours["backbone.norm_f.bias"])
        for i in range(c["n_layer"]):
            pre = f"backbone.layers.{i}."
            put(pre + "norm.weight", ours[pre + "norm.weight"])
            put(pre + "norm.bias", ours[pre + "norm.bias"])
            for o, m in OURS_TO_MODULE:
                if pre + "mixer." + o in ours:
                    put(pre + "mixer." + m, ours[pre + "mixer." + o])
    n_ours = sum(1 for k in ours if k.startswith(("word_emb.", "backbone.")))
    assert len(done) == n_ours, (len(done), n_ours)
    sd = model.state_dict()
    assert set(sd) - {"lm_head.weight"} == done, sorted(set(sd) ^ done)


def torch2_names(sd):
    """torch >= 2.1 nn.utils.parametrizations.weight_norm: original0 = g, original1 = v."""
    out = {}
    for k, v in sd.items():
        if k.endswith(".weight_g"):
            k = k[:-len("weight_g")] + "parametrizations.weight.original0"
        elif k.endswith(".weight_v"):
            k = k[:-len("weight_v")] + "parametrizations.weight.original1"
        out[k] = v
    return out


def ref_config(c, mixer_name):
    """MambaConfig.__dict__ as the word-problem code fills it (construct_model), rms_norm false."""
    ssm = dict(layer="FPMamba1", d_mixer=None, mixer_type=mixer_name, mixer_rank=c["mixer_rank"], mixer_proj_rank=-1,
               symm_mixer=False, mixer_h_dep=True, n_backwards=c["n_back"], max_iter=c["max_iter"],
               norm_eps=c["mixer_eps"], use_short_conv=bool(c["conv"]), d_state=c["d_state"])
    return dict(d_model=c["d_model"], d_intermediate=0, n_layer=c["n_layer"], vocab_size=c["vocab"], ssm_cfg=ssm,
                attn_layer_idx=[], attn_cfg={}, rms_norm=False, residual_in_fp32=True, fused_add_norm=True,
                pad_vocab_size_multiple=c["pad"], tie_embeddings=True)


def write(case_file, folder, mixer_name, torch2, with_head, meta):
    tensors, fmeta = common.read_safetensors(os.path.join(HERE, case_file))
    impl = json.loads(fmeta["implicit_cfg"])
    base = json.loads(fmeta["config"])
    c = dict(d_model=base["d_model"], n_layer=base["n_layer"], d_state=base["d_state"], d_conv=base["d_conv"],
             E=base["expand"] * base["d_model"], dt_rank=int(impl["dt_rank"]), conv=int(impl["short_conv"]),
             glu_in_loop=int(impl["glu_in_loop"]), mixer_type=impl["mixer_type"], mixer_rank=int(impl["mixer_rank"]),
             n_back=int(impl["fp_n_backwards"]), max_iter=int(impl["fp_max_iter"]), mixer_eps=float(impl["mixer_norm_eps"]),
             vocab=base["vocab"], pad=int(impl["pad_vocab_multiple"]))
    c["vocab_padded"] = -(-c["vocab"] // c["pad"]) * c["pad"]
    assert impl["norm_type"] == "layernorm" and float(impl["norm_eps"]) == 1e-5 and c["dt_rank"] == math.ceil(c["d_model"] / 16)
    model = LM(c)
    load_into(model, tensors, c)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if not with_head:
        del sd["lm_head.weight"]
    else:
        assert torch.equal(sd["lm_head.weight"], sd["backbone.embedding.weight"])
    if torch2:
        sd = torch2_names(sd)
    d = os.path.join(OUT, folder)
    os.makedirs(d, exist_ok=True)
    common.write_verified(os.path.join(d, "model.safetensors"), sd, meta)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(ref_config(c, mixer_name), f, indent=4)
    print(f"wrote {d}: {len(sd)} tensors ({'torch 2' if torch2 else 'torch 1'} weight-norm names)")


# ---- exports: what `implicit export ... --layout fp-rnn` wrote, read back as the reference's code would --------

EXPORTS = {"export_fp_rnn_k": "fp_ref_k.safetensors"}   # implicit export interop/fp_rnn_k ... --layout fp-rnn


def from_torch2(sd):
    out = {}
    for k, v in sd.items():
        k = k.replace(".parametrizations.weight.original0", ".weight_g").replace(".parametrizations.weight.original1", ".weight_v")
        out[k] = v
    return out


def read_export(folder):
    """The export's config.json -> a gen_fp_mamba case; its tensors -> the module tree (load_state_dict,
    strict but for the tied lm_head it does not store) -> our names."""
    import gen_fp_mamba as gfm
    d = os.path.join(OUT, folder)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    ssm = cfg["ssm_cfg"]
    assert ssm["layer"] == "FPMamba1" and cfg["d_intermediate"] == 0 and cfg["tie_embeddings"]
    case = dict(vocab=cfg["vocab_size"], pad=cfg["pad_vocab_size_multiple"], d_model=cfg["d_model"], n_layer=cfg["n_layer"],
                expand=ssm["expand"], d_state=ssm["d_state"], d_conv=ssm["d_conv"],
                dt_rank=math.ceil(cfg["d_model"] / 16) if ssm["dt_rank"] == "auto" else ssm["dt_rank"],
                mixer_type={"householderproduct": "householder"}.get(ssm["mixer_type"], ssm["mixer_type"]),
                mixer_rank=ssm["mixer_rank"], conv=int(ssm["use_short_conv"]), glu_in_loop=int(ssm["glu_in_loop"]),
                n_back=ssm["n_backwards"], max_iter=ssm["max_iter"], thr=ssm["convergence_threshold"],
                norm_type="rmsnorm" if cfg["rms_norm"] else "layernorm", block_eps=cfg["norm_epsilon"],
                mixer_eps=ssm["norm_eps"])
    c = gfm.full_cfg(case)
    tensors, meta = common.read_safetensors(os.path.join(d, "model.safetensors"))
    assert meta.get("format") == "pt", meta
    model = LM(c)
    missing, unexpected = model.load_state_dict(from_torch2(tensors), strict=False)
    assert list(missing) == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    ours = {"word_emb.emb.weight": model.backbone.embedding.weight.detach().clone()}
    for i in range(c["n_layer"]):
        pre = f"backbone.layers.{i}."
        ours[pre + "norm.weight"] = module_tensor(model, pre + "norm.weight").detach().clone()
        ours[pre + "norm.bias"] = module_tensor(model, pre + "norm.bias").detach().clone()
        for o, m in OURS_TO_MODULE:
            try:
                ours[pre + "mixer." + o] = module_tensor(model, pre + "mixer." + m).detach().clone()
            except AttributeError:
                pass
    ours["backbone.norm_f.weight"] = model.backbone.norm_f.weight.detach().clone()
    ours["backbone.norm_f.bias"] = model.backbone.norm_f.bias.detach().clone()
    return c, ours


def exports():
    import gen_fp_mamba as gfm
    out = {}
    for folder, src in EXPORTS.items():
        if not os.path.exists(os.path.join(OUT, folder, "model.safetensors")):
            print("skip %s: run the `implicit export ... --layout fp-rnn` commands of docs/interop.md first" % folder)
            continue
        c, p = read_export(folder)
        ref, _ = common.read_safetensors(os.path.join(HERE, src))
        for k, v in p.items():   # the export holds the source's weights exactly
            assert torch.equal(v, ref[k]), k
        ids, tg = ref["input.ids"].long(), ref["input.targets"].long()
        logits, _, _, rec = gfm.run_mode({k: v.double() for k, v in p.items()}, ids, tg, c, "eval")
        out[folder + ".ids"] = ids.to(torch.int32)
        out[folder + ".logits"] = logits.float()
        out[folder + ".iters"] = torch.tensor([r[0] for r in rec], dtype=torch.int32)
        print(f"read {folder}: eval iterations {[r[0] for r in rec]}")
    if out:
        common.write_verified(os.path.join(OUT, "export_fp_logits.safetensors"), out,
                              {"generator": "tests/ref/gen_fp_interop.py"})


def write_mamba1():
    """mamba_ssm's MambaLMHeadModel with Mamba1 layers (the reference's baseline): the weights of
    mamba1.safetensors (gen_mamba1.py) under mamba_ssm's names, which are the mixer's own (in_proj,
    conv1d, x_proj, dt_proj, A_log, D, out_proj) with backbone.embedding.weight, and its MambaConfig
    (rms_norm true, no MLP, tied head, vocab padded to 8)."""
    tensors, fmeta = common.read_safetensors(os.path.join(HERE, "mamba1.safetensors"))
    base = json.loads(fmeta["config"])
    sd = {}
    for k, v in tensors.items():
        if k == "word_emb.emb.weight":
            sd["backbone.embedding.weight"] = v
        elif k.startswith("backbone."):
            sd[k] = v
    d = os.path.join(OUT, "mamba_ssm_mamba1")
    os.makedirs(d, exist_ok=True)
    common.write_verified(os.path.join(d, "model.safetensors"), sd, {"format": "pt"})
    assert base["dt_rank"] == 0 and base["pad_vocab_multiple"] == 8 and base["norm_eps"] == 1e-5
    cfg = dict(d_model=base["d_model"], d_intermediate=0, n_layer=base["n_layer"], vocab_size=base["vocab"],
               ssm_cfg=dict(layer="Mamba1", d_state=base["d_state"], d_conv=base["d_conv"], expand=base["expand"]),
               attn_layer_idx=[], attn_cfg={}, rms_norm=True, residual_in_fp32=True, fused_add_norm=True,
               pad_vocab_size_multiple=8, tie_embeddings=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=4)
    print(f"wrote {d}: {len(sd)} tensors")


def main():
    common.setup_torch()
    write("fp_ref_h.safetensors", "fp_rnn_h", "householderproduct", torch2=True, with_head=True, meta={"format": "pt"})
    write("fp_ref_k.safetensors", "fp_rnn_k", "kronecker", torch2=False, with_head=False, meta={})
    write_mamba1()
    exports()


if __name__ == "__main__":
    main()
