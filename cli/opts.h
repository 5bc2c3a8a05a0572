/* opts.h: the one option parser of every `implicit` subcommand, with getopt_long semantics
 * written on libc.
 *
 * A command is described once, by a CmdSpec: its synopsis, its own options (a table of OptSpec
 * lines, each storing into a field of the command's argument struct) and the key tables
 * (core/keytab.h) it also accepts as options. The same description parses, prints --help and
 * suggests the closest option for a misspelt one. Syntax:
 *   --key value  and  --key=value      a value-taking option (the next word is its value even if
 *                                      it starts with '-', as getopt_long's required arguments)
 *   --flag                             an option without a value (OPT_FLAG fields)
 *   -h, --help / -V, --version         print the command's help / the version, exit 0, do nothing else
 *   --                                 every later word is a positional argument
 *   -                                  a positional argument (stdin, by convention)
 * Options and positional arguments may be mixed (GNU permutation); options are applied in the
 * order given. Long options are not abbreviated (a key added later must not change what an
 * existing command line means); an unknown one is an error naming the closest known option.
 */
#ifndef IMPLICIT_CLI_OPTS_H
#define IMPLICIT_CLI_OPTS_H

#include <stddef.h>
#include <stdio.h>

#include "../src/core/keytab.h"

typedef enum { OPT_FLAG, OPT_STR, OPT_INT, OPT_NUM } OptKind;

typedef struct {
    const char *name;   /* without "--" */
    OptKind kind;       /* from the field's type: int = FLAG, const char * = STR, long long = INT, double = NUM */
    size_t offset;      /* of the field in the command's argument struct */
    double lo, hi;      /* INT, NUM: accepted values lo..hi (no check when lo >= hi) */
    const char *meta;   /* the value's name in --help: "N", "FILE" (flags: unused) */
    const char *help;
} OptSpec;

/* One table line: OPT(ArgsStruct, field, lo, hi, "META", "help"); the option is --field and its
 * kind follows the field's C type, so a table line cannot disagree with the struct. */
#define OPT_KIND_OF(S, f) \
    _Generic(((S *)0)->f, int: OPT_FLAG, const char *: OPT_STR, long long: OPT_INT, double: OPT_NUM)
#define OPT(S, f, lo, hi, meta, help) {#f, OPT_KIND_OF(S, f), offsetof(S, f), lo, hi, meta, help}

/* A key table accepted as options (`--d_model 64` for the model table). */
typedef struct {
    const KeyTab *tab;
    const char *const *only; /* NULL: every key; else the accepted names, NULL-terminated */
    int listed;              /* --help lists the keys (else one line names the table) */
} OptKeys;

typedef struct {
    const char *name;      /* as typed after `implicit`: "eval", "data dump" */
    const char *synopsis;  /* after the name in the usage line ("CKPT [--key value ...]"); '\n' starts another */
    const char *summary;   /* one line, for the command lists */
    const char *about;     /* NULL or more text for --help */
    const OptSpec *opts;
    int n_opts;
    const OptKeys *keys;
    int n_keys;
    int min_pos, max_pos;  /* positional arguments accepted (max_pos < 0: any number) */
} CmdSpec;

typedef struct {
    const KeyTab *tab;
    const char *key, *value;
} OptKV;

typedef struct {
    char **pos;            /* (n_pos) positional arguments, in order */
    int n_pos;
    OptKV *kv;             /* (n_kv) key-table options, in order */
    int n_kv;
    int help, version;     /* -h / -V was given (nothing else was stored) */
    char hint[256];        /* after an error: what to do (the closest option, the usage) */
} OptArgs;

/* Parse argv (the words after the command's name) with c: own options into args (which holds
 * the defaults on entry; untouched on any error or -h / -V), the rest into *out. IM_OK or
 * IM_EINVAL with err_msg() and out->hint set. Call opts_free(out) in both cases. */
int opts_parse(const CmdSpec *c, void *args, int argc, char **argv, OptArgs *out);
void opts_free(OptArgs *out);

/* What commands call: opts_parse, printing the help, the version or the error. Returns 1 to run
 * the command (*status = 0), else 0 with the exit status in *status (0 after -h / -V, 1 after an
 * error) and *out freed:  if (!opts_get(&spec, &args, argc, argv, &o, &rc)) return rc; */
int opts_get(const CmdSpec *c, void *args, int argc, char **argv, OptArgs *out, int *status);

/* Apply the key-table options in order: out->kv[i] goes to objs[j] where tabs[j] == its table. */
int opts_apply_keys(const OptArgs *out, const KeyTab *const *tabs, void *const *objs, int n);
/* The key-table options as {"key", "value", ..., NULL} in kv (cap entries, NULL included). */
int opts_key_list(const OptArgs *out, const char **kv, int cap);

/* --help of c, with the defaults taken from args. */
void opts_help(const CmdSpec *c, const void *args, FILE *f);
void opts_version(FILE *f);

/* The word of cands closest to word by edit distance (a transposition counts as one edit), or NULL
 * when none is close enough to be a likely misspelling. */
const char *opts_closest(const char *word, const char *const *cands, int n);

/* A command group (`implicit`, `implicit data`, `implicit tokenizer`): argv[0] names one of cmds.
 * No name: the group's usage on stderr, exit 2; -h / --help / help [CMD]: usage (or CMD's help),
 * exit 0; -V / --version: the version; an unknown name: an error with the closest name, exit 2. */
typedef struct {
    const CmdSpec *spec;
    int (*run)(int argc, char **argv);
} OptCommand;
int opts_dispatch(const char *group, const OptCommand *cmds, int n, const char *tail, int argc, char **argv);

#endif
