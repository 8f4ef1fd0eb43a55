/* GPU tests of crun-train (CUDA builds only): every kernel, every unit's
 * forward and backward pass, and whole training steps of every strategy,
 * each compared with the CPU path, which is the reference.
 *
 * Exits 77 (Meson's "skipped") when no CUDA device is usable, so CI
 * machines without a GPU skip it.
 *
 * Tolerances, as relative L2 errors |gpu - cpu| / |cpu| (relative
 * differences for scalars):
 *   float32 kernels                               1e-5
 *   bf16 kernels (inputs rounded to bf16 first)   1e-2  (the output's rounding)
 *   float32 units and steps: loss                 1e-5
 *                            gradients, moments   1e-4
 *                            parameter updates    1e-3
 *   bf16 units and steps:    loss                 2e-2
 *                            gradients, norm      5e-2
 * float32 differs from the CPU only in the order of additions (cuBLAS,
 * reductions) and in expf's last bit; bf16 rounds activations and
 * parameters to 8 significant bits. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/log.h"
#include "trainer/comm.h"
#include "trainer/comm_nccl.h"
#include "trainer/cuda/kernels.h"
#include "trainer/cuda/model.h"
#include "trainer/cuda/parallel.h"
#include "trainer/cuda/runtime.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/parallel.h"
#include "trainer/rng.h"

#define TOL_F32_KERNEL 1e-5
#define TOL_BF16_KERNEL 1e-2
#define TOL_F32_LOSS 1e-5
#define TOL_F32_GRAD 1e-4
#define TOL_F32_UPDATE 1e-3
#define TOL_BF16_LOSS 2e-2
#define TOL_BF16_GRAD 5e-2

static struct crun__cuda_ctx *ctx;
static cudaStream_t st;

/* Host data. */

static float *randn(size_t n, uint64_t seed, float scale)
{
	float *v = malloc((n ? n : 1) * sizeof(float));

	assert_non_null(v);
	for (size_t i = 0; i < n; i++)
		v[i] = scale * (float)crun__rng_normal_at(seed, 7, i);
	return v;
}

static uint8_t *rand_tokens(int rows, int context, uint64_t seed)
{
	size_t n = (size_t)rows * (size_t)(context + 1);
	uint8_t *t = malloc(n ? n : 1);

	assert_non_null(t);
	/* a skewed distribution, so that some bytes repeat (atomics collide) */
	for (size_t i = 0; i < n; i++) {
		uint64_t r = crun__rng_at(seed, 3, i);

		t[i] = (uint8_t)(r % 4 == 0 ? 32 : (r >> 8) % 256);
	}
	return t;
}

/* bfloat16 with round-to-nearest-even, as __float2bfloat16 does. */
static uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* x rounded to t in place (what the device sees). */
static void quantize(float *x, size_t n, enum crun__dtype t)
{
	if (t == CRUN_DTYPE_BF16)
		for (size_t i = 0; i < n; i++)
			x[i] = from_bf16(to_bf16(x[i]));
}

static double rel_l2(const float *a, const float *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)ref[i];

		num += d * d;
		den += (double)ref[i] * ref[i];
	}
	if (den == 0)
		return sqrt(num);
	return sqrt(num / den);
}

static double rel_diff(double a, double ref)
{
	return fabs(a - ref) / (fabs(ref) > 1e-30 ? fabs(ref) : 1e-30);
}

#define EXPECT_L2(a, ref, n, tol, ...)                                                    \
	do {                                                                              \
		double e_ = rel_l2((a), (ref), (n));                                      \
		if (!(e_ <= (tol))) {                                                     \
			print_error(__VA_ARGS__);                                         \
			fail_msg("relative L2 error %.3e above %.1e", e_, (double)(tol)); \
		}                                                                         \
	} while (0)

#define EXPECT_REL(a, ref, tol, ...)                                                          \
	do {                                                                                  \
		double e_ = rel_diff((a), (ref));                                             \
		if (!(e_ <= (tol))) {                                                         \
			print_error(__VA_ARGS__);                                             \
			fail_msg("%.9g vs %.9g: relative error %.3e above %.1e", (double)(a), \
				 (double)(ref), e_, (double)(tol));                           \
		}                                                                             \
	} while (0)

/* Device data. */

static void *dalloc(size_t bytes)
{
	void *d = NULL;

	CRUN_CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 1));
	CRUN_CUDA_CHECK(cudaMemset(d, 0, bytes ? bytes : 1));
	/* the legacy stream does not order the non-blocking stream st */
	CRUN_CUDA_CHECK(cudaDeviceSynchronize());
	return d;
}

static void *dput(const void *h, size_t bytes)
{
	void *d = dalloc(bytes);

	if (bytes)
		CRUN_CUDA_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	CRUN_CUDA_CHECK(cudaDeviceSynchronize());
	return d;
}

/* n floats as type t on the device. */
static void *dput_t(const float *h, size_t n, enum crun__dtype t)
{
	uint16_t *b;
	void *d;

	if (t == CRUN_DTYPE_F32)
		return dput(h, n * sizeof(float));
	b = malloc((n ? n : 1) * sizeof(*b));
	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = to_bf16(h[i]);
	d = dput(b, n * sizeof(*b));
	free(b);
	return d;
}

