/* The strategies on a CUDA device (see cuda/parallel.h and parallel.h).
 *
 * Two streams: cs (ctx->stream) computes, ms communicates. ms waits for cs
 * through ev_ready before a collective reads what cs wrote; cs waits for
 * ms through an event before it reads what a collective wrote. Double
 * buffers carry their own events: ev_reduced[slot] (a bucket buffer may be
 * cleared again) and z3_gathered/z3_freed[slot] (a gather buffer is full /
 * may be overwritten). Collectives are issued from this thread in one
 * order that every rank shares, which NCCL requires. */
#include "trainer/cuda/parallel.h"
#include "common/util.h"

#include "trainer/comm_nccl.h"
#include "trainer/cuda/model.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct crun_cuda_parallel {
	struct crun_cuda_ctx *ctx;
	const struct crun_model *model;
	struct crun_parallel *host;
	struct crun_comm *comm;
	enum crun_strategy strategy;
	int world, rank, accum, micro;
	enum crun_dtype t;
	size_t es;
	bool nccl;
	bool reduce_bf16;
	int n_seg;
	struct crun_segment *seg;
	int *unit_seg;
	size_t p_len, pad_len, shard_len, max_chunk, optim_len;

	cudaStream_t cs, ms;
	bool own_ms;
	cudaEvent_t ev_ready, ev_comm, ev_step, ev_reduced[2];
	int gslot;

	float *p;	 /* master parameters: pad_len, or shard_len for zero3 */
	void *pc;	 /* their compute copy (bf16), or p itself */
	void *gather[2]; /* zero3: W * max_chunk of T each */
	int z3_unit[2];	 /* unit in each gather buffer, -1: none */
	cudaEvent_t z3_gathered[2], z3_freed[2];
	/* timing on cs: step start, backward queued, reductions waited for,
	 * step end; and the sums of the phases over timed steps */
	cudaEvent_t t_ev[4];
	struct crun_cuda_times times;
	int z3_slot;	 /* buffer of the unit in use */
	float *g_full;	 /* ddp, zero1; zero2/3 with grad_accum > 1: pad_len */
	float *g_seg[2]; /* zero2/3 with grad_accum 1: W * max_chunk each */
	float *g_shard;	 /* zero1-3: shard_len */
	void *g_red;	 /* bf16 reduction: W * max_chunk bf16 */
	float *m, *v;
	uint8_t *tokens, *tokens_host;
	struct crun_cuda_acts *acts;
	double *d_partials, *d_sumsq;
	float *d_gscale;
	double *h_stats;	     /* pinned: loss, sum of squares */
	float *stage_in, *stage_out; /* pinned, cpu backend: W * max_chunk each */
	struct crun_cuda_memory mem;
};

static void ms_wait_cs(struct crun_cuda_parallel *pc)
{
	CRUN_CUDA_CHECK(cudaEventRecord(pc->ev_ready, pc->cs));
	CRUN_CUDA_CHECK(cudaStreamWaitEvent(pc->ms, pc->ev_ready, 0));
}

static void cs_wait_ms(struct crun_cuda_parallel *pc)
{
	CRUN_CUDA_CHECK(cudaEventRecord(pc->ev_comm, pc->ms));
	CRUN_CUDA_CHECK(cudaStreamWaitEvent(pc->cs, pc->ev_comm, 0));
}

static enum crun_comm_dtype comm_type(enum crun_dtype t)
{
	return t == CRUN_DTYPE_BF16 ? CRUN_COMM_BF16 : CRUN_COMM_F32;
}

/* Collectives on device buffers, queued on ms. With the nccl backend they
 * are asynchronous; with the cpu backend they copy to pinned host memory,
 * run the host collective and copy back, blocking the host. */

static void ms_sync(struct crun_cuda_parallel *pc)
{
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->ms));
}

static void d2d(struct crun_cuda_parallel *pc, void *dst, const void *src, size_t bytes)
{
	if (dst != src && bytes)
		CRUN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, pc->ms));
}

/* Sum over ranks in place (float32 only over the cpu backend). */
static int dc_allreduce(struct crun_cuda_parallel *pc, void *buf, size_t count, enum crun_dtype t)
{
	size_t bytes = count * sizeof(float);
	int rc;

	if (pc->nccl)
		return crun_comm_nccl_allreduce(pc->comm, buf, count, comm_type(t));
	if (t != CRUN_DTYPE_F32)
		return -EINVAL; /* the cpu backend reduces float32 only */
	if (pc->world == 1 || !count)
		return 0;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->stage_in, buf, bytes, cudaMemcpyDeviceToHost, pc->ms));
	ms_sync(pc);
	rc = crun_comm_allreduce_f32(pc->comm, pc->stage_in, count);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(buf, pc->stage_in, bytes, cudaMemcpyHostToDevice, pc->ms));
	ms_sync(pc);
	return 0;
}

