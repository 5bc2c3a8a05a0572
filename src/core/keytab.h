/* keytab.h: configuration keys listed once.
 *
 * A config struct is declared by an X-macro table X(type, name, default, help) with type
 * INT | FLOAT | STR. The same table generates the struct fields (KEY_FIELD) and a KeyInfo array
 * (KEY_INFO), and the generic functions below then give defaults, `--key value` parsing with
 * type checks, validation messages naming the key, printing for --help, and JSON for
 * checkpoint metadata — for the model, task and training configs alike.
 */
#ifndef IMPLICIT_KEYTAB_H
#define IMPLICIT_KEYTAB_H

#include <stddef.h>
#include <stdio.h>

#define KEY_STR_LEN 256

typedef enum { KEY_INT, KEY_FLOAT, KEY_STR } KeyType;

typedef struct {
    const char *name;
    KeyType type;
    size_t offset;       /* of the field in its struct */
    const char *def;     /* default, as written in the table */
    const char *help;
} KeyInfo;

/* The range of a numeric key, lo..hi inclusive. Every INT key of a table has one (a test walks
 * the tables): keytab_check_bounds runs before any validation that does arithmetic with the
 * values, so no size product downstream can overflow. */
typedef struct {
    const char *name;
    double lo, hi;
} KeyBound;

typedef struct {
    const char *section; /* "model", "task", "train": used in messages and JSON */
    const KeyInfo *keys;
    int n;
    const KeyBound *bounds;
    int n_bounds;
    /* The values a STR key accepts, "a | b | c", when they come from a table elsewhere (a layer's
     * list of kinds), else NULL; --help prints them after the key's help. NULL = no such keys. */
    const char *(*choices)(const char *key);
} KeyTab;

#define KEY_CTYPE_INT int
#define KEY_CTYPE_FLOAT double
#define KEY_CTYPE_STR char
#define KEY_DIM_INT
#define KEY_DIM_FLOAT
#define KEY_DIM_STR [KEY_STR_LEN]
/* X-macro adaptors: struct field, and KeyInfo entry for struct S (define KEY_STRUCT first). */
#define KEY_FIELD(type, name, def, help) KEY_CTYPE_##type name KEY_DIM_##type;
#define KEY_INFO(type, name, def, help) {#name, KEY_##type, offsetof(KEY_STRUCT, name), #def, help},
/* X(name, lo, hi) bound tables; the sizeof names the field, so a bound of a missing key does not compile. */
#define KEY_BOUND(name, lo, hi) {#name + 0 * sizeof(((KEY_STRUCT *)0)->name), lo, hi},

enum { KEY_NOT_MINE = 1 };

void keytab_defaults(const KeyTab *t, void *obj);
const KeyInfo *keytab_find(const KeyTab *t, const char *key);
/* IM_OK, IM_EINVAL (ill-typed value, message names the key), or KEY_NOT_MINE (unknown key, no
 * message set) so that a CLI can offer one key to several tables. */
int keytab_set(const KeyTab *t, void *obj, const char *key, const char *value);
/* Value as text ("%.17g" for floats: exact round trip). */
void keytab_value(const KeyInfo *k, const void *obj, char *buf, size_t cap);
/* {"key": value, ...}; returns bytes needed incl. NUL (call with cap 0 to measure). */
size_t keytab_json(const KeyTab *t, const void *obj, char *buf, size_t cap);
/* Every bounded key in its range, else IM_EINVAL "model key 'd_inner' must be in 0..1048576 (got ...)". */
int keytab_check_bounds(const KeyTab *t, const void *obj);
const KeyBound *keytab_bound(const KeyTab *t, const char *key);
/* `  --key  default  help` lines for --help: every key (with its range, if bounded), or one. */
void keytab_print(const KeyTab *t, const void *obj, FILE *f);
void keytab_print_key(const KeyTab *t, const KeyInfo *k, const void *obj, FILE *f);

#endif
