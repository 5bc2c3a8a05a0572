/* trainer.h: the training loop behind `implicit train`.
 *
 * One run = a model config, a task config and a training config. The loop draws batch `step`
 * from the task (a pure function of seed and step, so nothing but the step number is needed to
 * resume the data), runs forward/backward over grad_accum micro-batches, clips, applies AdamW
 * with the scheduled learning rate, logs JSONL, evaluates, and checkpoints.
 *
 * Files in cfg.out:
 *   config.json        all three configs (what --resume reads back)
 *   log.jsonl          one object per logged step and per evaluation, and a "start" record per process
 *   report.html        plots of the run so far (train/run_report.h; at checkpoints and the end; report 0: none)
 *   model.safetensors  the latest weights (+ metadata: step, task and train config)
 *   best.safetensors   the weights with the best eval metric so far
 *   state.safetensors  everything resume needs: weights, AdamW moments, step, RNG state.
 *                      It holds the weights too so that it is self-consistent on its own: a kill
 *                      between two file renames can never pair moments with other weights.
 *   .lock              the pid of the process that owns the folder (flock'ed for the whole run)
 * Every file is written atomically (temp, fsync, rename). One process owns the folder (rundir.h):
 * a second run into it fails naming the owner's pid, and a fresh run does not replace an earlier
 * one unless cfg.overwrite is set.
 */
#ifndef IMPLICIT_TRAINER_H
#define IMPLICIT_TRAINER_H

#include <stdio.h>

#include "../data/task.h"
#include "../models/model.h"
#include "../io/tbevents.h"
#include "diverge.h"
#include "evaluate.h"
#include "optim.h"
#include "train_cfg.h"

typedef struct {
    ModelCfg mcfg;
    TaskCfg tcfg;
    TrainCfg cfg;
    Model model;
    Task *task;
    AdamW opt;
    int step;             /* optimizer steps done */
    double best;          /* best value of cfg.best_metric so far (NAN: none yet) */
    double last_score;    /* mean of cfg.best_metric over the latest evaluation */
    int best_step;
    int skipped;          /* steps skipped by on_nan = skip */
    double last_loss;     /* training loss of the latest applied step (NAN: none since start / resume) */
    int last_loss_step;   /* its step number (1-based) */
    Diverge diverge;      /* running medians of loss and gradient norm (not saved: resume warms up again) */
    int saved_step;       /* step of the latest model.safetensors (-1: none written yet) */
    const char *phase;    /* implicit models: the current curriculum phase (logged when it changes) */
    FILE *log;            /* log.jsonl */
    FILE *lock;           /* cfg.out/.lock, held for the whole run (rank 0; NULL elsewhere) */
    TbWriter tb;          /* cfg.tensorboard's event file (rank 0; f NULL when off) */
    EvalRow *last_eval;   /* results of the latest evaluation */
    int n_last_eval;
    double *losses;       /* (cfg.steps) training loss per step (NAN: skipped), for tests and summaries */
    char *tok_data;       /* the run's tokenizer file, stored in every checkpoint (NULL: byte / none) */
    size_t tok_len;
    const char *tok_kind; /* "bpe" | "hf" */
} Trainer;

/* Fresh run: validate everything, create and claim cfg.out, write config.json, init the model. */
int trainer_init(Trainer *t, const ModelCfg *m, const TaskCfg *task, const TrainCfg *cfg);
/* Resume from dir/state.safetensors with the configs in dir/config.json; `overrides` may change
 * training keys (e.g. steps) but not the model or task. Claims dir and cuts its log.jsonl back
 * to the resumed step. */
int trainer_resume(Trainer *t, const char *dir, int (*overrides)(Trainer *, void *), void *ctx);
/* Train until cfg.steps (or until `stop_at` steps if > 0, for tests). */
int trainer_run(Trainer *t, int stop_at);
/* Evaluate at every configured (length, p); fills t->last_eval. */
int trainer_eval(Trainer *t);
/* Write model.safetensors and state.safetensors for the current step. */
int trainer_save(Trainer *t);
void trainer_free(Trainer *t);

/* Both configs as one JSON object {"model": {...}, "task": {...}, "train": {...}} (malloc'ed). */
char *trainer_config_json(const ModelCfg *m, const TaskCfg *task, const TrainCfg *cfg);

#endif
