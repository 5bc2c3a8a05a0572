/* safetensors.c: validating reader and atomic writer (see safetensors.h, docs/formats.md).
 *
 * Reading is split so that the file and memory paths share one validator: the 8-byte length
 * and the header are checked against the total size, the header JSON is parsed strictly (so
 * duplicate keys, i.e. duplicate tensor names, are rejected by the parser), every entry is
 * checked on its own, then the set of ranges (overlaps). Only then is the data buffer read,
 * into a 64-byte aligned block. Every message starts "st: <path>: " and names the tensor.
 * Writing validates all inputs before creating anything, then goes through a temp file.
 * st_map maps the file instead of reading it (the tensors used in place), falling back to st_read.
 * Out of scope: dtypes other than F32/I32/I64, big-endian hosts.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/check.h"
#include "../core/fsutil.h"
#include "atomic.h"
#include "json.h"

#define DATA_ALIGN 64

static const struct { const char *name; size_t size; } DTYPES[] = {
    [ST_F32] = {"F32", 4}, [ST_I32] = {"I32", 4}, [ST_I64] = {"I64", 8},
};
enum { N_DTYPES = sizeof DTYPES / sizeof DTYPES[0] };

/* Names other safetensors writers use: recognised so that the message says "unsupported"
 * (a real file we cannot read yet) rather than "unknown" (a corrupt or foreign file). */
static const char *const OTHER_DTYPES[] = {
    "BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "U64", "F64", "C64",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", NULL,
};

const char *st_dtype_name(int dtype) { return dtype >= 0 && dtype < N_DTYPES ? DTYPES[dtype].name : "?"; }
size_t st_dtype_size(int dtype) { return dtype >= 0 && dtype < N_DTYPES ? DTYPES[dtype].size : 0; }

/* The data is handed out as raw bytes reinterpreted in place: that only works on LE hosts. */
static void check_little_endian(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    CHECK(b == 1, "safetensors: this build assumes a little-endian host");
}

/* "st: <what>: <message>" as an IM_EFORMAT error. */
static int ferr(const char *what, const char *fmt, ...) IM_PRINTF(2, 3);
static int ferr(const char *what, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(IM_EFORMAT, "st: %s: %s", what, msg);
}

/* Decoded byte by byte: the length field is at offset 0 of an arbitrary buffer (unaligned). */
static uint64_t get_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* ---- header validation ----------------------------------------------------------------- */

/* Files under 8 bytes cannot even hold the length field. */
static int check_min_size(const char *what, uint64_t total) {
    if (total >= 8) return IM_OK;
    return ferr(what, "file truncated: %llu bytes, the header length field alone needs 8",
                (unsigned long long)total);
}

/* The length field against the bytes actually present (total >= 8). Checked before any
 * allocation, so a corrupt length can never make us allocate 2^64 bytes. */
static int check_header_len(const char *what, uint64_t n, uint64_t total) {
    if (n == 0) return ferr(what, "header length is 0 (an empty header is not valid)");
    if (n > ST_MAX_HEADER)
        return ferr(what, "header length %llu exceeds the limit of %llu bytes (corrupt or not safetensors)",
                    (unsigned long long)n, ST_MAX_HEADER);
    if (n > total - 8)
        return ferr(what, "header length %llu exceeds the %llu bytes after the length field (file truncated?)",
                    (unsigned long long)n, (unsigned long long)(total - 8));
    return IM_OK;
}

/* __metadata__ -> meta_keys/meta_vals (copies, in header order). C strings are handed out, so
 * an embedded NUL (legal JSON) would silently truncate a value: rejected instead. */
static int parse_meta(StFile *f, const char *what, const Json *m) {
    if (m->type != JSON_OBJECT)
        return ferr(what, "__metadata__ must be an object of strings, got %s", json_type_name(m->type));
    size_t n = m->count;
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_vals = calloc(n ? n : 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) return err_set(IM_ENOMEM, "st: %s: out of memory", what);
    for (size_t i = 0; i < n; i++) {
        const Json *v = &m->items[i];
        char sn[80];
        json_snippet(sn, sizeof sn, v->key, v->key_len);
        if (v->type != JSON_STRING)
            return ferr(what, "__metadata__ value for key '%s' is not a string (got %s)", sn, json_type_name(v->type));
        if (memchr(v->key, 0, v->key_len) || memchr(v->string, 0, v->str_len))
            return ferr(what, "__metadata__ entry '%s' contains a NUL byte", sn);
        char *k = malloc(v->key_len + 1), *s = malloc(v->str_len + 1);
        if (!k || !s) { free(k); free(s); return err_set(IM_ENOMEM, "st: %s: out of memory", what); }
        memcpy(k, v->key, v->key_len + 1);
        memcpy(s, v->string, v->str_len + 1);
        f->meta_keys[f->n_meta] = k;
        f->meta_vals[f->n_meta++] = s;
    }
    return IM_OK;
}

