/* A chained hash table of byte-string keys, intrusive: each element holds a
 * struct crun__hnode (key pointer, length and hash, filled by the caller)
 * and the table links those nodes. The table never copies or frees keys or
 * elements; the caller owns both and keeps a node's key valid while the
 * node is in the table.
 *
 * Hashes come from crun__hash_bytes with a seed the owner draws at random,
 * so that a client cannot choose keys that all land in one bucket. The
 * table doubles when it holds more nodes than buckets. */
#ifndef CRUN_COMMON_HTABLE_H
#define CRUN_COMMON_HTABLE_H

#include <stddef.h>
#include <stdint.h>

struct crun__hnode {
	struct crun__hnode *next;
	const uint8_t *key;
	uint32_t klen;
	uint32_t hash;
};

/* All zero is an empty table (crun__htable_init does that). */
struct crun__htable {
	struct crun__hnode **buckets; /* NULL until the first insert */
	size_t mask;		      /* number of buckets - 1 */
	size_t count;
};

/* FNV-1a of p[0..n) with the offset basis xor'ed with seed. */
uint32_t crun__hash_bytes(uint32_t seed, const uint8_t *p, size_t n);

void crun__htable_init(struct crun__htable *t);

/* Frees the bucket array (not the nodes) and empties t. */
void crun__htable_finish(struct crun__htable *t);

/* The link that points at the node with this key and hash, or NULL when
 * there is none. The link stays valid until the next insert or unlink. */
struct crun__hnode **crun__htable_link(const struct crun__htable *t, const uint8_t *key,
				       uint32_t klen, uint32_t hash);

/* The node with this key and hash, or NULL. */
struct crun__hnode *crun__htable_find(const struct crun__htable *t, const uint8_t *key,
				      uint32_t klen, uint32_t hash);

/* Inserts n, whose key must not be in t yet (n->key, klen and hash set).
 * 0, or -ENOMEM when t has no bucket array and none can be made (a failed
 * growth of an existing array only makes chains longer). */
int crun__htable_insert(struct crun__htable *t, struct crun__hnode *n);

/* Removes the node that link (from crun__htable_link) points at. */
void crun__htable_unlink(struct crun__htable *t, struct crun__hnode **link);

/* Removes n, which must be in t. */
void crun__htable_remove(struct crun__htable *t, struct crun__hnode *n);

/* Iteration in bucket order, with no insert or removal during the walk:
 *   for (n = crun__htable_first(t, &i); n; n = crun__htable_next(t, n, &i)) */
struct crun__hnode *crun__htable_first(const struct crun__htable *t, size_t *bucket);
struct crun__hnode *crun__htable_next(const struct crun__htable *t, struct crun__hnode *n,
				      size_t *bucket);

/* Calls fn(n, arg) on every node (fn may free n), then frees the bucket
 * array and empties t. fn may be NULL. */
void crun__htable_clear(struct crun__htable *t, void (*fn)(struct crun__hnode *n, void *arg),
			void *arg);

#endif
