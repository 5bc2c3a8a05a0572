/* jsonl.h: a tolerant reader of JSON Lines logs (a training run's log.jsonl).
 *
 * A log may have been written by a run that was killed (its last line cut short) or resumed from
 * an earlier checkpoint without its log cut back (steps recorded twice), or edited by hand. The
 * reader keeps what it can and counts what it could not:
 *   - one JSON object per line (strict RFC 8259, io/json.h); empty lines are ignored;
 *   - a last line without its newline that does not parse is "torn" (a writer killed mid-line);
 *   - any other line that does not parse, or is not an object, is "malformed": skipped, counted,
 *     and the first one's line number kept for the message;
 *   - records with the same key (a caller's function of the record, e.g. type and step) are
 *     duplicates: the later one is kept, at its own place in the order, the earlier dropped.
 * Out of scope: streaming (the file is read whole, up to a size cap), repairing lines.
 */
#ifndef IMPLICIT_JSONL_H
#define IMPLICIT_JSONL_H

#include <stddef.h>

#include "json.h"

/* Writes a key of rec (NUL-terminated, at most cap bytes) and returns 1; 0: rec has no key and is
 * always kept. */
typedef int (*JsonlKeyFn)(const Json *rec, char *key, size_t cap);

typedef struct {
    Json **recs;     /* (n) the records kept, in file order */
    int *line;       /* (n) their 1-based line numbers */
    int n;
    int lines;       /* non-empty lines seen */
    int malformed;   /* lines skipped: not JSON, or not an object (the torn last line not counted) */
    int first_bad;   /* line number of the first malformed line (0: none) */
    int torn;        /* 1: the last line had no newline and did not parse */
    int replaced;    /* records dropped because a later record had the same key */
} Jsonl;

/* Parse text[0..len). key may be NULL (no deduplication). IM_OK or IM_ENOMEM. */
int jsonl_parse(Jsonl *out, const char *text, size_t len, JsonlKeyFn key);
/* Read a regular file of at most max_bytes (0: no cap) and parse it. IM_EIO when it cannot be
 * opened or read or is not a regular file, IM_EFORMAT when it is larger than max_bytes; the
 * message names the path. */
int jsonl_read(Jsonl *out, const char *path, size_t max_bytes, JsonlKeyFn key);
void jsonl_free(Jsonl *l);

#endif
