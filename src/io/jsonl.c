/* jsonl.c: see jsonl.h. */
#include "jsonl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/fsutil.h"

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Open addressing from a key to the index of its latest record; keys are owned by the table. */
typedef struct {
    char **keys;
    int *idx;
    size_t cap;   /* a power of two, at least twice the entries */
} KeyMap;

static int *keymap_slot(KeyMap *m, const char *key, char ***kslot) {
    size_t i = (size_t)hash(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & (m->cap - 1);
    *kslot = &m->keys[i];
    return &m->idx[i];
}

void jsonl_free(Jsonl *l) {
    for (int i = 0; i < l->n; i++) json_free(l->recs[i]);
    free(l->recs);
    free(l->line);
    memset(l, 0, sizeof *l);
}

int jsonl_parse(Jsonl *out, const char *text, size_t len, JsonlKeyFn key) {
    memset(out, 0, sizeof *out);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    KeyMap m = {0};
    m.cap = 16;
    while (m.cap < 2 * lines) m.cap *= 2;
    out->recs = calloc(lines, sizeof *out->recs);
    out->line = calloc(lines, sizeof *out->line);
    m.keys = key ? calloc(m.cap, sizeof *m.keys) : NULL;
    m.idx = key ? calloc(m.cap, sizeof *m.idx) : NULL;
    int rc = IM_OK, lineno = 0;
    if (!out->recs || !out->line || (key && (!m.keys || !m.idx))) rc = err_set(IM_ENOMEM, "out of memory reading a log");
    for (size_t i = 0; i < len && !rc;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
        const char *s = text + i;
        i += n + 1;
        lineno++;
        size_t blank = 0;
        while (blank < n && (s[blank] == ' ' || s[blank] == '\t' || s[blank] == '\r')) blank++;
        if (blank == n) continue;   /* an empty line */
        out->lines++;
        Json *j = NULL;
        if (json_parse(&j, s, n) || j->type != JSON_OBJECT) {
            json_free(j);
            if (!nl) { out->torn = 1; continue; }
            if (!out->first_bad) out->first_bad = lineno;
            out->malformed++;
            continue;
        }
        char k[256], **kslot;
        if (key && key(j, k, sizeof k)) {
            int *slot = keymap_slot(&m, k, &kslot);
            if (*kslot) {   /* an earlier record with this key: the later one wins */
                json_free(out->recs[*slot]);
                out->recs[*slot] = NULL;
                out->replaced++;
            } else if (!(*kslot = malloc(strlen(k) + 1))) {
                json_free(j);
                rc = err_set(IM_ENOMEM, "out of memory reading a log");
                break;
            } else {
                strcpy(*kslot, k);
            }
            *slot = out->n;
        }
        out->line[out->n] = lineno;
        out->recs[out->n++] = j;
    }
    /* close the gaps of the replaced records */
    int w = 0;
    for (int r = 0; r < out->n; r++)
        if (out->recs[r]) out->recs[w] = out->recs[r], out->line[w] = out->line[r], w++;
    out->n = w;
    for (size_t i = 0; m.keys && i < m.cap; i++) free(m.keys[i]);
    free(m.keys);
    free(m.idx);
    if (rc) jsonl_free(out);
    return rc;
}

int jsonl_read(Jsonl *out, const char *path, size_t max_bytes, JsonlKeyFn key) {
    memset(out, 0, sizeof *out);
    FILE *f = fs_open_regular(path, NULL);
    if (!f) return IM_EIO;
    char *text;
    size_t n;
    int rc = fs_read_all(f, max_bytes, &text, &n);
    fclose(f);
    if (rc) return err_wrap(rc, "%s", path);
    rc = jsonl_parse(out, text, n, key);
    free(text);
    return rc;
}
