/* test_json.c: the strict JSON parser and the writer (src/io/json.h).
 *
 * Checks scalars, exact integers, escapes and \u surrogate pairs, UTF-8 validation, key order
 * and accessors, a table of malformed inputs each rejected at a given byte offset, the depth
 * limit, duplicate keys (small and hashed objects), writer output byte for byte (compact and
 * indented), number round trips, tree round trips and a mutation loop that must never crash.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/io/json.h"
#include "th.h"

static Json *parse_ok(const char *text) {
    Json *j = NULL;
    int rc = json_parse(&j, text, strlen(text));
    TH_CHECK(rc == IM_OK && j, "parse of %s failed: %s", text, err_msg());
    return j;
}

static void test_scalars(void) {
    Json *j = parse_ok(" null ");
    TH_CHECK(j && j->type == JSON_NULL, "null");
    json_free(j);
    j = parse_ok("true");
    TH_CHECK(j && j->type == JSON_BOOL && j->boolean == 1, "true");
    json_free(j);
    j = parse_ok("\tfalse\r\n");
    TH_CHECK(j && j->type == JSON_BOOL && j->boolean == 0, "false");
    json_free(j);
    static const struct { const char *t; double v; int is_int; } nums[] = {
        {"0", 0, 1}, {"-0", -0.0, 1}, {"1", 1, 1}, {"-17", -17, 1}, {"1.5", 1.5, 0}, {"1e3", 1000, 0},
        {"1E-2", 0.01, 0}, {"-2.5e+2", -250, 0}, {"0.1", 0.1, 0}, {"123456789", 123456789, 1},
        {"9223372036854775807", 9223372036854775807.0, 1}, {"-9223372036854775808", -9223372036854775808.0, 1},
        {"9223372036854775808", 9223372036854775808.0, 0}, {"1e-400", 0, 0},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        j = parse_ok(nums[i].t);
        TH_CHECK(j && j->type == JSON_NUMBER && j->number == nums[i].v && j->is_int == nums[i].is_int,
                 "number %s: got %.17g is_int %d", nums[i].t, j ? j->number : 0, j ? j->is_int : -1);
        json_free(j);
    }
    /* Exact integers beyond 2^53: the double rounds, the int64 does not. */
    j = parse_ok("9007199254740993");
    TH_CHECK(j && j->is_int && j->integer == 9007199254740993LL, "2^53+1 exact");
    json_free(j);
    j = parse_ok("-9223372036854775808");
    TH_CHECK(j && j->is_int && j->integer == INT64_MIN, "INT64_MIN exact");
    json_free(j);
    j = parse_ok("-0");
    TH_CHECK(j && signbit(j->number), "-0 keeps its sign");
    json_free(j);
}

static void test_strings(void) {
    Json *j = parse_ok("\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\"");
    TH_CHECK(j && j->type == JSON_STRING && strcmp(j->string, "a\"b\\c/d\be\ff\ng\rh\ti") == 0, "simple escapes");
    json_free(j);
    static const struct { const char *in, *out; size_t n; } u[] = {
        {"\"\\u0041\"", "A", 1},
        {"\"\\u00e9\"", "\xC3\xA9", 2},
        {"\"\\u20AC\"", "\xE2\x82\xAC", 3},
        {"\"\\ud83d\\ude00\"", "\xF0\x9F\x98\x80", 4},          /* U+1F600 via a surrogate pair */
        {"\"\\uDBFF\\uDFFF\"", "\xF4\x8F\xBF\xBF", 4},          /* U+10FFFF, the last code point */
        {"\"x\\u0000y\"", "x\0y", 3},                           /* embedded NUL, length kept */
        {"\"\xE2\x82\xAC \xF0\x9F\x98\x80\"", "\xE2\x82\xAC \xF0\x9F\x98\x80", 8}, /* raw UTF-8 */
        {"\"\"", "", 0},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        j = parse_ok(u[i].in);
        TH_CHECK(j && j->type == JSON_STRING && j->str_len == u[i].n && memcmp(j->string, u[i].out, u[i].n) == 0 &&
                 j->string[u[i].n] == 0, "unicode case %zu (%s)", i, u[i].in);
        json_free(j);
    }
    TH_CHECK(json_utf8_valid("\xC3\xA9", 2) && !json_utf8_valid("\xC0\x80", 2) && !json_utf8_valid("\xED\xA0\x80", 3) &&
             !json_utf8_valid("\xF4\x90\x80\x80", 4) && !json_utf8_valid("\xE2\x82", 2) && json_utf8_valid("", 0),
             "json_utf8_valid: overlong, surrogate, > U+10FFFF, truncated");
}

