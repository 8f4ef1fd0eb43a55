/* Data-parallel strategies of crun-train over the comm interface.
 *
 * The flat parameter array is cut into segments of whole units: for
 * zero3 each unit is a segment (FSDP's one flat parameter per wrapped
 * block); otherwise units are merged, from the last one backwards as the
 * backward pass produces their gradients, into buckets of about
 * parallel.bucket_mb (a unit larger than that is a bucket alone, as in
 * DDP). Each segment is padded with zeros to a multiple of the world size
 * W and split into W equal chunks; rank r owns chunk r of every segment.
 * Full-size buffers use the padded layout, so a segment is reduced,
 * scattered or gathered in place with a single collective.
 *
 *   strategy  parameters      gradients                optimizer state
 *   ddp       full            full, all-reduced         full
 *   zero1     full            full, reduce-scattered    own chunks
 *   zero2     full            one bucket + own chunks   own chunks
 *   zero3     own chunks      one unit + own chunks     own chunks
 *
 * zero2 and zero3 hold full gradients only while accumulating micro-steps
 * before the last one (like FSDP's no_sync), since communication happens
 * on the last micro-step only. zero3 gathers each unit's parameters into a
 * buffer the size of the largest unit before that unit's forward, and
 * again before its backward unless the buffer still holds them.
 *
 * The schedule (device.h, schedule.c) runs on a compute device: the cpu
 * (crun__parallel_create) or one attached to a storage-only crun__parallel.
 *
 * Every rank must call the functions below in the same order with the
 * same arguments apart from the token rows (collectives inside). They
 * return 0 or a negative errno from the comm layer (see
 * crun__comm_errmsg()). */
#ifndef CRUN_TRAINER_PARALLEL_H
#define CRUN_TRAINER_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/comm.h"
#include "trainer/model.h"
#include "trainer/optim.h"

enum crun__strategy {
	CRUN_STRATEGY_DDP,
	CRUN_STRATEGY_ZERO1,
	CRUN_STRATEGY_ZERO2,
	CRUN_STRATEGY_ZERO3,
};

/* Accepts ddp, zero1, zero2, zero3 and fsdp (zero3); -1 otherwise. */
int crun__strategy_parse(const char *name);
const char *crun__strategy_name(enum crun__strategy s);

struct crun__parallel_opts {
	enum crun__strategy strategy;
	int grad_accum;	 /* micro-steps per step */
	int micro_batch; /* samples per micro-step on this rank */
	size_t bucket_bytes;
};

struct crun__parallel;

/* Uses (does not own) model and comm, which must outlive it. Parameters
 * start at zero: call init_params or load them. NULL on allocation
 * failure. */
struct crun__parallel *crun__parallel_create(const struct crun__model *model,
					     struct crun__comm *comm,
					     const struct crun__parallel_opts *opts);
void crun__parallel_destroy(struct crun__parallel *par);

/* Initial parameters from seed (no communication); optimizer state zero. */
void crun__parallel_init_params(struct crun__parallel *par, uint64_t seed);

/* One optimizer step (t, 1-based) at learning rate lr. tokens holds
 * grad_accum * micro_batch rows of context+1 bytes: the micro-steps'
 * rows in order. global_batch is the number of samples over all ranks and
 * micro-steps; the loss is their mean. On success *loss is that mean
 * (nats) and *grad_norm the global gradient norm before clipping, the same
 * on every rank. */
int crun__parallel_step(struct crun__parallel *par, const struct crun__optim *o,
			const uint8_t *tokens, int64_t global_batch, int64_t t, double lr,
			double *loss, double *grad_norm);

/* Forward only on rows (0 .. micro_batch) samples; adds their summed loss
 * to *loss_sum. A rank with no rows left still calls it with rows 0 while
 * others have some (zero3 gathers inside). */
int crun__parallel_forward(struct crun__parallel *par, const uint8_t *tokens, int rows,
			   double *loss_sum);

/* L2 norm of all parameters, the same on every rank. */
int crun__parallel_param_l2(struct crun__parallel *par, double *out);

