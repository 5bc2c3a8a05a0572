/* cli.h: the subcommands of `implicit`, each a run function and the CmdSpec (opts.h) that
 * parses its options and prints its --help. main.c lists them in one table. */
#ifndef IMPLICIT_CLI_H
#define IMPLICIT_CLI_H

#include "opts.h"

#define CLI_COMMANDS(X) \
    X(info) X(init) X(train) X(eval) X(report) X(data) X(demo) X(smoke) X(generate) X(mc) X(tokenizer) X(export)
#define CLI_DECLARE(name) \
    extern const CmdSpec name##_cmd; \
    int cmd_##name(int argc, char **argv);
CLI_COMMANDS(CLI_DECLARE)
#undef CLI_DECLARE

#include "../src/core/check.h"

/* The hint after a failed checkpoint load (a NaN/inf weight is IM_ENUM: see --allow_nonfinite). */
static inline const char *cli_load_hint(int rc) {
    return rc == IM_ENUM ? "--allow_nonfinite loads it anyway, for inspection"
                         : "CKPT is a checkpoint, a safetensors file or a Hugging Face folder (docs/interop.md); "
                           "--config FILE gives a config it lacks";
}

#endif
