/* The nccl comm backend (CUDA builds only): crun's comm interface over an
 * NCCL communicator, one GPU per rank.
 *
 * Setup (crun__comm_create with backend "nccl"): LOCAL_RANK picks the GPU
 * among the visible ones (CUDA_VISIBLE_DEVICES as the CUDA runtime applies
 * it; fewer GPUs than local ranks is an error). Rank 0 calls
 * ncclGetUniqueId and publishes the id through libcrun's worker API
 * (crun_worker_broadcast, keyed by the current round, so a restarted
 * attempt never reads an old id); the others fetch it. The communicator is
 * created non-blocking (ncclCommInitRankConfig, blocking = 0) and its state
 * polled with ncclCommGetAsyncError until it is ready, for at most the
 * comm timeout (CRUN_COMM_TIMEOUT, parallel.timeout). NCCL_* variables
 * reach NCCL untouched.
 *
 * Failure: an NCCL error, an asynchronous error (a peer died, a network
 * failed) or no completion within the timeout aborts the communicator
 * (ncclCommAbort), records the message (crun__comm_errmsg) and fails every
 * later call with -ENOTCONN; the trainer then exits non-zero and crun
 * restarts the group.
 *
 * The interface's collectives (comm.h) accept device pointers, used in
 * place, and host pointers, staged through a device buffer; they run on
 * the backend's own stream and return when the collective is done (so
 * the caller's device buffers must be ready: synchronise first). The
 * functions below are the asynchronous form the GPU trainer uses: they
 * enqueue on crun__comm_nccl_stream() and return at once; order them
 * against other streams with events, and wait with crun__comm_nccl_wait. */
#ifndef CRUN_TRAINER_COMM_NCCL_H
#define CRUN_TRAINER_COMM_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "trainer/comm.h"

enum crun__comm_dtype {
	CRUN_COMM_F32,
	CRUN_COMM_BF16,
	CRUN_COMM_F64,
};

/* Whether comm is an nccl communicator. */
bool crun__comm_is_nccl(const struct crun__comm *comm);

/* The stream the backend's collectives run on. */
cudaStream_t crun__comm_nccl_stream(struct crun__comm *comm);

/* Device memory the backend holds itself (its staging buffer for
 * collectives on host memory), in bytes: the most it has held. */
size_t crun__comm_nccl_peak_bytes(const struct crun__comm *comm);

/* Enqueue a collective on the backend's stream (device pointers only);
 * semantics as the synchronous forms in comm.h, for count elements of
 * type t: sum in place; reduce-scatter of size*count elements into count
 * (out may be in + rank*count); all-gather of count into size*count (in
 * may be out + rank*count). 0, or a negative errno with the message in
 * crun__comm_errmsg (the communicator is then aborted). */
int crun__comm_nccl_allreduce(struct crun__comm *comm, void *buf, size_t count,
			      enum crun__comm_dtype t);
int crun__comm_nccl_reduce_scatter(struct crun__comm *comm, const void *in, void *out, size_t count,
				   enum crun__comm_dtype t);
int crun__comm_nccl_allgather(struct crun__comm *comm, const void *in, void *out, size_t count,
			      enum crun__comm_dtype t);

/* Waits until ev (recorded on any stream of this device) has completed,
 * polling the communicator's asynchronous errors meanwhile. -ETIMEDOUT
 * when nothing completed within the comm timeout, -ECONNABORTED on an NCCL
 * error; either aborts the communicator. */
int crun__comm_nccl_wait(struct crun__comm *comm, cudaEvent_t ev);

#endif
