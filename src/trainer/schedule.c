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
 * Tracing (crun__schedule_trace): each operation is a span on a track of
 * trace.h, timed where it runs. A synchronous device is timed by the
 * host's clock around the call; a device with stamps records a stamp
 * before and after the operation in its queue, and the spans wait in
 * `pending` until the step's finish, when the device converts the stamps
 * to wall-clock time.
 *
 * At the end: what every device shares (open, attach, close). */
#include "trainer/device.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A span whose begin and end are a device's stamps. */
struct pending {
	struct crun__trace_event ev;
	int begin, end;
};

struct crun__sched_trace {
	struct crun__trace *rec;
	int64_t step;
	bool on; /* recording the current step */
	struct pending *p;
	size_t n, cap;
	int stamps; /* the device's stamps in this step */
	int64_t *us;
	size_t us_cap;
};

static bool tracing(const struct crun__device *d)
{
	return d->trace && d->trace->on;
}

/* The start of a span on queue q: a stamp, or the host's clock. */
static int64_t span_begin(struct crun__device *d, enum crun__queue q)
{
	if (!tracing(d))
		return 0;
	if (d->ops->stamp) {
		d->trace->stamps++;
		return d->ops->stamp(d, q);
	}
	return crun__trace_now_us();
}

/* The end of the span that began at begin: recorded at once when the
 * host's clock times it, else kept until the step's stamps are known (a
 * span that finds no room is not recorded). */
static void span_end(struct crun__device *d, enum crun__queue q, int64_t begin,
		     enum crun__trace_track track, const char *name, int unit, uint64_t elements,
		     size_t elem_size)
{
	struct crun__sched_trace *st = d->trace;
	struct crun__trace_event ev = {
		.name = name,
		.track = track,
		.step = tracing(d) ? st->step : 0,
		.unit = unit,
		.elements = elements,
		.bytes = elements * elem_size,
	};

	if (!tracing(d))
		return;
	if (!d->ops->stamp) {
		ev.ts_us = begin;
		ev.dur_us = crun__trace_now_us() - begin;
		crun__trace_add(st->rec, &ev);
		return;
	}
	st->stamps++;
	if (st->n == st->cap) {
		size_t cap = st->cap ? 2 * st->cap : 64;
		struct pending *p = realloc(st->p, cap * sizeof(*p));

		if (!p) {
			(void)d->ops->stamp(d, q);
			return;
		}
		st->p = p;
		st->cap = cap;
	}
	st->p[st->n].ev = ev;
	st->p[st->n].begin = (int)begin;
	st->p[st->n].end = d->ops->stamp(d, q);
	st->n++;
}

/* A span timed by the host's clock on any device (work of the host). */
static void host_span_end(struct crun__device *d, int64_t begin, enum crun__trace_track track,
			  const char *name, uint64_t elements, size_t elem_size)
{
	struct crun__trace_event ev = {
		.name = name,
		.track = track,
		.unit = -1,
		.elements = elements,
		.bytes = elements * elem_size,
	};

	if (!tracing(d))
		return;
	ev.step = d->trace->step;
	ev.ts_us = begin;
	ev.dur_us = crun__trace_now_us() - begin;
	crun__trace_add(d->trace->rec, &ev);
}

