/* Device choice, context, tracked allocations and fatal checks. */
#include "trainer/cuda/runtime.h"
#include "common/util.h"

#include "common/log.h"
#include "trainer/fatal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLAS_WORKSPACE (32u << 20)

struct crun__cuda_alloc_rec {
	void *p;
	size_t bytes;
	bool host;
};

/* "cudaMalloc" out of "cudaMalloc(&p, n)": the name, not the arguments. */
static int call_name_len(const char *call)
{
	const char *paren = strchr(call, '(');

	return paren ? (int)(paren - call) : (int)strlen(call);
}

static const char *base_name(const char *file)
{
	const char *slash = strrchr(file, '/');

	return slash ? slash + 1 : file;
}

void crun__cuda_check_at(cudaError_t rc, const char *call, const char *file, int line)
{
	if (rc == cudaSuccess)
		return;
	exit(crun__train_fatal_at(CRUN__EXIT_FAILED, file, line, "CRUN_CUDA_CHECK",
				  "CUDA call '%.*s' failed at %s:%d: %s (%s)", call_name_len(call),
				  call, base_name(file), line, cudaGetErrorString(rc),
				  cudaGetErrorName(rc)));
}

void crun__cublas_check_at(cublasStatus_t rc, const char *call, const char *file, int line)
{
	if (rc == CUBLAS_STATUS_SUCCESS)
		return;
	exit(crun__train_fatal_at(CRUN__EXIT_FAILED, file, line, "CRUN_CUBLAS_CHECK",
				  "cuBLAS call '%.*s' failed at %s:%d: %s", call_name_len(call),
				  call, base_name(file), line, cublasGetStatusString(rc)));
}

int crun__cuda_device_count(int *count, char *err, size_t errlen)
{
	cudaError_t rc = cudaGetDeviceCount(count);

	if (rc != cudaSuccess) {
		crun__seterr(err, errlen, "no CUDA device: %s", cudaGetErrorString(rc));
		/* reset the runtime's last error: the failure is reported here */
		(void)cudaGetLastError();
		*count = 0;
		return -ENODEV;
	}
	if (*count < 1) {
		crun__seterr(err, errlen, "no CUDA device visible (CUDA_VISIBLE_DEVICES='%s')",
			     getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
		return -ENODEV;
	}
	return 0;
}

int crun__cuda_pick_device(int local_rank, bool shared, int *device, char *err, size_t errlen)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	int count, rc;

	rc = crun__cuda_device_count(&count, err, errlen);
	if (rc)
		return rc;
	if (local_rank < 0)
		local_rank = 0;
	if (local_rank < count) {
		*device = local_rank;
		return 0;
	}
	if (!shared) {
		crun__seterr(err, errlen,
			     "LOCAL_RANK %d needs %d GPUs but %d %s visible "
			     "(CUDA_VISIBLE_DEVICES='%s'): "
			     "the nccl backend needs one GPU per rank",
			     local_rank, local_rank + 1, count, count == 1 ? "is" : "are",
			     vis ? vis : "");
		return -ENODEV;
	}
	*device = local_rank % count;
	return 0;
}

