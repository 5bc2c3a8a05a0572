/* test_textdata.c: token files and the language-modelling task (src/data/textdata.c,
 * src/data/tasks_lm.c, the LM parts of src/train/evaluate.c).
 * The test writes its own small texts (never the shared corpus): `prepare` round trips with the
 * byte tokenizer, corrupt files are rejected with messages naming the file, training windows are
 * pure functions of (seed, step, row) inside the train split, eval windows tile the validation
 * split in order, tiny models (LSTM, Mamba2, Llama, implicit Mamba2) train / evaluate on a
 * prepared fixture, and the loss by position agrees with the overall loss. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/data/textdata.h"
#include "../src/io/json.h"
#include "../src/models/model.h"
#include "../src/train/evaluate.h"
#include "../src/train/trainer.h"
#include "th.h"

static char dir[] = "/tmp/test_textdata_XXXXXX";

static const char *path_in(const char *name) {
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    CHECK(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    CHECK(fread(b, 1, *n, f) == *n, "short read");
    b[*n] = 0;
    fclose(f);
    return b;
}

/* A small, learnable text: words from a fixed list in a seeded order, lines of 6 words. */
static char *make_text(uint64_t seed, size_t n) {
    static const char *words[] = {"the", "king", "shall", "speak", "to", "his", "lords", "and", "queen", "of", "rome"};
    char *s = malloc(n + 16);
    Rng r;
    rng_seed(&r, seed, 1);
    size_t at = 0;
    int w = 0;
    while (at < n) {
        const char *word = words[rng_below(&r, 11)];
        at += (size_t)snprintf(s + at, n + 16 - at, "%s%s", word, ++w % 6 ? " " : ".\n");
    }
    s[n] = 0;
    return s;
}

/* ---- prepare and the reader ----------------------------------------------------------------- */

