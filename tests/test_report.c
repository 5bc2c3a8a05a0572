/* test_report.c: the HTML run report from run folders written by hand: every panel appears
 * exactly when its data exists, a killed / resumed / edited log is read and noted, user text is
 * escaped, several runs overlay, and bad input (not a run folder, unreadable log, bad config,
 * an output path over a non-HTML file) is refused with a message. */
#include "th.h"

#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/core/fsutil.h"
#include "../src/io/keyjson.h"
#include "../src/io/tbevents.h"
#include "../src/train/run_report.h"
#include "../src/train/trainer.h"

static char root[] = "/tmp/test_report_XXXXXX";

static void put(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) { printf("FAIL: cannot write %s\n", path); exit(2); }
    fputs(text, f);
    fclose(f);
}

static const char *CONFIG =
    "{\"model\": {\"model\": \"implicit_mamba2\", \"d_model\": 16, \"n_layer\": 1}, "
    "\"task\": {\"task\": \"word\", \"group\": \"S3\", \"monoid\": \"aperiodic\", \"p\": 0.9, \"train_len\": 16, \"context\": 0}, "
    "\"train\": {\"steps\": 40}}";

/* 40 logged steps of an implicit model, a curriculum switch at 21, a resume at step 30 that
 * repeated steps 31..35 (elapsed restarts), evaluations at 20 and 40 (two lengths, two p, both
 * modes with agreement and histograms), a malformed line and a torn last line. */
static void write_log(const char *dir, int implicit) {
    char path[1024];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    FILE *f = fopen(path, "w");
    for (int pass = 0; pass < 2; pass++)
        for (int s = pass ? 31 : 1; s <= (pass ? 40 : 35); s++) {
            double el = pass ? (s - 30) * 0.5 : s * 0.5;
            fprintf(f, "{\"type\":\"train\",\"step\":%d,\"loss\":%g,\"acc\":%g,\"grad_norm\":%g,\"lr\":%g,\"tok_s\":%g,"
                       "\"elapsed\":%g", s, 3.0 / s, 0.02 * s, 1.0 / s, 1e-3, 5000.0 + s, el);
            if (implicit)
                fprintf(f, ",\"phase\":\"%s\",\"fp_iters\":%d,\"fp_rel_res\":%g,\"fp_rel_res_max\":%g,\"fp_step_max\":%d",
                        s <= 20 ? "unrolled" : "phantom", 4 + s % 5, 0.1 / s, 0.3 / s, 8);
            fprintf(f, "}\n");
            if (s == 12 && !pass) fprintf(f, "{\"type\":\"train\",\"step\":13,\"loss\":\n");   /* hand-edited */
            if ((s == 20 && !pass) || (s == 40 && pass))
                for (int len = 16; len <= 64; len *= 4)
                    for (int q = 0; q < 2; q++)
                        fprintf(f, "{\"type\":\"eval\",\"step\":%d,\"len\":%d,\"p\":%g,\"samples\":64,\"loss\":0.1,"
                                   "\"tok_acc\":0.9,\"last10_acc\":0.9,\"seq_acc\":%g,\"seconds\":1,\"mode\":\"both\"%s}\n",
                                s, len, q ? 0.5 : 0.9, len == 16 ? 0.95 : 0.5,
                                implicit ? ",\"max_iter\":64,\"iters\":7.5,\"agree\":0.97,"
                                           "\"iter_hist\":[0,0,1,5,20,30,4,0,0,0]" : "");
        }
    fprintf(f, "{\"type\":\"train\",\"step\":41,\"lo");   /* killed mid-line */
    fclose(f);
}

