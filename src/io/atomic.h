/* atomic.h: the output-path rule that every writer in implicit follows, kept in this one place.
 *
 * Outputs come in two kinds:
 *   files    are read back later (checkpoints, training state, config.json, log rewrites, token
 *            files, data dumps, tokenizer files), so they must be whole: atomic_write, AtomicFile.
 *   reports  are read by people and scripts, often through a pipe (eval --json / --csv,
 *            generate --json, mc --json): report_write.
 * What happens depends on what the path names when the write starts:
 *   nothing, a regular file   replaced atomically: "<path>.tmp.<pid>" in the same folder, fflush +
 *                             fsync, rename over path, fsync the folder. Readers see the old file
 *                             or the new one, never a part; on failure the temp file is removed
 *                             and the old file is untouched. A symbolic link to a regular file
 *                             keeps the link: its target is replaced.
 *   "-"                       reports: standard output. Files: refused (to write a file called
 *                             "-", write ./-).
 *   /dev/stdout, /dev/stderr, reports: written through that open descriptor of the process, after
 *   /dev/fd/N, /proc/self/fd/N  what it already printed there. Files: refused.
 *   char device, FIFO, socket reports: opened and written in place (/dev/null, a named pipe,
 *                             which waits for its reader); never renamed over, never unlinked.
 *                             Files: refused, since a file must be complete and the device must
 *                             never be replaced.
 *   block device              refused: writing to it would overwrite a disk.
 *   folder                    refused.
 * Refusals return IM_EIO with a message that names the path and what it is; nothing at the path
 * is touched. Out of scope: two writers of one file (the last rename wins; a training run's
 * folder is locked instead, train/rundir.h). */
#ifndef IMPLICIT_ATOMIC_H
#define IMPLICIT_ATOMIC_H

#include <stddef.h>
#include <stdio.h>

/* emit writes the content to f and returns 0, or a status (its message set) to abort. */
int atomic_write(const char *path, int (*emit)(FILE *f, void *ctx), void *ctx);
/* Convenience: write len bytes. */
int atomic_write_bytes(const char *path, const void *data, size_t len);

/* The same for a report: "-" and character devices, FIFOs and sockets are written in place. */
int report_write(const char *path, int (*emit)(FILE *f, void *ctx), void *ctx);
int report_write_bytes(const char *path, const void *data, size_t len);
/* 1 when path is "-" (a report to standard output). */
int report_is_stdout(const char *path);
/* IM_OK when a report could be written to path (the rule above; NULL ok), else its refusal:
 * for commands to check their report paths before a long computation. Writes nothing. */
int report_check(const char *path);
/* A command that will write a report to "-" calls this before it prints anything: from then on
 * its ordinary output (tables, generated text) goes to stderr, and standard output carries the
 * reports alone, so `--json - | jq` reads JSON only. */
void report_reserve_stdout(void);

/* A file written in several steps (a writer that seeks): the temp file of the rule above.
 * atomic_open applies the rule for files and creates f; atomic_commit syncs and renames it into
 * place; on any failure, or on atomic_abort, the temp file is removed. */
typedef struct {
    FILE *f;           /* the temp file; NULL once committed or aborted */
    char path[4096];   /* where it goes (a link's target when path was a link) */
    char tmp[4200];    /* "<path>.tmp.<pid>" */
} AtomicFile;
int atomic_open(AtomicFile *a, const char *path);
int atomic_commit(AtomicFile *a);
void atomic_abort(AtomicFile *a);

/* mkdir -p; IM_EIO with the path and reason on failure. */
int make_dirs(const char *path);
/* IM_OK when make_dirs(path) would succeed and files could then be created in path: every
 * component that exists is a folder and the deepest one that exists is writable. Writes nothing:
 * for commands to check an output folder before they claim or write anything else. */
int dirs_check(const char *path);

#endif
