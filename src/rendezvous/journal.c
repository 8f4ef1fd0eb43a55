/* The rendezvous journal's text (journal.h).
 *
 * JSON through jansson, because a person repairing a store reads it, and
 * because every field is named: a later version adds fields without
 * breaking the layout. Decoding is strict, since a record that is only
 * half right would make a restarted store tell agents something no store
 * ever told them: a file that does not parse as a whole is refused. */
#include "rendezvous/journal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static const char *const state_names[] = {"running", "open", "finished", "failed"};

void crun__journal_run_finish(struct crun__journal_run *run)
{
	if (!run)
		return;
	for (int i = 0; i < run->nmembers; i++)
		crun__rdzv_node_finish(&run->members[i]);
	free(run->members);
	free(run->run_id);
	memset(run, 0, sizeof(*run));
}

bool crun__journal_closed(enum crun__journal_state state)
{
	return state == CRUN_JOURNAL_FINISHED || state == CRUN_JOURNAL_FAILED;
}

/* ---- encode --------------------------------------------------------------- */

static json_t *encode_run(const struct crun__journal_run *run)
{
	static const char hex[] = "0123456789abcdef";
	const struct crun__rdzv_conf *c = &run->conf;
	char *id = malloc(2 * run->run_id_len + 1), *name = malloc(run->run_id_len + 1);
	json_t *o = NULL, *members;

	if (!id || !name)
		goto out_free;
	for (size_t i = 0; i < run->run_id_len; i++) {
		uint8_t b = run->run_id[i];

		id[2 * i] = hex[b >> 4];
		id[2 * i + 1] = hex[b & 15];
		name[i] = b >= 0x20 && b < 0x7f ? (char)b : '?';
	}
	id[2 * run->run_id_len] = '\0';
	name[run->run_id_len] = '\0';
	members = json_array();
	for (int i = 0; members && i < run->nmembers; i++) {
		const struct crun__rdzv_node *m = &run->members[i];

		if (json_array_append_new(members, json_pack("{s:s, s:s, s:s, s:i, s:i}", "node_id",
							     m->node_id, "host", m->host, "addr",
							     m->addr, "nproc", m->nproc,
							     "node_rank", m->node_rank)) < 0) {
			json_decref(members);
			members = NULL;
		}
	}
	if (!members)
		goto out_free;
	o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:{s:i, s:i, s:I, s:i, s:b, s:i, s:I, s:I, "
		      "s:I, s:b, s:I}, s:o}",
		      "run", id, "name", name, "state", state_names[run->state], "round",
		      (json_int_t)run->round, "restart_count", (json_int_t)run->restart_count,
		      "written", (json_int_t)run->written, "conf", "min_nodes", c->min_nodes,
		      "max_nodes", c->max_nodes, "last_call_ms", (json_int_t)c->last_call_ms,
		      "max_restarts", c->max_restarts, "has_exclusion", c->has_exclusion,
		      "blacklist_failures", c->blacklist_failures, "blacklist_window_ms",
		      (json_int_t)c->blacklist_window_ms, "cooldown_min_ms",
		      (json_int_t)c->cooldown_min_ms, "cooldown_max_ms",
		      (json_int_t)c->cooldown_max_ms, "static_ranks", run->static_ranks, "wait_ms",
		      (json_int_t)run->wait_ms, "members", members);
out_free:
	free(id);
	free(name);
	return o;
}

char *crun__journal_encode(const struct crun__journal_run *runs, size_t n)
{
	json_t *root, *arr = json_array();
	char *text = NULL;

	if (!arr)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (json_array_append_new(arr, encode_run(&runs[i])) < 0) {
			json_decref(arr);
			return NULL;
		}
	}
	root = json_pack("{s:i, s:o}", "version", CRUN_JOURNAL_VERSION, "runs", arr);
	if (root)
		text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (text) {
		/* A text file ends with a newline. */
		size_t len = strlen(text);
		char *t = realloc(text, len + 2);

		if (!t) {
			free(text);
			return NULL;
		}
		t[len] = '\n';
		t[len + 1] = '\0';
		text = t;
	}
	return text;
}

/* ---- decode --------------------------------------------------------------- */

struct dec {
	const char *name; /* the file */
	char *err;
	size_t errlen;
	char where[64]; /* "run 3", "run 3, member 2" */
};

static int bad(struct dec *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct dec *d, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(d->err, d->errlen, "%s: %s%s%s", d->name, d->where, d->where[0] ? ": " : "", what);
	return -EPROTO;
}

