/* The data-parallel schedule: one step of ddp, zero1, zero2 or zero3 as
 * an ordered list of device operations (device.h) over the layout of
 * parallel.h. What runs where is decided here once; the devices only
 * carry it out.
 *
 * Overlap, where the device has two queues: the reduction of a gradient
 * bucket is queued on comm as soon as the backward pass has finished it,
 * while compute goes on with the next bucket (two bucket buffers); zero3
 * gathers the next unit's parameters into a second buffer while the
 * current unit computes (two gather buffers). A device with one buffer of
 * each runs the same list with nothing to overlap.
 *
 * At the end: what every device shares (open, attach, close). */
#include "trainer/device.h"

#include <math.h>
#include <string.h>

/* The comm queue waits for what compute has queued so far. */
static void comm_after_compute(struct crun__device *d)
{
	d->ops->signal(d, CRUN__QUEUE_COMPUTE, CRUN__EV_COMPUTED, 0);
	d->ops->wait(d, CRUN__QUEUE_COMM, CRUN__EV_COMPUTED, 0);
}

/* The compute queue waits for what comm has queued so far. */
static void compute_after_comm(struct crun__device *d)
{
	d->ops->signal(d, CRUN__QUEUE_COMM, CRUN__EV_COMMUNICATED, 0);
	d->ops->wait(d, CRUN__QUEUE_COMPUTE, CRUN__EV_COMMUNICATED, 0);
}

static struct crun__ref ref(enum crun__buf buf, int slot, size_t off)
{
	struct crun__ref r = {buf, slot, off};

	return r;
}

static const struct crun__segment *unit_segment(const struct crun__device *d, int u)
{
	return &d->lay->seg[d->lay->unit_seg[u]];
}

static bool zero3(const struct crun__device *d)
{
	return d->lay->strategy == CRUN_STRATEGY_ZERO3;
}

/* The parameters in the gather buffers are stale (they changed). */
static void forget_gathered(struct crun__device *d)
{
	d->gathered[0] = d->gathered[1] = -1;
}

/* zero3: gathers unit u's segment (every rank's chunk of the compute
 * copy) into buffer slot, once compute is done with what it held. */
static int gather_unit(struct crun__device *d, int u, int slot)
{
	const struct crun__segment *g = unit_segment(d, u);
	int rc;

	d->ops->wait(d, CRUN__QUEUE_COMM, CRUN__EV_FREED, slot);
	d->gathered[slot] = -1;
	rc = d->ops->gather(d, ref(CRUN__BUF_COMPUTE, 0, g->shard_off),
			    ref(CRUN__BUF_GATHER, slot, 0), g->chunk);
	if (rc)
		return rc;
	d->ops->signal(d, CRUN__QUEUE_COMM, CRUN__EV_GATHERED, slot);
	d->gathered[slot] = u;
	return 0;
}

/* zero3: unit u's parameters gathered (or still there from their last
 * use) and compute waiting for them; with two buffers the gather of unit
 * next (-1: none) starts into the other one. */
static int acquire_unit(struct crun__device *d, int u, int next, int *out)
{
	int slot = d->gathered[0] == u ? 0 : d->gathered[1] == u ? 1 : -1;
	int rc;

	if (slot < 0) {
		if (d->ops->gather_slots < 2)
			slot = 0;
		else /* keep next if it is already there; else replace the older one */
			slot = d->gathered[0] == next	? 1
			       : d->gathered[1] == next ? 0
							: 1 - d->gather_slot;
		rc = gather_unit(d, u, slot);
		if (rc)
			return rc;
	}
	d->ops->wait(d, CRUN__QUEUE_COMPUTE, CRUN__EV_GATHERED, slot);
	d->gather_slot = slot;
	if (d->ops->gather_slots > 1 && next >= 0 && next != u && d->gathered[0] != next &&
	    d->gathered[1] != next) {
		rc = gather_unit(d, next, 1 - slot);
		if (rc)
			return rc;
	}
	*out = slot;
	return 0;
}

/* Unit u's parameters in the compute type: zero3 gathers them (and starts
 * on unit next), the others hold them. */
static int unit_params(struct crun__device *d, int u, int next, struct crun__ref *out)
{
	const struct crun__segment *g = unit_segment(d, u);
	size_t in_seg = d->model->unit_off[u] - g->start;
	int slot, rc;

	if (!zero3(d)) {
		*out = ref(CRUN__BUF_COMPUTE, 0, g->pad_off + in_seg);
		return 0;
	}
	rc = acquire_unit(d, u, next, &slot);
	if (rc)
		return rc;
	*out = ref(CRUN__BUF_GATHER, slot, in_seg);
	return 0;
}

