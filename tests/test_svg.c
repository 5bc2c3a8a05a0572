/* test_svg.c: the SVG plot writer (scales, nice ticks, tick labels, escaping of user text, lines
 * broken at NaN and at non-positive values on log axes) and the tolerant JSONL reader (torn last
 * line, malformed lines, duplicated steps of a resumed run). */
#include "th.h"

#include "../src/core/check.h"
#include "../src/io/jsonl.h"
#include "../src/io/svg.h"

static int ticks_are(SvgScaleKind k, double lo, double hi, int want, double elo, double ehi, const double *exp, int n) {
    double t[64];
    int m = svg_ticks(k, &lo, &hi, want, t, 64), ok = m == n && fabs(lo - elo) <= 1e-12 * fabs(elo) + 1e-300 &&
                                                       fabs(hi - ehi) <= 1e-12 * fabs(ehi) + 1e-300;
    for (int i = 0; ok && i < n; i++) ok = fabs(t[i] - exp[i]) <= 1e-9 * (fabs(exp[i]) + 1e-300);
    if (!ok) {
        printf("  ticks [%g, %g], %d:", lo, hi, m);
        for (int i = 0; i < m; i++) printf(" %g", t[i]);
        printf("\n");
    }
    return ok;
}

static void test_linear_ticks(void) {
    TH_CHECK(ticks_are(SVG_LINEAR, 0, 1, 6, 0, 1, (double[]){0, 0.2, 0.4, 0.6, 0.8, 1}, 6), "0..1");
    TH_CHECK(ticks_are(SVG_LINEAR, 3, 997, 6, 0, 1000, (double[]){0, 200, 400, 600, 800, 1000}, 6), "3..997 widens to 0..1000");
    TH_CHECK(ticks_are(SVG_LINEAR, 5.17, 5.48, 5, 5.1, 5.5, (double[]){5.1, 5.2, 5.3, 5.4, 5.5}, 5), "narrow range");
    TH_CHECK(ticks_are(SVG_LINEAR, -0.3, 0.2, 6, -0.3, 0.2, (double[]){-0.3, -0.2, -0.1, 0, 0.1, 0.2}, 6), "zero is exact");
    TH_CHECK(ticks_are(SVG_LINEAR, 2, 2, 5, 1.8, 2.2, (double[]){1.8, 1.9, 2, 2.1, 2.2}, 5), "a single value is widened");
    TH_CHECK(ticks_are(SVG_LINEAR, 0, 0, 3, -1, 1, (double[]){-1, 0, 1}, 3), "zero alone");
    TH_CHECK(ticks_are(SVG_LINEAR, 7, 1, 4, 0, 8, (double[]){0, 2, 4, 6, 8}, 5), "reversed input is ordered");
    double lo = NAN, hi = INFINITY, t[8];
    int n = svg_ticks(SVG_LINEAR, &lo, &hi, 5, t, 8);
    TH_CHECK(n >= 2 && lo == 0 && hi == 1, "no finite data: 0..1 (got %d ticks, %g..%g)", n, lo, hi);
    lo = 0, hi = 1e6;
    TH_CHECK(svg_ticks(SVG_LINEAR, &lo, &hi, 6, t, 3) == 3, "at most cap ticks");
}

