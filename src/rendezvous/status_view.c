/* The job document and its table (status_view.h). */
#include "rendezvous/status_view.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int64_t int_or(const json_t *o, const char *key, int64_t dflt)
{
	const json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : dflt;
}

/* A copy of o's key, or null. */
static json_t *field(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return v ? json_incref(v) : json_null();
}

static int by_group_rank(const void *pa, const void *pb)
{
	const json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
	int64_t ra = int_or(a, "group_rank", INT64_MAX), rb = int_or(b, "group_rank", INT64_MAX);

	if (ra != rb)
		return ra < rb ? -1 : 1;
	return strcmp(str_or(a, "node_id", ""), str_or(b, "node_id", ""));
}

struct rank_row {
	int64_t rank, local_rank;
	json_t *row;
};

static int by_rank(const void *pa, const void *pb)
{
	const struct rank_row *a = pa, *b = pb;
	uint64_t ra = (uint64_t)a->rank, rb = (uint64_t)b->rank; /* -1 last */

	if (ra != rb)
		return ra < rb ? -1 : 1;
	return a->local_rank < b->local_rank ? -1 : a->local_rank > b->local_rank;
}

/* The node that is furthest on: the highest round, then the most
 * restarts. */
static const json_t *newest(json_t **nodes, size_t n)
{
	const json_t *best = NULL;

	for (size_t i = 0; i < n; i++) {
		int64_t r = int_or(nodes[i], "round", -1),
			c = int_or(nodes[i], "restart_count", -1);

		if (!best || r > int_or(best, "round", -1) ||
		    (r == int_or(best, "round", -1) && c > int_or(best, "restart_count", -1)))
			best = nodes[i];
	}
	return best;
}

static const json_t *node_by_id(json_t **nodes, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(str_or(nodes[i], "node_id", ""), id))
			return nodes[i];
	return NULL;
}

static bool same_round(const json_t *a, const json_t *b)
{
	return int_or(a, "round", -1) == int_or(b, "round", -1);
}

/* The round's members, as a node of the round lists them (group rank 0
 * does; nodes are sorted by group rank); NULL when none does. */
static const json_t *round_members(json_t **nodes, size_t n, const json_t *best)
{
	for (size_t i = 0; best && i < n; i++)
		if (same_round(nodes[i], best) &&
		    json_array_size(json_object_get(nodes[i], "members")))
			return json_object_get(nodes[i], "members");
	return NULL;
}

static bool listed(const json_t *list, const char *node_id)
{
	size_t i;
	json_t *m;

	json_array_foreach(list, i, m)
	{
		if (!strcmp(str_or(m, "node_id", ""), node_id))
			return true;
	}
	return false;
}

/* A node of the newest round: in it, and a member of it when the members
 * are known. */
static bool in_round(const json_t *node, const json_t *best, const json_t *list)
{
	return best && same_round(node, best) &&
	       (!list || listed(list, str_or(node, "node_id", "")));
}

static json_t *members_of(json_t **nodes, size_t n, const json_t *best, const json_t *list)
{
	json_t *out = json_array();
	size_t i;
	json_t *m;

	if (!out)
		return NULL;
	if (list) {
		json_array_foreach(list, i, m)
		{
			const json_t *node = node_by_id(nodes, n, str_or(m, "node_id", ""));
			json_t *row = json_deep_copy(m);

			if (node && !in_round(node, best, list))
				node = NULL;
			json_object_set_new(
				row, "state",
				json_string(node ? str_or(node, "state", "") : "missing"));
			json_array_append_new(out, row);
		}
		return out;
	}
	for (i = 0; i < n; i++) {
		json_t *row;

		if (!in_round(nodes[i], best, NULL))
			continue;
		row = json_object();
		json_object_set_new(row, "group_rank", field(nodes[i], "group_rank"));
		json_object_set_new(row, "node_id", field(nodes[i], "node_id"));
		json_object_set_new(row, "host", field(nodes[i], "node"));
		json_object_set_new(row, "addr", json_string(""));
		json_object_set_new(row, "local_world_size",
				    json_integer((json_int_t)json_array_size(
					    json_object_get(nodes[i], "workers"))));
		json_object_set_new(row, "state", field(nodes[i], "state"));
		json_array_append_new(out, row);
	}
	return out;
}

