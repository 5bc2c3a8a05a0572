/* refcfg.h: load a config written for the PyTorch reference (spec implicit-lm §11, §1.9).
 *
 * The reference's model config (hf_models/<name>/config.json) is nested: top-level keys (n_tokens,
 * pad_vocab, dropout, ...), a `backbone_config` object (d_model, n_layer, block_type, block_cfg,
 * ...) and a `deq_params` object with `solver`, `training`, `norm` and `regularization`
 * sub-objects. refcfg_apply recognises such an object and maps it onto our flat keys
 * (models/config.h MODEL_CFG_KEYS + DEQ_CFG_KEYS, and `weight_decay` of the train table) through
 * the generic key-table functions, so io/ still depends on core/ only.
 *
 * The mapping is one table in refcfg.c of (reference path, type, our key, conversion, REF
 * default, accepted values). Semantics are the reference's, not ours:
 *   - a key missing from the object takes the REFERENCE default (torchdeq's for deq_params, e.g.
 *     f_max_iter 40, tau 1.0, grad 1; Mamba2's d_state 128, headdim 64; model dropout 0.05), so a
 *     reference config means the same model here as there. vocab_size has no such default (the
 *     caller's value stays: `implicit train` then takes it from the task);
 *   - keys the reference ignores (emb_init_std, init_gain, gamma, norm_clip_val, ...) are accepted
 *     and ignored; keys whose only implemented value is the default (pre_norm true, ngroups 1,
 *     core "sliced", ...) are accepted with that value and rejected otherwise;
 *   - any other key is IM_EINVAL naming its full path ("deq_params.training.foo").
 * A top-level member named after one of the caller's tables ("model", "task", "train") holding an
 * object is applied as in keyjson's sectioned format, after the reference keys (it overrides them).
 * Every error message starts with `where` and names the key path.
 * Out of scope: writing reference configs; the tokenizer / dataset fields (accepted, ignored).
 */
#ifndef IMPLICIT_REFCFG_H
#define IMPLICIT_REFCFG_H

#include "../core/keytab.h"
#include "json.h"

/* 1 if root is a JSON object with a "backbone_config" or "deq_params" member. */
int refcfg_detect(const Json *root);

/* tabs[i] describes objs[i] (as keyjson_apply). If root is not reference-style: IM_OK with
 * *applied = 0 and nothing touched. Otherwise *applied = 1 and the result is IM_OK with the mapped
 * keys written, or IM_EINVAL (message: "<where>: ... '<key path>' ...") with the objects untouched. */
int refcfg_apply(const KeyTab *const *tabs, void *const *objs, int n, const Json *root, const char *where,
                 int *applied);

/* Our keys named by the mapping table (duplicates included), for tests that check each exists in
 * the model or train table. Fills keys[0 .. min(count, cap)); returns the count. */
int refcfg_targets(const char **keys, int cap);

#endif
