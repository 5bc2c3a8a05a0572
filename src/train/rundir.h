/* rundir.h: the output folder of a training run, owned by one process at a time.
 *
 * `implicit train` claims its folder before it writes anything there, and holds the claim until
 * it ends:
 *   - an advisory lock: flock on <dir>/.lock, which holds the owner's pid. A second run (fresh or
 *     --resume) into the same folder fails at once, naming that pid. The kernel drops the lock
 *     when its owner exits however it exits, so a killed run never leaves the folder locked.
 *   - a fresh run refuses a folder that already holds a run's results (a checkpoint or a non-empty
 *     log.jsonl) unless asked to overwrite it; then RUNDIR_FILES are deleted first (nothing else
 *     in the folder is touched).
 *   - temp files of the atomic writer ("<name>.tmp.<pid>") that killed runs left behind are
 *     removed: those of the run's own files always (only the lock holder writes them), any
 *     other one when its pid is no longer alive.
 *   - a resumed run cuts log.jsonl back to the step it resumes from: records of later steps
 *     (written after the last checkpoint, so about to be redone) and a torn last line go, so the
 *     log stays valid JSONL with every step once.
 * Only MPI rank 0 claims (it alone writes the folder). flock is advisory and local: on a network
 * file system that does not support it the claim fails with a message instead of guessing.
 */
#ifndef IMPLICIT_RUNDIR_H
#define IMPLICIT_RUNDIR_H

#include <stdio.h>

/* The files one run writes into its folder, listed once. */
#define RUNDIR_FILES(X) \
    X("config.json") X("log.jsonl") X("model.safetensors") X("best.safetensors") X("state.safetensors") X("report.html")
#define RUNDIR_LOCK ".lock"

/* Create dir if needed and claim it (see the top). resume_step < 0: a fresh run (refused when the
 * folder holds a run and overwrite is 0); >= 0: a resume from that step. On success *lock is
 * the open lock file, held until rundir_release. On failure a message and IM_EIO (the folder
 * is in use or not writable) or IM_EINVAL (an earlier run is there and overwrite is 0). */
int rundir_claim(const char *dir, int resume_step, int overwrite, FILE **lock);
/* Drop the claim (NULL ok). */
void rundir_release(FILE *lock);

#endif
