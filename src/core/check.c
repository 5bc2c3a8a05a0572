/* check.c: CHECK failures and the thread-local runtime error message (see check.h). */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char g_err[1024];

void check_fail(const char *file, int line, const char *expr, const char *fmt, ...) {
    fprintf(stderr, "%s:%d: CHECK(%s) failed: ", file, line, expr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

int err_set(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return code;
}

int err_wrap(int code, const char *fmt, ...) {
    char old[sizeof g_err];
    memcpy(old, g_err, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    /* "prefix: old message", truncated to the buffer */
    size_t at = n < 0 ? 0 : (size_t)n < sizeof g_err ? (size_t)n : sizeof g_err - 1;
    if (at + 2 < sizeof g_err) {
        g_err[at++] = ':';
        g_err[at++] = ' ';
        size_t rest = sizeof g_err - 1 - at, len = strlen(old);
        memcpy(g_err + at, old, len < rest ? len : rest);
        at += len < rest ? len : rest;
    }
    g_err[at] = 0;
    return code;
}

const char *err_msg(void) { return g_err; }

const char *err_name(int code) {
    switch (code) {
    case IM_OK: return "ok";
    case IM_EIO: return "I/O error";
    case IM_EFORMAT: return "bad format";
    case IM_ENOMEM: return "out of memory";
    case IM_EINVAL: return "invalid argument";
    case IM_EMISMATCH: return "mismatch";
    case IM_ENUM: return "numerical failure";
    default: return "unknown error";
    }
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    CHECK(p, "out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    CHECK(p, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
