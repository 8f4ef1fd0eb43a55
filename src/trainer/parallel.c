/* The strategies: where parameters, gradients and optimizer state live,
 * and which collective moves them when. See parallel.h for the layout. */
#include "trainer/parallel.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct segment {
	size_t start, len; /* flat range */
	size_t chunk;	   /* ceil(len / W): elements per rank */
	size_t pad_off;	   /* offset in padded full-size buffers (W * chunk each) */
	size_t shard_off;  /* offset in per-rank shard buffers (chunk each) */
	int unit_first, unit_last;
};

struct crun_parallel {
	const struct crun_model *model;
	struct crun_comm *comm;
	enum crun_strategy strategy;
	int world, rank;
	int accum, micro;
	int n_seg;
	struct segment *seg;
	int *unit_seg;
	size_t pad_len;	  /* sum of W * chunk */
	size_t shard_len; /* sum of chunk */
	size_t max_chunk;

	float *p_full;	 /* ddp, zero1, zero2: pad_len */
	float *p_shard;	 /* zero3: shard_len */
	float *p_gather; /* zero3: W * max_chunk */
	float *g_full;	 /* ddp, zero1; zero2/3 with grad_accum > 1: pad_len */
	float *g_seg;	 /* zero2/3 with grad_accum 1: W * max_chunk, the bucket in flight */
	float *g_shard;	 /* zero1-3: shard_len */
	float *m, *v;	 /* ddp: pad_len; zero1-3: shard_len */
	size_t optim_len;
	struct crun_model_acts *acts;
};

int crun_strategy_parse(const char *name)
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

const char *crun_strategy_name(enum crun_strategy s)
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
static int plan_segments(struct crun_parallel *par, size_t bucket_bytes)
{
	const struct crun_model *m = par->model;
	size_t bucket = bucket_bytes / sizeof(float);
	int n = 0;

	par->seg = calloc((size_t)m->n_units, sizeof(*par->seg));
	par->unit_seg = calloc((size_t)m->n_units, sizeof(*par->unit_seg));
	if (!par->seg || !par->unit_seg)
		return -ENOMEM;
	for (int u = m->n_units - 1; u >= 0;) {
		int first = u;
		size_t len = crun_model_unit_len(m, u);

		if (par->strategy != CRUN_STRATEGY_ZERO3)
			while (first > 0 && len + crun_model_unit_len(m, first - 1) <= bucket)
				len += crun_model_unit_len(m, --first);
		par->seg[n].unit_first = first;
		par->seg[n].unit_last = u;
		n++;
		u = first - 1;
	}
	/* listed last-first; store them in flat order */
	for (int i = 0; i < n / 2; i++) {
		struct segment t = par->seg[i];

		par->seg[i] = par->seg[n - 1 - i];
		par->seg[n - 1 - i] = t;
	}
	par->n_seg = n;
	for (int s = 0; s < n; s++) {
		struct segment *g = &par->seg[s];

		g->start = m->unit_off[g->unit_first];
		g->len = m->unit_off[g->unit_last + 1] - g->start;
		g->chunk = (g->len + (size_t)par->world - 1) / (size_t)par->world;
		g->pad_off = par->pad_len;
		g->shard_off = par->shard_len;
		par->pad_len += g->chunk * (size_t)par->world;
		par->shard_len += g->chunk;
		if (g->chunk > par->max_chunk)
			par->max_chunk = g->chunk;
		for (int u = g->unit_first; u <= g->unit_last; u++)
			par->unit_seg[u] = s;
	}
	return 0;
}

static float *zalloc(size_t n)
{
	return calloc(n ? n : 1, sizeof(float));
}

