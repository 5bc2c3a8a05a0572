/* babi.c: the bAbI reader, vocabulary, story generator and catbAbI windows (see babi.h). */
#include "babi.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "task.h"

/* Stories stored back to back: story i is tok[off[i] .. off[i+1]). */
typedef struct {
    int *tok;
    int64_t *off;            /* (n + 1) */
    unsigned char *task;     /* (n) bAbI task id, 0 = generated */
    int n, cap;
    int64_t n_tok, cap_tok;
} Stories;

/* The generator's words; the generated vocabulary is this list in this order. */
#define GEN_WORDS(X)                                                                                   \
    X(PAD, "<pad>") X(EOS, "<eos>") X(DOT, ".") X(Q, "?") X(MARY, "mary") X(JOHN, "john")                \
    X(DANIEL, "daniel") X(SANDRA, "sandra") X(MOVED, "moved") X(WENT, "went") X(JOURNEYED, "journeyed")    \
    X(TRAVELLED, "travelled") X(TO, "to") X(THE, "the") X(BATHROOM, "bathroom") X(BEDROOM, "bedroom")     \
    X(KITCHEN, "kitchen") X(HALLWAY, "hallway") X(GARDEN, "garden") X(OFFICE, "office") X(APPLE, "apple") \
    X(FOOTBALL, "football") X(MILK, "milk") X(PICKED, "picked") X(UP, "up") X(DROPPED, "dropped")         \
    X(WHERE, "where") X(IS, "is") X(IN, "in") X(YES, "yes") X(NO, "no") X(HOW, "how") X(MANY, "many")     \
    X(OBJECTS, "objects") X(CARRYING, "carrying") X(NONE, "none") X(ONE, "one") X(TWO, "two")             \
    X(THREE, "three")
#define GEN_ENUM(name, word) W_##name,
#define GEN_TEXT(name, word) word,
enum { GEN_WORDS(GEN_ENUM) GEN_N };
static const char *const GEN_TEXTS[GEN_N] = {GEN_WORDS(GEN_TEXT)};
enum { N_PEOPLE = 4, N_PLACES = 6, N_OBJECTS = 3, N_VERBS = 4 };

struct BabiData {
    char **words;            /* (n_words) the vocabulary */
    int n_words, cap_words;
    int *slot;               /* (n_slot) open-addressing hash of word ids, -1 = empty */
    int n_slot;
    Stories split[2];        /* BABI_TRAIN, BABI_EVAL */
    int *ex, *ey;            /* (n_stream) the eval split as one stream of inputs and targets */
    int64_t n_stream;
    int generated;
    int id_eos, id_q;
};

/* ---------------------------------------------------------------- vocabulary */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

int babi_word_id(const BabiData *d, const char *w) {
    for (uint64_t i = fnv1a(w) & (uint64_t)(d->n_slot - 1);; i = (i + 1) & (uint64_t)(d->n_slot - 1)) {
        int id = d->slot[i];
        if (id < 0) return -1;
        if (!strcmp(d->words[id], w)) return id;
    }
}

static void rehash(BabiData *d, int n_slot) {
    free(d->slot);
    d->n_slot = n_slot;
    d->slot = xmalloc(sizeof(int) * (size_t)n_slot);
    for (int i = 0; i < n_slot; i++) d->slot[i] = -1;
    for (int id = 0; id < d->n_words; id++) {
        uint64_t i = fnv1a(d->words[id]) & (uint64_t)(n_slot - 1);
        while (d->slot[i] >= 0) i = (i + 1) & (uint64_t)(n_slot - 1);
        d->slot[i] = id;
    }
}

/* The id of w, added at the end of the vocabulary when new. */
static int word_add(BabiData *d, const char *w) {
    int id = babi_word_id(d, w);
    if (id >= 0) return id;
    if (d->n_words == d->cap_words) {
        d->cap_words = d->cap_words ? 2 * d->cap_words : 64;
        char **nw = realloc(d->words, sizeof(char *) * (size_t)d->cap_words);
        CHECK(nw, "out of memory (vocabulary)");
        d->words = nw;
    }
    size_t n = strlen(w) + 1;
    d->words[d->n_words] = memcpy(xmalloc(n), w, n);
    d->n_words++;
    if (2 * d->n_words > d->n_slot) rehash(d, 2 * d->n_slot);
    else {
        uint64_t i = fnv1a(w) & (uint64_t)(d->n_slot - 1);
        while (d->slot[i] >= 0) i = (i + 1) & (uint64_t)(d->n_slot - 1);
        d->slot[i] = d->n_words - 1;
    }
    return d->n_words - 1;
}

