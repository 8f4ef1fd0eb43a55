/* FNV-1a, 64 bits: a fast, non-cryptographic checksum of bytes. Used where
 * a stored file is checked against a sum written beside it; never where an
 * attacker picks the input and the result matters. */
#ifndef CRUN_COMMON_FNV_H
#define CRUN_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>

/* The offset basis: the sum of no bytes. */
#define CRUN__FNV1A_INIT 0xcbf29ce484222325ULL

/* The sum h continued over n bytes of buf. Start with CRUN__FNV1A_INIT;
 * summing a buffer in pieces gives the same result as all at once. */
static inline uint64_t crun__fnv1a(uint64_t h, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#endif
