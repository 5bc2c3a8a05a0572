/* json.h: a strict RFC 8259 JSON parser into a tree, and a small streaming writer.
 *
 * Used for safetensors headers (docs/formats.md), config files and JSONL training logs.
 * Parser: accepts exactly RFC 8259 (any value at top level; no comments, trailing commas, NaN,
 * single quotes or leading zeros); strings must be valid UTF-8 and are unescaped, including
 * \uXXXX and surrogate pairs; objects keep their key order; duplicate keys are an error unless
 * allowed; nesting is limited. Errors return a status from core/check.h with a message in
 * err_msg(), e.g. "json: expected ':' after object key at offset 5 (line 1, column 6)".
 * Writer: JsonBuf, a growable NUL-terminated text with automatic commas and escaping, compact
 * or indented. Out of scope: streaming parse, JSON Pointer, comments, numbers beyond double.
 */
#ifndef IMPLICIT_JSON_H
#define IMPLICIT_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct Json Json;
struct Json {
    JsonType type;
    int boolean;        /* JSON_BOOL: 0 or 1 */
    int is_int;         /* JSON_NUMBER: literal had no fraction/exponent and fits in int64 */
    int64_t integer;    /* JSON_NUMBER with is_int: the exact value */
    double number;      /* JSON_NUMBER: the value (integers too, rounded beyond 2^53) */
    char *string;       /* JSON_STRING: (str_len + 1) UTF-8, NUL-terminated; may hold \0 from \u0000 */
    size_t str_len;
    Json *items;        /* JSON_ARRAY, JSON_OBJECT: (count) children in source order */
    size_t count;
    char *key;          /* members of an object: (key_len + 1) NUL-terminated key; else NULL */
    size_t key_len;
    size_t offset;      /* byte offset where this value starts in the parsed text */
};

#define JSON_DEFAULT_MAX_DEPTH 128

typedef struct {
    int max_depth;       /* nesting limit for arrays/objects; <= 0 means JSON_DEFAULT_MAX_DEPTH */
    int allow_dup_keys;  /* 1: keep duplicate keys (json_get finds the first); 0: error */
    int allow_nonfinite; /* 1: accept Infinity, -Infinity and NaN as numbers, as Python's json writes
                            them (Hugging Face config.json files); 0: error (RFC 8259) */
} JsonParseOpts;

/* Parse text[0..len) (need not be NUL-terminated). On success *out is a tree to json_free.
 * Returns IM_OK, IM_EFORMAT (syntax; err_msg gives offset, line, column) or IM_ENOMEM;
 * *out is NULL on failure. json_parse = json_parse_ex with default options. */
int json_parse(Json **out, const char *text, size_t len);
int json_parse_ex(Json **out, const char *text, size_t len, const JsonParseOpts *opts);
void json_free(Json *j);   /* NULL ok */

/* Accessors; all accept NULL and wrong types and then return NULL / 0. */
const Json *json_get(const Json *obj, const char *key);  /* first member named key */
size_t json_len(const Json *j);                          /* items of an array or object */
const Json *json_at(const Json *j, size_t i);            /* i-th item of an array/object */
const char *json_key_at(const Json *obj, size_t i);      /* key of the i-th member */
const char *json_type_name(JsonType t);                  /* "null", "bool", "number", ... */

/* Helpers shared with other readers. */
int json_utf8_valid(const char *s, size_t n);            /* 1 if s[0..n) is valid UTF-8 */
/* A printable, quoted-free excerpt of s[0..n) for error messages: non-printable bytes become
 * \xHH and long text is cut with "...". Writes at most cap bytes incl. NUL; returns dst. */
char *json_snippet(char *dst, size_t cap, const char *s, size_t n);

/* ---- writer ---------------------------------------------------------------------------- */

#define JSON_BUF_MAX_DEPTH JSON_DEFAULT_MAX_DEPTH /* json_write of deeper trees CHECKs */

typedef struct {
    char *data;          /* (cap) the text so far, NUL-terminated, len bytes; NULL until used */
    size_t len, cap;
    int failed;          /* sticky: an allocation failed and the text is incomplete */
    int indent;          /* 0 = compact; n > 0 = newline and n spaces per level */
    int depth;           /* open containers */
    int want_value;      /* a key was written; its value comes next */
    unsigned char is_obj[JSON_BUF_MAX_DEPTH];  /* per open container: object (1) or array (0) */
    unsigned char nonempty[JSON_BUF_MAX_DEPTH]; /* per open container: an item was written */
} JsonBuf;

/* Misuse (a key outside an object, a value where a key is due, unbalanced ends, too deep) is a
 * programmer error and CHECKs. Memory failure sets `failed` and later calls do nothing. */
void json_buf_init(JsonBuf *b, int indent);
void json_buf_free(JsonBuf *b);
void json_buf_reset(JsonBuf *b);              /* empty text and state; keeps memory (JSONL lines) */
void json_buf_begin_obj(JsonBuf *b);
void json_buf_end_obj(JsonBuf *b);
void json_buf_begin_arr(JsonBuf *b);
void json_buf_end_arr(JsonBuf *b);
void json_buf_key(JsonBuf *b, const char *key);
void json_buf_str(JsonBuf *b, const char *s);               /* escaped; invalid UTF-8 -> U+FFFD */
void json_buf_strn(JsonBuf *b, const char *s, size_t n);
void json_buf_num(JsonBuf *b, double x);    /* shortest text that reads back exactly; NaN/inf -> null */
void json_buf_int(JsonBuf *b, int64_t v);
void json_buf_bool(JsonBuf *b, int v);
void json_buf_null(JsonBuf *b);
void json_buf_raw(JsonBuf *b, const char *json);            /* a pre-rendered value, not checked */
void json_buf_append(JsonBuf *b, const char *s, size_t n);  /* plain bytes, no comma logic */
/* "key": value in one call, for log lines and config dumps. */
void json_buf_kv_str(JsonBuf *b, const char *key, const char *s);
void json_buf_kv_num(JsonBuf *b, const char *key, double x);
void json_buf_kv_int(JsonBuf *b, const char *key, int64_t v);
void json_buf_kv_bool(JsonBuf *b, const char *key, int v);
/* Write a parsed tree as one value (json_parse -> json_write round-trips). */
void json_write(JsonBuf *b, const Json *j);

#endif
