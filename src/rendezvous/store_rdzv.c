/* Rendezvous requests of store clients (store_rdzv.h). */
#include "rendezvous/store_rdzv.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "rendezvous/journal_file.h"
#include "rendezvous/rdzv.h"

/* What a round's journal callback needs: the journal and the run id. */
struct run_journal {
	struct crun__journal_file *journal;
	size_t len;
	uint8_t id[];
};

static void journal_changed(void *arg, const struct crun__round *r, bool destroyed)
{
	struct run_journal *rj = arg;
	struct crun__journal_run run;

	if (destroyed) {
		/* The store forgets the run (no connection, no key). Between
		 * rounds, so does the journal: the run starts afresh, as in
		 * this store. A closed run, or one in a round that is
		 * resumed, stays: it is still closed, or resumed, when
		 * agents come back. */
		if (crun__round_record(r, &run) == 0 && run.state == CRUN_JOURNAL_OPEN)
			crun__journal_file_drop(rj->journal, rj->id, rj->len);
		crun__journal_run_finish(&run);
		free(rj);
		return;
	}
	if (crun__round_is_new(r)) {
		/* A restored run that started afresh: nothing to keep. */
		crun__journal_file_drop(rj->journal, rj->id, rj->len);
		return;
	}
	if (crun__round_record(r, &run) < 0 || !(run.run_id = malloc(rj->len ? rj->len : 1))) {
		crun__journal_run_finish(&run);
		crun__error("cannot record a run in the journal: out of memory");
		return;
	}
	memcpy(run.run_id, rj->id, rj->len);
	run.run_id_len = rj->len;
	crun__journal_file_put(rj->journal, &run);
}

/* A new round for the run id (len bytes), shown as shown: as the journal
 * recorded it when it did, journaled from now on when there is one. */
static struct crun__round *new_round(const struct crun__store_rdzv_env *env, const char *run_id,
				     uint32_t len, const char *shown)
{
	struct crun__round *r = crun__round_create(env->loop, shown, env->ops, env->ctx);
	const struct crun__journal_run *rec;
	struct run_journal *rj;

	if (!r || !env->journal)
		return r;
	rj = malloc(sizeof(*rj) + len);
	if (!rj) {
		crun__round_destroy(r);
		return NULL;
	}
	rj->journal = env->journal;
	rj->len = len;
	memcpy(rj->id, run_id, len);
	rec = crun__journal_file_find(env->journal, rj->id, len);
	if (rec && crun__round_restore(r, rec) < 0) {
		free(rj);
		crun__round_destroy(r);
		return NULL;
	}
	crun__round_set_journal(r, journal_changed, rj);
	return r;
}

/* The round of c's run, made on first use; NULL after an error reply. */
static struct crun__round *run_round(const struct crun__store_rdzv_env *env, struct crun__store *st,
				     struct crun__store_client *c, uint32_t id)
{
	void **slot = crun__store_run_data(c);
	char shown[300];
	uint32_t len;

	if (!*slot) {
		const char *run_id = crun__store_run_id(c, &len);

		crun__store_show(shown, sizeof(shown), (const uint8_t *)run_id, len);
		*slot = new_round(env, run_id, len, shown);
		if (!*slot)
			crun__store_reply_error(st, c, id, ENOMEM, "out of memory");
	}
	return *slot;
}

/* A RDZV_JOIN or a RDZV_RESUME: only one the round admitted (a joiner, or
 * the member a resume names, held or answered) sets the keep-alive window;
 * a refused one (EALREADY, a mismatch, a closed run) leaves the connection
 * as it was. */
static void arrive(const struct crun__store_rdzv_env *env, struct crun__store *st,
		   struct crun__store_client *c, const struct crun__wire_msg *m,
		   const char *peer_ip, int64_t *keepalive_ms)
{
	bool is_resume = m->type == CRUN_WIRE_RDZV_RESUME;
	struct crun__round_event ev = {
		.type = is_resume ? CRUN_ROUND_EV_RESUME : CRUN_ROUND_EV_JOIN,
		.peer = c,
		.id = m->id,
	};
	struct crun__rdzv_assignment a = {0};
	struct crun__rdzv_node node;
	struct crun__rdzv_conf conf;
	struct crun__round *round;
	bool admitted_before;
	char err[256];
	int rc;

	rc = is_resume ? crun__rdzv_parse_resume(m, &node, &conf, &a, err, sizeof(err))
		       : crun__rdzv_parse_join(m, &node, &conf, err, sizeof(err));
	if (rc < 0) {
		if (rc == -ENOMEM)
			crun__store_reply_error(st, c, m->id, ENOMEM, "out of memory");
		else
			crun__store_refuse(st, c, m->id, EINVAL, "bad %s: %s",
					   crun__wire_type_name(m->type), err);
		return;
	}
	round = run_round(env, st, c, m->id);
	if (!round)
		goto out_finish;
	admitted_before = crun__round_has_peer(round, c);
	ev.node = &node;
	ev.conf = &conf;
	ev.peer_addr = is_resume ? NULL : peer_ip;
	ev.assignment = is_resume ? &a : NULL;
	crun__round_apply(round, &ev);
	round = *crun__store_run_data(c);
	if (!admitted_before && round && crun__round_has_peer(round, c))
		*keepalive_ms = conf.keepalive_ms;
out_finish:
	crun__rdzv_node_finish(&node);
	crun__rdzv_assignment_finish(&a);
}

/* RDZV_FAIL and RDZV_DONE. */
static void end(const struct crun__store_rdzv_env *env, struct crun__store *st,
		struct crun__store_client *c, const struct crun__wire_msg *m)
{
	struct crun__round_event ev = {.peer = c, .id = m->id, .num = m->num};
	struct crun__round *round = run_round(env, st, c, m->id);
	char msg[1024];

	if (!round)
		return;
	if (m->type == CRUN_WIRE_RDZV_FAIL) {
		/* The message goes into other nodes' logs: printable only. */
		size_t n = m->items[0].len < sizeof(msg) - 1 ? m->items[0].len : sizeof(msg) - 1;

		for (size_t i = 0; i < n; i++) {
			uint8_t b = m->items[0].data[i];

			msg[i] = b >= 0x20 && b < 0x7f ? (char)b : '?';
		}
		msg[n] = '\0';
		ev.type = CRUN_ROUND_EV_FAIL;
		ev.message = msg;
		ev.stop = m->count == 2 && m->items[1].len == strlen(CRUN_RDZV_FAIL_STOP) &&
			  !memcmp(m->items[1].data, CRUN_RDZV_FAIL_STOP, m->items[1].len);
	} else {
		ev.type = CRUN_ROUND_EV_DONE;
	}
	crun__round_apply(round, &ev);
}

void crun__store_rdzv_apply(const struct crun__store_rdzv_env *env, struct crun__store *st,
			    struct crun__store_client *c, const struct crun__wire_msg *m,
			    const char *peer_ip, int64_t *keepalive_ms)
{
	if (m->type == CRUN_WIRE_RDZV_JOIN || m->type == CRUN_WIRE_RDZV_RESUME)
		arrive(env, st, c, m, peer_ip, keepalive_ms);
	else
		end(env, st, c, m);
}

void crun__store_rdzv_lost(struct crun__store_client *c, const char *why)
{
	struct crun__round_event ev = {.type = CRUN_ROUND_EV_LOST, .peer = c, .message = why};
	void **slot = crun__store_run_data(c);

	if (slot && *slot)
		crun__round_apply(*slot, &ev);
}

void crun__store_rdzv_free(void *ctx, void *round)
{
	(void)ctx;
	crun__round_destroy(round);
}
