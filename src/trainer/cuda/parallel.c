/* The cuda device (see cuda/parallel.h and device.h): the schedule's
 * operations on a GPU.
 *
 * Two streams: cs (ctx->stream) is the compute queue, ms the comm queue
 * (the nccl backend's own stream, or one of ours over the cpu backend).
 * The schedule's events are CUDA events: ev_ready and ev_comm order the
 * two streams, ev_reduced[slot] (a bucket buffer may be cleared again)
 * and z3_gathered/z3_freed[slot] (a gather buffer is full / may be
 * overwritten) guard the double buffers. Collectives are issued from this
 * thread in the schedule's order, which every rank shares, as NCCL
 * requires.
 *
 * The trace's stamps (device.h) are timing events recorded on cs or ms.
 * The first stamp of a step records a reference event on cs and waits for
 * it, so that the host's clock then is its wall time; after the step,
 * cudaEventElapsedTime from the reference gives every stamp's. */
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

struct crun__cuda_parallel {
	struct crun__device d;
	struct crun__cuda_ctx *ctx;
	bool own_ctx;
	struct crun__cuda_parallel_opts copts;
	int world, rank;
	enum crun__dtype t;
	size_t es;
	bool nccl;
	bool reduce_bf16;

	cudaStream_t cs, ms;
	bool own_ms;
	cudaEvent_t ev_ready, ev_comm, ev_step, ev_reduced[2];

	float *p;	 /* master parameters: p_len */
	void *pc;	 /* their compute copy (bf16), or p itself */
	void *gather[2]; /* zero3: W * max_chunk of T each */
	cudaEvent_t z3_gathered[2], z3_freed[2];
	/* timing on cs: step start, backward queued, reductions waited for,
	 * step end; and the sums of the phases over timed steps */
	cudaEvent_t t_ev[4];
	struct crun__device_times times;
	int64_t seen; /* steps, timed or not */
	/* the trace's stamps of this step, and their reference */
	cudaEvent_t tr_ref, *tr_ev;
	int tr_n, tr_cap;
	bool tr_ref_set;
	int64_t tr_ref_us;
	float *g_full;	 /* grads_full: pad_len */
	float *g_seg[2]; /* otherwise: W * max_chunk each */
	float *g_shard;	 /* zero1-3: shard_len */
	void *g_red;	 /* bf16 reduction: W * max_chunk bf16 */
	float *m, *v;
	uint8_t *tokens, *tokens_host;
	struct crun__cuda_acts *acts;
	double *d_partials, *d_sumsq;
	float *d_gscale;
	double *h_stats;	     /* pinned: loss, sum of squares */
	float *stage_in, *stage_out; /* pinned, cpu backend: W * max_chunk each */
	struct crun__device_memory mem;
};

static struct crun__cuda_parallel *cu(struct crun__device *d)
{
	return (struct crun__cuda_parallel *)d;
}

static enum crun__comm_dtype comm_type(enum crun__dtype t)
{
	return t == CRUN_DTYPE_BF16 ? CRUN_COMM_BF16 : CRUN_COMM_F32;
}

/* A buffer the schedule names, and the type of its elements. */
static void *at(struct crun__cuda_parallel *pc, struct crun__ref r, enum crun__dtype *t)
{
	enum crun__dtype ft = CRUN_DTYPE_F32;
	void *p = NULL;

	switch (r.buf) {
	case CRUN__BUF_MASTER:
		p = pc->p + r.off;
		break;
	case CRUN__BUF_COMPUTE:
		ft = pc->t;
		p = (char *)pc->pc + r.off * pc->es;
		break;
	case CRUN__BUF_GATHER:
		ft = pc->t;
		p = (char *)pc->gather[r.slot] + r.off * pc->es;
		break;
	case CRUN__BUF_GRAD:
		p = pc->g_full + r.off;
		break;
	case CRUN__BUF_BUCKET:
		p = pc->g_seg[r.slot] + r.off;
		break;
	case CRUN__BUF_SHARD:
		p = pc->g_shard + r.off;
		break;
	}
	if (t)
		*t = ft;
	return p;
}

static float *at_f32(struct crun__cuda_parallel *pc, struct crun__ref r)
{
	return at(pc, r, NULL);
}

/* Collectives on device buffers, queued on ms. With the nccl backend they
 * are asynchronous; with the cpu backend they copy to pinned host memory,
 * run the host collective and copy back, blocking the host. */

static void ms_sync(struct crun__cuda_parallel *pc)
{
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->ms));
}