/* n elements of type t from the device, as floats (malloc'd). */
static float *dget_t(const void *d, size_t n, enum crun__dtype t)
{
	float *h = malloc((n ? n : 1) * sizeof(float));

	assert_non_null(h);
	CRUN_CUDA_CHECK(cudaStreamSynchronize(st));
	if (t == CRUN_DTYPE_F32) {
		if (n)
			CRUN_CUDA_CHECK(
				cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
	} else {
		uint16_t *b = malloc((n ? n : 1) * sizeof(*b));

		assert_non_null(b);
		if (n)
			CRUN_CUDA_CHECK(cudaMemcpy(b, d, n * sizeof(*b), cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < n; i++)
			h[i] = from_bf16(b[i]);
		free(b);
	}
	return h;
}

static float *dget(const void *d, size_t n)
{
	return dget_t(d, n, CRUN_DTYPE_F32);
}

static double dget_f64(const double *d)
{
	double v;

	CRUN_CUDA_CHECK(cudaStreamSynchronize(st));
	CRUN_CUDA_CHECK(cudaMemcpy(&v, d, sizeof(v), cudaMemcpyDeviceToHost));
	return v;
}

static const char *tname(enum crun__dtype t)
{
	return t == CRUN_DTYPE_BF16 ? "bf16" : "fp32";
}

static double ktol(enum crun__dtype t)
{
	return t == CRUN_DTYPE_BF16 ? TOL_BF16_KERNEL : TOL_F32_KERNEL;
}

/* ---- kernels against references written from model.c's arithmetic ---- */

static void test_cast(void **state)
{
	size_t n = 1000;
	float *x = randn(n, 1, 3.0f), *back;
	void *dx = dput(x, n * sizeof(float)), *db = dalloc(n * 2), *df = dalloc(n * 4);

	(void)state;
	CRUN_CUDA_CHECK(crun__k_cast(dx, CRUN_DTYPE_F32, db, CRUN_DTYPE_BF16, n, st));
	CRUN_CUDA_CHECK(crun__k_cast(db, CRUN_DTYPE_BF16, df, CRUN_DTYPE_F32, n, st));
	back = dget(df, n);
	quantize(x, n, CRUN_DTYPE_BF16);
	/* rounding to nearest even is exact: the same bits as the host's */
	assert_memory_equal(back, x, n * sizeof(float));
	free(x);
	free(back);
	cudaFree(dx);
	cudaFree(db);
	cudaFree(df);
}

static void test_bias_colsum(void **state)
{
	enum crun__dtype types[2] = {CRUN_DTYPE_F32, CRUN_DTYPE_BF16};
	int rows = 150, cols = 70; /* not multiples of the block shapes */
	size_t n = (size_t)rows * cols;
	float *ws = dalloc(2 * (size_t)CRUN_K_COL_SPLITS * cols * sizeof(float));

	(void)state;
	for (int k = 0; k < 2; k++) {
		enum crun__dtype t = types[k];
		float *bias = randn((size_t)cols, 2, 1.0f), *add = randn(n, 3, 1.0f);
		float *x = randn(n, 4, 1.0f), *acc = randn((size_t)cols, 5, 1.0f);
		float *ref = malloc(n * sizeof(float)), *cref = malloc(cols * sizeof(float));
		void *dbias, *dx, *dout;
		float *dadd = dput(add, n * sizeof(float)), *dacc = dput(acc, cols * sizeof(float));
		float *out, *cs;

		quantize(bias, (size_t)cols, t);
		quantize(x, n, t);
		dbias = dput_t(bias, (size_t)cols, t);
		dx = dput_t(x, n, t);
		dout = dalloc(n * sizeof(float));
		for (size_t i = 0; i < n; i++)
			ref[i] = bias[i % (size_t)cols] + add[i];
		for (int c = 0; c < cols; c++) {
			double s = 0;

			for (int r = 0; r < rows; r++)
				s += x[(size_t)r * cols + c];
			cref[c] = acc[c] + (float)s;
		}
		CRUN_CUDA_CHECK(
			crun__k_bias_rows(dout, CRUN_DTYPE_F32, dbias, t, dadd, rows, cols, st));
		CRUN_CUDA_CHECK(crun__k_colsum_add(dx, t, rows, cols, dacc, ws, st));
		out = dget(dout, n);
		cs = dget(dacc, (size_t)cols);
		EXPECT_L2(out, ref, n, TOL_F32_KERNEL, "bias_rows %s\n", tname(t));
		EXPECT_L2(cs, cref, (size_t)cols, TOL_F32_KERNEL, "colsum_add %s\n", tname(t));
		free(bias), free(add), free(x), free(acc), free(ref), free(cref), free(out),
			free(cs);
		cudaFree(dbias), cudaFree(dx), cudaFree(dout), cudaFree(dadd), cudaFree(dacc);
	}
	cudaFree(ws);
}

/* model.c's ln_forward and ln_backward, with double sums. */
static void ln_ref(int B, int H, const float *x, const float *g, const float *b, float *out,
		   const float *dy, float *dx, float *dg, float *db)
{
	for (int r = 0; r < B; r++) {
		const float *xr = x + (size_t)r * H, *dyr = dy + (size_t)r * H;
		double s = 0, ss = 0, s1 = 0, s2 = 0;
		float mu, rs;

		for (int j = 0; j < H; j++)
			s += xr[j];
		mu = (float)(s / H);
		for (int j = 0; j < H; j++)
			ss += (double)(xr[j] - mu) * (xr[j] - mu);
		rs = (float)(1.0 / sqrt(ss / H + 1e-5));
		for (int j = 0; j < H; j++) {
			float xh = (xr[j] - mu) * rs, gg = dyr[j] * g[j];

			out[(size_t)r * H + j] = xh * g[j] + b[j];
			s1 += gg;
			s2 += (double)gg * xh;
			dg[j] += dyr[j] * xh;
			db[j] += dyr[j];
		}
		for (int j = 0; j < H; j++) {
			float xh = (xr[j] - mu) * rs;

			dx[(size_t)r * H + j] +=
				rs * (dyr[j] * g[j] - (float)(s1 / H) - xh * (float)(s2 / H));
		}
	}
}

static void test_layernorm(void **state)
{
	enum crun__dtype types[2] = {CRUN_DTYPE_F32, CRUN_DTYPE_BF16};
	int B = 37, H = 300;
	size_t n = (size_t)B * H;

	(void)state;
	for (int k = 0; k < 2; k++) {
		enum crun__dtype t = types[k];
		float *x = randn(n, 10, 2.0f), *dy = randn(n, 11, 1.0f), *dx0 = randn(n, 12, 1.0f);
		float *g = randn((size_t)H, 13, 0.3f), *b = randn((size_t)H, 14, 0.3f);
		float *out = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
		float *dg = calloc((size_t)H, sizeof(float)),
		      *db = calloc((size_t)H, sizeof(float));
		float *ws = dalloc(2 * (size_t)CRUN_K_COL_SPLITS * H * sizeof(float));
		float *dx_d, *dg_d, *db_d, *mean, *rstd, *o, *gx, *gg, *gb;
		void *g_d, *b_d, *out_d;
		float *x_d, *dy_d;

		for (int j = 0; j < H; j++)
			g[j] += 1.0f;
		quantize(g, (size_t)H, t);
		quantize(b, (size_t)H, t);
		memcpy(dx, dx0, n * sizeof(float));
		ln_ref(B, H, x, g, b, out, dy, dx, dg, db);
		x_d = dput(x, n * sizeof(float));
		dy_d = dput(dy, n * sizeof(float));
		dx_d = dput(dx0, n * sizeof(float));
		g_d = dput_t(g, (size_t)H, t);
		b_d = dput_t(b, (size_t)H, t);
		out_d = dalloc(n * sizeof(float));
		dg_d = dalloc((size_t)H * sizeof(float));
		db_d = dalloc((size_t)H * sizeof(float));
		mean = dalloc((size_t)B * sizeof(float));
		rstd = dalloc((size_t)B * sizeof(float));
		CRUN_CUDA_CHECK(crun__k_ln_fwd(x_d, B, H, g_d, b_d, t, out_d, mean, rstd, st));
		CRUN_CUDA_CHECK(crun__k_ln_bwd(dy_d, x_d, mean, rstd, g_d, t, B, H, dx_d, dg_d,
					       db_d, ws, st));
		o = dget_t(out_d, n, t);
		gx = dget(dx_d, n);
		gg = dget(dg_d, (size_t)H);
		gb = dget(db_d, (size_t)H);
		EXPECT_L2(o, out, n, ktol(t), "layernorm forward %s\n", tname(t));
		/* the backward pass is float32 whatever t is */
		EXPECT_L2(gx, dx, n, TOL_F32_KERNEL * 10, "layernorm dx %s\n", tname(t));
		EXPECT_L2(gg, dg, (size_t)H, TOL_F32_KERNEL, "layernorm dgamma %s\n", tname(t));
		EXPECT_L2(gb, db, (size_t)H, TOL_F32_KERNEL, "layernorm dbeta %s\n", tname(t));
		free(x), free(dy), free(dx0), free(g), free(b), free(out), free(dx), free(dg);
		free(db), free(o), free(gx), free(gg), free(gb);
		cudaFree(ws), cudaFree(x_d), cudaFree(dy_d), cudaFree(dx_d), cudaFree(g_d);
		cudaFree(b_d), cudaFree(out_d), cudaFree(dg_d), cudaFree(db_d), cudaFree(mean);
		cudaFree(rstd);
	}
}

/* model.c's gelu and gelu_grad */
static float gelu_t_ref(float x)
{
	return 1.0f -
	       2.0f / (expf(2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x)) + 1.0f);
}

static void test_gelu(void **state)
{
	enum crun__dtype types[2] = {CRUN_DTYPE_F32, CRUN_DTYPE_BF16};
	size_t n = 5000;

	(void)state;
	for (int k = 0; k < 2; k++) {
		enum crun__dtype t = types[k];
		float *a = randn(n, 20, 3.0f), *dout = randn(n, 21, 1.0f);
		float *y = malloc(n * sizeof(float)), *din = malloc(n * sizeof(float));
		void *a_d, *dout_d, *io_d, *y_d = dalloc(n * 4), *din_d = dalloc(n * 4);
		float *gy, *gd, *gio;

		a[0] = 60.0f; /* exp overflows: tanh saturates to 1 */
		a[1] = -60.0f;
		quantize(a, n, t);
		quantize(dout, n, t);
		for (size_t i = 0; i < n; i++) {
			float x = a[i], th = gelu_t_ref(x);

			y[i] = 0.5f * x * (1.0f + th);
			din[i] = dout[i] * (0.5f * (1.0f + th) +
					    0.5f * x * (1.0f - th * th) * 0.7978845608028654f *
						    (1.0f + 3.0f * 0.044715f * x * x));
		}
		a_d = dput_t(a, n, t);
		dout_d = dput_t(dout, n, t);
		io_d = dput_t(dout, n, t);
		CRUN_CUDA_CHECK(crun__k_gelu_fwd(a_d, y_d, t, n, st));
		CRUN_CUDA_CHECK(crun__k_gelu_bwd(dout_d, a_d, din_d, t, n, st));
		/* in place, as model.c calls it */
		CRUN_CUDA_CHECK(crun__k_gelu_bwd(io_d, a_d, io_d, t, n, st));
		gy = dget_t(y_d, n, t);
		gd = dget_t(din_d, n, t);
		gio = dget_t(io_d, n, t);
		EXPECT_L2(gy, y, n, ktol(t), "gelu forward %s\n", tname(t));
		EXPECT_L2(gd, din, n, ktol(t), "gelu backward %s\n", tname(t));
		assert_memory_equal(gio, gd, n * sizeof(float));
		assert_true(isfinite(gy[0]) && isfinite(gy[1]) && isfinite(gd[0]) &&
			    isfinite(gd[1]));
		free(a), free(dout), free(y), free(din), free(gy), free(gd), free(gio);
		cudaFree(a_d), cudaFree(y_d), cudaFree(din_d), cudaFree(dout_d), cudaFree(io_d);
	}
}

static void test_xent(void **state)
{
	enum crun__dtype types[2] = {CRUN_DTYPE_F32, CRUN_DTYPE_BF16};
	int B = 19, T = 5, V = CRUN_MODEL_VOCAB;
	size_t n = (size_t)B * V;
	float scale = 1.0f / 19;

	(void)state;
	for (int k = 0; k < 2; k++) {
		enum crun__dtype t = types[k];
		float *z = randn(n, 30, 4.0f), *p = malloc(n * sizeof(float));
		float *d = malloc(n * sizeof(float)), *loss = malloc(B * sizeof(float));
		uint8_t *tok = rand_tokens(B, T, 31);
		uint8_t *tok_d = dput(tok, (size_t)B * (T + 1));
		float *z_d = dput(z, n * sizeof(float)), *l_d = dalloc(B * sizeof(float));
		void *dz_d = dalloc(n * sizeof(float));
		double *acc = dalloc(sizeof(double)), lsum = 0;
		float *gp, *gl, *gd, *gdt;

		for (int b = 0; b < B; b++) {
			float *zr = z + (size_t)b * V, mx = zr[0];
			int y = tok[(size_t)b * (T + 1) + T];
			double s = 0;

			for (int j = 1; j < V; j++)
				mx = zr[j] > mx ? zr[j] : mx;
			for (int j = 0; j < V; j++)
				s += expf(zr[j] - mx);
			loss[b] = (float)(log(s) - (zr[y] - mx));
			lsum += loss[b];
			for (int j = 0; j < V; j++) {
				p[(size_t)b * V + j] = (float)(expf(zr[j] - mx) / s);
				d[(size_t)b * V + j] =
					(p[(size_t)b * V + j] - (j == y ? 1.0f : 0.0f)) * scale;
			}
		}
		CRUN_CUDA_CHECK(crun__k_xent_fwd(z_d, tok_d, B, T, l_d, st));
		CRUN_CUDA_CHECK(crun__k_sum_add(l_d, B, acc, st));
		gp = dget(z_d, n);
		gl = dget(l_d, (size_t)B);
		EXPECT_L2(gp, p, n, TOL_F32_KERNEL, "softmax probabilities\n");
		EXPECT_L2(gl, loss, (size_t)B, TOL_F32_KERNEL, "cross-entropy losses\n");
		EXPECT_REL(dget_f64(acc), lsum, TOL_F32_KERNEL, "summed loss\n");
		CRUN_CUDA_CHECK(crun__k_xent_bwd(z_d, dz_d, t, tok_d, B, T, scale, st));
		gd = dget(z_d, n);
		gdt = dget_t(dz_d, n, t);
		EXPECT_L2(gd, d, n, TOL_F32_KERNEL, "cross-entropy gradient\n");
		EXPECT_L2(gdt, d, n, ktol(t), "cross-entropy gradient as %s\n", tname(t));
		free(z), free(p), free(d), free(loss), free(tok), free(gp), free(gl), free(gd);
		free(gdt);
		cudaFree(tok_d), cudaFree(z_d), cudaFree(l_d), cudaFree(dz_d), cudaFree(acc);
	}
}

static void test_embedding(void **state)
{
	enum crun__dtype types[2] = {CRUN_DTYPE_F32, CRUN_DTYPE_BF16};
	int B = 23, T = 9, d = 6, C = T * d;
	size_t n = (size_t)B * C, V = CRUN_MODEL_VOCAB;
	float *ws = dalloc(2 * (size_t)CRUN_K_COL_SPLITS * C * sizeof(float));

	(void)state;
	for (int k = 0; k < 2; k++) {
		enum crun__dtype t = types[k];
		float *tok = randn(V * d, 40, 1.0f), *pos = randn((size_t)C, 41, 1.0f);
		float *dx = randn(n, 42, 1.0f), *x0 = malloc(n * sizeof(float));
		float *dtok = calloc(V * d, sizeof(float)),
		      *dpos = calloc((size_t)C, sizeof(float));
		uint8_t *tk = rand_tokens(B, T, 43), *tk_d = dput(tk, (size_t)B * (T + 1));
		void *tok_d, *pos_d, *x0_d = dalloc(n * sizeof(float));
		float *dx_d = dput(dx, n * sizeof(float)), *dtok_d = dalloc(V * d * sizeof(float));
		float *dpos_d = dalloc((size_t)C * sizeof(float)), *gx, *gt, *gp;

		quantize(tok, V * d, t);
		quantize(pos, (size_t)C, t);
		for (int b = 0; b < B; b++)
			for (int p = 0; p < T; p++)
				for (int j = 0; j < d; j++) {
					int v = tk[(size_t)b * (T + 1) + p];
					size_t i = (size_t)b * C + (size_t)p * d + j;

					x0[i] = tok[(size_t)v * d + j] + pos[(size_t)p * d + j];
					dtok[(size_t)v * d + j] += dx[i];
					dpos[(size_t)p * d + j] += dx[i];
				}
		tok_d = dput_t(tok, V * d, t);
		pos_d = dput_t(pos, (size_t)C, t);
		CRUN_CUDA_CHECK(crun__k_embed_fwd(tk_d, B, T, d, tok_d, pos_d, x0_d, t, st));
		CRUN_CUDA_CHECK(crun__k_embed_bwd_tok(tk_d, B, T, d, dx_d, dtok_d, st));
		CRUN_CUDA_CHECK(crun__k_colsum_add(dx_d, CRUN_DTYPE_F32, B, C, dpos_d, ws, st));
		gx = dget_t(x0_d, n, t);
		gt = dget(dtok_d, V * d);
		gp = dget(dpos_d, (size_t)C);
		EXPECT_L2(gx, x0, n, ktol(t), "embedding forward %s\n", tname(t));
		EXPECT_L2(gt, dtok, V * d, TOL_F32_KERNEL, "token embedding gradient\n");
		EXPECT_L2(gp, dpos, (size_t)C, TOL_F32_KERNEL, "position embedding gradient\n");
		free(tok), free(pos), free(dx), free(x0), free(dtok), free(dpos), free(tk);
		free(gx), free(gt), free(gp);
		cudaFree(tk_d), cudaFree(tok_d), cudaFree(pos_d), cudaFree(x0_d), cudaFree(dx_d);
		cudaFree(dtok_d), cudaFree(dpos_d);
	}
	cudaFree(ws);
}

static struct crun__model *small_model(int layers)
{
	struct crun__model_config mc = {12, 8, 48, layers, 4, 0.02f};
	char err[256];
	struct crun__model *m = crun__model_create(&mc, err, sizeof(err));

	assert_non_null(m);
	return m;
}

/* AdamW, the gradient norm and the clip scale against optim.c. */
static void test_adamw_norm(void **state)
{
	struct crun__model *m = small_model(1);
	struct crun__optim o = {1e-2, CRUN_LR_COSINE, 0, 0.1, 0.9, 0.95, 1e-8, 0.1, 1.0};
	size_t n = m->n_params;
	float *p = randn(n, 50, 0.1f), *g = randn(n, 51, 0.01f), *mm = randn(n, 52, 0.001f);
	float *vv = randn(n, 53, 0.001f), *p_d, *g_d, *m_d, *v_d, *gs_d, *gp, *gm, *gv;
	double *part = dalloc(CRUN_K_SUMSQ_BLOCKS * sizeof(double)), *sum = dalloc(sizeof(double));
	int64_t t = 3;
	float bc1 = (float)(1.0 - pow(o.beta1, (double)t)), bc2 = (float)(1.0 - pow(o.beta2, 3.0));
	double sumsq, norm;
	float gscale, gsd;

	(void)state;
	for (size_t i = 0; i < n; i++)
		vv[i] = vv[i] * vv[i];
	p_d = dput(p, n * 4), g_d = dput(g, n * 4), m_d = dput(mm, n * 4), v_d = dput(vv, n * 4);
	gs_d = dalloc(sizeof(float));
	sumsq = crun__optim_sumsq(g, n);
	norm = sqrt(sumsq);
	o.grad_clip = norm / 2; /* so that clipping happens */
	gscale = crun__optim_clip_scale(&o, norm);
	CRUN_CUDA_CHECK(crun__k_sumsq_partial(g_d, n, part, st));
	CRUN_CUDA_CHECK(crun__k_sum_f64(part, CRUN_K_SUMSQ_BLOCKS, sum, st));
	CRUN_CUDA_CHECK(crun__k_clip_scale(sum, o.grad_clip, gs_d, st));
	EXPECT_REL(dget_f64(sum), sumsq, 1e-12, "sum of squares\n");
	CRUN_CUDA_CHECK(cudaStreamSynchronize(st));
	CRUN_CUDA_CHECK(cudaMemcpy(&gsd, gs_d, sizeof(float), cudaMemcpyDeviceToHost));
	EXPECT_REL(gsd, gscale, 1e-6, "clip scale\n");
	/* the device's update, tensor by tensor as cuda/parallel.c does */
	for (int i = 0; i < m->n_tensors; i++) {
		const struct crun__tensor *tn = &m->tensors[i];

		CRUN_CUDA_CHECK(crun__k_adamw(p_d + tn->offset, g_d + tn->offset, m_d + tn->offset,
					      v_d + tn->offset, tn->numel, (float)o.beta1,
					      (float)o.beta2, (float)o.eps, bc1, bc2, (float)o.lr,
					      tn->decay ? (float)o.weight_decay : 0.0f, gs_d, st));
	}
	{
		float *p0 = malloc(n * sizeof(float)), *up = malloc(n * sizeof(float));
		float *upd = malloc(n * sizeof(float));

		memcpy(p0, p, n * sizeof(float));
		crun__optim_adamw(&o, m, 0, n, p, g, mm, vv, t, o.lr, gsd);
		gp = dget(p_d, n);
		gm = dget(m_d, n);
		gv = dget(v_d, n);
		for (size_t i = 0; i < n; i++) {
			up[i] = p[i] - p0[i];
			upd[i] = gp[i] - p0[i];
		}
		EXPECT_L2(upd, up, n, TOL_F32_KERNEL, "adamw update\n");
		EXPECT_L2(gm, mm, n, TOL_F32_KERNEL, "adamw first moment\n");
		EXPECT_L2(gv, vv, n, TOL_F32_KERNEL, "adamw second moment\n");
		free(p0), free(up), free(upd);
	}
	free(p), free(g), free(mm), free(vv), free(gp), free(gm), free(gv);
	cudaFree(p_d), cudaFree(g_d), cudaFree(m_d), cudaFree(v_d), cudaFree(gs_d);
	cudaFree(part), cudaFree(sum);
	crun__model_destroy(m);
}

/* ---- units: forward and backward against model.c ---- */

static float *model_params(const struct crun__model *m, uint64_t seed)
{
	float *p = malloc(m->n_params * sizeof(float));
	float *noise = randn(m->n_params, seed + 1, 0.05f);

	assert_non_null(p);
	crun__model_init_params(m, seed, 0, m->n_params, p);
	/* LayerNorm gains of 1 and zero biases would hide mistakes */
	for (size_t i = 0; i < m->n_params; i++)
		p[i] += noise[i];
	free(noise);
	return p;
}

static void check_units(enum crun__dtype t, bool recompute)
{
	struct crun__model *m = small_model(2);
	int B = 10, T = m->cfg.context;
	size_t n = m->n_params;
	float *p = model_params(m, 60), *g = calloc(n, sizeof(float)), *gg;
	float scale = 1.0f / (float)B;
	uint8_t *tk = rand_tokens(B, T, 61), *tk_d = dput(tk, (size_t)B * (T + 1));
	struct crun__model_acts *a = crun__model_acts_create(m, B);
	struct crun__cuda_acts *ga = crun__cuda_acts_create(ctx, m, B, t, recompute);
	float *p_d = dput(p, n * sizeof(float)), *g_d = dalloc(n * sizeof(float));
	char *pc_d = dalloc(n * crun__dtype_size(t));
	size_t es = crun__dtype_size(t);
	double loss, gloss;
	bool bf = t == CRUN_DTYPE_BF16;

	assert_non_null(a);
	assert_non_null(ga);
	CRUN_CUDA_CHECK(crun__k_cast(p_d, CRUN_DTYPE_F32, pc_d, t, n, st));
	CRUN_CUDA_CHECK(cudaMemsetAsync(crun__cuda_acts_loss(ga), 0, sizeof(double), st));
	for (int u = 0; u < m->n_units; u++) {
		crun__model_forward_unit(m, u, p + m->unit_off[u], a, tk, B);
		crun__cuda_forward_unit(ctx, m, u, pc_d + m->unit_off[u] * es, ga, tk_d, B);
	}
	loss = crun__model_loss_sum(a);
	gloss = dget_f64(crun__cuda_acts_loss(ga));
	EXPECT_REL(gloss, loss, bf ? TOL_BF16_LOSS : TOL_F32_LOSS, "summed loss %s%s\n", tname(t),
		   recompute ? " (recompute)" : "");
	for (int u = m->n_units - 1; u >= 0; u--) {
		crun__model_backward_unit(m, u, p + m->unit_off[u], g + m->unit_off[u], a, tk, B,
					  scale);
		crun__cuda_backward_unit(ctx, m, u, pc_d + m->unit_off[u] * es,
					 g_d + m->unit_off[u], ga, tk_d, B, scale);
	}
	gg = dget(g_d, n);
	for (int i = 0; i < m->n_tensors; i++) {
		const struct crun__tensor *tn = &m->tensors[i];

		EXPECT_L2(gg + tn->offset, g + tn->offset, tn->numel,
			  bf ? TOL_BF16_GRAD : TOL_F32_GRAD, "gradient of %s, %s%s\n", tn->name,
			  tname(t), recompute ? " (recompute)" : "");
	}
	free(p), free(g), free(gg), free(tk);
	crun__model_acts_destroy(a);
	crun__cuda_acts_destroy(ctx, ga);
	cudaFree(tk_d), cudaFree(p_d), cudaFree(g_d), cudaFree(pc_d);
	crun__model_destroy(m);
}

static void test_units_fp32(void **state)
{
	(void)state;
	check_units(CRUN_DTYPE_F32, false);
	check_units(CRUN_DTYPE_F32, true);
}

static void test_units_bf16(void **state)
{
	(void)state;
	check_units(CRUN_DTYPE_BF16, false);
	check_units(CRUN_DTYPE_BF16, true);
}

/* ---- whole steps of every strategy against crun__parallel_step ---- */

static struct crun__comm *single_comm(const char *backend)
{
	struct crun__comm_opts o;
	char err[256];
	struct crun__comm *c;

	memset(&o, 0, sizeof(o));
	o.backend = backend;
	o.world_size = 1;
	c = crun__comm_create(&o, err, sizeof(err));
	if (!c)
		print_error("comm backend %s: %s\n", backend, err);
	return c;
}

struct step_case {
	enum crun__strategy strategy;
	int accum;
	enum crun__dtype t;
	bool recompute;
	const char *backend;
};

static void check_steps(const struct step_case *sc)
{
	struct crun__model *m = small_model(3);
	int micro = 8, T = m->cfg.context, steps = 3;
	struct crun__parallel_opts po = {sc->strategy, sc->accum, micro, 8192};
	struct crun__cuda_parallel_opts co = {sc->t, false, sc->recompute};
	struct crun__optim o = {3e-3, CRUN_LR_COSINE, 0, 0.1, 0.9, 0.95, 1e-8, 0.1, 1.0};
	struct crun__comm *cc = single_comm("cpu"), *gc = single_comm(sc->backend);
	struct crun__parallel *cpu, *host;
	struct crun__cuda_parallel *gpu;
	struct crun__parallel_arrays ca, ha;
	bool bf = sc->t == CRUN_DTYPE_BF16;
	int64_t gb = (int64_t)sc->accum * micro;
	char err[512], what[160];
	float *p0, *du, *cu;
	double l_c, l_g, n_c, n_g, e_c = 0, e_g = 0;

	snprintf(what, sizeof(what), "%s, grad_accum %d, %s%s, %s backend",
		 crun__strategy_name(sc->strategy), sc->accum, tname(sc->t),
		 sc->recompute ? ", recompute" : "", sc->backend);
	assert_non_null(cc);
	assert_non_null(gc);
	cpu = crun__parallel_create(m, cc, &po);
	host = crun__parallel_create_storage(m, gc, &po);
	assert_non_null(cpu);
	assert_non_null(host);
	crun__parallel_init_params(cpu, 70);
	crun__parallel_init_params(host, 70);
	gpu = crun__cuda_parallel_create(ctx, m, host, gc, &co, err, sizeof(err));
	if (!gpu)
		fail_msg("%s: %s", what, err);
	crun__cuda_parallel_upload(gpu);
	crun__parallel_arrays(cpu, &ca);
	p0 = malloc(ca.p_len * sizeof(float));
	memcpy(p0, ca.p, ca.p_len * sizeof(float));
	for (int s = 1; s <= steps; s++) {
		uint8_t *tk = rand_tokens((int)gb, T, 80 + (uint64_t)s);

		assert_int_equal(crun__parallel_step(cpu, &o, tk, gb, s, o.lr, &l_c, &n_c), 0);
		assert_int_equal(crun__cuda_parallel_step(gpu, &o, tk, gb, s, o.lr, &l_g, &n_g), 0);
		EXPECT_REL(l_g, l_c, bf ? TOL_BF16_LOSS : TOL_F32_LOSS, "%s: loss of step %d\n",
			   what, s);
		EXPECT_REL(n_g, n_c, bf ? TOL_BF16_GRAD : TOL_F32_GRAD,
			   "%s: gradient norm of step %d\n", what, s);
		free(tk);
	}
	{
		/* the forward pass alone (validation), also with no rows */
		uint8_t *tk = rand_tokens(micro, T, 99);

		assert_int_equal(crun__parallel_forward(cpu, tk, micro, &e_c), 0);
		assert_int_equal(crun__cuda_parallel_forward(gpu, tk, micro, &e_g), 0);
		assert_int_equal(crun__cuda_parallel_forward(gpu, tk, 0, &e_g), 0);
		EXPECT_REL(e_g, e_c, bf ? TOL_BF16_LOSS : TOL_F32_LOSS, "%s: validation loss\n",
			   what);
		free(tk);
	}
	if (!bf) {
		crun__cuda_parallel_download(gpu, true);
		crun__parallel_arrays(host, &ha);
		assert_int_equal(ha.p_len, ca.p_len);
		du = malloc(ca.p_len * sizeof(float));
		cu = malloc(ca.p_len * sizeof(float));
		for (size_t i = 0; i < ca.p_len; i++) {
			du[i] = ha.p[i] - p0[i];
			cu[i] = ca.p[i] - p0[i];
		}
		EXPECT_L2(du, cu, ca.p_len, TOL_F32_UPDATE, "%s: parameter updates\n", what);
		EXPECT_L2(ha.m, ca.m, ca.optim_len, TOL_F32_GRAD, "%s: first moments\n", what);
		EXPECT_L2(ha.v, ca.v, ca.optim_len, TOL_F32_GRAD, "%s: second moments\n", what);
		free(du), free(cu);
	}
	free(p0);
	crun__cuda_parallel_destroy(gpu);
	crun__parallel_destroy(cpu);
	crun__parallel_destroy(host);
	crun__comm_destroy(cc);
	crun__comm_destroy(gc);
	crun__model_destroy(m);
}

static void test_steps_fp32(void **state)
{
	static const struct step_case cases[] = {
		{CRUN_STRATEGY_DDP, 1, CRUN_DTYPE_F32, false, "cpu"},
		{CRUN_STRATEGY_DDP, 2, CRUN_DTYPE_F32, false, "cpu"},
		{CRUN_STRATEGY_ZERO1, 1, CRUN_DTYPE_F32, false, "cpu"},
		{CRUN_STRATEGY_ZERO2, 1, CRUN_DTYPE_F32, false, "cpu"},
		{CRUN_STRATEGY_ZERO2, 2, CRUN_DTYPE_F32, false, "cpu"},
		{CRUN_STRATEGY_ZERO3, 1, CRUN_DTYPE_F32, false, "cpu"},
		{CRUN_STRATEGY_ZERO3, 2, CRUN_DTYPE_F32, true, "cpu"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_steps(&cases[i]);
}

static void test_steps_bf16(void **state)
{
	static const struct step_case cases[] = {
		{CRUN_STRATEGY_DDP, 1, CRUN_DTYPE_BF16, false, "cpu"},
		{CRUN_STRATEGY_ZERO3, 2, CRUN_DTYPE_BF16, true, "cpu"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_steps(&cases[i]);
}

/* The nccl backend with one rank: the communicator, the asynchronous
 * collectives on its stream and the bf16 reduction. */
static void test_steps_nccl(void **state)
{
	static const struct step_case cases[] = {
		{CRUN_STRATEGY_DDP, 1, CRUN_DTYPE_F32, false, "nccl"},
		{CRUN_STRATEGY_ZERO2, 1, CRUN_DTYPE_F32, false, "nccl"},
		{CRUN_STRATEGY_ZERO3, 2, CRUN_DTYPE_F32, false, "nccl"},
		{CRUN_STRATEGY_ZERO1, 1, CRUN_DTYPE_BF16, false, "nccl"},
	};
	struct crun__comm *c;
	double x[3] = {1, 2, 3};
	float f[2] = {4, 5}, *d, *back;

	(void)state;
	c = single_comm("nccl");
	assert_non_null(c);
	assert_string_equal(crun__comm_backend(c), "nccl");
	/* the synchronous interface with host and device buffers */
	assert_int_equal(crun__comm_allreduce_f64(c, x, 3), 0);
	assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3);
	d = dput(f, sizeof(f));
	assert_int_equal(crun__comm_allreduce_f32(c, d, 2), 0);
	assert_int_equal(crun__comm_allreduce_f32(c, f, 2), 0);
	assert_int_equal(crun__comm_barrier(c), 0);
	back = dget(d, 2);
	assert_true(back[0] == 4 && back[1] == 5 && f[0] == 4 && f[1] == 5);
	free(back);
	cudaFree(d);
	crun__comm_destroy(c);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_steps(&cases[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cast),	   cmocka_unit_test(test_bias_colsum),
		cmocka_unit_test(test_layernorm),  cmocka_unit_test(test_gelu),
		cmocka_unit_test(test_xent),	   cmocka_unit_test(test_embedding),
		cmocka_unit_test(test_adamw_norm), cmocka_unit_test(test_units_fp32),
		cmocka_unit_test(test_units_bf16), cmocka_unit_test(test_steps_fp32),
		cmocka_unit_test(test_steps_bf16), cmocka_unit_test(test_steps_nccl),
	};
	char why[256];
	int count, rc;

	crun__log_init("test_cuda", CRUN_LOG_INFO);
	if (crun__cuda_device_count(&count, why, sizeof(why))) {
		printf("skipping the GPU tests: %s\n", why);
		return 77;
	}
	ctx = crun__cuda_ctx_create(0, why, sizeof(why));
	if (!ctx) {
		printf("skipping the GPU tests: %s\n", why);
		return 77;
	}
	st = ctx->stream;
	printf("GPU tests on cuda:0 %s\n", ctx->name);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	crun__cuda_ctx_destroy(ctx);
	return rc;
}
