/* CUDA kernels of crun-train (contracts in kernels.h).
 *
 * One file, so that nvcc runs once per build: it is the slowest step of
 * the CUDA build. Kernels are templates over the compute type T (float or
 * __nv_bfloat16); every launcher switches on enum crun__dtype. Arithmetic
 * is float32 (double for loss and norm sums); a T is rounded once, on
 * store. Block sizes are multiples of 32 (the reductions rely on it). */
#include "trainer/cuda/kernels.h"

#include <cuda_bf16.h>
#include <math_constants.h>

typedef __nv_bfloat16 bf16;

#define GELU_K 0.7978845608028654f /* sqrt(2/pi), as in model.c */
#define GELU_C 0.044715f
#define LN_EPS 1e-5f
#define VOCAB 256
#define THREADS 256
/* The cross-entropy kernels run one thread per logit of a row. */
static_assert(VOCAB == THREADS, "xent kernels: one thread per logit");

/* kernel<<<grid, block, 0, stream>>>(args...), spelled so that cudasim
 * (tests/cudasim), which compiles this file as C++ for the CPU, can run
 * the same kernels. */
#if defined(__CUDACC__)
#define LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#elif defined(CUDASIM_LAUNCH)
#define LAUNCH CUDASIM_LAUNCH
#else
#error "kernels.cu needs nvcc or cudasim"
#endif

namespace
{

__device__ __forceinline__ float ld(const float *p, size_t i)
{
	return p[i];
}

__device__ __forceinline__ float ld(const bf16 *p, size_t i)
{
	return __bfloat162float(p[i]);
}

__device__ __forceinline__ void st(float *p, size_t i, float v)
{
	p[i] = v;
}

__device__ __forceinline__ void st(bf16 *p, size_t i, float v)
{
	p[i] = __float2bfloat16(v);
}

template <typename V> __device__ __forceinline__ V warp_sum(V v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Sum over the block, returned to every thread. sh holds 32 V. The first
 * barrier lets a block call it several times in a row. */
template <typename V> __device__ V block_sum(V v, V *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	int nw = (blockDim.x + 31) >> 5;

	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	if (wid == 0) {
		v = lane < nw ? sh[lane] : (V)0;
		v = warp_sum(v);
		if (lane == 0)
			sh[0] = v;
	}
	__syncthreads();
	return sh[0];
}

__device__ float block_max(float v, float *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	int nw = (blockDim.x + 31) >> 5;

	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	if (wid == 0) {
		v = lane < nw ? sh[lane] : -CUDART_INF_F;
		v = warp_max(v);
		if (lane == 0)
			sh[0] = v;
	}
	__syncthreads();
	return sh[0];
}

/* Blocks for a grid-stride loop over n elements. */
unsigned grid_for(size_t n)
{
	size_t g = (n + THREADS - 1) / THREADS;

	if (g > 65536)
		g = 65536;
	return g ? (unsigned)g : 1u;
}

/* tanh(u) as 1 - 2 / (exp(2u) + 1), u = sqrt(2/pi) (x + 0.044715 x^3) */
__device__ __forceinline__ float gelu_tanh(float x)
{
	return 1.0f - 2.0f / (expf(2.0f * GELU_K * (x + GELU_C * x * x * x)) + 1.0f);
}

template <typename TI, typename TO> __global__ void cast_k(const TI *in, TO *out, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		st(out, i, ld(in, i));
}

template <typename TO, typename TB>
__global__ void bias_rows_k(TO *out, const TB *bias, const float *add, size_t n, int cols)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = ld(bias, i % (size_t)cols);

		if (add)
			v += add[i];
		st(out, i, v);
	}
}

/* Column sums, stage 1: block (32, 8) sums rows [y * per, (y+1) * per) of
 * 32 columns into part[y][c]. */
template <typename T>
__global__ void colsum_part_k(const T *in, int rows, int cols, int per, float *part)
{
	__shared__ float sh[8][33];
	int tx = threadIdx.x, ty = threadIdx.y;
	int c = blockIdx.x * 32 + tx;
	int r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
	float acc = 0;

	if (c < cols)
		for (int r = r0 + ty; r < r1; r += 8)
			acc += ld(in, (size_t)r * cols + c);
	sh[ty][tx] = acc;
	__syncthreads();
	if (ty == 0 && c < cols) {
		float s = 0;

		for (int k = 0; k < 8; k++)
			s += sh[k][tx];
		part[(size_t)blockIdx.y * cols + c] = s;
	}
}

