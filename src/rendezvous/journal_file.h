/* The rendezvous journal on disk: crun-rdzvd --state-dir DIR keeps every
 * run's round state (journal.h) in DIR/rdzv-journal.json.
 *
 * The file is replaced atomically (a temporary file, fsync, rename, fsync
 * of DIR) on every change, synchronously: the caller writes before it
 * sends the replies of the change, so the file is never behind what
 * agents were told. The journal holds what its caller puts until it drops
 * it, bounded: of the closed runs only the CRUN_JOURNAL_MAX_CLOSED most
 * recently written are kept, of all runs CRUN_JOURNAL_MAX_RUNS (the ones
 * written longest ago go first). */
#ifndef CRUN_RENDEZVOUS_JOURNAL_FILE_H
#define CRUN_RENDEZVOUS_JOURNAL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "rendezvous/journal.h"

#define CRUN_JOURNAL_FILE "rdzv-journal.json"
#define CRUN_JOURNAL_LOCK "rdzv-journal.lock"
#define CRUN_JOURNAL_MAX_CLOSED 100
#define CRUN_JOURNAL_MAX_RUNS 1000

struct crun__journal_file;

/* Takes DIR's lock (DIR/CRUN_JOURNAL_LOCK, flock LOCK_EX; it holds the
 * process id, and is held until crun__journal_file_destroy, or the
 * process's end), reads DIR's journal (no file: an empty one) and writes
 * it back, which proves DIR writable. 0 with *out; else *out NULL, a line
 * in err and -EBUSY (another process holds the lock: two daemons sharing
 * one journal would each rewrite it with only their own runs), -ENOENT,
 * -ENOTDIR, -EACCES, ... (DIR is not a writable directory), -EPROTO (the
 * file is corrupt: err names it and says where) or -ENOMEM. */
int crun__journal_file_open(const char *dir, struct crun__journal_file **out, char *err,
			    size_t errlen);

/* The record of the run id (len bytes), or NULL; valid until the next
 * call that changes the journal. */
const struct crun__journal_run *crun__journal_file_find(const struct crun__journal_file *j,
							const uint8_t *id, size_t len);

/* Records run (taken: the journal owns its memory from now on, whatever
 * the outcome), replacing the run's earlier record, and writes the file.
 * A write that fails is logged (the store goes on; a restart then loses
 * what the file misses). */
void crun__journal_file_put(struct crun__journal_file *j, struct crun__journal_run *run);

/* Forgets the run id (len bytes) and writes the file. */
void crun__journal_file_drop(struct crun__journal_file *j, const uint8_t *id, size_t len);

/* Makes later puts and drops no-ops: for a daemon that stops, whose store
 * frees its runs without them being over. */
void crun__journal_file_stop(struct crun__journal_file *j);

/* Frees j (NULL allowed); the file stays. */
void crun__journal_file_destroy(struct crun__journal_file *j);

#endif
