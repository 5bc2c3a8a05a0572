/* safetensors.h: read and write the safetensors format (our checkpoint container).
 *
 * Layout (docs/formats.md, STYLE §8.10): an 8-byte little-endian u64 N, then N bytes of JSON
 *   {"__metadata__": {str: str, ...},                                  (optional)
 *    "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
 * then the data buffer; offsets are relative to its start. Tensor names follow spec §14.
 * This build reads and writes F32, I32 and I64; other safetensors dtypes (F16, BF16, ...) are
 * recognised by name and rejected with a clear message. The reader validates everything before
 * handing out a pointer (file size, header, every entry, ranges, overlaps, duplicates) and
 * returns IM_EFORMAT / IM_EIO / IM_ENOMEM with err_msg() naming the file and tensor. The writer
 * is atomic: temp file, fsync, rename, fsync of the directory. Hosts must be little-endian
 * (CHECKed). Out of scope: mmap, big-endian hosts, streaming writes, the checkpoint semantics
 * (format/version metadata, parameter tables: src/io/ckpt.c).
 */
#ifndef IMPLICIT_SAFETENSORS_H
#define IMPLICIT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum { ST_F32, ST_I32, ST_I64 };

#define ST_MAX_DIMS 8
#define ST_MAX_NAME 255                 /* bytes, excluding the NUL */
#define ST_MAX_HEADER 100000000ull      /* header bytes accepted and written (as upstream) */

typedef struct {
    char name[ST_MAX_NAME + 1];
    int dtype;                  /* ST_F32, ST_I32 or ST_I64 */
    int ndim;                   /* 0 (scalar) .. ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* (ndim) */
    size_t offset;              /* into StFile.data; a multiple of the element size */
    size_t nbytes;              /* numel * element size */
} StTensor;

typedef struct {
    StTensor *tensors;   /* (n_tensors) in header order */
    int n_tensors;
    char **meta_keys;    /* (n_meta) NUL-terminated, header order */
    char **meta_vals;    /* (n_meta) */
    int n_meta;
    unsigned char *data; /* (data_size) 64-byte aligned copy of the data buffer */
    size_t data_size;
    size_t unused_bytes; /* data bytes no tensor covers (gaps are allowed, only reported) */
    int *by_name_;       /* private: (n_tensors) indices sorted by name, for st_find */
    void *map;           /* st_map: the whole file mapped (data points into it), else NULL */
    size_t map_len;
} StFile;

/* Read and validate a whole file. f is overwritten (st_free a previous one first); on failure
 * it is left empty, safe to st_free. Returns IM_OK, IM_EIO, IM_EFORMAT or IM_ENOMEM. */
int st_read(StFile *f, const char *path);
/* st_read, but the file is mapped (copy-on-write: the file is never written) and the tensors are
 * used in place, so the data costs no copy and no memory of its own beyond the page cache. data
 * is then 8-byte aligned (64-byte for checkpoints this project writes, ckpt_save). Falls back to
 * st_read where a mapping cannot be had or the tensors would need repacking (a data start or an
 * offset not a multiple of 8 or of the element size). The same checks and errors as st_read. A
 * file shortened by another process while it is mapped raises SIGBUS on the next access, as with
 * any mapped file. */
int st_map(StFile *f, const char *path);
/* The same from memory (tests, fuzzing); buf is copied, the caller keeps it. */
int st_read_mem(StFile *f, const void *buf, size_t len);
void st_free(StFile *f);

const StTensor *st_find(const StFile *f, const char *name);    /* NULL if absent */
const void *st_data(const StFile *f, const StTensor *t);      /* aligned raw little-endian data */
const char *st_meta(const StFile *f, const char *key);        /* NULL if absent */
size_t st_numel(const StTensor *t);                           /* 1 for a scalar, 0 if a dim is 0 */
const char *st_dtype_name(int dtype);                         /* "F32", "I32", "I64" */
size_t st_dtype_size(int dtype);                              /* 4, 4, 8 */

typedef struct {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];  /* (ndim) */
    const void *data;            /* (numel) elements of dtype; NULL allowed when numel is 0 */
} StWriteTensor;

/* Write n tensors in the given order, contiguous, after a header padded with spaces to a
 * multiple of 8 bytes. meta_kv = {"k1", "v1", "k2", "v2", ..., NULL}, or NULL for none.
 * Atomic: writes "<path>.tmp.<pid>", fsyncs, renames over path and fsyncs the directory; on
 * failure the temp file is removed and an existing file at path is untouched. Returns IM_OK,
 * IM_EINVAL (bad names, dtypes, shapes, metadata: nothing is written), IM_EIO or IM_ENOMEM. */
int st_write(const char *path, const StWriteTensor *ts, int n, const char *const *meta_kv);
/* st_write with the header padded so that the data starts at a multiple of align bytes in the file
 * (8: as st_write; 64: 8 + header length a multiple of 64, so that a mapped file's tensors are
 * aligned as our buffers are; our checkpoints, ckpt_save). */
int st_write_aligned(const char *path, const StWriteTensor *ts, int n, const char *const *meta_kv, int align);

#endif
