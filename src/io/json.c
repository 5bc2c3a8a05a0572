/* json.c: strict RFC 8259 parser and streaming writer (see json.h).
 *
 * The parser is recursive descent over a byte span with an explicit depth limit, so hostile
 * input (fuzzed safetensors headers) cannot overflow the stack. Every node is written into its
 * parent's `items` array before it is parsed, with `count` covering it, so a failure at any
 * point leaves a tree json_free can release. Number conversion uses strtod in the C locale
 * (the library never calls setlocale). Out of scope: see json.h.
 */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"

/* The parser's whole state: the text is never copied, and every read is bounds-checked
 * against len, because a safetensors header is not NUL-terminated. */
typedef struct {
    const unsigned char *s;  /* (len) the text */
    size_t len, pos;         /* pos: next unread byte */
    int depth, max_depth;    /* open arrays/objects; the limit that keeps recursion bounded */
    int allow_dups;
    int allow_nonfinite;     /* Infinity, -Infinity, NaN as numbers (Python's json) */
} Parser;

/* ---- shared helpers -------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid. Rejects overlong forms,
 * UTF-16 surrogates (U+D800..DFFF) and code points above U+10FFFF (RFC 3629 table). */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned char lo = 0x80, hi = 0xBF;  /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return k;
}

/* Used by writers that must refuse (not repair) bad text, e.g. safetensors tensor names. */
int json_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len(u + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* Keys and names in error messages come from untrusted files: never print them raw. */
char *json_snippet(char *dst, size_t cap, const char *s, size_t n) {
    CHECK(dst && cap >= 8, "json_snippet needs a buffer of at least 8 bytes");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int printable = c >= 0x20 && c < 0x7F;
        size_t need = printable ? 1 : 4;
        if (o + need + 4 > cap) {  /* keep room for "..." and the NUL */
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        if (printable) dst[o++] = (char)c;
        else o += (size_t)snprintf(dst + o, cap - o, "\\x%02X", c);
    }
    dst[o] = 0;
    return dst;
}

const char *json_type_name(JsonType t) {
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "bool";
    case JSON_NUMBER: return "number";
    case JSON_STRING: return "string";
    case JSON_ARRAY: return "array";
    case JSON_OBJECT: return "object";
    }
    return "?";
}

/* ---- parser ---------------------------------------------------------------------------- */

/* Report a syntax error at byte `at`, with line and column for hand-written config files. */
static int perr(const Parser *p, size_t at, const char *fmt, ...) IM_PRINTF(3, 4);
static int perr(const Parser *p, size_t at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') { line++; col = 1; } else col++;
    }
    return err_set(IM_EFORMAT, "json: %s at offset %zu (line %zu, column %zu)", msg, at, line, col);
}

static int oom(void) { return err_set(IM_ENOMEM, "json: out of memory"); }

/* "'x'" for a printable byte, "byte 0xHH" otherwise, for "unexpected ..." messages. */
static const char *char_name(char buf[16], unsigned char c) {
    if (c >= 0x20 && c < 0x7F) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02X", c);
    return buf;
}

/* RFC 8259 whitespace is exactly these four bytes (no form feed, no NBSP). */
static void skip_ws(Parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* The 4 hex digits of a \u escape (either case); 0 if any is not hex. */
static int hex4(const unsigned char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        unsigned d;
        if (is_digit(c)) d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10u;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10u;
        else return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

/* Encode one code point (< 0x110000, not a surrogate: the caller ensures it) as UTF-8. */
static size_t put_utf8(char *dst, unsigned cp) {
    if (cp < 0x80) { dst[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6)); dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12)); dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18)); dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode the escape at s[*i] == '\\' (inside a string ending before `end`) into dst.
 * A backslash is never the last byte before `end` (the end scan skips escaped bytes). */
