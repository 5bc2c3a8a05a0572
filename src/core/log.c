/* log.c: see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static int g_level = LOG_INFO;

void log_set_level(int level) { g_level = level; }
int log_get_level(void) { return g_level; }

void log_msg(int level, const char *fmt, ...) {
    static const char *tag[] = {"error", "warn", "info", "debug"};
    if (level > g_level) return;
    fprintf(stderr, "[%s] ", tag[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
