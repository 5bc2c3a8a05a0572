/* tbevents.h: TensorBoard scalar event files, written by hand (no protobuf, no TensorFlow).
 *
 * A file "events.out.tfevents.<unix time>.<host>.<pid>" in a folder holds TFRecord records:
 * uint64 length, uint32 masked CRC-32C of the length, the bytes, uint32 masked CRC-32C of the
 * bytes (all little-endian; mask = rotate right 15, + 0xa282ead8). Each record is a serialized
 * tensorflow.Event: wall_time (field 1, double), step (2, int64) and either file_version (3,
 * "brain.Event:2", the first record) or a Summary (5) of one Value: tag (1, string) and
 * simple_value (2, float). TensorBoard reads the folder with `tensorboard --logdir DIR`.
 * Out of scope: histograms, images, text, reading events back (tests parse the framing).
 */
#ifndef IMPLICIT_TBEVENTS_H
#define IMPLICIT_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *f;           /* NULL: not open */
    char path[4200];
} TbWriter;

/* Create dir if needed and a new event file in it, starting with the file_version record.
 * IM_EIO with the path on failure. */
int tb_open(TbWriter *w, const char *dir);
/* One scalar; flushed so that TensorBoard sees it while the run goes on. IM_EIO on a write error. */
int tb_scalar(TbWriter *w, const char *tag, int64_t step, double wall_time, double value);
void tb_close(TbWriter *w);   /* NULL-safe, idempotent */

uint32_t tb_crc32c(const void *data, size_t n);   /* CRC-32C (Castagnoli), as TFRecord uses */

#endif
