/* Training data of crun-train: a file read as bytes (or a generated
 * English-like corpus), split into a training part and a held-out tail,
 * and a sampler with torch.utils.data.DistributedSampler's semantics.
 *
 * A sample is a window of `context` bytes and the byte that follows; there
 * is one sample per position of each split. */
#ifndef CRUN_TRAINER_DATA_H
#define CRUN_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

struct crun__data {
	uint8_t *bytes;
	size_t len;
	size_t train_len; /* bytes [0, train_len) train, [train_len, len) validate */
	int context;
	size_t n_train; /* samples of each split */
	size_t n_val;
};

/* Reads path (NULL or "": generates gen_bytes bytes from gen_seed) and
 * splits off the last val_fraction of it. Each split must hold at least
 * one sample. 0 or a negative errno with the reason in err. Pair with
 * crun__data_finish(). */
int crun__data_load(struct crun__data *d, const char *path, size_t gen_bytes, uint64_t gen_seed,
		    double val_fraction, int context, char *err, size_t errlen);
void crun__data_finish(struct crun__data *d);

/* Fills out with len bytes of deterministic English-like text. */
void crun__data_generate(uint8_t *out, size_t len, uint64_t seed);

/* Entropy in bits per byte of the byte frequencies of buf. */
double crun__data_unigram_bits(const uint8_t *buf, size_t len);

/* Copies sample idx of the training (val 0) or validation (val 1) split:
 * context window then target, context+1 bytes. */
void crun__data_sample(const struct crun__data *d, int val, size_t idx, uint8_t *out);

/* DistributedSampler: each epoch is a permutation of the n samples drawn
 * from (seed, epoch), padded by wrapping around to a multiple of the world
 * size; rank r reads positions r, r+W, r+2W, ... of it. */
struct crun__sampler {
	uint64_t seed;
	size_t n;
	int64_t epoch; /* whose permutation perm holds; -1: none */
	uint32_t *perm;
};

int crun__sampler_init(struct crun__sampler *s, size_t n, uint64_t seed);
void crun__sampler_finish(struct crun__sampler *s);

/* Sample at position pos of epoch's padded order (pos may exceed n - 1 by
 * the padding). */
size_t crun__sampler_at(struct crun__sampler *s, int64_t epoch, size_t pos);

/* Sample of rank's k-th position in epoch for world size W. */
size_t crun__sampler_rank_at(struct crun__sampler *s, int64_t epoch, int rank, int world, size_t k);

#endif