static void test_tree(void) {
    const char *t = "{\"z\": 1, \"a\": [true, null, {\"k\": \"v\"}], \"m\": {}, \"e\": []}";
    Json *j = parse_ok(t);
    if (!j) return;
    TH_CHECK(j->type == JSON_OBJECT && json_len(j) == 4, "object with 4 members");
    const char *order[] = {"z", "a", "m", "e"};
    for (size_t i = 0; i < 4; i++)
        TH_CHECK(json_key_at(j, i) && strcmp(json_key_at(j, i), order[i]) == 0, "key order %zu", i);
    const Json *a = json_get(j, "a");
    TH_CHECK(a && a->type == JSON_ARRAY && json_len(a) == 3 && json_at(a, 1)->type == JSON_NULL, "array member");
    TH_CHECK(strcmp(json_get(json_at(a, 2), "k")->string, "v") == 0, "nested lookup");
    TH_CHECK(json_get(j, "nope") == NULL && json_get(a, "z") == NULL && json_at(a, 3) == NULL &&
             json_key_at(a, 0) == NULL && json_len(json_get(j, "z")) == 0 && json_get(NULL, "a") == NULL,
             "accessors on absent keys and wrong types");
    TH_CHECK(json_len(json_get(j, "m")) == 0 && json_len(json_get(j, "e")) == 0, "empty containers");
    TH_CHECK(json_get(j, "a")->offset == 14 && json_get(j, "z")->offset == 6, "value offsets");
    TH_CHECK(strcmp(json_type_name(JSON_OBJECT), "object") == 0, "type names");
    json_free(j);
}

/* Each malformed input must fail with IM_EFORMAT and a message with this phrase and offset. */
static void test_errors(void) {
    static const struct { const char *in, *phrase; size_t off; } bad[] = {
        {"{\"a\" 1}", "expected ':'", 5},
        {"[1,]", "trailing comma", 3},
        {"{\"a\":1,}", "trailing comma", 7},
        {"[1 2]", "expected ',' or ']'", 3},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}'", 7},
        {"{1:2}", "expected a string key", 1},
        {"01", "leading zeros", 0},
        {"1.", "digit after '.'", 2},
        {".5", "unexpected '.'", 0},
        {"-", "expected a digit", 1},
        {"+1", "unexpected '+'", 0},
        {"1e", "exponent", 2},
        {"1e999", "out of range", 0},
        {"NaN", "unexpected 'N'", 0},
        {"nul", "expected 'null'", 0},
        {"\"abc", "unterminated string", 0},
        {"\"a\\qb\"", "invalid escape", 2},
        {"\"\\u12G4\"", "\\u escape", 1},
        {"\"\\ud800\"", "unpaired high surrogate", 1},
        {"\"\\ud800\\u0041\"", "unpaired high surrogate", 1},
        {"\"\\udc00\"", "unpaired low surrogate", 1},
        {"\"tab\there\"", "control character", 4},
        {"\"\xC0\x80\"", "invalid UTF-8", 1},
        {"[\"ok\", \"\xED\xA0\x80\"]", "invalid UTF-8", 8},
        {"'single'", "unexpected '''", 0},
        {"/* c */ 1", "unexpected '/'", 0},
        {"true false", "trailing characters", 5},
        {"{\"a\":1}}", "trailing characters", 7},
        {"", "unexpected end of input", 0},
        {"   ", "unexpected end of input", 3},
        {"[", "unexpected end of input", 1},
        {"{\"a\":", "unexpected end of input", 5},
        {"{\"a\":1,\"b\":2,\"a\":3}", "duplicate key 'a'", 13},
        {"[\x01]", "byte 0x01", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Json *j = (Json *)1;
        int rc = json_parse(&j, bad[i].in, strlen(bad[i].in));
        char want[64];
        snprintf(want, sizeof want, "at offset %zu ", bad[i].off);
        TH_CHECK(rc == IM_EFORMAT && j == NULL && strstr(err_msg(), bad[i].phrase) && strstr(err_msg(), want),
                 "bad input %zu '%s': rc %d, msg \"%s\" (want '%s' %s)", i, bad[i].in, rc, err_msg(),
                 bad[i].phrase, want);
    }
    /* Message layout, with line and column for config files. */
    Json *j = NULL;
    const char *t = "{\n  \"a\": 1,\n  \"b\" 2\n}";
    json_parse(&j, t, strlen(t));
    TH_CHECK(strcmp(err_msg(), "json: expected ':' after object key at offset 18 (line 3, column 7)") == 0,
             "message layout: %s", err_msg());
    /* An embedded NUL in the text is a character like any other (and not allowed there). */
    TH_CHECK(json_parse(&j, "[1]\0", 4) == IM_EFORMAT && strstr(err_msg(), "trailing"), "NUL after value");
    /* len limits the text: the parser must not read past it. */
    TH_CHECK(json_parse(&j, "[1]xyz", 3) == IM_OK && j && json_len(j) == 1, "len bounds the input");
    json_free(j);
}

