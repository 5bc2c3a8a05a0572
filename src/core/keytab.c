/* keytab.c: see keytab.h. */
#include "keytab.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define FIELD(obj, k) ((char *)(obj) + (k)->offset)

const KeyInfo *keytab_find(const KeyTab *t, const char *key) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->keys[i].name, key)) return &t->keys[i];
    return NULL;
}

static int set_one(const KeyInfo *k, void *obj, const char *s, const char *section) {
    char *end;
    errno = 0;
    if (k->type == KEY_INT) {
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < -2147483647L || v > 2147483647L)
            return err_set(IM_EINVAL, "%s key '%s': expected an integer, got '%s'", section, k->name, s);
        *(int *)FIELD(obj, k) = (int)v;
    } else if (k->type == KEY_FLOAT) {
        double v = strtod(s, &end);
        if (errno || end == s || *end || !isfinite(v))
            return err_set(IM_EINVAL, "%s key '%s': expected a number, got '%s'", section, k->name, s);
        *(double *)FIELD(obj, k) = v;
    } else {
        if (strlen(s) >= KEY_STR_LEN)
            return err_set(IM_EINVAL, "%s key '%s': value '%s' is too long (max %d)", section, k->name, s, KEY_STR_LEN - 1);
        snprintf(FIELD(obj, k), KEY_STR_LEN, "%s", s);
    }
    return IM_OK;
}

void keytab_defaults(const KeyTab *t, void *obj) {
    for (int i = 0; i < t->n; i++) {
        const KeyInfo *k = &t->keys[i];
        char def[KEY_STR_LEN];
        /* string defaults are stringified with their quotes: strip them */
        size_t n = strlen(k->def);
        if (n >= 2 && k->def[0] == '"') snprintf(def, sizeof def, "%.*s", (int)(n - 2), k->def + 1);
        else snprintf(def, sizeof def, "%s", k->def);
        int rc = set_one(k, obj, def, t->section);
        CHECK(rc == IM_OK, "bad default for %s.%s: %s", t->section, k->name, def);
    }
}

int keytab_set(const KeyTab *t, void *obj, const char *key, const char *value) {
    const KeyInfo *k = keytab_find(t, key);
    if (!k) return KEY_NOT_MINE;
    return set_one(k, obj, value, t->section);
}

void keytab_value(const KeyInfo *k, const void *obj, char *buf, size_t cap) {
    const char *f = (const char *)obj + k->offset;
    if (k->type == KEY_INT) snprintf(buf, cap, "%d", *(const int *)f);
    else if (k->type == KEY_FLOAT) snprintf(buf, cap, "%.17g", *(const double *)f);
    else snprintf(buf, cap, "%s", f);
}

size_t keytab_json(const KeyTab *t, const void *obj, char *buf, size_t cap) {
    size_t at = 0;
    char v[KEY_STR_LEN + 32];
#define PUT(...)                                                                          \
    do {                                                                                  \
        int w_ = snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, __VA_ARGS__); \
        at += w_ > 0 ? (size_t)w_ : 0;                                                    \
    } while (0)
    PUT("{");
    for (int i = 0; i < t->n; i++) {
        const KeyInfo *k = &t->keys[i];
        keytab_value(k, obj, v, sizeof v);
        /* string values are plain identifiers/paths; escape quotes and backslashes anyway */
        if (k->type == KEY_STR) {
            PUT("%s\"%s\": \"", i ? ", " : "", k->name);
            for (const char *c = v; *c; c++) {
                if (*c == '"' || *c == '\\') PUT("\\%c", *c);
                else if ((unsigned char)*c < 0x20) PUT("\\u%04x", (unsigned)(unsigned char)*c);
                else PUT("%c", *c);
            }
            PUT("\"");
        } else {
            PUT("%s\"%s\": %s", i ? ", " : "", k->name, v);
        }
    }
    PUT("}");
#undef PUT
    if (cap) buf[at < cap ? at : cap - 1] = 0;
    return at + 1;
}

void keytab_print_key(const KeyInfo *k, const void *obj, FILE *f) {
    char v[KEY_STR_LEN + 32];
    keytab_value(k, obj, v, sizeof v);
    if (k->type == KEY_FLOAT) snprintf(v, sizeof v, "%g", *(const double *)((const char *)obj + k->offset));
    fprintf(f, "  --%-22s %-14s %s\n", k->name, v, k->help);
}

void keytab_print(const KeyTab *t, const void *obj, FILE *f) {
    for (int i = 0; i < t->n; i++) keytab_print_key(&t->keys[i], obj, f);
}
