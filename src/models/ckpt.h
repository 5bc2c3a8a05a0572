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
/* Create *m from the checkpoint's stored config (or from *cfg when non-NULL, e.g. for files
 * written by the PyTorch reference), then load and validate every tensor: dtype, shape against
 * the config, missing and unexpected names. On error *m is left freed. */
int ckpt_load(Model *m, const char *path, const ModelCfg *cfg);

/* How a checkpoint is loaded. A NaN or inf weight (a run that diverged, a damaged file) is an
 * error by default, naming the tensor and the flat index; allow_nonfinite = 1 loads it anyway,
 * for inspection. */
typedef struct {
    int allow_nonfinite;
} CkptLoadOpts;
/* ckpt_load with options (NULL = the defaults, as ckpt_load). */
int ckpt_load_opts(Model *m, const char *path, const ModelCfg *cfg, const CkptLoadOpts *o);
/* IM_OK if every weight of m is finite, else IM_ENUM naming the first non-finite one (tensor, flat
 * index) and their count; `path` starts the message. */
int ckpt_check_finite(const Model *m, const char *path);
/* Read only the metadata value `key` (malloc'ed copy in *out) — for `implicit info`. */
int ckpt_read_meta(const char *path, const char *key, char **out);

#endif
