/* opts.c: see opts.h. */
#include "opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "../src/train/dist.h"

#define FIELD(args, o) ((char *)(args) + (o)->offset)

void opts_free(OptArgs *out) {
    free(out->pos);
    free(out->kv);
    out->pos = NULL;
    out->kv = NULL;
    out->n_pos = out->n_kv = 0;
}

static int key_accepted(const OptKeys *k, const char *name) {
    if (!keytab_find(k->tab, name)) return 0;
    if (!k->only) return 1;
    for (int i = 0; k->only[i]; i++)
        if (!strcmp(k->only[i], name)) return 1;
    return 0;
}

/* ---- closest-name suggestions ------------------------------------------------------------------ */

/* Optimal string alignment distance: insertions, deletions, substitutions and adjacent
 * transpositions ("stpes" -> "steps" is one edit), for names up to 63 characters. */
static int edit_distance(const char *a, const char *b) {
    enum { M = 64 };
    int n = (int)strlen(a), m = (int)strlen(b);
    if (n >= M || m >= M) return M;
    int d[M][M];
    for (int i = 0; i <= n; i++) d[i][0] = i;
    for (int j = 0; j <= m; j++) d[0][j] = j;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

typedef struct {
    const char *word, *best;
    int dist;
} Closest;

/* A candidate is close when it starts with the word (an abbreviation), or is within about one
 * edit per three characters of it. */
static void offer(Closest *c, const char *cand) {
    size_t n = strlen(c->word);
    int d = n && !strncmp(cand, c->word, n) ? 1 : edit_distance(c->word, cand);
    int limit = n < 3 ? 1 : (int)(n + 2) / 3;
    if (d <= limit && (!c->best || d < c->dist)) {
        c->best = cand;
        c->dist = d;
    }
}

const char *opts_closest(const char *word, const char *const *cands, int n) {
    Closest c = {word, NULL, 0};
    for (int i = 0; i < n; i++) offer(&c, cands[i]);
    return c.best;
}

static const char *closest_option(const CmdSpec *c, const char *word) {
    Closest cl = {word, NULL, 0};
    for (int i = 0; i < c->n_opts; i++) offer(&cl, c->opts[i].name);
    for (int t = 0; t < c->n_keys; t++)
        for (int i = 0; i < c->keys[t].tab->n; i++)
            if (key_accepted(&c->keys[t], c->keys[t].tab->keys[i].name)) offer(&cl, c->keys[t].tab->keys[i].name);
    offer(&cl, "help");
    offer(&cl, "version");
    return cl.best;
}

/* ---- parsing ------------------------------------------------------------------------------------ */

typedef union {
    long long i;
    double x;
    const char *s;
} OptValue;

typedef struct {
    const OptSpec *o;
    OptValue v;
} Pending;

static int bad(OptArgs *out, const char *hint, int code) {
    snprintf(out->hint, sizeof out->hint, "%s", hint);
    return code;
}

/* The value of an own option, checked against its kind and range. */
static int convert(const OptSpec *o, const char *s, OptValue *v) {
    char *end;
    errno = 0;
    if (o->kind == OPT_STR) {
        v->s = s;
        return IM_OK;
    }
    if (o->kind == OPT_INT) {
        v->i = strtoll(s, &end, 10);
        if (errno || end == s || *end || (o->lo < o->hi && (v->i < o->lo || v->i > o->hi))) {
            if (o->lo < o->hi)
                return err_set(IM_EINVAL, "option '--%s': expected an integer in %.0f..%.0f, got '%s'", o->name, o->lo,
                               o->hi, s);
            return err_set(IM_EINVAL, "option '--%s': expected an integer, got '%s'", o->name, s);
        }
        return IM_OK;
    }
    v->x = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v->x) || (o->lo < o->hi && (v->x < o->lo || v->x > o->hi))) {
        if (o->lo < o->hi)
            return err_set(IM_EINVAL, "option '--%s': expected a number in [%g, %g], got '%s'", o->name, o->lo, o->hi, s);
        return err_set(IM_EINVAL, "option '--%s': expected a number, got '%s'", o->name, s);
    }
    return IM_OK;
}