static void d2d(struct crun__cuda_parallel *pc, void *dst, const void *src, size_t bytes)
{
	if (dst != src && bytes)
		CRUN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, pc->ms));
}

/* Sum over ranks in place (float32 only over the cpu backend). */
static int dc_allreduce(struct crun__cuda_parallel *pc, void *buf, size_t count, enum crun__dtype t)
{
	size_t bytes = count * sizeof(float);
	int rc;

	if (pc->nccl)
		return crun__comm_nccl_allreduce(pc->d.comm, buf, count, comm_type(t));
	if (t != CRUN_DTYPE_F32)
		return -EINVAL; /* the cpu backend reduces float32 only */
	if (pc->world == 1 || !count)
		return 0;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->stage_in, buf, bytes, cudaMemcpyDeviceToHost, pc->ms));
	ms_sync(pc);
	rc = crun__comm_allreduce_f32(pc->d.comm, pc->stage_in, count);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(buf, pc->stage_in, bytes, cudaMemcpyHostToDevice, pc->ms));
	ms_sync(pc);
	return 0;
}

/* in: W * count; out: count (may be in + rank * count). */
static int dc_reduce_scatter(struct crun__cuda_parallel *pc, const void *in, void *out,
			     size_t count, enum crun__dtype t)
{
	size_t bytes = count * sizeof(float), W = (size_t)pc->world;
	int rc;

	if (pc->nccl)
		return crun__comm_nccl_reduce_scatter(pc->d.comm, in, out, count, comm_type(t));
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
	rc = crun__comm_reduce_scatter_f32(pc->d.comm, pc->stage_in, pc->stage_out, count);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(out, pc->stage_out, bytes, cudaMemcpyHostToDevice, pc->ms));
	ms_sync(pc);
	return 0;
}

/* in: count; out: W * count (in may be out + rank * count). Over the cpu
 * backend any type travels as bytes, padded to whole floats per rank. */
static int dc_allgather(struct crun__cuda_parallel *pc, const void *in, void *out, size_t count,
			enum crun__dtype t)
{
	size_t bytes = count * crun__dtype_size(t), fr = (bytes + 3) / 4;
	int rc;

	if (pc->nccl)
		return crun__comm_nccl_allgather(pc->d.comm, in, out, count, comm_type(t));
	if (pc->world == 1) {
		d2d(pc, out, in, bytes);
		return 0;
	}
	if (!count)
		return 0;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->stage_in, in, bytes, cudaMemcpyDeviceToHost, pc->ms));
	ms_sync(pc);
	rc = crun__comm_allgather_f32(pc->d.comm, pc->stage_in, pc->stage_out, fr);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpy2DAsync(out, bytes, pc->stage_out, fr * sizeof(float), bytes,
					  (size_t)pc->world, cudaMemcpyHostToDevice, pc->ms));
	ms_sync(pc);
	return 0;
}

/* Sum of one device double over ranks, in place. */
static int dc_allreduce_f64(struct crun__cuda_parallel *pc, double *d)
{
	int rc;

	if (pc->nccl)
		return crun__comm_nccl_allreduce(pc->d.comm, d, 1, CRUN_COMM_F64);
	if (pc->world == 1)
		return 0;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(&pc->h_stats[1], d, sizeof(double), cudaMemcpyDeviceToHost,
					pc->ms));
	ms_sync(pc);
	rc = crun__comm_allreduce_f64(pc->d.comm, &pc->h_stats[1], 1);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(cudaMemcpyAsync(d, &pc->h_stats[1], sizeof(double), cudaMemcpyHostToDevice,
					pc->ms));
	ms_sync(pc);
	return 0;
}

/* The host waits for ev (bounded and watching NCCL's errors with nccl). */
static int wait_event(struct crun__cuda_parallel *pc, cudaEvent_t ev)
{
	if (pc->nccl)
		return crun__comm_nccl_wait(pc->d.comm, ev);
	CRUN_CUDA_CHECK(cudaEventSynchronize(ev));
	return 0;
}

static void *dalloc(struct crun__cuda_parallel *pc, size_t bytes, size_t *count, const char *what,
		    bool *ok, char *err, size_t errlen)
{
	void *p;

	if (!*ok)
		return NULL;
	p = crun__cuda_alloc(pc->ctx, bytes);
	if (!p) {
		crun__seterr(err, errlen,
			     "out of GPU memory for the %s (%.1f MiB more; %.1f MiB allocated so "
			     "far, the device has %.1f MiB): see OUT OF MEMORY in crun-train(1)",
			     what, (double)bytes / (1 << 20), (double)pc->ctx->bytes / (1 << 20),
			     (double)pc->ctx->total_bytes / (1 << 20));
		*ok = false;
		return NULL;
	}
	if (count)
		*count += bytes;
	return p;
}