static int track(struct crun__cuda_ctx *ctx, void *p, size_t bytes, bool host)
{
	if (ctx->n_allocs == ctx->cap_allocs) {
		size_t cap = ctx->cap_allocs ? 2 * ctx->cap_allocs : 32;
		struct crun__cuda_alloc_rec *a = realloc(ctx->allocs, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		ctx->allocs = a;
		ctx->cap_allocs = cap;
	}
	ctx->allocs[ctx->n_allocs].p = p;
	ctx->allocs[ctx->n_allocs].bytes = bytes;
	ctx->allocs[ctx->n_allocs].host = host;
	ctx->n_allocs++;
	if (!host) {
		ctx->bytes += bytes;
		if (ctx->bytes > ctx->peak_bytes)
			ctx->peak_bytes = ctx->bytes;
	}
	return 0;
}

void *crun__cuda_alloc(struct crun__cuda_ctx *ctx, size_t bytes)
{
	void *p = NULL;
	cudaError_t rc;

	if (!bytes)
		bytes = 1;
	rc = cudaMalloc(&p, bytes);
	if (rc == cudaErrorMemoryAllocation) {
		(void)cudaGetLastError();
		return NULL;
	}
	CRUN_CUDA_CHECK(rc);
	/* the legacy stream's memset does not order the non-blocking streams
	 * that use the memory: wait for it (allocation is setup work) */
	CRUN_CUDA_CHECK(cudaMemset(p, 0, bytes));
	CRUN_CUDA_CHECK(cudaDeviceSynchronize());
	if (track(ctx, p, bytes, false)) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

void *crun__cuda_host_alloc(struct crun__cuda_ctx *ctx, size_t bytes)
{
	void *p = NULL;
	cudaError_t rc;

	if (!bytes)
		bytes = 1;
	rc = cudaMallocHost(&p, bytes);
	if (rc == cudaErrorMemoryAllocation) {
		(void)cudaGetLastError();
		return NULL;
	}
	CRUN_CUDA_CHECK(rc);
	memset(p, 0, bytes);
	if (track(ctx, p, bytes, true)) {
		cudaFreeHost(p);
		return NULL;
	}
	return p;
}

void crun__cuda_free(struct crun__cuda_ctx *ctx, void *p)
{
	if (!ctx || !p)
		return;
	for (size_t i = 0; i < ctx->n_allocs; i++) {
		struct crun__cuda_alloc_rec *a = &ctx->allocs[i];

		if (a->p != p)
			continue;
		if (a->host) {
			CRUN_CUDA_CHECK(cudaFreeHost(p));
		} else {
			CRUN_CUDA_CHECK(cudaFree(p));
			ctx->bytes -= a->bytes;
		}
		*a = ctx->allocs[--ctx->n_allocs];
		return;
	}
}

size_t crun__cuda_used_bytes(void)
{
	size_t free_b = 0, total_b = 0;

	if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return total_b - free_b;
}

struct crun__cuda_ctx *crun__cuda_ctx_create(int device, char *err, size_t errlen)
{
	struct crun__cuda_ctx *ctx = calloc(1, sizeof(*ctx));
	struct cudaDeviceProp prop;
	void *ws;
	cudaError_t rc;

	if (!ctx) {
		crun__seterr(err, errlen, "out of memory");
		return NULL;
	}
	ctx->device = device;
	rc = cudaSetDevice(device);
	if (rc == cudaSuccess)
		rc = cudaGetDeviceProperties(&prop, device);
	if (rc != cudaSuccess) {
		crun__seterr(err, errlen, "cannot use CUDA device %d: %s", device,
			     cudaGetErrorString(rc));
		free(ctx);
		return NULL;
	}
	snprintf(ctx->name, sizeof(ctx->name), "%s", prop.name);
	ctx->total_bytes = prop.totalGlobalMem;
	CRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
	if (cublasCreate(&ctx->blas) != CUBLAS_STATUS_SUCCESS) {
		crun__seterr(err, errlen, "cannot create a cuBLAS handle on device %d", device);
		CRUN_CUDA_CHECK(cudaStreamDestroy(ctx->stream));
		free(ctx);
		return NULL;
	}
	CRUN_CUBLAS_CHECK(cublasSetStream(ctx->blas, ctx->stream));
	ws = crun__cuda_alloc(ctx, BLAS_WORKSPACE);
	if (!ws) {
		crun__seterr(err, errlen, "out of GPU memory for cuBLAS's workspace");
		crun__cuda_ctx_destroy(ctx);
		return NULL;
	}
	CRUN_CUBLAS_CHECK(cublasSetWorkspace(ctx->blas, ws, BLAS_WORKSPACE));
	return ctx;
}

void crun__cuda_ctx_destroy(struct crun__cuda_ctx *ctx)
{
	if (!ctx)
		return;
	CRUN_CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
	cublasDestroy(ctx->blas);
	while (ctx->n_allocs)
		crun__cuda_free(ctx, ctx->allocs[ctx->n_allocs - 1].p);
	free(ctx->allocs);
	CRUN_CUDA_CHECK(cudaStreamDestroy(ctx->stream));
	free(ctx);
}
