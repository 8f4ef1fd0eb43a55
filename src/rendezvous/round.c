/* Rendezvous rounds: the state machine of rdzv.h, one per run.
 *
 * Why it is shaped this way:
 * - crun__round_apply() is the only place where the state changes; it
 *   dispatches on the state (open_event, running_event, closed_event), and
 *   each of those on the event, so the table of rdzv.h reads off the code.
 * - Nodes are kept in three small arrays (joiners of the OPEN round,
 *   members of the RUNNING one, standby joiners), found by a linear scan:
 *   a job has at most a few thousand nodes and a scan happens once per
 *   request, never per byte.
 * - One timer per run serves the last call and every join timeout: after
 *   each event it is set to the earliest deadline that matters in the new
 *   state, so an expired deadline that does not apply (a joiner's timeout
 *   while the round already has min nodes) never spins.
 * - A node that keeps failing (rdzv.h: blacklist_failures within
 *   blacklist_window) is excluded for a cool-down, Horovod's blacklist with
 *   a cool-down range: its failure times and exclusions live with its
 *   first-join order (struct known), and a JOIN of an excluded node waits
 *   in a set of its own (cooling) until the round's timer ends the
 *   cool-down; then it joins as any JOIN would.
 * - The members of the round that ended are remembered (prev), so that a
 *   join timeout can name who did not come back, and so that the next
 *   round closes as soon as every one of them that is still connected has
 *   rejoined, instead of waiting for the last call.
 * - A run the store lost (it restarted) is rebuilt from the RESUMEs of its
 *   members (RECOVERING): the first one brings the round, the restart
 *   count and the member list, and the members array holds every member
 *   of the assignment from the start, with no peer until it resumes; the
 *   round runs again, without a new assignment, once all have. */
#include "rendezvous/round.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

enum round_state {
	ROUND_OPEN,	  /* collecting joins for round r->round */
	ROUND_RUNNING,	  /* round r->round assigned to r->members */
	ROUND_CLOSED,	  /* the run finished (all DONE) or failed (exhausted) */
	ROUND_RECOVERING, /* round r->round rebuilt from resumes, not all back */
};

static const char *const state_names[] = {"open", "running", "closed", "recovering"};
/* The same, for the operator's debug line on each change. */
static const char *const state_words[] = {
	"is open: waiting for the nodes to join",
	"is running: every member node has its ranks",
	"is over: the run has ended, no more rounds",
	"is being recovered: waiting for its nodes to resume after the store restarted",
};

/* A node that joined: waiting in the OPEN round, member of the RUNNING
 * one, or on standby. Strings live in the same allocation. */
struct rnode {
	void *peer;
	uint32_t join_id;
	uint32_t done_id;
	bool done;
	bool lost; /* RUNNING: its connection closed (peer is NULL then):
		    * the round is ending, or the node had sent DONE.
		    * RECOVERING: never set; peer is NULL until it resumes */
	int nproc;
	int node_rank;	   /* static rank or -1 */
	int group_rank;	   /* RUNNING: position in members */
	uint64_t seq;	   /* first-join order in the run */
	uint64_t deadline; /* loop time when its join timeout passes */
	int64_t join_timeout_ms;
	char *node_id, *host, *addr;
};

struct nodes {
	struct rnode **v;
	size_t n, cap;
};

struct known {
	char *node_id;
	uint64_t seq;
	uint64_t *fails; /* loop times of its last failures, oldest first */
	int nfails;
	int excluded;		 /* times it was excluded */
	uint64_t excluded_until; /* loop time; 0: never excluded */
};

/* A member of the round that ended last. */
struct prev {
	char *node_id;
	char *host;
	int group_rank;
	void *peer; /* compared only, never used: cleared by its LOST */
	bool gone;
};

struct round_timer {
	uv_timer_t t;
	struct crun__round *r; /* NULL once the round is destroyed */
	const struct crun__round_ops *ops;
	void *ctx;
};

struct crun__round {
	uv_loop_t *loop;
	const struct crun__round_ops *ops;
	void *ctx;
	char *run_id;
	enum round_state state;
	bool configured;
	bool static_ranks;
	bool failed; /* CLOSED: exhausted rather than finished */
	struct crun__rdzv_conf conf;
	int64_t round;
	int64_t restart_count;
	struct nodes joiners, members, standby;
	struct nodes cooling; /* held joiners of excluded nodes */
	int ndone;
	int world_size;
	struct known *known;
	size_t nknown, known_cap;
	uint64_t next_seq;
	struct prev *prev;
	size_t nprev;
	int64_t ended_round; /* the last round that ended (0: none) */
	uint64_t open_since; /* OPEN: when its first joiner came (loop ms) */
	char *ended_why;     /* "reason: message" of that round */
	bool last_call_armed;
	uint64_t last_call_deadline;
	/* RECOVERING: the members that resumed, when the round gives up on
	 * the others (armed by the first resume, wait_ms ahead) and that
	 * wait, for messages. */
	size_t nresumed;
	bool resume_heard, resume_armed;
	/* RECOVERING: restored from a journal, and no member resumed yet. */
	bool restored;
	uint64_t resume_deadline;
	int64_t resume_wait_ms;
	/* The keep-alive window the run's first JOIN (or resume) asked for:
	 * how long a store restored from its journal waits for resumes. */
	int64_t wait_ms;
	/* Bumped by each change a journal records; the journal is told when
	 * an event moved it past journaled. */
	uint64_t generation, journaled;
	crun__round_journal_cb journal_cb;
	void *journal_arg;
	struct round_timer *timer;
};

/* How long a round restored from a journal waits for resumes when the run
 * recorded no keep-alive window. */
#define RESTORED_WAIT_MS 60000

/* ---- small helpers ------------------------------------------------------ */

static struct crun__wire_item item(const char *s)
{
	struct crun__wire_item it = {(const uint8_t *)s, (uint32_t)strlen(s)};

	return it;
}

static void send_err(struct crun__round *r, void *peer, uint32_t id, int errnum, const char *fmt,
		     ...) __attribute__((format(printf, 5, 6)));

static void send_err(struct crun__round *r, void *peer, uint32_t id, int errnum, const char *fmt,
		     ...)
{
	struct crun__wire_item it;
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	it = item(msg);
	r->ops->send(peer, CRUN_WIRE_ERROR, id, errnum, &it, 1);
}

static void send_ok(struct crun__round *r, void *peer, uint32_t id)
{
	r->ops->send(peer, CRUN_WIRE_OK, id, 0, NULL, 0);
}

/* Refuses a JOIN: the error to its sender and a line in the log, since
 * a refused node is usually a misconfigured one. */
static void refuse_join(struct crun__round *r, const struct crun__round_event *ev, int errnum,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void refuse_join(struct crun__round *r, const struct crun__round_event *ev, int errnum,
			const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	crun__info("run '%s': refused node '%s' (%s): %s", r->run_id, ev->node->node_id,
		   ev->node->host, msg);
	send_err(r, ev->peer, ev->id, errnum, "%s", msg);
}

static uint64_t deadline_after(const struct crun__round *r, int64_t ms)
{
	uint64_t now = uv_now(r->loop);

	return (uint64_t)ms > UINT64_MAX - now ? UINT64_MAX : now + (uint64_t)ms;
}

static int nodes_push(struct nodes *s, struct rnode *n)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		struct rnode **v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = n;
	return 0;
}

/* Index of peer in s, or -1. */
static long nodes_find(const struct nodes *s, const void *peer)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i]->peer == peer)
			return (long)i;
	return -1;
}

/* Removes (keeping the order) and returns the node at i. */
static struct rnode *nodes_take(struct nodes *s, size_t i)
{
	struct rnode *n = s->v[i];

	memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
	s->n--;
	return n;
}