/* in: W * count; out: count (may be in + rank * count). */
static int dc_reduce_scatter(struct crun_cuda_parallel *pc, const void *in, void *out, size_t count,
			     enum crun_dtype t)
{
	size_t bytes = count * sizeof(float), W = (size_t)pc->world;
	int rc;

	if (pc->nccl)
		return crun_comm_nccl_reduce_scatter(pc->comm, in, out, count, comm_type(t));
	if (t != CRUN_DTYPE_F32)
		return -EINVAL; /* the cpu backend reduces float32 only */
	if (pc->world == 1) {
		d2d(pc, out, in, bytes);
		return 0;
	}
	if (!count)
		return 0;
	CRUN_CUDA_CHECK(
		cudaMemcpyAsync(pc->stage_in, in, W * bytes, cudaMemcpyDeviceToHost, pc->ms));
	ms_sync(pc);
	rc = crun_comm_reduce_scatter_f32(pc->comm, pc->stage_in, pc->stage_out, count);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(out, pc->stage_out, bytes, cudaMemcpyHostToDevice, pc->ms));
	ms_sync(pc);
	return 0;
}

/* in: count; out: W * count (in may be out + rank * count). Over the cpu
 * backend any type travels as bytes, padded to whole floats per rank. */
static int dc_allgather(struct crun_cuda_parallel *pc, const void *in, void *out, size_t count,
			enum crun_dtype t)
{
	size_t bytes = count * crun_dtype_size(t), fr = (bytes + 3) / 4;
	int rc;

	if (pc->nccl)
		return crun_comm_nccl_allgather(pc->comm, in, out, count, comm_type(t));
	if (pc->world == 1) {
		d2d(pc, out, in, bytes);
		return 0;
	}
	if (!count)
		return 0;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->stage_in, in, bytes, cudaMemcpyDeviceToHost, pc->ms));
	ms_sync(pc);
	rc = crun_comm_allgather_f32(pc->comm, pc->stage_in, pc->stage_out, fr);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpy2DAsync(out, bytes, pc->stage_out, fr * sizeof(float), bytes,
					  (size_t)pc->world, cudaMemcpyHostToDevice, pc->ms));
	ms_sync(pc);
	return 0;
}

/* Sum of one device double over ranks, in place. */
static int dc_allreduce_f64(struct crun_cuda_parallel *pc, double *d)
{
	int rc;

	if (pc->nccl)
		return crun_comm_nccl_allreduce(pc->comm, d, 1, CRUN_COMM_F64);
	if (pc->world == 1)
		return 0;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(&pc->h_stats[1], d, sizeof(double), cudaMemcpyDeviceToHost,
					pc->ms));
	ms_sync(pc);
	rc = crun_comm_allreduce_f64(pc->comm, &pc->h_stats[1], 1);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(d, &pc->h_stats[1], sizeof(double), cudaMemcpyHostToDevice,
					pc->ms));
	ms_sync(pc);
	return 0;
}

/* The host waits for ev (bounded and watching NCCL's errors with nccl). */
static int wait_event(struct crun_cuda_parallel *pc, cudaEvent_t ev)
{
	if (pc->nccl)
		return crun_comm_nccl_wait(pc->comm, ev);
	CRUN_CUDA_CHECK(cudaEventSynchronize(ev));
	return 0;
}

static void *dalloc(struct crun_cuda_parallel *pc, size_t bytes, size_t *count, const char *what,
		    bool *ok, char *err, size_t errlen)
{
	void *p;

	if (!*ok)
		return NULL;
	p = crun_cuda_alloc(pc->ctx, bytes);
	if (!p) {
		crun_seterr(err, errlen,
		       "out of GPU memory for the %s (%.1f MiB more; %.1f MiB allocated so far, "
		       "the device has %.1f MiB): see OUT OF MEMORY in crun-train(1)",
		       what, (double)bytes / (1 << 20), (double)pc->ctx->bytes / (1 << 20),
		       (double)pc->ctx->total_bytes / (1 << 20));
		*ok = false;
		return NULL;
	}
	if (count)
		*count += bytes;
	return p;
}

