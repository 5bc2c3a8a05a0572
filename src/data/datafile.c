/* datafile.c: writer and reader of the task dump format (see datafile.h).
 *
 * Integers are encoded byte by byte (never by fwrite of a struct) so the format does not depend
 * on the host's endianness or padding. The writer seeks to each row's two places, so rows can be
 * generated in batches in one pass even though all inputs precede all targets.
 */
#include "datafile.h"

#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "../core/check.h"
#include "../core/fsutil.h"
#include "../io/atomic.h"
#include "task.h"

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Byte offset of row `row` of the inputs (which = 0) or the targets (which = 1). */
static off_t row_offset(const DataHeader *h, uint32_t row, int which) {
    uint64_t cells = (uint64_t)h->N * h->T * (uint64_t)which + (uint64_t)row * h->T;
    return (off_t)(DATAFILE_HEADER_BYTES + 2 * cells);
}

/* Sizes a reader can trust: 0xFFFF is reserved for "not scored", so V stops at 65535, and the
 * 2^40-token cap keeps every offset far inside off_t. */
static int check_header(const DataHeader *h) {
    if (h->N < 1 || h->T < 1) return err_set(IM_EINVAL, "data file needs N >= 1 rows and T >= 1 tokens (got N %u, T %u)", h->N, h->T);
    if (h->V < 1 || h->V > 65535) return err_set(IM_EINVAL, "vocabulary %u does not fit uint16 tokens (1..65535)", h->V);
    if ((uint64_t)h->N * h->T > ((uint64_t)1 << 40)) return err_set(IM_EINVAL, "N*T = %llu tokens is too large",
                                                                   (unsigned long long)h->N * h->T);
    return IM_OK;
}

int datafile_create(DataWriter *w, const char *path, const DataHeader *h) {
    memset(w, 0, sizeof *w);
    w->h = *h;
    w->h.version = DATAFILE_VERSION;
    int rc = check_header(&w->h);
    if (rc) return rc;
    /* the temp file of the output-path rule (io/atomic.h): never a device or FIFO, since rows are
     * written out of order (seeks) */
    if ((rc = atomic_open(&w->file, path))) return rc;
    w->f = w->file.f;
    unsigned char hd[DATAFILE_HEADER_BYTES];
    memcpy(hd, DATAFILE_MAGIC, 8);
    put_u32(hd + 8, w->h.version);
    put_u32(hd + 12, w->h.N);
    put_u32(hd + 16, w->h.T);
    put_u32(hd + 20, w->h.V);
    put_u32(hd + 24, w->h.flags);
    if (fwrite(hd, 1, sizeof hd, w->f) != sizeof hd) {
        datafile_abort(w);
        return err_set(IM_EIO, "cannot write '%s'", path);
    }
    return IM_OK;
}

/* Encode n values into u16 little-endian; targets map TASK_IGNORE to 0xFFFF. */
static int encode(unsigned char *out, const int *v, size_t n, uint32_t V, int is_target) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        if (is_target && v[i] == TASK_IGNORE) x = DATAFILE_IGNORE;
        else if (v[i] >= 0 && (uint32_t)v[i] < V) x = (uint32_t)v[i];
        else return err_set(IM_EINVAL, "%s token %d outside the vocabulary 0..%u", is_target ? "target" : "input", v[i], V - 1);
        out[2 * i] = (unsigned char)x;
        out[2 * i + 1] = (unsigned char)(x >> 8);
    }
    return IM_OK;
}

int datafile_put(DataWriter *w, uint32_t row0, uint32_t n, const int *ids, const int *targets) {
    CHECK(w->f, "datafile_put on a closed writer");
    /* both halves of a row are encoded in one buffer per call: inputs, then targets */
    if ((uint64_t)row0 + n > w->h.N) return err_set(IM_EINVAL, "rows %u..%u outside 0..%u", row0, row0 + n - 1, w->h.N - 1);
    size_t cells = (size_t)n * w->h.T;
    unsigned char *buf = xmalloc(2 * cells);
    int rc = IM_OK;
    for (int which = 0; which < 2 && !rc; which++) {
        rc = encode(buf, which ? targets : ids, cells, w->h.V, which);
        if (rc) break;
        if (fseeko(w->f, row_offset(&w->h, row0, which), SEEK_SET) || fwrite(buf, 1, 2 * cells, w->f) != 2 * cells)
            rc = err_set(IM_EIO, "cannot write '%s'", w->file.tmp);
    }
    free(buf);
    return rc;
}

