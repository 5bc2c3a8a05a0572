/* atomic.c: the output-path rule; see atomic.h. */
#define _XOPEN_SOURCE 700   /* realpath */
#include "atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/check.h"
#include "../core/fsutil.h"

enum { TO_ATOMIC, TO_STREAM, TO_FD };

/* After report_reserve_stdout: the process's original standard output, kept for reports. */
static int reserved_stdout = -1;

/* The descriptor a path names when it is one of the process's own ("/dev/stdout", "/dev/fd/3",
 * "/proc/self/fd/1"), else -1. Such a path is written through the open descriptor, at its current
 * position, so a report lands after what the process already printed there. */
static int own_fd(const char *path) {
    if (!strcmp(path, "/dev/stdout")) return STDOUT_FILENO;
    if (!strcmp(path, "/dev/stderr")) return STDERR_FILENO;
    const char *digits = !strncmp(path, "/dev/fd/", 8)         ? path + 8
                         : !strncmp(path, "/proc/self/fd/", 14) ? path + 14
                                                                : NULL;
    if (!digits || !*digits || strlen(digits) > 6 || strspn(digits, "0123456789") != strlen(digits)) return -1;
    return atoi(digits);
}

int report_is_stdout(const char *path) {
    return path && (!strcmp(path, "-") || own_fd(path) == STDOUT_FILENO);
}

void report_reserve_stdout(void) {
    if (reserved_stdout >= 0) return;
    fflush(stdout);
    reserved_stdout = dup(STDOUT_FILENO);
    if (reserved_stdout >= 0) dup2(STDERR_FILENO, STDOUT_FILENO);
}

static const char *what_is(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a named pipe (FIFO)";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* Decide how to write `path` (the table in atomic.h). TO_ATOMIC: replace target[0..cap) (the path,
 * or a link's target); TO_STREAM: open path in place; TO_FD: write through descriptor *fd. */
static int classify(const char *path, int report, char *target, size_t cap, int *how, int *fd) {
    if (!path || !*path) return err_set(IM_EIO, "the output path is empty");
    *how = TO_ATOMIC;
    *fd = !strcmp(path, "-") ? STDOUT_FILENO : own_fd(path);
    if (*fd >= 0) {
        if (report) { *how = TO_FD; return IM_OK; }
        if (!strcmp(path, "-"))
            return err_set(IM_EIO, "'-' (standard output) cannot take this output: it is written only to a regular file; "
                                   "to create a file called '-', write ./-");
        return err_set(IM_EIO, "'%s' is an open descriptor: this output is written only to a regular file (atomically)",
                       path);
    }
    if (strlen(path) >= cap) return err_set(IM_EIO, "output path too long: '%.64s...'", path);
    snprintf(target, cap, "%s", path);
    struct stat st, ls;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT) return err_set(IM_EIO, "cannot write '%s': %s", path, strerror(errno));
        if (lstat(path, &ls) == 0) return err_set(IM_EIO, "'%s' is a symbolic link to a missing file", path);
        return IM_OK;   /* a new file */
    }
    if (S_ISREG(st.st_mode)) {
        if (lstat(path, &ls) != 0 || !S_ISLNK(ls.st_mode)) return IM_OK;
        /* a link: replace its target and keep the link itself */
        char *real = realpath(path, NULL);
        struct stat rs;
        int same = real && strlen(real) < cap && stat(real, &rs) == 0 && rs.st_dev == st.st_dev && rs.st_ino == st.st_ino;
        if (same) snprintf(target, cap, "%s", real);
        free(real);
        if (same) return IM_OK;
        if (report) { *how = TO_STREAM; return IM_OK; }
        return err_set(IM_EIO, "'%s' is a symbolic link whose target cannot be resolved", path);
    }
    if (report && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
        *how = TO_STREAM;
        return IM_OK;
    }
    if (S_ISDIR(st.st_mode)) return err_set(IM_EIO, "'%s' is a folder, not a file name", path);
    if (S_ISBLK(st.st_mode)) return err_set(IM_EIO, "'%s' is a block device; refusing to write to it", path);
    return err_set(IM_EIO, "'%s' is %s: this output is written only to a regular file (atomically), never into a device "
                           "or pipe", path, what_is(st.st_mode));
}

int report_check(const char *path) {
    char target[4096];
    int how, fd;
    return path ? classify(path, 1, target, sizeof target, &how, &fd) : IM_OK;
}

/* ---- in place: "-", own descriptors, devices, FIFOs ------------------------------------------ */
static int write_stream(const char *path, int how, int fd, int (*emit)(FILE *f, void *ctx), void *ctx) {
    if (how == TO_FD) {
        if (fd == STDOUT_FILENO && reserved_stdout >= 0) fd = reserved_stdout;
        fflush(NULL);   /* what this process printed there comes first */
        fd = dup(fd);
    } else {
        /* O_APPEND is a no-op on a device or FIFO, and keeps the text of a regular file reached
         * through a link that does not resolve (a /proc/<pid>/fd entry of a deleted file) */
        fd = open(path, O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode))) {
            close(fd);
            return err_set(IM_EIO, "'%s' changed while it was opened; not written", path);
        }
    }
    if (fd < 0) return err_set(IM_EIO, "cannot open '%s' for writing: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        return err_set(IM_EIO, "cannot open '%s' for writing: %s", path, strerror(errno));
    }
    int rc = emit(f, ctx);
    if (!rc && (fflush(f) != 0 || ferror(f))) rc = err_set(IM_EIO, "cannot write '%s': %s", path, strerror(errno));
    if (fclose(f) != 0 && !rc) rc = err_set(IM_EIO, "cannot write '%s': %s", path, strerror(errno));
    return rc;
}