/* An `implicit eval --json` file with three iteration caps and loss by position. */
static const char *EVAL_JSON =
    "{\"checkpoint\": \"x\", \"task\": \"word\", \"metric\": \"seq_acc\", \"rows\": ["
    "{\"len\": 16, \"p\": 0.5, \"samples\": 8, \"loss\": 1, \"tok_acc\": 0.5, \"last10_acc\": 0.5, \"seq_acc\": 0.2, \"mode\": \"simultaneous\", \"max_iter\": 2, \"iters\": 2},"
    "{\"len\": 16, \"p\": 0.5, \"samples\": 8, \"loss\": 1, \"tok_acc\": 0.6, \"last10_acc\": 0.6, \"seq_acc\": 0.5, \"mode\": \"simultaneous\", \"max_iter\": 8, \"iters\": 8},"
    "{\"len\": 16, \"p\": 0.5, \"samples\": 8, \"loss\": 1, \"tok_acc\": 0.9, \"last10_acc\": 0.9, \"seq_acc\": 0.9, \"mode\": \"simultaneous\", \"max_iter\": 32, \"iters\": 20}],"
    "\"positions\": [{\"len\": 64, \"width\": 16, \"samples\": 4, \"mode\": \"simultaneous\", \"loss\": 1, \"ppl\": 2.7, "
    "\"buckets\": [{\"lo\": 0, \"hi\": 15, \"tokens\": 60, \"loss\": 1.5, \"ppl\": 4.5}, {\"lo\": 16, \"hi\": 31, \"tokens\": 64, \"loss\": 1.2, \"ppl\": 3.3}]}]}\n";

static char *render(RunReport *r) {
    TextBuf b;
    text_init(&b);
    run_report_render(r, &b);
    return b.data;
}

static int has_panel(const char *html, const char *id) {
    char want[96];
    snprintf(want, sizeof want, "id=\"panel-%s\"", id);
    const char *s = strstr(html, want);
    if (!s) return 0;
    const char *end = strstr(s, "</svg>"), *d = strstr(s, "<path d=\"M");
    const char *bar = strstr(s, "<rect x=");
    return end && ((d && d < end) || (bar && bar < end));   /* drawn data, not an empty frame */
}

static void test_full_run(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/imp", root);
    mkdir(dir, 0755);
    put(dir, "config.json", CONFIG);
    write_log(dir, 1);
    put(dir, "ttc.json", EVAL_JSON);
    put(dir, "other.json", "{\"not\": \"an evaluation\"}");
    RunReport *r = run_report_new(NULL);
    TH_CHECK(run_report_add_run(r, dir) == 0, "add a run folder: %s", err_msg());
    char *html = render(r);
    TH_CHECK(html && !strncmp(html, "<!DOCTYPE html>", 15) && strstr(html, "</html>"), "an HTML page");
    const char *want[] = {"loss-step", "loss-time", "acc-step", "acc-time", "lr", "grad-norm", "tok-s", "solver-iters",
                          "solver-res", "eval-steps", "eval-len", "eval-p", "ttc", "eval-iters", "hist", "duality",
                          "positions"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) TH_CHECK(has_panel(html, want[i]), "panel %s drawn", want[i]);
    TH_CHECK(!has_panel(html, "gap") && !strstr(html, "panel-solver-conv"), "no panel without its data");
    TH_CHECK(strstr(html, "1 malformed line skipped (first: line 13)") != NULL, "the malformed line is noted");
    TH_CHECK(strstr(html, "torn last line skipped") != NULL, "the torn line is noted");
    TH_CHECK(strstr(html, "5 records replaced by later ones") != NULL, "the repeated steps are noted");
    TH_CHECK(strstr(html, ">phantom</text>") != NULL, "the curriculum switch is marked");
    TH_CHECK(strstr(html, "longest &gt; 90%: 16") != NULL, "the longest length above 90%% is marked");
    TH_CHECK(strstr(html, "train length 16") != NULL, "the training length is marked");
    TH_CHECK(strstr(html, "word problem S3 x aperiodic, p 0.90, length 16") && strstr(html, "40 of 40"), "header table");
    /* wall-clock over the resume: 15 s (steps 1..30) + 5 s after it */
    TH_CHECK(strstr(html, "<td>20.0 s</td>") != NULL, "wall-clock joins the resumed segment");
    TH_CHECK(strstr(html, "id=\"final-eval\"") && strstr(html, "log, step 40") && strstr(html, "ttc.json"), "final table");
    int foreign = 0;
    for (const char *u = html; (u = strstr(u, "http")); u++) foreign += strncmp(u, "http://www.w3.org/2000/svg\"", 27) != 0;
    TH_CHECK(!strstr(html, "<script") && !foreign, "no scripts; no address but the SVG namespace (%d)", foreign);
    TH_CHECK(!strstr(html, "https:") && !strstr(html, "@import") && !strstr(html, "url("), "nothing from the network");
    free(html);
    run_report_free(r);
}

