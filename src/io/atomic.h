/* atomic.h: write a whole file so that readers see the old file or the new one, never a part:
 * write "<path>.tmp.<pid>" in the same folder, fflush + fsync, rename over path, fsync the folder.
 * On any failure the temp file is removed and an existing file at path is untouched. */
#ifndef IMPLICIT_ATOMIC_H
#define IMPLICIT_ATOMIC_H

#include <stddef.h>
#include <stdio.h>

/* emit writes the content to f and returns 0, or a status (its message set) to abort. */
int atomic_write(const char *path, int (*emit)(FILE *f, void *ctx), void *ctx);
/* Convenience: write len bytes. */
int atomic_write_bytes(const char *path, const void *data, size_t len);
/* mkdir -p; IM_EIO with the path and reason on failure. */
int make_dirs(const char *path);

#endif
