/* ckpt.h: model checkpoints as safetensors (STYLE §8.10, spec implicit-lm §14).
 *
 * Tensor names and shapes are the PyTorch reference's state_dict keys, taken from the model's
 * parameter table. __metadata__ holds format = "implicit.ckpt", format_version = "1",
 * model = registry name, config = the model config as JSON, and any extra key/value pairs the
 * caller adds (training config, step, ...). Writes are atomic (st_write: temp file, fsync,
 * rename), so a crash never leaves a half-written checkpoint.
 */
#ifndef IMPLICIT_CKPT_H
#define IMPLICIT_CKPT_H

#include "model.h"

#define CKPT_FORMAT "implicit.ckpt"
#define CKPT_VERSION 1

/* extra_kv: {"key", "value", ..., NULL} or NULL. */
int ckpt_save(const Model *m, const char *path, const char *const *extra_kv);
/* Create *m from the checkpoint's config, then load and validate every tensor: dtype, shape
 * against the config, missing and unexpected names. On error *m is left freed.
 *
 * `path` is a safetensors file, a shard index (NAME.index.json) or a folder holding
 * model.safetensors or model.safetensors.index.json and its shards. Tensor names may be ours or
 * those of another source (models/layouts.h: Hugging Face transformers, ...), detected from the
 * names. Any `format` tag is accepted; "implicit.ckpt" files must have a known format_version.
 * The config is the first of: *cfg when non-NULL; CkptLoadOpts.config_path; the metadata's
 * `config` (our keys, or the reference's); a config.json beside the file (in the folder). Any
 * dialect of layout_config_parse is read from the last three. A stored head that differs from the
 * embedding (an untied head) is refused, never dropped. */
int ckpt_load(Model *m, const char *path, const ModelCfg *cfg);

/* How a checkpoint is loaded. A NaN or inf weight (a run that diverged, a damaged file) is an
 * error by default, naming the tensor and the flat index; allow_nonfinite = 1 loads it anyway,
 * for inspection. */
typedef struct {
    int allow_nonfinite;
    const char *config_path;  /* the model config from this file (--config), NULL = found as below */
    /* 1: map the file (st_map) and use its weights in place where they can be: one file whose
     * tensors are float32, named and shaped as the model's and laid out in the order and at the
     * offsets of the model's parameter buffer (files this project writes). The model's weights
     * are then the mapping, copy-on-write (the file is never written), so loading copies nothing
     * and the weights cost only page cache; otherwise the tensors are copied as with 0. For
     * programs that do not train: generation, evaluation. */
    int map;
} CkptLoadOpts;
/* ckpt_load with options (NULL = the defaults, as ckpt_load). */
int ckpt_load_opts(Model *m, const char *path, const ModelCfg *cfg, const CkptLoadOpts *o);
/* IM_OK if every weight of m is finite, else IM_ENUM naming the first non-finite one (tensor, flat
 * index) and their count; `path` starts the message. */
int ckpt_check_finite(const Model *m, const char *path);
/* Read only the metadata value `key` (malloc'ed copy in *out, NULL if absent) of the checkpoint
 * at path (a file, an index or a folder as for ckpt_load: the first shard's metadata). */
int ckpt_read_meta(const char *path, const char *key, char **out);
/* The folder that holds the checkpoint at path (path itself for a folder), for files stored
 * beside it (config.json, tokenizer.json). */
int ckpt_dir(const char *path, char *dir, size_t cap);

#endif