static int parse_escape(Parser *p, size_t *i, size_t end, char *dst, size_t *o) {
    const unsigned char *s = p->s;
    size_t at = *i;
    unsigned char e = s[at + 1];
    /* The eight one-letter escapes map one to one onto bytes. */
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *simple = e ? strchr(from, e) : NULL;
    if (simple) {
        dst[(*o)++] = to[simple - from];
        *i = at + 2;
        return IM_OK;
    }
    if (e != 'u') {
        char cn[16];
        return perr(p, at, "invalid escape '\\' followed by %s in string", char_name(cn, e));
    }
    unsigned cp, lo;
    if (at + 6 > end || !hex4(s + at + 2, &cp)) return perr(p, at, "invalid \\u escape (need 4 hex digits)");
    size_t next = at + 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return perr(p, at, "unpaired low surrogate \\u%04X", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        /* UTF-16 pair: a high surrogate must be followed at once by an escaped low one. */
        if (next + 6 > end || s[next] != '\\' || s[next + 1] != 'u' || !hex4(s + next + 2, &lo) ||
            lo < 0xDC00 || lo > 0xDFFF)
            return perr(p, at, "unpaired high surrogate \\u%04X", cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        next += 6;
    }
    *o += put_utf8(dst + *o, cp);
    *i = next;
    return IM_OK;
}

/* Parse the string starting at p->pos (a '"') into a fresh NUL-terminated buffer. Unescaped
 * text is never longer than its source span, so one allocation of the span suffices. */
static int parse_string(Parser *p, char **out, size_t *out_len) {
    const unsigned char *s = p->s;
    size_t start = p->pos, i = start + 1;
    /* First find the closing quote (skipping escaped bytes) to size the buffer; the contents
     * are validated in the second pass, which reports the first bad byte's offset. */
    while (i < p->len && s[i] != '"') i += (s[i] == '\\') ? 2 : 1;
    if (i >= p->len) return perr(p, start, "unterminated string");
    size_t end = i;
    char *dst = malloc(end - start);  /* (end - start - 1) bytes of content + NUL */
    if (!dst) return oom();
    size_t o = 0;
    int rc = IM_OK;
    for (i = start + 1; i < end && !rc;) {
        unsigned char c = s[i];
        if (c == '\\') {
            rc = parse_escape(p, &i, end, dst, &o);
        } else if (c < 0x20) {  /* raw control characters are forbidden by the RFC */
            rc = perr(p, i, "control character 0x%02X in string (must be escaped)", c);
        } else {
            size_t k = utf8_seq_len(s + i, end - i);
            if (!k) { rc = perr(p, i, "invalid UTF-8 in string"); break; }
            memcpy(dst + o, s + i, k);
            o += k;
            i += k;
        }
    }
    if (rc) { free(dst); return rc; }
    dst[o] = 0;
    *out = dst;
    *out_len = o;
    p->pos = end + 1;
    return IM_OK;
}

/* RFC 8259 number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int parse_number(Parser *p, Json *v) {
    const unsigned char *s = p->s;
    size_t start = p->pos, i = start, n = p->len;
    int is_int = 1;  /* stays 1 while the literal has no fraction and no exponent */
    /* Validate the grammar by hand: strtod alone would accept "0x1p3", "inf", " 1", "1." */
    if (s[i] == '-') i++;
    if (i >= n || !is_digit(s[i])) return perr(p, i, "invalid number: expected a digit");
    if (s[i] == '0') {
        i++;
        if (i < n && is_digit(s[i])) return perr(p, start, "invalid number: leading zeros are not allowed");
    } else {
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || !is_digit(s[i])) return perr(p, i, "invalid number: expected a digit after '.'");
        while (i < n && is_digit(s[i])) i++;
        is_int = 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !is_digit(s[i])) return perr(p, i, "invalid number: expected a digit in the exponent");
        while (i < n && is_digit(s[i])) i++;
        is_int = 0;
    }
    /* strtod needs a NUL-terminated copy: the text may continue with more digits-like bytes. */
    size_t k = i - start;
    char small[64], *tmp = k < sizeof small ? small : malloc(k + 1);
    if (!tmp) return oom();
    memcpy(tmp, s + start, k);
    tmp[k] = 0;
    double d = strtod(tmp, NULL);
    if (tmp != small) free(tmp);
    /* Overflow to inf is an error (JSON cannot carry it back out); underflow to 0 is fine. */
    if (isinf(d)) return perr(p, start, "number out of range");
    v->type = JSON_NUMBER;
    v->number = d;
    if (is_int) {
        /* Exact int64 when it fits: offsets and sizes beyond 2^53 must not round. */
        int neg = s[start] == '-';
        uint64_t mag = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        for (size_t j = start + (size_t)neg; j < i && is_int; j++) {
            unsigned dg = s[j] - '0';
            if (mag > (limit - dg) / 10) is_int = 0;
            else mag = mag * 10 + dg;
        }
        if (is_int) v->integer = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
    v->is_int = is_int;
    p->pos = i;
    return IM_OK;
}

