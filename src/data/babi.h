/* babi.h: catbAbI stories (fp-rnn §6.4): a reader for the bAbI text format, its vocabulary, a small
 * generator of bAbI-style stories, and the 200-token windows the catbabi task trains on.
 *
 * Reader. A folder holds qa<N>_train.txt / qa<N>_valid.txt / qa<N>_test.txt (en-valid layout) or
 * qa<N>_<name>_<split>.txt (en / en-10k layout), N = 1..20; missing tasks are skipped. Lines are
 * "<id> <text>"; text is lower-cased. A statement ("... .") contributes its words and "."; a
 * question line "<question>?\t<answer>\t<supporting ids>" contributes the question words, "?"
 * and the answer as one word ("n,w" stays one word); supporting-fact ids are dropped. A line with
 * id 1 starts a new story, and a story holds every statement and Q/A pair up to the next one.
 * Quirk kept from the reference preprocessing: a story is emitted only when the next one starts,
 * so the LAST story of every file is never used. Words are split on runs of spaces (the
 * reference splits on single spaces; bAbI has no double spaces, so the results agree).
 * Vocabulary: "<pad>" = 0, "<eos>" = 1, then words in order of first appearance over the
 * partitions train, valid, test, each over tasks 1..20 in file order. (The reference builds the
 * order over en-valid and en-valid-10k after an unseeded shuffle, and also inserts the integer
 * task ids as 20 dead entries; neither is reproducible or useful, so ids differ, not the words.)
 *
 * Generated stories (no folder): people move between rooms and pick up / drop objects, and the
 * questions are "where is mary ? kitchen", "is mary in the kitchen ? no", "how many objects is
 * john carrying ? two" and "where is the apple ? garden", answered from the simulated world.
 * Every story ends with a question.
 *
 * Encoding: a story of words w_1..w_n is x = [<eos>, w_1..w_n], y = [w_1..w_n, <eos>]; in the
 * request-answer mode only the answers are targets: y_j is kept where x_j = "?" and is
 * TASK_IGNORE elsewhere.
 * Out of scope: the reference's per-task accuracy tables, the en-valid (1k) set beside 10k.
 */
#ifndef IMPLICIT_BABI_H
#define IMPLICIT_BABI_H

#include <stdint.h>

#include "../core/rng.h"

typedef struct BabiData BabiData;

enum { BABI_TRAIN = 0, BABI_EVAL = 1 };

/* dir != "": read the folder; eval_split ("valid" | "test") is the split kept for evaluation
 * (both are read for the vocabulary, so it does not depend on the choice). dir == "": generated
 * stories; the eval split is eval_stories stories drawn from `seed`.
 * IM_EIO (folder or file unreadable, no training files, no file of the eval split),
 * IM_EFORMAT (a malformed line, naming file:line), IM_EINVAL (bad eval_split). */
int babi_create(BabiData **out, const char *dir, const char *eval_split, int eval_stories, uint64_t seed);
void babi_free(BabiData *d);

int babi_vocab(const BabiData *d);
const char *babi_word(const BabiData *d, int id);           /* NULL outside 0..vocab-1 */
int babi_word_id(const BabiData *d, const char *word);      /* -1 if not in the vocabulary */
int babi_is_generated(const BabiData *d);

int babi_n_stories(const BabiData *d, int split);           /* BABI_TRAIN | BABI_EVAL */
/* Words of story i (no <eos>), its length through *n and bAbI task id (0: generated) through *task. */
const int *babi_story(const BabiData *d, int split, int i, int *n, int *task);

/* One generated story into out (at most cap words); returns its length. */
int babi_gen_story(const BabiData *d, Rng *r, int *out, int cap);

/* A training window of W tokens: a random story (from the train split, or generated), entered at
 * a random position so windows start mid-story like the reference's stream, then further random
 * stories until W tokens; the last one is cut. ids, tg: (W). */
void babi_train_window(const BabiData *d, Rng *r, int W, int *ids, int *tg);
/* The eval split as one stream (stories in order), cut into windows of W tokens; the last is
 * right-padded with <pad> (target TASK_IGNORE). */
int64_t babi_eval_windows(const BabiData *d, int W);
void babi_eval_window(const BabiData *d, int W, int64_t index, int *ids, int *tg);

#endif