static void test_round_trip(void) {
    /* arbitrary bytes, invalid UTF-8 and NULs included */
    unsigned char a[300], b[100];
    for (int i = 0; i < 300; i++) a[i] = (unsigned char)(i * 7 + 3);
    for (int i = 0; i < 100; i++) b[i] = (unsigned char)(255 - i);
    write_file(path_in("a.txt"), a, sizeof a);
    write_file(path_in("b.txt"), b, sizeof b);
    const char *texts[] = {path_in("a.txt"), path_in("b.txt")};
    TextPrepInfo info;
    TH_CHECK(textdata_prepare(path_in("ab.tok"), texts, 2, "byte", 0.25, 0, &info) == IM_OK, "prepare: %s", err_msg());
    TH_CHECK(info.n_files == 2 && info.bytes == 400 && info.n_train == 300 && info.n_val == 100 && info.vocab == 256 &&
                 info.width == 2, "prepare info: %llu / %llu", (unsigned long long)info.n_train, (unsigned long long)info.n_val);
    TextData *d = NULL;
    TH_CHECK(textdata_open(&d, path_in("ab.tok")) == IM_OK, "open: %s", err_msg());
    if (d) {
        int ids[400], ok = 1;
        TH_CHECK(textdata_vocab(d) == 256 && textdata_width(d) == 2 && !strcmp(textdata_spec(d), "byte") &&
                     textdata_count(d, TEXT_TRAIN) == 300 && textdata_count(d, TEXT_VAL) == 100, "header");
        textdata_get(d, TEXT_TRAIN, 0, 300, ids);
        textdata_get(d, TEXT_VAL, 0, 100, ids + 300);
        for (int i = 0; i < 400; i++) ok &= ids[i] == (i < 300 ? a[i] : b[i - 300]);
        TH_CHECK(ok, "tail split: the tokens are the bytes, the last quarter held out");
        textdata_get(d, TEXT_VAL, 37, 5, ids);
        TH_CHECK(ids[0] == b[37] && ids[4] == b[41], "read inside a split");
        textdata_free(d);
    }
    size_t n;
    unsigned char *raw = read_file(path_in("ab.tok"), &n);
    TH_CHECK(n == 40 + 4 + 2 * 400 && !memcmp(raw, "IMPLTOK\0", 8) && raw[8] == 1 && raw[12] == 0 && raw[13] == 1 &&
                 raw[16] == 2 && raw[20] == 44 && raw[21] == 1 && raw[28] == 100 && raw[36] == 4 && !memcmp(raw + 40, "byte", 4) &&
                 raw[44] == a[0] && raw[45] == 0,
             "documented layout (little-endian header, u16 tokens)");
    free(raw);
    /* per file: the last quarter of each file */
    TH_CHECK(textdata_prepare(path_in("pf.tok"), texts, 2, "byte", 0.25, 1, &info) == IM_OK, "prepare per_file: %s", err_msg());
    TH_CHECK(info.n_train == 225 + 75 && info.n_val == 75 + 25, "per_file counts");
    if (textdata_open(&d, path_in("pf.tok")) == IM_OK) {
        int ids[300], ok = 1;
        textdata_get(d, TEXT_TRAIN, 0, 300, ids);
        for (int i = 0; i < 300; i++) ok &= ids[i] == (i < 225 ? a[i] : b[i - 225]);
        textdata_get(d, TEXT_VAL, 0, 100, ids);
        for (int i = 0; i < 100; i++) ok &= ids[i] == (i < 75 ? a[225 + i] : b[75 + i - 75]);
        TH_CHECK(ok, "per_file split");
        textdata_free(d);
    }
    /* wide tokens: a vocabulary above 65536 is stored as u32 */
    int tr[3] = {0, 70000, 123456}, va[2] = {99999, 5};
    TH_CHECK(textdata_write(path_in("wide.tok"), "x.json", 200000, tr, 3, va, 2) == IM_OK, "write wide: %s", err_msg());
    if (textdata_open(&d, path_in("wide.tok")) == IM_OK) {
        int ids[5];
        textdata_get(d, TEXT_TRAIN, 0, 3, ids);
        textdata_get(d, TEXT_VAL, 0, 2, ids + 3);
        TH_CHECK(textdata_width(d) == 4 && ids[1] == 70000 && ids[2] == 123456 && ids[3] == 99999 && ids[4] == 5 &&
                     !strcmp(textdata_spec(d), "x.json"), "u32 round trip");
        textdata_free(d);
    } else {
        TH_CHECK(0, "open wide: %s", err_msg());
    }
    TH_CHECK(textdata_write(path_in("bad.tok"), "byte", 256, (int[]){1, 256}, 2, NULL, 0) == IM_EINVAL &&
                 strstr(err_msg(), "256"), "writer rejects a token outside the vocabulary: %s", err_msg());
    TH_CHECK(access(path_in("bad.tok"), F_OK) != 0, "nothing written on error");
    TH_CHECK(textdata_prepare(path_in("x.tok"), texts, 2, "byte", 1.0, 0, NULL) == IM_EINVAL, "val_frac 1 rejected");
    const char *missing[] = {path_in("missing.txt")};
    TH_CHECK(textdata_prepare(path_in("x.tok"), missing, 1, "byte", 0.1, 0, NULL) == IM_EIO &&
                 strstr(err_msg(), "missing.txt"), "missing text file: %s", err_msg());
    TH_CHECK(textdata_prepare(path_in("x.tok"), texts, 2, "nope", 0.1, 0, NULL) == IM_EINVAL, "unknown tokenizer: %s", err_msg());
}

/* Copy the valid file with a patch at offset `at` (len bytes), or cut to `cut` bytes (>= 0). */
static const char *variant(const char *name, const unsigned char *good, size_t n, size_t at, const void *patch, size_t len,
                           long cut) {
    unsigned char *b = malloc(n + 8);
    memcpy(b, good, n);
    if (patch) memcpy(b + at, patch, len);
    size_t m = cut >= 0 ? (size_t)cut : n;
    if (cut == -2) { memset(b + n, 7, 2); m = n + 2; }    /* trailing bytes */
    const char *p = path_in(name);
    write_file(p, b, m);
    free(b);
    return p;
}