static void test_log_ticks(void) {
    /* ends on the 1-2-5 sequence, ticks on the decades between them */
    TH_CHECK(ticks_are(SVG_LOG10, 0.003, 7, 5, 0.002, 10, (double[]){0.01, 0.1, 1, 10}, 4), "0.003..7");
    /* four decades: every decade */
    TH_CHECK(ticks_are(SVG_LOG10, 1.5e-3, 0.8, 5, 1e-3, 1, (double[]){1e-3, 1e-2, 1e-1, 1}, 4), "decades");
    /* within one decade: the 1-2-5 values */
    TH_CHECK(ticks_are(SVG_LOG10, 0.15, 0.9, 5, 0.1, 1, (double[]){0.1, 0.2, 0.5, 1}, 4), "1-2-5 in one decade");
    TH_CHECK(ticks_are(SVG_LOG10, 2.5, 4.5, 5, 2, 5, (double[]){2, 5}, 2), "tight 1-2-5 ends");
    /* twelve decades: every second or third */
    double lo = 1e-9, hi = 1e3, t[64];
    int n = svg_ticks(SVG_LOG10, &lo, &hi, 5, t, 64);
    TH_CHECK(n >= 3 && n <= 7 && lo == 1e-9 && hi == 1e3, "many decades thinned: %d ticks", n);
    for (int i = 0; i < n; i++) TH_CHECK(fabs(log10(t[i]) - round(log10(t[i]))) < 1e-9, "tick %g is a power of 10", t[i]);
    /* non-positive data on a log axis does not crash or loop */
    lo = -1, hi = 0;
    n = svg_ticks(SVG_LOG10, &lo, &hi, 5, t, 64);
    TH_CHECK(n >= 2 && lo > 0 && hi > lo, "log axis of non-positive data: %d ticks %g..%g", n, lo, hi);
    TH_CHECK(ticks_are(SVG_LOG2, 16, 256, 6, 16, 256, (double[]){16, 32, 64, 128, 256}, 5), "powers of 2");
    TH_CHECK(ticks_are(SVG_LOG2, 20, 100, 6, 16, 128, (double[]){16, 32, 64, 128}, 4), "log2 ends widen");
    TH_CHECK(ticks_are(SVG_LOG2, 64, 64, 6, 32, 128, (double[]){32, 64, 128}, 3), "one length");
    lo = 1, hi = 1 << 20;
    n = svg_ticks(SVG_LOG2, &lo, &hi, 5, t, 64);
    TH_CHECK(n >= 4 && n <= 7, "log2 thinned: %d ticks", n);
    TH_CHECK(fabs(svg_map(SVG_LOG10, 1, 100, 0, 200, 10) - 100) < 1e-9, "log map: 10 is half way from 1 to 100");
    TH_CHECK(fabs(svg_map(SVG_LINEAR, 0, 4, 100, 0, 1) - 75) < 1e-9, "linear map, reversed pixels");
    TH_CHECK(fabs(svg_map(SVG_LOG2, 16, 256, 0, 4, 64) - 2) < 1e-9, "log2 map");
}

