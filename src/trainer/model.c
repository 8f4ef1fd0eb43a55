/* Forward and hand-written backward of crun-train's model, one unit at a
 * time, float32 with the matrix products in OpenBLAS's sgemm. Reductions
 * over the batch run in sample order, so a given batch always gives the
 * same bits. */
#include "trainer/model.h"
#include "common/util.h"

#include "trainer/rng.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-5f

static void add_tensor(struct crun__model *m, int *n, size_t *off, const char *name, int unit,
		       int rows, int cols, bool decay, float init, float init_value)
{
	struct crun__tensor *t = &m->tensors[(*n)++];

	snprintf(t->name, sizeof(t->name), "%s", name);
	t->offset = *off;
	t->rows = rows;
	t->cols = cols;
	t->numel = (size_t)rows * (size_t)cols;
	t->unit = unit;
	t->decay = decay;
	t->init = init;
	t->init_value = init_value;
	*off += t->numel;
}

struct crun__model *crun__model_create(const struct crun__model_config *cfg, char *err,
				       size_t errlen)
{
	struct crun__model *m;
	int T = cfg->context, d = cfg->embed_dim, H = cfg->width, L = cfg->layers;
	int F = cfg->ffn_mult * cfg->width;
	double limit = (double)(1u << 31);
	size_t off = 0;
	int n = 0;
	char name[24];

	if (T < 1 || d < 1 || H < 1 || L < 0 || cfg->ffn_mult < 1 || !(cfg->init_std > 0) ||
	    (double)T * d > limit || (double)F * H > limit) {
		crun__seterr(err, errlen,
			     "model sizes out of range (context %d, embed_dim %d, width %d, "
			     "layers %d, ffn_mult %d)",
			     T, d, H, L, cfg->ffn_mult);
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		goto out_nomem;
	m->cfg = *cfg;
	m->n_units = L + 2;
	m->unit_off = calloc((size_t)m->n_units + 1, sizeof(*m->unit_off));
	m->tensors = calloc(4 + 6 * (size_t)L + 4, sizeof(*m->tensors));
	if (!m->unit_off || !m->tensors)
		goto out_free_model;

	add_tensor(m, &n, &off, "tok_emb", 0, CRUN_MODEL_VOCAB, d, false, cfg->init_std, 0);
	add_tensor(m, &n, &off, "pos_emb", 0, T, d, false, cfg->init_std, 0);
	add_tensor(m, &n, &off, "in.weight", 0, H, T * d, true, (float)(1.0 / sqrt(T * d)), 0);
	add_tensor(m, &n, &off, "in.bias", 0, H, 1, false, 0, 0);
	for (int l = 0; l < L; l++) {
		m->unit_off[1 + l] = off;
		snprintf(name, sizeof(name), "block%hu.ln.weight", (unsigned short)l);
		add_tensor(m, &n, &off, name, 1 + l, H, 1, false, 0, 1);
		snprintf(name, sizeof(name), "block%hu.ln.bias", (unsigned short)l);
		add_tensor(m, &n, &off, name, 1 + l, H, 1, false, 0, 0);
		snprintf(name, sizeof(name), "block%hu.fc1.weight", (unsigned short)l);
		add_tensor(m, &n, &off, name, 1 + l, F, H, true, (float)(1.0 / sqrt(H)), 0);
		snprintf(name, sizeof(name), "block%hu.fc1.bias", (unsigned short)l);
		add_tensor(m, &n, &off, name, 1 + l, F, 1, false, 0, 0);
		snprintf(name, sizeof(name), "block%hu.fc2.weight", (unsigned short)l);
		add_tensor(m, &n, &off, name, 1 + l, H, F, true,
			   (float)(1.0 / sqrt((double)F * 2 * L)), 0);
		snprintf(name, sizeof(name), "block%hu.fc2.bias", (unsigned short)l);
		add_tensor(m, &n, &off, name, 1 + l, H, 1, false, 0, 0);
	}
	m->unit_off[L + 1] = off;
	add_tensor(m, &n, &off, "ln_f.weight", L + 1, H, 1, false, 0, 1);
	add_tensor(m, &n, &off, "ln_f.bias", L + 1, H, 1, false, 0, 0);
	add_tensor(m, &n, &off, "head.weight", L + 1, CRUN_MODEL_VOCAB, H, true, cfg->init_std, 0);
	add_tensor(m, &n, &off, "head.bias", L + 1, CRUN_MODEL_VOCAB, 1, false, 0, 0);
	m->unit_off[L + 2] = off;
	m->n_tensors = n;
	m->n_params = off;
	return m;

out_free_model:
	crun__model_destroy(m);
out_nomem:
	crun__seterr(err, errlen, "model: out of memory");
	return NULL;
}

void crun__model_destroy(struct crun__model *m)
{
	if (!m)
		return;
	free(m->unit_off);
	free(m->tensors);
	free(m);
}

void crun__model_init_params(const struct crun__model *m, uint64_t seed, size_t flat, size_t n,
			     float *out)
{
	size_t end = flat + n;

	for (int i = 0; i < m->n_tensors; i++) {
		const struct crun__tensor *t = &m->tensors[i];
		size_t a = t->offset > flat ? t->offset : flat;
		size_t b = t->offset + t->numel < end ? t->offset + t->numel : end;

		for (size_t j = a; j < b; j++)
			out[j - flat] = t->init > 0
						? (float)(t->init * crun__rng_normal_at(seed, 1, j))
						: t->init_value;
	}
}

struct block_acts {
	float *ln, *xhat, *mean, *rstd, *a, *th, *gel; /* th: the tanh inside gelu(a) */
};

struct crun__model_acts {
	int batch;
	float *mem;
	float *x0;
	float **h; /* layers + 1 residual streams */
	struct block_acts *blk;
	float *lnf, *xhatf, *meanf, *rstdf;
	float *probs;
	double loss;
	float *dh, *dln, *df, *dx0;
};

/* Floats of the activations of batch rows, in one block. */
static size_t acts_floats(const struct crun__model *m, size_t B)
{
	size_t T = (size_t)m->cfg.context, d = (size_t)m->cfg.embed_dim, H = (size_t)m->cfg.width;
	size_t F = (size_t)m->cfg.ffn_mult * H, L = (size_t)m->cfg.layers;
	size_t C = T * d;
	size_t per_block = B * (2 * H + 2 + 3 * F);

	return B * C + (L + 1) * B * H + L * per_block + B * (2 * H + 2) + B * CRUN_MODEL_VOCAB +
	       B * (2 * H + F + C);
}

size_t crun__model_acts_bytes(const struct crun__model *m, int batch)
{
	return acts_floats(m, (size_t)(batch > 0 ? batch : 1)) * sizeof(float);
}

struct crun__model_acts *crun__model_acts_create(const struct crun__model *m, int batch)
{
	size_t B = (size_t)(batch > 0 ? batch : 1);
	size_t T = (size_t)m->cfg.context, d = (size_t)m->cfg.embed_dim, H = (size_t)m->cfg.width;
	size_t F = (size_t)m->cfg.ffn_mult * H, L = (size_t)m->cfg.layers;
	size_t C = T * d;
	size_t total = acts_floats(m, B);
	struct crun__model_acts *a = calloc(1, sizeof(*a));
	float *p;

	if (!a)
		return NULL;
	a->batch = (int)B;
	a->mem = calloc(total, sizeof(float));
	a->h = calloc(L + 1, sizeof(*a->h));
	a->blk = calloc(L ? L : 1, sizeof(*a->blk));
	if (!a->mem || !a->h || !a->blk) {
		crun__model_acts_destroy(a);
		return NULL;
	}
	p = a->mem;
	a->x0 = p, p += B * C;
	for (size_t l = 0; l <= L; l++)
		a->h[l] = p, p += B * H;
	for (size_t l = 0; l < L; l++) {
		struct block_acts *k = &a->blk[l];

		k->ln = p, p += B * H;
		k->xhat = p, p += B * H;
		k->mean = p, p += B;
		k->rstd = p, p += B;
		k->a = p, p += B * F;
		k->th = p, p += B * F;
		k->gel = p, p += B * F;
	}
	a->lnf = p, p += B * H;
	a->xhatf = p, p += B * H;
	a->meanf = p, p += B;
	a->rstdf = p, p += B;
	a->probs = p, p += B * CRUN_MODEL_VOCAB;
	a->dh = p, p += B * H;
	a->dln = p, p += B * H;
	a->df = p, p += B * F;
	a->dx0 = p, p += B * C;
	return a;
}

void crun__model_acts_destroy(struct crun__model_acts *a)
{
	if (!a)
		return;
	free(a->mem);
	free(a->h);
	free(a->blk);
	free(a);
}

/* Y[B,N] = X[B,K] W[N,K]^T + bias */
static void linear_forward(int B, int N, int K, const float *X, const float *W, const float *bias,
			   float *Y)
{
	for (int b = 0; b < B; b++)
		memcpy(Y + (size_t)b * N, bias, (size_t)N * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, N, K, 1.0f, X, K, W, K, 1.0f, Y, N);
}

/* dW[N,K] += dY^T X; dbias += column sums of dY; dX[B,K] = dY W (or +=
 * when accumulate), skipped when dX is NULL. */
static void linear_backward(int B, int N, int K, const float *X, const float *W, const float *dY,
			    float *dW, float *dbias, float *dX, bool accumulate)
{
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, B, 1.0f, dY, N, X, K, 1.0f, dW,
		    K);
	for (int b = 0; b < B; b++)
		for (int j = 0; j < N; j++)
			dbias[j] += dY[(size_t)b * N + j];
	if (dX)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, K, N, 1.0f, dY, N, W, K,
			    accumulate ? 1.0f : 0.0f, dX, K);
}