static void test_overlay_and_escaping(void) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/exp<&\"'", root);
    snprintf(b, sizeof b, "%s/imp", root);
    mkdir(a, 0755);
    put(a, "config.json", CONFIG);
    write_log(a, 0);
    RunReport *r = run_report_new("<b>my & title</b>");
    TH_CHECK(run_report_add_run(r, a) == 0 && run_report_add_run(r, b) == 1, "two runs: %s", err_msg());
    char *html = render(r);
    TH_CHECK(html && strstr(html, "&lt;b&gt;my &amp; title&lt;/b&gt;") && !strstr(html, "<b>my"), "title escaped");
    TH_CHECK(!strstr(html, "exp<&") && strstr(html, "exp&lt;&amp;&quot;&#39;"), "a folder name is escaped");
    /* the loss panel of two runs has a legend naming both */
    const char *loss = strstr(html, "id=\"panel-loss-step\""), *end = loss ? strstr(loss, "</svg>") : NULL;
    char *seg = loss && end ? strndup(loss, (size_t)(end - loss)) : NULL;
    TH_CHECK(seg && strstr(seg, "exp&lt;&amp;") && strstr(seg, "/imp</text>"), "legend of the overlay");
    TH_CHECK(seg && strstr(seg, svg_color(0)) && strstr(seg, svg_color(1)), "one colour per run");
    free(seg);
    TH_CHECK(has_panel(html, "solver-iters"), "the implicit run's solver panel remains");
    free(html);
    run_report_free(r);
    /* the explicit run alone: no solver panels */
    r = run_report_new(NULL);
    run_report_add_run(r, a);
    html = render(r);
    TH_CHECK(html && !strstr(html, "panel-solver") && !strstr(html, "panel-hist") && !strstr(html, "panel-duality") &&
                 has_panel(html, "eval-len"), "explicit run: no solver, histogram or duality panels");
    free(html);
    run_report_free(r);
}

static void test_bad_input(void) {
    char d[1024], path[1100];
    RunReport *r = run_report_new(NULL);
    snprintf(d, sizeof d, "%s/nope", root);
    TH_CHECK(run_report_add_run(r, d) == IM_EIO && strstr(err_msg(), "cannot open run folder"), "missing: %s", err_msg());
    snprintf(d, sizeof d, "%s/empty", root);
    mkdir(d, 0755);
    TH_CHECK(run_report_add_run(r, d) == IM_EINVAL && strstr(err_msg(), "is not a run folder"), "empty: %s", err_msg());
    snprintf(path, sizeof path, "%s/imp/ttc.json", root);
    TH_CHECK(run_report_add_run(r, path) == IM_EINVAL && strstr(err_msg(), "is not a folder"), "a file: %s", err_msg());
    snprintf(d, sizeof d, "%s/logdir", root);
    mkdir(d, 0755);
    snprintf(path, sizeof path, "%s/log.jsonl", d);
    mkdir(path, 0755);
    TH_CHECK(run_report_add_run(r, d) == IM_EIO && strstr(err_msg(), "not a regular file"), "log a folder: %s", err_msg());
    snprintf(d, sizeof d, "%s/badcfg", root);
    mkdir(d, 0755);
    put(d, "config.json", "{\"model\": ");
    TH_CHECK(run_report_add_run(r, d) == IM_EFORMAT && strstr(err_msg(), "config.json"), "bad config: %s", err_msg());
    TH_CHECK(run_report_runs(r) == 0, "no run added by a failure");
    int run = run_report_add_source(r, "x");
    TH_CHECK(run_report_add_eval_json(r, run, "[1]", 3, "e.json") == IM_EFORMAT && strstr(err_msg(), "not an evaluation file"),
             "eval JSON without rows: %s", err_msg());
    run_report_free(r);
    /* output paths: never over a log, a config or a checkpoint; over an earlier report, yes */
    snprintf(path, sizeof path, "%s/imp/log.jsonl", root);
    TH_CHECK(run_report_check_out(path) == IM_EIO && strstr(err_msg(), "is not an HTML page"), "over a log: %s", err_msg());
    snprintf(path, sizeof path, "%s/imp", root);
    TH_CHECK(run_report_check_out(path) == IM_EIO, "over a folder");
    snprintf(path, sizeof path, "%s/imp/report.html", root);
    TH_CHECK(run_report_folder(d) != IM_OK, "a folder that fails writes nothing");
    snprintf(d, sizeof d, "%s/imp", root);
    TH_CHECK(run_report_folder(d) == IM_OK && access(path, F_OK) == 0, "report.html written: %s", err_msg());
    TH_CHECK(run_report_check_out(path) == IM_OK && run_report_folder(d) == IM_OK, "an earlier report is replaced");
    TH_CHECK(run_report_check_out("-") == IM_OK, "standard output");
    TH_CHECK(run_report_check_out(NULL) == IM_OK, "no path: nothing to check");
}