/* dtype: one of ours, a known-but-unsupported name, or garbage. */
static int parse_dtype(StTensor *t, const char *what, const char *sn, const Json *d) {
    if (!d) return ferr(what, "tensor '%s': missing 'dtype'", sn);
    if (d->type != JSON_STRING)
        return ferr(what, "tensor '%s': 'dtype' must be a string, got %s", sn, json_type_name(d->type));
    for (int k = 0; k < N_DTYPES; k++)
        if (strcmp(d->string, DTYPES[k].name) == 0 && d->str_len == strlen(DTYPES[k].name)) {
            t->dtype = k;
            return IM_OK;
        }
    char dn[40];
    json_snippet(dn, sizeof dn, d->string, d->str_len);
    for (int k = 0; OTHER_DTYPES[k]; k++)
        if (strcmp(d->string, OTHER_DTYPES[k]) == 0 && d->str_len == strlen(OTHER_DTYPES[k]))
            return ferr(what, "unsupported dtype '%s' for tensor '%s' (this build reads F32, I32, I64)", dn, sn);
    return ferr(what, "tensor '%s': unknown dtype '%s'", sn, dn);
}

/* shape: an array of at most 8 integers >= 0; 1.0 or 1e0 are not integers (is_int). */
static int parse_shape(StTensor *t, const char *what, const char *sn, const Json *s) {
    if (!s) return ferr(what, "tensor '%s': missing 'shape'", sn);
    if (s->type != JSON_ARRAY)
        return ferr(what, "tensor '%s': 'shape' must be an array, got %s", sn, json_type_name(s->type));
    if (s->count > ST_MAX_DIMS)
        return ferr(what, "tensor '%s': shape has %zu dims, more than the %d supported", sn, s->count, ST_MAX_DIMS);
    t->ndim = (int)s->count;
    for (int i = 0; i < t->ndim; i++) {
        const Json *d = &s->items[i];
        if (d->type != JSON_NUMBER || !d->is_int)
            return ferr(what, "tensor '%s': shape[%d] is not an integer", sn, i);
        if (d->integer < 0)
            return ferr(what, "tensor '%s': shape[%d] = %lld is negative", sn, i, (long long)d->integer);
        t->shape[i] = d->integer;
    }
    return IM_OK;
}

/* "[2, 3]" for messages. */
static const char *shape_str(char *buf, size_t cap, const StTensor *t) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* data_offsets against the buffer, then the byte count against shape x dtype. The range check
 * comes first so that a file cut inside its data says "truncated" rather than "mismatch". */
static int parse_offsets(StTensor *t, const char *what, const char *sn, const Json *o, size_t data_size) {
    if (!o) return ferr(what, "tensor '%s': missing 'data_offsets'", sn);
    if (o->type != JSON_ARRAY || o->count != 2)
        return ferr(what, "tensor '%s': 'data_offsets' must be an array [begin, end]", sn);
    const Json *b = &o->items[0], *e = &o->items[1];
    if (b->type != JSON_NUMBER || !b->is_int || b->integer < 0 || e->type != JSON_NUMBER || !e->is_int ||
        e->integer < 0)
        return ferr(what, "tensor '%s': 'data_offsets' must hold two non-negative integers", sn);
    long long lb = (long long)b->integer, le = (long long)e->integer;
    if (lb > le) return ferr(what, "tensor '%s': data_offsets [%lld, %lld] has begin > end", sn, lb, le);
    if ((uint64_t)le > (uint64_t)data_size)
        return ferr(what, "tensor '%s': data_offsets [%lld, %lld] end beyond the data buffer of %zu bytes "
                    "(file truncated?)", sn, lb, le, data_size);
    /* numel * size, guarding overflow; a zero dim makes the tensor empty whatever the rest. */
    size_t es = DTYPES[t->dtype].size, n = 1;
    int zero = 0;
    for (int i = 0; i < t->ndim; i++) zero |= t->shape[i] == 0;
    for (int i = 0; i < t->ndim && !zero; i++) {
        if ((uint64_t)t->shape[i] > SIZE_MAX / es / n)
            return ferr(what, "tensor '%s': shape overflows the size of memory", sn);
        n *= (size_t)t->shape[i];
    }
    size_t need = zero ? 0 : n * es;
    if (need != (size_t)(le - lb)) {
        char sh[200];
        return ferr(what, "tensor '%s': size mismatch: shape %s of %s needs %zu bytes but data_offsets "
                    "[%lld, %lld] span %lld", sn, shape_str(sh, sizeof sh, t), DTYPES[t->dtype].name,
                    need, lb, le, le - lb);
    }
    t->offset = (size_t)lb;
    t->nbytes = need;
    return IM_OK;
}

