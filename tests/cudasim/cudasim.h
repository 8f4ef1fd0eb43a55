/* cudasim's own interface between its parts (runtime.cpp, cublas.cpp,
 * nccl.cpp): the stream executor, the allocation registry and fatal
 * errors. Not for the code under test, which sees only the CUDA, cuBLAS
 * and NCCL headers in include/. */
#ifndef CUDASIM_CUDASIM_H
#define CUDASIM_CUDASIM_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace cudasim
{

/* Queues fn on stream (NULL: the legacy default stream). What runs it and
 * when depends on CUDASIM_SCHED: "eager" runs it now; "lazy" (the
 * default) runs a stream's work only when the host must see it (a
 * synchronisation, a query, a copy to pageable memory, cudaFree), each
 * stream in order but streams in an adversarial order, so that a missing
 * cudaStreamWaitEvent shows up as wrong results. fn runs with the executor
 * lock held. what names the work in diagnostics. An invalid stream is
 * cudaErrorInvalidResourceHandle, and nothing is queued. */
cudaError_t enqueue(cudaStream_t stream, const char *what, std::function<void()> fn);

/* True when stream is NULL or a live stream. */
bool stream_valid(cudaStream_t stream);

/* What p points into. */
enum class Mem { unknown, device, pinned };
Mem kind(const void *p);
/* True when [p, p + bytes) lies inside one live device allocation. */
bool device_range(const void *p, size_t bytes);

/* The environment variable name as a positive integer, def when it is
 * unset or empty; anything else is fatal (a test that asked for a setting
 * must not run with another). */
int64_t env_positive(const char *name, int64_t def);

/* Records err as the runtime's last error (cudaGetLastError) and returns
 * it. */
cudaError_t set_error(cudaError_t err);

/* Prints "cudasim: <message>" to stderr and aborts: for what a GPU would
 * turn into a fault, a hang or undefined behaviour. */
[[noreturn]] void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* bfloat16 as raw bits, through cuda_bf16.h's conversions (round to
 * nearest even). */
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);

} // namespace cudasim

#endif