/* Compute is done with the gather buffer in use: it may be refilled. */
static void release_unit(struct crun__device *d)
{
	if (zero3(d))
		d->ops->signal(d, CRUN__QUEUE_COMPUTE, CRUN__EV_FREED, d->gather_slot);
}

static int forward_all(struct crun__device *d, size_t row, int rows)
{
	int U = d->model->n_units;

	if (zero3(d))
		comm_after_compute(d); /* the shards' compute copy is current */
	for (int u = 0; u < U; u++) {
		struct crun__ref p;
		int rc = unit_params(d, u, u + 1 < U ? u + 1 : -1, &p);

		if (rc)
			return rc;
		d->ops->forward(d, u, p, row, rows);
		release_unit(d);
	}
	return 0;
}

/* Segment s's gradients are complete on every rank: sum them over the
 * ranks, whole (ddp) or into each rank's chunk. */
static int reduce_segment(struct crun__device *d, int s)
{
	const struct crun__layout *lay = d->lay;
	const struct crun__segment *g = &lay->seg[s];
	struct crun__ref buf = lay->grads_full ? ref(CRUN__BUF_GRAD, 0, g->pad_off)
					       : ref(CRUN__BUF_BUCKET, d->bucket_slot, 0);
	int rc;

	comm_after_compute(d);
	if (lay->strategy == CRUN_STRATEGY_DDP)
		rc = d->ops->allreduce(d, buf, g->chunk);
	else
		rc = d->ops->reduce_scatter(d, buf, ref(CRUN__BUF_SHARD, 0, g->shard_off),
					    g->chunk);
	if (rc)
		return rc;
	if (!lay->grads_full)
		d->ops->signal(d, CRUN__QUEUE_COMM, CRUN__EV_REDUCED, d->bucket_slot);
	return 0;
}

