/* The cpu device: the schedule's operations on host memory with model.c,
 * optim.c and the comm layer. Every operation is done when it returns, so
 * the queue order (signal, wait) and the marks are no-ops; it computes on
 * the host copy itself (parameters and moments), so there is nothing to
 * upload or download, and the compute copy is the master copy. */
#include "trainer/device.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cpu_device {
	struct crun__device d;
	float *p, *m, *v; /* the host's arrays (crun__parallel_arrays) */
	float *gather;	  /* zero3: W * max_chunk */
	float *g_full;	  /* grads_full: pad_len */
	float *g_bucket;  /* otherwise: W * max_chunk, the bucket in flight */
	float *g_shard;	  /* zero1-3: shard_len */
	struct crun__model_acts *acts;
	const uint8_t *tokens;
	double loss, sumsq;
	float gscale;
};

static struct cpu_device *cpu(struct crun__device *d)
{
	return (struct cpu_device *)d;
}

static float *at(struct crun__device *d, struct crun__ref r)
{
	struct cpu_device *c = cpu(d);

	switch (r.buf) {
	case CRUN__BUF_MASTER:
	case CRUN__BUF_COMPUTE:
		return c->p + r.off;
	case CRUN__BUF_GATHER:
		return c->gather + r.off;
	case CRUN__BUF_GRAD:
		return c->g_full + r.off;
	case CRUN__BUF_BUCKET:
		return c->g_bucket + r.off;
	case CRUN__BUF_SHARD:
		return c->g_shard + r.off;
	}
	return NULL;
}

static float *zalloc(size_t n)
{
	return calloc(n ? n : 1, sizeof(float));
}

static struct crun__device *cpu_open(const struct crun__device_opts *o, char *err, size_t errlen)
{
	struct cpu_device *c = calloc(1, sizeof(*c));

	(void)o;
	if (!c)
		snprintf(err, errlen, "out of memory");
	return c ? &c->d : NULL;
}

static void cpu_free_buffers(struct cpu_device *c)
{
	crun__model_acts_destroy(c->acts);
	free(c->gather);
	free(c->g_full);
	free(c->g_bucket);
	free(c->g_shard);
	c->acts = NULL;
	c->gather = c->g_full = c->g_bucket = c->g_shard = NULL;
}

/* The elements of the buffers attach allocates for lay (0: none). */
struct cpu_sizes {
	size_t gather, g_full, g_bucket, g_shard;
};

static void cpu_sizes(const struct crun__layout *lay, struct cpu_sizes *out)
{
	size_t W = (size_t)lay->world;

	memset(out, 0, sizeof(*out));
	if (lay->strategy == CRUN_STRATEGY_ZERO3)
		out->gather = W * lay->max_chunk;
	if (lay->grads_full)
		out->g_full = lay->pad_len;
	else
		out->g_bucket = W * lay->max_chunk;
	if (lay->strategy != CRUN_STRATEGY_DDP)
		out->g_shard = lay->shard_len;
}

void crun__device_cpu_need(const struct crun__layout *lay, const struct crun__model *model,
			   size_t *grad_bytes, size_t *gather_bytes, size_t *act_bytes)
{
	struct cpu_sizes z;

	cpu_sizes(lay, &z);
	*grad_bytes = (z.g_full + z.g_bucket + z.g_shard) * sizeof(float);
	*gather_bytes = z.gather * sizeof(float);
	*act_bytes = crun__model_acts_bytes(model, lay->micro);
}

static int cpu_attach(struct crun__device *d, char *err, size_t errlen)
{
	struct cpu_device *c = cpu(d);
	const struct crun__layout *lay = d->lay;
	struct crun__parallel_arrays arr;
	struct cpu_sizes z;
	bool ok = true;

	cpu_free_buffers(c);
	crun__parallel_arrays(d->host, &arr);
	c->p = arr.p;
	c->m = arr.m;
	c->v = arr.v;
	cpu_sizes(lay, &z);
	if (z.gather)
		ok = ok && (c->gather = zalloc(z.gather));
	if (z.g_full)
		ok = ok && (c->g_full = zalloc(z.g_full));
	if (z.g_bucket)
		ok = ok && (c->g_bucket = zalloc(z.g_bucket));
	if (z.g_shard)
		ok = ok && (c->g_shard = zalloc(z.g_shard));
	ok = ok && (c->acts = crun__model_acts_create(d->model, lay->micro));
	if (!ok) {
		cpu_free_buffers(c);
		snprintf(err, errlen,
			 "out of host memory for the gradients, gather buffer and activations");
		return -ENOMEM;
	}
	return 0;
}

static void cpu_close(struct crun__device *d)
{
	cpu_free_buffers(cpu(d));
	free(cpu(d));
}

static void cpu_upload(struct crun__device *d)
{
	(void)d;
}

static void cpu_download(struct crun__device *d, bool optim)
{
	(void)d;
	(void)optim;
}

static void cpu_signal(struct crun__device *d, enum crun__queue q, enum crun__event ev, int slot)
{
	(void)d;
	(void)q;
	(void)ev;
	(void)slot;
}

static void cpu_mark(struct crun__device *d, enum crun__mark m)
{
	(void)d;
	(void)m;
}

