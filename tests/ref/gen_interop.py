"""Checkpoints as other tools write them, for tests/test_interop.c (docs/interop.md).

What: the weights of the reference files of this folder (mamba2, llama, implicit_mamba2), written
the way PyTorch / Hugging Face code writes them, one folder per source under interop/:
  hf_mamba2/          Mamba2ForCausalLM: config.json (transformers' Mamba2Config keys, written by
                      Python's json, so time_step_limit holds Infinity) + model.safetensors with
                      format "pt" and transformers' names; the tied head is not stored (as
                      save_pretrained does)
  hf_llama/           LlamaForCausalLM, sharded: model-0000{1,2}-of-00002.safetensors + the index
                      model.safetensors.index.json; the tied lm_head.weight stored as well (same
                      values) and an old-style rotary_emb.inv_freq buffer
  hf_llama_untied/    LlamaForCausalLM with its own output head (tie_word_embeddings false): a
                      tiny model of its own (V 16, D 16, one layer), lm_head.weight drawn apart
                      from the embedding; hf_llama_untied_ref.safetensors holds its input.ids and
                      the out.logits of gen_llama's forward with that head
  ref_implicit_mamba2.safetensors
                      the reference's names (spec implicit-lm §14) with format "pt" and the model
                      config as the reference's nested backbone_config / deq_params JSON in
                      __metadata__["config"]
  ref_llama/          the reference's names in a model.safetensors with no __metadata__ at all,
                      and the reference's config.json beside it
The names and config keys are written here from transformers' conventions (modeling_mamba2.py,
modeling_llama.py, their configuration classes) independently of the C name tables; the expected
logits are those of the source reference files (out.logits, eval.logits), computed by the
independent PyTorch implementations of gen_mamba2.py / gen_llama.py / gen_implicit.py.
Second part, `export`: reads the folders that `implicit export` wrote (interop/export_*; the
commands are in docs/interop.md), maps them back with this file's tables, runs the reference
forward of gen_mamba2 / gen_llama / gen_implicit on them in float64 and writes the logits to
interop/export_logits.safetensors, which test_interop compares with the C model's.

Run: /usr/bin/python3 tests/ref/gen_interop.py   (from gen_all.sh, after the generators it reads)
"""
import json
import os
import torch

import common
import gen_implicit as gi
import gen_llama as gl
import gen_mamba2 as gm

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "interop")


def weights(name):
    t, meta = common.read_safetensors(os.path.join(HERE, name + ".safetensors"))
    return {k: v for k, v in t.items() if k.startswith(("word_emb.", "backbone."))}, json.loads(meta["config"])


# transformers' names for the reference's (spec §14), per family
def hf_mamba2_name(n):
    return "backbone.embeddings.weight" if n == "word_emb.emb.weight" else n


HF_LLAMA_PARTS = {
    "norm.weight": "input_layernorm.weight",
    "norm2.weight": "post_attention_layernorm.weight",
    "mixer.wq.weight": "self_attn.q_proj.weight",
    "mixer.wk.weight": "self_attn.k_proj.weight",
    "mixer.wv.weight": "self_attn.v_proj.weight",
    "mixer.out_proj.weight": "self_attn.o_proj.weight",
    "mlp.w1.weight": "mlp.gate_proj.weight",
    "mlp.w3.weight": "mlp.up_proj.weight",
    "mlp.fc2.weight": "mlp.down_proj.weight",
}


def hf_llama_name(n):
    if n == "word_emb.emb.weight":
        return "model.embed_tokens.weight"
    if n == "backbone.norm_f.weight":
        return "model.norm.weight"
    _, _, i, rest = n.split(".", 3)   # backbone.layers.{i}.rest
    return "model.layers.%s.%s" % (i, HF_LLAMA_PARTS[rest])


def dump(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)   # Python's json: float("inf") becomes Infinity, as save_pretrained writes
        f.write("\n")


