/* tbevents.c: see tbevents.h. */
#include "tbevents.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/check.h"
#include "atomic.h"

uint32_t tb_crc32c(const void *data, size_t n) {
    static uint32_t table[256];
    if (!table[1])   /* reflected polynomial 0x82f63b78; concurrent first calls write the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void le(unsigned char *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
}

/* Protobuf pieces into buf (the caller sized it): varints, keys, fixed-width fields. */
static size_t varint(unsigned char *b, uint64_t v) {
    size_t n = 0;
    do {
        b[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static int write_record(TbWriter *w, const unsigned char *data, size_t n) {
    unsigned char head[12], tail[4];
    le(head, n, 8);
    le(head + 8, masked(tb_crc32c(head, 8)), 4);
    le(tail, masked(tb_crc32c(data, n)), 4);
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n || fwrite(tail, 1, 4, w->f) != 4 ||
        fflush(w->f) != 0)
        return err_set(IM_EIO, "cannot write %s: %s", w->path, strerror(errno));
    return IM_OK;
}

/* An Event with wall_time and step; `extra` (n bytes) are its remaining fields, already encoded. */
static int write_event(TbWriter *w, double wall_time, int64_t step, const unsigned char *extra, size_t n) {
    unsigned char ev[600];
    size_t k = 0;
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    ev[k++] = 0x09;   /* field 1, fixed64 */
    le(ev + k, bits, 8), k += 8;
    ev[k++] = 0x10;   /* field 2, varint */
    k += varint(ev + k, (uint64_t)step);
    if (k + n > sizeof ev) return err_set(IM_EINVAL, "TensorBoard event too large");
    memcpy(ev + k, extra, n);
    return write_record(w, ev, k + n);
}

int tb_open(TbWriter *w, const char *dir) {
    memset(w, 0, sizeof *w);
    int rc = make_dirs(dir);
    if (rc) return rc;
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)time(NULL), host,
             (long)getpid());
    if (!(w->f = fopen(w->path, "wb"))) return err_set(IM_EIO, "cannot create %s: %s", w->path, strerror(errno));
    static const char version[] = "brain.Event:2";
    unsigned char extra[32];
    size_t n = 0;
    extra[n++] = 0x1a;   /* field 3, length-delimited */
    extra[n++] = (unsigned char)(sizeof version - 1);
    memcpy(extra + n, version, sizeof version - 1), n += sizeof version - 1;
    rc = write_event(w, (double)time(NULL), 0, extra, n);
    if (rc) tb_close(w);
    return rc;
}

int tb_scalar(TbWriter *w, const char *tag, int64_t step, double wall_time, double value) {
    if (!w->f) return IM_OK;
    size_t tl = strlen(tag);
    if (tl > 256) tl = 256;
    unsigned char val[300], sum[320];
    size_t v = 0, s = 0;
    val[v++] = 0x0a;   /* Value.tag: field 1, length-delimited */
    v += varint(val + v, tl);
    memcpy(val + v, tag, tl), v += tl;
    float f = (float)value;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    val[v++] = 0x15;   /* Value.simple_value: field 2, fixed32 */
    le(val + v, fb, 4), v += 4;
    sum[s++] = 0x2a;   /* Event.summary: field 5, holding Summary.value (field 1) */
    s += varint(sum + s, v + 1 + (v > 127 ? 2 : 1));
    sum[s++] = 0x0a;
    s += varint(sum + s, v);
    memcpy(sum + s, val, v), s += v;
    return write_event(w, wall_time, step, sum, s);
}

void tb_close(TbWriter *w) {
    if (w && w->f) fclose(w->f);
    if (w) w->f = NULL;
}
