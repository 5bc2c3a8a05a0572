/* layouts.c: the name-map tables of every checkpoint source and their config dialects; see
 * layouts.h for how a source is added. */
#include "layouts.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../io/keyjson.h"
#include "model.h"

/* ---- the name tables ----------------------------------------------------------------------- */

/* A row whose `ours` is NULL marks a tensor of the source that is not a parameter (a buffer such
 * as RoPE's inv_freq that old writers stored): it is skipped on load and never written. */

/* Hugging Face transformers, Mamba2ForCausalLM: the backbone uses our names already. */
static const NameRule HF_MAMBA2[] = {
    {"word_emb.emb.weight", "backbone.embeddings.weight"},
    {HEAD_TENSOR, "lm_head.weight"},
};

/* Hugging Face transformers, LlamaForCausalLM (SwiGLU: gate = w1, up = w3, down = fc2). */
static const NameRule HF_LLAMA[] = {
    {"word_emb.emb.weight", "model.embed_tokens.weight"},
    {HEAD_TENSOR, "lm_head.weight"},
    {"backbone.norm_f.weight", "model.norm.weight"},
    {"backbone.layers.{i}.norm.weight", "model.layers.{i}.input_layernorm.weight"},
    {"backbone.layers.{i}.norm2.weight", "model.layers.{i}.post_attention_layernorm.weight"},
    {"backbone.layers.{i}.mixer.wq.weight", "model.layers.{i}.self_attn.q_proj.weight"},
    {"backbone.layers.{i}.mixer.wk.weight", "model.layers.{i}.self_attn.k_proj.weight"},
    {"backbone.layers.{i}.mixer.wv.weight", "model.layers.{i}.self_attn.v_proj.weight"},
    {"backbone.layers.{i}.mixer.out_proj.weight", "model.layers.{i}.self_attn.o_proj.weight"},
    {"backbone.layers.{i}.mlp.w1.weight", "model.layers.{i}.mlp.gate_proj.weight"},
    {"backbone.layers.{i}.mlp.w3.weight", "model.layers.{i}.mlp.up_proj.weight"},
    {"backbone.layers.{i}.mlp.fc2.weight", "model.layers.{i}.mlp.down_proj.weight"},
    {NULL, "model.layers.{i}.self_attn.rotary_emb.inv_freq"},
};

/* The Fixed-Point-RNN reference (its FPLMHeadModel around mamba_ssm's MixerModel; mamba_ssm's
 * MambaLMHeadModel for the Mamba-1 baseline): the embedding is backbone.embedding.weight, the
 * weight-normed projections of the layers and mixers have their own names, torch 2 stores weight
 * norm as parametrizations.weight.original0 (g) / original1 (v) (torch 1: weight_g / weight_v,
 * ours already). P is the mixer's prefix in the file: "mixer." inside FPMamba1 / FPMamba2, and
 * "mixer._orig_mod." inside FPRNN, whose mixer is wrapped by torch.compile. Not mapped: Monarch
 * (its uv_project is Kronecker's name too; a Monarch file fails as a missing tensor) and the
 * nonselective mixer (torch's orthogonal parametrisation, not our skew / base). */
#define FPR_MIXER(P)                                                                                  \
    {"backbone.layers.{i}.mixer.mixer.sub{i}.proj_u*", "backbone.layers.{i}.mixer." P "mixers.{i}.u_proj*"},       \
    {"backbone.layers.{i}.mixer.mixer.sub{i}.proj_alpha*", "backbone.layers.{i}.mixer." P "mixers.{i}.alpha_proj*"}, \
    {"backbone.layers.{i}.mixer.mixer.sub{i}.proj_k*", "backbone.layers.{i}.mixer." P "mixers.{i}.uv_project*"},   \
    {"backbone.layers.{i}.mixer.mixer.sub{i}.proj_d*", "backbone.layers.{i}.mixer." P "mixers.{i}.diag*"},         \
    {"backbone.layers.{i}.mixer.mixer.proj_u*", "backbone.layers.{i}.mixer." P "u_proj*"},                        \
    {"backbone.layers.{i}.mixer.mixer.proj_alpha*", "backbone.layers.{i}.mixer." P "alpha_proj*"},                \
    {"backbone.layers.{i}.mixer.mixer.proj_k*", "backbone.layers.{i}.mixer." P "uv_project*"},                    \
    {"backbone.layers.{i}.mixer.mixer.proj_d*", "backbone.layers.{i}.mixer." P "diag*"},                          \
    {"backbone.layers.{i}.mixer.mixer.proj_l*", "backbone.layers.{i}.mixer." P "proj*"}
#define FPR_ENDS {"word_emb.emb.weight", "backbone.embedding.weight"}, {HEAD_TENSOR, "lm_head.weight"}

static const NameRule FPR_MAMBA[] = {   /* fp_mamba, fp_mamba2, mamba1 */
    FPR_ENDS,
    {"backbone.layers.{i}.mixer.bc_proj*", "backbone.layers.{i}.mixer.bc_y_proj*"},
    {"backbone.layers.{i}.mixer.zy_proj*", "backbone.layers.{i}.mixer.z_y_proj*"},
    FPR_MIXER("mixer."),
};

static const NameRule FPR_RNN[] = {     /* fp_rnn */
    FPR_ENDS,
    {"backbone.layers.{i}.mixer.in_proj*", "backbone.layers.{i}.mixer.input_trans*"},
    {"backbone.layers.{i}.mixer.o_proj*", "backbone.layers.{i}.mixer.output_trans*"},
    {"backbone.layers.{i}.mixer.norm*", "backbone.layers.{i}.mixer.output_norm*"},
    {"backbone.layers.{i}.mixer.x_conv*", "backbone.layers.{i}.mixer.conv1d_x*"},
    {"backbone.layers.{i}.mixer.b_conv*", "backbone.layers.{i}.mixer.conv1d_b*"},
    {"backbone.layers.{i}.mixer.c_conv*", "backbone.layers.{i}.mixer.conv1d_c*"},
    {"backbone.layers.{i}.mixer.lam_conv*", "backbone.layers.{i}.mixer.conv1d_lambda*"},
    {"backbone.layers.{i}.mixer.mix_conv*", "backbone.layers.{i}.mixer.conv1d_mixer*"},
    {"backbone.layers.{i}.mixer.lam_proj*", "backbone.layers.{i}.mixer.lambda_proj*"},
    FPR_MIXER("mixer._orig_mod."),
};

/* torch 2's weight-norm parametrisation (applied after the tables above) */
static const NameRule TORCH2_WEIGHT_NORM[] = {
    {"*.weight_g", "*.parametrizations.weight.original0"},
    {"*.weight_v", "*.parametrizations.weight.original1"},
};

static int fpr_read(const Json *root, ModelCfg *c, const char *where, int *mine);
static int fpr_write(const ModelCfg *c, JsonBuf *b);
static int hf_mamba2_read(const Json *root, ModelCfg *c, const char *where, int *mine);
static int hf_llama_read(const Json *root, ModelCfg *c, const char *where, int *mine);
static int hf_mamba2_write(const ModelCfg *c, JsonBuf *b);
static int hf_llama_write(const ModelCfg *c, JsonBuf *b);
static int ref_write(const ModelCfg *c, JsonBuf *b);

