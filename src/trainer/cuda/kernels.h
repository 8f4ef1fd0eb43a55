/* CUDA kernels of crun-train's GPU path (kernels.cu), callable from C.
 *
 * Every launcher enqueues its kernels on `stream` and returns
 * cudaPeekAtLastError() (launch errors only; faults surface at the next
 * synchronisation). Nothing is launched when the work is empty. Pointers
 * are device memory. Matrices are row-major: rows x cols, row r at
 * r * cols.
 *
 * Types: `enum crun__dtype` says what an untyped (void *) buffer holds:
 * float32 or bfloat16 ("T" below, the compute type). Every kernel computes
 * in float32 and rounds once when it stores a T. Buffers typed float in a
 * prototype are always float32 (residual stream, statistics, gradients).
 *
 * The arithmetic mirrors the CPU path (model.c, optim.c) operation by
 * operation, so results agree with it to rounding: LayerNorm with epsilon
 * 1e-5 and the biased variance, GELU's tanh approximation written as
 * 1 - 2 / (exp(2u) + 1), softmax cross-entropy against the byte that
 * follows each window, AdamW with decoupled weight decay. Reductions are
 * deterministic (fixed grids, fixed order) except the token-embedding
 * gradient, which adds with atomics. */
#ifndef CRUN_TRAINER_CUDA_KERNELS_H
#define CRUN_TRAINER_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum crun__dtype {
	CRUN_DTYPE_F32,
	CRUN_DTYPE_BF16,
};

static inline size_t crun__dtype_size(enum crun__dtype t)
{
	return t == CRUN_DTYPE_BF16 ? 2 : 4;
}

/* Blocks of crun__k_sumsq_partial: it writes this many partial sums. */
#define CRUN_K_SUMSQ_BLOCKS 256
/* Column reductions (bias gradients, LayerNorm's gamma and beta) split the
 * rows in at most this many parts; their workspace holds
 * 2 * CRUN_K_COL_SPLITS * cols floats. */
#define CRUN_K_COL_SPLITS 32

/* out[i] = in[i] converted, i < n (a plain copy when the types agree). */
cudaError_t crun__k_cast(const void *in, enum crun__dtype tin, void *out, enum crun__dtype tout,
			 size_t n, cudaStream_t stream);

/* out[r][c] = bias[c] (+ add[r][c] when add is not NULL): the bias that a
 * matrix product then accumulates onto (beta = 1). out is tout, bias T. */
cudaError_t crun__k_bias_rows(void *out, enum crun__dtype tout, const void *bias,
			      enum crun__dtype t, const float *add, int rows, int cols,
			      cudaStream_t stream);

/* out[c] += sum over rows of in[r][c] (in is tin), in row order per
 * split. ws: the workspace (CRUN_K_COL_SPLITS * cols floats). */
cudaError_t crun__k_colsum_add(const void *in, enum crun__dtype tin, int rows, int cols, float *out,
			       float *ws, cudaStream_t stream);

/* x0[b][t*dim + k] = tok[tokens[b][t]][k] + pos[t][k]; tokens has rows of
 * context + 1 bytes; tok, pos and x0 are T. */
cudaError_t crun__k_embed_fwd(const uint8_t *tokens, int rows, int context, int dim,
			      const void *tok, const void *pos, void *x0, enum crun__dtype t,
			      cudaStream_t stream);

/* dtok[tokens[b][t]][k] += dx0[b][t*dim + k] (atomic adds). The position
 * gradient is crun__k_colsum_add of dx0. */
cudaError_t crun__k_embed_bwd_tok(const uint8_t *tokens, int rows, int context, int dim,
				  const float *dx0, float *dtok, cudaStream_t stream);

/* out = (x - mean) * rstd * gamma + beta per row; mean and rstd (rows
 * floats) are kept for the backward pass. x float32; gamma, beta, out T. */
cudaError_t crun__k_ln_fwd(const float *x, int rows, int cols, const void *gamma, const void *beta,
			   enum crun__dtype t, void *out, float *mean, float *rstd,
			   cudaStream_t stream);

/* LayerNorm backward from the forward's input x (xhat is recomputed):
 * dx += rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat));
 * dgamma += sum over rows of dy * xhat; dbeta += sum of dy. ws: workspace
 * (2 * CRUN_K_COL_SPLITS * cols floats). */
cudaError_t crun__k_ln_bwd(const float *dout, const float *x, const float *mean, const float *rstd,
			   const void *gamma, enum crun__dtype t, int rows, int cols, float *dx,
			   float *dgamma, float *dbeta, float *ws, cudaStream_t stream);

/* out[i] = gelu(a[i]), a and out T. */
cudaError_t crun__k_gelu_fwd(const void *a, void *out, enum crun__dtype t, size_t n,
			     cudaStream_t stream);

/* din[i] = dout[i] * gelu'(a[i]); dout, a and din T; din may be dout. */
cudaError_t crun__k_gelu_bwd(const void *dout, const void *a, void *din, enum crun__dtype t,
			     size_t n, cudaStream_t stream);

/* Softmax cross-entropy of rows of 256 logits against each row's target
 * (tokens[b][context]): z becomes the probabilities, losses[b] the loss
 * in nats. */
cudaError_t crun__k_xent_fwd(float *z, const uint8_t *tokens, int rows, int context, float *losses,
			     cudaStream_t stream);

/* From the probabilities p: p[b][j] = (p[b][j] - [j == target]) * scale in
 * place (float32), and the same values as T in dz. */
cudaError_t crun__k_xent_bwd(float *p, void *dz, enum crun__dtype t, const uint8_t *tokens,
			     int rows, int context, float scale, cudaStream_t stream);

/* *acc += sum of x[0..n) (one block, in double, fixed order). */
cudaError_t crun__k_sum_add(const float *x, int n, double *acc, cudaStream_t stream);

/* partials[0 .. CRUN_K_SUMSQ_BLOCKS) = partial sums of x[i]^2 in double. */
cudaError_t crun__k_sumsq_partial(const float *x, size_t n, double *partials, cudaStream_t stream);

/* *out = sum of x[0..n) in double (one block, fixed order). */
cudaError_t crun__k_sum_f64(const double *x, size_t n, double *out, cudaStream_t stream);

/* *gscale = clip / (sqrt(*sumsq) + 1e-6) when clip > 0 and the norm
 * exceeds it, else 1 (crun__optim_clip_scale on the device). */
cudaError_t crun__k_clip_scale(const double *sumsq, double clip, float *gscale,
			       cudaStream_t stream);

/* One AdamW step on n elements (crun__optim_adamw's arithmetic); the
 * gradient is multiplied by *gscale (device memory) first. */
cudaError_t crun__k_adamw(float *p, const float *g, float *m, float *v, size_t n, float beta1,
			  float beta2, float eps, float bc1, float bc2, float lr, float wd,
			  const float *gscale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