int babi_vocab(const BabiData *d) { return d->n_words; }
int babi_is_generated(const BabiData *d) { return d->generated; }
const char *babi_word(const BabiData *d, int id) { return id >= 0 && id < d->n_words ? d->words[id] : NULL; }

/* ---------------------------------------------------------------- story storage */

static void stories_push(Stories *s, const int *w, int n, int task) {
    if (s->n + 1 >= s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->off = realloc(s->off, sizeof(int64_t) * (size_t)(s->cap + 1));
        s->task = realloc(s->task, (size_t)s->cap);
        CHECK(s->off && s->task, "out of memory (stories)");
    }
    if (s->n_tok + n > s->cap_tok) {
        while (s->n_tok + n > s->cap_tok) s->cap_tok = s->cap_tok ? 2 * s->cap_tok : 4096;
        s->tok = realloc(s->tok, sizeof(int) * (size_t)s->cap_tok);
        CHECK(s->tok, "out of memory (story tokens)");
    }
    if (s->n == 0) s->off[0] = 0;
    memcpy(s->tok + s->n_tok, w, sizeof(int) * (size_t)n);
    s->n_tok += n;
    s->task[s->n] = (unsigned char)task;
    s->off[++s->n] = s->n_tok;
}

static void stories_free(Stories *s) {
    free(s->tok);
    free(s->off);
    free(s->task);
    memset(s, 0, sizeof *s);
}

int babi_n_stories(const BabiData *d, int split) { return d->split[split].n; }

const int *babi_story(const BabiData *d, int split, int i, int *n, int *task) {
    const Stories *s = &d->split[split];
    CHECK(i >= 0 && i < s->n, "story %d of %d", i, s->n);
    if (n) *n = (int)(s->off[i + 1] - s->off[i]);
    if (task) *task = s->task[i];
    return s->tok + s->off[i];
}

/* ---------------------------------------------------------------- the reader */

/* The words of the story being read, as text: a story enters the vocabulary only once it is
 * emitted, so words of the dropped last story do not get ids (as in the reference). */
typedef struct {
    char *text;              /* NUL-separated words */
    size_t len, cap;
    int n;
} WordBuf;

static void wb_add(WordBuf *b, const char *w, size_t n) {
    if (!n) return;
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1024;
        b->text = realloc(b->text, b->cap);
        CHECK(b->text, "out of memory (story text)");
    }
    memcpy(b->text + b->len, w, n);
    b->text[b->len + n] = 0;
    b->len += n + 1;
    b->n++;
}

/* Append the space-separated words of s[0..n). */
static void wb_add_words(WordBuf *b, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        while (i < n && s[i] == ' ') i++;
        size_t j = i;
        while (j < n && s[j] != ' ') j++;
        wb_add(b, s + i, j - i);
        i = j;
    }
}

/* Emit the buffered story into dst (NULL: vocabulary only). */
static void emit(BabiData *d, WordBuf *b, Stories *dst, int task, int **ids, int *cap_ids) {
    if (b->n > *cap_ids) {
        *cap_ids = b->n;
        *ids = realloc(*ids, sizeof(int) * (size_t)*cap_ids);
        CHECK(*ids, "out of memory");
    }
    const char *w = b->text;
    for (int i = 0; i < b->n; i++, w += strlen(w) + 1) (*ids)[i] = word_add(d, w);
    if (dst) stories_push(dst, *ids, b->n, task);
    b->len = 0;
    b->n = 0;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) s[--n] = 0;
    return s;
}

/* Split "<id> <text>" (lower-cased in place): the id through *id, the text as the result. */
static char *line_id(char *line, long *id, const char *path, long lineno, int *rc) {
    for (char *c = line; *c; c++) *c = (char)tolower((unsigned char)*c);
    char *text = trim(line), *end;
    errno = 0;
    *id = strtol(text, &end, 10);
    if (end == text || errno || *id < 1 || *end != ' ') {
        *rc = err_set(IM_EFORMAT, "%s:%ld: expected '<id> <text>', got '%.60s'", path, lineno, text);
        return NULL;
    }
    return trim(end);
}

