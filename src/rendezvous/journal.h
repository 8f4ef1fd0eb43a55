/* The rendezvous journal: what crun-rdzvd --state-dir keeps of each run's
 * rounds, so that a restarted store answers as the one before it did.
 *
 * This is the pure part: a run's record, and the text of the journal
 * file (encode, decode). No file is touched here; journal_file.h reads
 * and writes the file.
 *
 * The file is JSON, one object:
 *   {"version": 1, "runs": [RUN, ...]}
 * RUN:
 *   {"run": "<the run id's bytes in lower-case hex>",
 *    "name": "<the run id for people: non-printable bytes as '?'>",
 *    "state": "running" | "open" | "finished" | "failed",
 *    "round": N (>= 1), "restart_count": N (>= 0),
 *    "written": seconds since the epoch when the record was written,
 *    "conf": {"min_nodes", "max_nodes", "last_call_ms", "max_restarts",
 *             "has_exclusion" (bool), "blacklist_failures",
 *             "blacklist_window_ms", "cooldown_min_ms", "cooldown_max_ms",
 *             "static_ranks" (bool), "wait_ms"},
 *    "members": [{"node_id", "host", "addr", "nproc", "node_rank"}, ...]}
 * members: the running round's, in group-rank order ("running" only;
 * empty otherwise). wait_ms: how long a restarted store waits for the
 * members to resume when none has yet (the keep-alive window the run's
 * first JOIN asked for; 0: none asked). The name is not read back. The
 * run's keys are not in the journal. */
#ifndef CRUN_RENDEZVOUS_JOURNAL_H
#define CRUN_RENDEZVOUS_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/rdzv.h"

#define CRUN_JOURNAL_VERSION 1

enum crun__journal_state {
	CRUN_JOURNAL_RUNNING,  /* a round is assigned (or being resumed) */
	CRUN_JOURNAL_OPEN,     /* between rounds */
	CRUN_JOURNAL_FINISHED, /* closed: every member sent DONE */
	CRUN_JOURNAL_FAILED,   /* closed: restarts exhausted, or "stop" */
};

/* One run. Every pointer is owned by the record (free with
 * crun__journal_run_finish). */
struct crun__journal_run {
	uint8_t *run_id;
	size_t run_id_len;
	enum crun__journal_state state;
	int64_t round;
	int64_t restart_count;
	int64_t written; /* seconds since the epoch */
	/* The run's configuration: min/max_nodes, last_call_ms,
	 * max_restarts, the exclusion settings; join_timeout_ms and
	 * keepalive_ms are 0. */
	struct crun__rdzv_conf conf;
	bool static_ranks;
	int64_t wait_ms;
	struct crun__rdzv_node *members; /* nmembers, in group-rank order */
	int nmembers;
};

void crun__journal_run_finish(struct crun__journal_run *run);

/* True for the states of a closed run. */
bool crun__journal_closed(enum crun__journal_state state);

/* The journal text of n runs, NUL-terminated, malloc'd (the caller frees);
 * NULL when out of memory. */
char *crun__journal_encode(const struct crun__journal_run *runs, size_t n);

/* Parses a journal text of len bytes into *runs (malloc'd, *n of them;
 * free each with crun__journal_run_finish, then the array). Strict: the
 * version, every field's type and range, every string printable (as a
 * JOIN's), the run ids distinct. name is the file's name, for messages.
 * 0, -ENOMEM, or -EPROTO with "NAME: what is wrong and where" in err
 * (nothing to free then). */
int crun__journal_decode(const char *text, size_t len, const char *name,
			 struct crun__journal_run **runs, size_t *n, char *err, size_t errlen);

#endif
