/* fsutil.c: see fsutil.h. */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

void fs_sync_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int fs_read_all(FILE *f, size_t max, char **buf, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    if (!b) return err_set(IM_ENOMEM, "out of memory");
    for (;;) {
        if (len + 1 >= cap) {   /* keep one byte for the NUL */
            if (max > 0 && len > max) {
                free(b);
                return err_set(IM_EFORMAT, "larger than %zu bytes", max);
            }
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return err_set(IM_ENOMEM, "out of memory after %zu bytes", len);
            }
            b = nb;
        }
        size_t got = fread(b + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        int e = errno;
        free(b);
        return err_set(IM_EIO, "read error: %s", strerror(e));
    }
    if (max > 0 && len > max) {
        free(b);
        return err_set(IM_EFORMAT, "larger than %zu bytes", max);
    }
    b[len] = 0;
    *buf = b;
    *n = len;
    return IM_OK;
}

FILE *fs_open_regular(const char *path, const char *what) {
    const char *w = what ? what : "", *sp = what ? " " : "";
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        err_set(IM_EIO, "cannot open %s%s'%s': %s", w, sp, path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        err_set(IM_EIO, "cannot stat %s%s'%s': %s", w, sp, path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        err_set(IM_EIO, "%s%s'%s' is not a regular file", w, sp, path);
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        err_set(IM_EIO, "cannot open %s%s'%s': %s", w, sp, path, strerror(errno));
        close(fd);
    }
    return f;
}