static void test_labels(void) {
    char b[48];
    struct { SvgScaleKind k; double v, step; const char *want; } cases[] = {
        {SVG_LINEAR, 0.4, 0.2, "0.4"},      {SVG_LINEAR, 1, 0.2, "1.0"},       {SVG_LINEAR, 200, 100, "200"},
        {SVG_LINEAR, 5.3, 0.1, "5.3"},      {SVG_LINEAR, 0, 0.05, "0"},        {SVG_LINEAR, -1e-17, 0.1, "0.0"},
        {SVG_LINEAR, 20000, 5000, "20k"},   {SVG_LINEAR, 1500, 500, "1500"},   {SVG_LINEAR, 2.5e6, 5e5, "2.5M"},
        {SVG_LINEAR, 3e-5, 1e-5, "3e-5"},   {SVG_LINEAR, 0.002, 0.001, "0.002"},
        {SVG_LOG10, 0.001, 0, "0.001"},     {SVG_LOG10, 1e-5, 0, "1e-5"},      {SVG_LOG10, 100, 0, "100"},
        {SVG_LOG10, 1e4, 0, "10k"},         {SVG_LOG10, 1e6, 0, "1M"},         {SVG_LOG10, 1e12, 0, "1e12"},
        {SVG_LOG10, 0.2, 0, "0.2"},         {SVG_LOG2, 64, 0, "64"},           {SVG_LOG2, 0.5, 0, "0.5"},
        {SVG_LOG2, 1048576, 0, "1048576"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        svg_tick_label(cases[i].k, cases[i].v, cases[i].step, b, sizeof b);
        TH_CHECK(!strcmp(b, cases[i].want), "label of %g (step %g): '%s', want '%s'", cases[i].v, cases[i].step, b,
                 cases[i].want);
    }
}

static void test_escape(void) {
    TextBuf b;
    text_init(&b);
    text_escape(&b, "a<b & \"c\" 'd'>\x01");
    TH_CHECK(b.data && !strcmp(b.data, "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;\xEF\xBF\xBD"), "escaped: %s", b.data);
    text_free(&b);
    /* user text in every place of a plot comes out escaped: title, axis labels, legend, marks, categories */
    const char *evil = "<script>x&y</script>\"'";
    SvgPlot *p = svg_plot_new(400, 300, evil, evil, evil);
    double x[3] = {1, 2, 3}, y[3] = {1, 4, 9};
    SvgStyle st = {.color = 1, .legend = 1};
    svg_plot_line(p, x, y, 3, &st, evil);
    svg_plot_vline(p, 2, evil, 0, 1);
    svg_plot_note(p, 3, 9, evil, 2);
    svg_plot_id(p, "id\"x");
    text_init(&b);
    svg_plot_render(p, &b);
    TH_CHECK(b.data && !strstr(b.data, "<script") && !strstr(b.data, "x&y") && !strstr(b.data, "id\"x"), "raw user text in the SVG");
    int n = 0;
    for (const char *s = b.data; (s = strstr(s, "&lt;script&gt;x&amp;y&lt;/script&gt;&quot;&#39;")); s++) n++;
    TH_CHECK(n == 7, "the escaped text appears in title element, title, x, y label, legend, vline, note: %d", n);
    text_free(&b);
    svg_plot_free(p);
    p = svg_plot_new(400, 300, "bars", NULL, NULL);
    const char *cats[2] = {"<1>", "a&b"};
    svg_plot_categories(p, cats, 2);
    svg_plot_bars(p, (double[]){1, 2}, &st, "s");
    text_init(&b);
    svg_plot_render(p, &b);
    TH_CHECK(strstr(b.data, "&lt;1&gt;") && strstr(b.data, "a&amp;b") && !strstr(b.data, "<1>"), "categories escaped");
    TH_CHECK(strstr(b.data, "<rect x=") != NULL, "bars drawn");
    text_free(&b);
    svg_plot_free(p);
}

/* The number of pieces (M commands) of the first data path. */
static int pieces(const char *svg) {
    const char *d = strstr(svg, "<path d=\"M");
    if (!d) return 0;
    d += 9;
    int n = 0;
    for (; *d && *d != '"'; d++) n += *d == 'M';
    return n;
}

static void test_lines(void) {
    /* a NaN breaks the polyline into two pieces; on a log axis so does a value <= 0 */
    double x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {1, 2, NAN, 4, 0, 6};
    SvgStyle st = {0};
    SvgPlot *p = svg_plot_new(600, 300, "t", "step", "loss");
    svg_plot_line(p, x, y, 6, &st, "a");
    TH_CHECK(svg_plot_points(p) == 5, "linear: 5 finite points (got %d)", svg_plot_points(p));
    TextBuf b;
    text_init(&b);
    svg_plot_render(p, &b);
    TH_CHECK(pieces(b.data) == 2, "linear: NaN splits the line in 2 (got %d)", pieces(b.data));
    text_free(&b);
    svg_plot_axes(p, SVG_LINEAR, SVG_LOG10);
    TH_CHECK(svg_plot_points(p) == 4, "log: 4 drawable points (got %d)", svg_plot_points(p));
    text_init(&b);
    svg_plot_render(p, &b);
    TH_CHECK(pieces(b.data) == 3, "log: NaN and 0 split the line in 3 (got %d)", pieces(b.data));
    TH_CHECK(!strstr(b.data, "nan") && !strstr(b.data, "inf"), "no nan/inf coordinates in the SVG");
    TH_CHECK(strstr(b.data, "viewBox=\"0 0 600 ") && strstr(b.data, "</svg>"), "a whole svg element");
    TH_CHECK(strstr(b.data, "class=\"lg\"") == NULL, "no legend for an unlisted series");
    text_free(&b);
    svg_plot_free(p);
    /* legend rows grow the height; every drawn point stays inside the frame */
    p = svg_plot_new(600, 300, "t", "x", "y");
    for (int i = 0; i < 12; i++) {
        SvgStyle s2 = {.color = i, .legend = 1, .dash = i / 8};
        double yy[6];
        for (int j = 0; j < 6; j++) yy[j] = i * 10 + j;
        svg_plot_line(p, x, yy, 6, &s2, "a fairly long legend label");
    }
    text_init(&b);
    svg_plot_render(p, &b);
    int h = 0;
    sscanf(strstr(b.data, "viewBox=\"0 0 600 ") + 17, "%d", &h);
    TH_CHECK(h > 300 + 16 * 3, "twelve labels wrap into rows (height %d)", h);
    for (const char *s = b.data; (s = strstr(s, "<path d=\"M")); s++) {
        double px, py;
        if (sscanf(s + 10, "%lf %lf", &px, &py) != 2) continue;
        if (strncmp(s, "<path d=\"M", 10)) continue;
        TH_CHECK(px >= 0 && px <= 600 && py >= 0 && py <= h, "point %g,%g inside the svg", px, py);
    }
    text_free(&b);
    svg_plot_free(p);
    /* a single point still shows (as a marker) */
    p = svg_plot_new(300, 200, NULL, NULL, NULL);
    svg_plot_line(p, x, y, 1, &st, NULL);
    text_init(&b);
    svg_plot_render(p, &b);
    TH_CHECK(strstr(b.data, "<circle") != NULL, "a one-point series gets a marker");
    text_free(&b);
    svg_plot_free(p);
}

/* ---- JSONL ---------------------------------------------------------------------------------- */
static int step_key(const Json *r, char *key, size_t cap) {
    const Json *t = json_get(r, "type"), *s = json_get(r, "step");
    if (!t || t->type != JSON_STRING || !s || s->type != JSON_NUMBER) return 0;
    snprintf(key, cap, "%s/%.17g", t->string, s->number);
    return 1;
}

static double num(const Json *r, const char *k) {
    const Json *v = json_get(r, k);
    return v && v->type == JSON_NUMBER ? v->number : NAN;
}

static void test_jsonl(void) {
    Jsonl l;
    const char *good = "{\"type\":\"train\",\"step\":1,\"loss\":2}\n\n{\"type\":\"train\",\"step\":2,\"loss\":1.5}\n";
    TH_CHECK(jsonl_parse(&l, good, strlen(good), step_key) == IM_OK && l.n == 2 && l.lines == 2 && !l.malformed && !l.torn,
             "a good log: %d records", l.n);
    TH_CHECK(l.n == 2 && l.line[1] == 3, "line numbers count empty lines (%d)", l.n == 2 ? l.line[1] : -1);
    jsonl_free(&l);
    /* killed mid-line: the torn last line is dropped and flagged */
    const char *torn = "{\"type\":\"train\",\"step\":1,\"loss\":2}\n{\"type\":\"train\",\"step\":2,\"lo";
    TH_CHECK(jsonl_parse(&l, torn, strlen(torn), step_key) == IM_OK && l.n == 1 && l.torn && !l.malformed,
             "torn last line: n %d torn %d malformed %d", l.n, l.torn, l.malformed);
    jsonl_free(&l);
    /* a last line without newline that is whole is kept */
    const char *nonl = "{\"type\":\"train\",\"step\":1}\n{\"type\":\"train\",\"step\":2}";
    TH_CHECK(jsonl_parse(&l, nonl, strlen(nonl), step_key) == IM_OK && l.n == 2 && !l.torn, "whole last line kept");
    jsonl_free(&l);
    /* malformed lines anywhere are skipped and counted; non-objects too */
    const char *bad = "garbage\n{\"type\":\"train\",\"step\":1}\n[1,2]\n{\"step\": 2,}\n\x01\xff\n{\"type\":\"train\",\"step\":3}\r\n";
    TH_CHECK(jsonl_parse(&l, bad, strlen(bad), step_key) == IM_OK && l.n == 2 && l.malformed == 4 && l.first_bad == 1 &&
                 !l.torn, "malformed: n %d malformed %d first %d", l.n, l.malformed, l.first_bad);
    jsonl_free(&l);
    /* resumed from step 2 without cutting the log: steps 3, 4 twice; the later records win, in order */
    const char *dup = "{\"type\":\"train\",\"step\":1,\"loss\":9}\n{\"type\":\"train\",\"step\":2,\"loss\":8}\n"
                      "{\"type\":\"train\",\"step\":3,\"loss\":7}\n{\"type\":\"eval\",\"step\":3,\"acc\":0.1}\n"
                      "{\"type\":\"train\",\"step\":4,\"loss\":6}\n{\"note\":\"no key\"}\n"
                      "{\"type\":\"train\",\"step\":3,\"loss\":5}\n{\"type\":\"train\",\"step\":4,\"loss\":4}\n"
                      "{\"type\":\"train\",\"step\":5,\"loss\":3}\n";
    TH_CHECK(jsonl_parse(&l, dup, strlen(dup), step_key) == IM_OK && l.n == 7 && l.replaced == 2, "dups: n %d replaced %d",
             l.n, l.replaced);
    if (l.n == 7) {
        double want[7] = {9, 8, NAN, NAN, 5, 4, 3};
        for (int i = 0; i < 7; i++)
            if (!isnan(want[i])) TH_CHECK(num(l.recs[i], "loss") == want[i], "record %d loss %g", i, num(l.recs[i], "loss"));
        TH_CHECK(num(l.recs[2], "acc") == 0.1 && json_get(l.recs[3], "note"), "the eval record and the keyless one stay");
        TH_CHECK(l.line[4] == 7, "the kept step 3 is the later line (%d)", l.line[4]);
    }
    jsonl_free(&l);
    /* without a key function nothing is deduplicated */
    TH_CHECK(jsonl_parse(&l, dup, strlen(dup), NULL) == IM_OK && l.n == 9 && !l.replaced, "no key: all 9");
    jsonl_free(&l);
    TH_CHECK(jsonl_parse(&l, "", 0, step_key) == IM_OK && l.n == 0 && l.lines == 0, "empty text");
    jsonl_free(&l);
    /* files: a missing file and a folder are errors that name the path */
    TH_CHECK(jsonl_read(&l, "/nonexistent/log.jsonl", 0, NULL) == IM_EIO && strstr(err_msg(), "/nonexistent/log.jsonl"),
             "missing file: %s", err_msg());
    TH_CHECK(jsonl_read(&l, ".", 0, NULL) == IM_EIO && strstr(err_msg(), "not a regular file"), "folder: %s", err_msg());
    char path[] = "/tmp/test_svg_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
        fputs(dup, f);
        fclose(f);
        TH_CHECK(jsonl_read(&l, path, 0, step_key) == IM_OK && l.n == 7, "read from a file");
        jsonl_free(&l);
        TH_CHECK(jsonl_read(&l, path, 16, step_key) == IM_EFORMAT, "a file over the cap is refused");
        remove(path);
    }
}

int main(void) {
    th_name = "test_svg";
    test_linear_ticks();
    test_log_ticks();
    test_labels();
    test_escape();
    test_lines();
    test_jsonl();
    return th_done();
}