static void expect_reject(const char *p, int code, const char *what, const char *label) {
    TextData *d = NULL;
    int rc = textdata_open(&d, p);
    TH_CHECK(rc == code && !d && strstr(err_msg(), p) && strstr(err_msg(), what), "%s: rc %d, message '%s'", label, rc, err_msg());
}

static void test_rejects(void) {
    int tr[6] = {1, 2, 3, 4, 5, 6}, va[2] = {7, 8};
    const char *good = path_in("good.tok");
    TH_CHECK(textdata_write(good, "byte", 256, tr, 6, va, 2) == IM_OK, "write: %s", err_msg());
    size_t n;
    unsigned char *g = read_file(good, &n);
    uint32_t v2 = 2, w3 = 3, big_vocab = 70000;
    uint64_t huge = (uint64_t)1 << 62, seven = 7;
    unsigned char tok256[2] = {0, 1};
    expect_reject(variant("magic.tok", g, n, 0, "IMPLDATA", 8, -1), IM_EFORMAT, "magic", "bad magic");
    expect_reject(variant("short.tok", g, n, 0, NULL, 0, 10), IM_EFORMAT, "truncated", "truncated header");
    expect_reject(variant("cut.tok", g, n, 0, NULL, 0, (long)n - 1), IM_EFORMAT, "truncated", "truncated tokens");
    expect_reject(variant("trail.tok", g, n, 0, NULL, 0, -2), IM_EFORMAT, "trailing", "trailing data");
    expect_reject(variant("version.tok", g, n, 8, &v2, 4, -1), IM_EFORMAT, "version 2", "version");
    expect_reject(variant("width.tok", g, n, 16, &w3, 4, -1), IM_EFORMAT, "width 3", "wrong width");
    expect_reject(variant("vocab.tok", g, n, 12, &big_vocab, 4, -1), IM_EFORMAT, "does not fit", "vocab too big for u16");
    expect_reject(variant("count.tok", g, n, 20, &huge, 8, -1), IM_EFORMAT, "truncated or damaged", "n_train too big");
    expect_reject(variant("count2.tok", g, n, 28, &huge, 8, -1), IM_EFORMAT, "truncated or damaged", "n_val too big");
    expect_reject(variant("count3.tok", g, n, 20, &seven, 8, -1), IM_EFORMAT, "truncated or damaged", "counts one too many");
    expect_reject(variant("spec.tok", g, n, 36, &huge, 4, -1), IM_EFORMAT, "spec length", "spec length");
    expect_reject(variant("token.tok", g, n, 44 + 2 * 7, tok256, 2, -1), IM_EFORMAT, "validation token 1 is 256",
                  "token >= vocab");
    expect_reject(path_in("nonexistent.tok"), IM_EIO, "nonexistent", "missing file");
    free(g);
}

/* ---- the lm task ---------------------------------------------------------------------------- */

static const char *corpus;    /* the prepared fixture: 6000 bytes of text, 10% validation */

static Task *lm_task(const char *const *kv) {
    TaskCfg c;
    task_cfg_defaults(&c);
    task_cfg_set(&c, "task", "lm");
    task_cfg_set(&c, "data", corpus);
    for (int i = 0; kv && kv[i]; i += 2) TH_CHECK(task_cfg_set(&c, kv[i], kv[i + 1]) == IM_OK, "set %s", kv[i]);
    Task *t = NULL;
    TH_CHECK(task_create(&t, &c) == IM_OK && t, "lm task: %s", err_msg());
    return t;
}

