/* test_safetensors.c: the safetensors reader/writer (src/io/safetensors.h, docs/formats.md).
 *
 * Round trips (F32/I32/I64, 0-d scalars, empty tensors, metadata, many names), the exact byte
 * layout of a written file, atomic writes (a missing directory, a path that is a directory, a
 * write that fails half way through RLIMIT_FSIZE while an old file must survive), argument
 * validation, more than twenty kinds of broken file each rejected with a specific message,
 * gaps and misaligned offsets from foreign writers, and a mutation loop over a valid file that
 * must never crash (run under SAN=1). Files go to a fresh mkdtemp directory, removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/io/safetensors.h"
#include "th.h"

static char g_dir[64];

static const char *in_dir(char *buf, const char *name) {
    snprintf(buf, 256, "%s/%s", g_dir, name);
    return buf;
}

static void write_raw(const char *path, const void *buf, size_t n) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(buf, 1, n, fp) == n, "test: cannot write %s", path);
    fclose(fp);
}

/* No "<x>.tmp.<pid>" may be left in the test directory after any write, failed or not. */
static int count_temp_files(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* A file image: u64 length of hdr (exactly, no padding), hdr, then `data_len` bytes 0..255. */
static unsigned char *mk(const char *hdr, size_t data_len, size_t *len) {
    size_t h = strlen(hdr);
    *len = 8 + h + data_len;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (unsigned char)i;
    return b;
}

static void expect_bad_mem(const void *buf, size_t len, const char *word, const char *label) {
    StFile f;
    int rc = st_read_mem(&f, buf, len);
    TH_CHECK(rc == IM_EFORMAT && strstr(err_msg(), word) && strncmp(err_msg(), "st: <memory>: ", 14) == 0,
             "%s: rc %d, message \"%s\" lacks \"%s\"", label, rc, err_msg(), word);
    TH_CHECK(f.n_tensors == 0 && f.tensors == NULL && f.data == NULL && f.n_meta == 0, "%s: f left empty", label);
    st_free(&f);
    /* the same bytes as a file: the mapped reader refuses them as the copying one does */
    char path[256], read_msg[1024];
    in_dir(path, "bad_map.safetensors");
    FILE *fp = fopen(path, "wb");
    TH_CHECK(fp && (len == 0 || fwrite(buf, 1, len, fp) == len) && fclose(fp) == 0, "%s: write %s", label, path);
    int rc_read = st_read(&f, path);
    snprintf(read_msg, sizeof read_msg, "%s", err_msg());
    int rc_map = st_map(&f, path);
    TH_CHECK(rc_map == rc_read && rc_map != IM_OK && !strcmp(read_msg, err_msg()),
             "%s: st_map rc %d \"%s\", st_read rc %d \"%s\"", label, rc_map, err_msg(), rc_read, read_msg);
    TH_CHECK(f.n_tensors == 0 && f.tensors == NULL && f.data == NULL && f.map == NULL, "%s: st_map left f empty", label);
    st_free(&f);
}

static void expect_bad_hdr(const char *hdr, size_t data_len, const char *word, const char *label) {
    size_t len;
    unsigned char *b = mk(hdr, data_len, &len);
    expect_bad_mem(b, len, word, label);
    free(b);
}

/* ---- round trips ------------------------------------------------------------------------ */

static void test_roundtrip(void) {
    char path[256];
    in_dir(path, "rt.safetensors");
    float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    int32_t idx[4] = {0, -1, 2147483647, -2147483647 - 1};
    int64_t big[2] = {(int64_t)1 << 40, -5};
    float scalar = 3.5f;
    StWriteTensor ts[] = {
        {"backbone.layers.0.mixer.in_proj.weight", ST_F32, 2, {2, 3}, w},
        {"idx", ST_I32, 1, {4}, idx},
        {"big", ST_I64, 3, {2, 1, 1}, big},
        {"backbone.layers.0.mixer.D", ST_F32, 0, {0}, &scalar},
        {"empty", ST_I32, 2, {0, 5}, NULL},
    };
    const char *meta[] = {"format", "implicit.ckpt", "format_version", "1", "config", "{\"d_model\":64}", NULL};
    int rc = st_write(path, ts, 5, meta);
    TH_CHECK(rc == IM_OK, "st_write: %s", err_msg());
    StFile f;
    rc = st_read(&f, path);
    TH_CHECK(rc == IM_OK, "st_read: %s", err_msg());
    if (rc) return;
    TH_CHECK(f.n_tensors == 5 && f.n_meta == 3 && f.data_size == 24 + 16 + 16 + 4 && f.unused_bytes == 0,
             "counts: %d tensors, %d meta, %zu data bytes", f.n_tensors, f.n_meta, f.data_size);
    const size_t numel[] = {6, 4, 2, 1, 0};
    for (int i = 0; i < 5 && i < f.n_tensors; i++) {
        const StTensor *t = &f.tensors[i];
        int same_shape = t->ndim == ts[i].ndim;
        for (int d = 0; d < t->ndim && same_shape; d++) same_shape = t->shape[d] == ts[i].shape[d];
        TH_CHECK(strcmp(t->name, ts[i].name) == 0 && t->dtype == ts[i].dtype && same_shape &&
                 st_numel(t) == numel[i] && t->nbytes == numel[i] * st_dtype_size(t->dtype),
                 "tensor %d (%s) header fields", i, ts[i].name);
        TH_CHECK(st_find(&f, ts[i].name) == t, "st_find(%s)", ts[i].name);
        const void *p = st_data(&f, t);
        TH_CHECK(p && (uintptr_t)p % st_dtype_size(t->dtype) == 0 && (!t->nbytes || memcmp(p, ts[i].data, t->nbytes) == 0),
                 "tensor %d data and alignment", i);
    }
    TH_CHECK(strcmp(st_meta(&f, "format"), "implicit.ckpt") == 0 && strcmp(st_meta(&f, "config"), "{\"d_model\":64}") == 0 &&
             strcmp(f.meta_keys[1], "format_version") == 0 && strcmp(f.meta_vals[1], "1") == 0, "metadata values, order");
    TH_CHECK(st_find(&f, "nope") == NULL && st_meta(&f, "nope") == NULL && st_find(&f, "") == NULL, "absent lookups");
    /* The same bytes through the memory path give the same file. */
    size_t n;
    unsigned char *bytes = (unsigned char *)th_read_file(path, &n);
    StFile g;
    rc = st_read_mem(&g, bytes, n);
    TH_CHECK(rc == IM_OK && g.n_tensors == 5 && g.data_size == f.data_size && memcmp(g.data, f.data, f.data_size) == 0 &&
             memcmp(g.tensors, f.tensors, 5 * sizeof *f.tensors) == 0, "st_read_mem == st_read");
    st_free(&g);
    free(bytes);
    st_free(&f);
    TH_CHECK(f.tensors == NULL && f.n_tensors == 0, "st_free zeroes");
    st_free(&f);  /* twice is harmless */
    /* Overwrite with no metadata and no tensors at all. */
    rc = st_write(path, NULL, 0, NULL);
    TH_CHECK(rc == IM_OK && st_read(&f, path) == IM_OK && f.n_tensors == 0 && f.n_meta == 0 && f.data_size == 0,
             "empty file round trip: %s", err_msg());
    st_free(&f);
    TH_CHECK(count_temp_files() == 0, "no temp files after successful writes");
}

/* Many names, written in a scrambled order: header order is kept, st_find (binary search) works. */
static void test_many(void) {
    char path[256], names[64][32];
    in_dir(path, "many.safetensors");
    StWriteTensor ts[64];
    int32_t vals[64];
    for (int i = 0; i < 64; i++) {
        int k = (i * 37) % 64;
        snprintf(names[i], sizeof names[i], "backbone.layers.%d.norm.weight", k);
        vals[i] = k;
        ts[i] = (StWriteTensor){names[i], ST_I32, 1, {1}, &vals[i]};
    }
    int rc = st_write(path, ts, 64, NULL);
    StFile f;
    if (!rc) rc = st_read(&f, path);
    TH_CHECK(rc == IM_OK, "64 tensors: %s", err_msg());
    if (rc) return;
    int ok = 1;
    for (int i = 0; i < 64; i++) {
        const StTensor *t = st_find(&f, names[i]);
        ok &= t == &f.tensors[i] && *(const int32_t *)st_data(&f, t) == vals[i] && t->offset == (size_t)i * 4;
    }
    TH_CHECK(ok, "64 tensors: order, lookup, contiguous offsets");
    st_free(&f);
}

/* The exact bytes: length, JSON text, space padding to 8, contiguous little-endian data. */
static void test_layout(void) {
    char path[256];
    in_dir(path, "layout.safetensors");
    float a[2] = {1.0f, 2.0f};
    int64_t s = -2;
    StWriteTensor ts[] = {{"a", ST_F32, 1, {2}, a}, {"s", ST_I64, 0, {0}, &s}};
    const char *meta[] = {"format", "implicit.ckpt", NULL};
    TH_CHECK(st_write(path, ts, 2, meta) == IM_OK, "write: %s", err_msg());
    const char *want = "{\"__metadata__\":{\"format\":\"implicit.ckpt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                       "\"data_offsets\":[0,8]},\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}";
    size_t wl = strlen(want), padded = (wl + 7) / 8 * 8, n = 0;
    unsigned char *b = (unsigned char *)th_read_file(path, &n);
    TH_CHECK(b && n == 8 + padded + 16, "file size %zu, want %zu", n, 8 + padded + 16);
    if (!b || n != 8 + padded + 16) { free(b); return; }
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | b[i];
    TH_CHECK(h == padded && h % 8 == 0, "length field %llu", (unsigned long long)h);
    TH_CHECK(memcmp(b + 8, want, wl) == 0, "header text: %.*s", (int)wl, (const char *)b + 8);
    int spaces = 1;
    for (size_t i = wl; i < padded; i++) spaces &= b[8 + i] == ' ';
    TH_CHECK(spaces && padded > wl, "padding with %zu spaces", padded - wl);
    const unsigned char le[16] = {0, 0, 0x80, 0x3F, 0, 0, 0, 0x40, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    TH_CHECK(memcmp(b + 8 + padded, le, 16) == 0, "data bytes: f32 1, 2 and i64 -2 little-endian");
    free(b);
}

/* ---- atomic writes ---------------------------------------------------------------------- */

static void test_atomic(void) {
    char path[256], dpath[256], tmp[300];
    float big[4096] = {0};
    StWriteTensor t_small = {"w", ST_F32, 1, {2}, big}, t_big = {"w", ST_F32, 1, {4096}, big};
    /* A missing directory: clean failure naming the path and the OS reason. */
    in_dir(path, "missing/dir/x.safetensors");
    int rc = st_write(path, &t_small, 1, NULL);
    TH_CHECK(rc == IM_EIO && strstr(err_msg(), "missing/dir/x.safetensors.tmp.") && strstr(err_msg(), strerror(ENOENT)),
             "missing dir: rc %d, %s", rc, err_msg());
    /* The path is a directory: refused before anything is written, no temp is left. */
    in_dir(dpath, "adir");
    TH_CHECK(mkdir(dpath, 0755) == 0, "mkdir");
    rc = st_write(dpath, &t_small, 1, NULL);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dpath, (long)getpid());
    struct stat sb;
    TH_CHECK(rc == IM_EIO && strstr(err_msg(), "is a folder") && strstr(err_msg(), "adir"), "path is a dir: %s", err_msg());
    TH_CHECK(stat(tmp, &sb) != 0 && errno == ENOENT && stat(dpath, &sb) == 0 && S_ISDIR(sb.st_mode),
             "no temp left, directory untouched");
    /* A write that fails part way (file size limit; works as root too) keeps the old file. */
    in_dir(path, "keep.safetensors");
    big[0] = 42.0f;
    TH_CHECK(st_write(path, &t_small, 1, NULL) == IM_OK, "old file: %s", err_msg());
    size_t n_old, n_now;
    unsigned char *old = (unsigned char *)th_read_file(path, &n_old), *now;
    struct rlimit saved, lim;
    TH_CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0, "getrlimit");
    lim = saved;
    lim.rlim_cur = 4096;  /* the big tensor alone is 16 KiB */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    TH_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    rc = st_write(path, &t_big, 1, NULL);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, prev);
    TH_CHECK(rc == IM_EIO && strstr(err_msg(), "write failed") && strstr(err_msg(), strerror(EFBIG)),
             "failed overwrite: rc %d, %s", rc, err_msg());
    now = (unsigned char *)th_read_file(path, &n_now);
    TH_CHECK(now && n_now == n_old && memcmp(now, old, n_old) == 0, "old file kept byte for byte");
    TH_CHECK(count_temp_files() == 0, "no temp files after failures");
    free(now);
    /* Without the limit the same write replaces the file. */
    StFile f;
    rc = st_write(path, &t_big, 1, NULL);
    if (!rc) rc = st_read(&f, path);
    TH_CHECK(rc == IM_OK && f.n_tensors == 1 && f.tensors[0].shape[0] == 4096 &&
             ((const float *)st_data(&f, &f.tensors[0]))[0] == 42.0f, "overwrite: %s", err_msg());
    if (!rc) st_free(&f);
    free(old);
}

