/* An intrusive doubly linked list, as in the Linux kernel: a struct
 * crun__list member inside each element links it; the head is a bare
 * struct crun__list. Nothing here allocates. An element is in at most one
 * list per member; crun__list_del leaves it initialised (empty), so it may
 * be deleted again safely. */
#ifndef CRUN_COMMON_LIST_H
#define CRUN_COMMON_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct crun__list {
	struct crun__list *prev, *next;
};

/* The struct of type that holds member at ptr. */
#define crun__container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Makes l an empty list (or an element linked to nothing). */
static inline void crun__list_init(struct crun__list *l)
{
	l->prev = l->next = l;
}

static inline bool crun__list_empty(const struct crun__list *l)
{
	return l->next == l;
}

/* Links n, which must not be in a list, at the end of head. */
static inline void crun__list_add_tail(struct crun__list *head, struct crun__list *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

/* Unlinks n from its list and re-initialises it. */
static inline void crun__list_del(struct crun__list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	crun__list_init(n);
}

#endif