/* One "<name>": {...} member; fills t only when every field is valid. Unknown extra fields
 * are ignored, as upstream does. */
static int parse_entry(StTensor *t, const char *what, const Json *m, size_t data_size) {
    char sn[80];
    json_snippet(sn, sizeof sn, m->key, m->key_len);
    if (m->key_len > ST_MAX_NAME)
        return ferr(what, "tensor name '%s' is %zu bytes, longer than the limit of %d", sn, m->key_len, ST_MAX_NAME);
    if (memchr(m->key, 0, m->key_len)) return ferr(what, "tensor name '%s' contains a NUL byte", sn);
    if (m->type != JSON_OBJECT)
        return ferr(what, "tensor '%s': entry must be an object, got %s", sn, json_type_name(m->type));
    int rc = parse_dtype(t, what, sn, json_get(m, "dtype"));
    if (!rc) rc = parse_shape(t, what, sn, json_get(m, "shape"));
    if (!rc) rc = parse_offsets(t, what, sn, json_get(m, "data_offsets"), data_size);
    if (!rc) memcpy(t->name, m->key, m->key_len + 1);
    return rc;
}

/* qsort comparators over StTensor pointers (qsort has no context argument). */
static int cmp_offset(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

/* Ranges sorted by offset must not overlap (empty tensors occupy nothing); gaps are counted.
 * Also builds the by-name index for st_find. */
static int check_layout(StFile *f, const char *what, size_t data_size) {
    int n = f->n_tensors;
    const StTensor **idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    f->by_name_ = malloc((size_t)(n ? n : 1) * sizeof *f->by_name_);
    if (!idx || !f->by_name_) { free(idx); return err_set(IM_ENOMEM, "st: %s: out of memory", what); }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (f->tensors[i].nbytes) idx[m++] = &f->tensors[i];
    qsort(idx, (size_t)m, sizeof *idx, cmp_offset);
    size_t covered = 0;
    for (int i = 0; i < m; i++) {
        if (i > 0 && idx[i]->offset < idx[i - 1]->offset + idx[i - 1]->nbytes) {
            int rc = ferr(what, "tensors '%s' [%zu, %zu) and '%s' [%zu, %zu) overlap", idx[i - 1]->name,
                          idx[i - 1]->offset, idx[i - 1]->offset + idx[i - 1]->nbytes, idx[i]->name,
                          idx[i]->offset, idx[i]->offset + idx[i]->nbytes);
            free(idx);
            return rc;
        }
        covered += idx[i]->nbytes;
    }
    f->unused_bytes = data_size - covered;
    for (int i = 0; i < n; i++) idx[i] = &f->tensors[i];
    qsort(idx, (size_t)n, sizeof *idx, cmp_name);
    for (int i = 0; i < n; i++) f->by_name_[i] = (int)(idx[i] - f->tensors);
    free(idx);
    return IM_OK;
}

/* Parse and validate the header; fills everything but the data. */
static int parse_header(StFile *f, const char *what, const char *hdr, size_t hlen, size_t data_size) {
    Json *root = NULL;
    int rc = json_parse(&root, hdr, hlen);
    if (rc == IM_ENOMEM) return err_wrap(rc, "st: %s: header", what);
    if (rc) return err_wrap(IM_EFORMAT, "st: %s: header is not valid JSON (or has a duplicate key)", what);
    if (root->type != JSON_OBJECT) {
        rc = ferr(what, "header is not a JSON object (got %s)", json_type_name(root->type));
        json_free(root);
        return rc;
    }
    /* The parser rejected duplicate keys, so names are unique and __metadata__ appears once. */
    const Json *meta = json_get(root, "__metadata__");
    size_t nt = root->count - (meta != NULL);
    if (nt > (size_t)INT_MAX) { json_free(root); return ferr(what, "too many tensors (%zu)", nt); }
    f->tensors = calloc(nt ? nt : 1, sizeof *f->tensors);
    if (!f->tensors) { json_free(root); return err_set(IM_ENOMEM, "st: %s: out of memory", what); }
    if (meta) rc = parse_meta(f, what, meta);
    for (size_t i = 0; i < root->count && !rc; i++) {
        if (&root->items[i] == meta) continue;
        rc = parse_entry(&f->tensors[f->n_tensors], what, &root->items[i], data_size);
        if (!rc) f->n_tensors++;
    }
    json_free(root);
    if (!rc) rc = check_layout(f, what, data_size);
    return rc;
}

/* 64-byte aligned (as arenas are) so tensors can be used in place; aligned_alloc wants a
 * size that is a multiple of the alignment, and a non-NULL block even for no data. */
static int alloc_data(StFile *f, const char *what, size_t n) {
    f->data = aligned_alloc(DATA_ALIGN, round_up(n ? n : 1, DATA_ALIGN));
    if (!f->data) return err_set(IM_ENOMEM, "st: %s: cannot allocate %zu bytes of tensor data", what, n);
    f->data_size = n;
    return IM_OK;
}

/* Other writers need not align offsets to the element size; then repack each tensor at an
 * aligned offset so st_data can be used as float* / int64_t* directly. Gaps are dropped.
 * Empty tensors get offset 0. */
static int realign(StFile *f, const char *what) {
    int need = 0;
    size_t total = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        StTensor *t = &f->tensors[i];
        if (t->nbytes == 0) t->offset = 0;  /* nothing to point at: keep the pointer aligned */
        need |= t->offset % DTYPES[t->dtype].size != 0;
        total += round_up(t->nbytes, 8);
    }
    if (!need) return IM_OK;
    unsigned char *old = f->data;
    size_t old_size = f->data_size, o = 0, used = 0;
    int rc = alloc_data(f, what, total);
    if (rc) { f->data = old; f->data_size = old_size; return rc; }
    for (int i = 0; i < f->n_tensors; i++) {
        StTensor *t = &f->tensors[i];
        if (t->nbytes) memcpy(f->data + o, old + t->offset, t->nbytes);
        t->offset = o;
        o += round_up(t->nbytes, 8);
        used += t->nbytes;
    }
    f->unused_bytes = total - used;
    free(old);
    return IM_OK;
}

