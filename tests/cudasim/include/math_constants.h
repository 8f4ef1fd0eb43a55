/* cudasim: the constants of CUDA's math_constants.h that kernels use. */
#ifndef CUDASIM_MATH_CONSTANTS_H
#define CUDASIM_MATH_CONSTANTS_H

#include <math.h>

#define CUDART_INF_F INFINITY
#define CUDART_NAN_F NAN
#define CUDART_INF HUGE_VAL

#endif
