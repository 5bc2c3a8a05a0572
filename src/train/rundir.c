/* rundir.c: see rundir.h. */
#define _DEFAULT_SOURCE   /* flock (BSD, also in glibc and musl) */
#include "rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/check.h"
#include "../core/fsutil.h"
#include "../io/atomic.h"
#include "../io/json.h"

#define RUN_FILE_NAME(name) name,
static const char *const RUN_FILES[] = {RUNDIR_FILES(RUN_FILE_NAME) NULL};

static void join(char *out, size_t cap, const char *dir, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

/* flock the lock file and write our pid into it; on contention, name the holder's pid. */
static int take_lock(const char *dir, FILE **lock) {
    char path[4200];
    join(path, sizeof path, dir, RUNDIR_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return err_set(IM_EIO, "cannot create the lock file %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[24] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, pid, sizeof pid - 1, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK) return err_set(IM_EIO, "cannot lock %s: %s", path, strerror(e));
        pid[n > 0 ? n : 0] = 0;
        pid[strspn(pid, "0123456789")] = 0;   /* digits only: the file is not trusted text */
        return err_set(IM_EIO, "output folder '%s' is in use by another training run (pid %s holds %s); wait for it to "
                               "end or choose another --out", dir, *pid ? pid : "unknown", path);
    }
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n || !(*lock = fdopen(fd, "r+"))) {
        int e = errno;
        close(fd);
        return err_set(IM_EIO, "cannot write the lock file %s: %s", path, strerror(e));
    }
    return IM_OK;
}

void rundir_release(FILE *lock) {
    if (!lock) return;
    if (ftruncate(fileno(lock), 0) != 0) { /* a stale pid in an unlocked file is harmless */ }
    fclose(lock);
}

/* The run's files: each must be a regular file where it exists. A fresh run refuses a folder that
 * holds results (a checkpoint or a non-empty log; config.json alone is only a run that never
 * logged a step, report.html only a picture) unless overwrite, which deletes them all. */
static int check_files(const char *dir, int fresh, int overwrite) {
    char found[256] = "", path[4200];
    for (int i = 0; RUN_FILES[i]; i++) {
        struct stat st;
        join(path, sizeof path, dir, RUN_FILES[i]);
        if (lstat(path, &st) != 0) continue;
        if (!S_ISREG(st.st_mode)) return err_set(IM_EIO, "'%s' is not a regular file; the run cannot write it", path);
        /* config.json alone is a run that never logged; report.html is only a picture of the others */
        if (st.st_size == 0 || !strcmp(RUN_FILES[i], "config.json") || !strcmp(RUN_FILES[i], "report.html")) continue;
        size_t k = strlen(found);
        snprintf(found + k, sizeof found - k, "%s%s", k ? ", " : "", RUN_FILES[i]);
    }
    if (!fresh || !*found) return IM_OK;
    if (!overwrite)
        return err_set(IM_EINVAL, "output folder '%s' already holds a training run (%s); continue it with --resume %s, "
                                  "or start over with --overwrite 1 (deletes its checkpoints and log)", dir, found, dir);
    for (int i = 0; RUN_FILES[i]; i++) {
        join(path, sizeof path, dir, RUN_FILES[i]);
        if (unlink(path) != 0 && errno != ENOENT) return err_set(IM_EIO, "cannot delete %s: %s", path, strerror(errno));
    }
    fs_sync_dir(path);
    return IM_OK;
}

/* Temp files "<name>.tmp.<pid>" left by killed writers. */
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name, *t = NULL;
        for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;
        if (!t || t == name || !t[5] || strlen(t + 5) > 9 || strspn(t + 5, "0123456789") != strlen(t + 5)) continue;
        size_t base = (size_t)(t - name);
        int own = 0;
        for (int i = 0; RUN_FILES[i]; i++) own |= strlen(RUN_FILES[i]) == base && !strncmp(name, RUN_FILES[i], base);
        long pid = atol(t + 5);
        /* the run's own temps are written by the lock holder only; any other may belong to a live
         * writer (`implicit eval --json` into this folder) and goes only when its pid is gone */
        if (!own && !(pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)) continue;
        char path[4200];
        struct stat st;
        join(path, sizeof path, dir, name);
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
    }
    closedir(d);
}

/* A log record is kept when it is a JSON object whose "step" (if any) is <= step. */
static int record_kept(const char *s, size_t len, int step) {
    Json *j;
    if (json_parse(&j, s, len)) return 0;
    const Json *v = json_get(j, "step");
    int keep = j->type == JSON_OBJECT && (!v || (v->type == JSON_NUMBER && v->number <= step));
    json_free(j);
    return keep;
}

/* log.jsonl without the records after `step` and without a torn or invalid line. */
static int cut_log(const char *dir, int step) {
    char path[4200];
    join(path, sizeof path, dir, "log.jsonl");
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? IM_OK : err_set(IM_EIO, "cannot read %s: %s", path, strerror(errno));
    char *text;
    size_t n, keep = 0;
    int rc = fs_read_all(f, 0, &text, &n), dropped = 0;
    fclose(f);
    if (rc) return err_wrap(rc, "%s", path);
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (text + i)) : n - i;
        if (nl && record_kept(text + i, len, step)) {   /* kept lines move forward in place */
            memmove(text + keep, text + i, len + 1);
            keep += len + 1;
        } else {
            dropped++;
        }
        i += len + 1;
    }
    if (dropped) rc = atomic_write_bytes(path, text, keep);
    free(text);
    return rc;
}

int rundir_claim(const char *dir, int resume_step, int overwrite, FILE **lock) {
    *lock = NULL;
    int rc = make_dirs(dir);
    if (!rc) rc = take_lock(dir, lock);
    if (!rc) rc = check_files(dir, resume_step < 0, overwrite);
    if (!rc) remove_stale_temps(dir);
    if (!rc && resume_step >= 0) rc = cut_log(dir, resume_step);
    if (rc) {
        rundir_release(*lock);
        *lock = NULL;
    }
    return rc;
}