static void test_lm_task(void) {
    Task *t = lm_task((const char *[]){"context", "16", "seed", "3", NULL});
    if (!t) return;
    TextData *d;
    CHECK(textdata_open(&d, corpus) == IM_OK, "%s", err_msg());
    int n_tr = (int)textdata_count(d, TEXT_TRAIN), n_va = (int)textdata_count(d, TEXT_VAL);
    int *tr = malloc(sizeof(int) * (size_t)n_tr), *va = malloc(sizeof(int) * (size_t)n_va);
    textdata_get(d, TEXT_TRAIN, 0, n_tr, tr);
    textdata_get(d, TEXT_VAL, 0, n_va, va);
    textdata_free(d);
    const int *lens;
    char desc[512], s[16];
    task_describe(t, desc, sizeof desc);
    TH_CHECK(task_vocab(t) == 256 && task_train_seq_len(t) == 16 && task_seq_len(t, 64) == 64 &&
                 task_eval_lens(t, &lens) == 1 && lens[0] == 16 && !strcmp(task_cfg(t)->tokenizer, "byte") &&
                 strstr(desc, "5400 train / 600 validation"), "lm task: %s", desc);
    task_token_str(t, 'k', s, sizeof s);
    TH_CHECK(!strcmp(s, "k"), "byte token string");
    task_token_str(t, '\n', s, sizeof s);
    TH_CHECK(!strcmp(s, "\\n"), "newline token string");
    /* training windows: (seed, step, row) alone decide a row */
    enum { B = 6, C = 16 };
    int ids[B * C], tg[B * C], one[C], one_tg[C], ok = 1, in_split = 1, shifted = 1;
    task_train_batch(t, 5, 0, B, ids, tg);
    for (int b = 0; b < B; b++) {
        task_train_batch(t, 5, b, 1, one, one_tg);
        ok &= !memcmp(one, ids + b * C, sizeof one) && !memcmp(one_tg, tg + b * C, sizeof one_tg);
        for (int i = 0; i + 1 < C; i++) shifted &= ids[b * C + i + 1] == tg[b * C + i];
        int found = 0;   /* the window (C + 1 tokens) is a slice of the train split */
        for (int s0 = 0; s0 + C < n_tr && !found; s0++)
            found = !memcmp(tr + s0, ids + b * C, sizeof(int) * C) && tr[s0 + C] == tg[b * C + C - 1];
        in_split &= found;
    }
    TH_CHECK(ok, "rows do not depend on the batch they are drawn in");
    TH_CHECK(shifted && in_split, "targets are the inputs shifted by one, windows inside the train split");
    Task *t2 = lm_task((const char *[]){"context", "16", "seed", "3", NULL});
    Task *t3 = lm_task((const char *[]){"context", "16", "seed", "4", NULL});
    int ids2[B * C], tg2[B * C], ids3[B * C], tg3[B * C];
    task_train_batch(t2, 5, 0, B, ids2, tg2);
    task_train_batch(t3, 5, 0, B, ids3, tg3);
    TH_CHECK(!memcmp(ids, ids2, sizeof ids) && !memcmp(tg, tg2, sizeof tg), "same seed, same rows");
    TH_CHECK(memcmp(ids, ids3, sizeof ids), "another seed, other rows");
    task_train_batch(t2, 6, 0, B, ids2, tg2);
    TH_CHECK(memcmp(ids, ids2, sizeof ids), "another step, other rows");
    task_free(t2);
    task_free(t3);
    /* eval windows of length L tile the validation split in order */
    int L = 7, nw = (int)task_eval_count(t, L), cover = 1;
    TH_CHECK(nw == (n_va - 1) / L && nw > 0, "windows at length %d: %d", L, nw);
    int *e = malloc(sizeof(int) * (size_t)nw * L), *et = malloc(sizeof(int) * (size_t)nw * L);
    task_eval_batch(t, L, -1, 0, nw, e, et);
    for (int i = 0; i < nw * L; i++) cover &= e[i] == va[i] && et[i] == va[i + 1];
    TH_CHECK(cover, "eval windows: inputs val[0..nL-1], targets val[1..nL], in order");
    task_eval_batch(t, L, -1, 3, 1, e, et);
    TH_CHECK(e[0] == va[3 * L] && et[L - 1] == va[4 * L], "window 3 alone");
    free(e);
    free(et);
    free(tr);
    free(va);
    task_free(t);
}

