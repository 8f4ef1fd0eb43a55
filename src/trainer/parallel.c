/* The layout of the strategies (segments, chunks, padding) and the host
 * copy of the parameters and optimizer state; the step itself is the
 * schedule's (schedule.c) on a device (device.h). */
#include "trainer/parallel.h"

#include "trainer/device.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct crun__parallel {
	const struct crun__model *model;
	struct crun__comm *comm;
	struct crun__layout lay;
	struct crun__segment *seg;
	int *unit_seg;

	float *p_full;		  /* ddp, zero1, zero2: pad_len */
	float *p_shard;		  /* zero3: shard_len */
	float *m, *v;		  /* ddp: pad_len; zero1-3: shard_len */
	struct crun__device *cpu; /* crun__parallel_create: the cpu device, owned */
};

int crun__strategy_parse(const char *name)
{
	if (!strcmp(name, "ddp"))
		return CRUN_STRATEGY_DDP;
	if (!strcmp(name, "zero1"))
		return CRUN_STRATEGY_ZERO1;
	if (!strcmp(name, "zero2"))
		return CRUN_STRATEGY_ZERO2;
	if (!strcmp(name, "zero3") || !strcmp(name, "fsdp"))
		return CRUN_STRATEGY_ZERO3;
	return -1;
}

const char *crun__strategy_name(enum crun__strategy s)
{
	switch (s) {
	case CRUN_STRATEGY_DDP:
		return "ddp";
	case CRUN_STRATEGY_ZERO1:
		return "zero1";
	case CRUN_STRATEGY_ZERO2:
		return "zero2";
	case CRUN_STRATEGY_ZERO3:
		return "zero3";
	}
	return "?";
}

/* Segments from the last unit backwards: one unit each for zero3, else
 * units merged while the bucket stays within bucket_bytes. */
static int plan_segments(struct crun__parallel *par, size_t bucket_bytes)
{
	const struct crun__model *m = par->model;
	struct crun__layout *lay = &par->lay;
	size_t bucket = bucket_bytes / sizeof(float);
	int n = 0;

	par->seg = calloc((size_t)m->n_units, sizeof(*par->seg));
	par->unit_seg = calloc((size_t)m->n_units, sizeof(*par->unit_seg));
	if (!par->seg || !par->unit_seg)
		return -ENOMEM;
	for (int u = m->n_units - 1; u >= 0;) {
		int first = u;
		size_t len = crun__model_unit_len(m, u);

		if (lay->strategy != CRUN_STRATEGY_ZERO3)
			while (first > 0 && len + crun__model_unit_len(m, first - 1) <= bucket)
				len += crun__model_unit_len(m, --first);
		par->seg[n].unit_first = first;
		par->seg[n].unit_last = u;
		n++;
		u = first - 1;
	}
	/* listed last-first; store them in flat order */
	for (int i = 0; i < n / 2; i++) {
		struct crun__segment t = par->seg[i];

		par->seg[i] = par->seg[n - 1 - i];
		par->seg[n - 1 - i] = t;
	}
	lay->n_seg = n;
	for (int s = 0; s < n; s++) {
		struct crun__segment *g = &par->seg[s];

		g->start = m->unit_off[g->unit_first];
		g->len = m->unit_off[g->unit_last + 1] - g->start;
		g->chunk = (g->len + (size_t)lay->world - 1) / (size_t)lay->world;
		g->pad_off = lay->pad_len;
		g->shard_off = lay->shard_len;
		lay->pad_len += g->chunk * (size_t)lay->world;
		lay->shard_len += g->chunk;
		if (g->chunk > lay->max_chunk)
			lay->max_chunk = g->chunk;
		for (int u = g->unit_first; u <= g->unit_last; u++)
			par->unit_seg[u] = s;
	}
	lay->seg = par->seg;
	lay->unit_seg = par->unit_seg;
	return 0;
}

static float *zalloc(size_t n)
{
	return calloc(n ? n : 1, sizeof(float));
}

