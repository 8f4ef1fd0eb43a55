/* cudasim: cudaDataType_t (values as in CUDA 12's library_types.h): the
 * two types cublasGemmEx takes here. */
#ifndef CUDASIM_LIBRARY_TYPES_H
#define CUDASIM_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
	CUDA_R_32F = 0,
	CUDA_R_16BF = 14,
} cudaDataType_t;
typedef enum cudaDataType_t cudaDataType;

#endif
