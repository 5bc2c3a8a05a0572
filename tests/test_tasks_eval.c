/* test_tasks_eval.c: evaluation on the copy, formal and catbAbI tasks and the length-
 * generalisation outputs (src/train/evaluate.c): a freshly initialised tiny LSTM is evaluated
 * through eval_run (sample counts, the val mix, scaled accuracy, catbAbI's window cap, the
 * sequential pass agreeing with the parallel one), then the curve is written with
 * eval_write_csv / eval_write_json and read back; the longest-length summary is checked on
 * hand-made rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/io/json.h"
#include "../src/models/model.h"
#include "../src/train/evaluate.h"
#include "th.h"

static Task *make_task(const char *const *kv) {
    TaskCfg c;
    task_cfg_defaults(&c);
    for (int i = 0; kv && kv[i]; i += 2) TH_CHECK(task_cfg_set(&c, kv[i], kv[i + 1]) == IM_OK, "set %s: %s", kv[i], err_msg());
    Task *t = NULL;
    TH_CHECK(task_create(&t, &c) == IM_OK && t, "task_create: %s", err_msg());
    return t;
}

static int make_lstm(Model *m, int V) {
    ModelCfg c;
    cfg_defaults(&c);
    cfg_set(&c, "model", "lstm");
    cfg_set(&c, "d_model", "16");
    cfg_set(&c, "n_layer", "1");
    c.vocab_size = V;
    int rc = model_create(m, &c);
    TH_CHECK(rc == IM_OK, "lstm: %s", err_msg());
    if (!rc) model_init_params(m, 11);
    return rc;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc((size_t)n + 1, 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    fclose(f);
    return s;
}

static void test_formal_and_files(void) {
    Task *t = make_task((const char *[]){"task", "parity", "eval_pad", "tight", NULL});
    Model m;
    if (!t || make_lstm(&m, task_vocab(t))) return;
    int lens[3] = {TASK_LEN_VAL, 5, 300};
    EvalRow rows[3];
    for (int i = 0; i < 3; i++) TH_CHECK(eval_run(&m, t, lens[i], -1, 40, 16, EVAL_SIMULTANEOUS, &rows[i]) == IM_OK, "%s", err_msg());
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        const EvalRow *r = &rows[i];
        ok &= r->samples == 40 && r->p < 0 && r->chance == 0.5 && r->tok_acc == r->seq_acc;
        ok &= r->scaled_acc == (r->tok_acc - 0.5) / 0.5 && r->loss > 0;
    }
    TH_CHECK(ok, "parity rows: one answer per row (tok = seq), chance 1/2, scaled = 2 acc - 1");
    TH_CHECK(rows[0].len_min == 40 && rows[0].len_max == 256 && rows[1].len_min == 5 && rows[2].len_max == 300, "length ranges");
    double v;
    int hib;
    TH_CHECK(eval_metric(&rows[1], "scaled_acc", &v, &hib) == IM_OK && v == rows[1].scaled_acc && hib, "scaled_acc metric");
    /* CSV */
    char dir[] = "/tmp/test_tasks_eval_XXXXXX", csv[128], js[128];
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(csv, sizeof csv, "%s/curve.csv", dir);
    snprintf(js, sizeof js, "%s/curve.json", dir);
    TH_CHECK(eval_write_csv(csv, rows, 3) == IM_OK, "write csv: %s", err_msg());
    char *text = slurp(csv);
    TH_CHECK(text != NULL, "read csv");
    if (text) {
        const char *header =
            "len,len_min,len_max,p,mode,samples,loss,tok_acc,last10_acc,seq_acc,scaled_acc,max_iter,iters,agree,conv_sim,conv_seq,seconds\n";
        TH_CHECK(!strncmp(text, header, strlen(header)), "csv header");
        int lines = 0, fields_ok = 1;
        for (char *line = text + strlen(header), *nl; *line; line = nl + 1) {
            nl = strchr(line, '\n');
            if (!nl) { fields_ok = 0; break; }
            *nl = 0;
            int commas = 0;
            for (char *c = line; *c; c++) commas += *c == ',';
            fields_ok &= commas == 16;
            double tok = 0, scaled = 0;
            char len[16];
            int lo, hi, samples;
            fields_ok &= sscanf(line, "%15[^,],%d,%d,,simultaneous,%d,%*g,%lg,%*g,%*g,%lg", len, &lo, &hi, &samples, &tok, &scaled) == 6;
            fields_ok &= tok == rows[lines].tok_acc && scaled == rows[lines].scaled_acc && samples == 40;
            fields_ok &= lines ? atoi(len) == rows[lines].len : !strcmp(len, "val");
            lines++;
        }
        TH_CHECK(fields_ok && lines == 3, "csv rows round-trip (%d lines)", lines);
        free(text);
    }
    /* JSON */
    TH_CHECK(eval_write_json(js, "ck.safetensors", "parity", rows, 3, "tok_acc", 0.9) == IM_OK, "write json: %s", err_msg());
    text = slurp(js);
    Json *j = NULL;
    TH_CHECK(text && json_parse(&j, text, strlen(text)) == IM_OK, "parse json: %s", err_msg());
    if (j) {
        const Json *r = json_get(j, "rows");
        TH_CHECK(json_len(r) == 3 && !strcmp(json_get(j, "task")->string, "parity") &&
                     !strcmp(json_get(j, "metric")->string, "tok_acc") && json_get(j, "longest_len")->is_int,
                 "json header");
        const Json *r0 = json_at(r, 0), *r2 = json_at(r, 2);
        TH_CHECK(json_get(r0, "len")->type == JSON_STRING && !strcmp(json_get(r0, "len")->string, "val") &&
                     json_get(r0, "len_min")->integer == 40 && json_get(r0, "len_max")->integer == 256,
                 "json val row");
        TH_CHECK(json_get(r2, "len")->integer == 300 && !json_get(r2, "len_min") && json_get(r2, "p") == NULL &&
                     json_get(r2, "scaled_acc")->number == rows[2].scaled_acc && json_get(r2, "tok_acc")->number == rows[2].tok_acc &&
                     json_get(r2, "chance")->number == 0.5,
                 "json length row");
        json_free(j);
    }
    free(text);
    unlink(csv);
    unlink(js);
    rmdir(dir);
    model_free(&m);
    task_free(t);
}