static int get_int(struct dec *d, json_t *o, const char *key, int64_t min, int64_t max,
		   int64_t *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return bad(d, "'%s' must be a whole number from %" PRId64 " to %" PRId64, key, min,
			   max);
	*out = json_integer_value(v);
	return 0;
}

static int get_bool(struct dec *d, json_t *o, const char *key, bool *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_boolean(v))
		return bad(d, "'%s' must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

/* A copy of a printable string of 1 (0 when may_be_empty) to
 * CRUN_RDZV_MAX_STR bytes, as a JOIN's strings. */
static int get_str(struct dec *d, json_t *o, const char *key, bool may_be_empty, char **out)
{
	json_t *v = json_object_get(o, key);
	const char *s = json_string_value(v);
	size_t len = json_string_length(v);

	if (!json_is_string(v) || len > CRUN_RDZV_MAX_STR || (!len && !may_be_empty))
		return bad(d, "'%s' must be a string of %d to %d bytes", key, may_be_empty ? 0 : 1,
			   CRUN_RDZV_MAX_STR);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
			return bad(d, "'%s' has a byte that is not printable ASCII", key);
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static int decode_conf(struct dec *d, json_t *o, struct crun__journal_run *run)
{
	struct crun__rdzv_conf *c = &run->conf;
	int64_t v[9];
	int rc;

	if (!json_is_object(o))
		return bad(d, "'conf' must be an object");
	if ((rc = get_int(d, o, "min_nodes", 1, CRUN_RDZV_MAX_NODES, &v[0])) < 0 ||
	    (rc = get_int(d, o, "max_nodes", v[0], CRUN_RDZV_MAX_NODES, &v[1])) < 0 ||
	    (rc = get_int(d, o, "last_call_ms", 0, INT64_MAX, &v[2])) < 0 ||
	    (rc = get_int(d, o, "max_restarts", 0, INT32_MAX, &v[3])) < 0 ||
	    (rc = get_bool(d, o, "has_exclusion", &c->has_exclusion)) < 0 ||
	    (rc = get_int(d, o, "blacklist_failures", 0, CRUN_RDZV_MAX_BLACKLIST, &v[4])) < 0 ||
	    (rc = get_int(d, o, "blacklist_window_ms", 0, INT64_MAX, &v[5])) < 0 ||
	    (rc = get_int(d, o, "cooldown_min_ms", 0, INT64_MAX, &v[6])) < 0 ||
	    (rc = get_int(d, o, "cooldown_max_ms", 0, INT64_MAX, &v[7])) < 0 ||
	    (rc = get_bool(d, o, "static_ranks", &run->static_ranks)) < 0 ||
	    (rc = get_int(d, o, "wait_ms", 0, INT64_MAX, &v[8])) < 0)
		return rc;
	c->min_nodes = (int)v[0];
	c->max_nodes = (int)v[1];
	c->last_call_ms = v[2];
	c->max_restarts = (int)v[3];
	c->blacklist_failures = (int)v[4];
	c->blacklist_window_ms = v[5];
	c->cooldown_min_ms = v[6];
	c->cooldown_max_ms = v[7];
	run->wait_ms = v[8];
	return 0;
}

static int decode_member(struct dec *d, json_t *o, struct crun__rdzv_node *m, int max_nodes)
{
	int64_t nproc, rank;
	int rc;

	if (!json_is_object(o))
		return bad(d, "a member must be an object");
	if ((rc = get_str(d, o, "node_id", false, &m->node_id)) < 0 ||
	    (rc = get_str(d, o, "host", false, &m->host)) < 0 ||
	    (rc = get_str(d, o, "addr", false, &m->addr)) < 0 ||
	    (rc = get_int(d, o, "nproc", 1, CRUN_RDZV_MAX_NPROC, &nproc)) < 0 ||
	    (rc = get_int(d, o, "node_rank", -1, max_nodes - 1, &rank)) < 0)
		return rc;
	m->nproc = (int)nproc;
	m->node_rank = (int)rank;
	return 0;
}

static int decode_run(struct dec *d, json_t *o, struct crun__journal_run *run)
{
	json_t *v, *members;
	const char *s;
	size_t len;
	int64_t n;
	int rc;

	if (!json_is_object(o))
		return bad(d, "a run must be an object");
	v = json_object_get(o, "run");
	s = json_string_value(v);
	len = json_string_length(v);
	if (!s || !len || len % 2)
		return bad(d, "'run' must be the run id in hex");
	run->run_id = malloc(len / 2);
	if (!run->run_id)
		return -ENOMEM;
	run->run_id_len = len / 2;
	for (size_t i = 0; i < len / 2; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return bad(d, "'run' must be the run id in lower-case hex");
		run->run_id[i] = (uint8_t)(hi << 4 | lo);
	}
	s = json_string_value(json_object_get(o, "state"));
	for (n = 0; s && n < 4; n++)
		if (!strcmp(s, state_names[n]))
			break;
	if (!s || n == 4)
		return bad(d, "'state' must be running, open, finished or failed");
	run->state = (enum crun__journal_state)n;
	if ((rc = get_int(d, o, "round", 1, INT64_MAX, &run->round)) < 0 ||
	    (rc = get_int(d, o, "restart_count", 0, INT64_MAX, &run->restart_count)) < 0 ||
	    (rc = get_int(d, o, "written", 0, INT64_MAX, &run->written)) < 0 ||
	    (rc = decode_conf(d, json_object_get(o, "conf"), run)) < 0)
		return rc;
	members = json_object_get(o, "members");
	if (!json_is_array(members))
		return bad(d, "'members' must be an array");
	n = (int64_t)json_array_size(members);
	if (run->state == CRUN_JOURNAL_RUNNING ? n < 1 || n > run->conf.max_nodes : n != 0)
		return bad(d, "%" PRId64 " members for a run that is %s with --nnodes at most %d",
			   n, state_names[run->state], run->conf.max_nodes);
	if (n) {
		run->members = calloc((size_t)n, sizeof(*run->members));
		if (!run->members)
			return -ENOMEM;
	}
	for (int64_t i = 0; i < n; i++) {
		size_t at = strlen(d->where);

		run->nmembers = (int)i + 1;
		snprintf(d->where + at, sizeof(d->where) - at, ", member %" PRId64, i);
		rc = decode_member(d, json_array_get(members, (size_t)i), &run->members[i],
				   run->conf.max_nodes);
		d->where[at] = '\0';
		if (rc < 0)
			return rc;
	}
	return 0;
}

int crun__journal_decode(const char *text, size_t len, const char *name,
			 struct crun__journal_run **runs, size_t *n, char *err, size_t errlen)
{
	struct dec d = {.name = name, .err = err, .errlen = errlen};
	struct crun__journal_run *v = NULL;
	json_t *root, *arr;
	json_error_t je;
	int64_t version = 0;
	size_t count = 0;
	int rc;

	*runs = NULL;
	*n = 0;
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		snprintf(err, errlen, "%s: line %d, column %d: %s", name, je.line, je.column,
			 je.text);
		return -EPROTO;
	}
	if (!json_is_object(root)) {
		rc = bad(&d, "not a journal (a JSON object)");
		goto out_decref;
	}
	rc = get_int(&d, root, "version", 0, INT64_MAX, &version);
	if (rc < 0)
		goto out_decref;
	if (version != CRUN_JOURNAL_VERSION) {
		rc = bad(&d, "version %" PRId64 " is not %d, the one this crun-rdzvd reads",
			 version, CRUN_JOURNAL_VERSION);
		goto out_decref;
	}
	arr = json_object_get(root, "runs");
	if (!json_is_array(arr)) {
		rc = bad(&d, "'runs' must be an array");
		goto out_decref;
	}
	if (json_array_size(arr)) {
		v = calloc(json_array_size(arr), sizeof(*v));
		if (!v) {
			rc = -ENOMEM;
			goto out_decref;
		}
	}
	for (count = 0; count < json_array_size(arr); count++) {
		snprintf(d.where, sizeof(d.where), "run %zu", count);
		rc = decode_run(&d, json_array_get(arr, count), &v[count]);
		if (rc < 0) {
			count++;
			goto out_free;
		}
		for (size_t j = 0; j < count; j++)
			if (v[j].run_id_len == v[count].run_id_len &&
			    !memcmp(v[j].run_id, v[count].run_id, v[j].run_id_len)) {
				rc = bad(&d, "the same run as run %zu", j);
				count++;
				goto out_free;
			}
	}
	json_decref(root);
	*runs = v;
	*n = count;
	return 0;

out_free:
	for (size_t i = 0; i < count; i++)
		crun__journal_run_finish(&v[i]);
	free(v);
out_decref:
	json_decref(root);
	if (rc == -ENOMEM)
		snprintf(err, errlen, "%s: out of memory", name);
	return rc;
}
