/* cudasim's own checks, from C as the trainer calls it: what it must
 * refuse (copies of the wrong kind or past an allocation, a bad matrix
 * size, a stale handle), and the ordering it must keep (a stream
 * destroyed while the legacy stream waits for it). */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_copies_checked(void **state)
{
	float host[64], back[64];
	void *d = NULL;

	(void)state;
	for (int i = 0; i < 64; i++)
		host[i] = (float)i;
	assert_int_equal(cudaMalloc(&d, sizeof(host)), cudaSuccess);
	assert_int_equal(cudaMemcpy(d, host, sizeof(host), cudaMemcpyHostToDevice), cudaSuccess);
	/* the kind must match the pointers */
	assert_int_equal(cudaMemcpy(d, host, sizeof(host), cudaMemcpyDeviceToHost),
			 cudaErrorInvalidMemcpyDirection);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
	assert_int_equal(cudaGetLastError(), cudaSuccess);
	/* one byte past the allocation */
	assert_int_equal(cudaMemcpy(back, (char *)d + 1, sizeof(host), cudaMemcpyDeviceToHost),
			 cudaErrorInvalidValue);
	assert_int_equal(cudaMemsetAsync((char *)d + 8, 0, sizeof(host), NULL),
			 cudaErrorInvalidValue);
	(void)cudaGetLastError();
	assert_int_equal(cudaMemcpy(back, d, sizeof(host), cudaMemcpyDefault), cudaSuccess);
	assert_memory_equal(back, host, sizeof(host));
	assert_int_equal(cudaFree((char *)d + 4), cudaErrorInvalidValue);
	assert_int_equal(cudaFree(d), cudaSuccess);
	assert_int_equal(cudaFree(d), cudaErrorInvalidValue); /* twice */
	(void)cudaGetLastError();
}

/* The legacy stream waits for work on a blocking stream, which is then
 * destroyed with that wait still pending: the wait must not outlive it. */
static void test_destroyed_stream_waited_for(void **state)
{
	unsigned char out[256];
	cudaStream_t s;
	void *d = NULL;

	(void)state;
	assert_int_equal(cudaMalloc(&d, sizeof(out)), cudaSuccess);
	assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
	assert_int_equal(cudaMemsetAsync(d, 0, sizeof(out), s), cudaSuccess);
	assert_int_equal(cudaMemset(d, 7, sizeof(out)), cudaSuccess); /* after s's */
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_int_equal(cudaMemcpy(out, d, sizeof(out), cudaMemcpyDeviceToHost), cudaSuccess);
	for (size_t i = 0; i < sizeof(out); i++)
		assert_int_equal(out[i], 7);
	assert_int_equal(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
	(void)cudaGetLastError();
	assert_int_equal(cudaFree(d), cudaSuccess);
}

static void test_events(void **state)
{
	cudaEvent_t a, b;
	cudaStream_t s;
	float ms = -1;

	(void)state;
	assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	assert_int_equal(cudaEventCreate(&a), cudaSuccess);
	assert_int_equal(cudaEventCreate(&b), cudaSuccess);
	/* never recorded: complete, and no time between them */
	assert_int_equal(cudaEventQuery(a), cudaSuccess);
	assert_int_equal(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
	(void)cudaGetLastError();
	assert_int_equal(cudaEventRecord(a, s), cudaSuccess);
	assert_int_equal(cudaEventRecord(b, s), cudaSuccess);
	assert_int_equal(cudaEventSynchronize(b), cudaSuccess);
	assert_int_equal(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
	assert_true(ms >= 0);
	assert_int_equal(cudaEventDestroy(a), cudaSuccess);
	assert_int_equal(cudaEventDestroy(a), cudaErrorInvalidResourceHandle); /* stale */
	assert_int_equal(cudaEventRecord(a, s), cudaErrorInvalidResourceHandle);
	(void)cudaGetLastError();
	assert_int_equal(cudaEventDestroy(b), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

static void test_gemm_checked(void **state)
{
	const float one = 1.0f, zero = 0.0f;
	float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {1, 1}, c[3];
	void *da, *db, *dc;
	cublasHandle_t h;

	(void)state;
	assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
	assert_int_equal(cudaMalloc(&da, sizeof(a)), cudaSuccess);
	assert_int_equal(cudaMalloc(&db, sizeof(b)), cudaSuccess);
	assert_int_equal(cudaMalloc(&dc, sizeof(c)), cudaSuccess);
	assert_int_equal(cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice), cudaSuccess);
	assert_int_equal(cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice), cudaSuccess);
	/* C (3 x 1) = A (3 x 2, column-major) B (2 x 1) */
	assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, da, CUDA_R_32F, 3,
				      db, CUDA_R_32F, 2, &zero, dc, CUDA_R_32F, 3,
				      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			 CUBLAS_STATUS_SUCCESS);
	assert_int_equal(cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost), cudaSuccess);
	assert_true(c[0] == 5 && c[1] == 7 && c[2] == 9);
	/* lda below the rows of A */
	assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, da, CUDA_R_32F, 2,
				      db, CUDA_R_32F, 2, &zero, dc, CUDA_R_32F, 3,
				      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			 CUBLAS_STATUS_INVALID_VALUE);
	/* A reaching past its allocation */
	assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 3, &one, da, CUDA_R_32F, 3,
				      db, CUDA_R_32F, 3, &zero, dc, CUDA_R_32F, 3,
				      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			 CUBLAS_STATUS_INVALID_VALUE);
	/* the FAST_* compute types take float32 matrices only */
	assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, da, CUDA_R_16BF,
				      3, db, CUDA_R_16BF, 2, &zero, dc, CUDA_R_32F, 3,
				      CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
			 CUBLAS_STATUS_NOT_SUPPORTED);
	cudaFree(da), cudaFree(db), cudaFree(dc);
	assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copies_checked),
		cmocka_unit_test(test_destroyed_stream_waited_for),
		cmocka_unit_test(test_events),
		cmocka_unit_test(test_gemm_checked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