static void test_write_args(void) {
    char path[256], longname[300];
    in_dir(path, "args.safetensors");
    memset(longname, 'n', 256);
    longname[256] = 0;
    float x[2] = {0};
    const struct { StWriteTensor t[2]; int n; const char *word; } cases[] = {
        {{{longname, ST_F32, 1, {1}, x}}, 1, "longer than 255"},
        {{{"a", ST_F32, 1, {1}, x}, {"a", ST_F32, 1, {1}, x}}, 2, "duplicate tensor name 'a'"},
        {{{"a", 7, 1, {1}, x}}, 1, "bad dtype"},
        {{{"a", ST_F32, 9, {1}, x}}, 1, "ndim 9"},
        {{{"a", ST_F32, 2, {1, -2}, x}}, 1, "negative"},
        {{{"a", ST_F32, 1, {2}, NULL}}, 1, "NULL"},
        {{{"__metadata__", ST_F32, 1, {1}, x}}, 1, "reserved"},
        {{{"bad\xFFutf8", ST_F32, 1, {1}, x}}, 1, "UTF-8"},
        {{{"a", ST_I64, 2, {INT64_MAX, 4}, x}}, 1, "overflows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = st_write(path, cases[i].t, cases[i].n, NULL);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), cases[i].word) && strstr(err_msg(), path),
                 "write args %zu: rc %d, %s", i, rc, err_msg());
    }
    StWriteTensor ok = {"a", ST_F32, 1, {1}, x};
    const char *odd[] = {"k", NULL};
    const char *dup[] = {"k", "1", "j", "2", "k", "3", NULL};
    TH_CHECK(st_write(path, &ok, 1, odd) == IM_EINVAL && strstr(err_msg(), "no value"), "meta without value");
    TH_CHECK(st_write(path, &ok, 1, dup) == IM_EINVAL && strstr(err_msg(), "duplicate metadata key 'k'"), "meta dup");
    struct stat sb;
    TH_CHECK(stat(path, &sb) != 0, "nothing written for invalid arguments");
}