static struct crun_parallel *create(const struct crun_model *model, struct crun_comm *comm,
				    const struct crun_parallel_opts *opts, bool storage)
{
	struct crun_parallel *par = calloc(1, sizeof(*par));
	bool sharded_grads;
	size_t W;

	if (!par)
		return NULL;
	par->model = model;
	par->comm = comm;
	par->strategy = opts->strategy;
	par->world = crun_comm_size(comm);
	par->rank = crun_comm_rank(comm);
	par->accum = opts->grad_accum;
	par->micro = opts->micro_batch;
	W = (size_t)par->world;
	if (plan_segments(par, opts->bucket_bytes))
		goto out_destroy;

	sharded_grads =
		par->strategy == CRUN_STRATEGY_ZERO2 || par->strategy == CRUN_STRATEGY_ZERO3;
	if (par->strategy == CRUN_STRATEGY_ZERO3) {
		par->p_shard = zalloc(par->shard_len);
		par->p_gather = storage ? NULL : zalloc(W * par->max_chunk);
		if (!par->p_shard || (!storage && !par->p_gather))
			goto out_destroy;
	} else {
		par->p_full = zalloc(par->pad_len);
		if (!par->p_full)
			goto out_destroy;
	}
	if (storage) {
		/* no gradients: the compute device keeps its own */
	} else if (!sharded_grads || par->accum > 1) {
		par->g_full = zalloc(par->pad_len);
		if (!par->g_full)
			goto out_destroy;
	} else {
		par->g_seg = zalloc(W * par->max_chunk);
		if (!par->g_seg)
			goto out_destroy;
	}
	if (par->strategy != CRUN_STRATEGY_DDP && !storage) {
		par->g_shard = zalloc(par->shard_len);
		if (!par->g_shard)
			goto out_destroy;
	}
	par->optim_len = par->strategy == CRUN_STRATEGY_DDP ? par->pad_len : par->shard_len;
	par->m = zalloc(par->optim_len);
	par->v = zalloc(par->optim_len);
	par->acts = storage ? NULL : crun_model_acts_create(model, par->micro);
	if (!par->m || !par->v || (!storage && !par->acts))
		goto out_destroy;
	return par;

out_destroy:
	crun_parallel_destroy(par);
	return NULL;
}

struct crun_parallel *crun_parallel_create(const struct crun_model *model, struct crun_comm *comm,
					   const struct crun_parallel_opts *opts)
{
	return create(model, comm, opts, false);
}

struct crun_parallel *crun_parallel_create_storage(const struct crun_model *model,
						   struct crun_comm *comm,
						   const struct crun_parallel_opts *opts)
{
	return create(model, comm, opts, true);
}

void crun_parallel_segment(const struct crun_parallel *par, int s, struct crun_segment *out)
{
	const struct segment *g = &par->seg[s];

	out->start = g->start;
	out->len = g->len;
	out->chunk = g->chunk;
	out->pad_off = g->pad_off;
	out->shard_off = g->shard_off;
	out->unit_first = g->unit_first;
	out->unit_last = g->unit_last;
}

int crun_parallel_unit_segment(const struct crun_parallel *par, int u)
{
	return par->unit_seg[u];
}

void crun_parallel_arrays(struct crun_parallel *par, struct crun_parallel_arrays *out)
{
	out->p = par->p_full ? par->p_full : par->p_shard;
	out->p_len = par->p_full ? par->pad_len : par->shard_len;
	out->m = par->m;
	out->v = par->v;
	out->optim_len = par->optim_len;
	out->pad_len = par->pad_len;
	out->shard_len = par->shard_len;
	out->max_chunk = par->max_chunk;
}

void crun_parallel_destroy(struct crun_parallel *par)
{
	if (!par)
		return;
	crun_model_acts_destroy(par->acts);
	free(par->seg);
	free(par->unit_seg);
	free(par->p_full);
	free(par->p_shard);
	free(par->p_gather);
	free(par->g_full);
	free(par->g_seg);
	free(par->g_shard);
	free(par->m);
	free(par->v);
	free(par);
}

/* Flat range and length of the chunk rank r owns of segment s. */
static size_t owned_range(const struct crun_parallel *par, const struct segment *g, size_t *flat)
{
	size_t lo = (size_t)par->rank * g->chunk;

	*flat = g->start + lo;
	if (lo >= g->len)
		return 0;
	return g->len - lo < g->chunk ? g->len - lo : g->chunk;
}

void crun_parallel_owned(struct crun_parallel *par, int s, struct crun_view *out)
{
	const struct segment *g = &par->seg[s];
	size_t lo = (size_t)par->rank * g->chunk;

	out->n = owned_range(par, g, &out->flat);
	if (par->strategy == CRUN_STRATEGY_ZERO3)
		out->p = par->p_shard + g->shard_off;
	else
		out->p = par->p_full + g->pad_off + lo;
	if (par->strategy == CRUN_STRATEGY_DDP) {
		out->m = par->m + g->pad_off + lo;
		out->v = par->v + g->pad_off + lo;
	} else {
		out->m = par->m + g->shard_off;
		out->v = par->v + g->shard_off;
	}
}