static void test_depth_and_dups(void) {
    char deep[300];
    for (int d = 127; d <= 129; d += 2) {   /* 127 fits under the default 128; 129 does not */
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        Json *j = NULL;
        int rc = json_parse(&j, deep, 2 * (size_t)d);
        if (d < JSON_DEFAULT_MAX_DEPTH) TH_CHECK(rc == IM_OK, "depth %d accepted: %s", d, err_msg());
        else TH_CHECK(rc == IM_EFORMAT && strstr(err_msg(), "nesting deeper than 128") &&
                      strstr(err_msg(), "at offset 128 "), "depth %d rejected: %s", d, err_msg());
        json_free(j);
    }
    JsonParseOpts o = {3, 0, 0};
    Json *j = NULL;
    /* Python's json writes Infinity / NaN (Hugging Face configs): only with allow_nonfinite */
    {
        const char *py = "[0.0, Infinity, -Infinity, NaN]";
        TH_CHECK(json_parse(&j, py, strlen(py)) == IM_EFORMAT, "Infinity is not RFC 8259");
        json_free(j);
        j = NULL;
        JsonParseOpts nf = {.allow_nonfinite = 1};
        TH_CHECK(json_parse_ex(&j, py, strlen(py), &nf) == IM_OK && json_len(j) == 4 &&
                     isinf(json_at(j, 1)->number) && json_at(j, 1)->number > 0 && json_at(j, 2)->number < 0 &&
                     isnan(json_at(j, 3)->number), "allow_nonfinite: %s", err_msg());
        json_free(j);
        j = NULL;
        TH_CHECK(json_parse_ex(&j, "Infinit", 7, &nf) == IM_EFORMAT, "a cut word is still an error");
        json_free(j);
        j = NULL;
    }
    TH_CHECK(json_parse_ex(&j, "[[[1]]]", 7, &o) == IM_OK, "max_depth 3 allows 3");
    json_free(j);
    TH_CHECK(json_parse_ex(&j, "{\"a\":[[1]]}", 11, &o) == IM_OK, "objects count as levels");
    json_free(j);
    TH_CHECK(json_parse_ex(&j, "[[[[1]]]]", 9, &o) == IM_EFORMAT && strstr(err_msg(), "deeper than 3"), "max_depth 3");
    /* Many keys (hashed path) with the duplicate at the end; then the same with dups allowed. */
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    char k[32];
    for (int i = 0; i < 300; i++) { snprintf(k, sizeof k, "key%d", i); json_buf_kv_int(&b, k, i); }
    json_buf_end_obj(&b);
    b.len--;  /* reopen the object and add "key123" again */
    json_buf_append(&b, ",\"key123\":0}", 12);
    int rc = json_parse(&j, b.data, b.len);
    TH_CHECK(rc == IM_EFORMAT && strstr(err_msg(), "duplicate key 'key123'"), "dup among 300 keys: %s", err_msg());
    o.max_depth = 0;
    o.allow_dup_keys = 1;
    rc = json_parse_ex(&j, b.data, b.len, &o);
    TH_CHECK(rc == IM_OK && json_len(j) == 301 && json_get(j, "key123")->integer == 123, "dups allowed: first wins");
    json_free(j);
    /* Keys differing only after an embedded NUL are distinct. */
    const char *nk = "{\"a\\u0000b\":1,\"a\\u0000c\":2}";
    TH_CHECK(json_parse(&j, nk, strlen(nk)) == IM_OK, "NUL-containing keys: %s", err_msg());
    json_free(j);
    json_buf_free(&b);
}

