/* FNV-1a: a fast, non-cryptographic hash of bytes. 64 bits for checksums
 * of stored files, 32 bits for hash tables (seeded by xor-ing a random
 * value into the offset basis). Never where an attacker picks the input
 * and a collision matters. */
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

/* The 32-bit variant: offset basis and running hash, as above. */
#define CRUN__FNV1A32_INIT 2166136261u

static inline uint32_t crun__fnv1a32(uint32_t h, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return h;
}

#endif
