/* The nccl comm backend (contract in comm_nccl.h).
 *
 * NCCL is driven non-blocking: every call may return ncclInProgress, after
 * which ncclCommGetAsyncError says when the call has settled; a collective
 * is then queued on the stream, and its completion is an event that the
 * host polls together with the communicator's asynchronous error state.
 * Every wait is bounded by the comm timeout, so a dead or stalled peer
 * ends in ncclCommAbort and an error, never in a hang. */
#include "trainer/comm_nccl.h"
#include "trainer/comm_backend.h"
#include "trainer/cuda/runtime.h"

#include "common/util.h"
#include <crun/worker.h>

#include <errno.h>
#include <limits.h>
#include <nccl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPIN_MS 2 /* poll without sleeping this long, then every 50 us */
#define SCRATCH_BYTES (1u << 20)

struct nccl {
	ncclComm_t nc; /* NULL once aborted or destroyed */
	cudaStream_t stream;
	cudaEvent_t done;
	int device;
	int64_t timeout_ms;
	void *scratch; /* device staging for host buffers */
	size_t scratch_bytes;
	size_t peak_bytes; /* the most scratch ever held (it grows by replacement) */
};

static struct nccl *priv(const struct crun__comm *comm)
{
	return comm->priv;
}

bool crun__comm_is_nccl(const struct crun__comm *comm)
{
	return !strcmp(crun__comm_backend(comm), "nccl");
}

cudaStream_t crun__comm_nccl_stream(struct crun__comm *comm)
{
	return priv(comm)->stream;
}

size_t crun__comm_nccl_peak_bytes(const struct crun__comm *comm)
{
	return priv(comm) ? priv(comm)->peak_bytes : 0;
}

static ncclDataType_t nccl_type(enum crun__comm_dtype t)
{
	switch (t) {
	case CRUN_COMM_BF16:
		return ncclBfloat16;
	case CRUN_COMM_F64:
		return ncclFloat64;
	case CRUN_COMM_F32:
		break;
	}
	return ncclFloat32;
}

/* Records the failure, aborts the communicator (which also stops its
 * kernels) and marks comm failed. Returns rc. */
static int fail(struct crun__comm *comm, int rc, const char *what, ncclResult_t r)
{
	struct nccl *n = priv(comm);
	const char *last = n && n->nc ? ncclGetLastError(n->nc) : NULL;

	if (r == ncclSuccess || r == ncclInProgress)
		crun__comm_set_error(comm, "%s", what);
	else
		crun__comm_set_error(comm, "%s: %s%s%s", what, ncclGetErrorString(r),
				     last && *last ? ": " : "", last && *last ? last : "");
	comm->failed = true;
	if (n && n->nc) {
		ncclCommAbort(n->nc);
		n->nc = NULL;
	}
	return rc;
}

