/* blocknorm.c: see blocknorm.h. */
#include "blocknorm.h"

#include <string.h>

#include "layernorm.h"
#include "rmsnorm.h"

static const struct {
    BlockNormType type;
    const char *name;
    int bias;
} TYPES[] = {
#define ROW(e, name, bias) {e, name, bias},
    BLOCKNORM_TYPES(ROW)
#undef ROW
};

int blocknorm_parse(const char *s) {
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++)
        if (!strcmp(s, TYPES[i].name)) return (int)TYPES[i].type;
    return -1;
}

const char *blocknorm_names(void) {
#define NAME(e, name, bias) " | " name
    static const char all[] = BLOCKNORM_TYPES(NAME);
#undef NAME
    return all + 3;
}

int blocknorm_has_bias(BlockNormType t) {
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++)
        if (TYPES[i].type == t) return TYPES[i].bias;
    return 0;
}

size_t blocknorm_cache_floats(BlockNormType t, int M) {
    return t == BLOCKNORM_LAYER ? layernorm_cache_floats(M) : rmsnorm_cache_floats(M);
}

void blocknorm_fwd(BlockNormType t, float *y, float *cache, const float *x, const float *w, const float *b, int M,
                   int C, float eps) {
    if (t == BLOCKNORM_LAYER) layernorm_fwd(y, cache, x, w, b, M, C, eps);
    else rmsnorm_fwd(y, cache, x, w, M, C, eps);
}

void blocknorm_bwd(BlockNormType t, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                   const float *cache, int M, int C) {
    if (t == BLOCKNORM_LAYER) layernorm_bwd(dx, dw, db, dy, x, w, cache, M, C);
    else rmsnorm_bwd(dx, dw, dy, x, w, cache, M, C);
}