#define ROWS(t) t, (int)(sizeof t / sizeof t[0])
/* Row 0 is the identity layout (our names = the PyTorch reference's, spec §14): the fallback of
 * detection. Its config dialects are ours and the reference's, both read by keyjson/refcfg. */
static const CkptLayout LAYOUTS[] = {
    {"reference", NULL, "the PyTorch reference's state_dict names (ours; spec implicit-lm 14)", NULL, NULL, 0, NULL, 0,
     NULL, ref_write},
    {"hf", "mamba2", "Hugging Face transformers Mamba2ForCausalLM", "backbone.embeddings.weight", ROWS(HF_MAMBA2), NULL,
     0, hf_mamba2_read, hf_mamba2_write},
    {"hf", "llama", "Hugging Face transformers LlamaForCausalLM", "model.embed_tokens.weight", ROWS(HF_LLAMA), NULL, 0,
     hf_llama_read, hf_llama_write},
    /* FPRNN first: its probe is its own, the FPMamba row's is every file's of that source */
    {"fp-rnn", "fp_rnn", "the Fixed-Point-RNN reference's FPRNN LM", "backbone.layers.0.mixer.input_trans.weight",
     ROWS(FPR_RNN), ROWS(TORCH2_WEIGHT_NORM), fpr_read, fpr_write},
    {"fp-rnn", "fp_mamba|fp_mamba2|mamba1", "the Fixed-Point-RNN reference's FPMamba1 / FPMamba2 LM (mamba_ssm names)",
     "backbone.embedding.weight", ROWS(FPR_MAMBA), ROWS(TORCH2_WEIGHT_NORM), fpr_read, fpr_write},
};
#define N_LAYOUTS ((int)(sizeof LAYOUTS / sizeof LAYOUTS[0]))

int layout_count(void) { return N_LAYOUTS; }
const CkptLayout *layout_at(int i) { return i >= 0 && i < N_LAYOUTS ? &LAYOUTS[i] : NULL; }
int layout_is_ours(const CkptLayout *l) { return l == &LAYOUTS[0]; }

const char *layout_names(void) {
    static char names[256];
    if (names[0]) return names;
    size_t at = 0;
    for (int i = 0; i < N_LAYOUTS; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= !strcmp(LAYOUTS[j].name, LAYOUTS[i].name);
        if (!seen) at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", at ? "|" : "", LAYOUTS[i].name);
    }
    return names;
}

const CkptLayout *layout_detect(const char *const *names, int n) {
    for (int l = 1; l < N_LAYOUTS; l++)
        for (int i = 0; LAYOUTS[l].probe && i < n; i++)
            if (!strcmp(names[i], LAYOUTS[l].probe)) return &LAYOUTS[l];
    return &LAYOUTS[0];
}

static int in_list(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, word, n)) return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

const CkptLayout *layout_for_export(const char *name, const char *model) {
    char fams[256] = "";
    size_t at = 0;
    int named = 0;
    for (int i = 0; i < N_LAYOUTS; i++) {
        if (strcmp(LAYOUTS[i].name, name)) continue;
        named = 1;
        if (!LAYOUTS[i].families || in_list(LAYOUTS[i].families, model)) return &LAYOUTS[i];
        at += (size_t)snprintf(fams + at, sizeof fams - at, "%s%s", at ? " | " : "", LAYOUTS[i].families);
    }
    if (!named) err_set(IM_EINVAL, "unknown layout '%s' (known: %s)", name, layout_names());
    else err_set(IM_EINVAL, "layout '%s' holds %s models, not '%s' (--layout reference holds every model)", name, fams,
                 model);
    return NULL;
}

/* ---- wildcard names ------------------------------------------------------------------------ */

#define MAX_CAPS 8

/* Match s against pattern p; the captures of {i} / * in order. Returns the capture count or -1. */
static int match(const char *p, const char *s, const char **cap, size_t *len, int k) {
    for (;;) {
        if (!strncmp(p, "{i}", 3)) {
            if (!isdigit((unsigned char)*s) || k >= MAX_CAPS) return -1;
            const char *st = s;
            while (isdigit((unsigned char)*s)) s++;
            cap[k] = st;
            len[k++] = (size_t)(s - st);
            p += 3;
            continue;
        }
        if (*p == '*') {
            if (k >= MAX_CAPS) return -1;
            for (const char *t = s + strlen(s); t >= s; t--) {   /* longest first */
                int r = match(p + 1, t, cap, len, k + 1);
                if (r >= 0) {
                    cap[k] = s;
                    len[k] = (size_t)(t - s);
                    return r;
                }
            }
            return -1;
        }
        if (*p != *s) return -1;
        if (!*p) return k;
        p++;
        s++;
    }
}

/* Write pattern q with the captures substituted; -1 if it does not fit. */
static int fill(const char *q, const char *const *cap, const size_t *len, char *out, size_t cap_out) {
    size_t at = 0;
    int k = 0;
    while (*q) {
        const char *piece = q;
        size_t n = 1;
        if (!strncmp(q, "{i}", 3) || *q == '*') {
            piece = cap[k];
            n = len[k++];
            q += *q == '*' ? 1 : 3;
        } else {
            q++;
        }
        if (at + n >= cap_out) return -1;
        memcpy(out + at, piece, n);
        at += n;
    }
    out[at] = 0;
    return 0;
}

/* Apply the first matching row (from -> to) of rows; 1 applied (out written), 0 none, -1 too
 * long, 2 the row's target is NULL (a skipped buffer). */
static int rewrite(const NameRule *rows, int n, int to_ours, const char *name, char *out, size_t cap) {
    const char *caps[MAX_CAPS];
    size_t lens[MAX_CAPS];
    for (int r = 0; r < n; r++) {
        const char *from = to_ours ? rows[r].theirs : rows[r].ours, *to = to_ours ? rows[r].ours : rows[r].theirs;
        if (!from || match(from, name, caps, lens, 0) < 0) continue;
        if (!to) return 2;
        return fill(to, caps, lens, out, cap) ? -1 : 1;
    }
    return 0;
}

static int convert(const CkptLayout *l, int to_ours, const char *name, char *out, size_t cap) {
    char mid[512];
    if (strlen(name) >= sizeof mid || strlen(name) >= cap) return -1;
    int a = rewrite(l->rules, l->n_rules, to_ours, name, mid, sizeof mid);
    if (a < 0 || a == 2) return a < 0 ? -1 : 2;
    if (!a) strcpy(mid, name);
    int b = l->tails ? rewrite(l->tails, l->n_tails, to_ours, mid, out, cap) : 0;
    if (b < 0 || b == 2) return b < 0 ? -1 : 2;
    if (!b) strcpy(out, mid);
    return a || b;
}

int layout_to_ours(const CkptLayout *l, const char *theirs, char *out, size_t cap) {
    return convert(l, 1, theirs, out, cap);
}
int layout_to_theirs(const CkptLayout *l, const char *ours, char *out, size_t cap) {
    return convert(l, 0, ours, out, cap);
}

/* ---- Hugging Face config.json dialects ----------------------------------------------------- */

/* One key of a transformers config: copied to ours, or only checked (expect: the one value we
 * implement, as JSON text), or accepted and ignored (bookkeeping, initialisation, kernels). */
typedef struct {
    const char *key;
    const char *ours;    /* our key (value copied as text) | NULL */
    const char *expect;  /* the accepted value ("false", "1", "silu", "null") | NULL = any */
    const char *why;     /* for a rejected value */
} HfKey;