static void test_copy_and_babi(void) {
    Task *t = make_task((const char *[]){"task", "copy", "eval_pad", "tight", NULL});
    Model m;
    if (!t || make_lstm(&m, task_vocab(t))) return;
    EvalRow r;
    TH_CHECK(eval_run(&m, t, 6, -1, 24, 8, EVAL_BOTH, &r) == IM_OK, "%s", err_msg());
    TH_CHECK(r.samples == 24 && r.chance == 0 && r.scaled_acc == r.tok_acc && r.seq_acc <= r.tok_acc, "copy row");
    TH_CHECK(r.agree > 0.999, "LSTM sequential vs parallel argmax agreement %g", r.agree);
    model_free(&m);
    task_free(t);
    t = make_task((const char *[]){"task", "catbabi", "babi_dir", "tests/fixtures/babi_small", NULL});
    if (!t || make_lstm(&m, task_vocab(t))) return;
    TH_CHECK(eval_run(&m, t, 20, -1, 1000, 8, EVAL_SIMULTANEOUS, &r) == IM_OK, "%s", err_msg());
    /* 41 stream tokens = 3 windows of 20; 3 answers in the valid split */
    TH_CHECK(r.samples == 3 && r.len_min == 20, "catbabi: samples capped to the windows (%d)", r.samples);
    model_free(&m);
    task_free(t);
}

