/* The cuda device (train.device cuda): the operations of device.h on a
 * GPU, so that the one schedule (schedule.c) runs ddp/zero1/zero2/zero3 on
 * it with the same collectives on the same buffers in the same order as on
 * the cpu, and a checkpoint loads into either path.
 *
 * The host crun__parallel (crun__parallel_create_storage) keeps the layout
 * and a host copy of the parameters and optimizer state for checkpoints;
 * the device mirrors those arrays, with the gradients and activations.
 *
 * Mixed precision (compute bf16): float32 master parameters, gradients and
 * AdamW moments; the forward and backward passes read a bf16 copy of the
 * parameters (zero3 gathers that copy: half the bytes). Gradients are
 * reduced in bf16 unless reduce_fp32 (FSDP's reduce_dtype=float32), and
 * always in float32 over the cpu backend, which has no bf16 collectives.
 *
 * Overlap. The comm queue is the nccl backend's own stream, ordered
 * against the compute stream by events, so the schedule's overlap happens:
 * bucket reductions run while the backward pass goes on, zero3's next
 * unit is gathered while the current one computes (two gather buffers,
 * two bucket buffers). The host waits once per step, for the loss and the
 * norm. Over the cpu backend the collectives stage through pinned host
 * memory and block the host, so they do not overlap.
 *
 * The functions below are the device for tests, on a context the caller
 * made; crun-train opens it through device.h. Every rank calls them in the
 * same order (collectives inside); they return 0 or a negative errno from
 * the comm layer (message in crun__comm_errmsg). CUDA failures end the
 * process (runtime.h). */
#ifndef CRUN_TRAINER_CUDA_PARALLEL_H
#define CRUN_TRAINER_CUDA_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/comm.h"
#include "trainer/cuda/kernels.h"
#include "trainer/cuda/runtime.h"
#include "trainer/device.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/parallel.h"

extern const struct crun__device_ops crun__device_cuda_ops;

struct crun__cuda_parallel_opts {
	enum crun__dtype compute; /* float32, or bfloat16 with float32 master weights */
	bool reduce_fp32;	  /* reduce gradients in float32 even when compute is bf16 */
	bool recompute;		  /* activation checkpointing (model.checkpoint_activations) */
};

struct crun__cuda_parallel;

/* The cuda device on ctx, attached to host (crun__parallel_create_storage)
 * and its model and comm; it uses (does not own) them, and they must
 * outlive it. Parameters start at zero: call crun__cuda_parallel_upload.
 * NULL with the reason in err when the device is out of memory. */
struct crun__cuda_parallel *
crun__cuda_parallel_create(struct crun__cuda_ctx *ctx, const struct crun__model *model,
			   struct crun__parallel *host, struct crun__comm *comm,
			   const struct crun__cuda_parallel_opts *copts, char *err, size_t errlen);
void crun__cuda_parallel_destroy(struct crun__cuda_parallel *pc);

/* crun__schedule_upload and crun__schedule_download (device.h). */
void crun__cuda_parallel_upload(struct crun__cuda_parallel *pc);
void crun__cuda_parallel_download(struct crun__cuda_parallel *pc, bool optim);

/* crun__parallel_step and crun__parallel_forward on the device: the same
 * arguments and results (tokens is host memory). */
int crun__cuda_parallel_step(struct crun__cuda_parallel *pc, const struct crun__optim *o,
			     const uint8_t *tokens, int64_t global_batch, int64_t t, double lr,
			     double *loss, double *grad_norm);
int crun__cuda_parallel_forward(struct crun__cuda_parallel *pc, const uint8_t *tokens, int rows,
				double *loss_sum);

#endif
