/* Encoding and strict decoding of the rendezvous messages (rdzv.h). The
 * server trusts nothing a JOIN says: every number is checked for its form
 * and its range here, once, so that round.c works with sane values only. */
#include "rendezvous/rdzv.h"
#include "common/util.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct crun__wire_item str_item(const char *s)
{
	struct crun__wire_item it = {(const uint8_t *)(s ? s : ""), s ? (uint32_t)strlen(s) : 0};

	return it;
}

/* Writes v in decimal at *scratch, advances it, returns the item. */
static struct crun__wire_item num_item(char **scratch, int64_t v)
{
	int n = sprintf(*scratch, "%" PRId64, v);
	struct crun__wire_item it = {(const uint8_t *)*scratch, (uint32_t)n};

	*scratch += n + 1;
	return it;
}

void crun__rdzv_join_msg(const struct crun__rdzv_node *self, const struct crun__rdzv_conf *conf,
			 struct crun__wire_msg *msg, struct crun__wire_item *items, char *scratch)
{
	items[0] = str_item(self->node_id);
	items[1] = str_item(self->host);
	items[2] = str_item(self->addr);
	items[3] = num_item(&scratch, self->nproc);
	items[4] = num_item(&scratch, self->node_rank);
	items[5] = num_item(&scratch, conf->min_nodes);
	items[6] = num_item(&scratch, conf->max_nodes);
	items[7] = num_item(&scratch, conf->last_call_ms);
	items[8] = num_item(&scratch, conf->keepalive_ms);
	items[9] = num_item(&scratch, conf->max_restarts);
	if (conf->has_exclusion) {
		items[10] = num_item(&scratch, conf->blacklist_failures);
		items[11] = num_item(&scratch, conf->blacklist_window_ms);
		items[12] = num_item(&scratch, conf->cooldown_min_ms);
		items[13] = num_item(&scratch, conf->cooldown_max_ms);
	}
	memset(msg, 0, sizeof(*msg));
	msg->type = CRUN_WIRE_RDZV_JOIN;
	msg->num = conf->join_timeout_ms;
	msg->count = conf->has_exclusion ? CRUN_RDZV_JOIN_ITEMS : CRUN_RDZV_JOIN_ITEMS_BASE;
	msg->items = items;
}

/* A decimal integer: an optional '-', 1 to 19 digits, nothing else, and
 * within [min, max]. */
