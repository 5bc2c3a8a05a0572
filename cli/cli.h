/* cli.h: the subcommands of `implicit`, each a run function and the CmdSpec (opts.h) that
 * parses its options and prints its --help. main.c lists them in one table. */
#ifndef IMPLICIT_CLI_H
#define IMPLICIT_CLI_H

#include "opts.h"

#define CLI_COMMANDS(X) \
    X(info) X(init) X(train) X(eval) X(data) X(demo) X(smoke) X(generate) X(mc) X(tokenizer)
#define CLI_DECLARE(name) \
    extern const CmdSpec name##_cmd; \
    int cmd_##name(int argc, char **argv);
CLI_COMMANDS(CLI_DECLARE)
#undef CLI_DECLARE

#endif