static void store(const Pending *p, void *args) {
    char *f = FIELD(args, p->o);
    switch (p->o->kind) {
    case OPT_FLAG: *(int *)f = 1; break;
    case OPT_STR: *(const char **)f = p->v.s; break;
    case OPT_INT: *(long long *)f = p->v.i; break;
    case OPT_NUM: *(double *)f = p->v.x; break;
    }
}

/* A key-table value checked by the table itself, on a scratch copy of the one field. */
static int check_key(const KeyTab *t, const KeyInfo *k, const char *value) {
    double scratch[KEY_STR_LEN / sizeof(double) + 1];
    KeyInfo one = *k;
    one.offset = 0;
    KeyTab view = {t->section, &one, 1, NULL, 0, NULL};   /* the value alone: its range is checked with the config */
    return keytab_set(&view, scratch, k->name, value);
}

/* One `--name[=value]` word at argv[*i]; *i moves past a separate value. */
static int parse_long(const CmdSpec *c, int argc, char **argv, int *i, OptArgs *out, Pending *pend, int *n_pend) {
    char name[128], hint[200];
    const char *word = argv[*i] + 2, *eq = strchr(word, '='), *value = NULL;
    size_t len = eq ? (size_t)(eq - word) : strlen(word);
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), word);
    snprintf(hint, sizeof hint, "run `implicit %s --help` for the options", c->name);
    if (!strcmp(name, "help") || !strcmp(name, "version")) {
        if (eq) return bad(out, hint, err_set(IM_EINVAL, "option '--%s' takes no value", name));
        *(name[0] == 'h' ? &out->help : &out->version) = 1;
        return IM_OK;
    }
    const OptSpec *o = NULL;
    const OptKeys *keys = NULL;
    const char *kname = name; /* the key's own name: after "section." in --task.seed */
    for (int j = 0; j < c->n_opts && !o; j++)
        if (!strcmp(c->opts[j].name, name)) o = &c->opts[j];
    /* --key goes to the first table that has it; --SECTION.key to that section's table (a name
     * several tables share, such as seed, reaches the later ones this way) */
    const char *dot = strchr(name, '.');
    for (int t = 0; t < c->n_keys && !o && !keys; t++) {
        const char *sec = c->keys[t].tab->section;
        if (!dot && key_accepted(&c->keys[t], name)) keys = &c->keys[t];
        else if (dot && strlen(sec) == (size_t)(dot - name) && !strncmp(sec, name, (size_t)(dot - name)) &&
                 key_accepted(&c->keys[t], dot + 1))
            keys = &c->keys[t], kname = dot + 1;
    }
    if (!o && !keys) {
        const char *near = name[0] ? closest_option(c, name) : NULL;
        if (near) snprintf(out->hint, sizeof out->hint, "did you mean --%s? (`implicit %s --help` lists the options)", near, c->name);
        else snprintf(out->hint, sizeof out->hint, "%s", hint);
        return err_set(IM_EINVAL, "unknown option '--%s' for `implicit %s`", name, c->name);
    }
    if (o && o->kind == OPT_FLAG) {
        if (eq) return bad(out, hint, err_set(IM_EINVAL, "option '--%s' takes no value (got '%s')", name, argv[*i]));
    } else if (eq) {
        value = eq + 1;
    } else if (*i + 1 < argc) {
        value = argv[++*i];
    } else {
        static const char *const key_meta[] = {"N", "X", "S"};   /* KEY_INT, KEY_FLOAT, KEY_STR */
        snprintf(out->hint, sizeof out->hint, "--%s %s", name, o ? o->meta : key_meta[keytab_find(keys->tab, kname)->type]);
        return err_set(IM_EINVAL, "option '--%s' needs a value", name);
    }
    if (o) {
        pend[*n_pend].o = o;
        if (o->kind != OPT_FLAG && convert(o, value, &pend[*n_pend].v)) return bad(out, hint, IM_EINVAL);
        ++*n_pend;
        return IM_OK;
    }
    if (check_key(keys->tab, keytab_find(keys->tab, kname), value)) return bad(out, hint, IM_EINVAL);
    out->kv[out->n_kv++] = (OptKV){keys->tab, keytab_find(keys->tab, kname)->name, value};
    return IM_OK;
}