struct crun_cuda_parallel *
crun_cuda_parallel_create(struct crun_cuda_ctx *ctx, const struct crun_model *model,
			  struct crun_parallel *host, struct crun_comm *comm,
			  const struct crun_parallel_opts *opts,
			  const struct crun_cuda_parallel_opts *copts, char *err, size_t errlen)
{
	struct crun_cuda_parallel *pc = calloc(1, sizeof(*pc));
	struct crun_parallel_arrays arr;
	size_t W, row = (size_t)model->cfg.context + 1, tok_bytes;
	bool sharded_grads, ok = true;

	if (!pc) {
		crun_seterr(err, errlen, "out of memory");
		return NULL;
	}
	pc->ctx = ctx;
	pc->model = model;
	pc->host = host;
	pc->comm = comm;
	pc->strategy = opts->strategy;
	pc->world = crun_comm_size(comm);
	pc->rank = crun_comm_rank(comm);
	pc->accum = opts->grad_accum;
	pc->micro = opts->micro_batch;
	pc->t = copts->compute;
	pc->es = crun_dtype_size(pc->t);
	pc->nccl = crun_comm_is_nccl(comm);
	pc->reduce_bf16 = pc->t == CRUN_DTYPE_BF16 && !copts->reduce_fp32 && pc->nccl;
	pc->z3_unit[0] = pc->z3_unit[1] = -1;
	W = (size_t)pc->world;

	pc->n_seg = crun_parallel_n_segments(host);
	pc->seg = calloc((size_t)pc->n_seg, sizeof(*pc->seg));
	pc->unit_seg = calloc((size_t)model->n_units, sizeof(*pc->unit_seg));
	if (!pc->seg || !pc->unit_seg) {
		crun_seterr(err, errlen, "out of memory");
		goto out_destroy;
	}
	for (int s = 0; s < pc->n_seg; s++)
		crun_parallel_segment(host, s, &pc->seg[s]);
	for (int u = 0; u < model->n_units; u++)
		pc->unit_seg[u] = crun_parallel_unit_segment(host, u);
	crun_parallel_arrays(host, &arr);
	pc->p_len = arr.p_len;
	pc->pad_len = arr.pad_len;
	pc->shard_len = arr.shard_len;
	pc->max_chunk = arr.max_chunk;
	pc->optim_len = arr.optim_len;

	pc->cs = ctx->stream;
	if (pc->nccl) {
		pc->ms = crun_comm_nccl_stream(comm);
	} else {
		CRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&pc->ms, cudaStreamNonBlocking));
		pc->own_ms = true;
	}
	CRUN_CUDA_CHECK(cudaEventCreateWithFlags(&pc->ev_ready, cudaEventDisableTiming));
	CRUN_CUDA_CHECK(cudaEventCreateWithFlags(&pc->ev_comm, cudaEventDisableTiming));
	CRUN_CUDA_CHECK(cudaEventCreateWithFlags(&pc->ev_step, cudaEventDisableTiming));
	for (int i = 0; i < 2; i++) {
		CRUN_CUDA_CHECK(
			cudaEventCreateWithFlags(&pc->ev_reduced[i], cudaEventDisableTiming));
		CRUN_CUDA_CHECK(
			cudaEventCreateWithFlags(&pc->z3_gathered[i], cudaEventDisableTiming));
		CRUN_CUDA_CHECK(cudaEventCreateWithFlags(&pc->z3_freed[i], cudaEventDisableTiming));
	}
	for (int i = 0; i < 4; i++)
		CRUN_CUDA_CHECK(cudaEventCreateWithFlags(&pc->t_ev[i], cudaEventDefault));

	sharded_grads = pc->strategy == CRUN_STRATEGY_ZERO2 || pc->strategy == CRUN_STRATEGY_ZERO3;
	pc->p = dalloc(pc, pc->p_len * sizeof(float), &pc->mem.param_bytes, "parameters", &ok, err,
		       errlen);
	pc->pc = pc->t == CRUN_DTYPE_F32 ? (void *)pc->p
					 : dalloc(pc, pc->p_len * pc->es, &pc->mem.param_bytes,
						  "bf16 parameters", &ok, err, errlen);
	if (pc->strategy == CRUN_STRATEGY_ZERO3)
		for (int i = 0; i < 2; i++)
			pc->gather[i] =
				dalloc(pc, W * pc->max_chunk * pc->es, &pc->mem.gather_bytes,
				       "gathered parameters", &ok, err, errlen);
	if (!sharded_grads || pc->accum > 1)
		pc->g_full = dalloc(pc, pc->pad_len * sizeof(float), &pc->mem.grad_bytes,
				    "gradients", &ok, err, errlen);
	else
		for (int i = 0; i < 2; i++)
			pc->g_seg[i] =
				dalloc(pc, W * pc->max_chunk * sizeof(float), &pc->mem.grad_bytes,
				       "gradient buckets", &ok, err, errlen);
	if (pc->strategy != CRUN_STRATEGY_DDP)
		pc->g_shard = dalloc(pc, pc->shard_len * sizeof(float), &pc->mem.grad_bytes,
				     "gradient shards", &ok, err, errlen);
	if (pc->reduce_bf16)
		pc->g_red = dalloc(pc, W * pc->max_chunk * 2, &pc->mem.grad_bytes,
				   "bf16 reduction buffer", &ok, err, errlen);
	pc->m = dalloc(pc, pc->optim_len * sizeof(float), &pc->mem.optim_bytes, "optimizer state",
		       &ok, err, errlen);
	pc->v = dalloc(pc, pc->optim_len * sizeof(float), &pc->mem.optim_bytes, "optimizer state",
		       &ok, err, errlen);
	tok_bytes = (size_t)pc->accum * (size_t)(pc->micro > 0 ? pc->micro : 1) * row;
	pc->tokens = dalloc(pc, tok_bytes, NULL, "token batch", &ok, err, errlen);
	pc->d_partials = dalloc(pc, (size_t)pc->n_seg * CRUN_K_SUMSQ_BLOCKS * sizeof(double), NULL,
				"norm partials", &ok, err, errlen);
	pc->d_sumsq = dalloc(pc, sizeof(double), NULL, "norm", &ok, err, errlen);
	pc->d_gscale = dalloc(pc, sizeof(float), NULL, "clip scale", &ok, err, errlen);
	if (!ok)
		goto out_destroy;
	pc->acts = crun_cuda_acts_create(ctx, model, pc->micro, pc->t, copts->recompute);
	if (!pc->acts) {
		crun_seterr(err, errlen,
		       "out of GPU memory for the activations of a micro-batch of %d (%.1f MiB "
		       "allocated so far, the device has %.1f MiB): see OUT OF MEMORY in "
		       "crun-train(1)",
		       pc->micro, (double)ctx->bytes / (1 << 20),
		       (double)ctx->total_bytes / (1 << 20));
		goto out_destroy;
	}
	pc->mem.act_bytes = crun_cuda_acts_bytes(pc->acts);
	pc->tokens_host = crun_cuda_host_alloc(ctx, tok_bytes);
	pc->h_stats = crun_cuda_host_alloc(ctx, 2 * sizeof(double));
	if (!pc->tokens_host || !pc->h_stats)
		goto out_host;
	if (!pc->nccl && pc->world > 1) {
		pc->stage_in = crun_cuda_host_alloc(ctx, W * pc->max_chunk * sizeof(float));
		pc->stage_out = crun_cuda_host_alloc(ctx, W * pc->max_chunk * sizeof(float));
		if (!pc->stage_in || !pc->stage_out)
			goto out_host;
	}
	return pc;

