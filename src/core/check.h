/* check.h: the two kinds of error in implicit.
 *
 * Programmer errors (a broken invariant, a shape mismatch, a forbidden NULL) stop the process
 * with CHECK: file:line, the failed expression and a message, then abort(). Always on.
 * Runtime errors (I/O, a bad file, a config that does not fit) are returned as a negative status
 * and leave a message in a thread-local buffer, so the library never calls exit() and tests can
 * feed it broken input. The CLI prints err_msg() and exits 1.
 */
#ifndef IMPLICIT_CHECK_H
#define IMPLICIT_CHECK_H

#include <stddef.h>

enum {
    IM_OK = 0,
    IM_EIO = -1,      /* open/read/write/rename failed */
    IM_EFORMAT = -2,  /* a file is malformed or foreign */
    IM_ENOMEM = -3,   /* an allocation failed */
    IM_EINVAL = -4,   /* an option, config or argument is invalid */
    IM_EMISMATCH = -5,/* a file does not match the model/config it is loaded into */
    IM_ENUM = -6,     /* NaN/inf or divergence */
};

#if defined(__GNUC__)
#define IM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define IM_NORETURN __attribute__((noreturn))
#else
#define IM_PRINTF(a, b)
#define IM_NORETURN
#endif

IM_NORETURN void check_fail(const char *file, int line, const char *expr, const char *fmt, ...)
    IM_PRINTF(4, 5);

/* CHECK(cond, "fmt", ...): abort with a message when cond is false (always compiled in). */
#define CHECK(cond, ...) \
    do { if (!(cond)) check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); } while (0)

/* Record a runtime error; returns code so that `return err_set(IM_EIO, "...")` reads naturally. */
int err_set(int code, const char *fmt, ...) IM_PRINTF(2, 3);
/* The last message set on this thread ("" if none). */
const char *err_msg(void);
/* Prefix the current message with more context: "ctx: old message". Returns the code unchanged. */
int err_wrap(int code, const char *fmt, ...) IM_PRINTF(2, 3);
const char *err_name(int code);

/* malloc/calloc that CHECK on failure: for setup paths where running out of memory is fatal. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);

#endif