/* ---- broken files ----------------------------------------------------------------------- */

#define T1 "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"

/* Truncation and a bad length field, from a valid file. */
static void test_broken_length(void) {
    char path[256];
    in_dir(path, "valid.safetensors");
    float v[3] = {1, 2, 3};
    StWriteTensor ts[] = {{"a", ST_F32, 1, {3}, v}};
    CHECK(st_write(path, ts, 1, NULL) == IM_OK, "%s", err_msg());
    size_t n, hlen;
    unsigned char *good = (unsigned char *)th_read_file(path, &n);
    hlen = good[0] | (size_t)good[1] << 8;
    /* Truncation inside the length, the header and the data. */
    const size_t cuts[] = {0, 3, 7, 8, 8 + hlen / 2, 8 + hlen, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "cut at %zu of %zu", cuts[i], n);
        expect_bad_mem(good, cuts[i], "truncated", label);
    }
    /* The length field: 0, over the 100 MB limit, larger than the file. */
    unsigned char *b = malloc(n);
    memcpy(b, good, n);
    memset(b, 0, 8);
    expect_bad_mem(b, n, "header length is 0", "length 0");
    b[3] = 0x10;  /* 0x10000000 = 268 MB */
    expect_bad_mem(b, n, "exceeds the limit", "length > 100 MB");
    b[3] = 0;
    b[1] = 0x10;  /* 4096: within the limit, beyond this file */
    expect_bad_mem(b, n, "truncated", "length > file");
    free(b);
    free(good);
}