/* The nodes that publish but are not in the newest round (left behind
 * in an older one, or not members of it). */
static json_t *not_in_round_of(json_t **nodes, size_t n, const json_t *best, const json_t *list)
{
	json_t *out = json_array();

	for (size_t i = 0; out && i < n; i++) {
		json_t *row;

		if (in_round(nodes[i], best, list))
			continue;
		row = json_object();
		json_object_set_new(row, "node", field(nodes[i], "node"));
		json_object_set_new(row, "node_id", field(nodes[i], "node_id"));
		json_object_set_new(row, "round", field(nodes[i], "round"));
		json_object_set_new(row, "state", field(nodes[i], "state"));
		json_array_append_new(out, row);
	}
	return out;
}

/* The most a document can be older than the reader's "now" without a
 * clock's skew: the publishers' period and gap (agent/status.h: 3 s and
 * 1 s). */
#define PUBLISH_LAG_MAX_MS 4000

/* Milliseconds since the moment then of the node's own clock: how long
 * before its publication then was (one clock), plus how long ago it
 * published by ours (another host's clock: only within [0, the lag
 * bound], so that a skew between hosts does not age everything). -1 when
 * the node gives no time. */
static int64_t age_ms(const json_t *node, int64_t then, uint64_t now_ms)
{
	int64_t at = int_or(node, "time_ms", -1), before, lag;

	if (at < 0 || then < 0)
		return -1;
	before = at > then ? at - then : 0;
	lag = (int64_t)now_ms - at;
	lag = lag < 0 ? 0 : lag > PUBLISH_LAG_MAX_MS ? PUBLISH_LAG_MAX_MS : lag;
	return before + lag;
}

/* Seconds since a worker's last beat; null when none, or when it has
 * exited (a beat age then says nothing). */
static json_t *beat_age(const json_t *node, const json_t *w, uint64_t now_ms)
{
	const char *state = str_or(w, "state", "");
	int64_t age = age_ms(node, int_or(w, "last_beat_ms", -1), now_ms);

	/* exited: succeeded, failed, or hung with its end known */
	if (age < 0 || !strcmp(state, "succeeded") || !strcmp(state, "failed") ||
	    int_or(w, "signal", -1) > 0 || int_or(w, "exit_code", -1) >= 0)
		return json_null();
	return json_real((double)age / 1000.0);
}

static json_t *ranks_of(json_t **nodes, size_t n, const json_t *best, const json_t *list,
			uint64_t now_ms)
{
	struct rank_row *rows = NULL;
	size_t nrows = 0, cap = 0, i, j;
	json_t *out = json_array(), *w;

	if (!out)
		return NULL;
	for (i = 0; i < n; i++) {
		if (!in_round(nodes[i], best, list))
			continue;
		json_array_foreach(json_object_get(nodes[i], "workers"), j, w)
		{
			json_t *row = json_object();

			if (nrows == cap) {
				struct rank_row *nr;

				cap = cap ? 2 * cap : 16;
				nr = realloc(rows, cap * sizeof(*rows));
				if (!nr) {
					json_decref(row);
					goto out_fail;
				}
				rows = nr;
			}
			json_object_set_new(row, "rank", field(w, "rank"));
			json_object_set_new(row, "node", field(nodes[i], "node"));
			json_object_set_new(row, "local_rank", field(w, "local_rank"));
			json_object_set_new(row, "pid", field(w, "pid"));
			json_object_set_new(row, "state", field(w, "state"));
			json_object_set_new(row, "beat_age_s", beat_age(nodes[i], w, now_ms));
			json_object_set_new(row, "step", field(w, "step"));
			json_object_set_new(row, "step_s", field(w, "step_s"));
			json_object_set_new(row, "straggler_ratio", field(w, "straggler_ratio"));
			json_object_set_new(row, "gpu", field(w, "gpu"));
			rows[nrows++] = (struct rank_row){int_or(w, "rank", -1),
							  int_or(w, "local_rank", 0), row};
		}
	}
	if (nrows)
		qsort(rows, nrows, sizeof(*rows), by_rank);
	for (i = 0; i < nrows; i++)
		json_array_append_new(out, rows[i].row);
	free(rows);
	return out;
out_fail:
	for (i = 0; i < nrows; i++)
		json_decref(rows[i].row);
	free(rows);
	json_decref(out);
	return NULL;
}