/* `implicit train` writes report.html at each checkpoint and at the end; report 0 turns it off. */
static int train_tiny(const char *out, int report, int steps) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg c;
    cfg_defaults(&m);
    task_cfg_defaults(&t);
    train_cfg_defaults(&c);
    cfg_set(&m, "model", "lstm");
    cfg_set(&m, "d_model", "8");
    keytab_set(&task_keytab, &t, "group", "S3");
    keytab_set(&task_keytab, &t, "train_len", "8");
    keytab_set(&task_keytab, &t, "eval_lens", "8");
    keytab_set(&task_keytab, &t, "eval_samples", "8");
    Task *tk;
    if (task_create(&tk, &t)) return -1;
    m.vocab_size = task_vocab(tk);
    task_free(tk);
    snprintf(c.out, sizeof c.out, "%s", out);
    c.steps = steps, c.batch = 4, c.log_every = 1, c.ckpt_every = 2, c.eval_every = 0, c.report = report;
    snprintf(c.progress, sizeof c.progress, "none");
    Trainer tr;
    int rc = trainer_init(&tr, &m, &t, &c);
    if (!rc) rc = trainer_run(&tr, 2);   /* stop at the first checkpoint: its report is there */
    char path[1100];
    snprintf(path, sizeof path, "%s/report.html", out);
    int at_ckpt = access(path, F_OK) == 0;
    if (!rc) rc = trainer_run(&tr, 0);
    trainer_free(&tr);
    return rc ? -1 : at_ckpt;
}

static void test_trainer(void) {
    char out[1024], path[1100];
    snprintf(out, sizeof out, "%s/tr", root);
    int at_ckpt = train_tiny(out, 1, 4);
    TH_CHECK(at_ckpt == 1, "report.html after the first checkpoint (%d: %s)", at_ckpt, err_msg());
    snprintf(path, sizeof path, "%s/report.html", out);
    FILE *f = fopen(path, "rb");
    char *html = NULL;
    size_t n = 0;
    if (f) fs_read_all(f, 0, &html, &n), fclose(f);
    TH_CHECK(html && has_panel(html, "loss-step") && strstr(html, "4 of 4") && strstr(html, "final-eval"),
             "the end's report shows the whole run");
    const char *params = html ? strstr(html, "</td><td>") : NULL;   /* the cell after the model's */
    TH_CHECK(html && strstr(html, " thread") && params && params[9] >= '1' && params[9] <= '9',
             "threads and the parameter count from the start record");
    free(html);
    snprintf(out, sizeof out, "%s/tr0", root);
    TH_CHECK(train_tiny(out, 0, 2) == 0, "report 0: no report.html");
    snprintf(path, sizeof path, "%s/report.html", out);
    TH_CHECK(access(path, F_OK) != 0, "report 0 wrote nothing");
}

/* The records of an event file, checked: both CRCs of every record; the tags and values of its
 * scalars (Summary.Value: tag, simple_value) in order. Returns the record count, -1 when broken. */
