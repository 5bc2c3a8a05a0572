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

const KeyBound *keytab_bound(const KeyTab *t, const char *key) {
    for (int i = 0; i < t->n_bounds; i++)
        if (!strcmp(t->bounds[i].name, key)) return &t->bounds[i];
    return NULL;
}

/* "lo..hi" with integers printed as such */
static void range_str(const KeyBound *b, KeyType type, char *buf, size_t cap) {
    if (type == KEY_INT) snprintf(buf, cap, "%.0f..%.0f", b->lo, b->hi);
    else snprintf(buf, cap, "%g..%g", b->lo, b->hi);
}

int keytab_check_bounds(const KeyTab *t, const void *obj) {
    for (int i = 0; i < t->n_bounds; i++) {
        const KeyBound *b = &t->bounds[i];
        const KeyInfo *k = keytab_find(t, b->name);
        CHECK(k && k->type != KEY_STR, "bound of %s key '%s': no such numeric key", t->section, b->name);
        const char *f = (const char *)obj + k->offset;
        double v = k->type == KEY_INT ? (double)*(const int *)f : *(const double *)f;
        if (v >= b->lo && v <= b->hi) continue;   /* also rejects a NaN */
        char range[64], got[64];
        range_str(b, k->type, range, sizeof range);
        snprintf(got, sizeof got, k->type == KEY_INT ? "%.0f" : "%g", v);
        return err_set(IM_EINVAL, "%s key '%s' must be in %s (got %s)", t->section, k->name, range, got);
    }
    return IM_OK;
}

/* One `  --key  value  help[: choices] [lo..hi]` line; b may be NULL (no range known). */
static void print_key(const KeyTab *t, const KeyInfo *k, const KeyBound *b, const void *obj, FILE *f) {
    char v[KEY_STR_LEN + 32], range[64] = "";
    keytab_value(k, obj, v, sizeof v);
    if (k->type == KEY_FLOAT) snprintf(v, sizeof v, "%g", *(const double *)((const char *)obj + k->offset));
    if (b) {
        range[0] = ' ', range[1] = '[';
        range_str(b, k->type, range + 2, sizeof range - 3);
        strcat(range, "]");
    }
    const char *choices = t->choices ? t->choices(k->name) : NULL;
    fprintf(f, "  --%-22s %-14s %s%s%s%s\n", k->name, v, k->help, choices ? ": " : "", choices ? choices : "", range);
}

void keytab_print_key(const KeyTab *t, const KeyInfo *k, const void *obj, FILE *f) { print_key(t, k, NULL, obj, f); }

void keytab_print(const KeyTab *t, const void *obj, FILE *f) {
    for (int i = 0; i < t->n; i++) print_key(t, &t->keys[i], keytab_bound(t, t->keys[i].name), obj, f);
}
