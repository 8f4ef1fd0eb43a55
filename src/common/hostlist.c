/* Slurm's compressed host lists (hostlist.h). The parse keeps three flat
 * arrays: items (one per comma at depth 0), their bracket groups (the text
 * before each '[' and its ranges) and the ranges, each with the index of
 * its first host so that a lookup is two binary searches and a mixed-radix
 * division, whatever the length of the list. */
#include "common/hostlist.h"

#include "common/util.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct range {
	uint32_t lo, hi;
	int width;    /* digits of lo as written: zeros kept */
	size_t start; /* index of lo within its group */
};

struct group {
	size_t prefix_off, prefix_len; /* literal text before the '[' */
	size_t first_range, nranges;
	size_t count; /* numbers in the group */
};

struct item {
	size_t first_group, ngroups;
	size_t suffix_off, suffix_len; /* text after the last ']' (all of a plain name) */
	size_t count;		       /* hosts: the product of the groups' counts */
	size_t start;		       /* index of the item's first host in the list */
};

struct crun__hostlist {
	char *text;
	struct item *items;
	struct group *groups;
	struct range *ranges;
	size_t nitems, ngroups, nranges;
	size_t count;
};

struct parser {
	struct crun__hostlist *hl;
	const char *s;
	char *err;
	size_t errlen;
};

static int fail(struct parser *p, size_t at, const char *what)
{
	crun__seterr(p->err, p->errlen, "%s at byte %zu", what, at);
	return -EINVAL;
}

static int digits_of(uint32_t v)
{
	int n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* A number of 1 to CRUN_HOSTLIST_DIGITS_MAX digits at s[*i]. */
static int parse_number(struct parser *p, size_t *i, uint32_t *out, int *width)
{
	size_t start = *i;
	uint32_t v = 0;

	while (p->s[*i] >= '0' && p->s[*i] <= '9') {
		if (*i - start == CRUN_HOSTLIST_DIGITS_MAX)
			return fail(p, start, "number of more than 9 digits");
		v = v * 10 + (uint32_t)(p->s[*i] - '0');
		(*i)++;
	}
	if (*i == start)
		return fail(p, start, "expected a number or range like 1-4");
	*out = v;
	*width = (int)(*i - start);
	return 0;
}

/* The ranges of a group from just after '[' to its ']'; *i ends after it.
 * *widest: the most digits a number of the group takes. */
static int parse_group(struct parser *p, size_t *i, struct group *g, int *widest)
{
	struct crun__hostlist *hl = p->hl;

	g->first_range = hl->nranges;
	g->count = 0;
	*widest = 0;
	for (;;) {
		struct range *r = &hl->ranges[hl->nranges];
		size_t at = *i;
		int w, rc;

		if (p->s[*i] == ',' || p->s[*i] == ']')
			return fail(p, at, "empty range");
		rc = parse_number(p, i, &r->lo, &r->width);
		if (rc)
			return rc;
		r->hi = r->lo;
		if (p->s[*i] == '-') {
			(*i)++;
			rc = parse_number(p, i, &r->hi, &w);
			if (rc)
				return rc;
			if (r->hi < r->lo) {
				char what[64];

				snprintf(what, sizeof(what), "reversed range '%.*s'",
					 (int)(*i - at), p->s + at);
				return fail(p, at, what);
			}
		}
		if (p->s[*i] == '[')
			return fail(p, *i, "nested '['");
		if (p->s[*i] != ',' && p->s[*i] != ']')
			return fail(p, *i,
				    p->s[*i] ? "expected ',', '-' or ']' in a range"
					     : "unbalanced '['");
		r->start = g->count;
		g->count += (size_t)(r->hi - r->lo) + 1;
		if (g->count > CRUN_HOSTLIST_MAX_HOSTS)
			return fail(p, at, "more than 65536 hosts");
		w = digits_of(r->hi);
		if (r->width > w)
			w = r->width;
		if (w > *widest)
			*widest = w;
		hl->nranges++;
		if (p->s[(*i)++] == ']')
			break;
	}
	g->nranges = hl->nranges - g->first_range;
	return 0;
}

/* One item from s[*i] to the next ',' at depth 0 or the end. */
static int parse_item(struct parser *p, size_t *i)
{
	struct crun__hostlist *hl = p->hl;
	struct item *it = &hl->items[hl->nitems];
	size_t begin = *i, lit = *i, name_len = 0;

	it->first_group = hl->ngroups;
	it->count = 1;
	if (!p->s[*i] || p->s[*i] == ',')
		return fail(p, *i, "empty item");
	while (p->s[*i] && p->s[*i] != ',') {
		unsigned char c = (unsigned char)p->s[*i];

		if (c == ']')
			return fail(p, *i, "unbalanced ']'");
		if (c <= ' ' || c == 0x7f)
			return fail(p, *i, "space or control character in a host name");
		if (c == '[') {
			struct group *g = &hl->groups[hl->ngroups];
			int widest, rc;

			if (hl->ngroups - it->first_group == CRUN_HOSTLIST_GROUPS_MAX)
				return fail(p, *i, "more than 8 bracket groups in one name");
			g->prefix_off = lit;
			g->prefix_len = *i - lit;
			(*i)++;
			rc = parse_group(p, i, g, &widest);
			if (rc)
				return rc;
			hl->ngroups++;
			if (it->count > CRUN_HOSTLIST_MAX_HOSTS / g->count)
				return fail(p, begin, "more than 65536 hosts");
			it->count *= g->count;
			name_len += g->prefix_len + (size_t)widest;
			lit = *i;
			continue;
		}
		(*i)++;
	}
	it->ngroups = hl->ngroups - it->first_group;
	it->suffix_off = lit;
	it->suffix_len = *i - lit;
	name_len += it->suffix_len;
	if (name_len > CRUN_HOSTLIST_NAME_MAX)
		return fail(p, begin, "host name longer than 255 bytes");
	it->start = hl->count;
	if (hl->count + it->count > CRUN_HOSTLIST_MAX_HOSTS)
		return fail(p, begin, "more than 65536 hosts");
	hl->count += it->count;
	hl->nitems++;
	return 0;
}

struct crun__hostlist *crun__hostlist_create(const char *text, char *err, size_t errlen)
{
	struct parser p = {.s = text, .err = err, .errlen = errlen};
	struct crun__hostlist *hl;
	size_t len = strlen(text), commas = 0, brackets = 0, i = 0;

	if (!len) {
		crun__seterr(err, errlen, "empty host list");
		return NULL;
	}
	if (len > CRUN_HOSTLIST_TEXT_MAX) {
		crun__seterr(err, errlen, "host list longer than %d bytes", CRUN_HOSTLIST_TEXT_MAX);
		return NULL;
	}
	for (size_t j = 0; j < len; j++) {
		commas += text[j] == ',';
		brackets += text[j] == '[';
	}
	hl = calloc(1, sizeof(*hl));
	if (!hl)
		goto out_nomem;
	p.hl = hl;
	hl->text = strdup(text);
	hl->items = calloc(commas + 1, sizeof(*hl->items));
	hl->groups = calloc(brackets + 1, sizeof(*hl->groups));
	hl->ranges = calloc(commas + brackets + 1, sizeof(*hl->ranges));
	if (!hl->text || !hl->items || !hl->groups || !hl->ranges)
		goto out_nomem;
	p.s = hl->text;
	for (;;) {
		if (parse_item(&p, &i))
			goto out_destroy;
		if (!p.s[i])
			break;
		i++; /* the ',' */
		if (!p.s[i]) {
			fail(&p, i, "empty item");
			goto out_destroy;
		}
	}
	return hl;
out_nomem:
	crun__seterr(err, errlen, "out of memory");
out_destroy:
	crun__hostlist_destroy(hl);
	return NULL;
}

void crun__hostlist_destroy(struct crun__hostlist *hl)
{
	if (!hl)
		return;
	free(hl->text);
	free(hl->items);
	free(hl->groups);
	free(hl->ranges);
	free(hl);
}

size_t crun__hostlist_count(const struct crun__hostlist *hl)
{
	return hl->count;
}

/* The item that holds host i (i below the count). */
static const struct item *find_item(const struct crun__hostlist *hl, size_t i)
{
	size_t lo = 0, hi = hl->nitems;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (hl->items[mid].start <= i)
			lo = mid;
		else
			hi = mid;
	}
	return &hl->items[lo];
}