static int backward_all(struct crun__device *d, size_t row, int rows, float scale, bool sync)
{
	const struct crun__layout *lay = d->lay;

	for (int u = d->model->n_units - 1; u >= 0; u--) {
		int s = lay->unit_seg[u];
		const struct crun__segment *g = &lay->seg[s];
		size_t in_seg = d->model->unit_off[u] - g->start;
		struct crun__ref p, grads;
		int rc;

		if (!lay->grads_full && u == g->unit_last) {
			/* a bucket buffer whose last reduction has finished */
			d->bucket_slot = (d->bucket_slot + 1) % d->ops->bucket_slots;
			d->ops->wait(d, CRUN__QUEUE_COMPUTE, CRUN__EV_REDUCED, d->bucket_slot);
			d->ops->zero(d, ref(CRUN__BUF_BUCKET, d->bucket_slot, 0),
				     (size_t)lay->world * g->chunk);
		}
		grads = lay->grads_full ? ref(CRUN__BUF_GRAD, 0, g->pad_off + in_seg)
					: ref(CRUN__BUF_BUCKET, d->bucket_slot, in_seg);
		rc = unit_params(d, u, u - 1, &p);
		if (rc)
			return rc;
		d->ops->backward(d, u, p, grads, row, rows, scale);
		release_unit(d);
		if (sync && u == g->unit_first) {
			rc = reduce_segment(d, s);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* The global gradient norm (ddp holds the whole sum, the others their
 * chunks), the clipping factor, AdamW on what this rank updates, and the
 * all-gather of the updated chunks (zero1, zero2). */
static int update(struct crun__device *d, const struct crun__optim *o, int64_t t, double lr)
{
	const struct crun__layout *lay = d->lay;
	bool ddp = lay->strategy == CRUN_STRATEGY_DDP;
	int rc;

	for (int s = 0; s < lay->n_seg; s++) {
		const struct crun__segment *g = &lay->seg[s];
		size_t flat;

		if (ddp)
			d->ops->sumsq(d, s, ref(CRUN__BUF_GRAD, 0, g->pad_off), g->len);
		else
			d->ops->sumsq(d, s, ref(CRUN__BUF_SHARD, 0, g->shard_off),
				      crun__layout_owned(lay, s, &flat));
	}
	d->ops->sumsq_total(d, lay->n_seg);
	if (!ddp) {
		comm_after_compute(d);
		rc = d->ops->sumsq_allreduce(d);
		if (rc)
			return rc;
		compute_after_comm(d);
	}
	d->ops->clip(d, o);

	for (int s = 0; s < lay->n_seg; s++) {
		const struct crun__segment *g = &lay->seg[s];
		size_t lo = (size_t)lay->rank * g->chunk, flat, n;

		if (ddp) {
			d->ops->adamw(d, o, g->start, g->len, ref(CRUN__BUF_MASTER, 0, g->pad_off),
				      ref(CRUN__BUF_GRAD, 0, g->pad_off), g->pad_off, t, lr);
			continue;
		}
		n = crun__layout_owned(lay, s, &flat);
		d->ops->adamw(d, o, flat, n,
			      ref(CRUN__BUF_MASTER, 0, zero3(d) ? g->shard_off : g->pad_off + lo),
			      ref(CRUN__BUF_SHARD, 0, g->shard_off), g->shard_off, t, lr);
	}
	if (!ddp && !zero3(d)) {
		comm_after_compute(d);
		for (int s = 0; s < lay->n_seg; s++) {
			const struct crun__segment *g = &lay->seg[s];

			rc = d->ops->gather(
				d,
				ref(CRUN__BUF_MASTER, 0, g->pad_off + (size_t)lay->rank * g->chunk),
				ref(CRUN__BUF_MASTER, 0, g->pad_off), g->chunk);
			if (rc)
				return rc;
		}
		compute_after_comm(d);
	}
	d->ops->params_changed(d);
	forget_gathered(d);
	return 0;
}

int crun__schedule_step(struct crun__device *d, const struct crun__optim *o, const uint8_t *tokens,
			int64_t global_batch, int64_t t, double lr, double *loss, double *grad_norm)
{
	const struct crun__layout *lay = d->lay;
	size_t row = (size_t)d->model->cfg.context + 1;
	float scale = (float)(1.0 / (double)global_batch);
	double local_loss, sumsq;
	int rc;

	d->ops->mark(d, CRUN__MARK_START);
	d->ops->begin(d, tokens, (size_t)lay->accum * (size_t)lay->micro * row);
	if (lay->grads_full)
		d->ops->zero(d, ref(CRUN__BUF_GRAD, 0, 0), lay->pad_len);
	for (int a = 0; a < lay->accum; a++) {
		size_t first = (size_t)a * (size_t)lay->micro;

		rc = forward_all(d, first, lay->micro);
		if (rc)
			return rc;
		rc = backward_all(d, first, lay->micro, scale, a == lay->accum - 1);
		if (rc)
			return rc;
	}
	d->ops->mark(d, CRUN__MARK_BACKWARD);
	compute_after_comm(d); /* every bucket is reduced */
	d->ops->mark(d, CRUN__MARK_REDUCED);
	rc = update(d, o, t, lr);
	if (rc)
		return rc;
	rc = d->ops->finish(d, &local_loss, &sumsq);
	if (rc)
		return rc;
	*grad_norm = sqrt(sumsq);
	rc = crun__comm_allreduce_f64(d->comm, &local_loss, 1);
	if (rc)
		return rc;
	*loss = local_loss / (double)global_batch;
	return 0;
}

int crun__schedule_forward(struct crun__device *d, const uint8_t *tokens, int rows,
			   double *loss_sum)
{
	size_t row = (size_t)d->model->cfg.context + 1;
	double loss;
	int rc;

	d->ops->begin(d, tokens, rows > 0 ? (size_t)rows * row : 0);
	rc = forward_all(d, 0, rows);
	if (rc)
		return rc;
	rc = d->ops->finish(d, &loss, NULL);
	if (rc)
		return rc;
	if (rows > 0)
		*loss_sum += loss;
	return 0;
}

void crun__schedule_upload(struct crun__device *d)
{
	d->ops->upload(d);
	forget_gathered(d);
}

void crun__schedule_download(struct crun__device *d, bool optim)
{
	d->ops->download(d, optim);
}

struct crun__device *crun__device_open(const struct crun__device_ops *ops,
				       const struct crun__device_opts *o, char *err, size_t errlen)
{
	struct crun__device_opts none;
	struct crun__device *d;

	if (!o) {
		memset(&none, 0, sizeof(none));
		o = &none;
	}
	d = ops->open(o, err, errlen);
	if (d)
		d->ops = ops;
	return d;
}

int crun__device_attach(struct crun__device *d, const struct crun__model *model,
			struct crun__parallel *host, struct crun__comm *comm, char *err,
			size_t errlen)
{
	d->model = model;
	d->host = host;
	d->lay = crun__parallel_layout(host);
	d->comm = comm;
	d->gathered[0] = d->gathered[1] = -1;
	d->gather_slot = 0;
	d->bucket_slot = 0;
	return d->ops->attach(d, err, errlen);
}

void crun__device_close(struct crun__device *d)
{
	if (d)
		d->ops->close(d);
}
