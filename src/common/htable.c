/* The hash table of htable.h. Buckets are a power of two so that a hash
 * picks one with a mask; each node keeps its full hash, so a lookup
 * compares keys only when the hashes match and growing never rehashes. */
#include "common/htable.h"

#include "common/fnv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS_MIN 16

uint32_t crun__hash_bytes(uint32_t seed, const uint8_t *p, size_t n)
{
	return crun__fnv1a32(CRUN__FNV1A32_INIT ^ seed, p, n);
}

void crun__htable_init(struct crun__htable *t)
{
	t->buckets = NULL;
	t->mask = 0;
	t->count = 0;
}

void crun__htable_finish(struct crun__htable *t)
{
	free(t->buckets);
	crun__htable_init(t);
}

struct crun__hnode **crun__htable_link(const struct crun__htable *t, const uint8_t *key,
				       uint32_t klen, uint32_t hash)
{
	struct crun__hnode **l;

	if (!t->buckets)
		return NULL;
	for (l = &t->buckets[hash & t->mask]; *l; l = &(*l)->next)
		if ((*l)->hash == hash && (*l)->klen == klen && !memcmp((*l)->key, key, klen))
			return l;
	return NULL;
}

struct crun__hnode *crun__htable_find(const struct crun__htable *t, const uint8_t *key,
				      uint32_t klen, uint32_t hash)
{
	struct crun__hnode **l = crun__htable_link(t, key, klen, hash);

	return l ? *l : NULL;
}

static int grow(struct crun__htable *t)
{
	size_t n = t->buckets ? (t->mask + 1) * 2 : BUCKETS_MIN;
	struct crun__hnode **b = calloc(n, sizeof(*b));

	if (!b)
		return -ENOMEM;
	if (t->buckets) {
		for (size_t i = 0; i <= t->mask; i++) {
			struct crun__hnode *h = t->buckets[i], *next;

			for (; h; h = next) {
				next = h->next;
				h->next = b[h->hash & (n - 1)];
				b[h->hash & (n - 1)] = h;
			}
		}
		free(t->buckets);
	}
	t->buckets = b;
	t->mask = n - 1;
	return 0;
}

int crun__htable_insert(struct crun__htable *t, struct crun__hnode *n)
{
	struct crun__hnode **b;

	if ((!t->buckets || t->count > t->mask) && grow(t) < 0 && !t->buckets)
		return -ENOMEM;
	b = &t->buckets[n->hash & t->mask];
	n->next = *b;
	*b = n;
	t->count++;
	return 0;
}

void crun__htable_unlink(struct crun__htable *t, struct crun__hnode **link)
{
	*link = (*link)->next;
	t->count--;
}

void crun__htable_remove(struct crun__htable *t, struct crun__hnode *n)
{
	struct crun__hnode **l;

	for (l = &t->buckets[n->hash & t->mask]; *l != n; l = &(*l)->next)
		;
	crun__htable_unlink(t, l);
}

static struct crun__hnode *from_bucket(const struct crun__htable *t, size_t *bucket)
{
	if (!t->buckets)
		return NULL;
	for (; *bucket <= t->mask; (*bucket)++)
		if (t->buckets[*bucket])
			return t->buckets[*bucket];
	return NULL;
}

struct crun__hnode *crun__htable_first(const struct crun__htable *t, size_t *bucket)
{
	*bucket = 0;
	return from_bucket(t, bucket);
}

struct crun__hnode *crun__htable_next(const struct crun__htable *t, struct crun__hnode *n,
				      size_t *bucket)
{
	if (n->next)
		return n->next;
	(*bucket)++;
	return from_bucket(t, bucket);
}

void crun__htable_clear(struct crun__htable *t, void (*fn)(struct crun__hnode *n, void *arg),
			void *arg)
{
	if (t->buckets && fn) {
		for (size_t i = 0; i <= t->mask; i++) {
			struct crun__hnode *h = t->buckets[i], *next;

			for (; h; h = next) {
				next = h->next;
				fn(h, arg);
			}
		}
	}
	crun__htable_finish(t);
}