static void usage_hint(const CmdSpec *c, OptArgs *out) {
    const char *nl = strchr(c->synopsis, '\n');
    int n = nl ? (int)(nl - c->synopsis) : (int)strlen(c->synopsis);
    snprintf(out->hint, sizeof out->hint, "usage: implicit %s %.*s (see --help)", c->name, n, c->synopsis);
}

int opts_parse(const CmdSpec *c, void *args, int argc, char **argv, OptArgs *out) {
    memset(out, 0, sizeof *out);
    size_t cap = (size_t)(argc > 0 ? argc : 1);
    out->pos = calloc(cap, sizeof *out->pos);
    out->kv = calloc(cap, sizeof *out->kv);
    Pending *pend = calloc(cap, sizeof *pend);
    int n_pend = 0, rc = IM_OK, only_pos = 0;
    if (!out->pos || !out->kv || !pend) {
        free(pend);
        return bad(out, "", err_set(IM_ENOMEM, "out of memory parsing the command line"));
    }
    for (int i = 0; i < argc && !rc && !out->help && !out->version; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || !a[1]) out->pos[out->n_pos++] = argv[i];
        else if (!strcmp(a, "--")) only_pos = 1;
        else if (a[1] == '-') rc = parse_long(c, argc, argv, &i, out, pend, &n_pend);
        else if (!strcmp(a, "-h")) out->help = 1;
        else if (!strcmp(a, "-V")) out->version = 1;
        else {
            snprintf(out->hint, sizeof out->hint, "options are --key value or --key=value; run `implicit %s --help`", c->name);
            rc = err_set(IM_EINVAL, "unknown option '%s' for `implicit %s`", a, c->name);
        }
    }
    if (!rc && !out->help && !out->version) {
        if (out->n_pos < c->min_pos) {
            usage_hint(c, out);
            rc = err_set(IM_EINVAL, "`implicit %s` needs %s%d argument%s, got %d", c->name,
                         c->max_pos == c->min_pos ? "" : "at least ", c->min_pos, c->min_pos == 1 ? "" : "s", out->n_pos);
        } else if (c->max_pos >= 0 && out->n_pos > c->max_pos) {
            usage_hint(c, out);
            rc = err_set(IM_EINVAL, "unexpected argument '%s' for `implicit %s`", out->pos[c->max_pos], c->name);
        }
    }
    if (!rc && !out->help && !out->version)
        for (int j = 0; j < n_pend; j++) store(&pend[j], args);
    free(pend);
    return rc;
}

int opts_get(const CmdSpec *c, void *args, int argc, char **argv, OptArgs *out, int *status) {
    *status = 0;
    if (opts_parse(c, args, argc, argv, out)) {
        fprintf(stderr, "error: %s\n", err_msg());
        if (out->hint[0]) fprintf(stderr, "hint: %s\n", out->hint);
        opts_free(out);
        *status = 1;
        return 0;
    }
    if (out->help || out->version) {
        if (out->help) opts_help(c, args, stdout);
        else opts_version(stdout);
        opts_free(out);
        return 0;
    }
    return 1;
}

int opts_apply_keys(const OptArgs *out, const KeyTab *const *tabs, void *const *objs, int n) {
    for (int i = 0; i < out->n_kv; i++) {
        int j = 0;
        while (j < n && tabs[j] != out->kv[i].tab) j++;
        if (j == n) return err_set(IM_EINVAL, "option '--%s' does not apply here", out->kv[i].key);
        int rc = keytab_set(tabs[j], objs[j], out->kv[i].key, out->kv[i].value);
        if (rc) return rc;
    }
    return IM_OK;
}