/* Header contents, each with the word its message must contain. */
static void test_broken_header(void) {
    static const struct { const char *hdr; size_t data; const char *word; } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",}}", 4, "not valid JSON"},
        {"{\"a\":{" T1 "}", 4, "not valid JSON"},
        {"[1,2]    ", 0, "not a JSON object"},
        {"\"str\"", 0, "not a JSON object"},
        {"{\"a\":5}", 4, "entry must be an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing 'data_offsets'"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing 'dtype'"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing 'shape'"},
        {"{\"a\":{\"dtype\":\"X9\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype 'X9'"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         "unsupported dtype 'BF16' for tensor 'a' (this build reads F32, I32, I64)"},
        {"{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'dtype' must be a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4, "'shape' must be an array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,400]}}", 4, "beyond the data buffer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "begin > end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "non-negative integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 4, "non-negative integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "size mismatch"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "not an integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "more than the 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 0, "overflows"},
        {"{\"a\":{" T1 "},\"a\":{" T1 "}}", 4, "duplicate key 'a'"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "value for key 'k' is not a string (got number)"},
        {"{\"__metadata__\":[\"k\"]}", 0, "__metadata__ must be an object"},
        {"{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, "NUL byte"},
        {"{\"a\\u0000b\":{" T1 "}}", 4, "NUL byte"},
        {"{\"a\":{" T1 "}}\xFF", 4, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "broken header %zu", i);
        expect_bad_hdr(bad[i].hdr, bad[i].data, bad[i].word, label);
    }
    /* A name of 256 bytes is one too many. */
    char hdr[512], name[300];
    memset(name, 'x', 256);
    name[256] = 0;
    snprintf(hdr, sizeof hdr, "{\"%s\":{" T1 "}}", name);
    expect_bad_hdr(hdr, 4, "longer than the limit of 255", "name too long");
    name[255] = 0;
    snprintf(hdr, sizeof hdr, "{\"%s\":{" T1 "}}", name);
    size_t len;
    unsigned char *ok = mk(hdr, 4, &len);
    StFile f;
    TH_CHECK(st_read_mem(&f, ok, len) == IM_OK && strlen(f.tensors[0].name) == 255, "255-byte name: %s", err_msg());
    st_free(&f);
    free(ok);
}