/* keys every transformers config may carry and that do not change the function computed */
#define HF_COMMON_INERT                                                                                     \
    {"model_type", NULL, NULL, NULL}, {"architectures", NULL, NULL, NULL}, {"transformers_version", NULL, NULL, NULL}, \
    {"torch_dtype", NULL, NULL, NULL}, {"dtype", NULL, NULL, NULL}, {"_name_or_path", NULL, NULL, NULL},               \
    {"bos_token_id", NULL, NULL, NULL}, {"eos_token_id", NULL, NULL, NULL}, {"pad_token_id", NULL, NULL, NULL},        \
    {"use_cache", NULL, NULL, NULL}, {"initializer_range", NULL, NULL, NULL}, {"tie_word_embeddings", NULL, NULL, NULL}, /* hf_tie */ \
    {"output_hidden_states", NULL, NULL, NULL}, {"return_dict", NULL, NULL, NULL}, {"vocab_size", "vocab_size", NULL, NULL}

static const HfKey HF_MAMBA2_KEYS[] = {
    HF_COMMON_INERT,
    {"hidden_size", "d_model", NULL, NULL},
    {"num_hidden_layers", "n_layer", NULL, NULL},
    {"state_size", "d_state", NULL, NULL},
    {"expand", "expand", NULL, NULL},
    {"head_dim", "headdim", NULL, NULL},
    {"num_heads", NULL, NULL, NULL},          /* checked against expand * hidden_size / head_dim */
    {"intermediate_size", NULL, NULL, NULL},  /* checked against expand * hidden_size */
    {"conv_kernel", "d_conv", NULL, NULL},
    {"layer_norm_epsilon", "norm_eps", NULL, NULL},
    {"n_groups", NULL, "1", "ngroups > 1 is not implemented"},
    {"use_bias", NULL, "false", "mixer biases are not implemented"},
    {"use_conv_bias", NULL, "true", "a conv without bias is not implemented"},
    {"rms_norm", NULL, "true", "only the gated RMSNorm mixer is implemented"},
    {"hidden_act", NULL, "\"silu\"", "only silu is implemented"},
    {"time_step_limit", NULL, NULL, NULL},    /* checked: (0, inf) only */
    /* transformers gates before its norm whatever this says (MambaRMSNormGated), as we do */
    {"norm_before_gate", NULL, NULL, NULL},
    {"residual_in_fp32", NULL, NULL, NULL},   /* all fp32 here */
    {"chunk_size", NULL, NULL, NULL},         /* a kernel tiling */
    {"pad_vocab_size_multiple", NULL, NULL, NULL}, /* transformers sizes the embedding by vocab_size */
    {"rescale_prenorm_residual", NULL, NULL, NULL}, {"time_step_min", NULL, NULL, NULL},
    {"time_step_max", NULL, NULL, NULL}, {"time_step_floor", NULL, NULL, NULL}, {"time_step_rank", NULL, NULL, NULL},
    {"time_step_init_scheme", NULL, NULL, NULL}, {"time_step_scale", NULL, NULL, NULL},
    {"use_mambapy", NULL, NULL, NULL},
};

static const HfKey HF_LLAMA_KEYS[] = {
    HF_COMMON_INERT,
    {"hidden_size", "d_model", NULL, NULL},
    {"num_hidden_layers", "n_layer", NULL, NULL},
    {"num_attention_heads", "n_head", NULL, NULL},
    {"num_key_value_heads", NULL, NULL, NULL},   /* checked: = num_attention_heads */
    {"head_dim", NULL, NULL, NULL},              /* checked: = hidden_size / num_attention_heads */
    {"intermediate_size", NULL, NULL, NULL},     /* -> d_inner */
    {"rms_norm_eps", "norm_eps", NULL, NULL},
    {"rope_theta", "rope_theta", NULL, NULL},
    {"rope_parameters", NULL, NULL, NULL},       /* checked: rope_type default, rope_theta */
    {"max_position_embeddings", "max_seq_len", NULL, NULL},
    {"hidden_act", NULL, "\"silu\"", "only the SwiGLU MLP (silu) is implemented"},
    {"attention_bias", NULL, "false", "attention biases are not implemented"},
    {"mlp_bias", NULL, "false", "MLP biases are not implemented"},
    {"rope_scaling", NULL, "null", "RoPE scaling is not implemented"},
    {"attention_dropout", NULL, NULL, NULL},     /* off at inference */
    {"pretraining_tp", NULL, NULL, NULL},        /* a compute split, same function */
};

static int hf_text(const Json *v, char *buf, size_t cap) {
    JsonBuf b;
    json_buf_init(&b, 0);
    json_write(&b, v);
    int ok = b.data && !b.failed;
    snprintf(buf, cap, "%s", ok ? b.data : "?");
    json_buf_free(&b);
    return ok ? 0 : -1;
}

/* Check and copy every member of root against keys[]; unknown keys are errors (a key we do not
 * know could change the function). */
static int hf_apply(const Json *root, const HfKey *keys, int n, ModelCfg *c, const char *where) {
    for (size_t i = 0; i < json_len(root); i++) {
        const char *k = json_key_at(root, i);
        const Json *v = json_at(root, i);
        int r = -1;
        for (int j = 0; j < n && r < 0; j++)
            if (!strcmp(keys[j].key, k)) r = j;
        if (r < 0)
            return err_set(IM_EINVAL, "%s: unknown Hugging Face config key '%s' (docs/interop.md lists the accepted keys)",
                           where, k);
        char text[KEY_STR_LEN];
        hf_text(v, text, sizeof text);
        if (keys[r].expect && strcmp(text, keys[r].expect))
            return err_set(IM_EINVAL, "%s: '%s' = %s: %s", where, k, text, keys[r].why);
        if (!keys[r].ours) continue;
        if (v->type != JSON_NUMBER)
            return err_set(IM_EINVAL, "%s: '%s' = %s: expected a number", where, k, text);
        int rc = cfg_set(c, keys[r].ours, text);
        if (rc) return err_wrap(rc, "%s: '%s'", where, k);
    }
    return IM_OK;
}

static int is_model_type(const Json *root, const char *type) {
    const Json *t = json_get(root, "model_type");
    return t && t->type == JSON_STRING && !strcmp(t->string, type) && !json_get(root, "backbone_config");
}

static long long int_or(const Json *root, const char *key, long long dflt) {
    const Json *v = json_get(root, key);
    return v && v->type == JSON_NUMBER ? (long long)v->number : dflt;
}

/* tie_word_embeddings: false gives the model its own head (lm_head.weight); true, or no key, the
 * tied head. (transformers' class default is false, but a config without the key is read as tied:
 * a differing head is then refused by the loader, which names the key.) */
static int hf_tie(const Json *root, ModelCfg *t, const char *where) {
    const Json *v = json_get(root, "tie_word_embeddings");
    if (!v || v->type == JSON_NULL) return IM_OK;
    if (v->type != JSON_BOOL) return err_set(IM_EINVAL, "%s: 'tie_word_embeddings' must be true or false", where);
    t->tie_embeddings = v->boolean;
    return IM_OK;
}