/* The number at index k of group g. */
static void group_number(const struct crun__hostlist *hl, const struct group *g, size_t k,
			 uint32_t *value, int *width)
{
	const struct range *r = hl->ranges + g->first_range;
	size_t lo = 0, hi = g->nranges;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (r[mid].start <= k)
			lo = mid;
		else
			hi = mid;
	}
	*value = r[lo].lo + (uint32_t)(k - r[lo].start);
	*width = r[lo].width;
}

static int append(char *out, size_t outlen, size_t *used, const char *s, size_t n)
{
	if (*used + n >= outlen)
		return -ENOSPC;
	memcpy(out + *used, s, n);
	*used += n;
	out[*used] = '\0';
	return 0;
}

int crun__hostlist_nth(const struct crun__hostlist *hl, size_t i, char *out, size_t outlen)
{
	size_t digit[CRUN_HOSTLIST_GROUPS_MAX], used = 0, rest;
	const struct item *it;

	if (i >= hl->count)
		return -ERANGE;
	if (!outlen)
		return -ENOSPC;
	out[0] = '\0';
	it = find_item(hl, i);
	rest = i - it->start;
	/* Mixed radix: the last group varies fastest. */
	for (size_t g = it->ngroups; g-- > 0;) {
		size_t n = hl->groups[it->first_group + g].count;

		digit[g] = rest % n;
		rest /= n;
	}
	for (size_t g = 0; g < it->ngroups; g++) {
		const struct group *gr = &hl->groups[it->first_group + g];
		char num[16];
		uint32_t v;
		int w, n;

		if (append(out, outlen, &used, hl->text + gr->prefix_off, gr->prefix_len))
			return -ENOSPC;
		group_number(hl, gr, digit[g], &v, &w);
		n = snprintf(num, sizeof(num), "%0*u", w, (unsigned)v);
		if (append(out, outlen, &used, num, (size_t)n))
			return -ENOSPC;
	}
	return append(out, outlen, &used, hl->text + it->suffix_off, it->suffix_len);
}

int crun__hostlist_next(const struct crun__hostlist *hl, size_t *pos, char *out, size_t outlen)
{
	int rc;

	if (*pos >= hl->count)
		return 0;
	rc = crun__hostlist_nth(hl, *pos, out, outlen);
	if (rc)
		return rc;
	(*pos)++;
	return 1;
}