void crun_parallel_held(struct crun_parallel *par, int s, struct crun_view *params,
			struct crun_view *optim)
{
	const struct segment *g = &par->seg[s];
	struct crun_view own;

	crun_parallel_owned(par, s, &own);
	if (par->strategy == CRUN_STRATEGY_ZERO3) {
		*params = own;
	} else {
		params->flat = g->start;
		params->n = g->len;
		params->p = par->p_full + g->pad_off;
	}
	params->m = params->v = NULL;
	if (par->strategy == CRUN_STRATEGY_DDP) {
		optim->flat = g->start;
		optim->n = g->len;
		optim->m = par->m + g->pad_off;
		optim->v = par->v + g->pad_off;
	} else {
		*optim = own;
	}
	optim->p = NULL;
}

int crun_parallel_n_segments(const struct crun_parallel *par)
{
	return par->n_seg;
}

void crun_parallel_init_params(struct crun_parallel *par, uint64_t seed)
{
	for (int s = 0; s < par->n_seg; s++) {
		struct crun_view pv, ov;

		crun_parallel_held(par, s, &pv, &ov);
		crun_model_init_params(par->model, seed, pv.flat, pv.n, pv.p);
	}
	memset(par->m, 0, par->optim_len * sizeof(float));
	memset(par->v, 0, par->optim_len * sizeof(float));
}

/* Parameters of unit u, ready to compute with: zero3 gathers the unit's
 * segment into p_gather first. */
static int unit_params(struct crun_parallel *par, int u, const float **out)
{
	const struct segment *g = &par->seg[par->unit_seg[u]];
	size_t in_seg = par->model->unit_off[u] - g->start;
	int rc;

	if (par->strategy != CRUN_STRATEGY_ZERO3) {
		*out = par->p_full + g->pad_off + in_seg;
		return 0;
	}
	rc = crun_comm_allgather_f32(par->comm, par->p_shard + g->shard_off, par->p_gather,
				     g->chunk);
	*out = par->p_gather + in_seg;
	return rc;
}

static float *unit_grads(struct crun_parallel *par, int u)
{
	const struct segment *g = &par->seg[par->unit_seg[u]];
	size_t in_seg = par->model->unit_off[u] - g->start;

	return par->g_full ? par->g_full + g->pad_off + in_seg : par->g_seg + in_seg;
}

static int forward_all(struct crun_parallel *par, const uint8_t *tokens, int rows)
{
	for (int u = 0; u < par->model->n_units; u++) {
		const float *p;
		int rc = unit_params(par, u, &p);

		if (rc)
			return rc;
		crun_model_forward_unit(par->model, u, p, par->acts, tokens, rows);
	}
	return 0;
}

/* Segment s's gradients are complete on every rank: sum them. */
static int reduce_segment(struct crun_parallel *par, int s)
{
	const struct segment *g = &par->seg[s];
	size_t W = (size_t)par->world;
	float *buf = par->g_full ? par->g_full + g->pad_off : par->g_seg;

	if (par->strategy == CRUN_STRATEGY_DDP)
		return crun_comm_allreduce_f32(par->comm, buf, W * g->chunk);
	return crun_comm_reduce_scatter_f32(par->comm, buf, par->g_shard + g->shard_off, g->chunk);
}