/* Frees what attach made (the context stays). */
static void free_buffers(struct crun__cuda_parallel *pc)
{
	struct crun__cuda_ctx *ctx = pc->ctx;

	if (pc->cs)
		CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->cs));
	if (pc->ms)
		CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->ms));
	crun__cuda_acts_destroy(ctx, pc->acts);
	if (pc->pc != pc->p)
		crun__cuda_free(ctx, pc->pc);
	crun__cuda_free(ctx, pc->p);
	for (int i = 0; i < 2; i++) {
		crun__cuda_free(ctx, pc->gather[i]);
		crun__cuda_free(ctx, pc->g_seg[i]);
		if (pc->ev_reduced[i])
			cudaEventDestroy(pc->ev_reduced[i]);
		if (pc->z3_gathered[i])
			cudaEventDestroy(pc->z3_gathered[i]);
		if (pc->z3_freed[i])
			cudaEventDestroy(pc->z3_freed[i]);
	}
	crun__cuda_free(ctx, pc->g_full);
	crun__cuda_free(ctx, pc->g_shard);
	crun__cuda_free(ctx, pc->g_red);
	crun__cuda_free(ctx, pc->m);
	crun__cuda_free(ctx, pc->v);
	crun__cuda_free(ctx, pc->tokens);
	crun__cuda_free(ctx, pc->tokens_host);
	crun__cuda_free(ctx, pc->d_partials);
	crun__cuda_free(ctx, pc->d_sumsq);
	crun__cuda_free(ctx, pc->d_gscale);
	crun__cuda_free(ctx, pc->h_stats);
	crun__cuda_free(ctx, pc->stage_in);
	crun__cuda_free(ctx, pc->stage_out);
	if (pc->ev_ready)
		cudaEventDestroy(pc->ev_ready);
	if (pc->ev_comm)
		cudaEventDestroy(pc->ev_comm);
	if (pc->ev_step)
		cudaEventDestroy(pc->ev_step);
	for (int i = 0; i < 4; i++)
		if (pc->t_ev[i])
			cudaEventDestroy(pc->t_ev[i]);
	if (pc->tr_ref)
		cudaEventDestroy(pc->tr_ref);
	for (int i = 0; i < pc->tr_cap; i++)
		cudaEventDestroy(pc->tr_ev[i]);
	free(pc->tr_ev);
	if (pc->own_ms)
		cudaStreamDestroy(pc->ms);
	/* everything from the world size on is attach's */
	memset(&pc->world, 0, sizeof(*pc) - offsetof(struct crun__cuda_parallel, world));
}

