/* task.h: the benchmark tasks, generated on the fly from a seed (or read, for catbAbI).
 *
 *   word  G x M word problem with parameter p (implicit-lm §8.2): x_t = g_t*|M| + m_t, where g_t is
 *         the identity with probability p and else uniform over G, m_t uniform over M; the target
 *         at every position is the prefix product y_t = y_{t-1}·x_t (y_0 = x_0), componentwise
 *         (g1,m1)·(g2,m2) = (g1∘g2, m1·m2). Vocabulary |G|*|M| (240 for A5 x aperiodic).
 *   ios   Illusion-of-State format (fp-rnn §6.1): x_i uniform over G, input [BOS, x_1..x_k],
 *         labels [BOS, y_1..y_k] with y_t = y_{t-1}∘x_t, y_0 = e. Tokens 0..|G|-1 are elements, then
 *         the specials PAD=|G|, BOS=|G|+1, UNK, EOS, SEP, CLS, MASK (vocabulary |G|+7, as the
 *         reference's tokenizer). Training rows have k ~ U{2..train_len}, right-padded with PAD.
 *   copy  fp-rnn §6.2 (tasks_copy.c): rows of packed "$ s | s ." examples; eval scores the copy.
 *   parity, even_pairs, cycle_navigation, modular_arithmetic, modular_arithmetic_brackets
 *         fp-rnn §6.3 (tasks_formal.c): one hidden answer per row, scored at the position before it.
 *   catbabi  fp-rnn §6.4 (babi.h): bAbI stories in windows of `context` tokens, answers scored.
 *   lm    language modelling on a token file (textdata.h, `implicit data prepare`; tasks_lm.c):
 *         training rows are random windows of context + 1 tokens of the train split (inputs
 *         window[0..C-1], targets window[1..C]); an eval sample of length L is the index-th
 *         non-overlapping window of the validation split, so the windows of one length cover it
 *         in order (validation loss, perplexity = exp(loss); lengths > context = extrapolation).
 *
 * Every row is a pure function of (config, seed, stream, index): a training row of (step, row),
 * an evaluation row of its sample index. Batches therefore do not depend on the batch size, the
 * thread count or on what was drawn before, and a resumed run needs only its step number. (The
 * catbAbI reference instead deals stories to stateful streams; babi.h says what we do instead.)
 * An ios / word evaluation sample of length L is the prefix of the same sample at any longer
 * length (the reference evaluates prefixes of one test set the same way), and at a fixed index the
 * word problem's samples for different p share their random numbers.
 * Out of scope: model-side loss and training loops, tokenizing (tok/tokenizer.h, done once by
 * `implicit data prepare`).
 */
#ifndef IMPLICIT_TASK_H
#define IMPLICIT_TASK_H

#include <stdint.h>
#include <stdio.h>

#include "../core/keytab.h"
#include "group.h"

/* The task families, in the order of the `task` key's help. */
typedef enum {
    TASK_WORD, TASK_IOS, TASK_COPY, TASK_PARITY, TASK_EVEN_PAIRS, TASK_CYCLE, TASK_MODARITH, TASK_BRACKETS,
    TASK_CATBABI, TASK_LM, TASK_N_KIND
} TaskKind;

/* Target value of positions that are not scored (same value as the models' IGNORE_INDEX). */
#define TASK_IGNORE (-100)
/* Most entries of an eval length or eval p list. */
#define TASK_MAX_EVAL 64
/* The eval length "val" of the formal tasks: lengths drawn from [val_min, val_max] per sample
 * (the reference's validation split) instead of one exact length. */
#define TASK_LEN_VAL 0
/* Longest row (copy, formal) or window (catbabi) accepted for `context`. */
#define TASK_MAX_CONTEXT 65536
/* Longest task length we accept anywhere (keeps int products like 4*train_len safe). */
#define TASK_MAX_LEN (1 << 20)
/* ios specials, as offsets from |G| (fp-rnn §6.1 tokenisation). */
enum { TASK_PAD = 0, TASK_BOS = 1, TASK_UNK = 2, TASK_EOS = 3, TASK_SEP = 4, TASK_CLS = 5, TASK_MASK = 6, TASK_N_SPECIAL = 7 };

