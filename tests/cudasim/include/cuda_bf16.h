/* cudasim: __nv_bfloat16 for kernels compiled as C++ on the CPU. */
#ifndef CUDASIM_CUDA_BF16_H
#define CUDASIM_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
	uint16_t x;
};

static inline __nv_bfloat16 __float2bfloat16(float f)
{
	uint32_t u;
	__nv_bfloat16 b;

	memcpy(&u, &f, sizeof(u));
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
		b.x = (uint16_t)((u >> 16) | 0x40u);
	else
		b.x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
	return b;
}

static inline float __bfloat162float(__nv_bfloat16 b)
{
	uint32_t u = (uint32_t)b.x << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

#endif
