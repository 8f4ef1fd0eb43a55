/* cudasim's cuBLAS: handles bound to a stream, and cublasGemmEx in
 * float32 or bfloat16 with float32 accumulation (OpenBLAS computes it).
 *
 * Arguments are checked as cuBLAS checks them (CUBLAS_STATUS_INVALID_VALUE
 * for a bad size or leading dimension), and every matrix must lie inside
 * one device allocation: what reaches past one would read or corrupt
 * other memory on a GPU. */
#include "cudasim.h"

#include <cblas.h>
#include <cublas_v2.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

struct cublasContext {
	cudaStream_t stream = nullptr;
	void *workspace = nullptr;
	size_t workspace_bytes = 0;
};

using namespace cudasim;

namespace
{

size_t type_size(cudaDataType t)
{
	return t == CUDA_R_16BF ? 2 : t == CUDA_R_32F ? 4 : 0;
}

/* An rows x cols column-major matrix with leading dimension ld, as float. */
std::vector<float> load(const void *p, cudaDataType t, int rows, int cols, int ld)
{
	std::vector<float> out((size_t)rows * cols);

	for (int c = 0; c < cols; c++)
		for (int r = 0; r < rows; r++) {
			size_t i = (size_t)c * ld + r;

			out[(size_t)c * rows + r] =
				t == CUDA_R_32F ? ((const float *)p)[i]
						: bf16_to_float(((const uint16_t *)p)[i]);
		}
	return out;
}

/* C = alpha op(A) op(B) + beta C with K cut in three parts added last
 * part first: another order of addition than the CPU path's single sgemm
 * call, as cuBLAS's own blocking is, so that the tests' float32
 * tolerances meet realistic rounding differences. */
void gemm_split_k(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
		  const float *b, int ldb, float beta, float *c)
{
	int parts = k >= 3 ? 3 : 1, step = (k + parts - 1) / parts;
	CBLAS_TRANSPOSE ops[2] = {CblasNoTrans, CblasTrans};
	bool first = true;

	for (int k0 = (parts - 1) * step; k0 >= 0; k0 -= step) {
		int kn = k - k0 < step ? k - k0 : step;
		/* rows or columns k0.. of op(A) and op(B) */
		const float *ap = ta ? a + k0 : a + (size_t)k0 * lda;
		const float *bp = tb ? b + (size_t)k0 * ldb : b + k0;

		if (kn <= 0)
			continue;
		cblas_sgemm(CblasColMajor, ops[ta], ops[tb], m, n, kn, alpha, ap, lda, bp, ldb,
			    first ? beta : 1.0f, c, m);
		first = false;
	}
}

bool inside(const char *what, const void *p, cudaDataType t, int rows, int cols, int ld)
{
	size_t span = ((size_t)(cols - 1) * ld + rows) * type_size(t);

	if (device_range(p, span))
		return true;
	fprintf(stderr,
		"cudasim: cublasGemmEx: matrix %s (%d x %d, ld %d) at %p is not inside one "
		"device allocation\n",
		what, rows, cols, ld, p);
	return false;
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
	*handle = new cublasContext;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	delete handle;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!stream_valid(stream))
		return CUBLAS_STATUS_INVALID_VALUE;
	handle->stream = stream;
	/* as in cuBLAS: a new stream drops the user's workspace (set it after) */
	handle->workspace = nullptr;
	handle->workspace_bytes = 0;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	*stream = handle->stream;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes)
{
	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (bytes && (!device_range(workspace, bytes) || (uintptr_t)workspace % 256))
		return CUBLAS_STATUS_INVALID_VALUE;
	handle->workspace = workspace;
	handle->workspace_bytes = bytes;
	return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
	switch (status) {
	case CUBLAS_STATUS_SUCCESS:
		return "the operation completed successfully";
	case CUBLAS_STATUS_NOT_INITIALIZED:
		return "the library was not initialized";
	case CUBLAS_STATUS_ALLOC_FAILED:
		return "the resource allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE:
		return "an invalid numeric value was used as an argument";
	case CUBLAS_STATUS_ARCH_MISMATCH:
		return "an absent device architectural feature is required";
	case CUBLAS_STATUS_MAPPING_ERROR:
		return "an access to GPU memory space failed";
	case CUBLAS_STATUS_EXECUTION_FAILED:
		return "the GPU program failed to execute";
	case CUBLAS_STATUS_INTERNAL_ERROR:
		return "an internal operation failed";
	case CUBLAS_STATUS_NOT_SUPPORTED:
		return "the functionality requested is not supported";
	}
	return "unknown error";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
			    cublasOperation_t transb, int m, int n, int k, const void *alpha,
			    const void *A, cudaDataType Atype, int lda, const void *B,
			    cudaDataType Btype, int ldb, const void *beta, void *C,
			    cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
			    cublasGemmAlgo_t algo)
{
	bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
	/* A is stored ar x ac, B br x bc */
	int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
	float al, be;

	if (!handle)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) ||
	    ldc < (m > 1 ? m : 1) || transa > CUBLAS_OP_C || transb > CUBLAS_OP_C)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (!type_size(Atype) || !type_size(Btype) || !type_size(Ctype) || Atype != Btype ||
	    (Atype == CUDA_R_32F && Ctype != CUDA_R_32F))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	/* the FAST_* compute types take float32 matrices only */
	if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC &&
	    !((computeType == CUBLAS_COMPUTE_32F_FAST_16BF ||
	       computeType == CUBLAS_COMPUTE_32F_FAST_TF32) &&
	      Atype == CUDA_R_32F))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (algo != CUBLAS_GEMM_DEFAULT)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (!m || !n)
		return CUBLAS_STATUS_SUCCESS;
	if ((k && (!inside("A", A, Atype, ar, ac, lda) || !inside("B", B, Btype, br, bc, ldb))) ||
	    !inside("C", C, Ctype, m, n, ldc))
		return CUBLAS_STATUS_INVALID_VALUE;
	/* the scalars live on the host (CUBLAS_POINTER_MODE_HOST): read now */
	memcpy(&al, alpha, sizeof(al));
	memcpy(&be, beta, sizeof(be));
	if (enqueue(handle->stream, "cublasGemmEx", [=] {
		    std::vector<float> a, b, c;

		    /* beta 0: C is not read, so NaNs in it do not spread */
		    if (be == 0.0f)
			    c.assign((size_t)m * n, 0.0f);
		    else
			    c = load(C, Ctype, m, n, ldc);
		    if (k) {
			    a = load(A, Atype, ar, ac, lda);
			    b = load(B, Btype, br, bc, ldb);
			    gemm_split_k(ta, tb, m, n, k, al, a.data(), ar, b.data(), br, be,
					 c.data());
		    } else {
			    for (auto &v : c)
				    v *= be;
		    }
		    for (int j = 0; j < n; j++)
			    for (int i = 0; i < m; i++) {
				    size_t o = (size_t)j * ldc + i;
				    float v = c[(size_t)j * m + i];

				    if (Ctype == CUDA_R_32F)
					    ((float *)C)[o] = v;
				    else
					    ((uint16_t *)C)[o] = float_to_bf16(v);
			    }
	    }))
		return CUBLAS_STATUS_EXECUTION_FAILED;
	return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
