/* Compute devices of crun-train, and the one schedule that drives them.
 *
 * The data-parallel schedule (schedule.c: which unit runs when, which
 * collective moves which bucket, the gradient norm, the updates, zero3's
 * gathers) is written once over the operations below; a device (the cpu,
 * device_cpu.c; a CUDA GPU, cuda/parallel.c) carries them out on its own
 * buffers. The layout the operations address (segments, chunks, padding)
 * is parallel.h's.
 *
 * Queues and events. A device has two in-order queues: compute (passes,
 * updates, norms) and comm (collectives). An operation runs on the queue
 * its comment names and may return before it is done; work on one queue
 * sees what the other wrote only after the schedule has ordered the two
 * with signal and wait. A synchronous device (the cpu) finishes every
 * operation before it returns and ignores signal, wait and mark. finish
 * makes the host wait for everything queued.
 *
 * Buffers are named by a struct crun__ref, resolved by the device: the
 * master parameters (float32), the copy of them that the passes read (the
 * compute type; on the cpu the master parameters themselves), the zero3
 * gather buffers, the full gradients, the gradient buckets and the
 * gradient shards. Offsets count elements of the buffer's type.
 *
 * Every rank issues the same operations in the same order (the collectives
 * inside match across ranks). Operations that communicate return 0 or a
 * negative errno from the comm layer (message in crun__comm_errmsg); a
 * device's own failures (a CUDA fault) end the process. */
#ifndef CRUN_TRAINER_DEVICE_H
#define CRUN_TRAINER_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/comm.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/parallel.h"
#include "trainer/trace.h"

enum crun__queue {
	CRUN__QUEUE_COMPUTE,
	CRUN__QUEUE_COMM,
};

/* Events, each per slot where the resource is double-buffered. */
enum crun__event {
	CRUN__EV_COMPUTED,     /* compute has written what comm reads next */
	CRUN__EV_COMMUNICATED, /* comm has written what compute reads next */
	CRUN__EV_REDUCED,      /* a gradient bucket's reduction is done: it may be cleared */
	CRUN__EV_GATHERED,     /* a gather buffer is full */
	CRUN__EV_FREED,	       /* compute is done with a gather buffer: it may be refilled */
};

/* Points of a step the device may time (the cpu ignores them). */
enum crun__mark {
	CRUN__MARK_START,    /* the step begins */
	CRUN__MARK_BACKWARD, /* the last backward kernel is queued */
	CRUN__MARK_REDUCED,  /* compute has waited for every gradient reduction */
};

enum crun__buf {
	CRUN__BUF_MASTER,  /* parameters, float32: layout p_len */
	CRUN__BUF_COMPUTE, /* the parameters the passes read (compute type), same layout */
	CRUN__BUF_GATHER,  /* zero3: gather buffer `slot`, world * max_chunk */
	CRUN__BUF_GRAD,	   /* full gradients, float32: pad_len (layout grads_full) */
	CRUN__BUF_BUCKET,  /* gradient bucket `slot`, float32: world * max_chunk */
	CRUN__BUF_SHARD,   /* gradient shards, float32: shard_len (zero1-3) */
};

struct crun__ref {
	enum crun__buf buf;
	int slot;
	size_t off;
};

/* The memory a device holds for the run, per rank. */
struct crun__device_memory {
	size_t param_bytes;  /* parameters (and their compute copy) */
	size_t gather_bytes; /* zero3's gather buffers */
	size_t grad_bytes;
	size_t optim_bytes;
	size_t act_bytes;  /* activations (0: not counted, the cpu) */
	size_t peak_bytes; /* the most allocated at once (0: not counted) */
	size_t used_bytes; /* the driver's count of device memory (0: none) */
};

/* Where the device's time went, summed over the timed steps (every step
 * but the first; all 0 where the device does not time): compute_ms from
 * MARK_START to MARK_BACKWARD (with the waits for zero3's gathers),
 * comm_ms from there to MARK_REDUCED (the communication not hidden behind
 * the backward pass), update_ms from there to the end of the step (the
 * norm, the optimizer and what follows). */
struct crun__device_times {
	double compute_ms, comm_ms, update_ms;
	int64_t steps;
};