/* true / false / null: the whole word must match (so "nul" or "tru" are errors). */
static int parse_literal(Parser *p, Json *v, const char *word, JsonType t, int b) {
    size_t k = strlen(word);
    if (p->len - p->pos < k || memcmp(p->s + p->pos, word, k) != 0)
        return perr(p, p->pos, "invalid literal (expected '%s')", word);
    v->type = t;
    v->boolean = b;
    p->pos += k;
    return IM_OK;
}

/* Append a zeroed child to a container, counted at once so that json_free sees it. */
static Json *add_item(Json *v, size_t *cap) {
    if (v->count == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        Json *ni = realloc(v->items, nc * sizeof *ni);
        if (!ni) return NULL;
        v->items = ni;
        *cap = nc;
    }
    Json *m = &v->items[v->count++];
    memset(m, 0, sizeof *m);
    return m;
}

/* Duplicate-key detection: a linear scan for small objects, an open-addressing hash of member
 * indices beyond that, so a 100 MB safetensors header stays O(n). */
typedef struct { size_t *slot; size_t cap; } KeySet;  /* slot: member index + 1, 0 = empty */

/* Any decent hash will do: keys come from the text, collisions only cost probes. */
static uint64_t key_hash(const char *k, size_t n) {
    uint64_t h = 1469598103934665603ull;  /* FNV-1a */
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)k[i]; h *= 1099511628211ull; }
    return h;
}

/* Keys compare by bytes and length: "a\u0000b" and "a\u0000c" are different keys. */
static int same_key(const Json *a, const Json *b) {
    return a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0;
}

/* Insert member idx of obj; returns 1 if the key was already present, -1 on OOM, else 0. */
static int keyset_add(KeySet *ks, const Json *obj, size_t idx) {
    const Json *m = &obj->items[idx];
    if (idx < 8) {
        for (size_t j = 0; j < idx; j++)
            if (same_key(&obj->items[j], m)) return 1;
        return 0;
    }
    if (2 * (idx + 1) > ks->cap) {  /* (re)build with load factor <= 1/2 */
        size_t nc = ks->cap ? ks->cap * 2 : 32;
        size_t *ns = calloc(nc, sizeof *ns);
        if (!ns) return -1;
        free(ks->slot);
        ks->slot = ns;
        ks->cap = nc;
        for (size_t j = 0; j < idx; j++) {
            size_t h = (size_t)key_hash(obj->items[j].key, obj->items[j].key_len) & (nc - 1);
            while (ns[h]) h = (h + 1) & (nc - 1);
            ns[h] = j + 1;
        }
    }
    size_t h = (size_t)key_hash(m->key, m->key_len) & (ks->cap - 1);
    for (; ks->slot[h]; h = (h + 1) & (ks->cap - 1))
        if (same_key(&obj->items[ks->slot[h] - 1], m)) return 1;
    ks->slot[h] = idx + 1;
    return 0;
}

static int parse_value(Parser *p, Json *v);

/* The members of an object after '{' (not empty): "key": value pairs up to the '}'. */
static int parse_members(Parser *p, Json *v, KeySet *ks) {
    size_t cap = 0;
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->len) return perr(p, p->pos, "unexpected end of input, expected a string key");
        if (p->s[p->pos] != '"')
            return perr(p, p->pos, p->s[p->pos] == '}' ? "trailing comma before '}'" : "expected a string key");
        Json *m = add_item(v, &cap);
        if (!m) return oom();
        size_t key_at = p->pos;
        int rc = parse_string(p, &m->key, &m->key_len);
        if (rc) return rc;
        if (!p->allow_dups) {
            int dup = keyset_add(ks, v, v->count - 1);
            if (dup < 0) return oom();
            if (dup) {
                char sn[96];
                return perr(p, key_at, "duplicate key '%s'", json_snippet(sn, sizeof sn, m->key, m->key_len));
            }
        }
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') return perr(p, p->pos, "expected ':' after object key");
        p->pos++;
        if ((rc = parse_value(p, m))) return rc;
        skip_ws(p);
        if (p->pos >= p->len) return perr(p, p->pos, "unexpected end of input, expected ',' or '}'");
        unsigned char c = p->s[p->pos++];
        if (c == '}') return IM_OK;
        if (c != ',') return perr(p, p->pos - 1, "expected ',' or '}' in object");
    }
}