static int backward_all(struct crun_parallel *par, const uint8_t *tokens, int rows, float scale,
			bool sync)
{
	for (int u = par->model->n_units - 1; u >= 0; u--) {
		int s = par->unit_seg[u];
		const struct segment *g = &par->seg[s];
		const float *p;
		int rc;

		if (!par->g_full && u == g->unit_last)
			memset(par->g_seg, 0, (size_t)par->world * g->chunk * sizeof(float));
		rc = unit_params(par, u, &p);
		if (rc)
			return rc;
		crun_model_backward_unit(par->model, u, p, unit_grads(par, u), par->acts, tokens,
					 rows, scale);
		if (sync && u == g->unit_first) {
			rc = reduce_segment(par, s);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Where this rank's summed gradients for its updates are. */
static const float *update_grads(const struct crun_parallel *par, const struct segment *g)
{
	if (par->strategy == CRUN_STRATEGY_DDP)
		return par->g_full + g->pad_off;
	return par->g_shard + g->shard_off;
}

int crun_parallel_step(struct crun_parallel *par, const struct crun_optim *o, const uint8_t *tokens,
		       int64_t global_batch, int64_t t, double lr, double *loss, double *grad_norm)
{
	size_t row = (size_t)par->model->cfg.context + 1;
	float scale = (float)(1.0 / (double)global_batch);
	double local_loss = 0, sumsq = 0;
	float gscale;
	int rc;

	if (par->g_full)
		memset(par->g_full, 0, par->pad_len * sizeof(float));
	for (int a = 0; a < par->accum; a++) {
		const uint8_t *tk = tokens + (size_t)a * (size_t)par->micro * row;

		rc = forward_all(par, tk, par->micro);
		if (rc)
			return rc;
		local_loss += crun_model_loss_sum(par->acts);
		rc = backward_all(par, tk, par->micro, scale, a == par->accum - 1);
		if (rc)
			return rc;
	}

	/* global gradient norm: ddp holds the whole sum, others their chunks */
	for (int s = 0; s < par->n_seg; s++) {
		const struct segment *g = &par->seg[s];
		size_t flat, n;

		if (par->strategy == CRUN_STRATEGY_DDP)
			n = g->len;
		else
			n = owned_range(par, g, &flat);
		sumsq += crun_optim_sumsq(update_grads(par, g), n);
	}
	if (par->strategy != CRUN_STRATEGY_DDP) {
		rc = crun_comm_allreduce_f64(par->comm, &sumsq, 1);
		if (rc)
			return rc;
	}
	*grad_norm = sqrt(sumsq);
	gscale = crun_optim_clip_scale(o, *grad_norm);

	for (int s = 0; s < par->n_seg; s++) {
		const struct segment *g = &par->seg[s];
		struct crun_view pv, ov;

		if (par->strategy == CRUN_STRATEGY_DDP) {
			crun_parallel_held(par, s, &pv, &ov);
			crun_optim_adamw(o, par->model, g->start, g->len, pv.p,
					 update_grads(par, g), ov.m, ov.v, t, lr, gscale);
			continue;
		}
		crun_parallel_owned(par, s, &ov);
		crun_optim_adamw(o, par->model, ov.flat, ov.n, ov.p, update_grads(par, g), ov.m,
				 ov.v, t, lr, gscale);
		if (par->strategy != CRUN_STRATEGY_ZERO3) {
			rc = crun_comm_allgather_f32(par->comm, ov.p, par->p_full + g->pad_off,
						     g->chunk);
			if (rc)
				return rc;
		}
	}

	rc = crun_comm_allreduce_f64(par->comm, &local_loss, 1);
	if (rc)
		return rc;
	*loss = local_loss / (double)global_batch;
	return 0;
}

int crun_parallel_forward(struct crun_parallel *par, const uint8_t *tokens, int rows,
			  double *loss_sum)
{
	int rc = forward_all(par, tokens, rows);

	if (rc)
		return rc;
	if (rows > 0)
		*loss_sum += crun_model_loss_sum(par->acts);
	return 0;
}

int crun_parallel_param_l2(struct crun_parallel *par, double *out)
{
	double sumsq = 0;
	int rc;

	for (int s = 0; s < par->n_seg; s++) {
		struct crun_view v;

		crun_parallel_owned(par, s, &v);
		sumsq += crun_optim_sumsq(v.p, v.n);
	}
	rc = crun_comm_allreduce_f64(par->comm, &sumsq, 1);
	if (rc)
		return rc;
	*out = sqrt(sumsq);
	return 0;
}

void crun_parallel_memory(const struct crun_parallel *par, struct crun_parallel_memory *out)
{
	size_t f = sizeof(float);
	size_t W = (size_t)par->world;

	memset(out, 0, sizeof(*out));
	out->param_bytes = (par->p_full ? par->pad_len : par->shard_len) * f;
	out->param_gather_bytes = par->p_gather ? W * par->max_chunk * f : 0;
	out->grad_bytes =
		((par->g_full ? par->pad_len : 0) + (par->g_seg ? W * par->max_chunk : 0) +
		 (par->g_shard ? par->shard_len : 0)) *
		f;
	out->optim_bytes = 2 * par->optim_len * f;
	out->total_param_bytes = par->model->n_params * f;
}