struct crun__parallel *crun__parallel_plan(const struct crun__model *model, struct crun__comm *comm,
					   const struct crun__parallel_opts *opts)
{
	struct crun__parallel *par = calloc(1, sizeof(*par));
	struct crun__layout *lay;
	bool sharded_grads;

	if (!par)
		return NULL;
	lay = &par->lay;
	par->model = model;
	par->comm = comm;
	lay->strategy = opts->strategy;
	lay->world = crun__comm_size(comm);
	lay->rank = crun__comm_rank(comm);
	lay->accum = opts->grad_accum;
	lay->micro = opts->micro_batch;
	if (plan_segments(par, opts->bucket_bytes))
		goto out_destroy;
	sharded_grads =
		lay->strategy == CRUN_STRATEGY_ZERO2 || lay->strategy == CRUN_STRATEGY_ZERO3;
	lay->grads_full = !sharded_grads || lay->accum > 1;
	lay->p_len = lay->strategy == CRUN_STRATEGY_ZERO3 ? lay->shard_len : lay->pad_len;
	lay->optim_len = lay->strategy == CRUN_STRATEGY_DDP ? lay->pad_len : lay->shard_len;
	return par;

out_destroy:
	crun__parallel_destroy(par);
	return NULL;
}

int crun__parallel_alloc(struct crun__parallel *par)
{
	const struct crun__layout *lay = &par->lay;

	if (lay->strategy == CRUN_STRATEGY_ZERO3)
		par->p_shard = zalloc(lay->p_len);
	else
		par->p_full = zalloc(lay->p_len);
	par->m = zalloc(lay->optim_len);
	par->v = zalloc(lay->optim_len);
	if ((!par->p_full && !par->p_shard) || !par->m || !par->v) {
		free(par->p_full);
		free(par->p_shard);
		free(par->m);
		free(par->v);
		par->p_full = par->p_shard = par->m = par->v = NULL;
		return -ENOMEM;
	}
	return 0;
}

struct crun__parallel *crun__parallel_create_storage(const struct crun__model *model,
						     struct crun__comm *comm,
						     const struct crun__parallel_opts *opts)
{
	struct crun__parallel *par = crun__parallel_plan(model, comm, opts);

	if (par && crun__parallel_alloc(par)) {
		crun__parallel_destroy(par);
		return NULL;
	}
	return par;
}

struct crun__parallel *crun__parallel_create(const struct crun__model *model,
					     struct crun__comm *comm,
					     const struct crun__parallel_opts *opts)
{
	struct crun__parallel *par = crun__parallel_create_storage(model, comm, opts);
	char err[256];

	if (!par)
		return NULL;
	par->cpu = crun__device_open(&crun__device_cpu_ops, NULL, err, sizeof(err));
	if (!par->cpu || crun__device_attach(par->cpu, model, par, comm, err, sizeof(err))) {
		crun__parallel_destroy(par);
		return NULL;
	}
	return par;
}

const struct crun__layout *crun__parallel_layout(const struct crun__parallel *par)
{
	return &par->lay;
}

void crun__parallel_arrays(struct crun__parallel *par, struct crun__parallel_arrays *out)
{
	out->p = par->p_full ? par->p_full : par->p_shard;
	out->p_len = par->lay.p_len;
	out->m = par->m;
	out->v = par->v;
	out->optim_len = par->lay.optim_len;
	out->pad_len = par->lay.pad_len;
	out->shard_len = par->lay.shard_len;
	out->max_chunk = par->lay.max_chunk;
}

void crun__parallel_destroy(struct crun__parallel *par)
{
	if (!par)
		return;
	crun__device_close(par->cpu);
	free(par->seg);
	free(par->unit_seg);
	free(par->p_full);
	free(par->p_shard);
	free(par->m);
	free(par->v);
	free(par);
}

size_t crun__layout_owned(const struct crun__layout *lay, int s, size_t *flat)
{
	const struct crun__segment *g = &lay->seg[s];
	size_t lo = (size_t)lay->rank * g->chunk;

	*flat = g->start + lo;
	if (lo >= g->len)
		return 0;
	return g->len - lo < g->chunk ? g->len - lo : g->chunk;
}