/* X(type, name, default, help) with type INT | FLOAT | STR (core/keytab.h): the one list of task
 * keys. It drives the TaskCfg struct, defaults, `--key value` parsing, JSON and the printed config. */
#define TASK_CFG_KEYS(X)                                                                                  \
    X(STR, task, "word", "task family")                                                                  \
    X(STR, group, "A5", "word, ios: group G: S<n>, A<n>, Z<n> or a direct product like A4xZ5 (at most 5040 elements)") \
    X(STR, monoid, "aperiodic", "word task: monoid M = aperiodic {E,A,B,X} | trivial (vocab |G|)")        \
    X(FLOAT, p, 0.9, "word task: probability that a token's group part is the identity")                 \
    X(INT, train_len, 64, "word: training length T; ios: max length k (trains on lengths 2..k mixed)")   \
    X(STR, len_curriculum, "", "word, ios: shorter training lengths first, 'L1:S1,L2:S2,..' = train_len L1 "   \
                               "before step S1, L2 before S2, .., then train_len (lengths and steps increasing)") \
    X(INT, seed, 0, "data seed; training and evaluation are separate streams derived from it")           \
    X(STR, eval_lens, "", "comma-separated eval lengths (formal tasks: 'val' = the val_min..val_max mix); \"\" = " \
                          "word: T,2T,4T; ios: 2 and steps of k/4 up to 4k; copy: L_max/2 .. 2 L_max; "           \
                          "formal: val, L_max/2, L_max, 2 L_max, .. up to context; catbabi, lm: context")               \
    X(STR, eval_ps, "", "word task: comma-separated eval p values; \"\" = the training p and 0.5")       \
    X(INT, eval_samples, 512, "samples per eval length (and p); catbabi, lm: at most this many windows")      \
    X(INT, pad_loss, 0, "ios: 1 = pad positions must predict PAD (the reference); 0 = ignored (default): " \
                        "PAD after PAD is trivial, so scoring it dilutes the loss and inflates token accuracy") \
    X(INT, shift, 0, "word: 0 = per-position targets y_t (default); 1 = the reference's shifted HF loss, " \
                     "targets y_{t+1} in training only (spec 12-B2)")                                      \
    X(INT, min_len, 0, "copy, formal: shortest training length L_min (0 = the reference's: copy 5, formal 3)") \
    X(INT, max_len, 0, "copy, formal: longest training length L_max (0 = copy 50, formal 40)")           \
    X(INT, context, 0, "copy, formal: row length C (0 = 256; copy needs C >= 2 L_max + 3); "             \
                       "catbabi: window length (0 = 200); lm: training window T (0 = 256)")                                                 \
    X(INT, alphabet, 26, "copy: letters V (vocabulary V + 4: $ | . *)")                                  \
    X(INT, modulus, 0, "cycle_navigation: cycle length (0 = 6); modular_arithmetic(_brackets): modulus (0 = 5); " \
                       "parity, even_pairs: 2")                                                            \
    X(INT, val_min, 40, "formal: shortest length of the eval entry 'val'")                               \
    X(INT, val_max, 256, "formal: longest length of the eval entry 'val'")                               \
    X(STR, eval_pad, "context", "copy, formal: eval rows padded to context C (the reference) | tight "   \
                                "(just long enough: faster, and the same answers for causal models)")      \
    X(STR, babi_dir, "", "catbabi: folder of bAbI qa<N>_[<name>_]train|valid|test.txt files; "           \
                         "\"\" = generated bAbI-style stories")                                            \
    X(STR, babi_split, "valid", "catbabi: the eval split, valid | test")                                 \
    X(INT, babi_eval_stories, 1000, "catbabi with generated stories: stories in the eval split")          \
    X(STR, data, "", "lm: the token file (`implicit data prepare TEXT... --out FILE.tok`)")                \
    X(STR, tokenizer, "", "lm: tokenizer spec (byte | FILE.bpe | FILE.json); \"\" = the data file's; kept in " \
                          "checkpoints so eval / generate can decode without the data file")