static int cuda_attach(struct crun__device *d, char *err, size_t errlen)
{
	struct crun__cuda_parallel *pc = cu(d);
	struct crun__cuda_ctx *ctx = pc->ctx;
	const struct crun__layout *lay = d->lay;
	size_t W, row = (size_t)d->model->cfg.context + 1, tok_bytes;
	bool ok = true;

	free_buffers(pc);
	pc->world = lay->world;
	pc->rank = lay->rank;
	pc->t = pc->copts.compute;
	pc->es = crun__dtype_size(pc->t);
	pc->nccl = crun__comm_is_nccl(d->comm);
	pc->reduce_bf16 = pc->t == CRUN_DTYPE_BF16 && !pc->copts.reduce_fp32 && pc->nccl;
	W = (size_t)pc->world;
	d->compute_size = pc->es;
	d->reduce_size = pc->reduce_bf16 ? 2 : sizeof(float);

	pc->cs = ctx->stream;
	if (pc->nccl) {
		pc->ms = crun__comm_nccl_stream(d->comm);
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

	pc->p = dalloc(pc, lay->p_len * sizeof(float), &pc->mem.param_bytes, "parameters", &ok, err,
		       errlen);
	pc->pc = pc->t == CRUN_DTYPE_F32 ? (void *)pc->p
					 : dalloc(pc, lay->p_len * pc->es, &pc->mem.param_bytes,
						  "bf16 parameters", &ok, err, errlen);
	if (lay->strategy == CRUN_STRATEGY_ZERO3)
		for (int i = 0; i < 2; i++)
			pc->gather[i] =
				dalloc(pc, W * lay->max_chunk * pc->es, &pc->mem.gather_bytes,
				       "gathered parameters", &ok, err, errlen);
	if (lay->grads_full)
		pc->g_full = dalloc(pc, lay->pad_len * sizeof(float), &pc->mem.grad_bytes,
				    "gradients", &ok, err, errlen);
	else
		for (int i = 0; i < 2; i++)
			pc->g_seg[i] =
				dalloc(pc, W * lay->max_chunk * sizeof(float), &pc->mem.grad_bytes,
				       "gradient buckets", &ok, err, errlen);
	if (lay->strategy != CRUN_STRATEGY_DDP)
		pc->g_shard = dalloc(pc, lay->shard_len * sizeof(float), &pc->mem.grad_bytes,
				     "gradient shards", &ok, err, errlen);
	if (pc->reduce_bf16)
		pc->g_red = dalloc(pc, W * lay->max_chunk * 2, &pc->mem.grad_bytes,
				   "bf16 reduction buffer", &ok, err, errlen);
	pc->m = dalloc(pc, lay->optim_len * sizeof(float), &pc->mem.optim_bytes, "optimizer state",
		       &ok, err, errlen);
	pc->v = dalloc(pc, lay->optim_len * sizeof(float), &pc->mem.optim_bytes, "optimizer state",
		       &ok, err, errlen);
	tok_bytes = (size_t)lay->accum * (size_t)(lay->micro > 0 ? lay->micro : 1) * row;
	pc->tokens = dalloc(pc, tok_bytes, NULL, "token batch", &ok, err, errlen);
	pc->d_partials = dalloc(pc, (size_t)lay->n_seg * CRUN_K_SUMSQ_BLOCKS * sizeof(double), NULL,
				"norm partials", &ok, err, errlen);
	pc->d_sumsq = dalloc(pc, sizeof(double), NULL, "norm", &ok, err, errlen);
	pc->d_gscale = dalloc(pc, sizeof(float), NULL, "clip scale", &ok, err, errlen);
	if (!ok)
		goto out_free;
	pc->acts = crun__cuda_acts_create(ctx, d->model, lay->micro, pc->t, pc->copts.recompute);
	if (!pc->acts) {
		crun__seterr(err, errlen,
			     "out of GPU memory for the activations of a micro-batch of %d (%.1f "
			     "MiB allocated so far, the device has %.1f MiB): see OUT OF MEMORY in "
			     "crun-train(1)",
			     lay->micro, (double)ctx->bytes / (1 << 20),
			     (double)ctx->total_bytes / (1 << 20));
		goto out_free;
	}
	pc->mem.act_bytes = crun__cuda_acts_bytes(pc->acts);
	pc->tokens_host = crun__cuda_host_alloc(ctx, tok_bytes);
	pc->h_stats = crun__cuda_host_alloc(ctx, 2 * sizeof(double));
	if (!pc->tokens_host || !pc->h_stats)
		goto out_host;
	if (!pc->nccl && pc->world > 1) {
		pc->stage_in = crun__cuda_host_alloc(ctx, W * lay->max_chunk * sizeof(float));
		pc->stage_out = crun__cuda_host_alloc(ctx, W * lay->max_chunk * sizeof(float));
		if (!pc->stage_in || !pc->stage_out)
			goto out_host;
	}
	return 0;

out_host:
	crun__seterr(err, errlen, "out of pinned host memory for staging buffers");
	free_buffers(pc);
	return -ENOMEM;
out_free:
	free_buffers(pc);
	return -ENOSPC;
}

static struct crun__device *cuda_open(const struct crun__device_opts *o, char *err, size_t errlen)
{
	struct crun__cuda_parallel *pc = calloc(1, sizeof(*pc));
	int dev;

	if (!pc) {
		crun__seterr(err, errlen, "out of memory");
		return NULL;
	}
	if (crun__cuda_pick_device(o->local_rank, o->shared, &dev, err, errlen))
		goto out_free;
	pc->ctx = crun__cuda_ctx_create(dev, err, errlen);
	if (!pc->ctx)
		goto out_free;
	pc->own_ctx = true;
	pc->copts.compute = o->bf16 ? CRUN_DTYPE_BF16 : CRUN_DTYPE_F32;
	pc->copts.reduce_fp32 = o->reduce_fp32;
	pc->copts.recompute = o->recompute;
	return &pc->d;

out_free:
	free(pc);
	return NULL;
}

static void cuda_close(struct crun__device *d)
{
	struct crun__cuda_parallel *pc = cu(d);

	if (pc->ctx)
		free_buffers(pc);
	if (pc->own_ctx)
		crun__cuda_ctx_destroy(pc->ctx);
	free(pc);
}

/* The compute copy follows the master parameters. */
static void cuda_params_changed(struct crun__device *d)
{
	struct crun__cuda_parallel *pc = cu(d);

	if (pc->pc != pc->p)
		CRUN_CUDA_CHECK(
			crun__k_cast(pc->p, CRUN_DTYPE_F32, pc->pc, pc->t, d->lay->p_len, pc->cs));
}

static void cuda_upload(struct crun__device *d)
{
	struct crun__cuda_parallel *pc = cu(d);
	struct crun__parallel_arrays arr;

	crun__parallel_arrays(d->host, &arr);
	/* on the compute stream, so that what follows there sees the bytes */
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->ms));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->p, arr.p, arr.p_len * sizeof(float),
					cudaMemcpyHostToDevice, pc->cs));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->m, arr.m, arr.optim_len * sizeof(float),
					cudaMemcpyHostToDevice, pc->cs));
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->v, arr.v, arr.optim_len * sizeof(float),
					cudaMemcpyHostToDevice, pc->cs));
	cuda_params_changed(d);
	CRUN_CUDA_CHECK(cudaStreamSynchronize(pc->cs));
}

