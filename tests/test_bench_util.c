/* test_bench_util.c: the work counts behind the benchmarks' % of roofline (bench/bench_util.h)
 * against counts written out by hand from the shapes, and the roofline arithmetic on limits given
 * through BENCH_MACHINE (nothing here is timed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th.h"
#include "../bench/bench_util.h"
#include "../src/core/check.h"

static int build(Model *m, const char *const *kv) {
    ModelCfg c;
    cfg_defaults(&c);
    for (int i = 0; kv[i]; i += 2)
        if (cfg_set(&c, kv[i], kv[i + 1]) != 0) return 0;
    return model_create(m, &c) == 0;
}

/* relative closeness of two counts (they are sums of doubles in different orders) */
static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

static void test_gemm(void) {
    Work w = work_gemm(3, 5, 7);
    TH_CHECK(w.flops == 2 * 3 * 5 * 7 && w.bytes == 4 * (3 * 7 + 7 * 5 + 3 * 5), "gemm %g %g", w.flops, w.bytes);
}

/* Llama, tied head: layers 4 D^2 + 3 h D + 2 D; outside them the embedding (as the head) and norm_f. */
static void test_llama(void) {
    const char *kv[] = {"model", "llama", "vocab_size", "32", "d_model", "16", "n_layer", "2", "n_head", "2",
                        "d_inner", "24", NULL};
    Model m;
    TH_CHECK(build(&m, kv), "llama: %s", err_msg());
    double D = 16, h = 16, L = 2, V = 32, body = L * (4 * D * D + 3 * h * D + 2 * D), rest = V * D + D;
    Shape s = shape_of_model(&m);
    TH_CHECK(s.body == body && s.rest == rest && s.params == body + rest && s.read_tok == body + rest,
             "llama shape: body %g (want %g), rest %g (want %g), read %g", s.body, body, s.rest, rest, s.read_tok);
    TH_CHECK(s.attn_pos == 4 * D * L && s.kv_pos == 2 * D * L && s.mix_tok == 0 && s.state == 0, "llama mixer terms");
    /* 5 tokens, batch 2: context 1..5 (sum 15) */
    Work g = work_gen(&s, 2, 5, 1);
    double gf = 2 * (5 * 2 * (body + rest) + 4 * D * L * 15), gb = 4 * (5 * (body + rest) + 2 * 2 * D * L * (15 + 5));
    TH_CHECK(near(g.flops, gf) && near(g.bytes, gb), "llama gen %g %g want %g %g", g.flops, g.bytes, gf, gb);
    /* training, B 3 x T 8: 6 FLOPs per weight and token + 3x attention at (T+1)/2 positions */
    Work t = work_train(&s, 1000, 3, 8, 0, 1);
    double tf = 24 * (3 * (2 * body + 4 * D * L * 4.5) + 6 * rest), tb = 4 * 11 * (body + rest) + 2000;
    TH_CHECK(near(t.flops, tf) && near(t.bytes, tb), "llama train %g %g want %g %g", t.flops, t.bytes, tf, tb);
    model_free(&m);
}

/* Mamba2: the scan 5 E N per token, state E N + (E + 2N) W per layer; an implicit model's solver
 * passes multiply the layers only. */