static int hf_mamba2_read(const Json *root, ModelCfg *c, const char *where, int *mine) {
    *mine = is_model_type(root, "mamba2");
    if (!*mine) return IM_OK;
    ModelCfg t;
    cfg_defaults(&t);
    snprintf(t.model, sizeof t.model, "mamba2");
    /* transformers' Mamba2Config defaults, for keys a config leaves out */
    t.d_model = 768, t.n_layer = 24, t.d_state = 128, t.expand = 2, t.headdim = 64, t.d_conv = 4,
    t.vocab_size = 32768, t.pad_vocab_multiple = 0, t.norm_eps = 1e-5, t.rescale_out_proj = 0;
    const Json *ex = json_get(root, "expand");
    if (ex && (ex->type != JSON_NUMBER || !ex->is_int))
        return err_set(IM_EINVAL, "%s: 'expand' must be an integer here (E = expand * hidden_size)", where);
    int rc = hf_apply(root, HF_MAMBA2_KEYS, (int)(sizeof HF_MAMBA2_KEYS / sizeof *HF_MAMBA2_KEYS), &t, where);
    if (!rc) rc = hf_tie(root, &t, where);
    if (rc) return rc;
    long long E = (long long)t.expand * t.d_model;
    if (t.headdim <= 0 || E % t.headdim) return err_set(IM_EINVAL, "%s: head_dim %d does not divide expand * hidden_size = %lld", where, t.headdim, E);
    if (int_or(root, "num_heads", E / t.headdim) != E / t.headdim)
        return err_set(IM_EINVAL, "%s: num_heads %lld differs from expand * hidden_size / head_dim = %lld", where,
                       int_or(root, "num_heads", 0), E / t.headdim);
    if (int_or(root, "intermediate_size", E) != E)
        return err_set(IM_EINVAL, "%s: intermediate_size %lld differs from expand * hidden_size = %lld", where,
                       int_or(root, "intermediate_size", 0), E);
    const Json *lim = json_get(root, "time_step_limit");
    if (lim && lim->type != JSON_NULL &&
        !(json_len(lim) == 2 && json_at(lim, 0)->type == JSON_NUMBER && json_at(lim, 0)->number == 0 &&
          json_at(lim, 1)->type == JSON_NUMBER && isinf(json_at(lim, 1)->number)))
        return err_set(IM_EINVAL, "%s: 'time_step_limit' other than [0.0, Infinity]: a dt limit is not implemented", where);
    *c = t;
    return IM_OK;
}

static int hf_llama_read(const Json *root, ModelCfg *c, const char *where, int *mine) {
    *mine = is_model_type(root, "llama");
    if (!*mine) return IM_OK;
    ModelCfg t;
    cfg_defaults(&t);
    snprintf(t.model, sizeof t.model, "llama");
    snprintf(t.mlp_type, sizeof t.mlp_type, "swiglu");
    /* transformers' LlamaConfig defaults */
    t.d_model = 4096, t.n_layer = 32, t.n_head = 32, t.vocab_size = 32000, t.norm_eps = 1e-6, t.rope_theta = 10000.0,
    t.max_seq_len = 2048, t.pad_vocab_multiple = 0, t.rescale_out_proj = 0;
    int rc = hf_apply(root, HF_LLAMA_KEYS, (int)(sizeof HF_LLAMA_KEYS / sizeof *HF_LLAMA_KEYS), &t, where);
    if (!rc) rc = hf_tie(root, &t, where);
    if (rc) return rc;
    long long h = int_or(root, "intermediate_size", 11008);
    if (h < 1 || h > CFG_MAX_WIDTH) return err_set(IM_EINVAL, "%s: intermediate_size %lld out of range", where, h);
    t.d_inner = (int)((3 * h + 1) / 2);   /* our SwiGLU hidden is floor(2 d_inner / 3) = h */
    if (int_or(root, "num_key_value_heads", t.n_head) != t.n_head)
        return err_set(IM_EINVAL, "%s: num_key_value_heads %lld differs from num_attention_heads %d: grouped-query attention "
                       "is not implemented", where, int_or(root, "num_key_value_heads", 0), t.n_head);
    if (t.n_head > 0 && int_or(root, "head_dim", t.d_model / t.n_head) * t.n_head != t.d_model)
        return err_set(IM_EINVAL, "%s: head_dim %lld times num_attention_heads %d differs from hidden_size %d", where,
                       int_or(root, "head_dim", 0), t.n_head, t.d_model);
    const Json *rp = json_get(root, "rope_parameters");
    if (rp && rp->type == JSON_OBJECT) {
        const Json *ty = json_get(rp, "rope_type"), *th = json_get(rp, "rope_theta");
        if (ty && !(ty->type == JSON_STRING && !strcmp(ty->string, "default")))
            return err_set(IM_EINVAL, "%s: 'rope_parameters.rope_type' other than \"default\": RoPE scaling is not implemented", where);
        if (th && th->type == JSON_NUMBER) t.rope_theta = th->number;
    }
    *c = t;
    return IM_OK;
}

static void kv_int(JsonBuf *b, const char *k, long long v) { json_buf_kv_int(b, k, v); }

static int hf_mamba2_write(const ModelCfg *c, JsonBuf *b) {
    if (c->d_inner > 0) return err_set(IM_EINVAL, "layout hf: transformers' Mamba2 has no MLP (this model has d_inner %d)", c->d_inner);
    int V = c->pad_vocab_multiple > 0 ? (c->vocab_size + c->pad_vocab_multiple - 1) / c->pad_vocab_multiple * c->pad_vocab_multiple
                                      : c->vocab_size;
    int E = c->expand * c->d_model;
    json_buf_begin_obj(b);
    json_buf_key(b, "architectures");
    json_buf_begin_arr(b);
    json_buf_str(b, "Mamba2ForCausalLM");
    json_buf_end_arr(b);
    json_buf_kv_str(b, "model_type", "mamba2");
    kv_int(b, "vocab_size", V);   /* transformers sizes the embedding by vocab_size: the padded rows */
    kv_int(b, "hidden_size", c->d_model);
    kv_int(b, "num_hidden_layers", c->n_layer);
    kv_int(b, "state_size", c->d_state);
    kv_int(b, "expand", c->expand);
    kv_int(b, "head_dim", c->headdim);
    kv_int(b, "num_heads", E / c->headdim);
    kv_int(b, "n_groups", 1);
    kv_int(b, "conv_kernel", c->d_conv);
    json_buf_kv_num(b, "layer_norm_epsilon", c->norm_eps);
    json_buf_kv_bool(b, "use_bias", 0);
    json_buf_kv_bool(b, "use_conv_bias", 1);
    json_buf_kv_bool(b, "rms_norm", 1);
    json_buf_kv_bool(b, "norm_before_gate", 0);
    json_buf_kv_str(b, "hidden_act", "silu");
    json_buf_kv_bool(b, "residual_in_fp32", 1);
    json_buf_kv_bool(b, "tie_word_embeddings", c->tie_embeddings);
    json_buf_kv_str(b, "torch_dtype", "float32");
    json_buf_end_obj(b);
    return IM_OK;
}