static void test_lm_config_errors(void) {
    TaskCfg c;
    Task *t = NULL;
    task_cfg_defaults(&c);
    task_cfg_set(&c, "task", "lm");
    TH_CHECK(task_create(&t, &c) == IM_EINVAL && strstr(err_msg(), "data"), "lm needs data: %s", err_msg());
    task_cfg_set(&c, "data", path_in("nope.tok"));
    TH_CHECK(task_create(&t, &c) == IM_EIO && strstr(err_msg(), "nope.tok"), "missing data file: %s", err_msg());
    task_cfg_set(&c, "data", corpus);
    task_cfg_set(&c, "context", "6000");
    TH_CHECK(task_create(&t, &c) == IM_EINVAL && strstr(err_msg(), "train split"), "context too long: %s", err_msg());
    task_cfg_set(&c, "context", "16");
    task_cfg_set(&c, "eval_lens", "16,600");
    TH_CHECK(task_create(&t, &c) == IM_EINVAL && strstr(err_msg(), "length 600"), "eval length too long: %s", err_msg());
    task_cfg_set(&c, "eval_lens", "");
    task_cfg_set(&c, "tokenizer", "other.bpe");
    TH_CHECK(task_create(&t, &c) == IM_EINVAL && strstr(err_msg(), "other.bpe"), "tokenizer mismatch: %s", err_msg());
    task_cfg_set(&c, "tokenizer", "byte");
    TH_CHECK(task_create(&t, &c) == IM_OK, "matching tokenizer: %s", err_msg());
    task_free(t);
}

/* ---- models on the fixture ------------------------------------------------------------------ */

static int make_model(Model *m, const char *family, int V) {
    ModelCfg c;
    cfg_defaults(&c);
    cfg_set(&c, "model", family);
    cfg_set(&c, "d_model", "16");
    cfg_set(&c, "n_layer", "1");
    cfg_set(&c, "d_state", "8");
    cfg_set(&c, "headdim", "8");
    cfg_set(&c, "n_head", "2");
    cfg_set(&c, "d_inner", "32");
    cfg_set(&c, "f_max_iter", "4");
    c.vocab_size = V;
    int rc = model_create(m, &c);
    TH_CHECK(rc == IM_OK, "%s: %s", family, err_msg());
    if (!rc) model_init_params(m, 5);
    return rc;
}