/* A contiguous range of the flat arrays and where this rank keeps it. */
struct crun__view {
	size_t flat;
	size_t n;
	float *p, *m, *v;
};

int crun__parallel_n_segments(const struct crun__parallel *par);

/* The chunk of segment s that this rank owns: what it saves in a
 * checkpoint (n may be 0 at the padded end of a small segment). */
void crun__parallel_owned(struct crun__parallel *par, int s, struct crun__view *out);

/* What this rank holds of segment s, to be filled when loading: the
 * parameters in params (the whole segment unless zero3; m and v NULL)
 * and the optimizer state in optim (the whole segment for ddp, else the
 * owned chunk; p NULL). */
void crun__parallel_held(struct crun__parallel *par, int s, struct crun__view *params,
			 struct crun__view *optim);

/* A crun__parallel that holds only the parameters and the optimizer state,
 * in the layout above: the host copy that checkpoints read and write, for
 * a compute device to attach to (device.h). It allocates no gradients and
 * no activations, so crun__parallel_step and crun__parallel_forward must not
 * be called on it; init_params, owned, held, param_l2 and memory work as
 * usual. crun__parallel_create is such a storage with the cpu device
 * attached. */
struct crun__parallel *crun__parallel_create_storage(const struct crun__model *model,
						     struct crun__comm *comm,
						     const struct crun__parallel_opts *opts);

/* create_storage in two steps, so that what the storage will take is
 * known before it is allocated: plan makes the layout alone (NULL on
 * allocation failure; crun__parallel_layout and crun__parallel_memory
 * work, nothing else until alloc), alloc the parameters and optimizer
 * state (0, or -ENOMEM with nothing allocated). */
struct crun__parallel *crun__parallel_plan(const struct crun__model *model, struct crun__comm *comm,
					   const struct crun__parallel_opts *opts);
int crun__parallel_alloc(struct crun__parallel *par);

/* A segment: its flat range [start, start+len), the per-rank chunk, its
 * offsets in padded full-size buffers and in shard buffers, and its units. */
struct crun__segment {
	size_t start, len;
	size_t chunk;
	size_t pad_off;
	size_t shard_off;
	int unit_first, unit_last;
};
/* The whole layout, for the schedule and the devices (device.h); valid
 * while par lives. */
struct crun__layout {
	enum crun__strategy strategy;
	int world, rank;
	int accum, micro;
	int n_seg;
	const struct crun__segment *seg; /* in flat order */
	const int *unit_seg;		 /* n_units entries */
	size_t pad_len;			 /* sum of W * chunk */
	size_t shard_len;		 /* sum of chunk */
	size_t max_chunk;
	size_t p_len;	  /* parameters held: pad_len, or shard_len for zero3 */
	size_t optim_len; /* each moment: pad_len for ddp, else shard_len */
	bool grads_full;  /* gradients in a pad_len buffer (ddp, zero1, or
			   * grad_accum > 1), else bucket by bucket */
};
const struct crun__layout *crun__parallel_layout(const struct crun__parallel *par);

/* Elements of segment s this rank owns, and their flat index in *flat (0
 * at the padded end of a small segment). */
size_t crun__layout_owned(const struct crun__layout *lay, int s, size_t *flat);

/* The whole host arrays: parameters (pad_len floats, or shard_len for
 * zero3) and the two moments (pad_len for ddp, else shard_len). */
struct crun__parallel_arrays {
	float *p;
	size_t p_len;
	float *m, *v;
	size_t optim_len;
	size_t pad_len, shard_len, max_chunk;
};
void crun__parallel_arrays(struct crun__parallel *par, struct crun__parallel_arrays *out);

/* Bytes each rank keeps for the run (persistent buffers), and the largest
 * transient buffer of gathered parameters (zero3). */
struct crun__parallel_memory {
	size_t param_bytes;
	size_t param_gather_bytes;
	size_t grad_bytes;
	size_t optim_bytes;
	size_t total_param_bytes; /* n_params * 4, unpadded */
};
void crun__parallel_memory(const struct crun__parallel *par, struct crun__parallel_memory *out);

#endif
