/* The model of crun-train: a byte-level language model that reads a
 * window of `context` bytes and predicts the byte that follows.
 *
 *   x0 = concat over t of (tok[byte_t] + pos[t])        B x (context*embed)
 *   h0 = x0 Win^T + bin                                  B x width
 *   h_{l+1} = h_l + W2 gelu(W1 LN_l(h_l) + b1) + b2      l = 0 .. layers-1
 *   logits = LN_f(h_L) Wout^T + bout                     B x 256
 *   loss = softmax cross-entropy against the next byte
 *
 * Concatenating the position-wise embeddings (instead of averaging them)
 * keeps the order of the bytes visible to the first linear layer, which
 * is what lets an MLP model text.
 *
 * All parameters live in one flat float array. The model is cut into
 * units, the sharding units of the parallel strategies: unit 0 the
 * embedding (tok, pos, Win, bin), units 1..layers the blocks, the last
 * unit the head (LN_f, Wout, bout). A unit's parameters are contiguous,
 * units are in order, and the forward and backward pass run one unit at a
 * time on a pointer to that unit's parameters alone, so a caller can
 * gather a unit just before it is needed and free it afterwards. */
#ifndef CRUN_TRAINER_MODEL_H
#define CRUN_TRAINER_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRUN_MODEL_VOCAB 256

struct crun__model_config {
	int context;
	int embed_dim;
	int width;
	int layers;
	int ffn_mult;
	float init_std;
};

/* One parameter tensor: a row-major rows x cols matrix or a vector
 * (cols 1) at offset in the flat array. */
struct crun__tensor {
	char name[24];
	size_t offset;
	size_t numel;
	int rows, cols;
	int unit;
	bool decay; /* weight decay applies (matrices; not biases, norms, embeddings) */
	float init; /* std of the initial normal values; 0: constant init_value */
	float init_value;
};

struct crun__model {
	struct crun__model_config cfg;
	size_t n_params;
	int n_units;	  /* layers + 2 */
	size_t *unit_off; /* n_units + 1 entries; unit u is [unit_off[u], unit_off[u+1]) */
	int n_tensors;
	struct crun__tensor *tensors;
};

/* NULL with a reason in err when the sizes are out of range or memory is
 * short. */
struct crun__model *crun__model_create(const struct crun__model_config *cfg, char *err,
				       size_t errlen);
void crun__model_destroy(struct crun__model *m);

static inline size_t crun__model_unit_len(const struct crun__model *m, int unit)
{
	return m->unit_off[unit + 1] - m->unit_off[unit];
}

/* Writes the initial values of flat parameters [flat, flat+n) into out.
 * Each value depends only on seed and its index, so any rank can
 * initialise any slice on its own. */
void crun__model_init_params(const struct crun__model *m, uint64_t seed, size_t flat, size_t n,
			     float *out);

/* Activations and scratch for batches of at most `batch` samples. */
struct crun__model_acts;
struct crun__model_acts *crun__model_acts_create(const struct crun__model *m, int batch);
/* The bytes acts_create allocates for the activations themselves. */
size_t crun__model_acts_bytes(const struct crun__model *m, int batch);
void crun__model_acts_destroy(struct crun__model_acts *a);

/* Forward pass of one unit on `batch` samples. tokens holds batch rows of
 * context+1 bytes (the window, then the target). p points at the unit's
 * first parameter. Units run in order 0 .. n_units-1 on the same acts. */
void crun__model_forward_unit(const struct crun__model *m, int unit, const float *p,
			      struct crun__model_acts *a, const uint8_t *tokens, int batch);

/* After the last unit's forward: the summed cross-entropy (nats) of the
 * batch. */
double crun__model_loss_sum(const struct crun__model_acts *a);

/* Backward pass of one unit, in order n_units-1 .. 0, after a full
 * forward on the same acts and tokens. Adds the gradient of
 * scale * (summed loss) with respect to the unit's parameters into g
 * (same layout as p). */
void crun__model_backward_unit(const struct crun__model *m, int unit, const float *p, float *g,
			       struct crun__model_acts *a, const uint8_t *tokens, int batch,
			       float scale);

#endif