static int hf_llama_write(const ModelCfg *c, JsonBuf *b) {
    if (c->d_inner <= 0) return err_set(IM_EINVAL, "layout hf: transformers' Llama needs an MLP (this model has d_inner 0)");
    if (!strcmp(c->mlp_type, "gated")) return err_set(IM_EINVAL, "layout hf: transformers' Llama has the SwiGLU MLP, not mlp_type gated");
    json_buf_begin_obj(b);
    json_buf_key(b, "architectures");
    json_buf_begin_arr(b);
    json_buf_str(b, "LlamaForCausalLM");
    json_buf_end_arr(b);
    json_buf_kv_str(b, "model_type", "llama");
    kv_int(b, "vocab_size", c->pad_vocab_multiple > 0 ? (c->vocab_size + c->pad_vocab_multiple - 1) / c->pad_vocab_multiple * c->pad_vocab_multiple : c->vocab_size);
    kv_int(b, "hidden_size", c->d_model);
    kv_int(b, "intermediate_size", 2 * c->d_inner / 3);
    kv_int(b, "num_hidden_layers", c->n_layer);
    kv_int(b, "num_attention_heads", c->n_head);
    kv_int(b, "num_key_value_heads", c->n_head);
    kv_int(b, "head_dim", c->d_model / c->n_head);
    json_buf_kv_num(b, "rms_norm_eps", c->norm_eps);
    json_buf_kv_num(b, "rope_theta", c->rope_theta);
    json_buf_key(b, "rope_scaling");
    json_buf_null(b);
    kv_int(b, "max_position_embeddings", c->max_seq_len);
    json_buf_kv_str(b, "hidden_act", "silu");
    json_buf_kv_bool(b, "attention_bias", 0);
    json_buf_kv_bool(b, "mlp_bias", 0);
    json_buf_kv_bool(b, "tie_word_embeddings", c->tie_embeddings);
    json_buf_kv_str(b, "torch_dtype", "float32");
    json_buf_end_obj(b);
    return IM_OK;
}

/* ---- the Fixed-Point-RNN reference's config.json ------------------------------------------- */

/* mamba_ssm's MambaConfig (d_model, n_layer, vocab_size, ssm_cfg, rms_norm, ...) as its
 * save_pretrained writes it, with the fixed-point layer's keyword arguments in ssm_cfg. A key is
 * copied to ours, or only checked (expect), or accepted and ignored (initialisation, kernels);
 * any other key is an error. The layer's class defaults apply to keys a config leaves out. */

/* ssm_cfg.layer -> our model, with that class's defaults and FixedPointOptimizer constants (spec
 * fp-rnn §1.4: FPMamba1 s0 0.99, decay damping_decay_rate, q_out 0.25; FPMamba2 q_out 0.10; FPRNN
 * s0 1, no decay, q_out 0.10) */
static const struct {
    const char *layer, *model;
    int d_state, max_iter, fixed_decay;
    const char *mixer, *kron_norm;
    double step0, outlier_q;
} FPR_LAYERS[] = {
    {"FPMamba1", "fp_mamba", 16, 100, 0, "kronecker", "column-wise", 0.99, 0.25},
    {"FPMamba2", "fp_mamba2", 128, 100, 0, "kronecker", "column-wise", 0.99, 0.10},
    {"FPRNN", "fp_rnn", 0, 1000, 1, "householder", "spectral", 1.0, 0.10},
    {"Mamba1", "mamba1", 16, 0, 0, NULL, NULL, 0, 0},
};