static void pause_poll(uint64_t start_ms)
{
	struct timespec ts = {0, 50000};

	if (crun__now_ms() - start_ms < SPIN_MS)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

/* After an NCCL call returned r: waits (bounded) until the call has
 * settled. 0 or a negative errno (the communicator is then aborted). */
static int settle(struct crun__comm *comm, ncclResult_t r, const char *what)
{
	struct nccl *n = priv(comm);
	uint64_t start = crun__now_ms();
	char msg[192];

	while (r == ncclInProgress) {
		ncclResult_t q = ncclCommGetAsyncError(n->nc, &r);

		if (q != ncclSuccess)
			r = q;
		if (r != ncclInProgress)
			break;
		if ((int64_t)(crun__now_ms() - start) > n->timeout_ms) {
			snprintf(msg, sizeof(msg),
				 "%s did not finish within %lld ms (CRUN_COMM_TIMEOUT): a peer "
				 "is gone or stalled",
				 what, (long long)n->timeout_ms);
			return fail(comm, -ETIMEDOUT, msg, ncclSuccess);
		}
		pause_poll(start);
	}
	if (r != ncclSuccess) {
		snprintf(msg, sizeof(msg), "%s failed", what);
		return fail(comm, -ECONNABORTED, msg, r);
	}
	return 0;
}

int crun__comm_nccl_wait(struct crun__comm *comm, cudaEvent_t ev)
{
	struct nccl *n = priv(comm);
	uint64_t start = crun__now_ms();
	char msg[192];

	if (comm->failed)
		return -ENOTCONN;
	for (;;) {
		cudaError_t q = cudaEventQuery(ev);
		ncclResult_t st = ncclSuccess;

		if (q == cudaSuccess)
			return 0;
		if (q != cudaErrorNotReady) {
			/* Abort the communicator before leaving, so that peers on
			 * NVLink or P2P see it at once, not after their timeout. */
			snprintf(msg, sizeof(msg), "CUDA error while waiting for collectives: %s",
				 cudaGetErrorString(q));
			return fail(comm, -EIO, msg, ncclSuccess);
		}
		if (ncclCommGetAsyncError(n->nc, &st) != ncclSuccess ||
		    (st != ncclSuccess && st != ncclInProgress))
			return fail(comm, -ECONNABORTED, "collective failed (a peer may have died)",
				    st);
		if ((int64_t)(crun__now_ms() - start) > n->timeout_ms) {
			snprintf(msg, sizeof(msg),
				 "collectives did not complete within %lld ms (CRUN_COMM_TIMEOUT): "
				 "a peer is gone or stalled",
				 (long long)n->timeout_ms);
			return fail(comm, -ETIMEDOUT, msg, ncclSuccess);
		}
		pause_poll(start);
	}
}

int crun__comm_nccl_allreduce(struct crun__comm *comm, void *buf, size_t count,
			      enum crun__comm_dtype t)
{
	struct nccl *n = priv(comm);

	if (comm->failed)
		return -ENOTCONN;
	return settle(comm, ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, n->nc, n->stream),
		      "all-reduce");
}

int crun__comm_nccl_reduce_scatter(struct crun__comm *comm, const void *in, void *out, size_t count,
				   enum crun__comm_dtype t)
{
	struct nccl *n = priv(comm);

	if (comm->failed)
		return -ENOTCONN;
	return settle(comm,
		      ncclReduceScatter(in, out, count, nccl_type(t), ncclSum, n->nc, n->stream),
		      "reduce-scatter");
}

int crun__comm_nccl_allgather(struct crun__comm *comm, const void *in, void *out, size_t count,
			      enum crun__comm_dtype t)
{
	struct nccl *n = priv(comm);

	if (comm->failed)
		return -ENOTCONN;
	return settle(comm, ncclAllGather(in, out, count, nccl_type(t), n->nc, n->stream),
		      "all-gather");
}

/* The synchronous interface of comm.h. */

static bool on_device(const void *p)
{
	struct cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return false;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static void *scratch(struct crun__comm *comm, size_t bytes)
{
	struct nccl *n = priv(comm);

	if (bytes <= n->scratch_bytes)
		return n->scratch;
	if (n->scratch)
		CRUN_CUDA_CHECK(cudaFree(n->scratch));
	n->scratch = NULL;
	n->scratch_bytes = 0;
	CRUN_CUDA_CHECK(cudaMalloc(&n->scratch, bytes));
	n->scratch_bytes = bytes;
	if (bytes > n->peak_bytes)
		n->peak_bytes = bytes;
	return n->scratch;
}

static void copy(struct nccl *n, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		CRUN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, n->stream));
}

/* Waits for what was queued on the backend's stream. */
static int finish_queue(struct crun__comm *comm)
{
	struct nccl *n = priv(comm);

	CRUN_CUDA_CHECK(cudaEventRecord(n->done, n->stream));
	return crun__comm_nccl_wait(comm, n->done);
}

static int sync_collective(struct crun__comm *comm, int rc, void *host_dst, const void *dev_src,
			   size_t bytes)
{
	struct nccl *n = priv(comm);

	if (rc)
		return rc;
	rc = finish_queue(comm);
	if (rc || !host_dst)
		return rc;
	copy(n, host_dst, dev_src, bytes);
	CRUN_CUDA_CHECK(cudaStreamSynchronize(n->stream));
	return 0;
}

static int nccl_allreduce_f32(struct crun__comm *comm, float *buf, size_t count)
{
	struct nccl *n = priv(comm);
	size_t bytes = count * sizeof(float);
	void *d = buf;

	if (!count)
		return 0;
	if (!on_device(buf)) {
		d = scratch(comm, bytes);
		copy(n, d, buf, bytes);
	}
	return sync_collective(comm, crun__comm_nccl_allreduce(comm, d, count, CRUN_COMM_F32),
			       d == buf ? NULL : buf, d, bytes);
}