static void test_length_summary(void) {
    EvalRow rows[6];
    memset(rows, 0, sizeof rows);
    int lens[6] = {TASK_LEN_VAL, 8, 16, 32, 64, 128};
    double acc[6] = {1.0, 1.0, 0.95, 0.5, 0.92, 0.9};
    for (int i = 0; i < 6; i++) rows[i].len = lens[i], rows[i].seq_acc = acc[i], rows[i].tok_acc = 1;
    int longest, first;
    eval_length_summary(rows, 6, "seq_acc", 0.9, &longest, &first);
    TH_CHECK(longest == 64 && first == 32, "longest %d (64), first at or below %d (32)", longest, first);
    eval_length_summary(rows, 6, "tok_acc", 0.9, &longest, &first);
    TH_CHECK(longest == 128 && first == 0, "all above: longest %d, first %d", longest, first);
    eval_length_summary(rows, 1, "seq_acc", 0.9, &longest, &first);
    TH_CHECK(longest == 0 && first == 0, "the val row alone never counts");
}

/* A Fixed-Point RNN's rows carry the reference's iteration convention too: iters_ref = iters + 1
 * in the row, a last CSV column "iters_ref" and a JSON member, in both evaluation modes. */
static void test_fp_iters_ref(void) {
    Task *t = make_task((const char *[]){"task", "parity", NULL});
    if (!t) return;
    ModelCfg c;
    cfg_defaults(&c);
    cfg_set(&c, "model", "fp_mamba");
    cfg_set(&c, "d_model", "8");
    cfg_set(&c, "d_state", "4");
    c.vocab_size = task_vocab(t);
    Model m;
    TH_CHECK(model_create(&m, &c) == IM_OK, "fp_mamba: %s", err_msg());
    model_init_params(&m, 12);
    EvalRow rows[2];
    TH_CHECK(eval_run(&m, t, 5, -1, 4, 4, EVAL_SIMULTANEOUS, &rows[0]) == IM_OK &&
             eval_run(&m, t, 5, -1, 4, 4, EVAL_SEQUENTIAL, &rows[1]) == IM_OK, "fp eval: %s", err_msg());
    for (int i = 0; i < 2; i++)
        TH_CHECK(rows[i].iters >= 1 && rows[i].iters_ref == rows[i].iters + 1, "%s: iters %g, iters_ref %g",
                 eval_mode_name(rows[i].mode), rows[i].iters, rows[i].iters_ref);
    char dir[] = "/tmp/test_tasks_eval_XXXXXX", csv[128], js[128];
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(csv, sizeof csv, "%s/fp.csv", dir);
    snprintf(js, sizeof js, "%s/fp.json", dir);
    TH_CHECK(eval_write_csv(csv, rows, 2) == IM_OK && eval_write_json(js, "x", "parity", rows, 2, NULL, 0) == IM_OK,
             "write: %s", err_msg());
    char *text = slurp(csv), *jt = slurp(js);
    const char *nl = text ? strchr(text, '\n') : NULL;
    TH_CHECK(nl && nl - text > 10 && !strncmp(nl - 10, ",iters_ref", 10), "csv header ends with iters_ref");
    Json *j = NULL;
    TH_CHECK(jt && json_parse(&j, jt, strlen(jt)) == IM_OK, "json");
    const Json *r = j ? json_get(j, "rows") : NULL, *r0 = r && json_len(r) == 2 ? json_at(r, 1) : NULL;
    const Json *ir = r0 ? json_get(r0, "iters_ref") : NULL, *it = r0 ? json_get(r0, "iters") : NULL;
    TH_CHECK(ir && it && ir->number == it->number + 1, "json row: iters_ref = iters + 1");
    json_free(j);
    free(text);
    free(jt);
    remove(csv);
    remove(js);
    rmdir(dir);
    model_free(&m);
    task_free(t);
}

int main(void) {
    th_name = "test_tasks_eval";
    test_fp_iters_ref();
    test_formal_and_files();
    test_copy_and_babi();
    test_length_summary();
    return th_done();
}
