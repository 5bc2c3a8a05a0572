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

/* Open `path` for binary reading only if it is a regular file: readers whose format needs the
 * file's size (checkpoints, data and token files) must neither block on a FIFO with no writer nor
 * read a device. The open itself does not block (O_NONBLOCK, cleared once the file is known to be
 * regular). Returns the stream, or NULL with err_msg set to "cannot open 'path': reason" or
 * "'path' is not a regular file"; `what` ("token file", ...) starts the message when not NULL. */
FILE *fs_open_regular(const char *path, const char *what);

#endif