/* X(key, lo, hi): the range of every integer key, checked first (core/keytab.h); "0 = the task's
 * default" keys start at 0, and the task-specific rules (min_len <= max_len, ...) come after. */
#define TASK_CFG_BOUNDS(X)                                                                                \
    X(p, 0, 1) X(train_len, 1, TASK_MAX_LEN) X(seed, 0, 2147483647) X(eval_samples, 1, 1 << 24)             \
    X(pad_loss, 0, 1) X(shift, 0, 1) X(min_len, 0, TASK_MAX_LEN) X(max_len, 0, TASK_MAX_LEN)                     \
    X(context, 0, TASK_MAX_CONTEXT) X(alphabet, 1, 1000) X(modulus, 0, 1000) X(val_min, 0, TASK_MAX_CONTEXT) \
    X(val_max, 0, TASK_MAX_CONTEXT) X(babi_eval_stories, 1, 1 << 20)

typedef struct {
    TASK_CFG_KEYS(KEY_FIELD)
} TaskCfg;

/* The generic view of the table (core/keytab.h): lets a CLI offer one `--key value` to the
 * model, task and training tables in turn, and apply a sectioned JSON config. */
extern const KeyTab task_keytab;

void task_cfg_defaults(TaskCfg *c);
/* 1 if `key` is a task key (lets a caller route `--key value` between config tables). */
int task_cfg_has(const char *key);
/* Set one key from text. IM_EINVAL naming the key on an unknown key or an ill-typed value. */
int task_cfg_set(TaskCfg *c, const char *key, const char *value);
/* Ranges and consistency (known task, parsable group, lists). IM_EINVAL naming the key. */
int task_cfg_validate(const TaskCfg *c);
/* The config as one JSON object in buf (NUL-terminated, truncated to cap). Returns bytes needed. */
size_t task_cfg_to_json(const TaskCfg *c, char *buf, size_t cap);
/* "  key  value  # help" lines. */
void task_cfg_print(const TaskCfg *c, FILE *f);

typedef struct Task Task;

/* Validate the config and build the group tables (catbabi: read or generate the stories).
 * IM_EINVAL (naming the key) on a bad config; catbabi also IM_EIO / IM_EFORMAT (babi.h). */
int task_create(Task **out, const TaskCfg *c);
void task_free(Task *t);
const TaskCfg *task_cfg(const Task *t);   /* the config, with 0 = "task default" keys resolved */
const Group *task_group(const Task *t);   /* tasks without a group: Z1, named "-" */
int task_is_ios(const Task *t);
int task_kind(const Task *t);              /* TaskKind */
const char *task_kind_name(int kind);      /* the `task` key's value */
const char *task_names(void);              /* "word | ios | ... | lm", from the table of families */
/* One line for logs: "copy: V 26, L 5..50, context 256". Returns snprintf's count. */
int task_describe(const Task *t, char *buf, size_t cap);

int task_vocab(const Task *t);             /* word: |G|*|M|; ios: |G| + 7; copy: V + 4; formal: 3..; catbabi: words;
                                            * lm: the token file's vocabulary */
/* Model sequence length T for an eval length (ios: len + 1; copy: max(C, 2 len + 3) - 1 or, with
 * eval_pad tight, 2 len + 2; formal: max(C, L) - 1 or L - 1; catbabi, lm: len). */
int task_seq_len(const Task *t, int len);
int task_train_seq_len(const Task *t);     /* the longest T of task_train_batch (copy, formal: C - 1; catbabi, lm: C) */
/* The training length (train_len, or the len_curriculum entry) of optimizer step `step`, and its
 * model positions: the T of that step's task_train_batch (<= task_train_seq_len). */