/* Append the words of one line's text to the story buffer. */
static int parse_text(char *text, WordBuf *b, const char *path, long lineno) {
    size_t n = strlen(text);
    char *tab = strchr(text, '\t');
    if (!tab && n && text[n - 1] == '.') {
        wb_add_words(b, text, n - 1);                 /* statement: words, then "." */
        wb_add(b, ".", 1);
        return IM_OK;
    }
    if (!tab) return err_set(IM_EFORMAT, "%s:%ld: neither a statement ('... .') nor a question ('...?<TAB>answer')", path, lineno);
    *tab = 0;
    char *query = trim(text), *answer = tab + 1, *support = strchr(answer, '\t');
    if (support) *support = 0;
    answer = trim(answer);
    size_t nq = strlen(query);
    if (!nq || query[nq - 1] != '?' || !*answer || strchr(answer, ' '))
        return err_set(IM_EFORMAT, "%s:%ld: a question line is '<question>?<TAB><answer>[<TAB><ids>]'", path, lineno);
    wb_add_words(b, query, nq - 1);                   /* question: words, "?", the answer */
    wb_add(b, "?", 1);
    wb_add(b, answer, strlen(answer));
    return IM_OK;
}

static int read_file(BabiData *d, const char *path, int task, Stories *dst) {
    FILE *f = fopen(path, "r");
    if (!f) return err_set(IM_EIO, "cannot open %s: %s", path, strerror(errno));
    WordBuf b = {0};
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rc = IM_OK, *ids = NULL, cap_ids = 0;
    while (!rc && getline(&line, &cap, f) >= 0) {
        lineno++;
        if (!*trim(line)) continue;
        long id;
        char *text = line_id(line, &id, path, lineno, &rc);
        if (!text) break;
        if (id == 1 && b.n > 0) emit(d, &b, dst, task, &ids, &cap_ids);   /* a new story begins */
        rc = parse_text(text, &b, path, lineno);
    }
    /* the last story of the file is never emitted (the reference's quirk, babi.h) */
    if (!rc && ferror(f)) rc = err_set(IM_EIO, "error reading %s", path);
    free(line);
    free(b.text);
    free(ids);
    fclose(f);
    return rc;
}

/* The file of task `task` and split `split` in dir: qa<N>_<split>.txt or qa<N>_<name>_<split>.txt. */
static int find_file(const char *dir, int task, const char *split, char *path, size_t cap) {
    snprintf(path, cap, "%s/qa%d_%s.txt", dir, task, split);
    FILE *f = fopen(path, "r");
    if (f) { fclose(f); return 1; }
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    char prefix[32], suffix[32];
    snprintf(prefix, sizeof prefix, "qa%d_", task);
    snprintf(suffix, sizeof suffix, "_%s.txt", split);
    size_t np = strlen(prefix), ns = strlen(suffix);
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(dp))) {
        size_t n = strlen(e->d_name);
        if (n > np + ns && !strncmp(e->d_name, prefix, np) && !strcmp(e->d_name + n - ns, suffix)) {
            snprintf(path, cap, "%s/%s", dir, e->d_name);
            found = 1;
        }
    }
    closedir(dp);
    return found;
}

static int read_dir(BabiData *d, const char *dir, const char *eval_split) {
    DIR *dp = opendir(dir);
    if (!dp) return err_set(IM_EIO, "task key 'babi_dir': cannot open folder '%s': %s", dir, strerror(errno));
    closedir(dp);
    static const char *const SPLITS[3] = {"train", "valid", "test"};
    int n_files[3] = {0};
    char path[4200];
    for (int s = 0; s < 3; s++) {
        Stories *dst = s == 0 ? &d->split[BABI_TRAIN] : !strcmp(SPLITS[s], eval_split) ? &d->split[BABI_EVAL] : NULL;
        for (int task = 1; task <= 20; task++) {
            if (!find_file(dir, task, SPLITS[s], path, sizeof path)) continue;
            int rc = read_file(d, path, task, dst);
            if (rc) return rc;
            n_files[s]++;
        }
    }
    if (!n_files[0] || !d->split[BABI_TRAIN].n)
        return err_set(IM_EIO, "task key 'babi_dir': no stories in qa<N>_[<name>_]train.txt files in '%s'", dir);
    if (!d->split[BABI_EVAL].n)
        return err_set(IM_EIO, "task key 'babi_dir': no stories in qa<N>_[<name>_]%s.txt files in '%s' (babi_split)", eval_split, dir);
    return IM_OK;
}

/* ---------------------------------------------------------------- the generator */

static int pick_other(Rng *r, int n, int not) {
    if (not < 0) return (int)rng_below(r, (uint32_t)n);
    int v = (int)rng_below(r, (uint32_t)(n - 1));
    return v >= not ? v + 1 : v;
}