/* The elements of an array after '[' (not empty), up to the ']'. */
static int parse_elements(Parser *p, Json *v) {
    size_t cap = 0;
    for (;;) {
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ']') return perr(p, p->pos, "trailing comma before ']'");
        Json *m = add_item(v, &cap);
        if (!m) return oom();
        int rc = parse_value(p, m);
        if (rc) return rc;
        skip_ws(p);
        if (p->pos >= p->len) return perr(p, p->pos, "unexpected end of input, expected ',' or ']'");
        unsigned char c = p->s[p->pos++];
        if (c == ']') return IM_OK;
        if (c != ',') return perr(p, p->pos - 1, "expected ',' or ']' in array");
    }
}

/* Arrays and objects: depth check, the empty case, then the element loop. */
static int parse_container(Parser *p, Json *v, int obj) {
    if (p->depth >= p->max_depth) return perr(p, p->pos, "nesting deeper than %d levels", p->max_depth);
    p->depth++;
    v->type = obj ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    skip_ws(p);
    int rc = IM_OK;
    if (p->pos < p->len && p->s[p->pos] == (obj ? '}' : ']')) {
        p->pos++;
    } else if (obj) {
        KeySet ks = {NULL, 0};
        rc = parse_members(p, v, &ks);
        free(ks.slot);
    } else {
        rc = parse_elements(p, v);
    }
    p->depth--;
    return rc;
}

/* One value of any type at p->pos (after whitespace), dispatched on its first byte. */
static int parse_value(Parser *p, Json *v) {
    skip_ws(p);
    v->offset = p->pos;
    if (p->pos >= p->len) return perr(p, p->pos, "unexpected end of input, expected a value");
    unsigned char c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, v, 1);
    case '[': return parse_container(p, v, 0);
    case '"': v->type = JSON_STRING; return parse_string(p, &v->string, &v->str_len);
    case 't': return parse_literal(p, v, "true", JSON_BOOL, 1);
    case 'f': return parse_literal(p, v, "false", JSON_BOOL, 0);
    case 'n': return parse_literal(p, v, "null", JSON_NULL, 0);
    default: break;
    }
    if (p->allow_nonfinite) {
        static const char *const words[] = {"Infinity", "-Infinity", "NaN"};
        for (int w = 0; w < 3; w++) {
            size_t k = strlen(words[w]);
            if (p->len - p->pos >= k && !memcmp(p->s + p->pos, words[w], k)) {
                v->type = JSON_NUMBER;
                v->number = w == 2 ? NAN : w ? -INFINITY : INFINITY;
                p->pos += k;
                return IM_OK;
            }
        }
    }
    if (c == '-' || is_digit(c)) return parse_number(p, v);
    char cn[16];
    return perr(p, p->pos, "unexpected %s, expected a value", char_name(cn, c));
}

/* Frees what a node owns, not the node (it lives in its parent's items array). Recursion is
 * bounded by the parse depth limit. */
static void free_node(Json *j) {
    for (size_t i = 0; i < j->count; i++) free_node(&j->items[i]);
    free(j->items);
    free(j->string);
    free(j->key);
}

void json_free(Json *j) {
    if (!j) return;
    free_node(j);
    free(j);
}

int json_parse_ex(Json **out, const char *text, size_t len, const JsonParseOpts *opts) {
    CHECK(out && (text || len == 0), "json_parse: NULL output or text");
    *out = NULL;
    Parser p = {(const unsigned char *)(text ? text : ""), len, 0, 0, JSON_DEFAULT_MAX_DEPTH, 0, 0};
    if (opts) {
        if (opts->max_depth > 0) p.max_depth = opts->max_depth;
        p.allow_dups = opts->allow_dup_keys;
        p.allow_nonfinite = opts->allow_nonfinite;
    }
    /* The root is the only node allocated on its own; all others live in items arrays. */
    Json *root = calloc(1, sizeof *root);
    if (!root) return oom();
    int rc = parse_value(&p, root);
    if (!rc) {
        skip_ws(&p);
        if (p.pos < p.len) rc = perr(&p, p.pos, "unexpected trailing characters after the value");
    }
    if (rc) { json_free(root); return rc; }
    *out = root;
    return IM_OK;
}

int json_parse(Json **out, const char *text, size_t len) { return json_parse_ex(out, text, len, NULL); }

