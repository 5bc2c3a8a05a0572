/* engine.h: the library's internal modules, as the subcommands use them.
 *
 * The library is layered core -> kernels -> layers -> fixed point -> models -> training; the CLI
 * sits on top and reaches every layer: load a checkpoint (ckpt_load), run it in parallel
 * (model_fwd) or token by token (model_state_init + model_step), train it (trainer_*), tokenize
 * text (tok_*), sample from it (gen_run, sample_next), score multiple-choice tasks (mc_*).
 * Programs outside this tree use the public API, include/implicit.h, instead.
 */
#ifndef IMPLICIT_ENGINE_H
#define IMPLICIT_ENGINE_H

#include "../src/core/check.h"
#include "../src/core/arena.h"
#include "../src/core/rng.h"
#include "../src/core/log.h"
#include "../src/core/timer.h"
#include "../src/kernels/kernels.h"
#include "../src/io/atomic.h"
#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/config.h"
#include "../src/core/params.h"
#include "../src/models/model.h"
#include "../src/models/ckpt.h"
#include "../src/fixedpoint/fp.h"
#include "../src/fixedpoint/fpo.h"
#include "../src/tok/tokenizer.h"
#include "../src/data/task.h"
#include "../src/data/textdata.h"
#include "../src/train/optim.h"
#include "../src/train/evaluate.h"
#include "../src/train/trainer.h"
#include "../src/train/dist.h"
#include "../src/train/sample.h"
#include "../src/train/mc.h"

#endif