out_host:
	crun_seterr(err, errlen, "out of pinned host memory for staging buffers");
out_destroy:
	crun_cuda_parallel_destroy(pc);
	return NULL;
}

void crun_cuda_parallel_destroy(struct crun_cuda_parallel *pc)
{
	struct crun_cuda_ctx *ctx;

	if (!pc)
		return;
	ctx = pc->ctx;
	if (pc->cs)
		CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->cs));
	if (pc->ms)
		CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->ms));
	crun_cuda_acts_destroy(ctx, pc->acts);
	if (pc->pc != pc->p)
		crun_cuda_free(ctx, pc->pc);
	crun_cuda_free(ctx, pc->p);
	for (int i = 0; i < 2; i++) {
		crun_cuda_free(ctx, pc->gather[i]);
		crun_cuda_free(ctx, pc->g_seg[i]);
		if (pc->ev_reduced[i])
			cudaEventDestroy(pc->ev_reduced[i]);
		if (pc->z3_gathered[i])
			cudaEventDestroy(pc->z3_gathered[i]);
		if (pc->z3_freed[i])
			cudaEventDestroy(pc->z3_freed[i]);
	}
	crun_cuda_free(ctx, pc->g_full);
	crun_cuda_free(ctx, pc->g_shard);
	crun_cuda_free(ctx, pc->g_red);
	crun_cuda_free(ctx, pc->m);
	crun_cuda_free(ctx, pc->v);
	crun_cuda_free(ctx, pc->tokens);
	crun_cuda_free(ctx, pc->tokens_host);
	crun_cuda_free(ctx, pc->d_partials);
	crun_cuda_free(ctx, pc->d_sumsq);
	crun_cuda_free(ctx, pc->d_gscale);
	crun_cuda_free(ctx, pc->h_stats);
	crun_cuda_free(ctx, pc->stage_in);
	crun_cuda_free(ctx, pc->stage_out);
	if (pc->ev_ready)
		cudaEventDestroy(pc->ev_ready);
	if (pc->ev_comm)
		cudaEventDestroy(pc->ev_comm);
	if (pc->ev_step)
		cudaEventDestroy(pc->ev_step);
	for (int i = 0; i < 4; i++)
		if (pc->t_ev[i])
			cudaEventDestroy(pc->t_ev[i]);
	if (pc->own_ms)
		cudaStreamDestroy(pc->ms);
	free(pc->seg);
	free(pc->unit_seg);
	free(pc);
}