struct crun__device_opts {
	int local_rank;
	bool shared;	  /* ranks may share a GPU (not with the nccl backend) */
	bool bf16;	  /* bf16 compute with float32 master weights */
	bool reduce_fp32; /* reduce gradients in float32 even when computing in bf16 */
	bool recompute;	  /* activation checkpointing */
};

struct crun__device;

struct crun__device_ops {
	const char *name; /* train.device */
	/* Gather buffers and gradient buckets the device has: 1, or 2 to fill
	 * one while compute uses the other. */
	int gather_slots, bucket_slots;
	/* Keeps its own copy of the parameters and optimizer state, which
	 * upload and download bring in line with the host's. */
	bool mirrors;

	/* Lifecycle. open runs before the collective group forms and
	 * allocates the device (NULL with the reason in err); attach
	 * allocates the run's buffers for host's layout (0; -ENOSPC when the
	 * device is too small, -ENOMEM when the host is; reason in err);
	 * close frees what open and attach made. */
	struct crun__device *(*open)(const struct crun__device_opts *o, char *err, size_t errlen);
	int (*attach)(struct crun__device *d, char *err, size_t errlen);
	void (*close)(struct crun__device *d);

	/* Host copy (mirroring devices): the host's parameters and optimizer
	 * state to the device; the device's parameters (and with optim the
	 * moments) to the host. Both wait until done. */
	void (*upload)(struct crun__device *d);
	void (*download)(struct crun__device *d, bool optim);

	/* Queue order (see above). */
	void (*signal)(struct crun__device *d, enum crun__queue q, enum crun__event ev, int slot);
	void (*wait)(struct crun__device *d, enum crun__queue q, enum crun__event ev, int slot);
	void (*mark)(struct crun__device *d, enum crun__mark m);

	/* A pass (compute): begin takes `bytes` of token rows (host memory,
	 * copied or kept until finish) and zeroes the loss; forward and
	 * backward run one unit on `rows` rows from row `row` of them, p in
	 * the compute type, g float32 accumulated into; the head's forward
	 * adds the rows' summed loss. zero clears n elements. */
	void (*begin)(struct crun__device *d, const uint8_t *tokens, size_t bytes);
	void (*forward)(struct crun__device *d, int unit, struct crun__ref p, size_t row, int rows);
	void (*backward)(struct crun__device *d, int unit, struct crun__ref p, struct crun__ref g,
			 size_t row, int rows, float scale);
	void (*zero)(struct crun__device *d, struct crun__ref x, size_t n);

	/* Collectives (comm). allreduce sums world * chunk float32 gradients
	 * in place; reduce_scatter sums them into this rank's chunk at out;
	 * gather collects every rank's chunk (in, this rank's) into out,
	 * world * chunk, in the type of the buffers (in may be inside out). */
	int (*allreduce)(struct crun__device *d, struct crun__ref x, size_t chunk);
	int (*reduce_scatter)(struct crun__device *d, struct crun__ref in, struct crun__ref out,
			      size_t chunk);
	int (*gather)(struct crun__device *d, struct crun__ref in, struct crun__ref out,
		      size_t chunk);

	/* The gradient norm and clipping. sumsq (compute) adds the sum of
	 * squares of n gradients as part `part` (0 first) of the local sum;
	 * sumsq_total (compute) totals parts 0 .. n_parts-1; sumsq_allreduce
	 * (comm) sums the total over ranks; clip (compute) sets the factor
	 * that adamw multiplies gradients by, from the total. */
	void (*sumsq)(struct crun__device *d, int part, struct crun__ref x, size_t n);
	void (*sumsq_total)(struct crun__device *d, int n_parts);
	int (*sumsq_allreduce)(struct crun__device *d);
	void (*clip)(struct crun__device *d, const struct crun__optim *o);

	/* AdamW step t (compute) on flat parameters [flat, flat+n): p and g
	 * as given, the moments at offset moff of the optimizer state. */
	void (*adamw)(struct crun__device *d, const struct crun__optim *o, size_t flat, size_t n,
		      struct crun__ref p, struct crun__ref g, size_t moff, int64_t t, double lr);
	/* The master parameters changed: refresh the compute copy (compute). */
	void (*params_changed)(struct crun__device *d);

	/* The host waits for everything queued and reads the pass's summed
	 * loss and, after a step (sumsq not NULL), the total sum of squares.
	 * 0, or a negative errno when communication failed meanwhile. */
	int (*finish)(struct crun__device *d, double *loss, double *sumsq);