static void ln_forward(int B, int H, const float *x, const float *gamma, const float *beta,
		       float *out, float *xhat, float *mean, float *rstd)
{
	for (int b = 0; b < B; b++) {
		const float *xr = x + (size_t)b * H;
		float *xh = xhat + (size_t)b * H, *o = out + (size_t)b * H;
		double s = 0, ss = 0;
		float mu, rs;

		for (int j = 0; j < H; j++)
			s += xr[j];
		mu = (float)(s / H);
		for (int j = 0; j < H; j++) {
			float c = xr[j] - mu;

			ss += (double)c * c;
		}
		rs = (float)(1.0 / sqrt(ss / H + LN_EPS));
		mean[b] = mu;
		rstd[b] = rs;
		for (int j = 0; j < H; j++) {
			xh[j] = (xr[j] - mu) * rs;
			o[j] = xh[j] * gamma[j] + beta[j];
		}
	}
}

/* dx += LN backward of dout; dgamma, dbeta accumulate. */
static void ln_backward(int B, int H, const float *dout, const float *xhat, const float *rstd,
			const float *gamma, float *dgamma, float *dbeta, float *dx)
{
	for (int b = 0; b < B; b++) {
		const float *dy = dout + (size_t)b * H, *xh = xhat + (size_t)b * H;
		float *dxr = dx + (size_t)b * H;
		double s1 = 0, s2 = 0;
		float m1, m2;

		for (int j = 0; j < H; j++) {
			float g = dy[j] * gamma[j];

			s1 += g;
			s2 += (double)g * xh[j];
			dgamma[j] += dy[j] * xh[j];
			dbeta[j] += dy[j];
		}
		m1 = (float)(s1 / H);
		m2 = (float)(s2 / H);
		for (int j = 0; j < H; j++)
			dxr[j] += rstd[b] * (dy[j] * gamma[j] - m1 - xh[j] * m2);
	}
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* gelu's tanh approximation; *th keeps the tanh for the backward pass.
 * tanh(u) = 1 - 2 / (exp(2u) + 1) is several times faster than tanhf and
 * saturates correctly at both ends. */
static float gelu(float x, float *th)
{
	float t = 1.0f - 2.0f / (expf(2.0f * GELU_K * (x + GELU_C * x * x * x)) + 1.0f);

	*th = t;
	return 0.5f * x * (1.0f + t);
}

static float gelu_grad(float x, float t)
{
	return 0.5f * (1.0f + t) +
	       0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

struct embed_params {
	const float *tok, *pos, *w, *b;
};

struct block_params {
	const float *g, *b, *w1, *b1, *w2, *b2;
};

struct head_params {
	const float *g, *b, *w, *bias;
};

static struct embed_params embed_params(const struct crun__model *m, const float *p)
{
	size_t d = (size_t)m->cfg.embed_dim, C = (size_t)m->cfg.context * d;
	struct embed_params e;

	e.tok = p;
	e.pos = e.tok + CRUN_MODEL_VOCAB * d;
	e.w = e.pos + C;
	e.b = e.w + (size_t)m->cfg.width * C;
	return e;
}

static struct block_params block_params(const struct crun__model *m, const float *p)
{
	size_t H = (size_t)m->cfg.width, F = H * (size_t)m->cfg.ffn_mult;
	struct block_params k;

	k.g = p;
	k.b = k.g + H;
	k.w1 = k.b + H;
	k.b1 = k.w1 + F * H;
	k.w2 = k.b1 + F;
	k.b2 = k.w2 + H * F;
	return k;
}

static struct head_params head_params(const struct crun__model *m, const float *p)
{
	size_t H = (size_t)m->cfg.width;
	struct head_params k;

	k.g = p;
	k.b = k.g + H;
	k.w = k.b + H;
	k.bias = k.w + CRUN_MODEL_VOCAB * H;
	return k;
}

void crun__model_forward_unit(const struct crun__model *m, int unit, const float *p,
			      struct crun__model_acts *a, const uint8_t *tokens, int B)
{
	int T = m->cfg.context, d = m->cfg.embed_dim, H = m->cfg.width, L = m->cfg.layers;
	int F = m->cfg.ffn_mult * H, C = T * d;

	if (B <= 0)
		return;
	if (unit == 0) {
		struct embed_params e = embed_params(m, p);

		for (int b = 0; b < B; b++) {
			const uint8_t *row = tokens + (size_t)b * (T + 1);
			float *x = a->x0 + (size_t)b * C;

			for (int t = 0; t < T; t++)
				for (int k = 0; k < d; k++)
					x[t * d + k] = e.tok[(size_t)row[t] * d + k] +
						       e.pos[(size_t)t * d + k];
		}
		linear_forward(B, H, C, a->x0, e.w, e.b, a->h[0]);
	} else if (unit <= L) {
		int l = unit - 1;
		struct block_params k = block_params(m, p);
		struct block_acts *s = &a->blk[l];
		size_t n = (size_t)B * F;

		ln_forward(B, H, a->h[l], k.g, k.b, s->ln, s->xhat, s->mean, s->rstd);
		linear_forward(B, F, H, s->ln, k.w1, k.b1, s->a);
		for (size_t i = 0; i < n; i++)
			s->gel[i] = gelu(s->a[i], &s->th[i]);
		linear_forward(B, H, F, s->gel, k.w2, k.b2, a->h[l + 1]);
		for (size_t i = 0; i < (size_t)B * H; i++)
			a->h[l + 1][i] += a->h[l][i];
	} else {
		struct head_params k = head_params(m, p);
		double loss = 0;

		ln_forward(B, H, a->h[L], k.g, k.b, a->lnf, a->xhatf, a->meanf, a->rstdf);
		linear_forward(B, CRUN_MODEL_VOCAB, H, a->lnf, k.w, k.bias, a->probs);
		for (int b = 0; b < B; b++) {
			float *z = a->probs + (size_t)b * CRUN_MODEL_VOCAB;
			int y = tokens[(size_t)b * (T + 1) + T];
			float mx = z[0];
			double sum = 0;

			for (int j = 1; j < CRUN_MODEL_VOCAB; j++)
				mx = z[j] > mx ? z[j] : mx;
			loss -= z[y] - mx;
			for (int j = 0; j < CRUN_MODEL_VOCAB; j++) {
				z[j] = expf(z[j] - mx);
				sum += z[j];
			}
			loss += log(sum);
			for (int j = 0; j < CRUN_MODEL_VOCAB; j++)
				z[j] = (float)(z[j] / sum);
		}
		a->loss = loss;
	}
}

double crun__model_loss_sum(const struct crun__model_acts *a)
{
	return a->loss;
}

void crun__model_backward_unit(const struct crun__model *m, int unit, const float *p, float *g,
			       struct crun__model_acts *a, const uint8_t *tokens, int B,
			       float scale)
{
	int T = m->cfg.context, d = m->cfg.embed_dim, H = m->cfg.width, L = m->cfg.layers;
	int F = m->cfg.ffn_mult * H, C = T * d;

	if (B <= 0)
		return;
	if (unit == L + 1) {
		struct head_params k = head_params(m, p);
		struct head_params dk = head_params(m, g);
		float *dz = a->probs;

		for (int b = 0; b < B; b++) {
			int y = tokens[(size_t)b * (T + 1) + T];
			float *z = dz + (size_t)b * CRUN_MODEL_VOCAB;

			for (int j = 0; j < CRUN_MODEL_VOCAB; j++)
				z[j] = (z[j] - (j == y ? 1.0f : 0.0f)) * scale;
		}
		linear_backward(B, CRUN_MODEL_VOCAB, H, a->lnf, k.w, dz, (float *)dk.w,
				(float *)dk.bias, a->dln, false);
		memset(a->dh, 0, (size_t)B * H * sizeof(float));
		ln_backward(B, H, a->dln, a->xhatf, a->rstdf, k.g, (float *)dk.g, (float *)dk.b,
			    a->dh);
	} else if (unit >= 1) {
		int l = unit - 1;
		struct block_params k = block_params(m, p);
		struct block_params dk = block_params(m, g);
		struct block_acts *s = &a->blk[l];
		size_t n = (size_t)B * F;

		/* dh holds the gradient at h[l+1]; the residual passes it on as is */
		linear_backward(B, H, F, s->gel, k.w2, a->dh, (float *)dk.w2, (float *)dk.b2, a->df,
				false);
		for (size_t i = 0; i < n; i++)
			a->df[i] *= gelu_grad(s->a[i], s->th[i]);
		linear_backward(B, F, H, s->ln, k.w1, a->df, (float *)dk.w1, (float *)dk.b1, a->dln,
				false);
		ln_backward(B, H, a->dln, s->xhat, s->rstd, k.g, (float *)dk.g, (float *)dk.b,
			    a->dh);
	} else {
		struct embed_params e = embed_params(m, p);
		struct embed_params de = embed_params(m, g);
		float *dtok = (float *)de.tok, *dpos = (float *)de.pos;

		linear_backward(B, H, C, a->x0, e.w, a->dh, (float *)de.w, (float *)de.b, a->dx0,
				false);
		for (int b = 0; b < B; b++) {
			const uint8_t *row = tokens + (size_t)b * (T + 1);
			const float *dx = a->dx0 + (size_t)b * C;

			for (int t = 0; t < T; t++)
				for (int j = 0; j < d; j++) {
					dtok[(size_t)row[t] * d + j] += dx[t * d + j];
					dpos[(size_t)t * d + j] += dx[t * d + j];
				}
		}
	}
}