static void test_writer(void) {
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    json_buf_kv_str(&b, "s", "q\"b\\n\n\x01\xC3\xA9");
    json_buf_kv_int(&b, "i", -42);
    json_buf_kv_num(&b, "x", 0.1);
    json_buf_kv_bool(&b, "t", 1);
    json_buf_key(&b, "a");
    json_buf_begin_arr(&b);
    json_buf_null(&b);
    json_buf_num(&b, NAN);
    json_buf_raw(&b, "{\"r\":[]}");
    json_buf_begin_arr(&b);
    json_buf_end_arr(&b);
    json_buf_end_arr(&b);
    json_buf_key(&b, "o");
    json_buf_begin_obj(&b);
    json_buf_end_obj(&b);
    json_buf_end_obj(&b);
    const char *want = "{\"s\":\"q\\\"b\\\\n\\n\\u0001\xC3\xA9\",\"i\":-42,\"x\":0.1,\"t\":true,"
                       "\"a\":[null,null,{\"r\":[]},[]],\"o\":{}}";
    TH_CHECK(!b.failed && strcmp(b.data, want) == 0 && b.len == strlen(want), "compact writer: %s", b.data);
    Json *j = parse_ok(b.data);
    TH_CHECK(j && strcmp(json_get(j, "s")->string, "q\"b\\n\n\x01\xC3\xA9") == 0, "escaped string reads back");
    json_free(j);
    /* Invalid UTF-8 becomes U+FFFD so the output stays valid JSON. */
    json_buf_reset(&b);
    json_buf_str(&b, "a\xFF" "b\xE2\x82");
    TH_CHECK(strcmp(b.data, "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD\"") == 0, "U+FFFD: %s", b.data);
    json_buf_free(&b);
    /* Indented output, as for config dumps. */
    json_buf_init(&b, 2);
    json_buf_begin_obj(&b);
    json_buf_kv_int(&b, "n", 1);
    json_buf_key(&b, "v");
    json_buf_begin_arr(&b);
    json_buf_int(&b, 2);
    json_buf_str(&b, "x");
    json_buf_end_arr(&b);
    json_buf_key(&b, "e");
    json_buf_begin_arr(&b);
    json_buf_end_arr(&b);
    json_buf_end_obj(&b);
    TH_CHECK(strcmp(b.data, "{\n  \"n\": 1,\n  \"v\": [\n    2,\n    \"x\"\n  ],\n  \"e\": []\n}") == 0,
             "indented writer:\n%s", b.data);
    json_buf_free(&b);
}

static void test_numbers_roundtrip(void) {
    const double xs[] = {0.1, 1.0 / 3, 1e-300, 5e-324, DBL_MAX, -DBL_MAX, -0.0, 123456.789, 1e21, 2.5e-8, 3.0,
                         9007199254740993.0, 0.30000000000000004};
    JsonBuf b;
    json_buf_init(&b, 0);
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        json_buf_reset(&b);
        json_buf_num(&b, xs[i]);
        Json *j = NULL;
        int rc = json_parse(&j, b.data, b.len);
        TH_CHECK(rc == IM_OK && memcmp(&j->number, &xs[i], sizeof(double)) == 0, "num %.17g -> %s", xs[i], b.data);
        json_free(j);
    }
    json_buf_reset(&b);
    json_buf_num(&b, 0.1);
    TH_CHECK(strcmp(b.data, "0.1") == 0, "shortest form of 0.1: %s", b.data);
    json_buf_reset(&b);
    json_buf_num(&b, INFINITY);
    json_buf_append(&b, " ", 1);
    json_buf_int(&b, INT64_MIN);
    TH_CHECK(strcmp(b.data, "null -9223372036854775808") == 0, "inf -> null, INT64_MIN: %s", b.data);
    json_buf_free(&b);
}

