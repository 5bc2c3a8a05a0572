/* main.c: the `implicit` command line; one function per subcommand. */
#include <stdio.h>
#include <string.h>

#include "implicit.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: implicit <command> [options]\n"
            "commands:\n"
            "  --version          print version and build configuration\n"
            "  info CKPT          print model type, sizes, parameter count and stored config\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 1; }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("implicit %s (blas=%s, threads=%s)\n", IM_VERSION, k_blas_name(), k_omp_name());
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "error: unknown command '%s'\nhint: run `implicit --help`\n", argv[1]);
    return 1;
}
