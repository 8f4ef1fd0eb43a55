/* crun-train's model on a CUDA device: the same units, parameters and
 * mathematics as model.c (whose header describes the model), run with
 * cuBLAS matrix products and the kernels of kernels.h.
 *
 * Compute type. Parameters given to the forward and backward passes are
 * in the compute type T (float32, or bfloat16 for mixed precision: the
 * caller keeps float32 master weights and passes a bf16 copy). The matrix
 * products multiply T inputs and accumulate in float32; the residual
 * stream, LayerNorm statistics, logits, losses and every gradient are
 * float32, so gradients accumulate over micro-steps in float32 whatever T
 * is. Activations saved for the backward pass (LayerNorm outputs, the
 * MLP's pre-activation and GELU output, the embeddings) are T.
 *
 * Activation checkpointing. With recompute, a block keeps only its input
 * (the residual stream) after its forward pass; its backward pass first
 * recomputes the LayerNorm, the first product and the GELU from that
 * input. Memory then holds one block's activations instead of `layers`,
 * for about a third more matrix-product work in those blocks.
 *
 * All work is enqueued on ctx->stream; nothing here synchronises. Pointers
 * (parameters, gradients, tokens) are device memory. */
#ifndef CRUN_TRAINER_CUDA_MODEL_H
#define CRUN_TRAINER_CUDA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/cuda/kernels.h"
#include "trainer/cuda/runtime.h"
#include "trainer/model.h"

struct crun__cuda_acts;

/* Activations and scratch for batches of at most `batch` samples, in one
 * device allocation. NULL when the device is out of memory. */
struct crun__cuda_acts *crun__cuda_acts_create(struct crun__cuda_ctx *ctx,
					       const struct crun__model *m, int batch,
					       enum crun__dtype t, bool recompute);
void crun__cuda_acts_destroy(struct crun__cuda_ctx *ctx, struct crun__cuda_acts *a);
/* Bytes of device memory the activations take. */
size_t crun__cuda_acts_bytes(const struct crun__cuda_acts *a);

/* Forward pass of one unit (units in order) on `batch` samples: tokens
 * holds batch rows of context+1 bytes (device). p is the unit's first
 * parameter, in the compute type. The head's forward adds the batch's
 * summed cross-entropy (nats) to the double at crun__cuda_acts_loss(). */
void crun__cuda_forward_unit(struct crun__cuda_ctx *ctx, const struct crun__model *m, int unit,
			     const void *p, struct crun__cuda_acts *a, const uint8_t *tokens,
			     int batch);

/* Backward pass of one unit (units in reverse order, after a full forward
 * on the same acts and tokens): adds the gradient of scale * (summed loss)
 * with respect to the unit's parameters to g (float32, the unit's layout). */
void crun__cuda_backward_unit(struct crun__cuda_ctx *ctx, const struct crun__model *m, int unit,
			      const void *p, float *g, struct crun__cuda_acts *a,
			      const uint8_t *tokens, int batch, float scale);

/* The device double that head forwards add their loss sums to (the caller
 * zeroes and reads it). */
double *crun__cuda_acts_loss(struct crun__cuda_acts *a);

/* The residual stream h[l] (l = 0 .. layers; batch x width float32,
 * device) of the last forward pass, for tests. */
const float *crun__cuda_acts_residual(const struct crun__cuda_acts *a, int l);

#endif