static int item_int(const struct crun__wire_item *it, const char *what, int64_t min, int64_t max,
		    int64_t *out, char *err, size_t errlen)
{
	const uint8_t *p = it->data;
	uint32_t n = it->len, i = 0;
	bool neg = false;
	uint64_t v = 0;

	if (n && p[0] == '-') {
		neg = true;
		i = 1;
	}
	if (i == n || n - i > 19)
		goto bad;
	for (; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			goto bad;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		goto range;
	if ((neg ? -(int64_t)v : (int64_t)v) < min || (neg ? -(int64_t)v : (int64_t)v) > max)
		goto range;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
bad:
	crun__seterr(err, errlen, "%s is not a decimal integer: '%.*s'", what, n > 24 ? 24 : (int)n,
		     (const char *)p);
	for (char *q = err; q && *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
			*q = '?';
	return -EPROTO;
range:
	crun__seterr(err, errlen, "%s %s%" PRIu64 " is out of range [%" PRId64 ", %" PRId64 "]",
		     what, neg ? "-" : "", v, min, max);
	return -EPROTO;
}

/* A printable string of at most CRUN_RDZV_MAX_STR bytes (may be empty
 * when allow_empty), copied into *out. */
static int item_str(const struct crun__wire_item *it, const char *what, bool allow_empty,
		    char **out, char *err, size_t errlen)
{
	if (!it->len && !allow_empty) {
		crun__seterr(err, errlen, "%s is empty", what);
		return -EPROTO;
	}
	if (it->len > CRUN_RDZV_MAX_STR) {
		crun__seterr(err, errlen, "%s of %u bytes exceeds the limit of %d bytes", what,
			     it->len, CRUN_RDZV_MAX_STR);
		return -EPROTO;
	}
	for (uint32_t i = 0; i < it->len; i++)
		if (it->data[i] < 0x20 || it->data[i] >= 0x7f) {
			crun__seterr(err, errlen, "%s contains byte 0x%02x at offset %u", what,
				     it->data[i], i);
			return -EPROTO;
		}
	*out = malloc((size_t)it->len + 1);
	if (!*out) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (it->len)
		memcpy(*out, it->data, it->len);
	(*out)[it->len] = '\0';
	return 0;
}

void crun__rdzv_node_finish(struct crun__rdzv_node *node)
{
	if (!node)
		return;
	free(node->node_id);
	free(node->host);
	free(node->addr);
	node->node_id = node->host = node->addr = NULL;
}

int crun__rdzv_parse_join(const struct crun__wire_msg *msg, struct crun__rdzv_node *node,
			  struct crun__rdzv_conf *conf, char *err, size_t errlen)
{
	const struct crun__wire_item *it = msg->items;
	int64_t nproc, rank, min, max, last_call, keepalive, restarts;
	int64_t bl[4] = {0, 0, 0, 0};
	static const char *const bl_names[4] = {"blacklist_failures", "blacklist_window_ms",
						"cooldown_min_ms", "cooldown_max_ms"};
	int rc;

	memset(node, 0, sizeof(*node));
	memset(conf, 0, sizeof(*conf));
	if (msg->type != CRUN_WIRE_RDZV_JOIN ||
	    (msg->count != CRUN_RDZV_JOIN_ITEMS && msg->count != CRUN_RDZV_JOIN_ITEMS_BASE)) {
		crun__seterr(err, errlen, "not a JOIN of %d or %d items", CRUN_RDZV_JOIN_ITEMS_BASE,
			     CRUN_RDZV_JOIN_ITEMS);
		return -EPROTO;
	}
	for (uint32_t i = CRUN_RDZV_JOIN_ITEMS_BASE; i < msg->count; i++) {
		int64_t top = i == CRUN_RDZV_JOIN_ITEMS_BASE ? CRUN_RDZV_MAX_BLACKLIST : INT64_MAX;

		rc = item_int(&it[i], bl_names[i - CRUN_RDZV_JOIN_ITEMS_BASE], 0, top,
			      &bl[i - CRUN_RDZV_JOIN_ITEMS_BASE], err, errlen);
		if (rc < 0)
			return rc;
	}
	if (bl[2] > bl[3]) {
		crun__seterr(err, errlen,
			     "cooldown_min_ms %" PRId64 " is above cooldown_max_ms %" PRId64, bl[2],
			     bl[3]);
		return -EPROTO;
	}
	if (msg->num <= 0) {
		crun__seterr(err, errlen, "join timeout must be positive, got %" PRId64, msg->num);
		return -EPROTO;
	}
	if ((rc = item_int(&it[3], "nproc", 1, CRUN_RDZV_MAX_NPROC, &nproc, err, errlen)) < 0 ||
	    (rc = item_int(&it[5], "min_nodes", 1, CRUN_RDZV_MAX_NODES, &min, err, errlen)) < 0 ||
	    (rc = item_int(&it[6], "max_nodes", 1, CRUN_RDZV_MAX_NODES, &max, err, errlen)) < 0 ||
	    (rc = item_int(&it[7], "last_call_ms", 0, INT64_MAX, &last_call, err, errlen)) < 0 ||
	    (rc = item_int(&it[8], "keepalive_ms", 0, INT64_MAX, &keepalive, err, errlen)) < 0 ||
	    (rc = item_int(&it[9], "max_restarts", 0, INT_MAX, &restarts, err, errlen)) < 0)
		return rc;
	if (min > max) {
		crun__seterr(err, errlen, "min_nodes %" PRId64 " is above max_nodes %" PRId64, min,
			     max);
		return -EPROTO;
	}
	rc = item_int(&it[4], "node_rank", -1, max - 1, &rank, err, errlen);
	if (rc < 0)
		return rc;
	if ((rc = item_str(&it[0], "node_id", false, &node->node_id, err, errlen)) < 0 ||
	    (rc = item_str(&it[1], "host", false, &node->host, err, errlen)) < 0 ||
	    (rc = item_str(&it[2], "addr", true, &node->addr, err, errlen)) < 0) {
		crun__rdzv_node_finish(node);
		return rc == -ENOMEM ? rc : -EPROTO;
	}
	node->nproc = (int)nproc;
	node->node_rank = (int)rank;
	conf->min_nodes = (int)min;
	conf->max_nodes = (int)max;
	conf->join_timeout_ms = msg->num;
	conf->last_call_ms = last_call;
	conf->keepalive_ms = keepalive;
	conf->max_restarts = (int)restarts;
	conf->blacklist_failures = (int)bl[0];
	conf->blacklist_window_ms = bl[1];
	conf->cooldown_min_ms = bl[2];
	conf->cooldown_max_ms = bl[3];
	conf->has_exclusion = msg->count == CRUN_RDZV_JOIN_ITEMS;
	return 0;
}

void crun__rdzv_assignment_finish(struct crun__rdzv_assignment *a)
{
	if (!a)
		return;
	for (int i = 0; a->nodes && i < a->nnodes; i++)
		crun__rdzv_node_finish(&a->nodes[i]);
	free(a->nodes);
	memset(a, 0, sizeof(*a));
}

int crun__rdzv_parse_assignment(const struct crun__wire_msg *msg, struct crun__rdzv_assignment *a,
				char *err, size_t errlen)
{
	const struct crun__wire_item *it = msg->items;
	int64_t round, restarts, rank, nnodes, nproc;
	char what[48];
	int rc;

	memset(a, 0, sizeof(*a));
	if (msg->type != CRUN_WIRE_VALUES) {
		crun__seterr(err, errlen, "expected VALUES, got %s",
			     crun__wire_type_name(msg->type));
		return -EPROTO;
	}
	if (msg->count < 4) {
		crun__seterr(err, errlen, "assignment of %u items is shorter than 4", msg->count);
		return -EPROTO;
	}
	if ((rc = item_int(&it[0], "round", 0, INT64_MAX, &round, err, errlen)) < 0 ||
	    (rc = item_int(&it[1], "restart_count", 0, INT64_MAX, &restarts, err, errlen)) < 0 ||
	    (rc = item_int(&it[3], "nnodes", 1, CRUN_RDZV_MAX_NODES, &nnodes, err, errlen)) < 0 ||
	    (rc = item_int(&it[2], "group_rank", 0, nnodes - 1, &rank, err, errlen)) < 0)
		return rc;
	if (msg->count != 4 + 4 * (uint64_t)nnodes) {
		crun__seterr(err, errlen,
			     "assignment of %" PRId64 " nodes needs %" PRId64 " items, got %u",
			     nnodes, 4 + 4 * nnodes, msg->count);
		return -EPROTO;
	}
	a->nodes = calloc((size_t)nnodes, sizeof(*a->nodes));
	if (!a->nodes) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	a->round = round;
	a->restart_count = restarts;
	a->group_rank = (int)rank;
	a->nnodes = (int)nnodes;
	for (int i = 0; i < a->nnodes; i++) {
		const struct crun__wire_item *n = &it[4 + 4 * i];
		struct crun__rdzv_node *node = &a->nodes[i];

		snprintf(what, sizeof(what), "nproc of node %d", i);
		rc = item_int(&n[3], what, 1, CRUN_RDZV_MAX_NPROC, &nproc, err, errlen);
		if (rc < 0)
			goto out_finish;
		snprintf(what, sizeof(what), "node_id of node %d", i);
		rc = item_str(&n[0], what, false, &node->node_id, err, errlen);
		if (rc < 0)
			goto out_finish;
		snprintf(what, sizeof(what), "host of node %d", i);
		rc = item_str(&n[1], what, false, &node->host, err, errlen);
		if (rc < 0)
			goto out_finish;
		snprintf(what, sizeof(what), "addr of node %d", i);
		rc = item_str(&n[2], what, false, &node->addr, err, errlen);
		if (rc < 0)
			goto out_finish;
		node->nproc = (int)nproc;
		node->node_rank = i;
		if (i < a->group_rank)
			a->rank_offset += node->nproc;
		a->world_size += node->nproc; /* <= 16383 * 65536: fits an int */
	}
	return 0;

out_finish:
	crun__rdzv_assignment_finish(a);
	return rc == -ENOMEM ? rc : -EPROTO;
}

void crun__rdzv_resume_msg(const struct crun__rdzv_node *self, const struct crun__rdzv_conf *conf,
			   const struct crun__rdzv_assignment *a, int64_t wait_ms,
			   struct crun__wire_msg *msg, struct crun__wire_item *items, char *scratch)
{
	struct crun__rdzv_conf full = *conf;
	struct crun__wire_item *it = items + CRUN_RDZV_JOIN_ITEMS;

	full.has_exclusion = true;
	crun__rdzv_join_msg(self, &full, msg, items, scratch);
	scratch += CRUN_RDZV_JOIN_SCRATCH;
	it[0] = num_item(&scratch, a->round);
	it[1] = num_item(&scratch, a->restart_count);
	it[2] = num_item(&scratch, a->group_rank);
	it[3] = num_item(&scratch, a->nnodes);
	for (int i = 0; i < a->nnodes; i++) {
		it[4 + 4 * i] = str_item(a->nodes[i].node_id);
		it[5 + 4 * i] = str_item(a->nodes[i].host);
		it[6 + 4 * i] = str_item(a->nodes[i].addr);
		it[7 + 4 * i] = num_item(&scratch, a->nodes[i].nproc);
	}
	msg->type = CRUN_WIRE_RDZV_RESUME;
	msg->num = wait_ms;
	msg->count = (uint32_t)CRUN_RDZV_RESUME_ITEMS(a->nnodes);
}

int crun__rdzv_parse_resume(const struct crun__wire_msg *msg, struct crun__rdzv_node *node,
			    struct crun__rdzv_conf *conf, struct crun__rdzv_assignment *a,
			    char *err, size_t errlen)
{
	struct crun__wire_msg part;
	const struct crun__rdzv_node *me;
	int rc;

	memset(node, 0, sizeof(*node));
	memset(a, 0, sizeof(*a));
	if (msg->type != CRUN_WIRE_RDZV_RESUME || msg->count < CRUN_RDZV_JOIN_ITEMS + 4) {
		crun__seterr(err, errlen, "not a RESUME of at least %d items",
			     CRUN_RDZV_JOIN_ITEMS + 4);
		return -EPROTO;
	}
	part = (struct crun__wire_msg){.type = CRUN_WIRE_RDZV_JOIN,
				       .num = msg->num,
				       .count = CRUN_RDZV_JOIN_ITEMS,
				       .items = msg->items};
	rc = crun__rdzv_parse_join(&part, node, conf, err, errlen);
	if (rc < 0)
		return rc;
	part = (struct crun__wire_msg){.type = CRUN_WIRE_VALUES,
				       .count = msg->count - CRUN_RDZV_JOIN_ITEMS,
				       .items = msg->items + CRUN_RDZV_JOIN_ITEMS};
	rc = crun__rdzv_parse_assignment(&part, a, err, errlen);
	if (rc < 0) {
		crun__rdzv_node_finish(node);
		return rc;
	}
	me = &a->nodes[a->group_rank];
	if (strcmp(me->node_id, node->node_id) || me->nproc != node->nproc) {
		crun__seterr(err, errlen,
			     "the resumer '%s' (nproc %d) is not member %d of round %" PRId64
			     " ('%s', nproc %d)",
			     node->node_id, node->nproc, a->group_rank, a->round, me->node_id,
			     me->nproc);
		crun__rdzv_node_finish(node);
		crun__rdzv_assignment_finish(a);
		return -EPROTO;
	}
	return 0;
}

const char *crun__rdzv_format_ms(int64_t ms, char *buf, size_t len)
{
	if (ms >= 1000 && ms % 1000 == 0)
		snprintf(buf, len, "%" PRId64 "s", ms / 1000);
	else
		snprintf(buf, len, "%" PRId64 "ms", ms);
	return buf;
}