/* Errors through the file path name the file. */
static void test_files(void) {
    char path[256];
    StFile f;
    in_dir(path, "absent.safetensors");
    TH_CHECK(st_read(&f, path) == IM_EIO && strstr(err_msg(), path) && strstr(err_msg(), strerror(ENOENT)),
             "missing file: %s", err_msg());
    TH_CHECK(st_read(&f, g_dir) == IM_EIO && strstr(err_msg(), "not a regular file"), "directory: %s", err_msg());
    in_dir(path, "short.safetensors");
    write_raw(path, "\x10\0\0", 3);
    TH_CHECK(st_read(&f, path) == IM_EFORMAT && strstr(err_msg(), "truncated") && strstr(err_msg(), path),
             "3-byte file: %s", err_msg());
    size_t len;
    unsigned char *b = mk("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, &len);
    write_raw(path, b, len);
    free(b);
    TH_CHECK(st_read(&f, path) == IM_EFORMAT && strstr(err_msg(), "unsupported dtype 'F16'") && strstr(err_msg(), path),
             "F16 file: %s", err_msg());
    b = mk("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, &len);
    write_raw(path, b, len);
    free(b);
    TH_CHECK(st_read(&f, path) == IM_EFORMAT && strstr(err_msg(), "truncated?"), "data cut on disk: %s", err_msg());
}

/* Foreign writers: gaps, unpadded headers, misaligned offsets, empty tensors anywhere. */
static void test_foreign(void) {
    size_t len;
    StFile f;
    unsigned char *b = mk("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                          "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[2,2]},"
                          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  \n", 16, &len);
    int rc = st_read_mem(&f, b, len);
    TH_CHECK(rc == IM_OK && f.n_tensors == 3 && f.unused_bytes == 8 && strcmp(f.tensors[0].name, "b") == 0 &&
             st_find(&f, "b")->offset == 8, "gaps, empty tensor, header order: %s", err_msg());
    st_free(&f);
    free(b);
    /* I64 at byte offset 4 (header length 61, odd): repacked so that the pointer is aligned. */
    b = mk("{\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"l\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[4,12]}}", 12, &len);
    rc = st_read_mem(&f, b, len);
    const StTensor *l = rc ? NULL : st_find(&f, "l");
    int64_t want;
    memcpy(&want, b + len - 8, 8);
    TH_CHECK(l && (uintptr_t)st_data(&f, l) % 8 == 0 && *(const int64_t *)st_data(&f, l) == want &&
             *(const int32_t *)st_data(&f, st_find(&f, "i")) == 0x03020100, "misaligned I64 repacked: %s", err_msg());
    st_free(&f);
    free(b);
}

/* ---- mutations -------------------------------------------------------------------------- */

static void check_invariants(const StFile *f, int *ok) {
    for (int i = 0; i < f->n_tensors; i++) {
        const StTensor *t = &f->tensors[i];
        *ok &= t->offset + t->nbytes <= f->data_size && t->nbytes == st_numel(t) * st_dtype_size(t->dtype) &&
               st_find(f, t->name) == t && (uintptr_t)st_data(f, t) % st_dtype_size(t->dtype) == 0 &&
               t->ndim >= 0 && t->ndim <= ST_MAX_DIMS && strlen(t->name) <= ST_MAX_NAME;
    }
}

static void test_mutations(void) {
    char path[256];
    in_dir(path, "fuzz.safetensors");
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t s = 9;
    int32_t e = 0;
    StWriteTensor ts[] = {{"w", ST_F32, 2, {2, 3}, w}, {"s", ST_I64, 0, {0}, &s}, {"e", ST_I32, 1, {0}, &e}};
    const char *meta[] = {"format", "implicit.ckpt", "model", "fprnn", NULL};
    CHECK(st_write(path, ts, 3, meta) == IM_OK, "%s", err_msg());
    size_t n;
    unsigned char *good = (unsigned char *)th_read_file(path, &n), *b = malloc(n);
    size_t hend = 8 + (good[0] | (size_t)good[1] << 8);
    Rng r;
    rng_seed(&r, 2024, 3);
    int n_ok = 0, n_bad = 0, inv = 1, msgs = 1;
    for (int it = 0; it < 600; it++) {
        memcpy(b, good, n);
        size_t len = n;
        int mode = (int)rng_below(&r, 4);
        if (mode <= 1) {  /* flip 1..4 bytes, mostly inside the length and header */
            int k = 1 + (int)rng_below(&r, 4);
            for (int j = 0; j < k; j++) {
                size_t pos = rng_below(&r, 4) ? rng_below(&r, (uint32_t)hend) : rng_below(&r, (uint32_t)n);
                b[pos] ^= (unsigned char)(1u << rng_below(&r, 8));
            }
        } else if (mode == 2) {  /* replace a header byte by a JSON-significant one */
            static const char sig[] = "{}[]\",:0123456789-. e\\";
            b[8 + rng_below(&r, (uint32_t)(hend - 8))] = (unsigned char)sig[rng_below(&r, sizeof sig - 1)];
        } else {
            len = rng_below(&r, (uint32_t)n + 1);
        }
        StFile f;
        if (st_read_mem(&f, b, len) == IM_OK) { n_ok++; check_invariants(&f, &inv); st_free(&f); }
        else { n_bad++; msgs &= strncmp(err_msg(), "st: <memory>: ", 14) == 0; }
    }
    TH_CHECK(inv, "accepted mutants satisfy the StFile invariants");
    TH_CHECK(msgs, "rejected mutants explain themselves");
    TH_CHECK(n_ok > 10 && n_bad > 300, "mutants: %d accepted, %d rejected", n_ok, n_bad);
    free(b);
    free(good);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    char p[512];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (remove(p) != 0) remove_dir(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

int main(void) {
    th_name = "test_safetensors";
    snprintf(g_dir, sizeof g_dir, "/tmp/test_st_XXXXXX");
    CHECK(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
    test_roundtrip();
    test_many();
    test_layout();
    test_atomic();
    test_write_args();
    test_broken_length();
    test_broken_header();
    test_files();
    test_foreign();
    test_mutations();
    remove_dir(g_dir);
    return th_done();
}
