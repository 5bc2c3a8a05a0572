/* datafile.h: the compact binary dump of task rows (`implicit data dump` / `data show`).
 *
 * Layout (all integers little-endian; implicit-lm §8.3 suggests a header plus uint16 tokens):
 *   offset  0  8 bytes  magic "IMPLDATA"
 *   offset  8  u32      version (= 1)
 *   offset 12  u32      N      rows
 *   offset 16  u32      T      tokens per row
 *   offset 20  u32      V      vocabulary (every token < V; V <= 65535)
 *   offset 24  u32      flags  DATAFILE_FLAG_* (informational)
 *   offset 28  N*T u16  inputs, row-major
 *   then       N*T u16  targets, row-major; 0xFFFF = not scored (TASK_IGNORE in memory)
 * The file size is exactly 28 + 4*N*T, which the reader checks, so a truncated or foreign file is
 * rejected before any row is read. Writes go to a temp file that is fsync'ed and renamed, so a
 * crash never leaves a half-written file under the final name; a device, FIFO or folder at the
 * path is refused (the output-path rule of io/atomic.h).
 * Out of scope: compression, reading into training (tasks are generated on the fly).
 */
#ifndef IMPLICIT_DATAFILE_H
#define IMPLICIT_DATAFILE_H

#include <stdint.h>
#include <stdio.h>

#include "../io/atomic.h"

#define DATAFILE_MAGIC "IMPLDATA"
#define DATAFILE_VERSION 1u
#define DATAFILE_HEADER_BYTES 28
#define DATAFILE_IGNORE 0xFFFFu
enum { DATAFILE_FLAG_IOS = 1, DATAFILE_FLAG_TRAIN = 2 };

typedef struct {
    uint32_t version, N, T, V, flags;
} DataHeader;

typedef struct {
    FILE *f;           /* = file.f while open */
    DataHeader h;
    AtomicFile file;   /* the temp file and the final name */
} DataWriter;

/* Create the temp file for `path` and write the header (h->version is set to 1). IM_EINVAL on a
 * bad header (zero sizes, V > 65535), IM_EIO when the file cannot be created. */
int datafile_create(DataWriter *w, const char *path, const DataHeader *h);
/* Store rows row0..row0+n-1; ids, targets: (n, T). Tokens must be in 0..V-1 (targets may also be
 * TASK_IGNORE). IM_EINVAL on a bad token or row range, IM_EIO on a write error. */
int datafile_put(DataWriter *w, uint32_t row0, uint32_t n, const int *ids, const int *targets);
/* Flush, fsync and rename onto the final name. On failure the temp file is removed. */
int datafile_commit(DataWriter *w);
/* Close and remove the temp file (after an error). */
void datafile_abort(DataWriter *w);

typedef struct {
    FILE *f;
    DataHeader h;
} DataReader;

/* Open and validate: magic, version, sizes, and the file size against N*T. IM_EIO when it cannot
 * be opened, IM_EFORMAT (with the reason) when truncated, foreign or inconsistent. */
int datafile_open(DataReader *r, const char *path);
/* Read one row; ids, targets: (T). Out-of-range tokens are IM_EFORMAT. */
int datafile_row(DataReader *r, uint32_t row, int *ids, int *targets);
void datafile_close(DataReader *r);

#endif