def hf_mamba2(w, c):
    d = os.path.join(OUT, "hf_mamba2")
    os.makedirs(d, exist_ok=True)
    E = c["expand"] * c["d_model"]
    dump(os.path.join(d, "config.json"), {
        "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "bos_token_id": 0, "eos_token_id": 0,
        "pad_token_id": 0, "chunk_size": 256, "conv_kernel": c["d_conv"], "expand": c["expand"],
        "head_dim": c["headdim"], "hidden_act": "silu", "hidden_size": c["d_model"], "initializer_range": 0.1,
        "layer_norm_epsilon": c["norm_eps"], "n_groups": 1, "norm_before_gate": False,
        "num_heads": E // c["headdim"], "num_hidden_layers": c["n_layer"], "rescale_prenorm_residual": False,
        "residual_in_fp32": True, "rms_norm": True, "state_size": c["d_state"], "tie_word_embeddings": True,
        "time_step_floor": 0.0001, "time_step_limit": [0.0, float("inf")], "time_step_max": 0.1,
        "time_step_min": 0.001, "time_step_rank": 2, "torch_dtype": "float32", "transformers_version": "4.46.0",
        "use_bias": False, "use_cache": True, "use_conv_bias": True, "vocab_size": c["vocab"]})
    common.write_safetensors(os.path.join(d, "model.safetensors"), {hf_mamba2_name(k): v for k, v in w.items()},
                             {"format": "pt"})


def hf_llama(w, c):
    d = os.path.join(OUT, "hf_llama")
    os.makedirs(d, exist_ok=True)
    dump(os.path.join(d, "config.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "head_dim": c["d_head"],
        "hidden_act": "silu", "hidden_size": c["d_model"], "initializer_range": 0.02,
        "intermediate_size": c["mlp_hidden"], "max_position_embeddings": 2048, "mlp_bias": False,
        "num_attention_heads": c["n_head"], "num_hidden_layers": c["n_layer"], "num_key_value_heads": c["n_head"],
        "pretraining_tp": 1, "rms_norm_eps": c["norm_eps"], "rope_scaling": None, "rope_theta": c["rope_theta"],
        "tie_word_embeddings": True, "torch_dtype": "float32", "transformers_version": "4.46.0", "use_cache": True,
        "vocab_size": c["vocab"]})
    hf = {hf_llama_name(k): v for k, v in w.items()}
    d_head = c["d_head"]
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head))
    shards = [{}, {}]
    for k, v in hf.items():
        shards[0 if k.startswith(("model.embed_tokens", "model.layers.0.")) else 1][k] = v
    shards[0]["model.layers.0.self_attn.rotary_emb.inv_freq"] = inv_freq.float()
    shards[1]["lm_head.weight"] = hf["model.embed_tokens.weight"].clone()   # tied: the same values
    wmap, total = {}, 0
    for s, tensors in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (s + 1, len(shards))
        common.write_safetensors(os.path.join(d, name), tensors, {"format": "pt"})
        for k, v in tensors.items():
            wmap[k] = name
            total += 4 * v.numel()
    dump(os.path.join(d, "model.safetensors.index.json"), {"metadata": {"total_size": total}, "weight_map": wmap})


def hf_llama_untied():
    """A Llama whose lm_head is not the embedding: logits = norm_f(h) @ lm_head^T."""
    torch.manual_seed(20)
    c = {"vocab": 16, "d_model": 16, "n_layer": 1, "n_head": 2, "d_inner": 36, "rope_theta": 10000.0}
    h = gl.hidden(c)   # 24
    p = gl.init_params(c)
    p["word_emb.emb.weight"] = torch.randn(c["vocab"], c["d_model"]) * 0.5
    head = torch.randn(c["vocab"], c["d_model"]) * 0.5
    d = os.path.join(OUT, "hf_llama_untied")
    os.makedirs(d, exist_ok=True)
    dump(os.path.join(d, "config.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c["d_model"],
        "intermediate_size": h, "num_attention_heads": c["n_head"], "num_hidden_layers": c["n_layer"],
        "num_key_value_heads": c["n_head"], "rms_norm_eps": common.NORM_EPS, "rope_theta": c["rope_theta"],
        "max_position_embeddings": 64, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "float32", "vocab_size": c["vocab"]})
    hf = {hf_llama_name(k): v for k, v in p.items()}
    hf["lm_head.weight"] = head
    common.write_safetensors(os.path.join(d, "model.safetensors"), hf, {"format": "pt"})
    ids = torch.randint(0, c["vocab"], (2, 7))
    p64 = {k: v.double() for k, v in p.items()}
    emb = p64["word_emb.emb.weight"]
    x = emb[ids]
    for i in range(c["n_layer"]):
        w = gl.layer(p64, i)
        x = x + gl.attention(w, common.rmsnorm(x, w["norm.weight"]), c)
        x = x + gl.swiglu(w, common.rmsnorm(x, w["norm2.weight"]))
    logits = common.rmsnorm(x, p64["backbone.norm_f.weight"]) @ head.double().t()
    tied = common.rmsnorm(x, p64["backbone.norm_f.weight"]) @ emb.t()
    assert (logits - tied).abs().max() > 0.1, "the head must matter"
    common.write_safetensors(os.path.join(OUT, "hf_llama_untied_ref.safetensors"),
                             {"input.ids": ids.to(torch.int32), "out.logits": logits.float()},
                             {"generator": "tests/ref/gen_interop.py", "torch_version": torch.__version__})