int task_train_len_at(const Task *t, uint64_t step);
int task_train_seq_len_at(const Task *t, uint64_t step);
int task_special(const Task *t, int which);/* ios token id of TASK_PAD, TASK_BOS, ...; -1 for the others */
/* Chance accuracy of the answer for tasks that report scaled accuracy (acc - chance) / (1 - chance):
 * 1/modulus for the formal tasks (1/2 parity, even_pairs); 0 for the others. */
double task_chance(const Task *t);
/* The range of task lengths an eval entry draws (formal: "val", odd / minimum lengths; else len..len). */
void task_eval_len_range(const Task *t, int len, int *lo, int *hi);
/* Distinct eval samples at this length: catbabi = windows of the eval split, lm = windows of the
 * validation split (floor((n_val - 1) / len)); -1 = unlimited. */
long long task_eval_count(const Task *t, int len);

/* Training rows row0..row0+B-1 of optimizer step `step` (row0 lets micro-batches of one step be
 * generated separately and still equal the whole batch). ids, targets: (B, task_train_seq_len_at(step))
 * with TASK_IGNORE where not scored. A word row of a curriculum length L is the prefix of length L
 * of the row the same (step, row) has at train_len. */
void task_train_batch(const Task *t, uint64_t step, int row0, int B, int *ids, int *targets);
/* Evaluation samples index0..index0+B-1 (a stream separate from training) at task length len
 * 1..2^20 (TASK_LEN_VAL for the formal tasks' val mix; catbabi, lm: the window length, windows of
 * the eval split in order; index < task_eval_count) and, for the word task, identity probability p (ignored by the others).
 * ids, targets: (B, task_seq_len(len)). Eval targets are never shifted (the reference's metric
 * compares logits_t with y_t even when it trains with the shifted loss). */
void task_eval_batch(const Task *t, int len, float p, uint64_t index0, int B, int *ids, int *targets);

/* The eval lists (from eval_lens / eval_ps or the defaults); return the count and point *out at
 * the task's own array. Every task but word has one p entry, -1 (= "does not apply"). */
int task_eval_lens(const Task *t, const int **out);
int task_eval_ps(const Task *t, const float **out);

/* Accuracy counts, accumulated over batches: token accuracy over scored positions, accuracy on
 * the last 10 scored positions of each row, and whole-row accuracy (all scored positions right;
 * rows without scored positions are not counted). */
typedef struct {
    double tok_ok, tok_n, last10_ok, last10_n, seq_ok, seq_n;
} TaskScore;

/* s += scores of argmax over the first V logits of each position (ties: lowest id) vs targets.
 * logits: (B, T, V_stride) with V <= V_stride (padded vocabularies); targets: (B, T). */
void task_score(TaskScore *s, const float *logits, int V, int V_stride, const int *targets, int B, int T);
/* Longest length lens[i] with acc[i] > thr among n entries (any order); 0 when none
 * (the fp-rnn §6.1 length-generalisation criterion with thr = 0.9). TASK_LEN_VAL entries never count. */
int task_longest_len(const int *lens, const double *acc, int n, double thr);
/* Shortest length with acc <= thr (where it first drops below); 0 when none. */
int task_first_fail_len(const int *lens, const double *acc, int n, double thr);
/* The accuracy the length criterion uses: "seq_acc" (word problems, copy = string accuracy) or
 * "tok_acc" (formal = answer accuracy, catbabi = request-answer accuracy); lm: "loss" (no
 * accuracy criterion: an LM is judged by its loss / perplexity per length). */
const char *task_len_metric(const Task *t);
const char *task_name_len_metric(const char *task); /* the same from the `task` key's value */

/* A readable token: group element, "(g,m)" pair, "[PAD]"-style special, letter, operator, word;
 * lm: the byte for the byte tokenizer ('a', \n, \xff), else "#id". */
int task_token_str(const Task *t, int id, char *buf, size_t cap);

#endif