static int tb_parse(const char *path, char tags[][64], float *vals, int cap, int *n_scalars) {
    FILE *f = fopen(path, "rb");
    char *d = NULL;
    size_t n = 0, i = 0;
    *n_scalars = 0;
    if (!f || fs_read_all(f, 0, &d, &n)) { if (f) fclose(f); return -1; }
    fclose(f);
    int recs = 0;
    *n_scalars = 0;
    while (i + 12 <= n) {
        uint64_t len = 0;
        uint32_t c1 = 0, c2 = 0;
        for (int k = 7; k >= 0; k--) len = len << 8 | (unsigned char)d[i + k];
        for (int k = 3; k >= 0; k--) c1 = c1 << 8 | (unsigned char)d[i + 8 + k];
        if (i + 16 + len > n) break;
        for (int k = 3; k >= 0; k--) c2 = c2 << 8 | (unsigned char)d[i + 12 + len + k];
        uint32_t m1 = tb_crc32c(d + i, 8), m2 = tb_crc32c(d + i + 12, len);
        m1 = ((m1 >> 15) | (m1 << 17)) + 0xa282ead8u, m2 = ((m2 >> 15) | (m2 << 17)) + 0xa282ead8u;
        if (m1 != c1 || m2 != c2) { free(d); return -1; }
        const unsigned char *e = (const unsigned char *)d + i + 12;
        /* Event: 0x09 + 8 bytes wall_time, 0x10 + varint step, then 0x2a summary or 0x1a version */
        size_t q = 9 + 1;
        while (e[q] & 0x80) q++;
        q++;
        if (e[q] == 0x2a && *n_scalars < cap) {
            size_t t = q + 1;
            while (e[t] & 0x80) t++;   /* summary length */
            t += 2;                    /* 0x0a, value length (< 128 here) */
            while (e[t] & 0x80) t++;
            if (e[t + 1] == 0x0a) {    /* Value.tag */
                size_t tl = e[t + 2];
                snprintf(tags[*n_scalars], 64, "%.*s", (int)tl, (const char *)e + t + 3);
                if (e[t + 3 + tl] == 0x15) memcpy(&vals[*n_scalars], e + t + 4 + tl, 4);
                ++*n_scalars;
            }
        }
        recs++;
        i += 16 + len;
    }
    free(d);
    return i == n ? recs : -1;
}

static void test_tensorboard(void) {
    TH_CHECK(tb_crc32c("123456789", 9) == 0xe3069283u, "CRC-32C check value: %08x", tb_crc32c("123456789", 9));
    TH_CHECK(tb_crc32c("", 0) == 0, "CRC-32C of nothing");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tb", root);
    TbWriter w;
    TH_CHECK(tb_open(&w, dir) == IM_OK, "open: %s", err_msg());
    TH_CHECK(tb_scalar(&w, "train/loss", 5, 1.7e9, 0.25) == IM_OK && tb_scalar(&w, "eval/seq_acc/len_8", 300, 1.7e9, 0.75) == IM_OK,
             "scalars written");
    char path[4200];
    snprintf(path, sizeof path, "%s", w.path);
    tb_close(&w);
    tb_close(&w);
    char tags[8][64];
    float vals[8];
    int ns = 0, recs = tb_parse(path, tags, vals, 8, &ns);
    TH_CHECK(recs == 3 && ns == 2, "version + 2 scalar records with good CRCs (%d records, %d scalars)", recs, ns);
    TH_CHECK(ns == 2 && !strcmp(tags[0], "train/loss") && vals[0] == 0.25f && !strcmp(tags[1], "eval/seq_acc/len_8") &&
                 vals[1] == 0.75f, "tags and values read back");
    snprintf(path, sizeof path, "%s/imp/log.jsonl/x", root);
    TH_CHECK(tb_open(&w, path) == IM_EIO, "a folder under a file is refused: %s", err_msg());
}

int main(void) {
    th_name = "test_report";
    if (!mkdtemp(root)) { printf("FAIL: mkdtemp\n"); return 1; }
    test_full_run();
    test_overlay_and_escaping();
    test_bad_input();
    test_trainer();
    test_tensorboard();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) printf("note: could not remove %s\n", root);
    char host[160];
    run_report_host_cpu(host, sizeof host);
    TH_CHECK(host[0] != 0, "a host CPU name");
    return th_done();
}
