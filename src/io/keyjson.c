/* keyjson.c: see keyjson.h. */
#include "keyjson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/fsutil.h"
#include "json.h"
#include "refcfg.h"

int keyjson_set_any(const KeyTab *const *tabs, void *const *objs, int n, const char *key, const char *value) {
    for (int i = 0; i < n; i++) {
        int rc = keytab_set(tabs[i], objs[i], key, value);
        if (rc != KEY_NOT_MINE) return rc;
    }
    return err_set(IM_EINVAL, "unknown key '%s' (run with --help for the list)", key);
}

static int apply_value(const KeyTab *const *tabs, void *const *objs, int n, const char *key, const Json *v,
                       const char *where) {
    char buf[64];
    const char *text = buf;
    if (v->type == JSON_STRING) text = v->string;
    else if (v->type == JSON_BOOL) snprintf(buf, sizeof buf, "%d", v->boolean);
    else if (v->type == JSON_NUMBER && v->is_int) snprintf(buf, sizeof buf, "%lld", (long long)v->integer);
    else if (v->type == JSON_NUMBER) snprintf(buf, sizeof buf, "%.17g", v->number);
    else return err_set(IM_EINVAL, "%s: key '%s' has a %s value (expected a number or string)", where, key,
                        json_type_name(v->type));
    int rc = keyjson_set_any(tabs, objs, n, key, text);
    return rc ? err_wrap(rc, "%s", where) : IM_OK;
}

int keyjson_apply(const KeyTab *const *tabs, void *const *objs, int n, const char *json, size_t len,
                  const char *where) {
    Json *root = NULL;
    int rc = json_parse(&root, json, len);
    if (rc) return err_wrap(rc, "%s", where);
    if (root->type != JSON_OBJECT) {
        json_free(root);
        return err_set(IM_EINVAL, "%s: a config must be a JSON object", where);
    }
    /* A config written for the PyTorch reference (a root with backbone_config / deq_params, spec
     * implicit-lm §11) is mapped onto our keys by refcfg.c instead of the flat/sectioned rules. */
    int ref = 0;
    rc = refcfg_apply(tabs, objs, n, root, where, &ref);
    if (rc || ref) {
        json_free(root);
        return rc;
    }
    for (size_t i = 0; i < json_len(root) && !rc; i++) {
        const char *key = json_key_at(root, i);
        const Json *v = json_at(root, i);
        int section = -1;
        for (int t = 0; t < n; t++)
            if (!strcmp(key, tabs[t]->section)) section = t;
        if (section >= 0 && v->type == JSON_OBJECT) {
            for (size_t j = 0; j < json_len(v) && !rc; j++)
                rc = apply_value(&tabs[section], &objs[section], 1, json_key_at(v, j), json_at(v, j), where);
        } else {
            rc = apply_value(tabs, objs, n, key, v, where);
        }
    }
    json_free(root);
    return rc;
}

int keyjson_read_file(const char *path, char **text, size_t *len) {
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(IM_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t n = 0;
    int rc = fs_read_all(f, 0, text, &n);
    fclose(f);
    if (rc) return err_wrap(rc, "cannot read %s", path);
    if (len) *len = n;
    return IM_OK;
}