/* ---- atomic replacement ------------------------------------------------------------------------ */
static int open_temp(AtomicFile *a) {
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", a->path, (long)getpid());
    /* O_NOFOLLOW and O_NONBLOCK: whatever sits at the temp name (a link, a FIFO) is never
     * followed or waited on; only a regular file is written */
    int fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0) return err_set(IM_EIO, "cannot create %s: %s", a->tmp, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(IM_EIO, "cannot create %s: something that is not a regular file is in the way", a->tmp);
    }
    if (!(a->f = fdopen(fd, "wb"))) {
        close(fd);
        remove(a->tmp);
        return err_set(IM_EIO, "cannot create %s: %s", a->tmp, strerror(errno));
    }
    return IM_OK;
}

int atomic_open(AtomicFile *a, const char *path) {
    a->f = NULL;
    a->tmp[0] = 0;
    int how, fd, rc = classify(path, 0, a->path, sizeof a->path, &how, &fd);
    return rc ? rc : open_temp(a);
}

int atomic_commit(AtomicFile *a) {
    CHECK(a->f, "atomic_commit on a closed file");
    FILE *f = a->f;
    a->f = NULL;
    int rc = IM_OK;
    if (fflush(f) != 0 || ferror(f)) rc = err_set(IM_EIO, "cannot write %s: %s", a->tmp, strerror(errno));
    if (!rc && fsync(fileno(f)) != 0) rc = err_set(IM_EIO, "cannot fsync %s: %s", a->tmp, strerror(errno));
    if (fclose(f) != 0 && !rc) rc = err_set(IM_EIO, "cannot close %s: %s", a->tmp, strerror(errno));
    /* the path may have changed since atomic_open: a device or folder put there is never replaced */
    struct stat st;
    if (!rc && lstat(a->path, &st) == 0 && !S_ISREG(st.st_mode))
        rc = err_set(IM_EIO, "'%s' became %s while it was written; left as it is", a->path, what_is(st.st_mode));
    if (!rc && rename(a->tmp, a->path) != 0)
        rc = err_set(IM_EIO, "cannot rename %s to %s: %s", a->tmp, a->path, strerror(errno));
    if (rc) {
        remove(a->tmp);
        return rc;
    }
    fs_sync_dir(a->path);
    return IM_OK;
}

void atomic_abort(AtomicFile *a) {
    if (a->f) fclose(a->f);
    a->f = NULL;
    if (a->tmp[0]) remove(a->tmp);
}

static int write_any(const char *path, int report, int (*emit)(FILE *f, void *ctx), void *ctx) {
    AtomicFile a;
    a.f = NULL;
    a.tmp[0] = 0;
    int how, fd, rc = classify(path, report, a.path, sizeof a.path, &how, &fd);
    if (rc) return rc;
    if (how != TO_ATOMIC) return write_stream(path, how, fd, emit, ctx);
    if ((rc = open_temp(&a))) return rc;
    if ((rc = emit(a.f, ctx))) {
        atomic_abort(&a);
        return rc;
    }
    return atomic_commit(&a);
}

int atomic_write(const char *path, int (*emit)(FILE *f, void *ctx), void *ctx) { return write_any(path, 0, emit, ctx); }

int report_write(const char *path, int (*emit)(FILE *f, void *ctx), void *ctx) { return write_any(path, 1, emit, ctx); }

typedef struct { const void *data; size_t len; } Bytes;

static int emit_bytes(FILE *f, void *ctx) {
    const Bytes *b = ctx;
    if (b->len && fwrite(b->data, 1, b->len, f) != b->len) return err_set(IM_EIO, "short write: %s", strerror(errno));
    return IM_OK;
}

int atomic_write_bytes(const char *path, const void *data, size_t len) {
    Bytes b = {data, len};
    return atomic_write(path, emit_bytes, &b);
}

int report_write_bytes(const char *path, const void *data, size_t len) {
    Bytes b = {data, len};
    return report_write(path, emit_bytes, &b);
}

int dirs_check(const char *path) {
    char buf[4096];
    size_t n = (size_t)snprintf(buf, sizeof buf, "%s", path);
    if (n >= sizeof buf) return err_set(IM_EINVAL, "path too long: %s", path);
    if (!n) return err_set(IM_EINVAL, "empty folder path");
    for (;;) {
        struct stat st;
        if (stat(buf, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) return err_set(IM_EIO, "%s exists and is not a folder", buf);
            if (access(buf, W_OK | X_OK) != 0) return err_set(IM_EIO, "cannot write in folder %s: %s", buf, strerror(errno));
            return IM_OK;
        }
        if (errno != ENOENT && errno != ENOTDIR) return err_set(IM_EIO, "cannot use %s: %s", buf, strerror(errno));
        /* missing: the parent decides (a parent that is a file shows up as ENOTDIR here) */
        while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
        while (n > 0 && buf[n - 1] != '/') buf[--n] = 0;
        while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
        if (!n) snprintf(buf, sizeof buf, ".");
    }
}

int make_dirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return err_set(IM_EINVAL, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return err_set(IM_EIO, "cannot create folder %s: %s", buf, strerror(errno));
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) return err_set(IM_EIO, "%s exists and is not a folder", buf);
            *p = c;
            if (!c) break;
        }
    }
    return IM_OK;
}