static void test_train_tiny(void) {
    ModelCfg m;
    TaskCfg tc;
    TrainCfg r;
    cfg_defaults(&m);
    task_cfg_defaults(&tc);
    train_cfg_defaults(&r);
    cfg_set(&m, "model", "mamba2");
    cfg_set(&m, "d_model", "32");
    cfg_set(&m, "n_layer", "1");
    cfg_set(&m, "d_state", "8");
    cfg_set(&m, "headdim", "8");
    m.vocab_size = 256;
    task_cfg_set(&tc, "task", "lm");
    task_cfg_set(&tc, "data", corpus);
    task_cfg_set(&tc, "context", "32");
    task_cfg_set(&tc, "eval_lens", "32,64");
    task_cfg_set(&tc, "eval_samples", "8");
    snprintf(r.out, sizeof r.out, "%s/run", dir);
    r.steps = 40;
    r.batch = 8;
    r.warmup = 4;
    r.lr = 1e-2;
    r.eval_every = 0;
    r.ckpt_every = 0;
    snprintf(r.best_metric, sizeof r.best_metric, "loss");
    snprintf(r.progress, sizeof r.progress, "none");
    Trainer t;
    TH_CHECK(trainer_init(&t, &m, &tc, &r) == IM_OK, "init: %s", err_msg());
    TH_CHECK(trainer_run(&t, 0) == IM_OK, "run: %s", err_msg());
    double first = (t.losses[0] + t.losses[1]) / 2, last = (t.losses[38] + t.losses[39]) / 2;
    TH_CHECK(first > 5 && last < first - 1.5, "training loss falls: %.3f -> %.3f", first, last);
    int ok = t.n_last_eval == 2;
    for (int i = 0; i < t.n_last_eval; i++) {
        const EvalRow *e = &t.last_eval[i];
        ok &= isfinite(e->loss) && e->loss > 0 && e->loss < first && fabs(e->ppl - exp(e->loss)) < 1e-9 * e->ppl;
        ok &= e->samples == 8;
    }
    TH_CHECK(ok, "eval rows at 32 and 64 (2x the context): finite loss below the initial, ppl = exp(loss)");
    TH_CHECK(t.n_last_eval == 2 && t.last_eval[0].len == 32 && t.last_eval[1].len == 64, "eval lengths");
    trainer_free(&t);
}

/* Every family evaluates lm windows, at and beyond the training context; implicit models also
 * token by token (duality). */
static void test_families(void) {
    Task *t = lm_task((const char *[]){"context", "8", NULL});
    if (!t) return;
    const char *fam[] = {"lstm", "mamba2", "llama", "implicit_mamba2", "implicit_llama"};
    for (int f = 0; f < 5; f++) {
        Model m;
        if (make_model(&m, fam[f], task_vocab(t))) continue;
        EvalRow a, b;
        int implicit = !strncmp(fam[f], "implicit_", 9);
        TH_CHECK(eval_run(&m, t, 24, -1, 6, 4, implicit ? EVAL_BOTH : EVAL_SIMULTANEOUS, &a) == IM_OK, "%s: %s", fam[f], err_msg());
        TH_CHECK(isfinite(a.loss) && fabs(a.loss - log(256.0)) < 1.0 && a.samples == 6 && a.ppl > 0, "%s: untrained loss %.3f",
                 fam[f], a.loss);
        if (implicit) TH_CHECK(a.agree >= 0 && a.agree <= 1 && a.max_iter > 0, "%s: agreement %.3f", fam[f], a.agree);
        /* the loss by position: buckets combine to the overall loss */
        EvalPos p;
        TH_CHECK(eval_positions(&m, t, 24, 8, 6, 4, EVAL_SIMULTANEOUS, &p) == IM_OK, "%s positions: %s", fam[f], err_msg());
        TH_CHECK(eval_run(&m, t, 24, -1, 6, 4, EVAL_SIMULTANEOUS, &b) == IM_OK, "%s", err_msg());
        double sum = 0, tok = 0;
        for (int k = 0; k < p.n_buckets; k++) sum += p.loss[k] * p.tokens[k], tok += p.tokens[k];
        TH_CHECK(p.n_buckets == 3 && p.tokens[0] == 48 && tok == 144 && fabs(sum / tok - p.row.loss) < 1e-9 &&
                     p.row.loss == b.loss, "%s: buckets %.6f vs overall %.6f vs eval_run %.6f", fam[f], sum / tok, p.row.loss,
                 b.loss);
        model_free(&m);
    }
    task_free(t);
}