static int nccl_reduce_scatter_f32(struct crun__comm *comm, float *in, float *out, size_t count)
{
	struct nccl *n = priv(comm);
	size_t W = (size_t)comm->size, bytes = count * sizeof(float);
	char *d;

	if (!count)
		return 0;
	if (on_device(in) && on_device(out))
		return sync_collective(
			comm, crun__comm_nccl_reduce_scatter(comm, in, out, count, CRUN_COMM_F32),
			NULL, NULL, 0);
	d = scratch(comm, (W + 1) * bytes);
	copy(n, d, in, W * bytes);
	return sync_collective(
		comm, crun__comm_nccl_reduce_scatter(comm, d, d + W * bytes, count, CRUN_COMM_F32),
		out, d + W * bytes, bytes);
}

static int nccl_allgather_f32(struct crun__comm *comm, const float *in, float *out, size_t count)
{
	struct nccl *n = priv(comm);
	size_t W = (size_t)comm->size, bytes = count * sizeof(float);
	char *d;

	if (!count)
		return 0;
	if (on_device(in) && on_device(out))
		return sync_collective(
			comm, crun__comm_nccl_allgather(comm, in, out, count, CRUN_COMM_F32), NULL,
			NULL, 0);
	d = scratch(comm, (W + 1) * bytes);
	copy(n, d, in, bytes);
	return sync_collective(comm,
			       crun__comm_nccl_allgather(comm, d, d + bytes, count, CRUN_COMM_F32),
			       out, d + bytes, W * bytes);
}

static int nccl_broadcast(struct crun__comm *comm, void *buf, size_t bytes, int root)
{
	struct nccl *n = priv(comm);
	void *d = buf;
	int rc;

	if (!bytes)
		return 0;
	if (!on_device(buf)) {
		d = scratch(comm, bytes);
		copy(n, d, buf, bytes);
	}
	rc = settle(comm, ncclBroadcast(d, d, bytes, ncclUint8, root, n->nc, n->stream),
		    "broadcast");
	return sync_collective(comm, rc, d == buf ? NULL : buf, d, bytes);
}

static int nccl_barrier(struct crun__comm *comm)
{
	float *d = scratch(comm, sizeof(float));

	return sync_collective(comm, crun__comm_nccl_allreduce(comm, d, 1, CRUN_COMM_F32), NULL,
			       NULL, 0);
}

/* Gathers every rank's values and adds them in rank order, like the cpu
 * backend, so the result is the same on every rank. */
static int nccl_allreduce_f64(struct crun__comm *comm, double *buf, size_t count)
{
	struct nccl *n = priv(comm);
	size_t W = (size_t)comm->size, bytes = count * sizeof(double);
	double *all;
	char *d;
	int rc;

	if (!count)
		return 0;
	all = malloc(W * bytes);
	if (!all) {
		crun__comm_set_error(comm, "out of memory for an all-reduce of %zu doubles", count);
		return -ENOMEM;
	}
	d = scratch(comm, (W + 1) * bytes);
	copy(n, d, buf, bytes);
	rc = sync_collective(comm,
			     crun__comm_nccl_allgather(comm, d, d + bytes, count, CRUN_COMM_F64),
			     all, d + bytes, W * bytes);
	if (!rc) {
		for (size_t i = 0; i < count; i++) {
			double s = 0;

			for (size_t r = 0; r < W; r++)
				s += all[r * count + i];
			all[i] = s;
		}
		if (on_device(buf)) {
			copy(n, buf, all, bytes);
			CRUN_CUDA_CHECK(cudaStreamSynchronize(n->stream));
		} else {
			memcpy(buf, all, bytes);
		}
	}
	free(all);
	return rc;
}

static void nccl_finish(struct crun__comm *comm)
{
	struct nccl *n = priv(comm);

	if (!n)
		return;
	/* Finalize flushes NCCL's own work, not ours: what is still queued on
	 * the stream must finish first (bounded, like every wait here). */
	if (n->nc && !comm->failed && n->stream && n->done && finish_queue(comm) == 0 &&
	    settle(comm, ncclCommFinalize(n->nc), "closing the communicator") == 0) {
		ncclCommDestroy(n->nc);
		n->nc = NULL;
	}
	if (n->nc)
		ncclCommAbort(n->nc);
	if (n->scratch)
		cudaFree(n->scratch);
	if (n->done)
		cudaEventDestroy(n->done);
	if (n->stream)
		cudaStreamDestroy(n->stream);
	free(n);
	comm->priv = NULL;
}