static void cpu_begin(struct crun__device *d, const uint8_t *tokens, size_t bytes)
{
	(void)bytes;
	cpu(d)->tokens = tokens;
	cpu(d)->loss = 0;
	cpu(d)->sumsq = 0;
}

static void cpu_forward(struct crun__device *d, int unit, struct crun__ref p, size_t row, int rows)
{
	struct cpu_device *c = cpu(d);
	const uint8_t *tk = c->tokens + row * ((size_t)d->model->cfg.context + 1);

	crun__model_forward_unit(d->model, unit, at(d, p), c->acts, tk, rows);
	if (unit == d->model->n_units - 1 && rows > 0)
		c->loss += crun__model_loss_sum(c->acts);
}

static void cpu_backward(struct crun__device *d, int unit, struct crun__ref p, struct crun__ref g,
			 size_t row, int rows, float scale)
{
	struct cpu_device *c = cpu(d);
	const uint8_t *tk = c->tokens + row * ((size_t)d->model->cfg.context + 1);

	crun__model_backward_unit(d->model, unit, at(d, p), at(d, g), c->acts, tk, rows, scale);
}

static void cpu_zero(struct crun__device *d, struct crun__ref x, size_t n)
{
	memset(at(d, x), 0, n * sizeof(float));
}

static int cpu_allreduce(struct crun__device *d, struct crun__ref x, size_t chunk)
{
	return crun__comm_allreduce_f32(d->comm, at(d, x), (size_t)d->lay->world * chunk);
}

static int cpu_reduce_scatter(struct crun__device *d, struct crun__ref in, struct crun__ref out,
			      size_t chunk)
{
	return crun__comm_reduce_scatter_f32(d->comm, at(d, in), at(d, out), chunk);
}

static int cpu_gather(struct crun__device *d, struct crun__ref in, struct crun__ref out,
		      size_t chunk)
{
	return crun__comm_allgather_f32(d->comm, at(d, in), at(d, out), chunk);
}

static void cpu_sumsq(struct crun__device *d, int part, struct crun__ref x, size_t n)
{
	(void)part;
	cpu(d)->sumsq += crun__optim_sumsq(at(d, x), n);
}

static void cpu_sumsq_total(struct crun__device *d, int n_parts)
{
	(void)d;
	(void)n_parts;
}

static int cpu_sumsq_allreduce(struct crun__device *d)
{
	return crun__comm_allreduce_f64(d->comm, &cpu(d)->sumsq, 1);
}

static void cpu_clip(struct crun__device *d, const struct crun__optim *o)
{
	cpu(d)->gscale = crun__optim_clip_scale(o, sqrt(cpu(d)->sumsq));
}

static void cpu_adamw(struct crun__device *d, const struct crun__optim *o, size_t flat, size_t n,
		      struct crun__ref p, struct crun__ref g, size_t moff, int64_t t, double lr)
{
	struct cpu_device *c = cpu(d);

	crun__optim_adamw(o, d->model, flat, n, at(d, p), at(d, g), c->m + moff, c->v + moff, t, lr,
			  c->gscale);
}

static void cpu_params_changed(struct crun__device *d)
{
	(void)d;
}

static int cpu_finish(struct crun__device *d, double *loss, double *sumsq)
{
	*loss = cpu(d)->loss;
	if (sumsq)
		*sumsq = cpu(d)->sumsq;
	return 0;
}

static void cpu_memory(const struct crun__device *d, struct crun__device_memory *out)
{
	const struct crun__layout *lay = d->lay;
	size_t f = sizeof(float);
	struct cpu_sizes z;

	cpu_sizes(lay, &z);
	memset(out, 0, sizeof(*out));
	out->param_bytes = lay->p_len * f;
	out->gather_bytes = z.gather * f;
	out->grad_bytes = (z.g_full + z.g_bucket + z.g_shard) * f;
	out->optim_bytes = 2 * lay->optim_len * f;
}

static void cpu_times(const struct crun__device *d, struct crun__device_times *out)
{
	(void)d;
	memset(out, 0, sizeof(*out));
}

static void cpu_describe(const struct crun__device *d, char *buf, size_t len)
{
	(void)d;
	if (len)
		buf[0] = '\0';
}

const struct crun__device_ops crun__device_cpu_ops = {
	.name = "cpu",
	.gather_slots = 1,
	.bucket_slots = 1,
	.mirrors = false,
	.open = cpu_open,
	.attach = cpu_attach,
	.close = cpu_close,
	.upload = cpu_upload,
	.download = cpu_download,
	.signal = cpu_signal,
	.wait = cpu_signal,
	.mark = cpu_mark,
	.begin = cpu_begin,
	.forward = cpu_forward,
	.backward = cpu_backward,
	.zero = cpu_zero,
	.allreduce = cpu_allreduce,
	.reduce_scatter = cpu_reduce_scatter,
	.gather = cpu_gather,
	.sumsq = cpu_sumsq,
	.sumsq_total = cpu_sumsq_total,
	.sumsq_allreduce = cpu_sumsq_allreduce,
	.clip = cpu_clip,
	.adamw = cpu_adamw,
	.params_changed = cpu_params_changed,
	.finish = cpu_finish,
	.memory = cpu_memory,
	.times = cpu_times,
	.describe = cpu_describe,
};
