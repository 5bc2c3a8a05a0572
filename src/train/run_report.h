/* run_report.h: run folders as one self-contained HTML page of plots (`implicit report`).
 *
 * A report is built from one or more run folders (what `implicit train --out DIR` writes:
 * config.json, log.jsonl, checkpoints) and from evaluation files (`implicit eval --json`; any
 * *.json file in a run folder whose top level has "rows" is one). Several runs overlay their
 * curves, one colour per run, with a legend. Each panel appears only when its data exists: the
 * list and what each shows is docs/report.md. The page has inline SVG (io/svg.h) and inline
 * CSS, no scripts, no network, no fonts but sans-serif, so it opens from disk and prints.
 * log.jsonl is read with the tolerant reader (io/jsonl.h): a torn last line, malformed lines and
 * records repeated after a resume are handled and noted in the page.
 */
#ifndef IMPLICIT_RUN_REPORT_H
#define IMPLICIT_RUN_REPORT_H

#include <stddef.h>

#include "../io/svg.h"

typedef struct RunReport RunReport;

/* title NULL: "Training report" with the runs' names. */
RunReport *run_report_new(const char *title);
void run_report_free(RunReport *r);
/* Add a run folder. IM_EIO when it cannot be read (it names the path and why), IM_EINVAL when it
 * is not a run folder (neither config.json nor log.jsonl), IM_EFORMAT when config.json is not
 * JSON. Returns the run's index (>= 0) on success. */
int run_report_add_run(RunReport *r, const char *dir);
/* A run without a folder (evaluations of a checkpoint that lies outside one): label names it. */
int run_report_add_source(RunReport *r, const char *label);
/* Evaluation rows in the JSON of `implicit eval --json` (eval_json_text) for run `run`; origin
 * names them in legends ("eval.json"). IM_EFORMAT when text is not such JSON. */
int run_report_add_eval_json(RunReport *r, int run, const char *text, size_t len, const char *origin);
int run_report_runs(const RunReport *r);

/* The whole page. */
void run_report_render(const RunReport *r, TextBuf *out);
/* The rule for a report's output path: io/atomic.h's for reports ("-" = standard output, a device
 * or FIFO written in place, a regular file replaced atomically), and an existing regular file
 * must be an HTML page already (never a log, a config or a checkpoint). Writes nothing; NULL ok. */
int run_report_check_out(const char *path);
/* Render and write to path (the rule above). */
int run_report_write(const RunReport *r, const char *path);
/* The report of one run folder into DIR/report.html (what `implicit train` writes). */
int run_report_folder(const char *dir);

/* The processor's name ("AMD EPYC 9R14 96-Core Processor"; the machine type when unknown). */
void run_report_host_cpu(char *buf, size_t cap);

#endif
