/* The model's units on a CUDA device. Each linear layer is the CPU path's
 * linear_forward/linear_backward (model.c) written for cuBLAS: the bias is
 * broadcast into the output first and the product accumulates onto it
 * (beta = 1), so a T output is rounded once.
 *
 * cuBLAS is column-major; a row-major R x C matrix is the column-major
 * C x R matrix with the same bytes. For Y[B,N] = X[B,K] W[N,K]^T + b:
 *   forward  Y^T = W X^T         gemm(T, N, m=N, n=B, k=K, W ld K, X ld K, Y ld N)
 *   dX       dX^T = W^T dY^T     gemm(N, N, m=K, n=B, k=N, W ld K, dY ld N, dX ld K)
 *   dW      dW^T += X^T dY       gemm(N, T, m=K, n=N, k=B, X ld K, dY ld N, dW ld K) */
#include "trainer/cuda/model.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 256

struct block_acts {
	void *ln;	    /* B x H, T: LayerNorm output */
	float *mean, *rstd; /* B */
	void *a;	    /* B x F, T: fc1 output (pre-activation) */
	void *gel;	    /* B x F, T: GELU output */
};

struct crun__cuda_acts {
	enum crun__dtype t;
	size_t es; /* bytes of a T */
	int batch;
	bool recompute;
	void *mem;
	size_t bytes;
	void *x0;		/* B x C, T */
	float **h;		/* layers + 1 residual streams, B x H */
	struct block_acts *blk; /* layers entries; one shared set with recompute */
	void *lnf;		/* B x H, T */
	float *meanf, *rstdf;
	float *logits; /* B x 256: logits, then probabilities, then their gradient */
	float *losses; /* B */
	void *dz;      /* B x 256, T (aliases logits for float32) */
	float *dh;     /* B x H: gradient at the residual stream */
	void *dht;     /* dh as T (aliases dh for float32) */
	void *df;      /* B x F, T: the gradient at the GELU's input (computed in
			* place from the gradient at its output) */
	float *dln;    /* B x H */
	float *dx0;    /* B x C */
	float *ws;     /* column-reduction workspace */
	double *loss;  /* summed loss of the forward passes */
};

/* Carves n bytes off a running offset; with base NULL it only counts. */
static void *carve(char *base, size_t *off, size_t n)
{
	void *p = base ? base + *off : NULL;

	*off += (n + ALIGN - 1) / ALIGN * ALIGN;
	return p;
}

/* Lays out every buffer at base (NULL: only sums the size). */
static size_t layout(struct crun__cuda_acts *a, const struct crun__model *m, char *base)
{
	size_t B = (size_t)a->batch, T = (size_t)m->cfg.context, d = (size_t)m->cfg.embed_dim;
	size_t H = (size_t)m->cfg.width, F = H * (size_t)m->cfg.ffn_mult, C = T * d;
	size_t L = (size_t)m->cfg.layers, V = CRUN_MODEL_VOCAB, es = a->es;
	size_t cols = C > F ? C : F, off = 0;
	size_t n_blk = a->recompute ? (L ? 1 : 0) : L;
	bool f32 = a->t == CRUN_DTYPE_F32;

	if (H > cols)
		cols = H;
	if (V > cols)
		cols = V;
	a->loss = carve(base, &off, sizeof(double));
	a->x0 = carve(base, &off, B * C * es);
	for (size_t l = 0; l <= L; l++)
		a->h[l] = carve(base, &off, B * H * sizeof(float));
	for (size_t l = 0; l < n_blk; l++) {
		struct block_acts *k = &a->blk[l];

		k->ln = carve(base, &off, B * H * es);
		k->mean = carve(base, &off, B * sizeof(float));
		k->rstd = carve(base, &off, B * sizeof(float));
		k->a = carve(base, &off, B * F * es);
		k->gel = carve(base, &off, B * F * es);
	}
	for (size_t l = n_blk; l < L; l++)
		a->blk[l] = a->blk[0];
	a->lnf = carve(base, &off, B * H * es);
	a->meanf = carve(base, &off, B * sizeof(float));
	a->rstdf = carve(base, &off, B * sizeof(float));
	a->logits = carve(base, &off, B * V * sizeof(float));
	a->losses = carve(base, &off, B * sizeof(float));
	a->dz = f32 ? (void *)a->logits : carve(base, &off, B * V * es);
	a->dh = carve(base, &off, B * H * sizeof(float));
	a->dht = f32 ? (void *)a->dh : carve(base, &off, B * H * es);
	a->df = carve(base, &off, B * F * es);
	a->dln = carve(base, &off, B * H * sizeof(float));
	a->dx0 = carve(base, &off, B * C * sizeof(float));
	a->ws = carve(base, &off, 2 * (size_t)CRUN_K_COL_SPLITS * cols * sizeof(float));
	return off;
}

