/* libcrun for native workers: the job's store, seen from one rank.
 *
 * A program that crun starts (or any program given the same environment)
 * creates one struct crun_worker, which knows the rank, the world size and
 * the current round, and holds one connection to the job's store. Over it
 * the ranks exchange small data without a process group of their own:
 *
 *   broadcast  bytes from one rank to every rank (rank 0 passing the
 *              128-byte ncclUniqueId to ncclCommInitRank, for instance)
 *   allgather  one small blob from every rank to every rank
 *   barrier    every rank waits until all have arrived
 *
 * These are collectives: every rank of the job must call the same
 * operations in the same order (with the same root and sizes), as with
 * MPI or NCCL. Each call is bounded by its timeout; a rank that never
 * calls makes the others fail with -ETIMEDOUT, never hang.
 *
 * Keys. Every key lives under "round/<CRUN_ROUND>/" in the job's run id:
 * crun raises CRUN_ROUND on every restart, so an attempt never reads what
 * an earlier attempt left in the store. Below that, a call's keys are
 * "<op>/<handle>.<call>/..." where <call> counts this handle's collective
 * calls and <handle> counts the handles this rank has created in this
 * round (kept in "round/<R>/handles/<rank>"), so repeated calls never
 * collide, and neither do a destroyed handle and its successor. What a
 * call stores is deleted by the last rank that reads it (counted with
 * ADD); a barrier's two keys are deleted by the last rank to arrive at the
 * next barrier. Once every rank has returned from a barrier, the run holds
 * only the worker API's "handles" keys and the last barrier's two keys,
 * however many calls came before. Keys of a call that failed stay behind
 * (the job is restarted into a new round anyway).
 *
 * Errors. Constructors return NULL and write a one-line reason into the
 * caller's buffer; actions return 0 or a negative errno, and
 * crun_worker_errmsg() gives a one-line message for the last failure:
 *   -ETIMEDOUT    the call did not finish in time (a rank did not call)
 *   -EMSGSIZE     ranks disagree on the size of the data
 *   -EPROTO       ranks disagree on the root, or data in the store under
 *                 this call's key is not what this API wrote
 *   -EINVAL       bad argument (a root outside the world, a NULL buffer)
 *   -EOVERFLOW    world_size * len does not fit in a size_t
 *   -ECANCELED    an earlier collective on this handle failed
 *   -ENOMEM       out of memory
 *   anything crun_store_* returns (see crun/store.h): -ECONNRESET,
 *   -EACCES, -E2BIG for data larger than the store allows, ...
 * After a collective fails the ranks no longer agree on which call comes
 * next, so the handle refuses every later collective with -ECANCELED (its
 * message names the first failure). The usual response is to exit with a
 * non-zero status: crun then restarts every worker into a new round.
 * Bad arguments (-EINVAL, -EOVERFLOW) are refused before anything is sent
 * and leave the handle usable.
 *
 * Timeouts: timeout_ms > 0 bounds the whole call; 0 or negative means the
 * store handle's default (CRUN_TIMEOUT, 300 s). A call that waits on the
 * store may take up to half a second longer than its timeout when the
 * store itself stops answering.
 *
 * A handle is not thread-safe: use it from one thread at a time. It does
 * not depend on crun's agent beyond the environment: a program started by
 * another launcher can set the variables itself, with crun-rdzvd as the
 * store. */
#ifndef CRUN_WORKER_H
#define CRUN_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include <crun/export.h>

#include <crun/store.h>