static void nodes_free(struct nodes *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* Nodes whose connection closed no longer hold their id or rank. */
static struct rnode *node_find_id(const struct nodes *s, const char *node_id)
{
	for (size_t i = 0; i < s->n; i++)
		if (!s->v[i]->lost && !strcmp(s->v[i]->node_id, node_id))
			return s->v[i];
	return NULL;
}

static struct rnode *node_find_rank(const struct nodes *s, int rank)
{
	for (size_t i = 0; i < s->n; i++)
		if (!s->v[i]->lost && s->v[i]->node_rank == rank)
			return s->v[i];
	return NULL;
}

/* What the run knows of node_id, made with the next first-join order for
 * a new node; NULL when out of memory. */
static struct known *known_get(struct crun__round *r, const char *node_id)
{
	struct known *k;

	for (size_t i = 0; i < r->nknown; i++)
		if (!strcmp(r->known[i].node_id, node_id))
			return &r->known[i];
	if (r->nknown == r->known_cap) {
		size_t cap = r->known_cap ? r->known_cap * 2 : 8;

		k = realloc(r->known, cap * sizeof(*k));
		if (!k)
			return NULL;
		r->known = k;
		r->known_cap = cap;
	}
	k = &r->known[r->nknown];
	memset(k, 0, sizeof(*k));
	k->node_id = strdup(node_id);
	if (!k->node_id)
		return NULL;
	k->seq = r->next_seq++;
	r->nknown++;
	return k;
}

/* First-join order of node_id; UINT64_MAX when out of memory (the node
 * then sorts last). */
static uint64_t node_seq(struct crun__round *r, const char *node_id)
{
	struct known *k = known_get(r, node_id);

	return k ? k->seq : UINT64_MAX;
}

/* The n-th cool-down: the range's minimum, doubled for each exclusion
 * before, up to its maximum. */
static int64_t cooldown_ms(const struct crun__rdzv_conf *c, int n)
{
	int64_t ms = c->cooldown_min_ms;

	for (int i = 1; i < n && ms < c->cooldown_max_ms; i++)
		ms = ms > c->cooldown_max_ms / 2 ? c->cooldown_max_ms : ms * 2;
	return ms < c->cooldown_max_ms ? ms : c->cooldown_max_ms;
}

/* A failure of node_id (a worker failure it reported, or it left while a
 * member): excludes it when it has failed blacklist_failures times within
 * blacklist_window. */
static void count_failure(struct crun__round *r, const char *node_id, const char *host)
{
	const struct crun__rdzv_conf *c = &r->conf;
	uint64_t now = uv_now(r->loop);
	struct known *k;
	char a[24], b[24];
	int keep = 0;

	if (c->blacklist_failures <= 0)
		return;
	k = known_get(r, node_id);
	if (!k)
		return;
	if (!k->fails) {
		k->fails = calloc((size_t)c->blacklist_failures, sizeof(*k->fails));
		if (!k->fails)
			return;
	}
	for (int i = 0; i < k->nfails; i++)
		if (now - k->fails[i] < (uint64_t)c->blacklist_window_ms)
			k->fails[keep++] = k->fails[i];
	k->nfails = keep;
	if (k->nfails == c->blacklist_failures) {
		memmove(k->fails, k->fails + 1, (size_t)(k->nfails - 1) * sizeof(*k->fails));
		k->nfails--;
	}
	k->fails[k->nfails++] = now;
	if (k->nfails < c->blacklist_failures)
		return;
	k->nfails = 0;
	k->excluded++;
	k->excluded_until = deadline_after(r, cooldown_ms(c, k->excluded));
	crun__info("run '%s': node '%s' (%s) is excluded for %s: %d failure%s within %s", r->run_id,
		   node_id, host, crun__rdzv_format_ms(cooldown_ms(c, k->excluded), a, sizeof(a)),
		   c->blacklist_failures, c->blacklist_failures == 1 ? "" : "s",
		   crun__rdzv_format_ms(c->blacklist_window_ms, b, sizeof(b)));
}

/* Holds n, a JOIN of an excluded node, until its cool-down has passed,
 * and tells it so; true when it was held (or answered and freed). */
static bool maybe_hold(struct crun__round *r, struct rnode *n)
{
	struct known *k = known_get(r, n->node_id);
	struct crun__wire_item items[3];
	uint64_t now = uv_now(r->loop);
	char msg[600], t[24], count[24];

	if (!k || k->excluded_until <= now)
		return false;
	if (nodes_push(&r->cooling, n) < 0) {
		send_err(r, n->peer, n->join_id, ENOMEM, "out of memory");
		free(n);
		return true;
	}
	n->deadline = k->excluded_until;
	snprintf(msg, sizeof(msg),
		 "node '%s' (%s) is excluded from run '%s' for %s more: it failed %d time%s "
		 "within %s",
		 n->node_id, n->host, r->run_id,
		 crun__rdzv_format_ms((int64_t)(k->excluded_until - now), t, sizeof(t)),
		 r->conf.blacklist_failures, r->conf.blacklist_failures == 1 ? "" : "s",
		 crun__rdzv_format_ms(r->conf.blacklist_window_ms, count, sizeof(count)));
	crun__info("run '%s': %s", r->run_id, msg);
	snprintf(count, sizeof(count), "%" PRId64, r->restart_count);
	items[0] = item("excluded");
	items[1] = item(msg);
	items[2] = item(count);
	r->ops->send(n->peer, CRUN_WIRE_RDZV_EVENT, n->join_id, 0, items, 3);
	return true;
}

static int cmp_seq(const void *a, const void *b)
{
	const struct rnode *x = *(struct rnode *const *)a, *y = *(struct rnode *const *)b;

	return (x->seq > y->seq) - (x->seq < y->seq);
}

static int cmp_rank(const void *a, const void *b)
{
	const struct rnode *x = *(struct rnode *const *)a, *y = *(struct rnode *const *)b;

	return (x->node_rank > y->node_rank) - (x->node_rank < y->node_rank);
}

static void prev_clear(struct crun__round *r)
{
	for (size_t i = 0; i < r->nprev; i++) {
		free(r->prev[i].node_id);
		free(r->prev[i].host);
	}
	free(r->prev);
	r->prev = NULL;
	r->nprev = 0;
}

static void prev_mark_gone(struct crun__round *r, const void *peer)
{
	for (size_t i = 0; i < r->nprev; i++)
		if (r->prev[i].peer == peer) {
			r->prev[i].gone = true;
			r->prev[i].peer = NULL;
		}
}

/* True when the round that ended had members, and every one of them
 * that is still connected has joined the OPEN round. */
static bool prev_all_back(const struct crun__round *r)
{
	if (!r->nprev)
		return false;
	for (size_t i = 0; i < r->nprev; i++)
		if (!r->prev[i].gone && !node_find_id(&r->joiners, r->prev[i].node_id) &&
		    !node_find_id(&r->cooling, r->prev[i].node_id))
			return false;
	return true;
}

/* ---- closing a round, ending a round, closing the run ------------------- */

static void rearm(struct crun__round *r);
static void close_run(struct crun__round *r, bool failed);

/* The assignment of the RUNNING round, as a VALUES reply to each
 * connected member's JOIN (or RESUME), or to only that one when only is
 * not NULL. */
static void send_assignments(struct crun__round *r, const struct rnode *only)
{
	size_t n = r->members.n;
	struct crun__wire_item *items = malloc((4 + 4 * n) * sizeof(*items));
	char head[4][24], *nprocs = malloc(n * 12);

	if (!items || !nprocs) {
		for (size_t i = 0; i < n; i++)
			if (r->members.v[i]->peer && (!only || r->members.v[i] == only))
				send_err(r, r->members.v[i]->peer, r->members.v[i]->join_id, ENOMEM,
					 "out of memory");
		goto out_free;
	}
	snprintf(head[0], sizeof(head[0]), "%" PRId64, r->round);
	snprintf(head[1], sizeof(head[1]), "%" PRId64, r->restart_count);
	snprintf(head[3], sizeof(head[3]), "%zu", n);
	items[0] = item(head[0]);
	items[1] = item(head[1]);
	items[3] = item(head[3]);
	for (size_t i = 0; i < n; i++) {
		struct rnode *m = r->members.v[i];

		snprintf(nprocs + 12 * i, 12, "%d", m->nproc);
		items[4 + 4 * i] = item(m->node_id);
		items[5 + 4 * i] = item(m->host);
		items[6 + 4 * i] = item(m->addr);
		items[7 + 4 * i] = item(nprocs + 12 * i);
	}
	for (size_t i = 0; i < n; i++) {
		struct rnode *m = r->members.v[i];

		if (!m->peer || (only && m != only))
			continue;
		snprintf(head[2], sizeof(head[2]), "%zu", i);
		items[2] = item(head[2]);
		if (r->ops->send(m->peer, CRUN_WIRE_VALUES, m->join_id, 0, items,
				 (uint32_t)(4 + 4 * n)) == -ENOBUFS)
			send_err(
				r, m->peer, m->join_id, ENOBUFS,
				"the assignment of %zu nodes does not fit this connection's buffer",
				n);
	}
out_free:
	free(nprocs);
	free(items);
}

/* OPEN -> RUNNING: every joiner gets its assignment. */
static void close_open(struct crun__round *r)
{
	size_t n = r->joiners.n;

	qsort(r->joiners.v, n, sizeof(*r->joiners.v), r->static_ranks ? cmp_rank : cmp_seq);
	r->members = r->joiners;
	memset(&r->joiners, 0, sizeof(r->joiners));
	r->state = ROUND_RUNNING;
	r->generation++;
	r->last_call_armed = false;
	r->ndone = 0;
	r->world_size = 0;
	for (size_t i = 0; i < n; i++) {
		r->members.v[i]->group_rank = (int)i;
		r->members.v[i]->done = false;
		r->world_size += r->members.v[i]->nproc;
	}
	crun__info("round %" PRId64 " of run '%s' closed with %zu node%s (world size %d)", r->round,
		   r->run_id, n, n == 1 ? "" : "s", r->world_size);
	if (r->ops->formed)
		r->ops->formed(r->ctx, uv_now(r->loop) - r->open_since);
	send_assignments(r, NULL);
}

/* After the OPEN round gained or lost a joiner: close it when it is full,
 * when min nodes are in and the last call is 0 or every member of the
 * previous round that is still connected is back; else (re)arm or disarm
 * the last call. */
static void maybe_close_open(struct crun__round *r)
{
	size_t n = r->joiners.n;

	if (n >= (size_t)r->conf.max_nodes) {
		close_open(r);
		return;
	}
	if (n < (size_t)r->conf.min_nodes || !n) {
		r->last_call_armed = false;
		return;
	}
	if (r->conf.last_call_ms == 0 || prev_all_back(r)) {
		close_open(r);
		return;
	}
	if (!r->last_call_armed) {
		r->last_call_armed = true;
		r->last_call_deadline = deadline_after(r, r->conf.last_call_ms);
	}
}

/* Puts n into the OPEN round; false when out of memory (n was answered
 * and freed). */
static bool open_add(struct crun__round *r, struct rnode *n)
{
	if (!r->joiners.n)
		r->open_since = uv_now(r->loop);
	if (nodes_push(&r->joiners, n) < 0) {
		send_err(r, n->peer, n->join_id, ENOMEM, "out of memory");
		free(n);
		return false;
	}
	return true;
}

/* RUNNING or RECOVERING -> OPEN (or CLOSED when the restarts are
 * exhausted). Every member gets one RDZV_EVENT (a member held in a
 * RECOVERING round, the error answer to its RESUME instead); carried (may
 * be NULL) is the node whose join ended the round: it opens the next
 * round, with the standby joiners. */
static void end_round(struct crun__round *r, const char *reason, const char *message,
		      struct rnode *carried)
{
	bool counted = strcmp(reason, "join") != 0;
	bool recovering = r->state == ROUND_RECOVERING;
	struct crun__wire_item items[3];
	char count[24], why[1200];
	struct prev *prev;

	r->generation++;
	if (counted)
		r->restart_count++;
	if (!strcmp(reason, "stop")) {
		/* A node asked not to restart (its message says why): the run
		 * ends as when the restarts run out, which every agent,
		 * older ones too, knows to stop on. */
		reason = "exhausted";
	} else if (counted && r->restart_count > r->conf.max_restarts) {
		snprintf(why, sizeof(why), "%s; no restarts left (--max-restarts %d)", message,
			 r->conf.max_restarts);
		reason = "exhausted";
		message = why;
	}
	/* The message already says what happened ("node 1 (b) left: ...");
	 * the reason word is for machines and is repeated only when the
	 * message does not begin with a node. */
	crun__info("round %" PRId64 " of run '%s' ended (%s): %s", r->round, r->run_id, reason,
		   message);
	snprintf(count, sizeof(count), "%" PRId64, r->restart_count);
	items[0] = item(reason);
	items[1] = item(message);
	items[2] = item(count);
	for (size_t i = 0; i < r->members.n; i++) {
		struct rnode *m = r->members.v[i];

		if (m->lost || !m->peer)
			continue; /* it left, or never resumed: no connection */
		if (!recovering)
			r->ops->send(m->peer, CRUN_WIRE_RDZV_EVENT, m->join_id, r->round, items, 3);
		else if (!strcmp(reason, "exhausted"))
			send_err(r, m->peer, m->join_id, ESHUTDOWN,
				 "run '%s' is closed: the job failed: %s", r->run_id, message);
		else
			send_err(r, m->peer, m->join_id, ECANCELED, "round %" PRId64 " ended: %s",
				 r->round, message);
		if (m->done)
			send_err(r, m->peer, m->done_id, ECANCELED,
				 "round %" PRId64 " ended: %s: %s", r->round, reason, message);
	}

	free(r->ended_why);
	r->ended_round = r->round;
	r->ended_why = malloc(strlen(reason) + strlen(message) + 3);
	if (r->ended_why)
		sprintf(r->ended_why, "%s: %s", reason, message);
	prev_clear(r);
	prev = calloc(r->members.n ? r->members.n : 1, sizeof(*prev));
	for (size_t i = 0; prev && i < r->members.n; i++) {
		struct rnode *m = r->members.v[i];

		prev[i].node_id = strdup(m->node_id);
		prev[i].host = strdup(m->host);
		prev[i].group_rank = m->group_rank;
		prev[i].peer = m->lost ? NULL : m->peer;
		prev[i].gone = m->lost || !m->peer;
		if (!prev[i].node_id || !prev[i].host) {
			/* Without it the next round waits for its last call. */
			free(prev[i].node_id);
			free(prev[i].host);
			prev[i].node_id = prev[i].host = NULL;
			break;
		}
		r->nprev = i + 1;
	}
	r->prev = prev;
	nodes_free(&r->members);

	if (!strcmp(reason, "exhausted")) {
		if (carried) {
			send_err(r, carried->peer, carried->join_id, ESHUTDOWN,
				 "run '%s' is closed: the job failed", r->run_id);
			free(carried);
		}
		close_run(r, true);
		return;
	}
	r->round++;
	r->state = ROUND_OPEN;
	r->last_call_armed = false;
	r->resume_armed = false;
	if (carried)
		open_add(r, carried);
	/* Standby joiners move in, in arrival order, until the round is
	 * full; the rest keep waiting. (There are none after a "join": a
	 * node waits only while the round runs with max nodes.) */
	while (r->standby.n && r->joiners.n < (size_t)r->conf.max_nodes)
		open_add(r, nodes_take(&r->standby, 0));
	maybe_close_open(r);
}

/* RUNNING -> CLOSED. failed: the restarts were exhausted; else every
 * member is done and gets its OK. Standby joiners are refused. */
static void close_run(struct crun__round *r, bool failed)
{
	const char *why = failed ? "the job failed" : "the job has finished";

	r->state = ROUND_CLOSED;
	r->generation++;
	r->failed = failed;
	r->last_call_armed = false;
	r->resume_armed = false;
	if (!failed)
		for (size_t i = 0; i < r->members.n; i++)
			if (!r->members.v[i]->lost)
				send_ok(r, r->members.v[i]->peer, r->members.v[i]->done_id);
	for (size_t i = 0; i < r->standby.n; i++)
		send_err(r, r->standby.v[i]->peer, r->standby.v[i]->join_id, ESHUTDOWN,
			 "run '%s' is closed: %s", r->run_id, why);
	for (size_t i = 0; i < r->joiners.n; i++)
		send_err(r, r->joiners.v[i]->peer, r->joiners.v[i]->join_id, ESHUTDOWN,
			 "run '%s' is closed: %s", r->run_id, why);
	for (size_t i = 0; i < r->cooling.n; i++)
		send_err(r, r->cooling.v[i]->peer, r->cooling.v[i]->join_id, ESHUTDOWN,
			 "run '%s' is closed: %s", r->run_id, why);
	nodes_free(&r->cooling);
	nodes_free(&r->standby);
	nodes_free(&r->joiners);
	nodes_free(&r->members);
	crun__info("run '%s' is closed: %s (round %" PRId64 ", %" PRId64 " restarts)", r->run_id,
		   why, r->round, r->restart_count);
}

/* ---- joins ------------------------------------------------------------------ */

static void fmt_nnodes(char *buf, size_t len, int min, int max)
{
	if (min == max)
		snprintf(buf, len, "%d", min);
	else
		snprintf(buf, len, "%d:%d", min, max);
}

/* A node with copies of the strings in the same allocation; NULL when
 * out of memory. */
static struct rnode *rnode_new(const char *node_id, const char *host, const char *addr)
{
	size_t ls[3] = {strlen(node_id) + 1, strlen(host) + 1, strlen(addr) + 1};
	struct rnode *n = calloc(1, sizeof(*n) + ls[0] + ls[1] + ls[2]);

	if (!n)
		return NULL;
	n->node_id = memcpy((char *)(n + 1), node_id, ls[0]);
	n->host = memcpy(n->node_id + ls[0], host, ls[1]);
	n->addr = memcpy(n->host + ls[1], addr, ls[2]);
	return n;
}

/* True when a JOIN's (or RESUME's) configuration cf and node rank differ
 * from the configured run's, with what differs in why. */
static bool conf_differs(const struct crun__round *r, const struct crun__rdzv_conf *cf,
			 int node_rank, char *why, size_t len)
{
	const struct crun__rdzv_conf *rc = &r->conf;
	char a[24], b[24];

	if (!r->configured)
		return false;
	if (cf->min_nodes != rc->min_nodes || cf->max_nodes != rc->max_nodes) {
		fmt_nnodes(a, sizeof(a), cf->min_nodes, cf->max_nodes);
		fmt_nnodes(b, sizeof(b), rc->min_nodes, rc->max_nodes);
		snprintf(why, len, "--nnodes %s differs from the run's %s", a, b);
		return true;
	}
	if (cf->last_call_ms != rc->last_call_ms) {
		snprintf(why, len, "last_call_timeout %s differs from the run's %s",
			 crun__rdzv_format_ms(cf->last_call_ms, a, sizeof(a)),
			 crun__rdzv_format_ms(rc->last_call_ms, b, sizeof(b)));
		return true;
	}
	/* A JOIN of 10 items has no exclusion settings (an agent that
	 * predates them): it takes the run's. The first JOIN that has them
	 * sets the run's (admit). */
	if (cf->has_exclusion && rc->has_exclusion &&
	    (cf->blacklist_failures != rc->blacklist_failures ||
	     (cf->blacklist_failures && (cf->blacklist_window_ms != rc->blacklist_window_ms ||
					 cf->cooldown_min_ms != rc->cooldown_min_ms ||
					 cf->cooldown_max_ms != rc->cooldown_max_ms)))) {
		snprintf(why, len,
			 "blacklist settings (%d failures within %" PRId64 " ms, cool-down %" PRId64
			 "..%" PRId64 " ms) differ from the run's (%d, %" PRId64 " ms, %" PRId64
			 "..%" PRId64 " ms)",
			 cf->blacklist_failures, cf->blacklist_window_ms, cf->cooldown_min_ms,
			 cf->cooldown_max_ms, rc->blacklist_failures, rc->blacklist_window_ms,
			 rc->cooldown_min_ms, rc->cooldown_max_ms);
		return true;
	}
	if (cf->max_restarts != rc->max_restarts) {
		snprintf(why, len, "--max-restarts %d differs from the run's %d", cf->max_restarts,
			 rc->max_restarts);
		return true;
	}
	if ((node_rank >= 0) != r->static_ranks) {
		if (r->static_ranks)
			snprintf(why, len,
				 "no --node-rank given, but the run's group ranks are static");
		else
			snprintf(why, len,
				 "--node-rank %d given, but the run's group ranks are dynamic",
				 node_rank);
		return true;
	}
	return false;
}

/* Checks a JOIN against the run and makes its node; NULL after an error
 * reply. The first JOIN that passes fixes the run's configuration. */
static struct rnode *admit(struct crun__round *r, const struct crun__round_event *ev)
{
	const struct crun__rdzv_node *nd = ev->node;
	const struct crun__rdzv_conf *cf = ev->conf;
	const char *addr = nd->addr[0] ? nd->addr : (ev->peer_addr ? ev->peer_addr : "");
	struct nodes *sets[4] = {&r->joiners, &r->members, &r->standby, &r->cooling};
	static const char *const where[4] = {
		"has already joined round", "is a member of the running round",
		"already waits to join after round", "already waits, excluded, in round"};
	struct rnode *n;
	char c[24], why[512];

	if (conf_differs(r, cf, nd->node_rank, why, sizeof(why))) {
		refuse_join(r, ev, EINVAL, "%s", why);
		return NULL;
	}
	for (int s = 0; s < 4; s++) {
		struct rnode *o;

		if (nodes_find(sets[s], ev->peer) >= 0) {
			refuse_join(r, ev, EALREADY, "this connection %s %" PRId64, where[s],
				    r->round);
			return NULL;
		}
		o = node_find_id(sets[s], nd->node_id);
		if (o) {
			refuse_join(
				r, ev, EINVAL,
				"node id '%s' is already in use by another connection (host %s)",
				nd->node_id, o->host);
			return NULL;
		}
		o = nd->node_rank >= 0 ? node_find_rank(sets[s], nd->node_rank) : NULL;
		if (o) {
			refuse_join(r, ev, EINVAL,
				    "node rank %d is already taken by node '%s' (%s)",
				    nd->node_rank, o->node_id, o->host);
			return NULL;
		}
	}
	n = rnode_new(nd->node_id, nd->host, addr);
	if (!n) {
		send_err(r, ev->peer, ev->id, ENOMEM, "out of memory");
		return NULL;
	}
	n->peer = ev->peer;
	n->join_id = ev->id;
	n->nproc = nd->nproc;
	n->node_rank = nd->node_rank;
	n->group_rank = -1;
	n->join_timeout_ms = cf->join_timeout_ms;
	n->deadline = deadline_after(r, cf->join_timeout_ms);
	n->seq = node_seq(r, nd->node_id);
	if (!r->configured) {
		r->configured = true;
		r->wait_ms = cf->keepalive_ms;
		r->conf = *cf;
		r->conf.join_timeout_ms = 0; /* per joiner */
		r->conf.keepalive_ms = 0;    /* per connection */
		r->static_ranks = nd->node_rank >= 0;
	} else if (cf->has_exclusion && !r->conf.has_exclusion) {
		r->conf.has_exclusion = true;
		r->conf.blacklist_failures = cf->blacklist_failures;
		r->conf.blacklist_window_ms = cf->blacklist_window_ms;
		r->conf.cooldown_min_ms = cf->cooldown_min_ms;
		r->conf.cooldown_max_ms = cf->cooldown_max_ms;
	}
	fmt_nnodes(c, sizeof(c), r->conf.min_nodes, r->conf.max_nodes);
	crun__info("run '%s': node '%s' (%s, %d worker%s) joins round %" PRId64 " (nnodes %s)",
		   r->run_id, n->node_id, n->host, n->nproc, n->nproc == 1 ? "" : "s", r->round, c);
	return n;
}

/* The ETIMEDOUT of a joiner whose join timeout passed in the OPEN round
 * with fewer than min nodes: how many came, and who of the previous round
 * did not come back. */
static void join_timed_out(struct crun__round *r, struct rnode *n)
{
	char msg[1024], t[24];
	size_t o, shown = 0, missing = 0;
	int len;

	len = snprintf(msg, sizeof(msg), "only %zu of at least %d nodes joined within %s",
		       r->joiners.n, r->conf.min_nodes,
		       crun__rdzv_format_ms(n->join_timeout_ms, t, sizeof(t)));
	o = len > 0 ? (size_t)len : 0;
	for (size_t i = 0; i < r->nprev; i++) {
		const struct prev *p = &r->prev[i];

		if (node_find_id(&r->joiners, p->node_id))
			continue;
		missing++;
		/* Leave room for the ", and N more" tail. */
		if (o + strlen(p->host) + 64 >= sizeof(msg))
			continue;
		if (!shown)
			len = snprintf(msg + o, sizeof(msg) - o,
				       "; missing from round %" PRId64 ": node %d (%s)",
				       r->ended_round, p->group_rank, p->host);
		else
			len = snprintf(msg + o, sizeof(msg) - o, ", node %d (%s)", p->group_rank,
				       p->host);
		if (len > 0)
			o += (size_t)len;
		shown++;
	}
	if (missing > shown)
		snprintf(msg + o, sizeof(msg) - o, "%s%zu more",
			 shown ? " and " : "; missing: ", missing - shown);
	crun__info("run '%s': node '%s' (%s) gave up waiting for round %" PRId64 ": %s", r->run_id,
		   n->node_id, n->host, r->round, msg);
	send_err(r, n->peer, n->join_id, ETIMEDOUT, "%s", msg);
}

/* ---- the state machine --------------------------------------------------------- */

/* DONE for a round that is not the running one. */
static void done_elsewhere(struct crun__round *r, const struct crun__round_event *ev)
{
	if (r->ended_round && ev->num == r->ended_round && r->ended_why)
		send_err(r, ev->peer, ev->id, ECANCELED, "round %" PRId64 " ended: %s", ev->num,
			 r->ended_why);
	else
		send_err(r, ev->peer, ev->id, ECANCELED,
			 "round %" PRId64 " is not the running round of run '%s'", ev->num,
			 r->run_id);
}

/* A held joiner of an excluded node left. */
static void drop_cooling(struct crun__round *r, const struct crun__round_event *ev)
{
	long i = nodes_find(&r->cooling, ev->peer);

	if (i >= 0) {
		struct rnode *n = nodes_take(&r->cooling, (size_t)i);

		crun__info("run '%s': excluded node '%s' (%s) left: %s", r->run_id, n->node_id,
			   n->host, ev->message ? ev->message : "connection closed");
		free(n);
	}
}

/* A node waiting for a round (on standby, or held for its cool-down)
 * left. */
static void drop_waiting(struct crun__round *r, const struct crun__round_event *ev)
{
	long i = nodes_find(&r->standby, ev->peer);

	if (i >= 0) {
		struct rnode *n = nodes_take(&r->standby, (size_t)i);

		crun__info("run '%s': waiting node '%s' (%s) left: %s", r->run_id, n->node_id,
			   n->host, ev->message ? ev->message : "connection closed");
		free(n);
	}
	drop_cooling(r, ev);
}

/* A member's RDZV_FAIL or RDZV_DONE of round ev->num. A FAIL of the
 * current round ends it, counted against the node; a DONE marks its
 * member done, and that member is returned. NULL when the report is
 * answered otherwise: an earlier round's FAIL (OK: that round is over),
 * a DONE of another round (done_elsewhere), a sender that is not a member
 * (EINVAL, hint appended to the message), a second DONE (EALREADY). */
static struct rnode *member_report(struct crun__round *r, const struct crun__round_event *ev,
				   const char *hint)
{
	struct rnode *n;
	char msg[1200];
	long i;

	if (ev->num != r->round) {
		if (ev->type == CRUN_ROUND_EV_FAIL)
			send_ok(r, ev->peer, ev->id);
		else
			done_elsewhere(r, ev);
		return NULL;
	}
	i = nodes_find(&r->members, ev->peer);
	if (i < 0) {
		send_err(r, ev->peer, ev->id, EINVAL,
			 "this connection is not a member of round %" PRId64 "%s", r->round, hint);
		return NULL;
	}
	n = r->members.v[i];
	if (ev->type == CRUN_ROUND_EV_FAIL) {
		send_ok(r, ev->peer, ev->id);
		if (ev->message && ev->message[0])
			snprintf(msg, sizeof(msg), "%s", ev->message);
		else
			snprintf(msg, sizeof(msg), "node %d (%s) reported a failure", n->group_rank,
				 n->host);
		count_failure(r, n->node_id, n->host);
		end_round(r, ev->stop ? "stop" : "failure", msg, NULL);
		return NULL;
	}
	if (n->done) {
		send_err(r, ev->peer, ev->id, EALREADY,
			 "this connection already sent DONE for round %" PRId64, r->round);
		return NULL;
	}
	n->done = true;
	n->done_id = ev->id;
	r->ndone++;
	return n;
}

static void open_event(struct crun__round *r, const struct crun__round_event *ev)
{
	struct rnode *n;
	long i;

	switch (ev->type) {
	case CRUN_ROUND_EV_JOIN:
		n = admit(r, ev);
		if (!n)
			break;
		/* A held node is not waited for: the others may go on. */
		if (maybe_hold(r, n) || open_add(r, n))
			maybe_close_open(r);
		break;
	case CRUN_ROUND_EV_COOLED:
		i = nodes_find(&r->cooling, ev->peer);
		if (i < 0)
			break;
		n = nodes_take(&r->cooling, (size_t)i);
		n->deadline = deadline_after(r, n->join_timeout_ms);
		crun__info("run '%s': node '%s' (%s) is no longer excluded; joins round %" PRId64,
			   r->run_id, n->node_id, n->host, r->round);
		if (open_add(r, n))
			maybe_close_open(r);
		break;
	case CRUN_ROUND_EV_LOST:
		prev_mark_gone(r, ev->peer);
		i = nodes_find(&r->joiners, ev->peer);
		if (i >= 0) {
			n = nodes_take(&r->joiners, (size_t)i);
			crun__info("run '%s': node '%s' (%s) left round %" PRId64
				   " before it closed: %s",
				   r->run_id, n->node_id, n->host, r->round,
				   ev->message ? ev->message : "connection closed");
			free(n);
		}
		drop_cooling(r, ev);
		maybe_close_open(r);
		break;
	case CRUN_ROUND_EV_FAIL:
		/* No round is running: nothing to fail. */
		send_ok(r, ev->peer, ev->id);
		break;
	case CRUN_ROUND_EV_DONE:
		done_elsewhere(r, ev);
		break;
	case CRUN_ROUND_EV_LAST_CALL:
		if (r->last_call_armed && r->joiners.n >= (size_t)r->conf.min_nodes)
			close_open(r);
		break;
	case CRUN_ROUND_EV_JOIN_TIMEOUT:
		i = nodes_find(&r->joiners, ev->peer);
		if (i < 0 || r->joiners.n >= (size_t)r->conf.min_nodes)
			break;
		join_timed_out(r, r->joiners.v[i]);
		free(nodes_take(&r->joiners, (size_t)i));
		break;
	case CRUN_ROUND_EV_RESUME:
	case CRUN_ROUND_EV_RESUME_DEADLINE:
		break;
	}
}

/* A JOIN admitted and not held for its cool-down, or an excluded node
 * whose cool-down has passed (COOLED): the node that arrives in a round
 * that runs, taken off its list; NULL when none does. */
static struct rnode *arrival(struct crun__round *r, const struct crun__round_event *ev)
{
	struct rnode *n;
	long i;

	if (ev->type == CRUN_ROUND_EV_JOIN) {
		n = admit(r, ev);
		return !n || maybe_hold(r, n) ? NULL : n;
	}
	i = nodes_find(&r->cooling, ev->peer);
	if (i < 0)
		return NULL;
	n = nodes_take(&r->cooling, (size_t)i);
	n->deadline = deadline_after(r, n->join_timeout_ms);
	crun__info("run '%s': node '%s' (%s) is no longer excluded", r->run_id, n->node_id,
		   n->host);
	return n;
}

static void running_event(struct crun__round *r, const struct crun__round_event *ev)
{
	char msg[1200];
	struct rnode *n;
	long i;

	switch (ev->type) {
	case CRUN_ROUND_EV_JOIN:
	case CRUN_ROUND_EV_COOLED:
		n = arrival(r, ev);
		if (!n)
			break;
		if (r->members.n < (size_t)r->conf.max_nodes && !r->ndone) {
			snprintf(msg, sizeof(msg), "node '%s' (%s) is joining", n->node_id,
				 n->host);
			end_round(r, "join", msg, n);
			break;
		}
		if (nodes_push(&r->standby, n) < 0) {
			send_err(r, n->peer, n->join_id, ENOMEM, "out of memory");
			free(n);
			break;
		}
		crun__info("run '%s': node '%s' (%s) waits: round %" PRId64 " runs with %s",
			   r->run_id, n->node_id, n->host, r->round,
			   r->ndone ? "nodes that are finishing" : "the maximum of nodes");
		break;
	case CRUN_ROUND_EV_LOST:
		prev_mark_gone(r, ev->peer);
		i = nodes_find(&r->members, ev->peer);
		if (i >= 0) {
			n = r->members.v[i];
			snprintf(msg, sizeof(msg), "node %d (%s) left: %s", n->group_rank, n->host,
				 ev->message ? ev->message : "connection closed");
			crun__info("run '%s': %s%s", r->run_id, msg,
				   n->done ? " (after DONE)" : "");
			/* No event for it; named in later timeouts. */
			n->lost = true;
			n->peer = NULL;
			/* A node that finished and then went is no failure: the
			 * barrier goes on without it. */
			if (!n->done) {
				count_failure(r, n->node_id, n->host);
				end_round(r, "left", msg, NULL);
			} else if ((size_t)r->ndone == r->members.n)
				close_run(r, false);
			break;
		}
		drop_waiting(r, ev);
		break;
	case CRUN_ROUND_EV_FAIL:
	case CRUN_ROUND_EV_DONE:
		n = member_report(r, ev, "");
		if (!n)
			break;
		crun__debug("run '%s': node %d (%s) has finished its work; %d of %zu nodes done",
			    r->run_id, n->group_rank, n->host, r->ndone, r->members.n);
		if ((size_t)r->ndone == r->members.n)
			close_run(r, false);
		break;
	case CRUN_ROUND_EV_LAST_CALL:
		break;
	case CRUN_ROUND_EV_JOIN_TIMEOUT:
		i = nodes_find(&r->standby, ev->peer);
		if (i < 0)
			break;
		n = nodes_take(&r->standby, (size_t)i);
		crun__info("run '%s': waiting node '%s' (%s) gave up after %s", r->run_id,
			   n->node_id, n->host,
			   crun__rdzv_format_ms(n->join_timeout_ms, msg, sizeof(msg)));
		send_err(r, n->peer, n->join_id, ETIMEDOUT,
			 "no round of run '%s' opened within %s: round %" PRId64
			 " runs with the maximum of %d nodes",
			 r->run_id, crun__rdzv_format_ms(n->join_timeout_ms, msg, sizeof(msg)),
			 r->round, r->conf.max_nodes);
		free(n);
		break;
	case CRUN_ROUND_EV_RESUME:
	case CRUN_ROUND_EV_RESUME_DEADLINE:
		break;
	}
}

static void closed_event(struct crun__round *r, const struct crun__round_event *ev)
{
	switch (ev->type) {
	case CRUN_ROUND_EV_JOIN:
		refuse_join(r, ev, ESHUTDOWN, "run '%s' is closed: %s", r->run_id,
			    r->failed ? "the job failed" : "the job has finished");
		break;
	case CRUN_ROUND_EV_FAIL:
		send_ok(r, ev->peer, ev->id);
		break;
	case CRUN_ROUND_EV_DONE:
		if (!r->failed && ev->num == r->round)
			send_ok(r, ev->peer, ev->id);
		else
			done_elsewhere(r, ev);
		break;
	case CRUN_ROUND_EV_LOST:
	case CRUN_ROUND_EV_LAST_CALL:
	case CRUN_ROUND_EV_JOIN_TIMEOUT:
	case CRUN_ROUND_EV_COOLED:
	case CRUN_ROUND_EV_RESUME:
	case CRUN_ROUND_EV_RESUME_DEADLINE:
		break;
	}
}

/* ---- resuming a round (RDZV_RESUME) ---------------------------------------- */

/* The member of the round with node_id, connected or not; NULL if none. */
static struct rnode *member_by_id(const struct crun__round *r, const char *node_id)
{
	for (size_t i = 0; i < r->members.n; i++)
		if (!strcmp(r->members.v[i]->node_id, node_id))
			return r->members.v[i];
	return NULL;
}

/* True when the round is not the one a resume names (its round, restart
 * count and members in group-rank order), with what differs in why. */
static bool round_differs(const struct crun__round *r, const struct crun__rdzv_assignment *a,
			  char *why, size_t len)
{
	if (a->round != r->round) {
		snprintf(why, len, "the run is in round %" PRId64, r->round);
		return true;
	}
	if (a->restart_count != r->restart_count) {
		snprintf(why, len, "restart count %" PRId64 " differs from the run's %" PRId64,
			 a->restart_count, r->restart_count);
		return true;
	}
	if ((size_t)a->nnodes != r->members.n) {
		snprintf(why, len, "%d nodes differ from the round's %zu", a->nnodes, r->members.n);
		return true;
	}
	for (size_t i = 0; i < r->members.n; i++) {
		const struct crun__rdzv_node *x = &a->nodes[i];
		const struct rnode *m = r->members.v[i];

		if (strcmp(x->node_id, m->node_id) || strcmp(x->host, m->host) ||
		    strcmp(x->addr, m->addr) || x->nproc != m->nproc) {
			snprintf(why, len,
				 "node %zu is '%s' (%s, %s, %d workers) there, but '%s' (%s, %s, "
				 "%d workers) in the round",
				 i, x->node_id, x->host, x->addr, x->nproc, m->node_id, m->host,
				 m->addr, m->nproc);
			return true;
		}
	}
	return false;
}

/* ECANCELED to a resume of a round that is over or cannot be resumed: the
 * agent stops its workers and joins again. */
static void cancel_resume(struct crun__round *r, const struct crun__round_event *ev,
			  const char *why)
{
	int64_t round = ev->assignment->round;
	char msg[1200];

	if (why)
		snprintf(msg, sizeof(msg), "round %" PRId64 " of run '%s' cannot be resumed: %s",
			 round, r->run_id, why);
	else if (r->ended_round == round && r->ended_why)
		snprintf(msg, sizeof(msg), "round %" PRId64 " ended: %s", round, r->ended_why);
	else
		snprintf(msg, sizeof(msg),
			 "round %" PRId64 " ended: run '%s' is in round %" PRId64 " (%s)", round,
			 r->run_id, r->round, state_names[r->state]);
	crun__info("run '%s': node '%s' (%s) cannot resume: %s", r->run_id, ev->node->node_id,
		   ev->node->host, msg);
	send_err(r, ev->peer, ev->id, ECANCELED, "%s", msg);
}

/* True when the store knows nothing of the run but its name: no round was
 * ever assigned and nobody waits in the first one. */
static bool fresh(const struct crun__round *r)
{
	return r->state == ROUND_OPEN && r->round == 1 && !r->joiners.n && !r->cooling.n;
}

/* The members of a RECOVERING round back to no connection, their held
 * resumes and DONEs answered with ECANCELED why (the round was
 * rebuilt). */
static void recover_drop(struct crun__round *r, const char *why)
{
	for (size_t i = 0; i < r->members.n; i++) {
		struct rnode *m = r->members.v[i];

		if (!m->peer)
			continue;
		send_err(r, m->peer, m->join_id, ECANCELED, "round %" PRId64 " ended: %s", r->round,
			 why);
		if (m->done)
			send_err(r, m->peer, m->done_id, ECANCELED, "round %" PRId64 " ended: %s",
				 r->round, why);
	}
	nodes_free(&r->members);
	r->nresumed = 0;
	r->ndone = 0;
}

/* The run becomes RECOVERING the round a resume names: its configuration,
 * round, restart count and members (none connected yet). 0 or -ENOMEM
 * (the run is then as it was, its members dropped). */
static int recover_from(struct crun__round *r, const struct crun__round_event *ev)
{
	const struct crun__rdzv_assignment *a = ev->assignment;

	nodes_free(&r->members);
	for (int i = 0; i < a->nnodes; i++) {
		const struct crun__rdzv_node *x = &a->nodes[i];
		struct rnode *m = rnode_new(x->node_id, x->host, x->addr);

		if (!m || nodes_push(&r->members, m) < 0) {
			free(m);
			nodes_free(&r->members);
			return -ENOMEM;
		}
		m->nproc = x->nproc;
		m->node_rank = -1; /* known once it resumes */
		m->group_rank = i;
		m->seq = node_seq(r, x->node_id);
	}
	r->configured = true;
	r->conf = *ev->conf;
	r->conf.join_timeout_ms = 0;
	r->conf.keepalive_ms = 0;
	r->static_ranks = ev->node->node_rank >= 0;
	r->round = a->round;
	r->restart_count = a->restart_count;
	r->world_size = a->world_size;
	r->ndone = 0;
	r->nresumed = 0;
	r->last_call_armed = false;
	r->resume_armed = false;
	r->resume_heard = false;
	r->restored = false;
	r->state = ROUND_RECOVERING;
	r->generation++;
	if (!r->wait_ms)
		r->wait_ms =
			ev->conf->keepalive_ms ? ev->conf->keepalive_ms : ev->conf->join_timeout_ms;
	crun__info("run '%s': rebuilding round %" PRId64 " (%d node%s, %" PRId64
		   " restarts) from the resume of node '%s' (%s)",
		   r->run_id, r->round, a->nnodes, a->nnodes == 1 ? "" : "s", r->restart_count,
		   ev->node->node_id, ev->node->host);
	return 0;
}

/* RECOVERING -> RUNNING: every member is back and gets the assignment it
 * holds; DONEs sent meanwhile count; a node that waits to join ends the
 * round as it would have in the RUNNING round. */
static void recovered(struct crun__round *r)
{
	char msg[1200];

	r->state = ROUND_RUNNING;
	r->resume_armed = false;
	crun__info("round %" PRId64 " of run '%s' resumed: all %zu node%s came back", r->round,
		   r->run_id, r->members.n, r->members.n == 1 ? "" : "s");
	send_assignments(r, NULL);
	if (r->ndone && (size_t)r->ndone == r->members.n) {
		close_run(r, false);
		return;
	}
	if (r->standby.n && r->members.n < (size_t)r->conf.max_nodes && !r->ndone) {
		snprintf(msg, sizeof(msg), "node '%s' (%s) is joining", r->standby.v[0]->node_id,
			 r->standby.v[0]->host);
		end_round(r, "join", msg, NULL);
	}
}

/* A round restored from a journal that no member has resumed is
 * dropped: the run is as new, round 1 with nothing configured (the
 * journal then forgets it), and a JOIN is the first of round 1. Its
 * members are gone (their job ended while the store was down, or long
 * ago), or another job reuses the run id: either way no agent holds the
 * recorded round, and counting its end would only fail a job that never
 * had it. */
static void restart_afresh(struct crun__round *r, const char *why)
{
	crun__info("run '%s': round %" PRId64 " restored from the journal is dropped (%s): the "
		   "run starts afresh in round 1",
		   r->run_id, r->round, why);
	nodes_free(&r->members);
	for (size_t i = 0; i < r->nknown; i++) {
		free(r->known[i].node_id);
		free(r->known[i].fails);
	}
	free(r->known);
	r->known = NULL;
	r->nknown = r->known_cap = 0;
	r->next_seq = 0;
	prev_clear(r);
	free(r->ended_why);
	r->ended_why = NULL;
	r->ended_round = 0;
	memset(&r->conf, 0, sizeof(r->conf));
	r->configured = false;
	r->static_ranks = false;
	r->round = 1;
	r->restart_count = 0;
	r->world_size = 0;
	r->ndone = 0;
	r->nresumed = 0;
	r->wait_ms = 0;
	r->resume_armed = false;
	r->resume_heard = false;
	r->restored = false;
	r->state = ROUND_OPEN;
	r->generation++;
}

/* The RECOVERING round's deadline passed: it ends as if the members that
 * did not resume had left. */
static void resume_timed_out(struct crun__round *r)
{
	char msg[1024], t[24];
	size_t o = 0, shown = 0, missing = 0;
	int len;

	for (size_t i = 0; i < r->members.n; i++) {
		const struct rnode *m = r->members.v[i];

		if (m->peer)
			continue;
		missing++;
		count_failure(r, m->node_id, m->host);
		if (o + strlen(m->host) + 128 >= sizeof(msg))
			continue;
		len = snprintf(msg + o, sizeof(msg) - o, "%snode %d (%s)", shown ? ", " : "",
			       m->group_rank, m->host);
		if (len > 0)
			o += (size_t)len;
		shown++;
	}
	if (missing > shown)
		o += (size_t)snprintf(msg + o, sizeof(msg) - o, " and %zu more", missing - shown);
	snprintf(msg + o, sizeof(msg) - o, " did not come back within %s after the store restarted",
		 crun__rdzv_format_ms(r->resume_wait_ms, t, sizeof(t)));
	end_round(r, "left", msg, NULL);
}

/* A resume of a member of the RECOVERING round that matches it: held
 * until every member is back. */
static void resume_hold(struct crun__round *r, const struct crun__round_event *ev)
{
	struct rnode *m = r->members.v[ev->assignment->group_rank];
	char t[24];
	long i = nodes_find(&r->members, ev->peer);

	if ((i >= 0 && r->members.v[i] != m) || nodes_find(&r->standby, ev->peer) >= 0 ||
	    nodes_find(&r->cooling, ev->peer) >= 0) {
		send_err(r, ev->peer, ev->id, EALREADY,
			 "this connection is already another node of run '%s'", r->run_id);
		return;
	}
	if (m->peer == ev->peer) {
		send_err(r, ev->peer, ev->id, EALREADY,
			 "this connection already resumed round %" PRId64, r->round);
		return;
	}
	if (m->peer) {
		send_err(r, m->peer, m->join_id, EEXIST,
			 "node '%s' resumed again on another connection", m->node_id);
		/* A DONE held from the old connection is not answered
		 * there any more: the member sends it again. */
		if (m->done) {
			m->done = false;
			r->ndone--;
		}
	} else {
		r->nresumed++;
	}
	m->peer = ev->peer;
	m->join_id = ev->id;
	m->node_rank = ev->node->node_rank;
	r->restored = false;
	if (!r->resume_heard) {
		r->resume_heard = true;
		r->resume_armed = true;
		r->resume_wait_ms = ev->conf->join_timeout_ms;
		r->resume_deadline = deadline_after(r, r->resume_wait_ms);
	}
	crun__info("run '%s': node %d (%s) resumed round %" PRId64 " (%zu of %zu back, waiting "
		   "up to %s)",
		   r->run_id, m->group_rank, m->host, r->round, r->nresumed, r->members.n,
		   crun__rdzv_format_ms(r->resume_wait_ms, t, sizeof(t)));
	if (r->nresumed == r->members.n)
		recovered(r);
}

/* A resume in the RUNNING round it names: the connection takes the
 * member's place, as a JOIN of a reconnected node would, but the round
 * goes on; a DONE the member sent before counts no more (it sends it
 * again). */
static void resume_running(struct crun__round *r, const struct crun__round_event *ev)
{
	struct rnode *m = r->members.v[ev->assignment->group_rank];
	long i = nodes_find(&r->members, ev->peer);

	if ((i >= 0 && r->members.v[i] != m) || nodes_find(&r->standby, ev->peer) >= 0 ||
	    nodes_find(&r->cooling, ev->peer) >= 0) {
		send_err(r, ev->peer, ev->id, EALREADY,
			 "this connection is already another node of run '%s'", r->run_id);
		return;
	}
	if (m->done) {
		m->done = false;
		r->ndone--;
	}
	m->lost = false;
	m->peer = ev->peer;
	m->join_id = ev->id;
	crun__info("run '%s': node %d (%s) resumed round %" PRId64 " on a new connection",
		   r->run_id, m->group_rank, m->host, r->round);
	send_assignments(r, m);
}

static void resume_event(struct crun__round *r, const struct crun__round_event *ev)
{
	const struct crun__rdzv_assignment *a = ev->assignment;
	char why[512];

	switch (r->state) {
	case ROUND_CLOSED:
		crun__info("run '%s': node '%s' (%s) cannot resume: the run is closed", r->run_id,
			   ev->node->node_id, ev->node->host);
		send_err(r, ev->peer, ev->id, ESHUTDOWN, "run '%s' is closed: %s", r->run_id,
			 r->failed ? "the job failed" : "the job has finished");
		return;
	case ROUND_OPEN:
		if (!fresh(r)) {
			cancel_resume(r, ev, NULL);
			return;
		}
		if (r->configured &&
		    conf_differs(r, ev->conf, ev->node->node_rank, why, sizeof(why))) {
			cancel_resume(r, ev, why);
			return;
		}
		if (recover_from(r, ev) < 0) {
			send_err(r, ev->peer, ev->id, ENOMEM, "out of memory");
			return;
		}
		resume_hold(r, ev);
		return;
	case ROUND_RUNNING:
		if (a->round != r->round) {
			cancel_resume(r, ev, NULL);
			return;
		}
		if (round_differs(r, a, why, sizeof(why)) ||
		    conf_differs(r, ev->conf, ev->node->node_rank, why, sizeof(why))) {
			cancel_resume(r, ev, why);
			return;
		}
		resume_running(r, ev);
		return;
	case ROUND_RECOVERING:
		if (a->round > r->round) {
			snprintf(why, sizeof(why), "node '%s' (%s) resumed round %" PRId64,
				 ev->node->node_id, ev->node->host, a->round);
			crun__info("run '%s': round %" PRId64 " is dropped: %s", r->run_id,
				   r->round, why);
			recover_drop(r, why);
			if (recover_from(r, ev) < 0) {
				/* The run has no round to go on with: open the
				 * next one, as after a counted end. */
				send_err(r, ev->peer, ev->id, ENOMEM, "out of memory");
				end_round(r, "left", "out of memory rebuilding the round", NULL);
				return;
			}
			resume_hold(r, ev);
			return;
		}
		if (round_differs(r, a, why, sizeof(why)) ||
		    conf_differs(r, ev->conf, ev->node->node_rank, why, sizeof(why))) {
			cancel_resume(r, ev, why);
			return;
		}
		resume_hold(r, ev);
		return;
	}
}

/* The RECOVERING round: resumes are resume_event's; the JOIN of a member
 * is crun__round_apply's (it ends the round first). */
static void recovering_event(struct crun__round *r, const struct crun__round_event *ev)
{
	char msg[1200];
	struct rnode *n;
	long i;

	switch (ev->type) {
	case CRUN_ROUND_EV_JOIN:
	case CRUN_ROUND_EV_COOLED:
		/* A node that is not a member waits, as on standby, until
		 * the round runs again (then it ends it with "join" when
		 * there is room) or ends. */
		n = arrival(r, ev);
		if (!n)
			break;
		if (nodes_push(&r->standby, n) < 0) {
			send_err(r, n->peer, n->join_id, ENOMEM, "out of memory");
			free(n);
			break;
		}
		crun__info("run '%s': node '%s' (%s) waits: round %" PRId64
			   " is being resumed after a store restart",
			   r->run_id, n->node_id, n->host, r->round);
		break;
	case CRUN_ROUND_EV_LOST:
		i = nodes_find(&r->members, ev->peer);
		if (i >= 0) {
			n = r->members.v[i];
			crun__info("run '%s': node %d (%s), resumed, left again: %s", r->run_id,
				   n->group_rank, n->host,
				   ev->message ? ev->message : "connection closed");
			n->peer = NULL;
			n->join_id = 0;
			r->nresumed--;
			if (n->done) {
				n->done = false;
				r->ndone--;
			}
			break;
		}
		drop_waiting(r, ev);
		break;
	case CRUN_ROUND_EV_FAIL:
	case CRUN_ROUND_EV_DONE:
		/* A DONE counts once the round runs again. */
		member_report(r, ev, " (the round is being resumed: send RDZV_RESUME first)");
		break;
	case CRUN_ROUND_EV_JOIN_TIMEOUT:
		i = nodes_find(&r->standby, ev->peer);
		if (i < 0)
			break;
		n = nodes_take(&r->standby, (size_t)i);
		crun__info("run '%s': waiting node '%s' (%s) gave up after %s", r->run_id,
			   n->node_id, n->host,
			   crun__rdzv_format_ms(n->join_timeout_ms, msg, sizeof(msg)));
		send_err(r, n->peer, n->join_id, ETIMEDOUT,
			 "no round of run '%s' opened within %s: round %" PRId64
			 " is being resumed after a store restart",
			 r->run_id, crun__rdzv_format_ms(n->join_timeout_ms, msg, sizeof(msg)),
			 r->round);
		free(n);
		break;
	case CRUN_ROUND_EV_RESUME_DEADLINE:
		if (!r->resume_armed || uv_now(r->loop) < r->resume_deadline)
			break;
		if (r->restored)
			restart_afresh(r, "no member resumed it");
		else
			resume_timed_out(r);
		break;
	case CRUN_ROUND_EV_LAST_CALL:
	case CRUN_ROUND_EV_RESUME:
		break;
	}
}

/* A JOIN whose node id another connection holds: the same agent on a new
 * connection. Its old connection's node is lost first. */
static void replace_old(struct crun__round *r, const struct crun__round_event *ev)
{
	struct nodes *sets[4] = {&r->joiners, &r->members, &r->standby, &r->cooling};
	struct crun__round_event lost = {
		.type = CRUN_ROUND_EV_LOST,
		.message = "replaced by a new connection of the same node",
	};

	for (int s = 0; s < 4; s++) {
		struct rnode *o = node_find_id(sets[s], ev->node->node_id);

		if (o && o->peer != ev->peer) {
			if (sets[s] != &r->members)
				send_err(r, o->peer, o->join_id, EEXIST,
					 "node '%s' joined again on another connection",
					 o->node_id);
			lost.peer = o->peer;
			crun__round_apply(r, &lost);
			return;
		}
	}
}

void crun__round_apply(struct crun__round *r, const struct crun__round_event *ev)
{
	enum round_state from = r->state;
	const struct rnode *m;
	char msg[1200];

	if (ev->type == CRUN_ROUND_EV_RESUME) {
		resume_event(r, ev);
		goto out;
	}
	if (ev->type == CRUN_ROUND_EV_JOIN && ev->node && r->state == ROUND_RECOVERING) {
		/* A member that joins instead of resuming has stopped its
		 * workers: the round cannot go on; the JOIN is one for the
		 * next round. Another node joining a round restored from the
		 * journal that no member resumed is a new job that reuses
		 * the run id (agents resume, and node ids are new for each
		 * agent): the run starts afresh with it. */
		m = member_by_id(r, ev->node->node_id);
		if (!m && r->restored) {
			snprintf(msg, sizeof(msg), "node '%s' (%s) joins", ev->node->node_id,
				 ev->node->host);
			restart_afresh(r, msg);
		} else if (m) {
			snprintf(msg, sizeof(msg),
				 "node %d (%s) joined again instead of resuming the round",
				 m->group_rank, m->host);
			end_round(r, "left", msg, NULL);
		}
	}
	if (ev->type == CRUN_ROUND_EV_JOIN && ev->node && r->state != ROUND_CLOSED &&
	    r->state != ROUND_RECOVERING)
		replace_old(r, ev);

	switch (r->state) {
	case ROUND_OPEN:
		open_event(r, ev);
		break;
	case ROUND_RUNNING:
		running_event(r, ev);
		break;
	case ROUND_CLOSED:
		closed_event(r, ev);
		break;
	case ROUND_RECOVERING:
		recovering_event(r, ev);
		break;
	}
out:
	if (r->state != from)
		crun__debug("run '%s': round %" PRId64 " %s", r->run_id, r->round,
			    state_words[r->state]);
	if (r->generation != r->journaled) {
		r->journaled = r->generation;
		if (r->journal_cb)
			r->journal_cb(r->journal_arg, r, false);
	}
	rearm(r);
}

/* ---- the timer ------------------------------------------------------------------- */

static void on_timer_closed(uv_handle_t *h)
{
	struct round_timer *t = (struct round_timer *)h;
	const struct crun__round_ops *ops = t->ops;
	void *ctx = t->ctx;

	free(t);
	ops->handle_closed(ctx);
}

/* The join-timeout deadlines that matter in the current state. */
static const struct nodes *waiting(const struct crun__round *r)
{
	if (r->state == ROUND_OPEN && r->joiners.n < (size_t)r->conf.min_nodes)
		return &r->joiners;
	if (r->state == ROUND_RUNNING || r->state == ROUND_RECOVERING)
		return &r->standby;
	return NULL;
}

static void on_timer(uv_timer_t *h)
{
	struct round_timer *t = (struct round_timer *)h;
	struct crun__round *r = t->r;
	struct crun__round_event ev = {.type = CRUN_ROUND_EV_LAST_CALL};
	uint64_t now = uv_now(r->loop);
	const struct nodes *w;
	void **expired = NULL;
	size_t nexp = 0;

	if (r->state == ROUND_OPEN && r->last_call_armed && now >= r->last_call_deadline)
		crun__round_apply(r, &ev);
	if (r->state == ROUND_RECOVERING && r->resume_armed && now >= r->resume_deadline) {
		ev.type = CRUN_ROUND_EV_RESUME_DEADLINE;
		crun__round_apply(r, &ev);
	}
	/* Peers first, then events: each event may reshape the arrays. */
	if (r->cooling.n) {
		expired = malloc(r->cooling.n * sizeof(*expired));
		for (size_t i = 0; expired && i < r->cooling.n; i++)
			if (r->cooling.v[i]->deadline <= now)
				expired[nexp++] = r->cooling.v[i]->peer;
		for (size_t i = 0; i < nexp; i++) {
			ev.type = CRUN_ROUND_EV_COOLED;
			ev.peer = expired[i];
			crun__round_apply(r, &ev);
		}
		free(expired);
		expired = NULL;
		nexp = 0;
	}
	w = waiting(r);
	if (w && w->n) {
		expired = malloc(w->n * sizeof(*expired));
		for (size_t i = 0; expired && i < w->n; i++)
			if (w->v[i]->deadline <= now)
				expired[nexp++] = w->v[i]->peer;
	}
	for (size_t i = 0; i < nexp; i++) {
		ev.type = CRUN_ROUND_EV_JOIN_TIMEOUT;
		ev.peer = expired[i];
		crun__round_apply(r, &ev);
	}
	free(expired);
	rearm(r);
	t->ops->flush(t->ctx); /* may destroy r: nothing after this */
}

static void rearm(struct crun__round *r)
{
	uint64_t next = UINT64_MAX, now;
	const struct nodes *w = waiting(r);
	bool any = false;

	if (r->state == ROUND_OPEN && r->last_call_armed) {
		next = r->last_call_deadline;
		any = true;
	}
	if (r->state == ROUND_RECOVERING && r->resume_armed) {
		next = r->resume_deadline;
		any = true;
	}
	for (size_t i = 0; w && i < w->n; i++) {
		if (w->v[i]->deadline < next)
			next = w->v[i]->deadline;
		any = true;
	}
	for (size_t i = 0; i < r->cooling.n; i++) {
		if (r->cooling.v[i]->deadline < next)
			next = r->cooling.v[i]->deadline;
		any = true;
	}
	if (!any) {
		if (r->timer)
			uv_timer_stop(&r->timer->t);
		return;
	}
	if (!r->timer) {
		r->timer = calloc(1, sizeof(*r->timer));
		if (!r->timer)
			goto out_no_timer;
		if (uv_timer_init(r->loop, &r->timer->t) < 0) {
			free(r->timer);
			r->timer = NULL;
			goto out_no_timer;
		}
		r->timer->r = r;
		r->timer->ops = r->ops;
		r->timer->ctx = r->ctx;
		r->ops->handle_opened(r->ctx);
	}
	now = uv_now(r->loop);
	uv_timer_start(&r->timer->t, on_timer, next > now ? next - now : 0, 0);
	return;

out_no_timer:
	crun__warn("run '%s': cannot create the rendezvous timer: out of memory; "
		   "timeouts are late until the next request",
		   r->run_id);
}

/* ---- lifecycle ------------------------------------------------------------------- */

struct crun__round *crun__round_create(uv_loop_t *loop, const char *run_id,
				       const struct crun__round_ops *ops, void *ctx)
{
	struct crun__round *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->run_id = strdup(run_id);
	if (!r->run_id) {
		free(r);
		return NULL;
	}
	r->loop = loop;
	r->ops = ops;
	r->ctx = ctx;
	r->state = ROUND_OPEN;
	r->round = 1;
	return r;
}

void crun__round_destroy(struct crun__round *r)
{
	if (!r)
		return;
	if (r->journal_cb)
		r->journal_cb(r->journal_arg, r, true);
	if (r->timer) {
		r->timer->r = NULL;
		uv_close((uv_handle_t *)&r->timer->t, on_timer_closed);
	}
	nodes_free(&r->joiners);
	nodes_free(&r->members);
	nodes_free(&r->standby);
	nodes_free(&r->cooling);
	for (size_t i = 0; i < r->nknown; i++) {
		free(r->known[i].node_id);
		free(r->known[i].fails);
	}
	free(r->known);
	prev_clear(r);
	free(r->ended_why);
	free(r->run_id);
	free(r);
}

bool crun__round_has_peer(const struct crun__round *r, const void *peer)
{
	return r && (nodes_find(&r->joiners, peer) >= 0 || nodes_find(&r->members, peer) >= 0 ||
		     nodes_find(&r->standby, peer) >= 0 || nodes_find(&r->cooling, peer) >= 0);
}

/* ---- the journal ------------------------------------------------------------ */

void crun__round_set_journal(struct crun__round *r, crun__round_journal_cb cb, void *arg)
{
	r->journal_cb = cb;
	r->journal_arg = arg;
}

bool crun__round_is_new(const struct crun__round *r)
{
	return !r->configured;
}

int crun__round_record(const struct crun__round *r, struct crun__journal_run *run)
{
	memset(run, 0, sizeof(*run));
	switch (r->state) {
	case ROUND_RUNNING:
	case ROUND_RECOVERING:
		run->state = CRUN_JOURNAL_RUNNING;
		break;
	case ROUND_OPEN:
		run->state = CRUN_JOURNAL_OPEN;
		break;
	case ROUND_CLOSED:
		run->state = r->failed ? CRUN_JOURNAL_FAILED : CRUN_JOURNAL_FINISHED;
		break;
	}
	run->round = r->round;
	run->restart_count = r->restart_count;
	run->conf = r->conf;
	run->static_ranks = r->static_ranks;
	run->wait_ms = r->wait_ms;
	if (run->state != CRUN_JOURNAL_RUNNING || !r->members.n)
		return 0;
	run->members = calloc(r->members.n, sizeof(*run->members));
	if (!run->members)
		return -ENOMEM;
	for (size_t i = 0; i < r->members.n; i++) {
		const struct rnode *m = r->members.v[i];
		struct crun__rdzv_node *x = &run->members[i];

		run->nmembers = (int)i + 1;
		x->node_id = strdup(m->node_id);
		x->host = strdup(m->host);
		x->addr = strdup(m->addr);
		x->nproc = m->nproc;
		x->node_rank = m->node_rank;
		if (!x->node_id || !x->host || !x->addr) {
			crun__journal_run_finish(run);
			return -ENOMEM;
		}
	}
	return 0;
}

int crun__round_restore(struct crun__round *r, const struct crun__journal_run *run)
{
	const char *what = "running";

	if (run->state == CRUN_JOURNAL_RUNNING) {
		for (int i = 0; i < run->nmembers; i++) {
			const struct crun__rdzv_node *x = &run->members[i];
			struct rnode *m = rnode_new(x->node_id, x->host, x->addr);

			if (!m || nodes_push(&r->members, m) < 0) {
				free(m);
				nodes_free(&r->members);
				return -ENOMEM;
			}
			m->nproc = x->nproc;
			m->node_rank = x->node_rank;
			m->group_rank = i;
			m->seq = node_seq(r, x->node_id);
			r->world_size += x->nproc;
		}
		r->state = ROUND_RECOVERING;
		r->restored = true;
		r->resume_heard = false;
		r->resume_armed = true;
		r->resume_wait_ms = run->wait_ms ? run->wait_ms : RESTORED_WAIT_MS;
		r->resume_deadline = deadline_after(r, r->resume_wait_ms);
	} else if (run->state == CRUN_JOURNAL_OPEN) {
		r->state = ROUND_OPEN;
		what = "between rounds";
	} else {
		r->state = ROUND_CLOSED;
		r->failed = run->state == CRUN_JOURNAL_FAILED;
		what = r->failed ? "closed: the job failed" : "closed: the job has finished";
	}
	r->configured = true;
	r->conf = run->conf;
	r->static_ranks = run->static_ranks;
	r->wait_ms = run->wait_ms;
	r->round = run->round;
	r->restart_count = run->restart_count;
	crun__info("run '%s': restored from the journal: round %" PRId64 ", %" PRId64
		   " restarts, %s",
		   r->run_id, r->round, r->restart_count, what);
	rearm(r);
	return 0;
}