struct crun__cuda_acts *crun__cuda_acts_create(struct crun__cuda_ctx *ctx,
					       const struct crun__model *m, int batch,
					       enum crun__dtype t, bool recompute)
{
	struct crun__cuda_acts *a = calloc(1, sizeof(*a));
	size_t L = (size_t)m->cfg.layers;

	if (!a)
		return NULL;
	a->t = t;
	a->es = crun__dtype_size(t);
	a->batch = batch > 0 ? batch : 1;
	a->recompute = recompute;
	a->h = calloc(L + 1, sizeof(*a->h));
	a->blk = calloc(L ? L : 1, sizeof(*a->blk));
	if (!a->h || !a->blk)
		goto out_free;
	a->bytes = layout(a, m, NULL);
	a->mem = crun__cuda_alloc(ctx, a->bytes);
	if (!a->mem)
		goto out_free;
	layout(a, m, a->mem);
	return a;

out_free:
	free(a->h);
	free(a->blk);
	free(a);
	return NULL;
}

void crun__cuda_acts_destroy(struct crun__cuda_ctx *ctx, struct crun__cuda_acts *a)
{
	if (!a)
		return;
	crun__cuda_free(ctx, a->mem);
	free(a->h);
	free(a->blk);
	free(a);
}

size_t crun__cuda_acts_bytes(const struct crun__cuda_acts *a)
{
	return a->bytes;
}

double *crun__cuda_acts_loss(struct crun__cuda_acts *a)
{
	return a->loss;
}

const float *crun__cuda_acts_residual(const struct crun__cuda_acts *a, int l)
{
	return a->h[l];
}

