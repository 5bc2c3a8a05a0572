/* implicit.h: public API of libimplicit (see README.md).
 *
 * The library is layered core -> kernels -> layers -> fixed point -> models -> training; this
 * header gathers the parts a program embedding a model needs.
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
#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/config.h"
#include "../src/models/params.h"
#include "../src/models/model.h"
#include "../src/models/ckpt.h"

#endif