static void test_mamba2(void) {
    const char *kv[] = {"model", "implicit_mamba2", "vocab_size", "40", "d_model", "16", "n_layer", "2",
                        "expand", "2", "d_state", "8", "headdim", "8", NULL};
    Model m;
    TH_CHECK(build(&m, kv), "implicit_mamba2: %s", err_msg());
    Shape s = shape_of_model(&m);
    double E = 32, N = 8, W = 4, L = 2, layers = 0;
    for (int i = 0; i < m.tab.n; i++)
        if (strstr(m.tab.p[i].name, ".layers.")) layers += (double)m.tab.p[i].numel;
    TH_CHECK(s.body == layers && s.rest == s.params - layers && s.body > 0, "mamba2 body %g rest %g", s.body, s.rest);
    TH_CHECK(s.mix_tok == L * 5 * E * N && s.state == L * (E * N + (E + 2 * N) * W) && s.attn_pos == 0,
             "mamba2 mixer terms %g %g", s.mix_tok, s.state);
    Work e = work_eval(&s, 0, 1, 4, 32);
    double ef = 4 * ((2 * s.body + s.mix_tok) * 32 + 2 * s.rest);
    TH_CHECK(near(e.flops, ef), "implicit eval %g want %g", e.flops, ef);
    Work t = work_train(&s, 0, 1, 4, 32, 4);
    double tf = 4 * ((2 * s.body + s.mix_tok) * (32 + 3 * 4) + 6 * s.rest);
    TH_CHECK(near(t.flops, tf), "implicit train %g want %g", t.flops, tf);
    TH_CHECK(f_grad_passes(&m.cfg) == m.cfg.grad && f_gen_calls(&m.cfg, 7) == 8, "implicit passes");
    model_free(&m);
}

/* An untied head (the delta-rule LMs): the embedding is a lookup, neither applied nor read whole. */
static void test_untied(void) {
    const char *kv[] = {"model", "gated_deltanet", "vocab_size", "40", "d_model", "16", "n_layer", "1",
                        "n_head", "2", "delta_head_dim", "8", NULL};
    Model m;
    TH_CHECK(build(&m, kv), "gated_deltanet: %s", err_msg());
    Shape s = shape_of_model(&m);
    double emb = (double)ptab_find(&m.tab, "word_emb.emb.weight")->numel;
    TH_CHECK(ptab_find(&m.tab, "lm_head.weight") != NULL, "gated_deltanet has a separate head");
    TH_CHECK(s.rest == s.params - s.body - emb && s.read_tok == s.params - emb + 16, "untied rest %g read %g", s.rest,
             s.read_tok);
    TH_CHECK(s.mix_tok == 6.0 * 2 * 8 * 16 && s.state == 2.0 * 8 * 16, "deltanet terms %g %g", s.mix_tok, s.state);
    model_free(&m);
    /* a Llama with tie_embeddings 0: the same accounting */
    const char *lk[] = {"model", "llama", "vocab_size", "40", "d_model", "16", "n_layer", "1", "n_head", "2",
                        "d_inner", "12", "tie_embeddings", "0", NULL};
    TH_CHECK(build(&m, lk), "untied llama: %s", err_msg());
    s = shape_of_model(&m);
    emb = (double)ptab_find(&m.tab, "word_emb.emb.weight")->numel;
    TH_CHECK(s.rest == s.params - s.body - emb && s.read_tok == s.params - emb + 16, "untied llama rest %g read %g",
             s.rest, s.read_tok);
    model_free(&m);
}

/* A Fixed-Point RNN iterates its channel mixer's projections, less the x share hoisted out of the
 * loop (half of them for the [x ; shift(y)] input), and bc_proj; the rest of the layer runs once. */
static void test_fp(void) {
    const char *kv[] = {"model", "fp_mamba", "vocab_size", "40", "d_model", "16", "n_layer", "1", "d_state", "4",
                        "mixer_type", "householder", "mixer_rank", "1", "mixer_h_dep", "1", "symm_mixer", "0", NULL};
    Model m;
    TH_CHECK(build(&m, kv), "fp_mamba: %s", err_msg());
    Shape s = shape_of_model(&m);
    double loop = 0, layers = 0;
    for (int i = 0; i < m.tab.n; i++) {
        const ParamInfo *p = &m.tab.p[i];
        if (strstr(p->name, ".layers.")) layers += (double)p->numel;
        if (strstr(p->name, ".mixer.mixer.")) loop += 0.5 * (double)p->numel;
        if (strstr(p->name, ".bc_proj.")) loop += (double)p->numel;
    }
    TH_CHECK(loop > 0 && s.body == loop && s.rest == s.params - loop, "fp body %g (want %g) rest %g", s.body, loop,
             s.rest);
    TH_CHECK(s.body < layers / 2, "fp: most of the layer runs once per forward (%g of %g)", s.body, layers);
    TH_CHECK(f_grad_passes(&m.cfg) == m.cfg.fp_n_backwards && f_gen_calls(&m.cfg, 3.5) == 3.5, "fp passes");
    model_free(&m);
}

