/* The CUDA device of one crun-train rank: which GPU it uses, a context of
 * a compute stream and a cuBLAS handle on it, an allocator that counts
 * the bytes it hands out (the summary reports the peak), and the checks
 * that end the process when a CUDA or cuBLAS call fails.
 *
 * A failed CUDA call is not recoverable inside a rank (a fault poisons the
 * context), so the checks print "crun-train: CUDA call 'f' failed at
 * file:line: reason" and exit(1), as llm.c does; crun then restarts the
 * group (the trainer is the one place below main() that may exit). Running
 * out of device memory at setup is not such a failure: crun__cuda_alloc
 * returns NULL and the caller says what it was allocating. */
#ifndef CRUN_TRAINER_CUDA_RUNTIME_H
#define CRUN_TRAINER_CUDA_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

struct crun__cuda_alloc_rec;

struct crun__cuda_ctx {
	int device;
	char name[256];	     /* the device's name */
	size_t total_bytes;  /* the device's memory */
	cudaStream_t stream; /* compute stream: kernels and matrix products */
	cublasHandle_t blas; /* bound to stream */
	size_t bytes;	     /* allocated through crun__cuda_alloc now */
	size_t peak_bytes;   /* the most ever allocated at once */
	struct crun__cuda_alloc_rec *allocs;
	size_t n_allocs, cap_allocs;
};

/* Number of usable CUDA devices: 0 and *count >= 1, or -ENODEV with the
 * reason in err ("no CUDA device: CUDA driver version is insufficient
 * ..."). Safe to call on a machine without a GPU or driver. */
int crun__cuda_device_count(int *count, char *err, size_t errlen);

/* The device of a rank with this LOCAL_RANK: ordinal LOCAL_RANK among the
 * visible devices (the runtime applies CUDA_VISIBLE_DEVICES, so under
 * crun's --virtual-local-rank each rank sees its own GPU as device 0).
 * With fewer devices than LOCAL_RANK + 1: when shared, LOCAL_RANK modulo
 * the count (ranks share a GPU, fine for the cpu comm backend); else
 * -ENODEV with the reason (NCCL needs one GPU per rank). */
int crun__cuda_pick_device(int local_rank, bool shared, int *device, char *err, size_t errlen);

/* Makes device current and creates the stream and the cuBLAS handle (and
 * its 32 MiB workspace). NULL with the reason in err. */
struct crun__cuda_ctx *crun__cuda_ctx_create(int device, char *err, size_t errlen);
/* Frees everything allocated through ctx as well. NULL is allowed. */
void crun__cuda_ctx_destroy(struct crun__cuda_ctx *ctx);

/* Device memory of bytes (at least 1), zeroed, 256-byte aligned; NULL when
 * the device is out of memory. */
void *crun__cuda_alloc(struct crun__cuda_ctx *ctx, size_t bytes);
/* Pinned host memory (for staging copies), zeroed; NULL when short. */
void *crun__cuda_host_alloc(struct crun__cuda_ctx *ctx, size_t bytes);
/* Frees what crun__cuda_alloc or crun__cuda_host_alloc returned; NULL is
 * allowed. */
void crun__cuda_free(struct crun__cuda_ctx *ctx, void *p);

/* Device memory in use now (the driver's view: allocations, the CUDA
 * context, cuBLAS and NCCL buffers) in bytes. */
size_t crun__cuda_used_bytes(void);

void crun__cuda_check_at(cudaError_t rc, const char *call, const char *file, int line);
void crun__cublas_check_at(cublasStatus_t rc, const char *call, const char *file, int line);

/* Ends the process with file and line when call does not succeed. */
#define CRUN_CUDA_CHECK(call) crun__cuda_check_at((call), #call, __FILE__, __LINE__)
#define CRUN_CUBLAS_CHECK(call) crun__cublas_check_at((call), #call, __FILE__, __LINE__)

#endif