/* The compute copy follows the master parameters; zero3's gathered units
 * are stale after that. */
static void refresh_compute_copy(struct crun_cuda_parallel *pc)
{
	if (pc->pc != pc->p)
		CRUN_CUDA_CHECK(
			crun_k_cast(pc->p, CRUN_DTYPE_F32, pc->pc, pc->t, pc->p_len, pc->cs));
	pc->z3_unit[0] = pc->z3_unit[1] = -1;
}

void crun_cuda_parallel_upload(struct crun_cuda_parallel *pc)
{
	struct crun_parallel_arrays arr;

	crun_parallel_arrays(pc->host, &arr);
	/* on the compute stream, so that what follows there sees the bytes */
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->ms));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->p, arr.p, arr.p_len * sizeof(float),
					cudaMemcpyHostToDevice, pc->cs));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->m, arr.m, arr.optim_len * sizeof(float),
					cudaMemcpyHostToDevice, pc->cs));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->v, arr.v, arr.optim_len * sizeof(float),
					cudaMemcpyHostToDevice, pc->cs));
	refresh_compute_copy(pc);
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->cs));
}

void crun_cuda_parallel_download(struct crun_cuda_parallel *pc, bool optim)
{
	struct crun_parallel_arrays arr;

	crun_parallel_arrays(pc->host, &arr);
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->ms));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(arr.p, pc->p, arr.p_len * sizeof(float),
					cudaMemcpyDeviceToHost, pc->cs));
	if (optim) {
		CRUN_CUDA_CHECK(cudaMemcpyAsync(arr.m, pc->m, arr.optim_len * sizeof(float),
						cudaMemcpyDeviceToHost, pc->cs));
		CRUN_CUDA_CHECK(cudaMemcpyAsync(arr.v, pc->v, arr.optim_len * sizeof(float),
						cudaMemcpyDeviceToHost, pc->cs));
	}
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->cs));
}

/* zero3: gathers unit u's segment (the compute copy of every rank's
 * chunk) into buffer slot, once the compute stream is done with what the
 * slot held. */
static int z3_issue(struct crun_cuda_parallel *pc, int u, int slot)
{
	const struct crun_segment *g = &pc->seg[pc->unit_seg[u]];
	const char *shard = (const char *)pc->pc + g->shard_off * pc->es;
	int rc;

	CRUN_CUDA_CHECK(cudaStreamWaitEvent(pc->ms, pc->z3_freed[slot], 0));
	pc->z3_unit[slot] = -1;
	rc = dc_allgather(pc, shard, pc->gather[slot], g->chunk, pc->t);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaEventRecord(pc->z3_gathered[slot], pc->ms));
	pc->z3_unit[slot] = u;
	return 0;
}

/* zero3: unit u's parameters, gathered (or still there from its last use),
 * and the gather of unit next (-1: none) started into the other buffer. */
static int z3_acquire(struct crun_cuda_parallel *pc, int u, int next, const void **out)
{
	int slot = pc->z3_unit[0] == u ? 0 : pc->z3_unit[1] == u ? 1 : -1;
	int rc;

	if (slot < 0) {
		/* keep next if it is already there; else replace the older one */
		slot = pc->z3_unit[0] == next ? 1 : pc->z3_unit[1] == next ? 0 : 1 - pc->z3_slot;
		rc = z3_issue(pc, u, slot);
		if (rc)
			return rc;
	}
	CRUN_CUDA_CHECK(cudaStreamWaitEvent(pc->cs, pc->z3_gathered[slot], 0));
	pc->z3_slot = slot;
	if (next >= 0 && next != u && pc->z3_unit[0] != next && pc->z3_unit[1] != next) {
		rc = z3_issue(pc, next, 1 - slot);
		if (rc)
			return rc;
	}
	*out = pc->gather[slot];
	return 0;
}

/* The compute stream is done with the unit in use: its buffer may be
 * refilled. */
static void z3_release(struct crun_cuda_parallel *pc)
{
	CRUN_CUDA_CHECK(cudaEventRecord(pc->z3_freed[pc->z3_slot], pc->cs));
}