	/* Timing for the step timeline (trace.h) on a device whose operations
	 * return before they are done; both NULL on a synchronous device, whose
	 * operations the host's clock times. stamp records a point in queue q's
	 * order and returns its number in the step (0, 1, ...); stamp_times,
	 * after the step's finish, converts the step's n stamps to wall-clock
	 * microseconds (crun__trace_now_us's clock) and forgets them. */
	int (*stamp)(struct crun__device *d, enum crun__queue q);
	void (*stamp_times)(struct crun__device *d, int64_t *us, int n);

	void (*memory)(const struct crun__device *d, struct crun__device_memory *out);
	void (*times)(const struct crun__device *d, struct crun__device_times *out);
	/* One line about the device for the log ("" for none). */
	void (*describe)(const struct crun__device *d, char *buf, size_t len);
};

/* What every device starts with (its own state follows): the ops, what
 * attach works for, and the schedule's state. */
struct crun__device {
	const struct crun__device_ops *ops;
	const struct crun__model *model;
	struct crun__parallel *host;
	const struct crun__layout *lay;
	struct crun__comm *comm;
	int gathered[2]; /* unit in each gather buffer; -1: none */
	int gather_slot; /* the gather buffer in use */
	int bucket_slot; /* the gradient bucket being filled */
	/* Bytes per element of the compute type and of gradient reductions,
	 * for the trace (4 unless the device's attach says otherwise). */
	size_t compute_size, reduce_size;
	struct crun__sched_trace *trace; /* schedule.c's: the step being traced */
};

extern const struct crun__device_ops crun__device_cpu_ops;

/* The host memory the cpu device's attach allocates for a run of layout
 * lay and model: gradient buffers, zero3's gather buffer, the activations
 * of a micro-batch (bytes). */
void crun__device_cpu_need(const struct crun__layout *lay, const struct crun__model *model,
			   size_t *grad_bytes, size_t *gather_bytes, size_t *act_bytes);

/* The device train.device names: NULL when this build has none such
 * (device.c, linked into crun-train). */
const struct crun__device_ops *crun__device_find(const char *name);

/* Opens a device of ops (crun__device_find); NULL with the reason in err. */
struct crun__device *crun__device_open(const struct crun__device_ops *ops,
				       const struct crun__device_opts *o, char *err, size_t errlen);
/* Allocates the run's buffers on d for host (made by
 * crun__parallel_create_storage, or crun__parallel_create) and its model and
 * comm, which must outlive d; resets the schedule's state. 0, -ENOSPC
 * (the device is too small) or -ENOMEM, with the reason in err. */
int crun__device_attach(struct crun__device *d, const struct crun__model *model,
			struct crun__parallel *host, struct crun__comm *comm, char *err,
			size_t errlen);
/* Frees d; NULL is allowed. */
void crun__device_close(struct crun__device *d);

/* The schedule (schedule.c) on an attached device: crun__parallel_step and
 * crun__parallel_forward (parallel.h) with the same arguments and results;
 * tokens is host memory. */
int crun__schedule_step(struct crun__device *d, const struct crun__optim *o, const uint8_t *tokens,
			int64_t global_batch, int64_t t, double lr, double *loss,
			double *grad_norm);
int crun__schedule_forward(struct crun__device *d, const uint8_t *tokens, int rows,
			   double *loss_sum);
/* The step timeline: the next crun__schedule_step (that one only; not
 * crun__schedule_forward) records its operations into t (trace.h) as step
 * `step`, on the tracks compute (forward and
 * backward per unit), comm (each collective, with its elements and
 * bytes), optimizer (gradient norm, AdamW) and step (the whole step);
 * t NULL records nothing. t must outlive the step. 0, or -ENOMEM. */
int crun__schedule_trace(struct crun__device *d, struct crun__trace *t, int64_t step);
/* The most events one step of d records (for the recorder's capacity). */
size_t crun__schedule_trace_events(const struct crun__device *d);

/* The host's parameters and optimizer state to the device (after
 * init_params or loading a checkpoint); the device's to the host (before
 * saving or crun__parallel_param_l2). No-ops on a device that does not
 * mirror. */
void crun__schedule_upload(struct crun__device *d);
void crun__schedule_download(struct crun__device *d, bool optim);

#endif