/* Column sums, stage 2: out[c] += sum over splits of part[y][c]. */
__global__ void colsum_fin_k(const float *part, int splits, int cols, float *out)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	float s = 0;

	if (c >= cols)
		return;
	for (int y = 0; y < splits; y++)
		s += part[(size_t)y * cols + c];
	out[c] += s;
}

template <typename T>
__global__ void embed_fwd_k(const uint8_t *tokens, size_t n, int context, int dim, const T *tok,
			    const T *pos, T *x0)
{
	size_t C = (size_t)context * dim;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t b = i / C, c = i % C;
		size_t t = c / dim, k = c % dim;
		unsigned v = tokens[b * (context + 1) + t];

		st(x0, i, ld(tok, (size_t)v * dim + k) + ld(pos, c));
	}
}

__global__ void embed_bwd_tok_k(const uint8_t *tokens, size_t n, int context, int dim,
				const float *dx0, float *dtok)
{
	size_t C = (size_t)context * dim;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t b = i / C, c = i % C;
		size_t t = c / dim, k = c % dim;
		unsigned v = tokens[b * (context + 1) + t];

		atomicAdd(&dtok[(size_t)v * dim + k], dx0[i]);
	}
}

/* One block per row. */
template <typename T>
__global__ void ln_fwd_k(const float *x, int cols, const T *gamma, const T *beta, T *out,
			 float *mean, float *rstd)
{
	__shared__ float sh[32];
	size_t r = blockIdx.x;
	const float *xr = x + r * cols;
	float s = 0, ss = 0, mu, rs;

	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		s += xr[j];
	mu = block_sum(s, sh) / (float)cols;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float c = xr[j] - mu;

		ss += c * c;
	}
	rs = 1.0f / sqrtf(block_sum(ss, sh) / (float)cols + LN_EPS);
	if (threadIdx.x == 0) {
		mean[r] = mu;
		rstd[r] = rs;
	}
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		st(out, r * cols + j, (xr[j] - mu) * rs * ld(gamma, j) + ld(beta, j));
}

/* One block per row: dx += rstd (dy g - mean(dy g) - xhat mean(dy g xhat)). */
template <typename T>
__global__ void ln_bwd_dx_k(const float *dout, const float *x, const float *mean, const float *rstd,
			    const T *gamma, int cols, float *dx)
{
	__shared__ float sh[32];
	size_t r = blockIdx.x;
	const float *dy = dout + r * cols, *xr = x + r * cols;
	float *dxr = dx + r * cols;
	float mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0, m1, m2;

	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float g = dy[j] * ld(gamma, j);

		s1 += g;
		s2 += g * ((xr[j] - mu) * rs);
	}
	m1 = block_sum(s1, sh) / (float)cols;
	m2 = block_sum(s2, sh) / (float)cols;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float xh = (xr[j] - mu) * rs;

		dxr[j] += rs * (dy[j] * ld(gamma, j) - m1 - xh * m2);
	}
}

/* gamma and beta gradients, stage 1 (like colsum_part_k): part holds
 * splits x cols sums of dy * xhat, then splits x cols sums of dy. */
__global__ void ln_bwd_dgb_part_k(const float *dout, const float *x, const float *mean,
				  const float *rstd, int rows, int cols, int per, float *part,
				  int splits)
{
	__shared__ float shg[8][33], shb[8][33];
	int tx = threadIdx.x, ty = threadIdx.y;
	int c = blockIdx.x * 32 + tx;
	int r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
	float ag = 0, ab = 0;

	if (c < cols)
		for (int r = r0 + ty; r < r1; r += 8) {
			size_t i = (size_t)r * cols + c;
			float dy = dout[i];

			ag += dy * ((x[i] - mean[r]) * rstd[r]);
			ab += dy;
		}
	shg[ty][tx] = ag;
	shb[ty][tx] = ab;
	__syncthreads();
	if (ty == 0 && c < cols) {
		float sg = 0, sb = 0;

		for (int k = 0; k < 8; k++) {
			sg += shg[k][tx];
			sb += shb[k][tx];
		}
		part[(size_t)blockIdx.y * cols + c] = sg;
		part[((size_t)splits + blockIdx.y) * cols + c] = sb;
	}
}