/* the reference's mixer names (its CLI choices) -> ours */
static const char *fpr_mixer(const char *theirs) {
    static const char *const map[][2] = {{"householderproduct", "householder"}, {"dplr", "dplr"},
                                         {"kronecker", "kronecker"}, {"selectivedense", "selectivedense"},
                                         {"mixture", "mixture"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(theirs, map[i][0])) return map[i][1];
    return NULL;
}

/* keys of ssm_cfg: {key, ours, expect, why}; ours "" = handled in fpr_read */
static const HfKey FPR_SSM_KEYS[] = {
    {"layer", "", NULL, NULL},
    {"d_state", "d_state", NULL, NULL},
    {"d_conv", "d_conv", NULL, NULL},
    {"expand", "expand", NULL, NULL},
    {"headdim", "headdim", NULL, NULL},
    {"dt_rank", "", NULL, NULL},               /* "auto" or a number */
    {"mixer_type", "", NULL, NULL},
    {"mixer_rank", "mixer_rank", NULL, NULL},
    {"mixer_ac", "", NULL, NULL},
    {"mixer_proj_rank", "", NULL, NULL},       /* null (the class default, which crashes) = -1 */
    {"symm_mixer", "symm_mixer", NULL, NULL},
    {"mixer_h_dep", "mixer_h_dep", NULL, NULL},
    {"bc_norm", "bc_norm", NULL, NULL},
    {"glu_in_loop", "glu_in_loop", NULL, NULL},
    {"use_short_conv", "short_conv", NULL, NULL},
    {"max_iter", "fp_max_iter", NULL, NULL},
    {"n_backwards", "fp_n_backwards", NULL, NULL},
    {"convergence_threshold", "fp_threshold", NULL, NULL},
    {"damping_decay_rate", "", NULL, NULL},    /* FPMamba1 / FPMamba2's decay; FPRNN never decays */
    {"norm_eps", "mixer_norm_eps", NULL, NULL},
    {"conv_bias", NULL, "true", "a conv without bias is not implemented"},
    {"bias", NULL, "false", "in/out projection biases are not implemented"},
    {"ngroups", NULL, "1", "ngroups > 1 is not implemented"},
    {"D_has_hdim", NULL, "false", "a D per channel is not implemented"},
    {"rmsnorm", NULL, "true", "FPMamba2 without its RMSNorm is not implemented"},
    {"norm_before_gate", NULL, "false", "FPMamba2 gates before its norm only"},
    {"d_ssm", NULL, "null", "a partial SSM (d_ssm) is not implemented"},
    {"dt_limit", NULL, NULL, NULL},            /* checked: (0, inf) only */
    /* initialisation, kernels and bookkeeping: the same function */
    {"d_mixer", NULL, NULL, NULL}, {"dt_min", NULL, NULL, NULL}, {"dt_max", NULL, NULL, NULL},
    {"dt_init", NULL, NULL, NULL}, {"dt_scale", NULL, NULL, NULL}, {"dt_init_floor", NULL, NULL, NULL},
    {"A_init_range", NULL, NULL, NULL}, {"conv_init", NULL, NULL, NULL}, {"chunk_size", NULL, NULL, NULL},
    {"use_mem_eff_path", NULL, NULL, NULL}, {"use_fast_path", NULL, NULL, NULL}, {"layer_idx", NULL, NULL, NULL},
};

static const HfKey FPR_TOP_KEYS[] = {
    {"d_model", "d_model", NULL, NULL},
    {"n_layer", "n_layer", NULL, NULL},
    {"vocab_size", "vocab_size", NULL, NULL},
    {"pad_vocab_size_multiple", "pad_vocab_multiple", NULL, NULL},
    {"norm_epsilon", "norm_eps", NULL, NULL},
    {"ssm_cfg", "", NULL, NULL},
    {"rms_norm", "", NULL, NULL},              /* -> norm_type */
    {"attn_layer_idx", "", NULL, NULL},        /* checked: none */
    {"d_intermediate", NULL, "0", "an MLP in the blocks (d_intermediate > 0) is not implemented for these models"},
    {"tie_embeddings", "tie_embeddings", NULL, NULL},   /* false: lm_head.weight is its own tensor */
    {"attn_cfg", NULL, NULL, NULL}, {"residual_in_fp32", NULL, NULL, NULL}, {"fused_add_norm", NULL, NULL, NULL},
};

static const HfKey *fpr_key(const HfKey *keys, int n, const char *k) {
    for (int j = 0; j < n; j++)
        if (!strcmp(keys[j].key, k)) return &keys[j];
    return NULL;
}

/* One member k = v of the object `section` ("" or "ssm_cfg.") by its row: checked, copied (a
 * boolean as 0 / 1) or ignored; rows with ours "" are the caller's. */
static int fpr_member(const HfKey *row, const char *section, const char *k, const Json *v, ModelCfg *c, const char *where) {
    char text[KEY_STR_LEN];
    hf_text(v, text, sizeof text);
    if (row->expect && strcmp(text, row->expect))
        return err_set(IM_EINVAL, "%s: '%s%s' = %s: %s", where, section, k, text, row->why);
    if (!row->ours || !row->ours[0]) return IM_OK;
    if (v->type == JSON_BOOL) snprintf(text, sizeof text, "%d", v->boolean);
    else if (v->type != JSON_NUMBER)
        return err_set(IM_EINVAL, "%s: '%s%s' = %s: expected a number or a boolean", where, section, k, text);
    int rc = cfg_set(c, row->ours, text);
    return rc ? err_wrap(rc, "%s: '%s%s'", where, section, k) : IM_OK;
}

static int fpr_read(const Json *root, ModelCfg *c, const char *where, int *mine) {
    const Json *ssm = json_get(root, "ssm_cfg");
    *mine = ssm && ssm->type == JSON_OBJECT && !json_get(root, "backbone_config") && !json_get(root, "model_type");
    if (!*mine) return IM_OK;
    const Json *layer = json_get(ssm, "layer");
    const char *lname = layer && layer->type == JSON_STRING ? layer->string : "Mamba1"; /* mamba_ssm's default */
    int li = -1;
    for (int i = 0; i < (int)(sizeof FPR_LAYERS / sizeof *FPR_LAYERS); i++)
        if (!strcmp(FPR_LAYERS[i].layer, lname)) li = i;
    if (li < 0)
        return err_set(IM_EINVAL, "%s: 'ssm_cfg.layer' = '%s': this build reads FPMamba1 | FPMamba2 | FPRNN | Mamba1", where,
                       lname);
    ModelCfg t;
    cfg_defaults(&t);
    snprintf(t.model, sizeof t.model, "%s", FPR_LAYERS[li].model);
    /* MambaConfig's defaults, then the layer class's */
    t.d_model = 2560, t.n_layer = 64, t.vocab_size = 50277, t.pad_vocab_multiple = 8, t.norm_eps = 1e-5, t.d_inner = 0;
    snprintf(t.norm_type, sizeof t.norm_type, "rmsnorm");
    if (FPR_LAYERS[li].d_state) t.d_state = FPR_LAYERS[li].d_state;
    if (FPR_LAYERS[li].mixer) {
        t.headdim = 64, t.mixer_rank = 1, t.mixer_proj_rank = -1, t.mixer_h_dep = 1, t.symm_mixer = 0, t.bc_norm = 1;
        t.glu_in_loop = 0, t.short_conv = 0, t.fp_n_backwards = 1, t.fp_threshold = 0.1, t.fp_patience = 15;
        t.fp_eval_cap = 1000, t.mixer_norm_eps = 1e-5, t.fp_max_iter = FPR_LAYERS[li].max_iter;
        t.fp_step0 = FPR_LAYERS[li].step0, t.fp_decay = FPR_LAYERS[li].fixed_decay ? 1.0 : 0.9;
        t.fp_outlier_q = FPR_LAYERS[li].outlier_q;
        snprintf(t.mixer_type, sizeof t.mixer_type, "%s", FPR_LAYERS[li].mixer);
        snprintf(t.mixer_ac, sizeof t.mixer_ac, "silu");
        snprintf(t.kron_norm, sizeof t.kron_norm, "%s", FPR_LAYERS[li].kron_norm);
    }
    int rc = IM_OK;
    for (size_t i = 0; i < json_len(root) && !rc; i++) {
        const char *k = json_key_at(root, i);
        const Json *v = json_at(root, i);
        const HfKey *row = fpr_key(FPR_TOP_KEYS, (int)(sizeof FPR_TOP_KEYS / sizeof *FPR_TOP_KEYS), k);
        if (!row)
            return err_set(IM_EINVAL, "%s: unknown Fixed-Point-RNN reference config key '%s' (docs/interop.md lists the "
                           "accepted keys)", where, k);
        if (!strcmp(k, "rms_norm")) {
            if (v->type != JSON_BOOL) return err_set(IM_EINVAL, "%s: 'rms_norm' must be true or false", where);
            snprintf(t.norm_type, sizeof t.norm_type, "%s", v->boolean ? "rmsnorm" : "layernorm");
        } else if (!strcmp(k, "attn_layer_idx")) {
            if (v->type != JSON_NULL && !(v->type == JSON_ARRAY && json_len(v) == 0))
                return err_set(IM_EINVAL, "%s: 'attn_layer_idx': attention layers in the stack are not implemented", where);
        } else if (strcmp(k, "ssm_cfg")) {
            rc = fpr_member(row, "", k, v, &t, where);
        }
    }
    for (size_t i = 0; i < json_len(ssm) && !rc; i++) {
        const char *k = json_key_at(ssm, i);
        const Json *v = json_at(ssm, i);
        const HfKey *row = fpr_key(FPR_SSM_KEYS, (int)(sizeof FPR_SSM_KEYS / sizeof *FPR_SSM_KEYS), k);
        int fp = FPR_LAYERS[li].mixer != NULL;
        /* the FP keys are not keyword arguments of mamba_ssm's Mamba (the layer would not build) */
        if (!row || (!fp && row->ours && strcmp(k, "layer") && strcmp(k, "d_state") && strcmp(k, "d_conv") &&
                     strcmp(k, "expand") && strcmp(k, "dt_rank")))
            return err_set(IM_EINVAL, "%s: unknown Fixed-Point-RNN reference config key 'ssm_cfg.%s' for layer %s "
                           "(docs/interop.md lists the accepted keys)", where, k, lname);
        if (!strcmp(k, "layer")) continue;
        if (!strcmp(k, "dt_rank")) {
            if (v->type == JSON_STRING && !strcmp(v->string, "auto")) t.dt_rank = 0;
            else if (v->type == JSON_NUMBER) rc = fpr_member(&(HfKey){k, "dt_rank", NULL, NULL}, "ssm_cfg.", k, v, &t, where);
            else return err_set(IM_EINVAL, "%s: 'ssm_cfg.dt_rank' must be \"auto\" or a number", where);
        } else if (!strcmp(k, "mixer_type") || !strcmp(k, "mixer_ac")) {
            const char *ours = v->type != JSON_STRING ? NULL : !strcmp(k, "mixer_ac") ? v->string : fpr_mixer(v->string);
            if (!ours)
                return err_set(IM_EINVAL, "%s: 'ssm_cfg.%s' = %s: not one this build reads%s", where, k,
                               v->type == JSON_STRING ? v->string : "(not a string)",
                               !strcmp(k, "mixer_type") ? " (householderproduct | dplr | kronecker | selectivedense | mixture)" : "");
            if (!strcmp(k, "mixer_ac")) snprintf(t.mixer_ac, sizeof t.mixer_ac, "%s", ours);
            else snprintf(t.mixer_type, sizeof t.mixer_type, "%s", ours);
        } else if (!strcmp(k, "mixer_proj_rank")) {
            if (v->type == JSON_NULL) t.mixer_proj_rank = -1;
            else rc = fpr_member(&(HfKey){k, "mixer_proj_rank", NULL, NULL}, "ssm_cfg.", k, v, &t, where);
        } else if (!strcmp(k, "damping_decay_rate")) {
            if (!FPR_LAYERS[li].fixed_decay)
                rc = fpr_member(&(HfKey){k, "fp_decay", NULL, NULL}, "ssm_cfg.", k, v, &t, where);
        } else if (!strcmp(k, "dt_limit")) {
            if (!(json_len(v) == 2 && json_at(v, 0)->type == JSON_NUMBER && json_at(v, 0)->number == 0 &&
                  json_at(v, 1)->type == JSON_NUMBER && isinf(json_at(v, 1)->number)))
                return err_set(IM_EINVAL, "%s: 'ssm_cfg.dt_limit' other than [0.0, Infinity]: a dt limit is not implemented",
                               where);
        } else {
            rc = fpr_member(row, "ssm_cfg.", k, v, &t, where);
        }
    }
    if (rc) return rc;
    if (!strcmp(t.model, "mamba1")) t.short_conv = -1;   /* mamba_ssm's Mamba always has its conv */
    *c = t;
    return IM_OK;
}

/* The same dialect for export: the layer's keyword arguments spelled out, the solver constants
 * the reference hard-codes checked (a model trained here with other ones cannot be said). */
static int fpr_write(const ModelCfg *c, JsonBuf *b) {
    int li = -1;
    for (int i = 0; i < (int)(sizeof FPR_LAYERS / sizeof *FPR_LAYERS); i++)
        if (!strcmp(FPR_LAYERS[i].model, c->model)) li = i;
    if (li < 0) return err_set(IM_EINVAL, "layout fp-rnn holds fp_mamba | fp_mamba2 | fp_rnn | mamba1 models, not '%s'", c->model);
    int fp = FPR_LAYERS[li].mixer != NULL;
    if (fp) {
        if (c->fp_patience != 15 || c->fp_eval_cap != 1000 || fabs(c->fp_step0 - FPR_LAYERS[li].step0) > 1e-12 ||
            fabs(c->fp_outlier_q - FPR_LAYERS[li].outlier_q) > 1e-12 || (FPR_LAYERS[li].fixed_decay && c->fp_decay != 1.0))
            return err_set(IM_EINVAL, "layout fp-rnn: the reference's %s fixes fp_step0 %g, fp_outlier_q %g, fp_patience 15, "
                           "fp_eval_cap 1000%s; this model has %g, %g, %d, %d", FPR_LAYERS[li].layer, FPR_LAYERS[li].step0,
                           FPR_LAYERS[li].outlier_q, FPR_LAYERS[li].fixed_decay ? ", fp_decay 1" : "", c->fp_step0,
                           c->fp_outlier_q, c->fp_patience, c->fp_eval_cap);
        if (!strcmp(c->mixer_type, "monarch") || !strcmp(c->mixer_type, "nonselective"))
            return err_set(IM_EINVAL, "layout fp-rnn: mixer_type %s is not written in the reference's names", c->mixer_type);
        if (strcmp(c->kron_norm, FPR_LAYERS[li].kron_norm) && !strcmp(c->mixer_type, "kronecker"))
            return err_set(IM_EINVAL, "layout fp-rnn: the reference's %s uses kron_norm %s", FPR_LAYERS[li].layer,
                           FPR_LAYERS[li].kron_norm);
    }
    json_buf_begin_obj(b);
    kv_int(b, "d_model", c->d_model);
    kv_int(b, "d_intermediate", 0);
    kv_int(b, "n_layer", c->n_layer);
    kv_int(b, "vocab_size", c->vocab_size);
    json_buf_key(b, "ssm_cfg");
    json_buf_begin_obj(b);
    json_buf_kv_str(b, "layer", FPR_LAYERS[li].layer);
    if (strcmp(c->model, "fp_rnn")) kv_int(b, "d_state", c->d_state);
    kv_int(b, "d_conv", c->d_conv);
    kv_int(b, "expand", c->expand);
    if (!strcmp(c->model, "fp_mamba2")) kv_int(b, "headdim", c->headdim);
    if (!strcmp(c->model, "fp_mamba") || !strcmp(c->model, "mamba1")) {
        if (c->dt_rank > 0) kv_int(b, "dt_rank", c->dt_rank);
        else json_buf_kv_str(b, "dt_rank", "auto");
    }
    if (fp) {
        json_buf_kv_str(b, "mixer_type", !strcmp(c->mixer_type, "householder") ? "householderproduct" : c->mixer_type);
        kv_int(b, "mixer_rank", c->mixer_rank);
        json_buf_kv_str(b, "mixer_ac", c->mixer_ac);
        kv_int(b, "mixer_proj_rank", c->mixer_proj_rank);
        json_buf_kv_bool(b, "symm_mixer", c->symm_mixer);
        json_buf_kv_bool(b, "mixer_h_dep", c->mixer_h_dep);
        if (strcmp(c->model, "fp_rnn")) {
            json_buf_kv_bool(b, "bc_norm", c->bc_norm);
            json_buf_kv_bool(b, "glu_in_loop", c->glu_in_loop);
            json_buf_kv_num(b, "damping_decay_rate", c->fp_decay);
        }
        json_buf_kv_bool(b, "use_short_conv", !strcmp(c->model, "fp_rnn") ? c->short_conv != 0 : c->short_conv == 1);
        kv_int(b, "max_iter", c->fp_max_iter);
        kv_int(b, "n_backwards", c->fp_n_backwards);
        json_buf_kv_num(b, "convergence_threshold", c->fp_threshold);
        json_buf_kv_num(b, "norm_eps", c->mixer_norm_eps > 0 ? c->mixer_norm_eps : c->norm_eps);
    }
    json_buf_end_obj(b);
    json_buf_kv_bool(b, "rms_norm", strcmp(c->norm_type, "layernorm") != 0);
    json_buf_kv_num(b, "norm_epsilon", c->norm_eps);
    kv_int(b, "pad_vocab_size_multiple", c->pad_vocab_multiple > 0 ? c->pad_vocab_multiple : 1);
    json_buf_kv_bool(b, "tie_embeddings", c->tie_embeddings);
    json_buf_kv_bool(b, "residual_in_fp32", 1);
    json_buf_end_obj(b);
    return IM_OK;
}

/* ---- the reference's dialect (written; read by io/refcfg.c) -------------------------------- */

/* The nested backbone_config / deq_params object of spec §11 for the models the reference has,
 * followed by our whole config under "model" (the section refcfg applies last), so that a reload
 * here is exact even for keys the reference lacks (solver options, noise seed, ...). Other
 * models get our flat keys only. */
static int ref_write(const ModelCfg *c, JsonBuf *b) {
    size_t need = cfg_to_json(c, NULL, 0);
    char *ours = malloc(need);
    if (!ours) return err_set(IM_ENOMEM, "out of memory");
    cfg_to_json(c, ours, need);
    /* the reference's models: block stacks of Mamba2 or attention blocks, explicit or implicit */
    const ModelType *type = model_type_find(c->model);
    unsigned uses = type ? model_type_cfg_uses(type) : 0;
    int implicit = type && type->family == MODEL_IMPLICIT, block_lm = type && type->family != MODEL_FP_RNN;
    int mamba = block_lm && (uses & CFG_USE_SSD_HEADS), llama = block_lm && (uses & CFG_USE_ATTN);
    if (!mamba && !llama) {
        json_buf_raw(b, ours);
        free(ours);
        return IM_OK;
    }
    json_buf_begin_obj(b);
    json_buf_kv_str(b, "backbone_type", implicit ? "implicit" : "explicit");
    kv_int(b, mamba ? "n_tokens" : "vocab_size", c->vocab_size);
    json_buf_kv_bool(b, "pad_vocab", c->pad_vocab_multiple > 0);
    if (c->pad_vocab_multiple > 0) kv_int(b, "pad_vocab_size_multiple", c->pad_vocab_multiple);
    json_buf_kv_bool(b, "tie_embeddings", c->tie_embeddings);
    json_buf_kv_bool(b, "head_bias", 0);
    json_buf_kv_num(b, "dropout", c->dropout);
    json_buf_key(b, "backbone_config");
    json_buf_begin_obj(b);
    kv_int(b, "d_model", c->d_model);
    kv_int(b, "n_layer", c->n_layer);
    kv_int(b, "d_inner", c->d_inner);
    json_buf_kv_str(b, "block_type", mamba ? "mamba2" : "transformer");
    int swiglu = !strcmp(c->mlp_type, "swiglu") || (!strcmp(c->mlp_type, "auto") && llama);
    json_buf_kv_str(b, "mlp_type", swiglu ? "llama_mlp" : "gated_mlp");
    json_buf_kv_bool(b, "pre_norm", 1);
    json_buf_kv_bool(b, "rms_norm", 1);
    json_buf_kv_num(b, "dropout", c->backbone_dropout);
    json_buf_kv_num(b, "norm_epsilon", c->norm_eps);
    json_buf_kv_bool(b, "do_weight_norm", implicit && c->weight_norm);
    kv_int(b, "pretrain_steps", c->pretrain_steps);
    kv_int(b, "pretrain_iter", c->pretrain_iter);
    json_buf_key(b, "block_cfg");
    json_buf_begin_obj(b);
    if (mamba) {
        kv_int(b, "d_state", c->d_state);
        kv_int(b, "d_conv", c->d_conv);
        kv_int(b, "expand", c->expand);
        kv_int(b, "headdim", c->headdim);
        kv_int(b, "ngroups", 1);
    } else {
        kv_int(b, "n_head", c->n_head);
        kv_int(b, "max_seq_len", c->max_seq_len);
        json_buf_kv_num(b, "rope_theta", c->rope_theta);
    }
    json_buf_end_obj(b);
    json_buf_end_obj(b);
    if (implicit) {
        json_buf_key(b, "deq_params");
        json_buf_begin_obj(b);
        json_buf_key(b, "solver");
        json_buf_begin_obj(b);
        json_buf_kv_str(b, "f_solver", c->f_solver);
        kv_int(b, "f_max_iter", c->f_max_iter);
        json_buf_kv_num(b, "f_tol", c->f_tol);
        json_buf_kv_str(b, "f_stop_mode", c->f_stop_mode);
        json_buf_kv_str(b, "b_solver", c->b_solver);
        kv_int(b, "b_max_iter", c->b_max_iter);
        json_buf_kv_num(b, "b_tol", c->b_tol);
        json_buf_kv_str(b, "b_stop_mode", c->b_stop_mode);
        json_buf_kv_num(b, "eval_factor", c->eval_factor);
        kv_int(b, "eval_f_max_iter", c->eval_f_max_iter);
        json_buf_end_obj(b);
        json_buf_key(b, "training");
        json_buf_begin_obj(b);
        kv_int(b, "grad", c->grad);
        json_buf_kv_num(b, "tau", c->tau);
        json_buf_kv_bool(b, "ift", c->ift);
        json_buf_end_obj(b);
        json_buf_key(b, "norm");
        json_buf_begin_obj(b);
        json_buf_kv_str(b, "norm_type", c->weight_norm ? "weight_norm" : "none");
        json_buf_kv_bool(b, "norm_no_scale", c->norm_no_scale);
        json_buf_kv_num(b, "norm_target_norm", c->norm_target_norm);
        json_buf_kv_bool(b, "norm_clip", c->norm_clip_value > 0);
        if (c->norm_clip_value > 0) json_buf_kv_num(b, "norm_clip_value", c->norm_clip_value);
        json_buf_end_obj(b);
        json_buf_end_obj(b);
    }
    json_buf_key(b, "model");
    Json *own = NULL;
    if (json_parse(&own, ours, strlen(ours))) json_buf_raw(b, ours);   /* cfg_to_json's text is JSON */
    else json_write(b, own);
    json_free(own);
    json_buf_end_obj(b);
    free(ours);
    return IM_OK;
}

/* ---- any dialect --------------------------------------------------------------------------- */

int layout_config_parse(const char *json, size_t len, const char *where, ModelCfg *c) {
    Json *root = NULL;
    const JsonParseOpts po = {.allow_nonfinite = 1};   /* Python's json writes Infinity (time_step_limit) */
    int rc = json_parse_ex(&root, json, len, &po);
    if (rc) return err_wrap(rc, "%s", where);
    if (root->type != JSON_OBJECT) {
        json_free(root);
        return err_set(IM_EINVAL, "%s: a config must be a JSON object", where);
    }
    cfg_defaults(c);
    for (int l = 0; l < N_LAYOUTS; l++) {
        int mine = 0;
        if (!LAYOUTS[l].config_read) continue;
        rc = LAYOUTS[l].config_read(root, c, where, &mine);
        if (rc || mine) {
            json_free(root);
            return rc ? rc : cfg_validate(c) ? err_wrap(IM_EINVAL, "%s", where) : IM_OK;
        }
    }
    const Json *mt = json_get(root, "model_type");
    if (mt && mt->type == JSON_STRING && !json_get(root, "backbone_config") && !json_get(root, "deq_params")) {
        rc = err_set(IM_EINVAL, "%s: Hugging Face model_type '%s' is not one this build reads (mamba2 | llama)", where,
                     mt->string);
        json_free(root);
        return rc;
    }
    /* ours (flat or sectioned) or the reference's: keyjson; a training config's task / train
     * sections are not the model's and are left out */
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    for (size_t i = 0; i < json_len(root); i++) {
        const char *k = json_key_at(root, i);
        const Json *v = json_at(root, i);
        if ((!strcmp(k, "task") || !strcmp(k, "train")) && v->type == JSON_OBJECT) continue;
        json_buf_key(&b, k);
        json_write(&b, v);
    }
    json_buf_end_obj(&b);
    json_free(root);
    if (b.failed) {
        json_buf_free(&b);
        return err_set(IM_ENOMEM, "%s: out of memory", where);
    }
    const KeyTab *tabs[] = {&model_keytab};
    void *objs[] = {c};
    rc = keyjson_apply(tabs, objs, 1, b.data, b.len, where);
    json_buf_free(&b);
    if (!rc && cfg_validate(c)) rc = err_wrap(IM_EINVAL, "%s", where);
    return rc;
}