int babi_gen_story(const BabiData *d, Rng *r, int *out, int cap) {
    (void)d;   /* the generated vocabulary is GEN_WORDS in order, so ids are the enum */
    int loc[N_PEOPLE], holder[N_OBJECTS], objloc[N_OBJECTS], n = 0;
    for (int i = 0; i < N_PEOPLE; i++) loc[i] = -1;
    for (int i = 0; i < N_OBJECTS; i++) holder[i] = objloc[i] = -1;
    int lines = 4 + (int)rng_below(r, 9);
#define PUT(w) do { CHECK(n < cap, "story buffer of %d words is too small", cap); out[n++] = (w); } while (0)
    for (int line = 0; line < lines; line++) {
        int known[N_PEOPLE], n_known = 0;
        for (int i = 0; i < N_PEOPLE; i++)
            if (loc[i] >= 0) known[n_known++] = i;
        int ask = n_known && (line == lines - 1 || rng_below(r, 3) == 0);
        if (ask) {
            int kind = (int)rng_below(r, 4), p = known[rng_below(r, (uint32_t)n_known)];
            int placed[N_OBJECTS], n_placed = 0;
            for (int o = 0; o < N_OBJECTS; o++)
                if (holder[o] >= 0 || objloc[o] >= 0) placed[n_placed++] = o;
            if (kind == 3 && !n_placed) kind = 0;
            if (kind == 0) {            /* where is mary ? kitchen */
                PUT(W_WHERE); PUT(W_IS); PUT(W_MARY + p); PUT(W_Q); PUT(W_BATHROOM + loc[p]);
            } else if (kind == 1) {     /* is mary in the kitchen ? yes|no */
                int l = rng_below(r, 2) ? loc[p] : pick_other(r, N_PLACES, loc[p]);
                PUT(W_IS); PUT(W_MARY + p); PUT(W_IN); PUT(W_THE); PUT(W_BATHROOM + l); PUT(W_Q);
                PUT(l == loc[p] ? W_YES : W_NO);
            } else if (kind == 2) {     /* how many objects is mary carrying ? two */
                int c = 0;
                for (int o = 0; o < N_OBJECTS; o++) c += holder[o] == p;
                PUT(W_HOW); PUT(W_MANY); PUT(W_OBJECTS); PUT(W_IS); PUT(W_MARY + p); PUT(W_CARRYING); PUT(W_Q);
                PUT(W_NONE + c);
            } else {                    /* where is the apple ? garden */
                int o = placed[rng_below(r, (uint32_t)n_placed)];
                PUT(W_WHERE); PUT(W_IS); PUT(W_THE); PUT(W_APPLE + o); PUT(W_Q);
                PUT(W_BATHROOM + (holder[o] >= 0 ? loc[holder[o]] : objloc[o]));
            }
            continue;
        }
        int kind = (int)rng_below(r, 4), p = -1, o = -1;
        if (kind == 2 && n_known) {     /* pick up an object lying here or of unknown place */
            p = known[rng_below(r, (uint32_t)n_known)];
            int free_o[N_OBJECTS], n_free = 0;
            for (int i = 0; i < N_OBJECTS; i++)
                if (holder[i] < 0 && (objloc[i] < 0 || objloc[i] == loc[p])) free_o[n_free++] = i;
            if (n_free) o = free_o[rng_below(r, (uint32_t)n_free)];
        } else if (kind == 3) {         /* drop a carried object */
            int held[N_OBJECTS], n_held = 0;
            for (int i = 0; i < N_OBJECTS; i++)
                if (holder[i] >= 0) held[n_held++] = i;
            if (n_held) o = held[rng_below(r, (uint32_t)n_held)], p = holder[o];
        }
        if (o >= 0 && kind == 2) {
            PUT(W_MARY + p); PUT(W_PICKED); PUT(W_UP); PUT(W_THE); PUT(W_APPLE + o); PUT(W_DOT);
            holder[o] = p;
            objloc[o] = -1;
        } else if (o >= 0) {
            PUT(W_MARY + p); PUT(W_DROPPED); PUT(W_THE); PUT(W_APPLE + o); PUT(W_DOT);
            holder[o] = -1;
            objloc[o] = loc[p];
        } else {                        /* move (also when the other kinds have nothing to act on) */
            p = (int)rng_below(r, N_PEOPLE);
            int l = pick_other(r, N_PLACES, loc[p]);
            PUT(W_MARY + p); PUT(W_MOVED + (int)rng_below(r, N_VERBS)); PUT(W_TO); PUT(W_THE); PUT(W_BATHROOM + l);
            PUT(W_DOT);
            loc[p] = l;
        }
    }
#undef PUT
    return n;
}

