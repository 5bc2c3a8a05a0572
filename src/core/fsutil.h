/* fsutil.h: file-system helpers shared by every writer of durable files (checkpoints, data
 * dumps): after a rename, the folder entry itself must reach the disk. */
#ifndef IMPLICIT_FSUTIL_H
#define IMPLICIT_FSUTIL_H

/* fsync the folder that holds `path` (best effort: errors are ignored). */
void fs_sync_dir(const char *path);

#endif