/* Rank 0's unique id, shared through the job's store for this round. */
static int share_id(struct crun__comm *comm, ncclUniqueId *id)
{
	struct nccl *n = priv(comm);
	int timeout = n->timeout_ms > INT_MAX ? INT_MAX : (int)n->timeout_ms;
	char err[256];
	struct crun_worker *w;
	int rc;

	if (comm->size == 1)
		return 0;
	w = crun_worker_create(timeout, err, sizeof(err));
	if (!w) {
		crun__comm_set_error(comm, "cannot reach the store to share the NCCL id: %s", err);
		return -ECONNREFUSED;
	}
	if (crun_worker_rank(w) != comm->rank || crun_worker_world_size(w) != comm->size) {
		crun__comm_set_error(comm,
				     "the store's worker environment says rank %d of %d, the "
				     "communicator rank %d of %d",
				     crun_worker_rank(w), crun_worker_world_size(w), comm->rank,
				     comm->size);
		crun_worker_destroy(w);
		return -EINVAL;
	}
	rc = crun_worker_broadcast(w, id, sizeof(*id), 0, timeout);
	if (rc)
		crun__comm_set_error(comm, "cannot share the NCCL id through the store: %s",
				     crun_worker_errmsg(w));
	crun_worker_destroy(w);
	return rc;
}

static int nccl_init(struct crun__comm *comm, const struct crun__comm_opts *opts)
{
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	ncclUniqueId id;
	struct nccl *n;
	char why[256];
	cudaError_t ce;
	ncclResult_t r;
	int rc;

	n = calloc(1, sizeof(*n));
	if (!n) {
		crun__comm_set_error(comm, "out of memory");
		return -ENOMEM;
	}
	comm->priv = n;
	n->timeout_ms = opts->timeout_ms ? opts->timeout_ms : CRUN__COMM_DEFAULT_TIMEOUT_MS;
	rc = crun__cuda_pick_device(opts->local_rank, false, &n->device, why, sizeof(why));
	if (rc) {
		crun__comm_set_error(comm, "nccl backend: %s", why);
		goto out_free;
	}
	ce = cudaSetDevice(n->device);
	if (ce != cudaSuccess) {
		crun__comm_set_error(comm, "nccl backend: cannot use GPU %d: %s", n->device,
				     cudaGetErrorString(ce));
		rc = -ENODEV;
		goto out_free;
	}
	memset(&id, 0, sizeof(id));
	if (comm->rank == 0) {
		r = ncclGetUniqueId(&id);
		if (r != ncclSuccess) {
			crun__comm_set_error(comm, "ncclGetUniqueId failed: %s",
					     ncclGetErrorString(r));
			rc = -EIO;
			goto out_free;
		}
	}
	rc = share_id(comm, &id);
	if (rc)
		goto out_free;
	CRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
	CRUN_CUDA_CHECK(cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming));
	config.blocking = 0;
	r = ncclCommInitRankConfig(&n->nc, comm->size, id, comm->rank, &config);
	if (r != ncclSuccess && r != ncclInProgress && !n->nc) {
		crun__comm_set_error(comm, "ncclCommInitRankConfig failed: %s",
				     ncclGetErrorString(r));
		rc = -EIO;
		goto out_free;
	}
	rc = settle(comm, r, "NCCL communicator setup");
	if (rc)
		goto out_free;
	/* staging for the small host-memory collectives (losses, flags), made
	 * now: growing it later means cudaFree, which waits for the device */
	scratch(comm, SCRATCH_BYTES);
	return 0;

out_free:
	nccl_finish(comm);
	return rc;
}

const struct crun__comm_ops crun__comm_nccl_ops = {
	.name = "nccl",
	.init = nccl_init,
	.finish = nccl_finish,
	.allreduce_f32 = nccl_allreduce_f32,
	.reduce_scatter_f32 = nccl_reduce_scatter_f32,
	.allgather_f32 = nccl_allgather_f32,
	.broadcast = nccl_broadcast,
	.barrier = nccl_barrier,
	.allreduce_f64 = nccl_allreduce_f64,
};
