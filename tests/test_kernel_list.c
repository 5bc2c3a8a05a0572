/* test_kernel_list: KERNEL_LIST (kernels.h) is the complete registry of kernels, and every one of
 * them is checked against its reference somewhere in tests/.
 *
 * The table below is generated from KERNEL_LIST, so a listed kernel without both `k_<name>` and
 * `k_<name>_ref` fails to link. The test then reads kernels.h for every declared `k_<name>_ref`
 * (a kernel missing from the list fails) and the test sources for a use of each reference (a
 * kernel nobody compares with its reference fails). Runs from the repository root (tests/run.sh).
 */
#include <dirent.h>

#include "th.h"

typedef void (*AnyFn)(void);
static const struct {
    const char *name;
    AnyFn fast, ref;
} KERNELS[] = {
#define X(n) {#n, (AnyFn)k_##n, (AnyFn)k_##n##_ref},
    KERNEL_LIST(X)
#undef X
};
#define N_KERNELS ((int)(sizeof KERNELS / sizeof KERNELS[0]))

static int listed(const char *name, size_t len) {
    for (int i = 0; i < N_KERNELS; i++)
        if (strlen(KERNELS[i].name) == len && !strncmp(KERNELS[i].name, name, len)) return 1;
    return 0;
}

/* Every `k_<name>_ref(` declared in kernels.h has its row in KERNEL_LIST. */
static void test_declared_are_listed(void) {
    char *h = th_read_file("src/kernels/kernels.h", NULL);
    TH_CHECK(h != NULL, "cannot read src/kernels/kernels.h (run from the repository root)");
    if (!h) return;
    int found = 0;
    for (char *p = h; (p = strstr(p, "k_")) != NULL; p += 2) {
        if (p > h && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z'))) continue;
        char *q = p + 2;
        while ((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_') q++;
        if (*q != '(' || q - p < 6 || strncmp(q - 4, "_ref", 4)) continue;
        found++;
        TH_CHECK(listed(p + 2, (size_t)(q - 4 - (p + 2))), "kernels.h declares %.*s but KERNEL_LIST lacks it",
                 (int)(q - p), p);
    }
    TH_CHECK(found >= N_KERNELS, "found %d reference declarations for %d listed kernels", found, N_KERNELS);
    free(h);
}

/* Every listed kernel's reference is used by some test source (tests/test_*.c, this file aside:
 * its table names kernels only through token pasting). */
static int uses(const char *text, const char *want) {
    size_t n = strlen(want);
    for (const char *p = text; (p = strstr(p, want)) != NULL; p += n) {
        char c = p[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 1;
    }
    return 0;
}

static void test_listed_are_tested(void) {
    char *src[64];
    int n_src = 0;
    DIR *d = opendir("tests");
    TH_CHECK(d != NULL, "cannot open tests/ (run from the repository root)");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL && n_src < 64;) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "test_", 5) || len < 3 || strcmp(e->d_name + len - 2, ".c")) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/%s", e->d_name);
        if ((src[n_src] = th_read_file(path, NULL)) != NULL) n_src++;
    }
    closedir(d);
    TH_CHECK(n_src > 1, "read %d test sources", n_src);
    for (int k = 0; k < N_KERNELS; k++) {
        TH_CHECK(KERNELS[k].fast && KERNELS[k].ref, "%s: missing entry point", KERNELS[k].name);
        char want[64];
        snprintf(want, sizeof want, "k_%s_ref", KERNELS[k].name);
        int used = 0;
        for (int i = 0; i < n_src && !used; i++) used = uses(src[i], want);
        TH_CHECK(used, "no test compares k_%s with its reference %s", KERNELS[k].name, want);
    }
    for (int i = 0; i < n_src; i++) free(src[i]);
}

int main(void) {
    th_name = "test_kernel_list";
    test_declared_are_listed();
    test_listed_are_tested();
    return th_done();
}
