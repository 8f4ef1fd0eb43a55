/* Counter-based random numbers for crun-train.
 *
 * Every random value the trainer uses is a pure function of a seed and an
 * index (splitmix64's mixer), so any rank can produce any slice of the
 * initial parameters or of an epoch's permutation without producing the
 * rest, and a resumed run needs no generator state besides the step. */
#ifndef CRUN_TRAINER_RNG_H
#define CRUN_TRAINER_RNG_H

#include <math.h>
#include <stdint.h>

/* splitmix64's finaliser: a bijection of 64-bit values with good mixing. */
static inline uint64_t crun__rng_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* The idx-th value of the stream named by (seed, stream). */
static inline uint64_t crun__rng_at(uint64_t seed, uint64_t stream, uint64_t idx)
{
	return crun__rng_mix(crun__rng_mix(seed ^ crun__rng_mix(stream)) + idx);
}

/* Uniform double in (0, 1) from 53 random bits. */
static inline double crun__rng_unit(uint64_t r)
{
	return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal value for (seed, stream, idx) by Box-Muller. */
static inline double crun__rng_normal_at(uint64_t seed, uint64_t stream, uint64_t idx)
{
	double u1 = crun__rng_unit(crun__rng_at(seed, stream, 2 * idx));
	double u2 = crun__rng_unit(crun__rng_at(seed, stream, 2 * idx + 1));

	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Sequential generator for things drawn in order (corpus generation). */
struct crun__rng {
	uint64_t state;
};

static inline uint64_t crun__rng_next(struct crun__rng *r)
{
	r->state += 0x9e3779b97f4a7c15ULL;
	return crun__rng_mix(r->state);
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the bias for
 * the small n used here is below 2^-40). */
static inline uint32_t crun__rng_below(struct crun__rng *r, uint32_t n)
{
	return (uint32_t)(((crun__rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

#endif