/* ---------------------------------------------------------------- windows */

/* Position j of a story's encoding: x_j = [<eos>, w][j], and the target y_j = w[j] only where
 * x_j = "?" (the request-answer mode). */
static void encode(const BabiData *d, const int *w, int n, int j, int *x, int *y) {
    *x = j == 0 ? d->id_eos : w[j - 1];
    *y = *x == d->id_q && j < n ? w[j] : TASK_IGNORE;
}

/* Longest generated story: 12 lines of at most 8 words. */
#define GEN_CAP 128

void babi_train_window(const BabiData *d, Rng *r, int W, int *ids, int *tg) {
    int buf[GEN_CAP], pos = 0, first = 1;
    const Stories *s = &d->split[BABI_TRAIN];
    while (pos < W) {
        const int *w;
        int n;
        if (d->generated) {
            n = babi_gen_story(d, r, buf, GEN_CAP);
            w = buf;
        } else {
            int i = (int)rng_below(r, (uint32_t)s->n);
            w = s->tok + s->off[i];
            n = (int)(s->off[i + 1] - s->off[i]);
        }
        int j = first ? (int)rng_below(r, (uint32_t)(n + 1)) : 0;
        first = 0;
        for (; j <= n && pos < W; j++, pos++) encode(d, w, n, j, &ids[pos], &tg[pos]);
    }
}

int64_t babi_eval_windows(const BabiData *d, int W) { return (d->n_stream + W - 1) / W; }

void babi_eval_window(const BabiData *d, int W, int64_t index, int *ids, int *tg) {
    for (int i = 0; i < W; i++) {
        int64_t k = index * W + i;
        ids[i] = k < d->n_stream ? d->ex[k] : 0;   /* <pad> */
        tg[i] = k < d->n_stream ? d->ey[k] : TASK_IGNORE;
    }
}

static void build_stream(BabiData *d) {
    const Stories *s = &d->split[BABI_EVAL];
    d->n_stream = s->n_tok + s->n;   /* one <eos> per story */
    d->ex = xmalloc(sizeof(int) * (size_t)d->n_stream);
    d->ey = xmalloc(sizeof(int) * (size_t)d->n_stream);
    int64_t k = 0;
    for (int i = 0; i < s->n; i++) {
        const int *w = s->tok + s->off[i];
        int n = (int)(s->off[i + 1] - s->off[i]);
        for (int j = 0; j <= n; j++, k++) encode(d, w, n, j, &d->ex[k], &d->ey[k]);
    }
}

/* ---------------------------------------------------------------- create */

int babi_create(BabiData **out, const char *dir, const char *eval_split, int eval_stories, uint64_t seed) {
    *out = NULL;
    if (strcmp(eval_split, "valid") && strcmp(eval_split, "test"))
        return err_set(IM_EINVAL, "task key 'babi_split': unknown '%s' (valid | test)", eval_split);
    BabiData *d = xcalloc(1, sizeof *d);
    rehash(d, 64);
    word_add(d, "<pad>");
    word_add(d, "<eos>");
    int rc = IM_OK;
    if (dir && *dir) {
        rc = read_dir(d, dir, eval_split);
    } else {
        d->generated = 1;
        for (int i = 0; i < GEN_N; i++) CHECK(word_add(d, GEN_TEXTS[i]) == i, "generator word list has a duplicate");
        CHECK(eval_stories >= 1, "eval_stories %d", eval_stories);
        int buf[GEN_CAP];
        for (int i = 0; i < eval_stories; i++) {
            Rng r;
            rng_seed(&r, rng_hash(seed, 0xBAB1, (uint64_t)i), 3);   /* the eval split: its own stream */
            int n = babi_gen_story(d, &r, buf, GEN_CAP);
            stories_push(&d->split[BABI_EVAL], buf, n, 0);
        }
    }
    if (rc) { babi_free(d); return rc; }
    d->id_eos = 1;
    /* a folder without any question has no "?"; id -1 then never matches, so nothing is scored */
    d->id_q = babi_word_id(d, "?");
    build_stream(d);
    *out = d;
    return IM_OK;
}

void babi_free(BabiData *d) {
    if (!d) return;
    for (int i = 0; i < d->n_words; i++) free(d->words[i]);
    free(d->words);
    free(d->slot);
    stories_free(&d->split[0]);
    stories_free(&d->split[1]);
    free(d->ex);
    free(d->ey);
    free(d);
}
