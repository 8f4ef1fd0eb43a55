/* AdamW and the learning rate schedule. */
#include "trainer/optim.h"

#include <math.h>
#include <string.h>

int crun__lr_schedule_parse(const char *name)
{
	if (!strcmp(name, "cosine"))
		return CRUN_LR_COSINE;
	if (!strcmp(name, "linear"))
		return CRUN_LR_LINEAR;
	if (!strcmp(name, "constant"))
		return CRUN_LR_CONSTANT;
	return -1;
}

double crun__optim_lr(const struct crun__optim *o, int64_t step, int64_t total)
{
	double lo = o->lr * o->min_lr_ratio, frac;
	int64_t span;

	if (step < o->warmup_steps)
		return o->lr * (double)(step + 1) / (double)o->warmup_steps;
	span = total - 1 - o->warmup_steps;
	frac = span > 0 ? (double)(step - o->warmup_steps) / (double)span : 1.0;
	if (frac > 1)
		frac = 1;
	switch (o->schedule) {
	case CRUN_LR_COSINE:
		return lo + (o->lr - lo) * 0.5 * (1.0 + cos(M_PI * frac));
	case CRUN_LR_LINEAR:
		return o->lr - (o->lr - lo) * frac;
	case CRUN_LR_CONSTANT:
		break;
	}
	return o->lr;
}

float crun__optim_clip_scale(const struct crun__optim *o, double grad_norm)
{
	if (o->grad_clip > 0 && grad_norm > o->grad_clip)
		return (float)(o->grad_clip / (grad_norm + 1e-6));
	return 1.0f;
}

double crun__optim_sumsq(const float *g, size_t n)
{
	/* four running sums in a fixed order: the same bits every time, and
	 * four times the throughput of one dependent chain */
	double s[4] = {0, 0, 0, 0}, t = 0;
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		for (int k = 0; k < 4; k++)
			s[k] += (double)g[i + k] * g[i + k];
	for (; i < n; i++)
		t += (double)g[i] * g[i];
	return (s[0] + s[1]) + (s[2] + s[3]) + t;
}

/* The four arrays never overlap (restrict lets the loop vectorize). */
static void adamw_range(const struct crun__optim *o, float *restrict p, const float *restrict g,
			float *restrict m, float *restrict v, size_t n, float bc1, float bc2,
			float lr, float wd, float gscale)
{
	float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;

	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * gscale;
		float mh, vh;

		m[i] = b1 * m[i] + (1.0f - b1) * gi;
		v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
		mh = m[i] / bc1;
		vh = v[i] / bc2;
		p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
	}
}

void crun__optim_adamw(const struct crun__optim *o, const struct crun__model *model, size_t flat,
		       size_t n, float *p, const float *g, float *m, float *v, int64_t t, double lr,
		       float gscale)
{
	float bc1 = (float)(1.0 - pow(o->beta1, (double)t));
	float bc2 = (float)(1.0 - pow(o->beta2, (double)t));
	size_t end = flat + n;

	for (int i = 0; i < model->n_tensors; i++) {
		const struct crun__tensor *tn = &model->tensors[i];
		size_t a = tn->offset > flat ? tn->offset : flat;
		size_t b = tn->offset + tn->numel < end ? tn->offset + tn->numel : end;
		size_t k = a - flat;

		if (a >= b)
			continue;
		adamw_range(o, p + k, g + k, m + k, v + k, b - a, bc1, bc2, (float)lr,
			    tn->decay ? (float)o->weight_decay : 0.0f, gscale);
	}
}