int opts_key_list(const OptArgs *out, const char **kv, int cap) {
    if (2 * out->n_kv + 1 > cap) return err_set(IM_EINVAL, "too many key options (at most %d)", (cap - 1) / 2);
    for (int i = 0; i < out->n_kv; i++) {
        kv[2 * i] = out->kv[i].key;
        kv[2 * i + 1] = out->kv[i].value;
    }
    kv[2 * out->n_kv] = NULL;
    return IM_OK;
}

/* ---- help ----------------------------------------------------------------------------------------- */

/* Bytes a struct described by t spans (its last field's end), for a scratch copy with defaults. */
static size_t keytab_span(const KeyTab *t) {
    size_t end = 0;
    for (int i = 0; i < t->n; i++) {
        const KeyInfo *k = &t->keys[i];
        size_t sz = k->type == KEY_INT ? sizeof(int) : k->type == KEY_FLOAT ? sizeof(double) : KEY_STR_LEN;
        if (k->offset + sz > end) end = k->offset + sz;
    }
    return end;
}

/* The table before keys[t] that takes the name (so that --name never reaches keys[t]), or NULL. */
static const KeyTab *key_shadowed(const CmdSpec *c, int t, const char *name) {
    for (int u = 0; u < t; u++)
        if (key_accepted(&c->keys[u], name)) return c->keys[u].tab;
    return NULL;
}

static void print_keys(const CmdSpec *c, int t, FILE *f) {
    const OptKeys *k = &c->keys[t];
    if (!k->listed) {
        fprintf(f, "\n%s keys: any key of `implicit %s --help` as --key value\n", k->tab->section,
                !strcmp(k->tab->section, "model") ? "init" : "train");
        return;
    }
    fprintf(f, "\n%s keys:\n", k->tab->section);
    void *obj = calloc(1, keytab_span(k->tab) + sizeof(double));
    if (!obj) return;
    keytab_defaults(k->tab, obj);
    for (int i = 0; i < k->tab->n; i++) {
        const char *name = k->tab->keys[i].name;
        if (!key_accepted(k, name)) continue;
        keytab_print_key(k->tab, &k->tab->keys[i], obj, f);
        const KeyTab *first = key_shadowed(c, t, name);
        if (first)
            fprintf(f, "      (set this one with --%s.%s: --%s is the %s key)\n", k->tab->section, name, name,
                    first->section);
    }
    free(obj);
}

static void print_synopsis(const CmdSpec *c, FILE *f) {
    const char *s = c->synopsis;
    for (int first = 1; *s || first; first = 0) {
        const char *nl = strchr(s, '\n');
        int n = nl ? (int)(nl - s) : (int)strlen(s);
        fprintf(f, "%s implicit %s %.*s\n", first ? "usage:" : "      ", c->name, n, s);
        s += n + (nl != NULL);
    }
}

void opts_help(const CmdSpec *c, const void *args, FILE *f) {
    print_synopsis(c, f);
    fprintf(f, "%s\n", c->summary);
    if (c->about) fprintf(f, "%s", c->about);
    fprintf(f, "\noptions:\n");
    for (int i = 0; i < c->n_opts; i++) {
        const OptSpec *o = &c->opts[i];
        const char *fld = (const char *)args + o->offset;
        char left[64], def[64] = "";
        if (o->kind == OPT_FLAG) snprintf(left, sizeof left, "%s", o->name);
        else snprintf(left, sizeof left, "%s %s", o->name, o->meta);
        if (o->kind == OPT_STR && *(const char *const *)fld) snprintf(def, sizeof def, "%s", *(const char *const *)fld);
        else if (o->kind == OPT_INT) snprintf(def, sizeof def, "%lld", *(const long long *)fld);
        else if (o->kind == OPT_NUM) snprintf(def, sizeof def, "%g", *(const double *)fld);
        fprintf(f, "  --%-22s %-14s %s\n", left, def, o->help);
    }
    fprintf(f, "  %-24s %-14s %s\n  %-24s %-14s %s\n", "-h, --help", "", "print this help and exit", "-V, --version", "",
            "print the version and exit");
    for (int t = 0; t < c->n_keys; t++) print_keys(c, t, f);
    fprintf(f, "\nOptions are --key value or --key=value, in any order with the arguments; -- ends them.\n");
}