def ref_implicit_mamba2(w, c):
    config = {
        "backbone_type": "implicit", "n_tokens": c["vocab"], "pad_vocab": False, "dropout": 0.0,
        "backbone_config": {"d_model": c["d_model"], "n_layer": c["n_layer"], "d_inner": 0, "block_type": "mamba2",
                            "pre_norm": True, "rms_norm": True, "norm_epsilon": c["norm_eps"], "do_weight_norm": True,
                            "block_cfg": {"d_state": c["d_state"], "d_conv": c["d_conv"], "expand": c["expand"],
                                          "headdim": c["headdim"]}},
        "deq_params": {"solver": {"f_solver": "fixed_point_iter", "f_max_iter": c["f_max_iter"], "f_tol": c["f_tol"],
                                  "f_stop_mode": "rel", "eval_f_max_iter": c["eval_f_max_iter"]},
                       "training": {"grad": c["grad"], "tau": c["tau"], "core": "sliced"},
                       "norm": {"norm_type": "weight_norm"}}}
    common.write_safetensors(os.path.join(OUT, "ref_implicit_mamba2.safetensors"), w,
                             {"format": "pt", "config": json.dumps(config)})


def ref_llama(w, c):
    d = os.path.join(OUT, "ref_llama")
    os.makedirs(d, exist_ok=True)
    dump(os.path.join(d, "config.json"), {
        "backbone_type": "explicit", "vocab_size": c["vocab"], "pad_vocab": False, "dropout": 0.0,
        "tie_embeddings": True,
        "backbone_config": {"d_model": c["d_model"], "n_layer": c["n_layer"], "d_inner": c["d_inner"],
                            "block_type": "transformer", "mlp_type": "llama_mlp", "pre_norm": True, "rms_norm": True,
                            "norm_epsilon": c["norm_eps"],
                            "block_cfg": {"n_head": c["n_head"], "rope_theta": c["rope_theta"], "max_seq_len": 2048}}})
    common.write_safetensors(os.path.join(d, "model.safetensors"), w, None)


def sources():
    os.makedirs(OUT, exist_ok=True)
    w, c = weights("mamba2")
    hf_mamba2(w, c)
    w, c = weights("llama")
    hf_llama(w, c)
    ref_llama(w, c)
    hf_llama_untied()
    w, c = weights("implicit_mamba2")
    ref_implicit_mamba2(w, c)


# ---------------------------------------------------------------------------------------------
# Exports: what `implicit export` wrote, read back as PyTorch / transformers code would
# ---------------------------------------------------------------------------------------------

# folder -> the reference file whose input.ids it is run on
EXPORTS = {
    "export_hf_llama": "llama",              # implicit export interop/ref_llama ... --layout hf
    "export_ref_mamba2": "mamba2",           # implicit export interop/hf_mamba2 ... --layout reference
    "export_hf_mamba2": "mamba2",            # implicit export interop/export_ref_mamba2 ... --layout hf
    "export_ref_implicit_mamba2": "implicit_mamba2",  # ... interop/ref_implicit_mamba2.safetensors --layout reference
}

OURS_OF_HF_LLAMA = {v: k for k, v in HF_LLAMA_PARTS.items()}


