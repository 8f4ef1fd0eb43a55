/* AdamW with decoupled weight decay and bias correction, the learning
 * rate schedule (linear warm-up, then cosine, linear or no decay), and
 * the helpers of global-norm gradient clipping.
 *
 * Updates work on a contiguous range of the flat parameter array, so the
 * same code updates a full copy (ddp) or a rank's shard (zero1-3); each
 * element's arithmetic is the same in both cases. */
#ifndef CRUN_TRAINER_OPTIM_H
#define CRUN_TRAINER_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/model.h"

enum crun__lr_schedule {
	CRUN_LR_COSINE,
	CRUN_LR_LINEAR,
	CRUN_LR_CONSTANT,
};

struct crun__optim {
	double lr;
	enum crun__lr_schedule schedule;
	int64_t warmup_steps;
	double min_lr_ratio;
	double beta1, beta2, eps;
	double weight_decay;
	double grad_clip; /* 0: none */
};

/* -1 for an unknown name. */
int crun__lr_schedule_parse(const char *name);

/* Learning rate of step (0-based) out of total steps: step+1 of warmup
 * steps times lr during the warm-up, then decaying to lr * min_lr_ratio at
 * the last step. */
double crun__optim_lr(const struct crun__optim *o, int64_t step, int64_t total);

/* Factor the gradients are multiplied by, given their global L2 norm. */
float crun__optim_clip_scale(const struct crun__optim *o, double grad_norm);

/* Sum of squares of g[0..n), in double. */
double crun__optim_sumsq(const float *g, size_t n);

/* One AdamW step t (1-based) on flat parameters [flat, flat+n): p, g, m, v
 * point at element flat of each. The gradient is multiplied by gscale
 * first; weight decay applies where the model's tensor says so. */
void crun__optim_adamw(const struct crun__optim *o, const struct crun__model *model, size_t flat,
		       size_t n, float *p, const float *g, float *m, float *v, int64_t t, double lr,
		       float gscale);

#endif
