/* The store server's budgets (budget.h). */
#include "rendezvous/budget.h"

uint64_t crun__budget_default(uint64_t phys, uint64_t cgroup)
{
	uint64_t mem = phys ? phys : 4ull << 30;

	if (cgroup && cgroup != UINT64_MAX && cgroup < mem)
		mem = cgroup;
	mem /= 4;
	return mem < CRUN__BUDGET_MIN ? CRUN__BUDGET_MIN : mem;
}

bool crun__budget_fits(const struct crun__budget *b, uint64_t old, uint64_t new_bytes)
{
	return new_bytes <= old ||
	       new_bytes - old <= b->limit - (b->used < b->limit ? b->used : b->limit);
}

void crun__budget_move(struct crun__budget *b, uint64_t old, uint64_t new_bytes)
{
	b->used = b->used - old + new_bytes;
}

uint64_t crun__budget_room(const struct crun__budget *b, uint64_t old)
{
	return old + (b->used < b->limit ? b->limit - b->used : 0);
}

enum crun__admit crun__admit_preauth(const struct crun__admit_counts *in)
{
	if (in->source_preauth > 0 && in->source_preauth >= in->max_preauth_source)
		return CRUN__ADMIT_EVICT_SOURCE;
	if (in->preauth > 0 && in->preauth >= in->max_preauth)
		return CRUN__ADMIT_EVICT_OLDEST;
	if (in->conns >= in->max_conns)
		return in->preauth > 0 ? CRUN__ADMIT_EVICT_OLDEST : CRUN__ADMIT_REFUSE;
	return CRUN__ADMIT;
}

void crun__admit_clamp(uint32_t max_conns, uint64_t budget, uint64_t conn_bytes,
		       uint32_t *max_preauth, uint32_t *max_preauth_source)
{
	uint32_t half = max_conns / 2 ? max_conns / 2 : 1;
	uint64_t fit = conn_bytes ? budget / 4 / conn_bytes : UINT32_MAX;

	if (*max_preauth > half)
		*max_preauth = half;
	if (*max_preauth > fit)
		*max_preauth = (uint32_t)fit;
	if (*max_preauth == 0)
		*max_preauth = 1;
	if (*max_preauth_source > *max_preauth)
		*max_preauth_source = *max_preauth;
	if (*max_preauth_source == 0)
		*max_preauth_source = 1;
}

uint64_t crun__budget_request_ms(uint64_t base_ms, uint64_t len)
{
	if (!base_ms)
		return UINT64_MAX;
	return base_ms + len / CRUN__BUDGET_MIN_RATE * 1000;
}

bool crun__idle_expired(const struct crun__idle_state *s)
{
	if (!s->timeout_ms || s->partial || s->output || s->subscribed || s->owns_keys ||
	    s->keepalive)
		return false;
	return s->now_ms >= s->last_ms && s->now_ms - s->last_ms >= s->timeout_ms;
}