/* Same order of checks as st_read; the data is copied so that buf may be freed at once. */
int st_read_mem(StFile *f, const void *buf, size_t len) {
    check_little_endian();
    CHECK(f && (buf || len == 0), "st_read_mem: NULL file or buffer");
    memset(f, 0, sizeof *f);
    const char *what = "<memory>";
    const unsigned char *b = buf;
    int rc = check_min_size(what, len);
    if (!rc) rc = check_header_len(what, get_u64le(b), len);
    if (rc) return rc;
    size_t hlen = (size_t)get_u64le(b), dsize = len - 8 - hlen;
    rc = parse_header(f, what, (const char *)b + 8, hlen, dsize);
    if (!rc) rc = alloc_data(f, what, dsize);
    if (!rc) {
        if (dsize) memcpy(f->data, b + 8 + hlen, dsize);
        rc = realign(f, what);
    }
    if (rc) st_free(f);
    return rc;
}

/* fread exactly n bytes, telling a short file from an I/O error. */
static int read_exact(FILE *fp, void *dst, size_t n, const char *path, const char *part) {
    if (n == 0 || fread(dst, 1, n, fp) == n) return IM_OK;
    if (ferror(fp)) return err_set(IM_EIO, "st: %s: read error in the %s: %s", path, part, strerror(errno));
    return ferr(path, "file truncated while reading the %s (it changed while being read?)", part);
}

/* Sizes come from fstat, so the length field is checked against the real file size before
 * reading, and the data (the big part) is read only after the header has been validated. */