template <typename T> __global__ void gelu_fwd_k(const T *a, T *out, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float x = ld(a, i);

		st(out, i, 0.5f * x * (1.0f + gelu_tanh(x)));
	}
}

/* din may be dout: each element is read, then written, by one thread */
template <typename T> __global__ void gelu_bwd_k(const T *dout, const T *a, T *din, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float x = ld(a, i), t = gelu_tanh(x);
		float g = 0.5f * (1.0f + t) +
			  0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);

		st(din, i, ld(dout, i) * g);
	}
}

/* One block of VOCAB threads per row. */
__global__ void xent_fwd_k(float *z, const uint8_t *tokens, int context, float *losses)
{
	__shared__ float sh[32];
	size_t r = blockIdx.x;
	int j = threadIdx.x;
	int y = tokens[r * (context + 1) + context];
	float v = z[r * VOCAB + j], mx, e, s;

	mx = block_max(v, sh);
	e = expf(v - mx);
	s = block_sum(e, sh);
	z[r * VOCAB + j] = e / s;
	if (j == y)
		losses[r] = logf(s) - (v - mx);
}

template <typename T>
__global__ void xent_bwd_k(float *p, T *dz, const uint8_t *tokens, int context, float scale)
{
	size_t r = blockIdx.x;
	int j = threadIdx.x;
	int y = tokens[r * (context + 1) + context];
	size_t i = r * VOCAB + j;
	float d = (p[i] - (j == y ? 1.0f : 0.0f)) * scale;

	p[i] = d;
	st(dz, i, d);
}

__global__ void sum_add_k(const float *x, int n, double *acc)
{
	__shared__ double sh[32];
	double s = 0;

	for (int i = threadIdx.x; i < n; i += blockDim.x)
		s += x[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		*acc += s;
}

__global__ void sumsq_partial_k(const float *x, size_t n, double *partials)
{
	__shared__ double sh[32];
	double s = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		s += (double)x[i] * x[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = s;
}

__global__ void sum_f64_k(const double *x, size_t n, double *out)
{
	__shared__ double sh[32];
	double s = 0;

	for (size_t i = threadIdx.x; i < n; i += blockDim.x)
		s += x[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		*out = s;
}

__global__ void clip_scale_k(const double *sumsq, double clip, float *gscale)
{
	double norm = sqrt(*sumsq);

	*gscale = clip > 0 && norm > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
}

__global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
			float eps, float bc1, float bc2, float lr, float wd, const float *gscale)
{
	float gs = *gscale;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float gi = g[i] * gs;
		float mi = b1 * m[i] + (1.0f - b1) * gi;
		float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
		float mh = mi / bc1, vh = vi / bc2;

		m[i] = mi;
		v[i] = vi;
		p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
	}
}

/* Splits of a column reduction over rows. */
int col_splits(int rows, int *per)
{
	int splits = (rows + 63) / 64;

	if (splits > CRUN_K_COL_SPLITS)
		splits = CRUN_K_COL_SPLITS;
	if (splits < 1)
		splits = 1;
	*per = (rows + splits - 1) / splits;
	return splits;
}

} // namespace

