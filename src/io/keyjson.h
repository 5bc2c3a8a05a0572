/* keyjson.h: apply a JSON config to one or more key tables (core/keytab.h).
 *
 * A config file is either flat ({"d_model": 64, "lr": 1e-3, ...}) or sectioned by table
 * ({"model": {...}, "task": {...}, "train": {...}}); each key goes to the table that owns it. A
 * config written for the PyTorch reference (backbone_config / deq_params) goes through refcfg.h.
 * Numbers, strings and booleans are accepted; an unknown key, a key claimed by no table, or a
 * value of the wrong type is an error naming the key and the file.
 */
#ifndef IMPLICIT_KEYJSON_H
#define IMPLICIT_KEYJSON_H

#include "../core/keytab.h"

/* tabs[i] describes objs[i]. `where` names the source in messages (a path). */
int keyjson_apply(const KeyTab *const *tabs, void *const *objs, int n, const char *json, size_t len,
                  const char *where);
/* Offer one `--key value` to the tables in order; IM_EINVAL naming the key if none takes it. */
int keyjson_set_any(const KeyTab *const *tabs, void *const *objs, int n, const char *key, const char *value);
/* Read a whole file (malloc'ed, NUL-terminated). */
int keyjson_read_file(const char *path, char **text, size_t *len);

#endif