/* Unit u's parameters in the compute type. */
static int unit_params(struct crun_cuda_parallel *pc, int u, int next, const void **out)
{
	const struct crun_segment *g = &pc->seg[pc->unit_seg[u]];
	size_t in_seg = pc->model->unit_off[u] - g->start;
	const void *base;
	int rc;

	if (pc->strategy != CRUN_STRATEGY_ZERO3) {
		*out = (const char *)pc->pc + (g->pad_off + in_seg) * pc->es;
		return 0;
	}
	rc = z3_acquire(pc, u, next, &base);
	if (rc)
		return rc;
	*out = (const char *)base + in_seg * pc->es;
	return 0;
}

static int forward_all(struct crun_cuda_parallel *pc, const uint8_t *tokens, int rows)
{
	int U = pc->model->n_units;
	bool z3 = pc->strategy == CRUN_STRATEGY_ZERO3;

	if (z3)
		ms_wait_cs(pc); /* the shards' compute copy is current */
	for (int u = 0; u < U; u++) {
		const void *p;
		int rc = unit_params(pc, u, u + 1 < U ? u + 1 : -1, &p);

		if (rc)
			return rc;
		crun_cuda_forward_unit(pc->ctx, pc->model, u, p, pc->acts, tokens, rows);
		if (z3)
			z3_release(pc);
	}
	return 0;
}

/* Segment s's gradients are complete: queue their reduction on ms. */
static int reduce_segment(struct crun_cuda_parallel *pc, int s)
{
	const struct crun_segment *g = &pc->seg[s];
	size_t W = (size_t)pc->world, n = W * g->chunk;
	float *buf = pc->g_full ? pc->g_full + g->pad_off : pc->g_seg[pc->gslot];
	float *shard = pc->g_shard ? pc->g_shard + g->shard_off : NULL;
	bool ddp = pc->strategy == CRUN_STRATEGY_DDP;
	int rc;

	ms_wait_cs(pc);
	if (pc->reduce_bf16) {
		char *own = (char *)pc->g_red + (size_t)pc->rank * g->chunk * 2;

		CRUN_CUDA_CHECK(
			crun_k_cast(buf, CRUN_DTYPE_F32, pc->g_red, CRUN_DTYPE_BF16, n, pc->ms));
		if (ddp) {
			rc = dc_allreduce(pc, pc->g_red, n, CRUN_DTYPE_BF16);
			if (!rc)
				CRUN_CUDA_CHECK(crun_k_cast(pc->g_red, CRUN_DTYPE_BF16, buf,
							    CRUN_DTYPE_F32, n, pc->ms));
		} else {
			rc = dc_reduce_scatter(pc, pc->g_red, own, g->chunk, CRUN_DTYPE_BF16);
			if (!rc)
				CRUN_CUDA_CHECK(crun_k_cast(own, CRUN_DTYPE_BF16, shard,
							    CRUN_DTYPE_F32, g->chunk, pc->ms));
		}
	} else if (ddp) {
		rc = dc_allreduce(pc, buf, n, CRUN_DTYPE_F32);
	} else {
		rc = dc_reduce_scatter(pc, buf, shard, g->chunk, CRUN_DTYPE_F32);
	}
	if (rc)
		return rc;
	if (!pc->g_full)
		CRUN_CUDA_CHECK(cudaEventRecord(pc->ev_reduced[pc->gslot], pc->ms));
	return 0;
}

