/* fsutil.h: file-system helpers: the folder sync every writer of durable files (checkpoints, data
 * dumps) needs after a rename, and the one read-a-whole-stream loop the readers of small text files
 * (configs, tokenizers, CLI inputs) share. */
#ifndef IMPLICIT_FSUTIL_H
#define IMPLICIT_FSUTIL_H

#include <stdio.h>

/* fsync the folder that holds `path` (best effort: errors are ignored). */
void fs_sync_dir(const char *path);

/* The rest of stream f into a malloc'd buffer with a NUL after the last byte: *buf, *n bytes (not
 * counting the NUL). max > 0 caps the size. Does not close f. Returns IM_OK, or IM_ENOMEM / IM_EIO /
 * IM_EFORMAT (more than max bytes) with err_msg set and *buf untouched; callers add the file name
 * with err_wrap. */
int fs_read_all(FILE *f, size_t max, char **buf, size_t *n);

#endif
