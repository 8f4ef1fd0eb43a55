/* The data-parallel strategies of parallel.h on a CUDA device
 * (train.device cuda).
 *
 * The host crun_parallel (made with crun_parallel_create_storage) keeps
 * the layout (segments, chunks, padding) and a host copy of the parameters
 * and optimizer state for checkpoints; this object mirrors those arrays on
 * the device, with the gradients and activations, and runs the same step
 * as crun_parallel_step: the same collectives on the same buffers in the
 * same order, so ddp/zero1/zero2/zero3 keep their meaning and a
 * checkpoint loads into either path.
 *
 * Mixed precision (compute bf16): float32 master parameters, gradients and
 * AdamW moments; the forward and backward passes read a bf16 copy of the
 * parameters (zero3 gathers that copy: half the bytes). Gradients are
 * reduced in bf16 unless reduce_fp32 (FSDP's reduce_dtype=float32), and
 * always in float32 over the cpu backend, which has no bf16 collectives.
 *
 * Overlap. Collectives run on the comm stream (the nccl backend's own
 * stream), ordered against the compute stream by events: as soon as the
 * backward pass has finished a bucket's gradients, its reduction is queued
 * on the comm stream while the backward pass goes on with the next
 * bucket; zero3 gathers the next unit's parameters into a second buffer
 * while the current unit computes (two gather buffers, two bucket
 * buffers). The host waits once per step, for the loss and the norm. Over
 * the cpu backend the collectives stage through pinned host memory and
 * block the host, so they do not overlap.
 *
 * Every rank calls the functions below in the same order (collectives
 * inside); they return 0 or a negative errno from the comm layer (message
 * in crun_comm_errmsg). CUDA failures end the process (runtime.h). */
#ifndef CRUN_TRAINER_CUDA_PARALLEL_H
#define CRUN_TRAINER_CUDA_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/comm.h"
#include "trainer/cuda/kernels.h"
#include "trainer/cuda/runtime.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/parallel.h"

struct crun_cuda_parallel_opts {
	enum crun_dtype compute; /* float32, or bfloat16 with float32 master weights */
	bool reduce_fp32;	 /* reduce gradients in float32 even when compute is bf16 */
	bool recompute;		 /* activation checkpointing (model.checkpoint_activations) */
};

struct crun_cuda_parallel;

/* Uses (does not own) ctx, model, host and comm, which must outlive it;
 * opts as given to crun_parallel_create_storage for host. Parameters
 * start at zero: call crun_cuda_parallel_upload. NULL with the reason in
 * err when the device is out of memory. */
struct crun_cuda_parallel *
crun_cuda_parallel_create(struct crun_cuda_ctx *ctx, const struct crun_model *model,
			  struct crun_parallel *host, struct crun_comm *comm,
			  const struct crun_parallel_opts *opts,
			  const struct crun_cuda_parallel_opts *copts, char *err, size_t errlen);
void crun_cuda_parallel_destroy(struct crun_cuda_parallel *pc);

/* Copies the host's parameters and optimizer state to the device (after
 * init_params or loading a checkpoint). */
void crun_cuda_parallel_upload(struct crun_cuda_parallel *pc);
/* Copies the device's parameters, and with optim the moments too, to the
 * host (before saving a checkpoint or computing crun_parallel_param_l2). */
void crun_cuda_parallel_download(struct crun_cuda_parallel *pc, bool optim);

/* crun_parallel_step on the device: the same arguments and results
 * (tokens is host memory). */
int crun_cuda_parallel_step(struct crun_cuda_parallel *pc, const struct crun_optim *o,
			    const uint8_t *tokens, int64_t global_batch, int64_t t, double lr,
			    double *loss, double *grad_norm);

/* crun_parallel_forward on the device. */
int crun_cuda_parallel_forward(struct crun_cuda_parallel *pc, const uint8_t *tokens, int rows,
			       double *loss_sum);

/* Device bytes this rank holds. */
struct crun_cuda_memory {
	size_t param_bytes;  /* master parameters and their compute copy */
	size_t gather_bytes; /* zero3: the two gather buffers */
	size_t grad_bytes;
	size_t optim_bytes;
	size_t act_bytes;
	size_t peak_bytes; /* the most allocated at once (crun_cuda_alloc, and the nccl
			    * backend's staging buffer) */
	size_t used_bytes; /* the driver's count now: also CUDA's, cuBLAS's, NCCL's own */
};
void crun_cuda_parallel_memory(const struct crun_cuda_parallel *pc, struct crun_cuda_memory *out);

/* Where the device's time went, summed over the timed steps (every step
 * but the first), measured with CUDA events on the compute stream:
 * compute_ms from the step's start until its last backward kernel (with
 * the waits for zero3's gathers), comm_ms then until the last gradient
 * reduction had finished (the communication not hidden behind backward),
 * update_ms the norm, the optimizer and what follows. */
struct crun_cuda_times {
	double compute_ms, comm_ms, update_ms;
	int64_t steps; /* timed */
	int64_t seen;  /* all */
};
void crun_cuda_parallel_times(const struct crun_cuda_parallel *pc, struct crun_cuda_times *out);

#endif
