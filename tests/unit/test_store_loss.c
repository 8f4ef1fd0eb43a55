/* Unit tests of the store-loss rule and of the meaning of a RESUME's
 * answer (src/agent/store_loss.c), table-driven. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent/store_loss.h"
#include "common/util.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/wire.h"

#define RESUMABLE CRUN_WIRE_F_RDZV_RESUME
#define EMBEDDED (CRUN_WIRE_F_EMBEDDED | CRUN_WIRE_F_RDZV_RESUME)
#define OLD (CRUN_WIRE_F_AUTH | CRUN_WIRE_F_RDZV_EXCL)

static const struct loss_row {
	const char *what;
	struct crun__store_loss_facts f;
	enum crun__store_loss want;
} loss_rows[] = {
	{"crun-rdzvd restarted under a running round",
	 {-ECONNRESET, RESUMABLE, false, true, 3},
	 CRUN__LOSS_RESUME},
	{"a broken pipe is a close too", {-EPIPE, RESUMABLE, false, true, 3}, CRUN__LOSS_RESUME},
	{"an aborted connection too",
	 {-ECONNABORTED, RESUMABLE | OLD, false, true, 2},
	 CRUN__LOSS_RESUME},
	{"keep-alive silence: the partition case rejoins",
	 {-ETIMEDOUT, RESUMABLE, false, true, 3},
	 CRUN__LOSS_REJOIN},
	{"the store said why it closed", {-EMFILE, RESUMABLE, false, true, 3}, CRUN__LOSS_REJOIN},
	{"a bad frame", {-EPROTO, RESUMABLE, false, true, 3}, CRUN__LOSS_REJOIN},
	{"a store older than RESUME", {-ECONNRESET, OLD, false, true, 3}, CRUN__LOSS_REJOIN},
	{"not a member: joining", {-ECONNRESET, RESUMABLE, false, false, 0}, CRUN__LOSS_REJOIN},
	{"too many nodes for one RESUME frame",
	 {-ECONNRESET, RESUMABLE, false, true, CRUN_RDZV_RESUME_MAX_NODES + 1},
	 CRUN__LOSS_REJOIN},
	{"the most nodes one RESUME holds",
	 {-ECONNRESET, RESUMABLE, false, true, CRUN_RDZV_RESUME_MAX_NODES},
	 CRUN__LOSS_RESUME},
	{"node 0's agent and its store died",
	 {-ECONNRESET, EMBEDDED, false, true, 3},
	 CRUN__LOSS_GONE},
	{"node 0's store died while joining", {-EPIPE, EMBEDDED, false, false, 0}, CRUN__LOSS_GONE},
	{"node 0 cut off by the network: the partition case",
	 {-ETIMEDOUT, EMBEDDED, false, true, 3},
	 CRUN__LOSS_REJOIN},
	{"the hosting agent's own client",
	 {-ECONNRESET, EMBEDDED, true, true, 3},
	 CRUN__LOSS_REJOIN},
};

static void test_classify(void **state)
{
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(loss_rows); i++) {
		const struct loss_row *r = &loss_rows[i];
		enum crun__store_loss got = crun__store_loss_classify(&r->f);

		if (got != r->want)
			fail_msg("%s: got %d, want %d", r->what, (int)got, (int)r->want);
	}
}

static const struct outcome_row {
	const char *what;
	int status;
	uint8_t type;
	int64_t round, held;
	enum crun__resume_outcome want;
} outcome_rows[] = {
	{"the same round", 0, CRUN_WIRE_VALUES, 4, 4, CRUN__RESUME_SAME_ROUND},
	{"another round's assignment", 0, CRUN_WIRE_VALUES, 5, 4, CRUN__RESUME_REFUSED},
	{"an assignment that did not parse", 0, CRUN_WIRE_VALUES, -1, 4, CRUN__RESUME_REFUSED},
	{"not a VALUES frame", 0, CRUN_WIRE_OK, 4, 4, CRUN__RESUME_REFUSED},
	{"the round ended meanwhile", -ECANCELED, CRUN_WIRE_ERROR, 0, 4, CRUN__RESUME_ROUND_OVER},
	{"the run is closed", -ESHUTDOWN, CRUN_WIRE_ERROR, 0, 4, CRUN__RESUME_CLOSED},
	{"a malformed resume", -EINVAL, CRUN_WIRE_ERROR, 0, 4, CRUN__RESUME_REFUSED},
	{"a store that knows no RESUME", -EPROTO, CRUN_WIRE_ERROR, 0, 4, CRUN__RESUME_REFUSED},
};

static void test_outcome(void **state)
{
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(outcome_rows); i++) {
		const struct outcome_row *r = &outcome_rows[i];
		enum crun__resume_outcome got =
			crun__resume_outcome(r->status, r->type, r->round, r->held);

		if (got != r->want)
			fail_msg("%s: got %d, want %d", r->what, (int)got, (int)r->want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_outcome),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