/* After the step's finish: the pending spans, in wall-clock time. */
static void resolve_stamps(struct crun__device *d)
{
	struct crun__sched_trace *st = d->trace;
	int n;

	if (!tracing(d) || !d->ops->stamp)
		return;
	n = st->stamps;
	st->stamps = 0;
	if (n <= 0)
		return;
	if ((size_t)n > st->us_cap) {
		int64_t *us = realloc(st->us, (size_t)n * sizeof(*us));

		if (!us) {
			d->ops->stamp_times(d, NULL, 0);
			st->n = 0;
			return;
		}
		st->us = us;
		st->us_cap = (size_t)n;
	}
	d->ops->stamp_times(d, st->us, n);
	for (size_t i = 0; i < st->n; i++) {
		struct pending *p = &st->p[i];

		if (p->begin < 0 || p->end < 0 || p->begin >= n || p->end >= n)
			continue;
		p->ev.ts_us = st->us[p->begin];
		p->ev.dur_us = st->us[p->end] - st->us[p->begin];
		crun__trace_add(st->rec, &p->ev);
	}
	st->n = 0;
}

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
	int64_t t;
	int rc;

	d->ops->wait(d, CRUN__QUEUE_COMM, CRUN__EV_FREED, slot);
	d->gathered[slot] = -1;
	t = span_begin(d, CRUN__QUEUE_COMM);
	rc = d->ops->gather(d, ref(CRUN__BUF_COMPUTE, 0, g->shard_off),
			    ref(CRUN__BUF_GATHER, slot, 0), g->chunk);
	if (rc)
		return rc;
	span_end(d, CRUN__QUEUE_COMM, t, CRUN__TRACK_COMM, "all-gather", u,
		 (uint64_t)d->lay->world * g->chunk, d->compute_size);
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
		int64_t t;

		if (rc)
			return rc;
		t = span_begin(d, CRUN__QUEUE_COMPUTE);
		d->ops->forward(d, u, p, row, rows);
		span_end(d, CRUN__QUEUE_COMPUTE, t, CRUN__TRACK_COMPUTE, "forward", u, 0, 0);
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
	bool ddp = lay->strategy == CRUN_STRATEGY_DDP;
	int64_t t;
	int rc;

	comm_after_compute(d);
	t = span_begin(d, CRUN__QUEUE_COMM);
	if (ddp)
		rc = d->ops->allreduce(d, buf, g->chunk);
	else
		rc = d->ops->reduce_scatter(d, buf, ref(CRUN__BUF_SHARD, 0, g->shard_off),
					    g->chunk);
	if (rc)
		return rc;
	span_end(d, CRUN__QUEUE_COMM, t, CRUN__TRACK_COMM, ddp ? "all-reduce" : "reduce-scatter",
		 -1, (uint64_t)lay->world * g->chunk, d->reduce_size);
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
		int64_t t;
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
		t = span_begin(d, CRUN__QUEUE_COMPUTE);
		d->ops->backward(d, u, p, grads, row, rows, scale);
		span_end(d, CRUN__QUEUE_COMPUTE, t, CRUN__TRACK_COMPUTE, "backward", u, 0, 0);
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
static int update(struct crun__device *d, const struct crun__optim *o, int64_t step, double lr)
{
	const struct crun__layout *lay = d->lay;
	bool ddp = lay->strategy == CRUN_STRATEGY_DDP;
	int64_t t = span_begin(d, CRUN__QUEUE_COMPUTE);
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
	span_end(d, CRUN__QUEUE_COMPUTE, t, CRUN__TRACK_OPTIMIZER, "grad norm", -1, 0, 0);
	if (!ddp) {
		comm_after_compute(d);
		t = span_begin(d, CRUN__QUEUE_COMM);
		rc = d->ops->sumsq_allreduce(d);
		if (rc)
			return rc;
		span_end(d, CRUN__QUEUE_COMM, t, CRUN__TRACK_COMM, "all-reduce grad norm", -1, 1,
			 sizeof(double));
		compute_after_comm(d);
	}
	t = span_begin(d, CRUN__QUEUE_COMPUTE);
	d->ops->clip(d, o);

	for (int s = 0; s < lay->n_seg; s++) {
		const struct crun__segment *g = &lay->seg[s];
		size_t lo = (size_t)lay->rank * g->chunk, flat, n;

		if (ddp) {
			d->ops->adamw(d, o, g->start, g->len, ref(CRUN__BUF_MASTER, 0, g->pad_off),
				      ref(CRUN__BUF_GRAD, 0, g->pad_off), g->pad_off, step, lr);
			continue;
		}
		n = crun__layout_owned(lay, s, &flat);
		d->ops->adamw(d, o, flat, n,
			      ref(CRUN__BUF_MASTER, 0, zero3(d) ? g->shard_off : g->pad_off + lo),
			      ref(CRUN__BUF_SHARD, 0, g->shard_off), g->shard_off, step, lr);
	}
	span_end(d, CRUN__QUEUE_COMPUTE, t, CRUN__TRACK_OPTIMIZER, "adamw", -1, 0, 0);
	if (!ddp && !zero3(d)) {
		comm_after_compute(d);
		for (int s = 0; s < lay->n_seg; s++) {
			const struct crun__segment *g = &lay->seg[s];

			t = span_begin(d, CRUN__QUEUE_COMM);
			rc = d->ops->gather(
				d,
				ref(CRUN__BUF_MASTER, 0, g->pad_off + (size_t)lay->rank * g->chunk),
				ref(CRUN__BUF_MASTER, 0, g->pad_off), g->chunk);
			if (rc)
				return rc;
			span_end(d, CRUN__QUEUE_COMM, t, CRUN__TRACK_COMM, "all-gather", -1,
				 (uint64_t)lay->world * g->chunk, sizeof(float));
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
	int64_t t_step = tracing(d) ? crun__trace_now_us() : 0, t_loss;
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
	resolve_stamps(d);
	*grad_norm = sqrt(sumsq);
	t_loss = tracing(d) ? crun__trace_now_us() : 0;
	rc = crun__comm_allreduce_f64(d->comm, &local_loss, 1);
	if (rc)
		return rc;
	host_span_end(d, t_loss, CRUN__TRACK_COMM, "all-reduce loss", 1, sizeof(double));
	host_span_end(d, t_step, CRUN__TRACK_STEP, "step", 0, 0);
	if (d->trace)
		d->trace->on = false; /* armed for one step */
	*loss = local_loss / (double)global_batch;
	return 0;
}

int crun__schedule_trace(struct crun__device *d, struct crun__trace *t, int64_t step)
{
	if (!t) {
		if (d->trace)
			d->trace->on = false;
		return 0;
	}
	if (!d->trace) {
		d->trace = calloc(1, sizeof(*d->trace));
		if (!d->trace)
			return -ENOMEM;
	}
	d->trace->rec = t;
	d->trace->step = step;
	d->trace->on = true;
	d->trace->n = 0;
	d->trace->stamps = 0;
	return 0;
}

size_t crun__schedule_trace_events(const struct crun__device *d)
{
	/* forward, backward and (zero3) two gathers per unit and micro-step;
	 * per segment a reduction and an all-gather; the norm, its all-reduce,
	 * adamw, the loss's all-reduce and the step */
	return (size_t)d->lay->accum * (size_t)d->model->n_units * 4 + (size_t)d->lay->n_seg * 2 +
	       8;
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
	d->compute_size = sizeof(float);
	d->reduce_size = sizeof(float);
	return d->ops->attach(d, err, errlen);
}

void crun__device_close(struct crun__device *d)
{
	if (!d)
		return;
	if (d->trace) {
		free(d->trace->p);
		free(d->trace->us);
		free(d->trace);
	}
	d->ops->close(d);
}
