/* layouts.h: the tensor-name layouts a checkpoint may be written in, one table per source.
 *
 * Our parameter names are the PyTorch reference's state_dict keys (spec implicit-lm §14). Other
 * writers name the same tensors differently (Hugging Face transformers: backbone.embeddings.weight,
 * model.layers.{i}.self_attn.q_proj.weight, lm_head.weight, ...). A layout is the map between the
 * two for one source: loading detects the layout of a file from a tensor name only that source
 * writes (its probe), renames every tensor to ours and then validates the result as any checkpoint
 * of ours; `implicit export --layout NAME` writes a model under the layout's names, with the
 * source's config.json dialect.
 *
 * Adding a source (everything lives in layouts.c):
 *   1. write its NameRule table: rows {ours, theirs}; `{i}` matches a decimal index and `*` any
 *      text (possibly empty); both sides of a row must use the same wildcards in the same order.
 *      Rows are tried in order and the first match wins; a name no row matches is kept as it is.
 *      An optional second table of tail rules (e.g. torch-2 weight norm
 *      `.parametrizations.weight.original0` for `.weight_g`) is applied after the first;
 *   2. add a CkptLayout row to LAYOUTS: its --layout name, the model types it can hold, the probe,
 *      the tables, and, when the source has its own config.json dialect, the reader (and the
 *      writer, for export);
 *   3. add a test loading a file written by independent PyTorch code (tests/ref/).
 * An untied output head is mapped to HEAD_TENSOR ("criterion.decoder.weight", the reference's
 * decoder name); ckpt.c loads it or refuses it, it is never dropped.
 */
#ifndef IMPLICIT_LAYOUTS_H
#define IMPLICIT_LAYOUTS_H

#include <stddef.h>

#include "../io/json.h"
#include "config.h"

#define HEAD_TENSOR "criterion.decoder.weight"

typedef struct {
    const char *ours;    /* our name (spec §14), with {i} / * wildcards */
    const char *theirs;  /* the source's name, same wildcards in the same order */
} NameRule;

typedef struct {
    const char *name;        /* --layout name; rows sharing a name differ by families */
    const char *families;    /* '|'-separated model types this row holds; NULL = any */
    const char *summary;     /* one line for --help and docs */
    const char *probe;       /* a tensor name that marks a file as this layout; NULL = never detected */
    const NameRule *rules;   /* full-name rules, first match wins */
    int n_rules;
    const NameRule *tails;   /* then tail rules on the result, first match wins (NULL = none) */
    int n_tails;
    /* The source's config.json dialect: IM_OK with *mine = 0 when root is not in it (c
     * untouched); else *mine = 1 and c holds the model, or IM_EINVAL naming `where` and the key.
     * NULL = the source has no dialect of its own (our keys or the reference's are used). */
    int (*config_read)(const Json *root, ModelCfg *c, const char *where, int *mine);
    /* The config.json written by export (b an open JsonBuf, the object not begun). IM_EINVAL when
     * the config cannot be said in the dialect. NULL = our own keys (cfg_to_json). */
    int (*config_write)(const ModelCfg *c, JsonBuf *b);
} CkptLayout;

/* The layout of a file from its tensor names (the first row whose probe is among them), or the
 * identity layout (our names). */
const CkptLayout *layout_detect(const char *const *names, int n);
/* The row for --layout `name` that holds model type `model`; NULL with IM_EINVAL set naming the
 * known layouts (or the layout's families). */
const CkptLayout *layout_for_export(const char *name, const char *model);
/* The --layout names, '|'-separated (static text). */
const char *layout_names(void);
/* 1 for the identity layout (our names). */
int layout_is_ours(const CkptLayout *l);

/* A name under layout l -> ours (and the reverse): 1 if a rule applied, 0 if the name was kept;
 * -1 when the result does not fit in cap. */
int layout_to_ours(const CkptLayout *l, const char *theirs, char *out, size_t cap);
int layout_to_theirs(const CkptLayout *l, const char *ours, char *out, size_t cap);

/* A model config in any dialect we read: the sources' config.json dialects (Hugging Face
 * `model_type`), the reference's (backbone_config / deq_params, io/refcfg.h) or ours (flat or
 * sectioned; a training config's "task" and "train" sections are skipped). c starts from the
 * defaults. IM_EINVAL / IM_EFORMAT naming `where`. */
int layout_config_parse(const char *json, size_t len, const char *where, ModelCfg *c);

/* For tests: every row of every table, to check wildcards pair up and names round-trip. */
int layout_count(void);
const CkptLayout *layout_at(int i);

#endif