static cudaDataType_t cuda_type(enum crun__dtype t)
{
	return t == CRUN_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* C (ct) = op(A) op(B) + beta C, with A and B in the compute type t and
 * float32 accumulation (no TF32: float32 inputs multiply in float32). */
static void gemm(struct crun__cuda_ctx *ctx, enum crun__dtype t, bool ta, bool tb, int m, int n,
		 int k, const void *A, int lda, const void *B, int ldb, float beta, void *C,
		 enum crun__dtype ct, int ldc)
{
	const float alpha = 1.0f;

	if (m <= 0 || n <= 0 || k <= 0)
		return;
	CRUN_CUBLAS_CHECK(cublasGemmEx(
		ctx->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
		&alpha, A, cuda_type(t), lda, B, cuda_type(t), ldb, &beta, C, cuda_type(ct), ldc,
		CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* Parameters of a unit, as in model.c's embed_params, block_params and
 * head_params, for elements of es bytes. */
struct embed_p {
	const char *tok, *pos, *w, *b;
};
struct block_p {
	const char *g, *b, *w1, *b1, *w2, *b2;
};
struct head_p {
	const char *g, *b, *w, *bias;
};

static struct embed_p embed_p(const struct crun__model *m, const void *p, size_t es)
{
	size_t d = (size_t)m->cfg.embed_dim, C = (size_t)m->cfg.context * d;
	struct embed_p e;

	e.tok = p;
	e.pos = e.tok + CRUN_MODEL_VOCAB * d * es;
	e.w = e.pos + C * es;
	e.b = e.w + (size_t)m->cfg.width * C * es;
	return e;
}

static struct block_p block_p(const struct crun__model *m, const void *p, size_t es)
{
	size_t H = (size_t)m->cfg.width, F = H * (size_t)m->cfg.ffn_mult;
	struct block_p k;

	k.g = p;
	k.b = k.g + H * es;
	k.w1 = k.b + H * es;
	k.b1 = k.w1 + F * H * es;
	k.w2 = k.b1 + F * es;
	k.b2 = k.w2 + H * F * es;
	return k;
}

static struct head_p head_p(const struct crun__model *m, const void *p, size_t es)
{
	size_t H = (size_t)m->cfg.width;
	struct head_p k;

	k.g = p;
	k.b = k.g + H * es;
	k.w = k.b + H * es;
	k.bias = k.w + CRUN_MODEL_VOCAB * H * es;
	return k;
}

/* A block's LayerNorm, first product and GELU from its input h[l]. */
static void block_front(struct crun__cuda_ctx *ctx, const struct crun__model *m, int l,
			const struct block_p *k, struct crun__cuda_acts *a, int B)
{
	int H = m->cfg.width, F = m->cfg.ffn_mult * H;
	struct block_acts *s = &a->blk[l];
	enum crun__dtype t = a->t;
	cudaStream_t st = ctx->stream;

	CRUN_CUDA_CHECK(crun__k_ln_fwd(a->h[l], B, H, k->g, k->b, t, s->ln, s->mean, s->rstd, st));
	CRUN_CUDA_CHECK(crun__k_bias_rows(s->a, t, k->b1, t, NULL, B, F, st));
	gemm(ctx, t, true, false, F, B, H, k->w1, H, s->ln, H, 1.0f, s->a, t, F);
	CRUN_CUDA_CHECK(crun__k_gelu_fwd(s->a, s->gel, t, (size_t)B * F, st));
}

void crun__cuda_forward_unit(struct crun__cuda_ctx *ctx, const struct crun__model *m, int unit,
			     const void *p, struct crun__cuda_acts *a, const uint8_t *tokens, int B)
{
	int T = m->cfg.context, d = m->cfg.embed_dim, H = m->cfg.width, L = m->cfg.layers;
	int F = m->cfg.ffn_mult * H, C = T * d, V = CRUN_MODEL_VOCAB;
	enum crun__dtype t = a->t;
	cudaStream_t st = ctx->stream;

	if (B <= 0)
		return;
	if (unit == 0) {
		struct embed_p e = embed_p(m, p, a->es);

		CRUN_CUDA_CHECK(crun__k_embed_fwd(tokens, B, T, d, e.tok, e.pos, a->x0, t, st));
		CRUN_CUDA_CHECK(crun__k_bias_rows(a->h[0], CRUN_DTYPE_F32, e.b, t, NULL, B, H, st));
		gemm(ctx, t, true, false, H, B, C, e.w, C, a->x0, C, 1.0f, a->h[0], CRUN_DTYPE_F32,
		     H);
	} else if (unit <= L) {
		int l = unit - 1;
		struct block_p k = block_p(m, p, a->es);

		block_front(ctx, m, l, &k, a, B);
		/* h[l+1] = h[l] + b2, then += gelu W2^T */
		CRUN_CUDA_CHECK(
			crun__k_bias_rows(a->h[l + 1], CRUN_DTYPE_F32, k.b2, t, a->h[l], B, H, st));
		gemm(ctx, t, true, false, H, B, F, k.w2, F, a->blk[l].gel, F, 1.0f, a->h[l + 1],
		     CRUN_DTYPE_F32, H);
	} else {
		struct head_p k = head_p(m, p, a->es);

		CRUN_CUDA_CHECK(
			crun__k_ln_fwd(a->h[L], B, H, k.g, k.b, t, a->lnf, a->meanf, a->rstdf, st));
		CRUN_CUDA_CHECK(
			crun__k_bias_rows(a->logits, CRUN_DTYPE_F32, k.bias, t, NULL, B, V, st));
		gemm(ctx, t, true, false, V, B, H, k.w, H, a->lnf, H, 1.0f, a->logits,
		     CRUN_DTYPE_F32, V);
		CRUN_CUDA_CHECK(crun__k_xent_fwd(a->logits, tokens, B, T, a->losses, st));
		CRUN_CUDA_CHECK(crun__k_sum_add(a->losses, B, a->loss, st));
	}
}

/* dh as the compute type, for the products that take it. */
static const void *dh_t(struct crun__cuda_ctx *ctx, struct crun__cuda_acts *a, int B, int H)
{
	if (a->t != CRUN_DTYPE_F32)
		CRUN_CUDA_CHECK(crun__k_cast(a->dh, CRUN_DTYPE_F32, a->dht, a->t, (size_t)B * H,
					     ctx->stream));
	return a->dht;
}

void crun__cuda_backward_unit(struct crun__cuda_ctx *ctx, const struct crun__model *m, int unit,
			      const void *p, float *g, struct crun__cuda_acts *a,
			      const uint8_t *tokens, int B, float scale)
{
	int T = m->cfg.context, d = m->cfg.embed_dim, H = m->cfg.width, L = m->cfg.layers;
	int F = m->cfg.ffn_mult * H, C = T * d, V = CRUN_MODEL_VOCAB;
	size_t Hs = (size_t)H, Fs = (size_t)F, Cs = (size_t)C, ds = (size_t)d;
	enum crun__dtype t = a->t, f32 = CRUN_DTYPE_F32;
	cudaStream_t st = ctx->stream;

	if (B <= 0)
		return;
	if (unit == L + 1) {
		struct head_p k = head_p(m, p, a->es);
		float *dg = g, *db = dg + Hs, *dw = db + Hs, *dbias = dw + CRUN_MODEL_VOCAB * Hs;

		CRUN_CUDA_CHECK(crun__k_xent_bwd(a->logits, a->dz, t, tokens, B, T, scale, st));
		gemm(ctx, t, false, true, H, V, B, a->lnf, H, a->dz, V, 1.0f, dw, f32, H);
		CRUN_CUDA_CHECK(crun__k_colsum_add(a->logits, f32, B, V, dbias, a->ws, st));
		gemm(ctx, t, false, false, H, B, V, k.w, H, a->dz, V, 0.0f, a->dln, f32, H);
		CRUN_CUDA_CHECK(cudaMemsetAsync(a->dh, 0, (size_t)B * Hs * sizeof(float), st));
		CRUN_CUDA_CHECK(crun__k_ln_bwd(a->dln, a->h[L], a->meanf, a->rstdf, k.g, t, B, H,
					       a->dh, dg, db, a->ws, st));
	} else if (unit >= 1) {
		int l = unit - 1;
		struct block_p k = block_p(m, p, a->es);
		struct block_acts *s = &a->blk[l];
		float *dg = g, *db = dg + Hs, *dw1 = db + Hs, *db1 = dw1 + Fs * Hs;
		float *dw2 = db1 + Fs, *db2 = dw2 + Hs * Fs;
		const void *dht;

		if (a->recompute)
			block_front(ctx, m, l, &k, a, B);
		/* dh holds the gradient at h[l+1]; the residual passes it on */
		dht = dh_t(ctx, a, B, H);
		gemm(ctx, t, false, true, F, H, B, s->gel, F, dht, H, 1.0f, dw2, f32, F);
		CRUN_CUDA_CHECK(crun__k_colsum_add(a->dh, f32, B, H, db2, a->ws, st));
		/* the widest activations (B x F) stay in the compute type, as
		 * mixed precision keeps them: the product writes them so and the
		 * GELU backward works in place (float32 inside) */
		gemm(ctx, t, false, false, F, B, H, k.w2, F, dht, H, 0.0f, a->df, t, F);
		CRUN_CUDA_CHECK(crun__k_gelu_bwd(a->df, s->a, a->df, t, (size_t)B * Fs, st));
		gemm(ctx, t, false, true, H, F, B, s->ln, H, a->df, F, 1.0f, dw1, f32, H);
		CRUN_CUDA_CHECK(crun__k_colsum_add(a->df, t, B, F, db1, a->ws, st));
		gemm(ctx, t, false, false, H, B, F, k.w1, H, a->df, F, 0.0f, a->dln, f32, H);
		CRUN_CUDA_CHECK(crun__k_ln_bwd(a->dln, a->h[l], s->mean, s->rstd, k.g, t, B, H,
					       a->dh, dg, db, a->ws, st));
	} else {
		struct embed_p e = embed_p(m, p, a->es);
		float *dtok = g, *dpos = dtok + CRUN_MODEL_VOCAB * ds, *dw = dpos + Cs;
		float *db = dw + Hs * Cs;
		const void *dht = dh_t(ctx, a, B, H);

		gemm(ctx, t, false, true, C, H, B, a->x0, C, dht, H, 1.0f, dw, f32, C);
		CRUN_CUDA_CHECK(crun__k_colsum_add(a->dh, f32, B, H, db, a->ws, st));
		gemm(ctx, t, false, false, C, B, H, e.w, C, dht, H, 0.0f, a->dx0, f32, C);
		CRUN_CUDA_CHECK(crun__k_colsum_add(a->dx0, f32, B, C, dpos, a->ws, st));
		CRUN_CUDA_CHECK(crun__k_embed_bwd_tok(tokens, B, T, d, a->dx0, dtok, st));
	}
}