/* ---- accessors ------------------------------------------------------------------------- */

/* Linear: objects we look up in (configs, header entries) are small; big headers are
 * walked with json_at instead. */
const Json *json_get(const Json *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < obj->count; i++)
        if (obj->items[i].key_len == n && memcmp(obj->items[i].key, key, n) == 0) return &obj->items[i];
    return NULL;
}

size_t json_len(const Json *j) {
    return (j && (j->type == JSON_ARRAY || j->type == JSON_OBJECT)) ? j->count : 0;
}

const Json *json_at(const Json *j, size_t i) { return i < json_len(j) ? &j->items[i] : NULL; }

const char *json_key_at(const Json *obj, size_t i) {
    return (obj && obj->type == JSON_OBJECT && i < obj->count) ? obj->items[i].key : NULL;
}

/* ---- writer ---------------------------------------------------------------------------- */

void json_buf_init(JsonBuf *b, int indent) {
    memset(b, 0, sizeof *b);
    b->indent = indent > 0 ? indent : 0;
}

void json_buf_free(JsonBuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* For JSONL: one buffer serves every line, without reallocating. */
void json_buf_reset(JsonBuf *b) {
    b->len = 0;
    if (b->data) b->data[0] = 0;
    b->failed = 0;
    b->depth = 0;
    b->want_value = 0;
}

/* Every byte goes through here: grows by doubling, keeps the text NUL-terminated, and
 * turns an allocation failure into the sticky `failed` flag instead of an abort. */
void json_buf_append(JsonBuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *nd = realloc(b->data, nc);
        if (!nd) { b->failed = 1; return; }
        b->data = nd;
        b->cap = nc;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

static void puts_(JsonBuf *b, const char *s) { json_buf_append(b, s, strlen(s)); }

/* Pretty printing only: a newline and `depth` levels of indentation. */
static void newline_indent(JsonBuf *b, int depth) {
    if (!b->indent) return;
    json_buf_append(b, "\n", 1);
    for (int i = 0; i < depth * b->indent; i++) json_buf_append(b, " ", 1);
}

/* Everything that precedes a value: consume a pending key, or add the comma and indentation. */
static void before_value(JsonBuf *b) {
    if (b->want_value) { b->want_value = 0; return; }
    if (b->depth == 0) return;  /* top level: the caller separates values (e.g. JSONL '\n') */
    CHECK(!b->is_obj[b->depth - 1], "json_buf: a value inside an object needs json_buf_key first");
    if (b->nonempty[b->depth - 1]) json_buf_append(b, ",", 1);
    b->nonempty[b->depth - 1] = 1;
    newline_indent(b, b->depth);
}

/* A quoted string with JSON escapes; runs of plain bytes are copied in one piece. */
static void put_escaped(JsonBuf *b, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    json_buf_append(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = (c >= 0x20 && c != '"' && c != '\\') ? utf8_seq_len(s + i, n - i) : 0;
        if (k) { i += k; continue; }  /* plain byte or valid multi-byte sequence */
        json_buf_append(b, str + run, i - run);
        char esc[8];
        if (c == '"') puts_(b, "\\\"");
        else if (c == '\\') puts_(b, "\\\\");
        else if (c == '\n') puts_(b, "\\n");
        else if (c == '\t') puts_(b, "\\t");
        else if (c == '\r') puts_(b, "\\r");
        else if (c == '\b') puts_(b, "\\b");
        else if (c == '\f') puts_(b, "\\f");
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04X", c); puts_(b, esc); }
        else puts_(b, "\xEF\xBF\xBD");  /* invalid UTF-8 byte -> U+FFFD, keeps output valid */
        run = ++i;
    }
    json_buf_append(b, str + run, n - run);
    json_buf_append(b, "\"", 1);
}

/* '{' or '[' as a value of the enclosing container, then a new level. */
static void open_container(JsonBuf *b, int obj) {
    before_value(b);
    CHECK(b->depth < JSON_BUF_MAX_DEPTH, "json_buf: nesting deeper than %d", JSON_BUF_MAX_DEPTH);
    json_buf_append(b, obj ? "{" : "[", 1);
    b->is_obj[b->depth] = (unsigned char)obj;
    b->nonempty[b->depth] = 0;
    b->depth++;
}

/* '}' or ']'; an empty container stays on one line ("[]", "{}") even when indenting. */
static void close_container(JsonBuf *b, int obj) {
    CHECK(b->depth > 0 && b->is_obj[b->depth - 1] == obj && !b->want_value,
          "json_buf: unbalanced %s (or a key without a value)", obj ? "end_obj" : "end_arr");
    b->depth--;
    if (b->nonempty[b->depth]) newline_indent(b, b->depth);
    json_buf_append(b, obj ? "}" : "]", 1);
}

void json_buf_begin_obj(JsonBuf *b) { open_container(b, 1); }
void json_buf_end_obj(JsonBuf *b) { close_container(b, 1); }
void json_buf_begin_arr(JsonBuf *b) { open_container(b, 0); }
void json_buf_end_arr(JsonBuf *b) { close_container(b, 0); }

/* A member key with its comma and ':'; the next call must write the value. Takes a length
 * so json_write can copy keys that contain \u0000. */
static void put_key(JsonBuf *b, const char *key, size_t n) {
    CHECK(b->depth > 0 && b->is_obj[b->depth - 1] && !b->want_value,
          "json_buf_key: not inside an object, or the previous key has no value");
    if (b->nonempty[b->depth - 1]) json_buf_append(b, ",", 1);
    b->nonempty[b->depth - 1] = 1;
    newline_indent(b, b->depth);
    put_escaped(b, key, n);
    puts_(b, b->indent ? ": " : ":");
    b->want_value = 1;
}

void json_buf_key(JsonBuf *b, const char *key) { put_key(b, key, strlen(key)); }

void json_buf_strn(JsonBuf *b, const char *s, size_t n) { before_value(b); put_escaped(b, s, n); }
void json_buf_str(JsonBuf *b, const char *s) { json_buf_strn(b, s, strlen(s)); }
void json_buf_null(JsonBuf *b) { before_value(b); puts_(b, "null"); }
void json_buf_bool(JsonBuf *b, int v) { before_value(b); puts_(b, v ? "true" : "false"); }
void json_buf_raw(JsonBuf *b, const char *json) { before_value(b); puts_(b, json); }

/* Integers never go through double: step counts and byte offsets stay exact. */
void json_buf_int(JsonBuf *b, int64_t v) {
    char t[32];
    snprintf(t, sizeof t, "%" PRId64, v);
    before_value(b);
    puts_(b, t);
}

void json_buf_num(JsonBuf *b, double x) {
    if (!isfinite(x)) { json_buf_null(b); return; }
    /* The shortest of %.15g..%.17g that reads back bit-exactly (17 always does). */
    char t[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, x);
        if (strtod(t, NULL) == x) break;
    }
    before_value(b);
    puts_(b, t);
}

void json_buf_kv_str(JsonBuf *b, const char *key, const char *s) { json_buf_key(b, key); json_buf_str(b, s); }
void json_buf_kv_num(JsonBuf *b, const char *key, double x) { json_buf_key(b, key); json_buf_num(b, x); }
void json_buf_kv_int(JsonBuf *b, const char *key, int64_t v) { json_buf_key(b, key); json_buf_int(b, v); }
void json_buf_kv_bool(JsonBuf *b, const char *key, int v) { json_buf_key(b, key); json_buf_bool(b, v); }

/* Integers are written from their exact int64 (except -0, which keeps its sign as a double),
 * so parse -> write is lossless for everything json_parse accepts. */
void json_write(JsonBuf *b, const Json *j) {
    switch (j->type) {
    case JSON_NULL: json_buf_null(b); break;
    case JSON_BOOL: json_buf_bool(b, j->boolean); break;
    case JSON_NUMBER:
        if (j->is_int && !(j->integer == 0 && signbit(j->number))) json_buf_int(b, j->integer);
        else json_buf_num(b, j->number);
        break;
    case JSON_STRING: json_buf_strn(b, j->string, j->str_len); break;
    case JSON_ARRAY:
        json_buf_begin_arr(b);
        for (size_t i = 0; i < j->count; i++) json_write(b, &j->items[i]);
        json_buf_end_arr(b);
        break;
    case JSON_OBJECT:
        json_buf_begin_obj(b);
        for (size_t i = 0; i < j->count; i++) {
            put_key(b, j->items[i].key, j->items[i].key_len);
            json_write(b, &j->items[i]);
        }
        json_buf_end_obj(b);
        break;
    }
}