extern "C" {

cudaError_t crun__k_cast(const void *in, enum crun__dtype tin, void *out, enum crun__dtype tout,
			 size_t n, cudaStream_t stream)
{
	if (!n)
		return cudaSuccess;
	if (tin == tout)
		return cudaMemcpyAsync(out, in, n * crun__dtype_size(tin), cudaMemcpyDeviceToDevice,
				       stream);
	if (tin == CRUN_DTYPE_F32)
		LAUNCH(cast_k, grid_for(n), THREADS, stream, (const float *)in, (bf16 *)out, n);
	else
		LAUNCH(cast_k, grid_for(n), THREADS, stream, (const bf16 *)in, (float *)out, n);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_bias_rows(void *out, enum crun__dtype tout, const void *bias,
			      enum crun__dtype t, const float *add, int rows, int cols,
			      cudaStream_t stream)
{
	size_t n = (size_t)rows * cols;

	if (!n)
		return cudaSuccess;
	if (tout == CRUN_DTYPE_F32 && t == CRUN_DTYPE_F32)
		LAUNCH(bias_rows_k, grid_for(n), THREADS, stream, (float *)out, (const float *)bias,
		       add, n, cols);
	else if (tout == CRUN_DTYPE_F32)
		LAUNCH(bias_rows_k, grid_for(n), THREADS, stream, (float *)out, (const bf16 *)bias,
		       add, n, cols);
	else if (t == CRUN_DTYPE_BF16)
		LAUNCH(bias_rows_k, grid_for(n), THREADS, stream, (bf16 *)out, (const bf16 *)bias,
		       add, n, cols);
	else
		LAUNCH(bias_rows_k, grid_for(n), THREADS, stream, (bf16 *)out, (const float *)bias,
		       add, n, cols);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_colsum_add(const void *in, enum crun__dtype tin, int rows, int cols, float *out,
			       float *ws, cudaStream_t stream)
{
	int per, splits;
	dim3 blk(32, 8), grid;

	if (rows <= 0 || cols <= 0)
		return cudaSuccess;
	splits = col_splits(rows, &per);
	grid = dim3((unsigned)((cols + 31) / 32), (unsigned)splits);
	if (tin == CRUN_DTYPE_F32)
		LAUNCH(colsum_part_k, grid, blk, stream, (const float *)in, rows, cols, per, ws);
	else
		LAUNCH(colsum_part_k, grid, blk, stream, (const bf16 *)in, rows, cols, per, ws);
	LAUNCH(colsum_fin_k, (cols + THREADS - 1) / THREADS, THREADS, stream, ws, splits, cols,
	       out);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_embed_fwd(const uint8_t *tokens, int rows, int context, int dim,
			      const void *tok, const void *pos, void *x0, enum crun__dtype t,
			      cudaStream_t stream)
{
	size_t n = (size_t)rows * context * dim;

	if (!n)
		return cudaSuccess;
	if (t == CRUN_DTYPE_F32)
		LAUNCH(embed_fwd_k, grid_for(n), THREADS, stream, tokens, n, context, dim,
		       (const float *)tok, (const float *)pos, (float *)x0);
	else
		LAUNCH(embed_fwd_k, grid_for(n), THREADS, stream, tokens, n, context, dim,
		       (const bf16 *)tok, (const bf16 *)pos, (bf16 *)x0);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_embed_bwd_tok(const uint8_t *tokens, int rows, int context, int dim,
				  const float *dx0, float *dtok, cudaStream_t stream)
{
	size_t n = (size_t)rows * context * dim;

	if (!n)
		return cudaSuccess;
	LAUNCH(embed_bwd_tok_k, grid_for(n), THREADS, stream, tokens, n, context, dim, dx0, dtok);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_ln_fwd(const float *x, int rows, int cols, const void *gamma, const void *beta,
			   enum crun__dtype t, void *out, float *mean, float *rstd,
			   cudaStream_t stream)
{
	if (rows <= 0 || cols <= 0)
		return cudaSuccess;
	if (t == CRUN_DTYPE_F32)
		LAUNCH(ln_fwd_k, rows, THREADS, stream, x, cols, (const float *)gamma,
		       (const float *)beta, (float *)out, mean, rstd);
	else
		LAUNCH(ln_fwd_k, rows, THREADS, stream, x, cols, (const bf16 *)gamma,
		       (const bf16 *)beta, (bf16 *)out, mean, rstd);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_ln_bwd(const float *dout, const float *x, const float *mean, const float *rstd,
			   const void *gamma, enum crun__dtype t, int rows, int cols, float *dx,
			   float *dgamma, float *dbeta, float *ws, cudaStream_t stream)
{
	int per, splits;
	dim3 blk(32, 8), grid;
	unsigned fin = (unsigned)((cols + THREADS - 1) / THREADS);

	if (rows <= 0 || cols <= 0)
		return cudaSuccess;
	if (t == CRUN_DTYPE_F32)
		LAUNCH(ln_bwd_dx_k, rows, THREADS, stream, dout, x, mean, rstd,
		       (const float *)gamma, cols, dx);
	else
		LAUNCH(ln_bwd_dx_k, rows, THREADS, stream, dout, x, mean, rstd, (const bf16 *)gamma,
		       cols, dx);
	splits = col_splits(rows, &per);
	grid = dim3((unsigned)((cols + 31) / 32), (unsigned)splits);
	LAUNCH(ln_bwd_dgb_part_k, grid, blk, stream, dout, x, mean, rstd, rows, cols, per, ws,
	       splits);
	LAUNCH(colsum_fin_k, fin, THREADS, stream, ws, splits, cols, dgamma);
	LAUNCH(colsum_fin_k, fin, THREADS, stream, ws + (size_t)splits * cols, splits, cols, dbeta);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_gelu_fwd(const void *a, void *out, enum crun__dtype t, size_t n,
			     cudaStream_t stream)
{
	if (!n)
		return cudaSuccess;
	if (t == CRUN_DTYPE_F32)
		LAUNCH(gelu_fwd_k, grid_for(n), THREADS, stream, (const float *)a, (float *)out, n);
	else
		LAUNCH(gelu_fwd_k, grid_for(n), THREADS, stream, (const bf16 *)a, (bf16 *)out, n);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_gelu_bwd(const void *dout, const void *a, void *din, enum crun__dtype t,
			     size_t n, cudaStream_t stream)
{
	if (!n)
		return cudaSuccess;
	if (t == CRUN_DTYPE_F32)
		LAUNCH(gelu_bwd_k, grid_for(n), THREADS, stream, (const float *)dout,
		       (const float *)a, (float *)din, n);
	else
		LAUNCH(gelu_bwd_k, grid_for(n), THREADS, stream, (const bf16 *)dout,
		       (const bf16 *)a, (bf16 *)din, n);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_xent_fwd(float *z, const uint8_t *tokens, int rows, int context, float *losses,
			     cudaStream_t stream)
{
	if (rows <= 0)
		return cudaSuccess;
	LAUNCH(xent_fwd_k, rows, VOCAB, stream, z, tokens, context, losses);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_xent_bwd(float *p, void *dz, enum crun__dtype t, const uint8_t *tokens,
			     int rows, int context, float scale, cudaStream_t stream)
{
	if (rows <= 0)
		return cudaSuccess;
	if (t == CRUN_DTYPE_F32)
		LAUNCH(xent_bwd_k, rows, VOCAB, stream, p, (float *)dz, tokens, context, scale);
	else
		LAUNCH(xent_bwd_k, rows, VOCAB, stream, p, (bf16 *)dz, tokens, context, scale);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_sum_add(const float *x, int n, double *acc, cudaStream_t stream)
{
	if (n <= 0)
		return cudaSuccess;
	LAUNCH(sum_add_k, 1, THREADS, stream, x, n, acc);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_sumsq_partial(const float *x, size_t n, double *partials, cudaStream_t stream)
{
	/* always every block, so that empty ranges still write their zeros */
	LAUNCH(sumsq_partial_k, CRUN_K_SUMSQ_BLOCKS, THREADS, stream, x, n, partials);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_sum_f64(const double *x, size_t n, double *out, cudaStream_t stream)
{
	LAUNCH(sum_f64_k, 1, THREADS, stream, x, n, out);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_clip_scale(const double *sumsq, double clip, float *gscale, cudaStream_t stream)
{
	LAUNCH(clip_scale_k, 1, 1, stream, sumsq, clip, gscale);
	return cudaPeekAtLastError();
}

cudaError_t crun__k_adamw(float *p, const float *g, float *m, float *v, size_t n, float beta1,
			  float beta2, float eps, float bc1, float bc2, float lr, float wd,
			  const float *gscale, cudaStream_t stream)
{
	if (!n)
		return cudaSuccess;
	LAUNCH(adamw_k, grid_for(n), THREADS, stream, p, g, m, v, n, beta1, beta2, eps, bc1, bc2,
	       lr, wd, gscale);
	return cudaPeekAtLastError();
}

} /* extern "C" */