int datafile_commit(DataWriter *w) {
    CHECK(w->f, "datafile_commit on a closed writer");
    /* the file must reach its full size even if the last rows were never put */
    int ok = !fseeko(w->f, 0, SEEK_END) && ftello(w->f) == row_offset(&w->h, w->h.N, 1);
    if (!ok) { datafile_abort(w); return err_set(IM_EINVAL, "not every row of '%s' was written", w->file.path); }
    /* data on disk before the rename publishes it: a crash leaves the old file or the new one */
    w->f = NULL;
    int rc = atomic_commit(&w->file);
    return rc ? err_wrap(rc, "cannot write '%s'", w->file.path) : IM_OK;
}

void datafile_abort(DataWriter *w) {
    w->f = NULL;
    atomic_abort(&w->file);
}

int datafile_open(DataReader *r, const char *path) {
    memset(r, 0, sizeof *r);
    FILE *f = fs_open_regular(path, NULL);
    if (!f) return IM_EIO;
    unsigned char hd[DATAFILE_HEADER_BYTES];
    /* the size is checked against the header before any row is trusted */
    off_t size = -1;
    if (!fseeko(f, 0, SEEK_END)) size = ftello(f);
    rewind(f);
    int rc = IM_OK;
    if (size < 8 || fread(hd, 1, 8, f) != 8 || memcmp(hd, DATAFILE_MAGIC, 8)) {
        rc = err_set(IM_EFORMAT, "'%s' is not an implicit data file (no \"%s\" magic)", path, DATAFILE_MAGIC);
    } else if (size < DATAFILE_HEADER_BYTES || fread(hd + 8, 1, DATAFILE_HEADER_BYTES - 8, f) != DATAFILE_HEADER_BYTES - 8) {
        rc = err_set(IM_EFORMAT, "'%s' is truncated inside its %d-byte header", path, DATAFILE_HEADER_BYTES);
    } else {
        DataHeader h = {get_u32(hd + 8), get_u32(hd + 12), get_u32(hd + 16), get_u32(hd + 20), get_u32(hd + 24)};
        off_t want = row_offset(&h, h.N, 1);
        if (h.version != DATAFILE_VERSION)
            rc = err_set(IM_EFORMAT, "'%s' has format version %u; this build reads version %u", path, h.version, DATAFILE_VERSION);
        else if (check_header(&h))
            rc = err_wrap(IM_EFORMAT, "'%s' has a bad header", path);
        else if (size != want)
            rc = err_set(IM_EFORMAT, "'%s' is %s: %lld bytes, but its header (N %u, T %u) needs %lld", path,
                         size < want ? "truncated" : "longer than its header says", (long long)size, h.N, h.T, (long long)want);
        r->h = h;
    }
    if (rc) { fclose(f); memset(r, 0, sizeof *r); return rc; }
    r->f = f;
    return IM_OK;
}

/* Inverse of encode; a token outside the header's vocabulary means a damaged file. */
static int decode(int *out, const unsigned char *in, size_t n, uint32_t V, int is_target) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)in[2 * i] | (uint32_t)in[2 * i + 1] << 8;
        if (is_target && x == DATAFILE_IGNORE) out[i] = TASK_IGNORE;
        else if (x < V) out[i] = (int)x;
        else return err_set(IM_EFORMAT, "%s token %u outside the vocabulary 0..%u", is_target ? "target" : "input", x, V - 1);
    }
    return IM_OK;
}

int datafile_row(DataReader *r, uint32_t row, int *ids, int *targets) {
    CHECK(r->f, "datafile_row on a closed reader");
    if (row >= r->h.N) return err_set(IM_EINVAL, "row %u outside 0..%u", row, r->h.N - 1);
    unsigned char *buf = xmalloc(2 * (size_t)r->h.T);
    int rc = IM_OK;
    for (int which = 0; which < 2 && !rc; which++) {
        if (fseeko(r->f, row_offset(&r->h, row, which), SEEK_SET) || fread(buf, 2, r->h.T, r->f) != r->h.T)
            rc = err_set(IM_EIO, "cannot read row %u", row);
        else
            rc = decode(which ? targets : ids, buf, r->h.T, r->h.V, which);
    }
    free(buf);
    return rc;
}

void datafile_close(DataReader *r) {
    if (r->f) fclose(r->f);
    memset(r, 0, sizeof *r);
}
