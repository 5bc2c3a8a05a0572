/* implicit.h: public API of libimplicit (see README.md).
 *
 * The library is layered core -> kernels -> layers -> fixed point -> models -> training; this
 * header gathers what a program embedding a model needs: load a checkpoint (ckpt_load), run it in
 * parallel (model_fwd) or token by token (model_state_init + model_step), train it (trainer_*),
 * tokenize text (tok_*), sample from it (gen_run, sample_next), score multiple-choice tasks (mc_*).
 */
#ifndef IMPLICIT_H
#define IMPLICIT_H

#define IMPLICIT_VERSION_MAJOR 0
#define IMPLICIT_VERSION_MINOR 1

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