static int backward_all(struct crun_cuda_parallel *pc, const uint8_t *tokens, int rows, float scale,
			bool sync)
{
	bool z3 = pc->strategy == CRUN_STRATEGY_ZERO3;

	for (int u = pc->model->n_units - 1; u >= 0; u--) {
		int s = pc->unit_seg[u];
		const struct crun_segment *g = &pc->seg[s];
		size_t in_seg = pc->model->unit_off[u] - g->start;
		const void *p;
		float *grads;
		int rc;

		if (!pc->g_full && u == g->unit_last) {
			/* a bucket buffer whose last reduction has finished */
			pc->gslot ^= 1;
			CRUN_CUDA_CHECK(cudaStreamWaitEvent(pc->cs, pc->ev_reduced[pc->gslot], 0));
			CRUN_CUDA_CHECK(cudaMemsetAsync(
				pc->g_seg[pc->gslot], 0,
				(size_t)pc->world * g->chunk * sizeof(float), pc->cs));
		}
		grads = pc->g_full ? pc->g_full + g->pad_off + in_seg
				   : pc->g_seg[pc->gslot] + in_seg;
		rc = unit_params(pc, u, u - 1, &p);
		if (rc)
			return rc;
		crun_cuda_backward_unit(pc->ctx, pc->model, u, p, grads, pc->acts, tokens, rows,
					scale);
		if (z3)
			z3_release(pc);
		if (sync && u == g->unit_first) {
			rc = reduce_segment(pc, s);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Elements of segment g this rank owns (0 at the padded end). */
static size_t owned_n(const struct crun_cuda_parallel *pc, const struct crun_segment *g)
{
	size_t lo = (size_t)pc->rank * g->chunk;

	if (lo >= g->len)
		return 0;
	return g->len - lo < g->chunk ? g->len - lo : g->chunk;
}

/* AdamW on flat parameters [flat, flat+n), tensor by tensor for their
 * weight decay (crun_optim_adamw on the device). */
static void adamw_range(struct crun_cuda_parallel *pc, const struct crun_optim *o, size_t flat,
			size_t n, float *p, const float *g, float *m, float *v, float bc1,
			float bc2, float lr)
{
	const struct crun_model *model = pc->model;
	size_t end = flat + n;

	for (int i = 0; i < model->n_tensors; i++) {
		const struct crun_tensor *tn = &model->tensors[i];
		size_t a = tn->offset > flat ? tn->offset : flat;
		size_t b = tn->offset + tn->numel < end ? tn->offset + tn->numel : end;
		size_t k = a - flat;

		if (a >= b)
			continue;
		CRUN_CUDA_CHECK(crun_k_adamw(p + k, g + k, m + k, v + k, b - a, (float)o->beta1,
					     (float)o->beta2, (float)o->eps, bc1, bc2, lr,
					     tn->decay ? (float)o->weight_decay : 0.0f,
					     pc->d_gscale, pc->cs));
	}
}

static int update(struct crun_cuda_parallel *pc, const struct crun_optim *o, int64_t t, double lr)
{
	float bc1 = (float)(1.0 - pow(o->beta1, (double)t));
	float bc2 = (float)(1.0 - pow(o->beta2, (double)t));
	bool ddp = pc->strategy == CRUN_STRATEGY_DDP, z3 = pc->strategy == CRUN_STRATEGY_ZERO3;
	int rc;

	/* global gradient norm: ddp holds the whole sum, others their chunks */
	for (int s = 0; s < pc->n_seg; s++) {
		const struct crun_segment *g = &pc->seg[s];
		const float *gr = ddp ? pc->g_full + g->pad_off : pc->g_shard + g->shard_off;

		CRUN_CUDA_CHECK(crun_k_sumsq_partial(
			gr, ddp ? g->len : owned_n(pc, g),
			pc->d_partials + (size_t)s * CRUN_K_SUMSQ_BLOCKS, pc->cs));
	}
	CRUN_CUDA_CHECK(crun_k_sum_f64(pc->d_partials, (size_t)pc->n_seg * CRUN_K_SUMSQ_BLOCKS,
				       pc->d_sumsq, pc->cs));
	if (!ddp) {
		ms_wait_cs(pc);
		rc = dc_allreduce_f64(pc, pc->d_sumsq);
		if (rc)
			return rc;
		cs_wait_ms(pc);
	}
	CRUN_CUDA_CHECK(crun_k_clip_scale(pc->d_sumsq, o->grad_clip, pc->d_gscale, pc->cs));

	for (int s = 0; s < pc->n_seg; s++) {
		const struct crun_segment *g = &pc->seg[s];
		size_t lo = (size_t)pc->rank * g->chunk;

		if (ddp) {
			adamw_range(pc, o, g->start, g->len, pc->p + g->pad_off,
				    pc->g_full + g->pad_off, pc->m + g->pad_off, pc->v + g->pad_off,
				    bc1, bc2, (float)lr);
			continue;
		}
		adamw_range(pc, o, g->start + lo, owned_n(pc, g),
			    z3 ? pc->p + g->shard_off : pc->p + g->pad_off + lo,
			    pc->g_shard + g->shard_off, pc->m + g->shard_off, pc->v + g->shard_off,
			    bc1, bc2, (float)lr);
	}
	if (!ddp && !z3) {
		ms_wait_cs(pc);
		for (int s = 0; s < pc->n_seg; s++) {
			const struct crun_segment *g = &pc->seg[s];
			float *full = pc->p + g->pad_off;

			rc = dc_allgather(pc, full + (size_t)pc->rank * g->chunk, full, g->chunk,
					  CRUN_DTYPE_F32);
			if (rc)
				return rc;
		}
		cs_wait_ms(pc);
	}
	refresh_compute_copy(pc);
	return 0;
}

/* Adds the finished step's phases (the first step, with cuBLAS's and
 * NCCL's warm-up, is left out). */
static void add_times(struct crun_cuda_parallel *pc)
{
	float ms[3];

	if (pc->times.seen++ == 0)
		return;
	for (int i = 0; i < 3; i++)
		CRUN_CUDA_CHECK(cudaEventElapsedTime(&ms[i], pc->t_ev[i], pc->t_ev[i + 1]));
	pc->times.compute_ms += ms[0];
	pc->times.comm_ms += ms[1];
	pc->times.update_ms += ms[2];
	pc->times.steps++;
}

void crun_cuda_parallel_times(const struct crun_cuda_parallel *pc, struct crun_cuda_times *out)
{
	*out = pc->times;
}

static void upload_tokens(struct crun_cuda_parallel *pc, const uint8_t *tokens, size_t bytes)
{
	if (!bytes)
		return;
	memcpy(pc->tokens_host, tokens, bytes);
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->tokens, pc->tokens_host, bytes, cudaMemcpyHostToDevice,
					pc->cs));
}

int crun_cuda_parallel_step(struct crun_cuda_parallel *pc, const struct crun_optim *o,
			    const uint8_t *tokens, int64_t global_batch, int64_t t, double lr,
			    double *loss, double *grad_norm)
{
	size_t row = (size_t)pc->model->cfg.context + 1;
	float scale = (float)(1.0 / (double)global_batch);
	double local_loss;
	int rc;

	CRUN_CUDA_CHECK(cudaEventRecord(pc->t_ev[0], pc->cs));
	upload_tokens(pc, tokens, (size_t)pc->accum * (size_t)pc->micro * row);
	CRUN_CUDA_CHECK(cudaMemsetAsync(crun_cuda_acts_loss(pc->acts), 0, sizeof(double), pc->cs));
	if (pc->g_full)
		CRUN_CUDA_CHECK(
			cudaMemsetAsync(pc->g_full, 0, pc->pad_len * sizeof(float), pc->cs));
	for (int a = 0; a < pc->accum; a++) {
		const uint8_t *tk = pc->tokens + (size_t)a * (size_t)pc->micro * row;

		rc = forward_all(pc, tk, pc->micro);
		if (rc)
			return rc;
		rc = backward_all(pc, tk, pc->micro, scale, a == pc->accum - 1);
		if (rc)
			return rc;
	}
	CRUN_CUDA_CHECK(cudaEventRecord(pc->t_ev[1], pc->cs));
	cs_wait_ms(pc); /* every bucket is reduced */
	CRUN_CUDA_CHECK(cudaEventRecord(pc->t_ev[2], pc->cs));
	rc = update(pc, o, t, lr);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(&pc->h_stats[0], crun_cuda_acts_loss(pc->acts),
					sizeof(double), cudaMemcpyDeviceToHost, pc->cs));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(&pc->h_stats[1], pc->d_sumsq, sizeof(double),
					cudaMemcpyDeviceToHost, pc->cs));
	CRUN_CUDA_CHECK(cudaEventRecord(pc->t_ev[3], pc->cs));
	CRUN_CUDA_CHECK(cudaEventRecord(pc->ev_step, pc->cs));
	rc = wait_event(pc, pc->ev_step);
	if (rc)
		return rc;
	add_times(pc);
	local_loss = pc->h_stats[0];
	*grad_norm = sqrt(pc->h_stats[1]);
	rc = crun_comm_allreduce_f64(pc->comm, &local_loss, 1);
	if (rc)
		return rc;
	*loss = local_loss / (double)global_batch;
	return 0;
}