static void test_pos_files(void) {
    Task *t = lm_task((const char *[]){"context", "8", NULL});
    Model m;
    if (!t || make_model(&m, "lstm", 256)) return;
    EvalPos p[2];
    EvalRow rows[1];
    TH_CHECK(eval_positions(&m, t, 20, 8, 5, 8, EVAL_SIMULTANEOUS, &p[0]) == IM_OK, "%s", err_msg());
    TH_CHECK(p[0].n_buckets == 3 && p[0].tokens[2] == 20 && p[0].tokens[0] == 40, "ragged last bucket (positions 16-19)");
    TH_CHECK(eval_positions(&m, t, 16, 8, 5, 8, EVAL_SEQUENTIAL, &p[1]) == IM_OK, "%s", err_msg());
    TH_CHECK(eval_positions(&m, t, 16, 0, 5, 8, EVAL_SIMULTANEOUS, &p[1]) == IM_EINVAL, "width 0 rejected");
    TH_CHECK(eval_positions(&m, t, 200, 2, 5, 8, EVAL_SIMULTANEOUS, &p[1]) == IM_EINVAL, "too many buckets rejected");
    TH_CHECK(eval_positions(&m, t, 16, 8, 5, 8, EVAL_SEQUENTIAL, &p[1]) == IM_OK, "%s", err_msg());
    TH_CHECK(eval_run(&m, t, 8, -1, 5, 8, EVAL_SIMULTANEOUS, &rows[0]) == IM_OK, "%s", err_msg());
    const char *csv = path_in("pos.csv"), *js = path_in("curve.json"), *rcsv = path_in("rows.csv");
    TH_CHECK(eval_write_pos_csv(csv, p, 2) == IM_OK, "%s", err_msg());
    size_t n;
    char *text = (char *)read_file(csv, &n);
    int lines = 0;
    for (char *c = text; *c; c++) lines += *c == '\n';
    const char *head = "len,width,lo,hi,mode,max_iter,samples,tokens,loss,ppl\n20,8,0,7,simultaneous,,5,40,";
    TH_CHECK(lines == 1 + 3 + 2 && !strncmp(text, head, strlen(head)) &&
                 strstr(text, "\n20,8,16,19,") && strstr(text, "\n16,8,8,15,sequential,,5,40,"), "positions csv:\n%s", text);
    free(text);
    TH_CHECK(eval_write_csv(rcsv, rows, 1) == IM_OK, "%s", err_msg());
    text = (char *)read_file(rcsv, &n);
    TH_CHECK(strstr(text, ",seconds,ppl\n") != NULL, "rows csv gains a ppl column for lm rows");
    free(text);
    TH_CHECK(eval_write_json_pos(js, "ck", "lm", rows, 1, NULL, 0.9, p, 2) == IM_OK, "%s", err_msg());
    text = (char *)read_file(js, &n);
    Json *j = NULL;
    TH_CHECK(json_parse(&j, text, n) == IM_OK, "json: %s", err_msg());
    if (j) {
        const Json *pos = json_get(j, "positions"), *b0 = json_at(json_get(json_at(pos, 0), "buckets"), 2);
        TH_CHECK(!json_get(j, "metric") && !json_get(j, "longest_len") && json_get(json_at(json_get(j, "rows"), 0), "ppl"),
                 "lm json: ppl per row, no accuracy criterion");
        TH_CHECK(json_len(pos) == 2 && json_get(b0, "lo")->integer == 16 && json_get(b0, "hi")->integer == 19 &&
                     json_get(b0, "loss")->number == p[0].loss[2] && json_get(json_at(pos, 1), "width")->integer == 8,
                 "json positions");
        json_free(j);
    }
    free(text);
    model_free(&m);
    task_free(t);
}

int main(void) {
    th_name = "textdata";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_round_trip();
    test_rejects();
    char *text = make_text(1, 6000);
    write_file(path_in("corpus.txt"), text, 6000);
    free(text);
    static char tok[256];
    snprintf(tok, sizeof tok, "%s", path_in("corpus.tok"));
    corpus = tok;
    const char *texts[] = {path_in("corpus.txt")};
    CHECK(textdata_prepare(corpus, texts, 1, "byte", 0.1, 0, NULL) == IM_OK, "%s", err_msg());
    test_lm_task();
    test_lm_config_errors();
    test_families();
    test_pos_files();
    test_train_tiny();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return th_done();
}