static int read_file(StFile *f, FILE *fp, const char *path) {
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) return err_set(IM_EIO, "st: cannot stat '%s': %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return err_set(IM_EIO, "st: '%s' is not a regular file", path);
    uint64_t total = (uint64_t)sb.st_size;
    unsigned char lenb[8];
    int rc = check_min_size(path, total);
    if (rc || (rc = read_exact(fp, lenb, 8, path, "header length"))) return rc;
    uint64_t hlen = get_u64le(lenb);
    if ((rc = check_header_len(path, hlen, total))) return rc;
    if (total - 8 - hlen > (uint64_t)SIZE_MAX) return err_set(IM_ENOMEM, "st: %s: file too large", path);
    size_t dsize = (size_t)(total - 8 - hlen);
    char *hdr = malloc((size_t)hlen);
    if (!hdr) return err_set(IM_ENOMEM, "st: %s: out of memory for the header", path);
    rc = read_exact(fp, hdr, (size_t)hlen, path, "header");
    if (!rc) rc = parse_header(f, path, hdr, (size_t)hlen, dsize);
    free(hdr);
    if (!rc) rc = alloc_data(f, path, dsize);
    if (!rc) rc = read_exact(fp, f->data, dsize, path, "data buffer");
    if (!rc) rc = realign(f, path);
    return rc;
}

int st_read(StFile *f, const char *path) {
    check_little_endian();
    CHECK(f && path, "st_read: NULL file or path");
    memset(f, 0, sizeof *f);
    FILE *fp = fs_open_regular(path, NULL); /* never blocks on a FIFO */
    if (!fp) return err_wrap(IM_EIO, "st");
    int rc = read_file(f, fp, path);
    fclose(fp);
    if (rc) st_free(f);
    return rc;
}

/* The mapped reader: the checks of read_file on the mapping. 1 = use st_read instead (no mapping
 * to be had, or the tensors need repacking), with f left empty. */
static int map_file(StFile *f, FILE *fp, const char *path, int *fallback) {
    struct stat sb;
    *fallback = 1;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 16) return IM_OK;
    uint64_t total = (uint64_t)sb.st_size;
    if (total > (uint64_t)SIZE_MAX) return IM_OK;
    void *map = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(fp), 0);
    if (map == MAP_FAILED) return IM_OK;
    const unsigned char *b = map;
    uint64_t hlen = get_u64le(b);
    int rc = check_header_len(path, hlen, total);
    size_t dsize = rc ? 0 : (size_t)(total - 8 - hlen);
    if (!rc) rc = parse_header(f, path, (const char *)b + 8, (size_t)hlen, dsize);
    int aligned = (8 + hlen) % 8 == 0; /* then every tensor is aligned to its element size */
    for (int i = 0; !rc && i < f->n_tensors; i++) {
        StTensor *t = &f->tensors[i];
        if (t->nbytes == 0) t->offset = 0;
        aligned &= t->offset % DTYPES[t->dtype].size == 0;
    }
    if (rc || !aligned) {
        munmap(map, (size_t)total);
        if (!rc) *fallback = 1; /* st_read repacks */
        else *fallback = 0;
        return rc;
    }
    f->map = map;
    f->map_len = (size_t)total;
    f->data = (unsigned char *)map + 8 + hlen;
    f->data_size = dsize;
    *fallback = 0;
    return IM_OK;
}

int st_map(StFile *f, const char *path) {
    check_little_endian();
    CHECK(f && path, "st_map: NULL file or path");
    memset(f, 0, sizeof *f);
    FILE *fp = fs_open_regular(path, NULL);
    if (!fp) return err_wrap(IM_EIO, "st");
    int fallback = 0, rc = map_file(f, fp, path, &fallback);
    fclose(fp);
    if (rc) { st_free(f); return rc; }
    if (!fallback) return IM_OK;
    st_free(f);
    return st_read(f, path);
}

/* Also frees a partially filled StFile (the readers call it on failure). */
void st_free(StFile *f) {
    if (!f) return;
    if (f->map) {
        munmap(f->map, f->map_len);
        f->data = NULL;
    }
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_keys[i]); free(f->meta_vals[i]); }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->tensors);
    free(f->data);
    free(f->by_name_);
    memset(f, 0, sizeof *f);
}