int crun_cuda_parallel_forward(struct crun_cuda_parallel *pc, const uint8_t *tokens, int rows,
			       double *loss_sum)
{
	size_t row = (size_t)pc->model->cfg.context + 1;
	int rc;

	upload_tokens(pc, tokens, rows > 0 ? (size_t)rows * row : 0);
	CRUN_CUDA_CHECK(cudaMemsetAsync(crun_cuda_acts_loss(pc->acts), 0, sizeof(double), pc->cs));
	rc = forward_all(pc, pc->tokens, rows);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(&pc->h_stats[0], crun_cuda_acts_loss(pc->acts),
					sizeof(double), cudaMemcpyDeviceToHost, pc->cs));
	CRUN_CUDA_CHECK(cudaEventRecord(pc->ev_step, pc->cs));
	rc = wait_event(pc, pc->ev_step);
	if (rc)
		return rc;
	if (rows > 0)
		*loss_sum += pc->h_stats[0];
	return 0;
}

void crun_cuda_parallel_memory(const struct crun_cuda_parallel *pc, struct crun_cuda_memory *out)
{
	*out = pc->mem;
	/* the nccl backend's staging buffer (made at setup, grown only for a
	 * larger collective on host memory) adds its largest size: a bound */
	out->peak_bytes = pc->ctx->peak_bytes + (pc->nccl ? crun_comm_nccl_peak_bytes(pc->comm) : 0);
	out->used_bytes = crun_cuda_used_bytes();
}
