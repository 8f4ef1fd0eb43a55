/* cudasim: the runtime API plus, for C++, what a .cu file's device code
 * needs to compile and run on the CPU: dim3, threadIdx and friends,
 * __syncthreads, warp shuffles and atomicAdd.
 *
 * Each block runs on one host thread; each of its CUDA threads is a fiber
 * that runs until it finishes or reaches a barrier (__syncthreads, or the
 * warp's implicit barrier in a shuffle), so barriers and shuffles behave
 * as on a GPU. A barrier that not every thread of the block reaches is
 * reported and aborts (on a GPU it hangs or is undefined). __shared__
 * variables are static: blocks run one at a time. */
#ifndef CUDASIM_CUDA_RUNTIME_H
#define CUDASIM_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus

#include <cstddef>
#include <cstring>
#include <functional>
#include <math.h>
#include <type_traits>

struct uint3 {
	unsigned x, y, z;
};

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz)
	{
	}
};

namespace cudasim
{

struct thread_ctx {
	uint3 thread_idx, block_idx;
	dim3 block_dim, grid_dim;
};

/* The CUDA thread that runs now. cudasim links only into programs, so
 * its thread-locals take the initial-exec model: a kernel finds threadIdx
 * at an offset fixed at load time rather than through __tls_get_addr (which
 * AddressSanitizer intercepts, at a cost on every access). */
extern thread_local thread_ctx *cur __attribute__((tls_model("initial-exec")));

/* Runs body once per thread of grid x block, on stream (queued as
 * enqueue() does). Sets the last error for a bad configuration. */
void launch(const char *name, dim3 grid, dim3 block, cudaStream_t stream,
	    std::function<void()> body);

/* __syncthreads(). */
void sync_block();
/* The shuffle exchange: publishes bytes of v for this lane, then copies
 * lane (this lane ^ lanemask)'s into out. Every lane of the warp takes
 * part (mask must name them all). */
void shfl_xor(unsigned mask, const void *v, void *out, size_t bytes, int lanemask);

/* A kernel's pointer argument i: NULL, or device or pinned memory (what
 * a GPU can address); else the launch fails with cudaErrorIllegalAddress
 * and says which argument. Returns whether it may run. */
bool kernel_pointer_ok(const char *kernel, int i, const void *p);

template <typename T> inline bool kernel_arg_ok(const char *kernel, int i, const T &a)
{
	if constexpr (std::is_pointer<T>::value)
		return kernel_pointer_ok(kernel, i, (const void *)a);
	else
		return true;
}

template <typename... A> inline bool kernel_args_ok(const char *kernel, const A &...a)
{
	bool ok = true;
	int i = 0;

	/* a comma fold: left to right, every argument checked */
	((ok = kernel_arg_ok(kernel, i++, a) && ok), ...);
	return ok;
}

} // namespace cudasim

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

#define threadIdx (cudasim::cur->thread_idx)
#define blockIdx (cudasim::cur->block_idx)
#define blockDim (cudasim::cur->block_dim)
#define gridDim (cudasim::cur->grid_dim)

/* kernel<<<grid, block, 0, stream>>>(args...) */
#define CUDASIM_LAUNCH(kernel, grid, block, stream, ...)                     \
	(cudasim::kernel_args_ok(#kernel, __VA_ARGS__)                       \
		 ? cudasim::launch(#kernel, dim3(grid), dim3(block), stream, \
				   [=] { kernel(__VA_ARGS__); })             \
		 : (void)0)

constexpr int warpSize = 32;

static inline void __syncthreads()
{
	cudasim::sync_block();
}

template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lanemask)
{
	T out;

	cudasim::shfl_xor(mask, &v, &out, sizeof(T), lanemask);
	return out;
}

/* Fibers of one block run one at a time: a plain read-modify-write is
 * atomic. */
template <typename T> static inline T atomicAdd(T *addr, T v)
{
	T old = *addr;

	*addr = old + v;
	return old;
}

static inline int min(int a, int b)
{
	return a < b ? a : b;
}

static inline int max(int a, int b)
{
	return a > b ? a : b;
}

#endif /* __cplusplus */

#endif