def from_hf(cfg, t):
    """transformers names and config -> the reference's names and the generators' config dict."""
    mt = cfg["model_type"]
    assert cfg.get("tie_word_embeddings", True) and "lm_head.weight" not in t, "tied head, stored once"
    if mt == "mamba2":
        assert cfg["n_groups"] == 1 and cfg["num_heads"] * cfg["head_dim"] == cfg["expand"] * cfg["hidden_size"]
        assert cfg["layer_norm_epsilon"] == common.NORM_EPS and not cfg["use_bias"] and cfg["use_conv_bias"]
        p = {("word_emb.emb.weight" if k == "backbone.embeddings.weight" else k): v for k, v in t.items()}
        c = {"vocab": cfg["vocab_size"], "d_model": cfg["hidden_size"], "n_layer": cfg["num_hidden_layers"],
             "d_state": cfg["state_size"], "expand": cfg["expand"], "headdim": cfg["head_dim"],
             "d_conv": cfg["conv_kernel"]}
        return "mamba2", p, c
    assert mt == "llama" and cfg["num_key_value_heads"] == cfg["num_attention_heads"]
    assert cfg["rms_norm_eps"] == common.NORM_EPS and cfg["rope_scaling"] is None and cfg["hidden_act"] == "silu"
    p = {}
    for k, v in t.items():
        if k == "model.embed_tokens.weight":
            p["word_emb.emb.weight"] = v
        elif k == "model.norm.weight":
            p["backbone.norm_f.weight"] = v
        else:
            _, _, i, rest = k.split(".", 3)
            p["backbone.layers.%s.%s" % (i, OURS_OF_HF_LLAMA[rest])] = v
    c = {"vocab": cfg["vocab_size"], "d_model": cfg["hidden_size"], "n_layer": cfg["num_hidden_layers"],
         "n_head": cfg["num_attention_heads"], "rope_theta": cfg["rope_theta"],
         "d_inner": (3 * cfg["intermediate_size"] + 1) // 2}
    return "llama", p, c


def from_reference(cfg, t):
    """The reference's nested config (spec §11) with its own tensor names."""
    bb, blk = cfg["backbone_config"], cfg["backbone_config"]["block_cfg"]
    assert bb["norm_epsilon"] == common.NORM_EPS and cfg["tie_embeddings"] and not cfg["pad_vocab"]
    fam = "mamba2" if bb["block_type"] == "mamba2" else "llama"
    c = {"vocab": cfg.get("n_tokens", cfg.get("vocab_size")), "d_model": bb["d_model"], "n_layer": bb["n_layer"],
         "d_inner": bb["d_inner"]}
    if fam == "mamba2":
        c.update(d_state=blk["d_state"], expand=blk["expand"], headdim=blk["headdim"], d_conv=blk["d_conv"])
    else:
        c.update(n_head=blk["n_head"], rope_theta=blk["rope_theta"])
    return ("implicit_" if cfg["backbone_type"] == "implicit" else "") + fam, dict(t), c


def export_logits(folder, ids):
    d = os.path.join(OUT, folder)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t, meta = common.read_safetensors(os.path.join(d, "model.safetensors"))
    assert meta == {"format": "pt"}, meta
    t = {k: v.double() for k, v in t.items()}
    model, p, c = from_hf(cfg, t) if "model_type" in cfg else from_reference(cfg, t)
    if model == "mamba2":
        return gm.model_fwd(p, ids, c)
    if model == "llama":
        return gl.model_fwd(p, ids, c)
    fam = (gi.Mamba2 if model == "implicit_mamba2" else gi.Llama)(c)
    s, tr = cfg["deq_params"]["solver"], cfg["deq_params"]["training"]
    f_thres = s["eval_f_max_iter"] if s["eval_f_max_iter"] > 0 else int(s["f_max_iter"] * s["eval_factor"])
    logits, steps, _ = gi.simultaneous(fam, gi.effective(p), ids, f_thres, s["f_tol"], tr["tau"])
    return logits


def exports():
    out = {}
    for folder, ref in EXPORTS.items():
        if not os.path.isdir(os.path.join(OUT, folder)):
            print("skip %s: run the `implicit export` commands of docs/interop.md first" % folder)
            continue
        rt, _ = common.read_safetensors(os.path.join(HERE, ref + ".safetensors"))
        ids = rt["input.ids"].long()
        logits = export_logits(folder, ids)
        out[folder + ".ids"] = rt["input.ids"]
        out[folder + ".logits"] = logits.float()
        print("  %-28s logits %s, max |logit| %.3f" % (folder, tuple(logits.shape), logits.abs().max().item()))
    if out:
        common.write_safetensors(os.path.join(OUT, "export_logits.safetensors"), out,
                                 {"generator": "tests/ref/gen_interop.py", "torch_version": torch.__version__})


if __name__ == "__main__":
    torch.set_num_threads(1)
    sources()
    exports()