/* The newest failure: the one with the smallest age, each measured on
 * its node's own clock (age_ms), not by comparing two hosts' clocks. */
static json_t *last_failure_of(json_t **nodes, size_t n, uint64_t now_ms)
{
	const json_t *best = NULL, *bestnode = NULL;
	int64_t best_age = 0;

	for (size_t i = 0; i < n; i++) {
		const json_t *f = json_object_get(nodes[i], "last_failure");
		int64_t age;

		if (!json_is_object(f))
			continue;
		age = age_ms(nodes[i], int_or(f, "time_ms", -1), now_ms);
		if (age < 0)
			age = INT64_MAX;
		if (!best || age < best_age) {
			best = f;
			bestnode = nodes[i];
			best_age = age;
		}
	}
	if (!best)
		return json_null();
	json_t *o = json_object();
	json_object_set_new(o, "line", field(best, "line"));
	json_object_set_new(o, "node", field(bestnode, "node"));
	json_object_set_new(o, "time_ms", field(best, "time_ms"));
	return o;
}

json_t *crun__status_job(const char *run_id, const char *endpoint, json_t *nodes, uint64_t now_ms)
{
	size_t n = json_array_size(nodes), i;
	json_t **v, *job, *sorted;
	const json_t *best, *list;

	if (!json_is_array(nodes))
		return NULL;
	v = calloc(n ? n : 1, sizeof(*v));
	job = json_object();
	sorted = json_array();
	if (!v || !job || !sorted) {
		free(v);
		json_decref(job);
		json_decref(sorted);
		return NULL;
	}
	for (i = 0; i < n; i++)
		v[i] = json_array_get(nodes, i);
	qsort(v, n, sizeof(*v), by_group_rank);
	best = newest(v, n);
	list = round_members(v, n, best);
	json_object_set_new(job, "version", json_integer(1));
	json_object_set_new(job, "run_id", json_string(run_id));
	json_object_set_new(job, "endpoint", json_string(endpoint));
	json_object_set_new(job, "time_ms", json_integer((json_int_t)now_ms));
	json_object_set_new(job, "round", best ? field(best, "round") : json_null());
	json_object_set_new(job, "restart_count",
			    best ? field(best, "restart_count") : json_null());
	json_object_set_new(job, "max_restarts", best ? field(best, "max_restarts") : json_null());
	json_object_set_new(job, "state", best ? field(best, "state") : json_null());
	json_object_set_new(job, "members", members_of(v, n, best, list));
	json_object_set_new(job, "ranks", ranks_of(v, n, best, list, now_ms));
	json_object_set_new(job, "not_in_round", not_in_round_of(v, n, best, list));
	json_object_set_new(job, "last_failure", last_failure_of(v, n, now_ms));
	for (i = 0; i < n; i++)
		json_array_append(sorted, v[i]);
	json_object_set_new(job, "nodes", sorted);
	free(v);
	if (!json_is_array(json_object_get(job, "members")) ||
	    !json_is_array(json_object_get(job, "ranks")) ||
	    !json_is_array(json_object_get(job, "not_in_round"))) {
		json_decref(job);
		return NULL;
	}
	return job;
}

/* ---- the table ------------------------------------------------------------- */