/* Limits from the environment: % of roofline is the slower of the two limits over the time. */
static void test_roofline(void) {
    setenv("BENCH_MACHINE", "1:100:10,3:250:20", 1);
    Roof r = machine_roof(3);
    TH_CHECK(r.threads == 3 && r.gflops == 250 && r.gbs == 20, "BENCH_MACHINE entry 3: %g %g", r.gflops, r.gbs);
    Work flops_bound = {2e9, 1e8, 0, 0}, bytes_bound = {1e8, 1e9, 0, 0};
    TH_CHECK(near(roofline_pct(flops_bound, 0.04, 1), 50), "flops-bound: %g", roofline_pct(flops_bound, 0.04, 1));
    TH_CHECK(near(roofline_pct(bytes_bound, 0.2, 1), 50), "bytes-bound: %g", roofline_pct(bytes_bound, 0.2, 1));
    char buf[160];
    roof_fields(buf, sizeof buf, bytes_bound, 0.2, 0.3, 3);
    TH_CHECK(strstr(buf, "roofline=25.0% roofline_cpu=50.0% bound=bytes") != NULL, "fields: %s", buf);
}

/* Generation: every f call re-reads the layers' weights; the re-read bound is printed with the
 * bandwidth of a set of the resident size, and its % follows from the printed numbers. */
static void test_reread(void) {
    const char *kv[] = {"model", "implicit_mamba2", "vocab_size", "40", "d_model", "16", "n_layer", "2", "d_state", "4",
                        "headdim", "8", NULL};
    Model m;
    TH_CHECK(build(&m, kv), "implicit_mamba2: %s", err_msg());
    Shape s = shape_of_model(&m);
    Work one = work_gen(&s, 1, 10, 1), five = work_gen(&s, 1, 10, 5), b4 = work_gen(&s, 4, 10, 5);
    TH_CHECK(near(one.reread, one.bytes) && near(one.resident, 4 * (s.read_tok + s.state)), "f 1: reread %g bytes %g",
             one.reread, one.bytes);
    TH_CHECK(near(five.reread - one.reread, 4 * s.body * 4 * 10), "f 5: four more reads of the body per token");
    TH_CHECK(near(b4.reread - five.reread, 4 * 3 * 2 * s.state * 10), "batch 4: the weights are shared, the states not");
    char buf[400];
    roof_fields(buf, sizeof buf, five, 0.01, 0.01, 1);
    double gbs = 0, pct = 0, mib = 0;
    const char *g = strstr(buf, "resident_gbs="), *p = strstr(buf, "roofline_reread="), *r = strstr(buf, "resident_mib=");
    TH_CHECK(g && p && r && sscanf(g, "resident_gbs=%lf", &gbs) == 1 && sscanf(p, "roofline_reread=%lf", &pct) == 1 &&
                 sscanf(r, "resident_mib=%lf", &mib) == 1,
             "reread fields: %s", buf);
    double want = 100 * fmax(five.flops / 100e9, five.reread / (gbs * 1e9)) / 0.01;
    TH_CHECK(gbs > 0 && fabs(pct - want) <= 0.05 + 0.01 * want && fabs(mib - five.resident / (1 << 20)) < 0.06,
             "roofline_reread %g, want %g (%s)", pct, want, buf);
    roof_fields(buf, sizeof buf, (Work){1e8, 1e9, 0, 0}, 0.2, 0.3, 1);
    TH_CHECK(!strstr(buf, "reread"), "training lines have no re-read bound: %s", buf);
    model_free(&m);
}

int main(void) {
    th_name = "test_bench_util";
    test_gemm();
    test_llama();
    test_mamba2();
    test_untied();
    test_fp();
    test_roofline();
    test_reread();
    return th_done();
}