static void cuda_download(struct crun__device *d, bool optim)
{
	struct crun__cuda_parallel *pc = cu(d);
	struct crun__parallel_arrays arr;

	crun__parallel_arrays(d->host, &arr);
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

static cudaStream_t stream(struct crun__cuda_parallel *pc, enum crun__queue q)
{
	return q == CRUN__QUEUE_COMPUTE ? pc->cs : pc->ms;
}

static cudaEvent_t event(struct crun__cuda_parallel *pc, enum crun__event ev, int slot)
{
	switch (ev) {
	case CRUN__EV_COMPUTED:
		return pc->ev_ready;
	case CRUN__EV_COMMUNICATED:
		return pc->ev_comm;
	case CRUN__EV_REDUCED:
		return pc->ev_reduced[slot];
	case CRUN__EV_GATHERED:
		return pc->z3_gathered[slot];
	case CRUN__EV_FREED:
		return pc->z3_freed[slot];
	}
	return NULL;
}

static void cuda_signal(struct crun__device *d, enum crun__queue q, enum crun__event ev, int slot)
{
	struct crun__cuda_parallel *pc = cu(d);

	CRUN_CUDA_CHECK(cudaEventRecord(event(pc, ev, slot), stream(pc, q)));
}

static void cuda_wait(struct crun__device *d, enum crun__queue q, enum crun__event ev, int slot)
{
	struct crun__cuda_parallel *pc = cu(d);

	CRUN_CUDA_CHECK(cudaStreamWaitEvent(stream(pc, q), event(pc, ev, slot), 0));
}

static void cuda_mark(struct crun__device *d, enum crun__mark m)
{
	struct crun__cuda_parallel *pc = cu(d);

	CRUN_CUDA_CHECK(cudaEventRecord(pc->t_ev[m], pc->cs));
}

static void upload_tokens(struct crun__cuda_parallel *pc, const uint8_t *tokens, size_t bytes)
{
	if (!bytes)
		return;
	memcpy(pc->tokens_host, tokens, bytes);
	CRUN_CUDA_CHECK(cudaMemcpyAsync(pc->tokens, pc->tokens_host, bytes, cudaMemcpyHostToDevice,
					pc->cs));
}

static void cuda_begin(struct crun__device *d, const uint8_t *tokens, size_t bytes)
{
	struct crun__cuda_parallel *pc = cu(d);

	upload_tokens(pc, tokens, bytes);
	CRUN_CUDA_CHECK(cudaMemsetAsync(crun__cuda_acts_loss(pc->acts), 0, sizeof(double), pc->cs));
}

static void cuda_forward(struct crun__device *d, int unit, struct crun__ref p, size_t row, int rows)
{
	struct crun__cuda_parallel *pc = cu(d);
	size_t rowlen = (size_t)d->model->cfg.context + 1;

	crun__cuda_forward_unit(pc->ctx, d->model, unit, at(pc, p, NULL), pc->acts,
				pc->tokens + row * rowlen, rows);
}

static void cuda_backward(struct crun__device *d, int unit, struct crun__ref p, struct crun__ref g,
			  size_t row, int rows, float scale)
{
	struct crun__cuda_parallel *pc = cu(d);
	size_t rowlen = (size_t)d->model->cfg.context + 1;

	crun__cuda_backward_unit(pc->ctx, d->model, unit, at(pc, p, NULL), at_f32(pc, g), pc->acts,
				 pc->tokens + row * rowlen, rows, scale);
}

static void cuda_zero(struct crun__device *d, struct crun__ref x, size_t n)
{
	struct crun__cuda_parallel *pc = cu(d);

	CRUN_CUDA_CHECK(cudaMemsetAsync(at_f32(pc, x), 0, n * sizeof(float), pc->cs));
}

/* Gradients are reduced in bf16 (reduce_bf16) through g_red: cast, reduce,
 * cast back, all on ms. */
static int cuda_allreduce(struct crun__device *d, struct crun__ref x, size_t chunk)
{
	struct crun__cuda_parallel *pc = cu(d);
	size_t n = (size_t)pc->world * chunk;
	float *buf = at_f32(pc, x);
	int rc;

	if (!pc->reduce_bf16)
		return dc_allreduce(pc, buf, n, CRUN_DTYPE_F32);
	CRUN_CUDA_CHECK(crun__k_cast(buf, CRUN_DTYPE_F32, pc->g_red, CRUN_DTYPE_BF16, n, pc->ms));
	rc = dc_allreduce(pc, pc->g_red, n, CRUN_DTYPE_BF16);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(crun__k_cast(pc->g_red, CRUN_DTYPE_BF16, buf, CRUN_DTYPE_F32, n, pc->ms));
	return 0;
}

static int cuda_reduce_scatter(struct crun__device *d, struct crun__ref in, struct crun__ref out,
			       size_t chunk)
{
	struct crun__cuda_parallel *pc = cu(d);
	size_t n = (size_t)pc->world * chunk;
	float *buf = at_f32(pc, in), *shard = at_f32(pc, out);
	char *own = (char *)pc->g_red + (size_t)pc->rank * chunk * 2;
	int rc;

	if (!pc->reduce_bf16)
		return dc_reduce_scatter(pc, buf, shard, chunk, CRUN_DTYPE_F32);
	CRUN_CUDA_CHECK(crun__k_cast(buf, CRUN_DTYPE_F32, pc->g_red, CRUN_DTYPE_BF16, n, pc->ms));
	rc = dc_reduce_scatter(pc, pc->g_red, own, chunk, CRUN_DTYPE_BF16);
	if (rc)
		return rc;
	CRUN_CUDA_CHECK(crun__k_cast(own, CRUN_DTYPE_BF16, shard, CRUN_DTYPE_F32, chunk, pc->ms));
	return 0;
}

static int cuda_gather(struct crun__device *d, struct crun__ref in, struct crun__ref out,
		       size_t chunk)
{
	struct crun__cuda_parallel *pc = cu(d);
	enum crun__dtype t;
	const void *src = at(pc, in, &t);

	return dc_allgather(pc, src, at(pc, out, NULL), chunk, t);
}

static void cuda_sumsq(struct crun__device *d, int part, struct crun__ref x, size_t n)
{
	struct crun__cuda_parallel *pc = cu(d);

	CRUN_CUDA_CHECK(crun__k_sumsq_partial(
		at_f32(pc, x), n, pc->d_partials + (size_t)part * CRUN_K_SUMSQ_BLOCKS, pc->cs));
}

static void cuda_sumsq_total(struct crun__device *d, int n_parts)
{
	struct crun__cuda_parallel *pc = cu(d);

	CRUN_CUDA_CHECK(crun__k_sum_f64(pc->d_partials, (size_t)n_parts * CRUN_K_SUMSQ_BLOCKS,
					pc->d_sumsq, pc->cs));
}

static int cuda_sumsq_allreduce(struct crun__device *d)
{
	return dc_allreduce_f64(cu(d), cu(d)->d_sumsq);
}

static void cuda_clip(struct crun__device *d, const struct crun__optim *o)
{
	struct crun__cuda_parallel *pc = cu(d);

	CRUN_CUDA_CHECK(crun__k_clip_scale(pc->d_sumsq, o->grad_clip, pc->d_gscale, pc->cs));
}

/* AdamW on flat parameters [flat, flat+n), tensor by tensor for their
 * weight decay (crun__optim_adamw on the device). */
static void adamw_range(struct crun__cuda_parallel *pc, const struct crun__optim *o, size_t flat,
			size_t n, float *p, const float *g, float *m, float *v, float bc1,
			float bc2, float lr)
{
	const struct crun__model *model = pc->d.model;
	size_t end = flat + n;

	for (int i = 0; i < model->n_tensors; i++) {
		const struct crun__tensor *tn = &model->tensors[i];
		size_t a = tn->offset > flat ? tn->offset : flat;
		size_t b = tn->offset + tn->numel < end ? tn->offset + tn->numel : end;
		size_t k = a - flat;

		if (a >= b)
			continue;
		CRUN_CUDA_CHECK(crun__k_adamw(p + k, g + k, m + k, v + k, b - a, (float)o->beta1,
					      (float)o->beta2, (float)o->eps, bc1, bc2, lr,
					      tn->decay ? (float)o->weight_decay : 0.0f,
					      pc->d_gscale, pc->cs));
	}
}

static void cuda_adamw(struct crun__device *d, const struct crun__optim *o, size_t flat, size_t n,
		       struct crun__ref p, struct crun__ref g, size_t moff, int64_t t, double lr)
{
	struct crun__cuda_parallel *pc = cu(d);
	float bc1 = (float)(1.0 - pow(o->beta1, (double)t));
	float bc2 = (float)(1.0 - pow(o->beta2, (double)t));

	adamw_range(pc, o, flat, n, at_f32(pc, p), at_f32(pc, g), pc->m + moff, pc->v + moff, bc1,
		    bc2, (float)lr);
}

/* Adds the finished step's phases (the first step, with cuBLAS's and
 * NCCL's warm-up, is left out). */
static void add_times(struct crun__cuda_parallel *pc)
{
	float ms[3];

	if (pc->seen++ == 0)
		return;
	for (int i = 0; i < 3; i++)
		CRUN_CUDA_CHECK(cudaEventElapsedTime(&ms[i], pc->t_ev[i], pc->t_ev[i + 1]));
	pc->times.compute_ms += ms[0];
	pc->times.comm_ms += ms[1];
	pc->times.update_ms += ms[2];
	pc->times.steps++;
}

static int cuda_finish(struct crun__device *d, double *loss, double *sumsq)
{
	struct crun__cuda_parallel *pc = cu(d);
	int rc;

	CRUN_CUDA_CHECK(cudaMemcpyAsync(&pc->h_stats[0], crun__cuda_acts_loss(pc->acts),
					sizeof(double), cudaMemcpyDeviceToHost, pc->cs));
	if (sumsq) {
		CRUN_CUDA_CHECK(cudaMemcpyAsync(&pc->h_stats[1], pc->d_sumsq, sizeof(double),
						cudaMemcpyDeviceToHost, pc->cs));
		CRUN_CUDA_CHECK(cudaEventRecord(pc->t_ev[3], pc->cs));
	}
	CRUN_CUDA_CHECK(cudaEventRecord(pc->ev_step, pc->cs));
	rc = wait_event(pc, pc->ev_step);
	if (rc)
		return rc;
	*loss = pc->h_stats[0];
	if (sumsq) {
		add_times(pc);
		*sumsq = pc->h_stats[1];
	}
	return 0;
}

static int cuda_stamp(struct crun__device *d, enum crun__queue q)
{
	struct crun__cuda_parallel *pc = cu(d);

	if (!pc->tr_ref_set) {
		if (!pc->tr_ref)
			CRUN_CUDA_CHECK(cudaEventCreateWithFlags(&pc->tr_ref, cudaEventDefault));
		CRUN_CUDA_CHECK(cudaEventRecord(pc->tr_ref, pc->cs));
		CRUN_CUDA_CHECK(cudaEventSynchronize(pc->tr_ref));
		pc->tr_ref_us = crun__trace_now_us();
		pc->tr_ref_set = true;
	}
	if (pc->tr_n == pc->tr_cap) {
		int cap = pc->tr_cap ? 2 * pc->tr_cap : 64;
		cudaEvent_t *ev = realloc(pc->tr_ev, (size_t)cap * sizeof(*ev));

		if (!ev)
			return -1; /* a span without its time: not recorded */
		pc->tr_ev = ev;
		for (; pc->tr_cap < cap; pc->tr_cap++)
			CRUN_CUDA_CHECK(
				cudaEventCreateWithFlags(&pc->tr_ev[pc->tr_cap], cudaEventDefault));
	}
	CRUN_CUDA_CHECK(cudaEventRecord(pc->tr_ev[pc->tr_n], stream(pc, q)));
	return pc->tr_n++;
}

static void cuda_stamp_times(struct crun__device *d, int64_t *us, int n)
{
	struct crun__cuda_parallel *pc = cu(d);

	for (int i = 0; us && i < n; i++) {
		float ms = 0;

		if (i < pc->tr_n) {
			CRUN_CUDA_CHECK(cudaEventSynchronize(pc->tr_ev[i]));
			CRUN_CUDA_CHECK(cudaEventElapsedTime(&ms, pc->tr_ref, pc->tr_ev[i]));
		}
		us[i] = pc->tr_ref_us + (int64_t)llround((double)ms * 1000.0);
	}
	pc->tr_n = 0;
	pc->tr_ref_set = false;
}

static void cuda_memory(const struct crun__device *d, struct crun__device_memory *out)
{
	const struct crun__cuda_parallel *pc = (const struct crun__cuda_parallel *)d;

	*out = pc->mem;
	/* the nccl backend's staging buffer (made at setup, grown only for a
	 * larger collective on host memory) adds its largest size: a bound */
	out->peak_bytes =
		pc->ctx->peak_bytes + (pc->nccl ? crun__comm_nccl_peak_bytes(d->comm) : 0);
	out->used_bytes = crun__cuda_used_bytes();
}

static void cuda_times(const struct crun__device *d, struct crun__device_times *out)
{
	*out = ((const struct crun__cuda_parallel *)d)->times;
}

static void cuda_describe(const struct crun__device *d, char *buf, size_t len)
{
	const struct crun__cuda_parallel *pc = (const struct crun__cuda_parallel *)d;
	bool bf16 = pc->t == CRUN_DTYPE_BF16;

	snprintf(buf, len, "device: cuda:%d %s (%.1f GiB); %s%s; gradients reduced in %s over %s%s",
		 pc->ctx->device, pc->ctx->name, (double)pc->ctx->total_bytes / (1u << 30),
		 bf16 ? "bf16 compute with fp32 master weights" : "fp32 compute",
		 pc->copts.recompute ? ", activation checkpointing" : "",
		 pc->reduce_bf16 ? "bf16" : "fp32", crun__comm_backend(d->comm),
		 pc->nccl ? " (communication overlapped with backward)" : "");
}

const struct crun__device_ops crun__device_cuda_ops = {
	.name = "cuda",
	.gather_slots = 2,
	.bucket_slots = 2,
	.mirrors = true,
	.open = cuda_open,
	.attach = cuda_attach,
	.close = cuda_close,
	.upload = cuda_upload,
	.download = cuda_download,
	.signal = cuda_signal,
	.wait = cuda_wait,
	.mark = cuda_mark,
	.begin = cuda_begin,
	.forward = cuda_forward,
	.backward = cuda_backward,
	.zero = cuda_zero,
	.allreduce = cuda_allreduce,
	.reduce_scatter = cuda_reduce_scatter,
	.gather = cuda_gather,
	.sumsq = cuda_sumsq,
	.sumsq_total = cuda_sumsq_total,
	.sumsq_allreduce = cuda_sumsq_allreduce,
	.clip = cuda_clip,
	.adamw = cuda_adamw,
	.params_changed = cuda_params_changed,
	.finish = cuda_finish,
	.memory = cuda_memory,
	.times = cuda_times,
	.stamp = cuda_stamp,
	.stamp_times = cuda_stamp_times,
	.describe = cuda_describe,
};

struct crun__cuda_parallel *
crun__cuda_parallel_create(struct crun__cuda_ctx *ctx, const struct crun__model *model,
			   struct crun__parallel *host, struct crun__comm *comm,
			   const struct crun__cuda_parallel_opts *copts, char *err, size_t errlen)
{
	struct crun__cuda_parallel *pc = calloc(1, sizeof(*pc));

	if (!pc) {
		crun__seterr(err, errlen, "out of memory");
		return NULL;
	}
	pc->d.ops = &crun__device_cuda_ops;
	pc->ctx = ctx;
	pc->copts = *copts;
	if (crun__device_attach(&pc->d, model, host, comm, err, errlen)) {
		cuda_close(&pc->d);
		return NULL;
	}
	return pc;
}

void crun__cuda_parallel_destroy(struct crun__cuda_parallel *pc)
{
	if (pc)
		cuda_close(&pc->d);
}

void crun__cuda_parallel_upload(struct crun__cuda_parallel *pc)
{
	crun__schedule_upload(&pc->d);
}

void crun__cuda_parallel_download(struct crun__cuda_parallel *pc, bool optim)
{
	crun__schedule_download(&pc->d, optim);
}

int crun__cuda_parallel_step(struct crun__cuda_parallel *pc, const struct crun__optim *o,
			     const uint8_t *tokens, int64_t global_batch, int64_t t, double lr,
			     double *loss, double *grad_norm)
{
	return crun__schedule_step(&pc->d, o, tokens, global_batch, t, lr, loss, grad_norm);
}

int crun__cuda_parallel_forward(struct crun__cuda_parallel *pc, const uint8_t *tokens, int rows,
				double *loss_sum)
{
	return crun__schedule_forward(&pc->d, tokens, rows, loss_sum);
}
