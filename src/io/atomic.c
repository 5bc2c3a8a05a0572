/* atomic.c: see atomic.h. */
#include "atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/check.h"
#include "../core/fsutil.h"

int atomic_write(const char *path, int (*emit)(FILE *f, void *ctx), void *ctx) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return err_set(IM_EIO, "cannot create %s: %s", tmp, strerror(errno));
    int rc = emit(f, ctx);
    if (!rc && (fflush(f) != 0 || ferror(f))) rc = err_set(IM_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (!rc && fsync(fileno(f)) != 0) rc = err_set(IM_EIO, "cannot fsync %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && !rc) rc = err_set(IM_EIO, "cannot close %s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = err_set(IM_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc) { remove(tmp); return rc; }
    fs_sync_dir(path);
    return IM_OK;
}

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
