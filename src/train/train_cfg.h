/* train_cfg.h: the training-run keys (optimiser, schedule, logging, checkpoints), listed once.
 * Together with the model keys (models/config.h) and the task keys (data/task.h) they form the
 * whole configuration of `implicit train`: one JSON file plus `--key value` overrides. */
#ifndef IMPLICIT_TRAIN_CFG_H
#define IMPLICIT_TRAIN_CFG_H

#include "../core/keytab.h"

#define TRAIN_CFG_KEYS(X)                                                                              \
    X(STR, out, "runs/run", "output folder: config.json, log.jsonl, model/best/state checkpoints")     \
    X(INT, overwrite, 0, "1 = start over in an out folder that holds an earlier run (deletes its checkpoints and log)") \
    X(INT, steps, 1000, "optimizer steps")                                                             \
    X(INT, batch, 32, "sequences per micro-batch")                                                     \
    X(INT, grad_accum, 1, "micro-batches per optimizer step (gradients summed, loss averaged)")        \
    X(FLOAT, lr, 1e-3, "peak learning rate")                                                           \
    X(FLOAT, min_lr, 0.0, "learning rate at the end of the decay")                                     \
    X(INT, warmup, 100, "linear warm-up steps")                                                        \
    X(STR, schedule, "cosine", "cosine | linear | constant (after warm-up)")                           \
    X(FLOAT, beta1, 0.9, "AdamW beta1")                                                                \
    X(FLOAT, beta2, 0.95, "AdamW beta2")                                                               \
    X(FLOAT, eps, 1e-8, "AdamW epsilon")                                                               \
    X(FLOAT, weight_decay, 0.1, "AdamW decoupled weight decay (never on norms, biases, A_log, dt_bias, D)") \
    X(INT, decay_embeddings, 0, "1 = apply weight decay to the embedding too")                         \
    X(FLOAT, clip, 1.0, "global grad-norm clipping (0 = off)")                                         \
    X(INT, seed, 0, "seed of initialisation and dropout")                                              \
    X(INT, threads, 0, "threads for kernels and BLAS (0 = all cores)")                                 \
    X(INT, log_every, 10, "steps between log lines / JSONL records")                                   \
    X(INT, eval_every, 200, "steps between evaluations (0 = only at the end)")                         \
    X(INT, eval_batch, 64, "sequences per evaluation batch")                                           \
    X(STR, eval_mode, "simultaneous", "simultaneous | sequential | both (sequential + duality agreement)") \
    X(INT, gap_samples, 64, "implicit models: sequences per (length, p) for the fixed-point gap at every evaluation (0 = off)") \
    X(FLOAT, gap_tol, 1e-3, "fixed-point gap: tolerance of the tight solve")                          \
    X(INT, gap_max_iter, 512, "fixed-point gap: iteration cap of the tight solve")                    \
    X(INT, ckpt_every, 500, "steps between checkpoints (0 = only at the end)")                         \
    X(STR, best_metric, "seq_acc", "metric that selects best.safetensors: seq_acc | tok_acc | last10_acc | loss") \
    X(STR, on_nan, "stop", "stop | skip: what a NaN/inf loss, an exploding gradient or divergence does")  \
    X(FLOAT, explode_norm, 1e6, "a gradient norm above this counts as exploding")                     \
    X(FLOAT, diverge_factor, 4.0, "divergence: a loss above this x max(lowest running median, 0.25) (0 = off)")  \
    X(FLOAT, diverge_grad_factor, 100.0, "divergence: a grad norm above this x max(running median, 1) (0 = off)") \
    X(INT, diverge_window, 100, "divergence: recent healthy steps in the running medians")             \
    X(INT, diverge_warmup, 20, "divergence: healthy steps before the check starts (again after resume or a curriculum switch)") \
    X(INT, diverge_steps, 10, "divergence: consecutive steps above a threshold that stop the run (or are skipped)") \
    X(STR, progress, "auto", "auto | bar | plain | none")                                              \
    X(INT, report, 1, "1 = write report.html (plots of the run) into the out folder at each checkpoint and at the end") \
    X(STR, tensorboard, "", "folder for TensorBoard scalar event files (empty: none; `tensorboard --logdir` reads it)")

/* X(key, lo, hi): the range of every integer key, checked first (core/keytab.h). */
#define TRAIN_CFG_BOUNDS(X)                                                                            \
    X(steps, 1, 100000000) X(batch, 1, 65536) X(grad_accum, 1, 65536) X(warmup, 0, 1 << 30)            \
    X(decay_embeddings, 0, 1) X(seed, -2147483647, 2147483647) X(threads, 0, 4096)                     \
    X(log_every, 1, 1 << 30) X(eval_every, 0, 1 << 30) X(eval_batch, 1, 65536) X(gap_samples, 0, 1 << 30) \
    X(gap_max_iter, 2, 1 << 20) X(ckpt_every, 0, 1 << 30) \
    X(overwrite, 0, 1) X(report, 0, 1) X(diverge_window, 1, 100000) X(diverge_warmup, 0, 1 << 30) X(diverge_steps, 1, 100000)

typedef struct {
    TRAIN_CFG_KEYS(KEY_FIELD)
} TrainCfg;

extern const KeyTab train_keytab;

void train_cfg_defaults(TrainCfg *c);
int train_cfg_validate(const TrainCfg *c);

#endif