/* A value as a cell: "-" for null or missing. */
static const char *cell(char *buf, size_t len, const json_t *v)
{
	if (json_is_string(v))
		snprintf(buf, len, "%s", json_string_value(v)[0] ? json_string_value(v) : "-");
	else if (json_is_integer(v))
		snprintf(buf, len, "%" PRId64, (int64_t)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(buf, len, "%.2f", json_real_value(v));
	else if (json_is_boolean(v))
		snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
	else
		snprintf(buf, len, "-");
	return buf;
}

static const char *age_cell(char *buf, size_t len, const json_t *v)
{
	double s = json_number_value(v);

	if (!json_is_number(v))
		snprintf(buf, len, "-");
	else if (s < 10)
		snprintf(buf, len, "%.1fs", s);
	else if (s < 600)
		snprintf(buf, len, "%.0fs", s);
	else
		snprintf(buf, len, "%.0fm", s / 60);
	return buf;
}

static const char *gpu_cell(char *buf, size_t len, const json_t *gpu)
{
	const json_t *util = json_object_get(gpu, "util");
	int64_t used = int_or(gpu, "mem_used", -1), total = int_or(gpu, "mem_total", -1);
	size_t n;

	if (!json_is_object(gpu))
		return cell(buf, len, NULL);
	n = (size_t)snprintf(buf, len, "%" PRId64, int_or(gpu, "index", -1));
	if (n < len && json_is_number(util))
		n += (size_t)snprintf(buf + n, len - n, " %.0f%%", 100 * json_number_value(util));
	if (n < len && used >= 0 && total > 0)
		snprintf(buf + n, len - n, " %.1f/%.1fGiB", (double)used / (1 << 30),
			 (double)total / (1 << 30));
	return buf;
}

void crun__status_render(FILE *f, const json_t *job)
{
	char a[64], b[64], c[64], d[64], e[64], g[64], h[300], gp[128];
	const json_t *row, *fail = json_object_get(job, "last_failure");
	size_t i;

	fprintf(f, "run %s  store %s  round %s  restarts %s/%s  state %s\n",
		str_or(job, "run_id", "?"), str_or(job, "endpoint", "?"),
		cell(a, sizeof(a), json_object_get(job, "round")),
		cell(b, sizeof(b), json_object_get(job, "restart_count")),
		cell(c, sizeof(c), json_object_get(job, "max_restarts")),
		cell(d, sizeof(d), json_object_get(job, "state")));
	fprintf(f, "\n%-6s %-24s %-22s %-6s %s\n", "NODE", "HOST", "ADDRESS", "LOCAL", "STATE");
	json_array_foreach(json_object_get(job, "members"), i, row)
		fprintf(f, "%-6s %-24s %-22s %-6s %s\n",
			cell(a, sizeof(a), json_object_get(row, "group_rank")),
			cell(h, sizeof(h), json_object_get(row, "host")),
			cell(b, sizeof(b), json_object_get(row, "addr")),
			cell(c, sizeof(c), json_object_get(row, "local_world_size")),
			cell(d, sizeof(d), json_object_get(row, "state")));
	fprintf(f, "\n%-6s %-24s %-6s %-8s %-10s %-7s %-8s %s\n", "RANK", "HOST", "LOCAL", "PID",
		"STATE", "BEAT", "STEP", "GPU");
	json_array_foreach(json_object_get(job, "ranks"), i, row)
		fprintf(f, "%-6s %-24s %-6s %-8s %-10s %-7s %-8s %s\n",
			cell(a, sizeof(a), json_object_get(row, "rank")),
			cell(h, sizeof(h), json_object_get(row, "node")),
			cell(b, sizeof(b), json_object_get(row, "local_rank")),
			cell(c, sizeof(c), json_object_get(row, "pid")),
			cell(d, sizeof(d), json_object_get(row, "state")),
			age_cell(e, sizeof(e), json_object_get(row, "beat_age_s")),
			cell(g, sizeof(g), json_object_get(row, "step")),
			gpu_cell(gp, sizeof(gp), json_object_get(row, "gpu")));
	json_array_foreach(json_object_get(job, "not_in_round"), i, row)
		fprintf(f, "%snot in the round: %s (round %s, state %s)\n", i ? "" : "\n",
			cell(h, sizeof(h), json_object_get(row, "node")),
			cell(a, sizeof(a), json_object_get(row, "round")),
			cell(d, sizeof(d), json_object_get(row, "state")));
	if (json_is_object(fail))
		fprintf(f, "\nlast failure (%s): %s\n", str_or(fail, "node", "?"),
			str_or(fail, "line", "?"));
}
