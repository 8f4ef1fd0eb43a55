/* The project's CUDA kernels (src/trainer/cuda/kernels.cu), compiled as
 * C++ for cudasim: cuda_runtime.h supplies what nvcc would. */
#include <cuda_runtime.h>

#include "trainer/cuda/kernels.cu"