/* ---- lookups --------------------------------------------------------------------------- */

const StTensor *st_find(const StFile *f, const char *name) {
    int lo = 0, hi = f->n_tensors - 1;  /* binary search over the by-name index */
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const StTensor *t = &f->tensors[f->by_name_[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    return NULL;
}

const void *st_data(const StFile *f, const StTensor *t) {
    CHECK(t >= f->tensors && t < f->tensors + f->n_tensors, "st_data: tensor not from this file");
    return f->data + t->offset;
}

/* Linear: metadata holds tens of keys and is read once at load. */
const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

/* Cannot overflow for a tensor from the reader: it checked numel * size against the file. */
size_t st_numel(const StTensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

/* ---- writer ---------------------------------------------------------------------------- */

/* Writer argument errors: IM_EINVAL, "st: cannot write '<path>': <why>". */
static int einval(const char *path, const char *fmt, ...) IM_PRINTF(2, 3);
static int einval(const char *path, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(IM_EINVAL, "st: cannot write '%s': %s", path, msg);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorts the n strings v in place; returns a duplicate among them or NULL. O(n log n). */
static const char *find_dup(const char **v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    for (int i = 1; i < n; i++)
        if (strcmp(v[i - 1], v[i]) == 0) return v[i];
    return NULL;
}

/* Everything the reader would reject must be refused here, before a file exists: a writer
 * that produced unreadable checkpoints would only be found out at load time. */
static int validate_tensor(const char *path, const StWriteTensor *t, size_t *nbytes) {
    CHECK(t->name, "st_write: tensor without a name");
    size_t len = strlen(t->name);
    if (len > ST_MAX_NAME) return einval(path, "tensor name '%.40s...' is longer than %d bytes", t->name, ST_MAX_NAME);
    if (!json_utf8_valid(t->name, len)) return einval(path, "tensor name '%.40s' is not valid UTF-8", t->name);
    if (strcmp(t->name, "__metadata__") == 0) return einval(path, "'__metadata__' is reserved, not a tensor name");
    if (t->dtype < 0 || t->dtype >= N_DTYPES) return einval(path, "tensor '%s': bad dtype %d", t->name, t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) return einval(path, "tensor '%s': ndim %d not in 0..8", t->name, t->ndim);
    size_t n = DTYPES[t->dtype].size;
    int zero = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return einval(path, "tensor '%s': shape[%d] is negative", t->name, i);
        zero |= t->shape[i] == 0;
    }
    for (int i = 0; i < t->ndim && !zero; i++) {
        if ((uint64_t)t->shape[i] > SIZE_MAX / n) return einval(path, "tensor '%s': shape overflows", t->name);
        n *= (size_t)t->shape[i];
    }
    *nbytes = zero ? 0 : n;
    if (*nbytes && !t->data) return einval(path, "tensor '%s': data is NULL", t->name);
    return IM_OK;
}

/* meta_kv = {k, v, k, v, ..., NULL}: counts pairs; keys must be unique (the reader's JSON
 * parser rejects duplicate keys) and both sides UTF-8. */
static int validate_meta(const char *path, const char *const *kv, int *n_pairs) {
    int n = 0;
    while (kv && kv[2 * n]) {
        if (!kv[2 * n + 1]) return einval(path, "metadata key '%.60s' has no value", kv[2 * n]);
        for (int j = 0; j < 2; j++)
            if (!json_utf8_valid(kv[2 * n + j], strlen(kv[2 * n + j])))
                return einval(path, "metadata entry '%.60s' is not valid UTF-8", kv[2 * n]);
        n++;
    }
    const char **keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    if (!keys) return err_set(IM_ENOMEM, "st: out of memory");
    for (int i = 0; i < n; i++) keys[i] = kv[2 * i];
    const char *dup = find_dup(keys, n);
    int rc = dup ? einval(path, "duplicate metadata key '%.60s'", dup) : IM_OK;
    free(keys);
    *n_pairs = n;
    return rc;
}

/* The header JSON, padded with spaces so that N (align 8) or 8 + N (align 64) is a multiple of
 * align. */
static int build_header(JsonBuf *b, const char *path, const StWriteTensor *ts, int n,
                        const size_t *nbytes, const char *const *kv, int n_meta, int align) {
    json_buf_begin_obj(b);
    if (n_meta > 0) {
        json_buf_key(b, "__metadata__");
        json_buf_begin_obj(b);
        for (int i = 0; i < n_meta; i++) json_buf_kv_str(b, kv[2 * i], kv[2 * i + 1]);
        json_buf_end_obj(b);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_buf_key(b, ts[i].name);
        json_buf_begin_obj(b);
        json_buf_kv_str(b, "dtype", DTYPES[ts[i].dtype].name);
        json_buf_key(b, "shape");
        json_buf_begin_arr(b);
        for (int d = 0; d < ts[i].ndim; d++) json_buf_int(b, ts[i].shape[d]);
        json_buf_end_arr(b);
        json_buf_key(b, "data_offsets");
        json_buf_begin_arr(b);
        json_buf_int(b, (int64_t)off);
        json_buf_int(b, (int64_t)(off + nbytes[i]));
        json_buf_end_arr(b);
        json_buf_end_obj(b);
        off += nbytes[i];
    }
    json_buf_end_obj(b);
    while ((align == 64 ? 8 + b->len : b->len) % (size_t)align) json_buf_append(b, " ", 1);
    if (b->failed) return err_set(IM_ENOMEM, "st: %s: out of memory building the header", path);
    if (b->len > ST_MAX_HEADER) return einval(path, "header of %zu bytes exceeds the limit", b->len);
    return IM_OK;
}

typedef struct {
    const JsonBuf *hdr;
    const StWriteTensor *ts;
    int n;
    const size_t *nbytes;
} Payload;

/* The file's bytes: length, header, tensors back to back. Write errors may surface at fwrite or
 * only at the flush, which atomic_write checks. */
static int emit_payload(FILE *fp, void *ctx) {
    const Payload *p = ctx;
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)p->hdr->len >> (8 * i));
    int ok = fwrite(lenb, 1, 8, fp) == 8 && fwrite(p->hdr->data, 1, p->hdr->len, fp) == p->hdr->len;
    for (int i = 0; i < p->n && ok; i++)
        ok = p->nbytes[i] == 0 || fwrite(p->ts[i].data, 1, p->nbytes[i], fp) == p->nbytes[i];
    return ok ? IM_OK : err_set(IM_EIO, "st: write failed: %s", strerror(errno));
}

/* Validate -> build the header in memory -> temp file -> rename. Each step runs only if the
 * previous one succeeded (rc stays 0), and all cleanup happens at the single exit. */
int st_write(const char *path, const StWriteTensor *ts, int n, const char *const *meta_kv) {
    return st_write_aligned(path, ts, n, meta_kv, 8);
}

int st_write_aligned(const char *path, const StWriteTensor *ts, int n, const char *const *meta_kv, int align) {
    check_little_endian();
    CHECK(align == 8 || align == 64, "st_write: alignment %d (8 or 64)", align);
    CHECK(path && n >= 0 && (ts || n == 0), "st_write: NULL path/tensors or negative count");
    size_t *nbytes = malloc((size_t)(n ? n : 1) * sizeof *nbytes);
    if (!nbytes) return err_set(IM_ENOMEM, "st: out of memory");
    int rc = IM_OK, n_meta = 0;
    for (int i = 0; i < n && !rc; i++) rc = validate_tensor(path, &ts[i], &nbytes[i]);
    const char **names = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *names);
    if (!rc && !names) rc = err_set(IM_ENOMEM, "st: out of memory");
    for (int i = 0; i < n && !rc; i++) names[i] = ts[i].name;
    const char *dup = rc ? NULL : find_dup(names, n);
    if (dup) rc = einval(path, "duplicate tensor name '%s'", dup);
    free(names);
    if (!rc) rc = validate_meta(path, meta_kv, &n_meta);
    JsonBuf hdr;
    json_buf_init(&hdr, 0);
    if (!rc) rc = build_header(&hdr, path, ts, n, nbytes, meta_kv, n_meta, align);
    if (!rc) {
        /* temp file in the same folder, fsync, rename, fsync the folder: the old file at path,
         * if any, is untouched unless the whole new one made it */
        Payload pl = {&hdr, ts, n, nbytes};
        rc = atomic_write(path, emit_payload, &pl);
        if (rc) rc = err_wrap(rc, "st: cannot write '%s'", path);
    }
    json_buf_free(&hdr);
    free(nbytes);
    return rc;
}