void crun__parallel_owned(struct crun__parallel *par, int s, struct crun__view *out)
{
	const struct crun__segment *g = &par->seg[s];
	size_t lo = (size_t)par->lay.rank * g->chunk;

	out->n = crun__layout_owned(&par->lay, s, &out->flat);
	if (par->lay.strategy == CRUN_STRATEGY_ZERO3)
		out->p = par->p_shard + g->shard_off;
	else
		out->p = par->p_full + g->pad_off + lo;
	if (par->lay.strategy == CRUN_STRATEGY_DDP) {
		out->m = par->m + g->pad_off + lo;
		out->v = par->v + g->pad_off + lo;
	} else {
		out->m = par->m + g->shard_off;
		out->v = par->v + g->shard_off;
	}
}

void crun__parallel_held(struct crun__parallel *par, int s, struct crun__view *params,
			 struct crun__view *optim)
{
	const struct crun__segment *g = &par->seg[s];
	struct crun__view own;

	crun__parallel_owned(par, s, &own);
	if (par->lay.strategy == CRUN_STRATEGY_ZERO3) {
		*params = own;
	} else {
		params->flat = g->start;
		params->n = g->len;
		params->p = par->p_full + g->pad_off;
	}
	params->m = params->v = NULL;
	if (par->lay.strategy == CRUN_STRATEGY_DDP) {
		optim->flat = g->start;
		optim->n = g->len;
		optim->m = par->m + g->pad_off;
		optim->v = par->v + g->pad_off;
	} else {
		*optim = own;
	}
	optim->p = NULL;
}

int crun__parallel_n_segments(const struct crun__parallel *par)
{
	return par->lay.n_seg;
}

void crun__parallel_init_params(struct crun__parallel *par, uint64_t seed)
{
	for (int s = 0; s < par->lay.n_seg; s++) {
		struct crun__view pv, ov;

		crun__parallel_held(par, s, &pv, &ov);
		crun__model_init_params(par->model, seed, pv.flat, pv.n, pv.p);
	}
	memset(par->m, 0, par->lay.optim_len * sizeof(float));
	memset(par->v, 0, par->lay.optim_len * sizeof(float));
}

int crun__parallel_step(struct crun__parallel *par, const struct crun__optim *o,
			const uint8_t *tokens, int64_t global_batch, int64_t t, double lr,
			double *loss, double *grad_norm)
{
	return crun__schedule_step(par->cpu, o, tokens, global_batch, t, lr, loss, grad_norm);
}

int crun__parallel_forward(struct crun__parallel *par, const uint8_t *tokens, int rows,
			   double *loss_sum)
{
	return crun__schedule_forward(par->cpu, tokens, rows, loss_sum);
}

int crun__parallel_param_l2(struct crun__parallel *par, double *out)
{
	double sumsq = 0;
	int rc;

	for (int s = 0; s < par->lay.n_seg; s++) {
		struct crun__view v;

		crun__parallel_owned(par, s, &v);
		sumsq += crun__optim_sumsq(v.p, v.n);
	}
	rc = crun__comm_allreduce_f64(par->comm, &sumsq, 1);
	if (rc)
		return rc;
	*out = sqrt(sumsq);
	return 0;
}

void crun__parallel_memory(const struct crun__parallel *par, struct crun__parallel_memory *out)
{
	size_t f = sizeof(float);

	memset(out, 0, sizeof(*out));
	if (par->cpu) {
		struct crun__device_memory dm;

		par->cpu->ops->memory(par->cpu, &dm);
		out->param_gather_bytes = dm.gather_bytes;
		out->grad_bytes = dm.grad_bytes;
	}
	out->param_bytes = par->lay.p_len * f;
	out->optim_bytes = 2 * par->lay.optim_len * f;
	out->total_param_bytes = par->model->n_params * f;
}