/* parse -> write -> parse -> write must reach a fixed point equal to the first writing. */
static void test_tree_roundtrip(void) {
    const char *t = "{\"name\":\"\\u00e9t\\u00e9 \\ud83d\\ude00\",\"big\":18446744073709551616,\"n\":-0,"
                    "\"ints\":[0,-1,9007199254740993],\"f\":[1.5,-2e-7,1e300],\"deep\":{\"a\":{\"b\":[[],{}]}},"
                    "\"nul\":\"x\\u0000y\",\"t\":true,\"z\":null}";
    Json *j = parse_ok(t);
    if (!j) return;
    JsonBuf b1, b2;
    json_buf_init(&b1, 0);
    json_buf_init(&b2, 3);
    json_write(&b1, j);
    Json *k = parse_ok(b1.data);
    json_write(&b2, k);
    Json *m = parse_ok(b2.data);
    JsonBuf b3;   /* m was written indented and read back: compact again, it must equal b1 */
    json_buf_init(&b3, 0);
    json_write(&b3, m);
    TH_CHECK(strcmp(b1.data, b3.data) == 0, "tree round trip:\n%s\n%s", b1.data, b3.data);
    json_buf_free(&b3);
    TH_CHECK(m && json_get(m, "ints")->items[2].integer == 9007199254740993LL, "exact int survives");
    TH_CHECK(m && json_get(m, "nul")->str_len == 3, "embedded NUL survives");
    TH_CHECK(m && signbit(json_get(m, "n")->number), "-0 survives");
    json_free(j);
    json_free(k);
    json_free(m);
    json_buf_free(&b1);
    json_buf_free(&b2);
}

/* Random byte edits and truncations of a valid document: never a crash (run under SAN=1);
 * whatever parses must write out and parse again. */
static void test_mutations(void) {
    const char *base = "{\"a\":[1,2.5e3,-0,\"x\\u00e9\\ud83d\\ude00\"],\"b\":{\"c\":null,\"d\":true},\"e\":\"\\\"\"}";
    size_t n = strlen(base);
    char *buf = malloc(n);
    Rng r;
    rng_seed(&r, 7, 1);
    int n_ok = 0, n_bad = 0, consistent = 1;
    static const char alphabet[] = "{}[]\",:\\u0123456789eE+-.tfn \x00\xFF\xC3\xED";
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, base, n);
        size_t len = n;
        int edits = 1 + (int)rng_below(&r, 3);
        for (int e = 0; e < edits; e++) {
            size_t pos = rng_below(&r, (uint32_t)len);
            buf[pos] = rng_below(&r, 2) ? (char)rng_below(&r, 256) : alphabet[rng_below(&r, sizeof alphabet - 1)];
        }
        if (rng_below(&r, 4) == 0) len = rng_below(&r, (uint32_t)len + 1);
        Json *j = NULL;
        if (json_parse(&j, buf, len) == IM_OK) {
            n_ok++;
            JsonBuf b;
            json_buf_init(&b, 0);
            json_write(&b, j);
            Json *k = NULL;
            if (json_parse(&k, b.data, b.len) != IM_OK) consistent = 0;
            json_free(k);
            json_buf_free(&b);
            json_free(j);
        } else {
            n_bad++;
            if (strncmp(err_msg(), "json: ", 6) != 0) consistent = 0;
        }
    }
    TH_CHECK(consistent, "mutated documents: accepted ones re-parse, rejected ones explain");
    TH_CHECK(n_ok > 0 && n_bad > 1000, "mutations: %d accepted, %d rejected", n_ok, n_bad);
    free(buf);
}

int main(void) {
    th_name = "test_json";
    test_scalars();
    test_strings();
    test_tree();
    test_errors();
    test_depth_and_dups();
    test_writer();
    test_numbers_roundtrip();
    test_tree_roundtrip();
    test_mutations();
    return th_done();
}
