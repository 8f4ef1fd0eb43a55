/* Rendezvous requests of store clients: the glue between the store's runs
 * (store.h) and the rounds (round.h).
 *
 * Each run that sees a rendezvous request gets a round, kept in the run's
 * data slot (crun__store_run_data); the edge's run_freed hook hands it to
 * crun__store_rdzv_free. The round's peers are store clients: the edge's
 * round ops receive a struct crun__store_client * as peer. Errors in a
 * request (a bad RDZV_JOIN, no memory) are answered through the store
 * (crun__store_refuse, crun__store_reply_error). */
#ifndef CRUN_RENDEZVOUS_STORE_RDZV_H
#define CRUN_RENDEZVOUS_STORE_RDZV_H

#include <stdint.h>
#include <uv.h>

#include "rendezvous/journal_file.h"
#include "rendezvous/round.h"
#include "rendezvous/store.h"
#include "rendezvous/wire.h"

/* What a new round needs from the edge: the loop for its timer and the
 * ops (with their ctx) that reach its peers. The round's peers are the
 * store's clients: each peer pointer the ops get is a struct
 * crun__store_client *, from which the edge finds its connection. */
struct crun__store_rdzv_env {
	uv_loop_t *loop;
	const struct crun__round_ops *ops;
	void *ctx;
	/* NULL, or the journal (crun-rdzvd --state-dir) that records every
	 * round and restores a run it recorded when the run's first
	 * rendezvous request comes. */
	struct crun__journal_file *journal;
};

/* Applies an RDZV_JOIN, RDZV_FAIL, RDZV_DONE or RDZV_RESUME request of c
 * (in a run; m validated); peer_ip is c's address as the edge sees it (no
 * port), for a JOIN without an address of its own. When this JOIN or
 * RESUME made the round take c (a joiner, a member, held or on standby),
 * *keepalive_ms is set to the keep-alive window it asked for (0: none),
 * which the edge must then enforce; otherwise it is left alone. */
void crun__store_rdzv_apply(const struct crun__store_rdzv_env *env, struct crun__store *st,
			    struct crun__store_client *c, const struct crun__wire_msg *m,
			    const char *peer_ip, int64_t *keepalive_ms);

/* c, still in its run, is closing: its round, if the run has one, loses
 * it (why: "connection closed", ...). Call it after crun__store_detach(c)
 * and before crun__store_leave(c): the round may still send to the
 * others in c's run, which leave would free when c was its last client. */
void crun__store_rdzv_lost(struct crun__store_client *c, const char *why);

/* Frees a round found in a run's data slot: fit for the store's
 * ops->run_freed (ctx is not used). */
void crun__store_rdzv_free(void *ctx, void *round);

#endif