void opts_version(FILE *f) {
    char blas[96];
    k_blas_describe(blas, sizeof blas);
    fprintf(f, "implicit %s (blas=%s, threads=%s, mpi=%s)\n", IM_VERSION, blas, k_omp_name(), dist_name());
}

/* ---- command groups ------------------------------------------------------------------------------- */

static void group_usage(const char *group, const OptCommand *cmds, int n, const char *tail, FILE *f) {
    fprintf(f, "usage: implicit%s%s <command> [options]   (`implicit%s%s <command> --help` for its options)\ncommands:\n",
            group[0] ? " " : "", group, group[0] ? " " : "", group);
    size_t skip = group[0] ? strlen(group) + 1 : 0;   /* "data dump" is listed as "dump" */
    for (int i = 0; i < n; i++) {
        const CmdSpec *c = cmds[i].spec;
        const char *nl = strchr(c->synopsis, '\n');
        char left[160];
        snprintf(left, sizeof left, "%s %.*s", c->name + skip, nl ? (int)(nl - c->synopsis) : (int)strlen(c->synopsis),
                 c->synopsis);
        if (strlen(left) <= 30) fprintf(f, "  %-30s %s\n", left, c->summary);
        else fprintf(f, "  %s\n  %30s %s\n", left, "", c->summary);
    }
    fprintf(f, "  -h, --help %19s this list;  -V, --version: version and build configuration\n", "");
    if (tail) fprintf(f, "%s", tail);
}

int opts_dispatch(const char *group, const OptCommand *cmds, int n, const char *tail, int argc, char **argv) {
    size_t skip = group[0] ? strlen(group) + 1 : 0;
    const char *names[64];
    int nn = n < 64 ? n : 64;
    for (int i = 0; i < nn; i++) names[i] = cmds[i].spec->name + skip;
    if (argc < 1) {
        fprintf(stderr, "error: `implicit%s%s` needs a command\n", group[0] ? " " : "", group);
        group_usage(group, cmds, n, tail, stderr);
        return 2;
    }
    const char *w = argv[0];
    int help = !strcmp(w, "-h") || !strcmp(w, "--help") || !strcmp(w, "help");
    if (help && argc >= 2 && strcmp(w, "help") == 0) {
        for (int i = 0; i < nn; i++)
            if (!strcmp(names[i], argv[1])) {
                char *sub[] = {(char *)"--help", NULL};
                return cmds[i].run(1, sub);
            }
    }
    if (help) {
        group_usage(group, cmds, n, tail, stdout);
        return 0;
    }
    if (!strcmp(w, "-V") || !strcmp(w, "--version") || (!group[0] && !strcmp(w, "version"))) {
        opts_version(stdout);
        return 0;
    }
    for (int i = 0; i < nn; i++)
        if (!strcmp(names[i], w)) return cmds[i].run(argc - 1, argv + 1);
    const char *near = opts_closest(w, names, nn);
    fprintf(stderr, "error: unknown command '%s%s%s'\n", group, group[0] ? " " : "", w);
    if (near) fprintf(stderr, "hint: did you mean `implicit%s%s %s`? (`implicit%s%s --help` lists the commands)\n",
                      group[0] ? " " : "", group, near, group[0] ? " " : "", group);
    else fprintf(stderr, "hint: run `implicit%s%s --help` for the list of commands\n", group[0] ? " " : "", group);
    return 2;
}