#ifdef __cplusplus
extern "C" {
#endif

struct crun_worker;

/* Reads the environment crun sets for each worker and connects to the
 * job's store:
 *   RANK, WORLD_SIZE        required: 0 <= RANK < WORLD_SIZE
 *   LOCAL_RANK, LOCAL_WORLD_SIZE   default RANK and WORLD_SIZE (one node)
 *   GROUP_RANK              default 0
 *   CRUN_ROUND              default 0
 *   CRUN_STORE, CRUN_RUN_ID, CRUN_TOKEN or CRUN_TOKEN_FILE,
 *   CRUN_CONNECT_TIMEOUT, CRUN_TIMEOUT   see crun_store_opts_from_env
 * timeout_ms > 0 bounds connecting (it replaces CRUN_CONNECT_TIMEOUT);
 * 0 or negative: CRUN_CONNECT_TIMEOUT (default 30 s). The store is
 * retried while it refuses connections, so workers may start before it.
 * Not a collective: ranks create their handles independently.
 * Returns the handle, or NULL with a reason in err (when not NULL), such
 * as "RANK is not set (is this program running under crun?)" or
 * "cannot reach the store: cannot connect to '127.0.0.1:29400':
 * connection refused". */
CRUN_EXPORT struct crun_worker *crun_worker_create(int timeout_ms, char *err, size_t errlen);

/* Closes the connection and frees the handle. NULL is allowed. Keys the
 * handle stored stay in the store until the ranks that read them delete
 * them (see "Keys" above). */
CRUN_EXPORT void crun_worker_destroy(struct crun_worker *w);

/* What crun_worker_create read from the environment. */
CRUN_EXPORT int crun_worker_rank(const struct crun_worker *w);
CRUN_EXPORT int crun_worker_world_size(const struct crun_worker *w);
CRUN_EXPORT int crun_worker_local_rank(const struct crun_worker *w);
CRUN_EXPORT int crun_worker_local_world_size(const struct crun_worker *w);
CRUN_EXPORT int crun_worker_group_rank(const struct crun_worker *w);
CRUN_EXPORT int64_t crun_worker_round(const struct crun_worker *w);

/* The handle's store connection, for operations of one's own (keys under
 * "round/<round>/" other than those described above are free to use; the
 * worker API never touches any others). Owned by w: valid until
 * crun_worker_destroy, never to be destroyed by the caller. */
CRUN_EXPORT struct crun_store *crun_worker_store(struct crun_worker *w);

/* One line describing the last failure on this handle ("" if none), for
 * instance "broadcast 1.3 from rank 0: rank 0 sent 64 bytes, rank 2
 * expects 128". */
CRUN_EXPORT const char *crun_worker_errmsg(const struct crun_worker *w);

/* Broadcast: root's len bytes at buf end up in buf on every rank. On the
 * root, buf is read and the call returns as soon as the bytes are stored
 * (it does not wait for the others); on every other rank the call waits
 * up to timeout_ms for the root's bytes and writes them to buf. Every
 * rank must pass the same root and len: a rank whose len differs from the
 * root's gets -EMSGSIZE and buf is left untouched (the root cannot
 * notice), and a rank that reads bytes stored by another root than its
 * own gets -EPROTO. len may be 0 (then only the root's arrival is
 * awaited). With one rank it does nothing and returns 0. */
CRUN_EXPORT int crun_worker_broadcast(struct crun_worker *w, void *buf, size_t len, int root,
				      int timeout_ms);

/* All-gather: every rank contributes len bytes at in; on return out holds
 * world_size * len bytes, rank r's contribution at out + r * len, on every
 * rank. in may point at this rank's own slot in out. Waits up to
 * timeout_ms for every rank's contribution. Every rank must pass the same
 * len: a rank whose contribution has another size makes every other rank
 * fail with -EMSGSIZE (naming it), and fails itself with -EMSGSIZE; out is
 * then unspecified. Meant for small blobs (host names, addresses): each
 * rank reads world_size * len bytes from the store. */
CRUN_EXPORT int crun_worker_allgather(struct crun_worker *w, const void *in, size_t len, void *out,
				      int timeout_ms);

/* Barrier: returns 0 once every rank has called it (the last to arrive
 * returns at once and wakes the others; the waiting is done by the store,
 * without polling), or -ETIMEDOUT after timeout_ms, with a message that
 * says how many ranks had arrived before this one. */
CRUN_EXPORT int crun_worker_barrier(struct crun_worker *w, int timeout_ms);

/* Heartbeats to crun's agent (crun(1), LIVENESS), without a crun_worker:
 * they only write a line to the descriptor CRUN_HEARTBEAT_FD names (read
 * once, on the first call). A worker that beats is watched: if it then
 * stays silent longer than crun's timeout, crun takes its stack and
 * restarts the job.
 *
 * crun_worker_heartbeat(): "step N" for step >= 0, "beat" for step < 0.
 * crun_worker_heartbeat_work(): "step N WORK": step N (>= 0) took
 * work_seconds (finite, >= 0) of this worker's own work, the time it did
 * not spend waiting for the other ranks in collectives; crun's straggler
 * detector compares these, since in lock-step training every rank's beats
 * come at the slowest rank's pace.
 * crun_worker_heartbeat_section(): "section begin NAME" (begin) or
 * "section end NAME"; name of letters, digits, '.', '_', '-', at most 63.
 *
 * Neither ever blocks: a line that does not fit in the channel is dropped
 * (-EAGAIN). Returns 0 also when CRUN_HEARTBEAT_FD is unset (not run by
 * crun: nothing to do); -EBADF when it does not name an open socket or
 * pipe,
 * -EINVAL for a bad name, step or work, -EPIPE when crun is gone.
 * Thread-safe. */
CRUN_EXPORT int crun_worker_heartbeat(int64_t step);
CRUN_EXPORT int crun_worker_heartbeat_work(int64_t step, double work_seconds);
CRUN_EXPORT int crun_worker_heartbeat_section(const char *name, int begin);

#ifdef __cplusplus
}
#endif

#endif
