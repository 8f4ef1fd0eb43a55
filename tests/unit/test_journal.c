/* The rendezvous journal (journal.h, journal_file.h): its text round trips,
 * a truncated or corrupt text is refused naming the file and what is
 * wrong, and the file edge reads, writes, bounds and refuses what it
 * should. Files live in a fresh temporary directory per test. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fs.h"
#include "common/log.h"
#include "rendezvous/journal.h"
#include "rendezvous/journal_file.h"

static struct crun__rdzv_node two[2] = {
	{(char *)"host-a:1:aa", (char *)"host-a", (char *)"10.0.0.1", 8, -1},
	{(char *)"host-b:2:bb", (char *)"host-b", (char *)"10.0.0.2", 4, -1},
};

/* A record that points at static memory: for encoding only. */
static struct crun__journal_run sample(const char *id, enum crun__journal_state state)
{
	struct crun__journal_run r = {
		.run_id = (uint8_t *)id,
		.run_id_len = strlen(id),
		.state = state,
		.round = 3,
		.restart_count = 2,
		.written = 1700000000,
		.conf = {.min_nodes = 2,
			 .max_nodes = 4,
			 .last_call_ms = 1500,
			 .max_restarts = 5,
			 .has_exclusion = true,
			 .blacklist_failures = 2,
			 .blacklist_window_ms = 60000,
			 .cooldown_min_ms = 1000,
			 .cooldown_max_ms = 8000},
		.wait_ms = 15000,
	};

	if (state == CRUN_JOURNAL_RUNNING) {
		r.members = two;
		r.nmembers = 2;
	}
	return r;
}

static void free_runs(struct crun__journal_run *runs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		crun__journal_run_finish(&runs[i]);
	free(runs);
}

static void test_round_trip(void **state)
{
	struct crun__journal_run in[3] = {sample("job", CRUN_JOURNAL_RUNNING),
					  sample("done\x01\xff", CRUN_JOURNAL_FINISHED),
					  sample("other", CRUN_JOURNAL_OPEN)};
	struct crun__journal_run *out;
	char err[256], *text;
	size_t n;

	(void)state;
	in[2].static_ranks = true;
	text = crun__journal_encode(in, 3);
	assert_non_null(text);
	assert_non_null(strstr(text, "\"name\": \"done??\""));
	assert_int_equal(text[strlen(text) - 1], '\n');
	assert_int_equal(crun__journal_decode(text, strlen(text), "f", &out, &n, err, sizeof(err)),
			 0);
	assert_int_equal(n, 3);
	assert_int_equal(out[0].run_id_len, 3);
	assert_memory_equal(out[0].run_id, "job", 3);
	assert_int_equal(out[0].state, CRUN_JOURNAL_RUNNING);
	assert_int_equal(out[0].round, 3);
	assert_int_equal(out[0].restart_count, 2);
	assert_int_equal(out[0].written, 1700000000);
	assert_int_equal(out[0].conf.min_nodes, 2);
	assert_int_equal(out[0].conf.max_nodes, 4);
	assert_int_equal(out[0].conf.last_call_ms, 1500);
	assert_int_equal(out[0].conf.max_restarts, 5);
	assert_true(out[0].conf.has_exclusion);
	assert_int_equal(out[0].conf.blacklist_failures, 2);
	assert_int_equal(out[0].conf.cooldown_max_ms, 8000);
	assert_int_equal(out[0].wait_ms, 15000);
	assert_false(out[0].static_ranks);
	assert_int_equal(out[0].nmembers, 2);
	assert_string_equal(out[0].members[1].node_id, "host-b:2:bb");
	assert_string_equal(out[0].members[1].addr, "10.0.0.2");
	assert_int_equal(out[0].members[1].nproc, 4);
	assert_int_equal(out[0].members[1].node_rank, -1);
	assert_int_equal(out[1].run_id_len, 6);
	assert_memory_equal(out[1].run_id, "done\x01\xff", 6);
	assert_int_equal(out[1].state, CRUN_JOURNAL_FINISHED);
	assert_int_equal(out[1].nmembers, 0);
	assert_true(out[2].static_ranks);
	assert_int_equal(out[2].state, CRUN_JOURNAL_OPEN);
	free_runs(out, n);
	free(text);
}

/* Decodes text, expecting a refusal that says has. */
static void refused(const char *text, size_t len, const char *has)
{
	struct crun__journal_run *out = NULL;
	char err[256];
	size_t n = 7;

	assert_int_equal(crun__journal_decode(text, len, "/state/rdzv-journal.json", &out, &n, err,
					      sizeof(err)),
			 -EPROTO);
	assert_null(out);
	assert_int_equal(n, 0);
	if (strncmp(err, "/state/rdzv-journal.json: ", 26))
		fail_msg("error '%s' does not name the file first", err);
	if (!strstr(err, has))
		fail_msg("error '%s' does not say '%s'", err, has);
}

/* Replaces the first from in text with to (same file otherwise). */
static char *edit(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	char *out;

	assert_non_null(at);
	out = malloc(strlen(text) + strlen(to) + 1);
	assert_non_null(out);
	sprintf(out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	return out;
}

static void test_refused(void **state)
{
	struct crun__journal_run in[2] = {sample("job", CRUN_JOURNAL_RUNNING),
					  sample("b", CRUN_JOURNAL_FAILED)};
	char *text = crun__journal_encode(in, 2), *t;

	(void)state;
	assert_non_null(text);
	/* Cut at every length: never accepted, never a crash. */
	for (size_t len = 0; len < strlen(text) - 2; len++)
		refused(text, len, "");
	refused("", 0, "line 1");
	refused("[]", 2, "not a journal");
	t = edit(text, "\"version\": 1", "\"version\": 2");
	refused(t, strlen(t), "version 2 is not 1");
	free(t);
	t = edit(text, "\"round\": 3", "\"round\": 0");
	refused(t, strlen(t), "run 0: 'round' must be a whole number from 1");
	free(t);
	t = edit(text, "\"state\": \"failed\"", "\"state\": \"gone\"");
	refused(t, strlen(t), "run 1: 'state' must be running, open, finished or failed");
	free(t);
	t = edit(text, "\"nproc\": 4", "\"nproc\": \"4\"");
	refused(t, strlen(t), "run 0, member 1: 'nproc' must be a whole number");
	free(t);
	t = edit(text, "\"host\": \"host-a\"", "\"host\": \"host\\ta\"");
	refused(t, strlen(t), "run 0, member 0: 'host' has a byte that is not printable");
	free(t);
	t = edit(text, "\"run\": \"62\"", "\"run\": \"6a6f62\"");
	refused(t, strlen(t), "run 1: the same run as run 0");
	free(t);
	t = edit(text, "\"run\": \"62\"", "\"run\": \"6G\"");
	refused(t, strlen(t), "run 1: 'run' must be the run id in lower-case hex");
	free(t);
	t = edit(text, "\"min_nodes\": 2", "\"min_nodes\": 9");
	refused(t, strlen(t), "'max_nodes' must be a whole number from 9");
	free(t);
	/* A closed run has no members; a running one has some. */
	in[1].members = two;
	in[1].nmembers = 1;
	t = crun__journal_encode(in, 2);
	refused(t, strlen(t), "run 1: 1 members for a run that is failed");
	free(t);
	free(text);
}

/* ---- the file ------------------------------------------------------------ */

static char dir[64];

static int setup_dir(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/crun-journal-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
	char path[128];

	(void)state;
	snprintf(path, sizeof(path), "%s/%s", dir, CRUN_JOURNAL_FILE);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%s", dir, CRUN_JOURNAL_LOCK);
	unlink(path);
	return rmdir(dir);
}

/* A record with its own memory, for crun__journal_file_put. */
static struct crun__journal_run owned(const char *id, enum crun__journal_state state)
{
	struct crun__journal_run s = sample(id, state), r = s;

	r.run_id = (uint8_t *)strdup(id);
	r.members = NULL;
	r.nmembers = 0;
	if (s.nmembers) {
		r.members = calloc((size_t)s.nmembers, sizeof(*r.members));
		assert_non_null(r.members);
		r.nmembers = s.nmembers;
		for (int i = 0; i < s.nmembers; i++) {
			r.members[i] = s.members[i];
			r.members[i].node_id = strdup(s.members[i].node_id);
			r.members[i].host = strdup(s.members[i].host);
			r.members[i].addr = strdup(s.members[i].addr);
		}
	}
	return r;
}

static void test_file(void **state)
{
	struct crun__journal_file *j;
	struct crun__journal_run r;
	const struct crun__journal_run *got;
	char err[512], path[128], id[16];
	struct stat st;

	(void)state;
	/* A fresh directory: an empty journal, written at once. */
	assert_int_equal(crun__journal_file_open(dir, &j, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, CRUN_JOURNAL_FILE);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	r = owned("job", CRUN_JOURNAL_RUNNING);
	crun__journal_file_put(j, &r);
	r = owned("job", CRUN_JOURNAL_FINISHED);
	r.round = 9;
	crun__journal_file_put(j, &r);
	r = owned("gone", CRUN_JOURNAL_OPEN);
	crun__journal_file_put(j, &r);
	crun__journal_file_drop(j, (const uint8_t *)"gone", 4);
	/* Beyond the bound, the closed runs written first go. */
	for (int i = 0; i < CRUN_JOURNAL_MAX_CLOSED + 5; i++) {
		snprintf(id, sizeof(id), "c%d", i);
		r = owned(id, CRUN_JOURNAL_FAILED);
		crun__journal_file_put(j, &r);
	}
	r = owned("live", CRUN_JOURNAL_RUNNING);
	crun__journal_file_put(j, &r);
	/* Once stopped, nothing changes. */
	crun__journal_file_stop(j);
	crun__journal_file_drop(j, (const uint8_t *)"live", 4);
	crun__journal_file_destroy(j);

	assert_int_equal(crun__journal_file_open(dir, &j, err, sizeof(err)), 0);
	got = crun__journal_file_find(j, (const uint8_t *)"live", 4);
	assert_non_null(got);
	assert_int_equal(got->state, CRUN_JOURNAL_RUNNING);
	assert_int_equal(got->nmembers, 2);
	assert_null(crun__journal_file_find(j, (const uint8_t *)"gone", 4));
	assert_null(crun__journal_file_find(j, (const uint8_t *)"jo", 2));
	/* "job" closed first: dropped with the oldest (same second: any of
	 * them); exactly the bound of closed runs is kept. */
	{
		int closed = 0;

		for (int i = 0; i < CRUN_JOURNAL_MAX_CLOSED + 5; i++) {
			snprintf(id, sizeof(id), "c%d", i);
			if (crun__journal_file_find(j, (const uint8_t *)id, strlen(id)))
				closed++;
		}
		if (crun__journal_file_find(j, (const uint8_t *)"job", 3))
			closed++;
		assert_int_equal(closed, CRUN_JOURNAL_MAX_CLOSED);
	}
	crun__journal_file_destroy(j);

	/* A truncated file is refused, naming it. */
	assert_int_equal(truncate(path, 100), 0);
	assert_int_equal(crun__journal_file_open(dir, &j, err, sizeof(err)), -EPROTO);
	assert_null(j);
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "line"));
}

/* A journal beyond its bounds (written by hand, or by a daemon with other
 * bounds) is cut to them when read: the runs written longest ago go. */
static void test_file_bounds(void **state)
{
	size_t n = CRUN_JOURNAL_MAX_RUNS + 2;
	struct crun__journal_run *runs = calloc(n, sizeof(*runs));
	struct crun__journal_file *j;
	char(*ids)[16] = calloc(n, sizeof(*ids)), err[512], path[128], *text;
	size_t left = 0;

	(void)state;
	assert_non_null(runs);
	assert_non_null(ids);
	for (size_t i = 0; i < n; i++) {
		/* The first MAX_CLOSED + 1 closed, the rest open; the
		 * oldest written first. */
		snprintf(ids[i], sizeof(ids[i]), "r%zu", i);
		runs[i] = sample(ids[i], i <= CRUN_JOURNAL_MAX_CLOSED ? CRUN_JOURNAL_FINISHED
								      : CRUN_JOURNAL_OPEN);
		runs[i].written = 1000 + (int64_t)i;
	}
	text = crun__journal_encode(runs, n);
	assert_non_null(text);
	snprintf(path, sizeof(path), "%s/%s", dir, CRUN_JOURNAL_FILE);
	assert_int_equal(crun__write_atomic(path, text, strlen(text), 0600), 0);
	free(text);
	assert_int_equal(crun__journal_file_open(dir, &j, err, sizeof(err)), 0);
	/* r0, the oldest closed run, goes for the bound of closed runs; r1,
	 * the oldest of the rest, for the bound of runs. */
	assert_null(crun__journal_file_find(j, (const uint8_t *)"r0", 2));
	assert_null(crun__journal_file_find(j, (const uint8_t *)"r1", 2));
	for (size_t i = 2; i < n; i++)
		left += crun__journal_file_find(j, (const uint8_t *)ids[i], strlen(ids[i])) != NULL;
	assert_int_equal(left, CRUN_JOURNAL_MAX_RUNS);
	crun__journal_file_destroy(j);
	free(ids);
	free(runs);
}

/* One journal per directory: while one is open, opening the directory
 * again (as a second daemon would) is refused, naming the holder; once
 * it is closed (the daemon stopped) the directory is free again. */
static void test_lock(void **state)
{
	struct crun__journal_file *j, *k;
	struct crun__journal_run r;
	char err[512], want[256];

	(void)state;
	assert_int_equal(crun__journal_file_open(dir, &j, err, sizeof(err)), 0);
	r = owned("job", CRUN_JOURNAL_RUNNING);
	crun__journal_file_put(j, &r);
	k = (struct crun__journal_file *)1;
	assert_int_equal(crun__journal_file_open(dir, &k, err, sizeof(err)), -EBUSY);
	assert_null(k);
	snprintf(want, sizeof(want), "state directory %s is in use by another crun-rdzvd (pid %ld)",
		 dir, (long)getpid());
	assert_string_equal(err, want);
	crun__journal_file_destroy(j);
	assert_int_equal(crun__journal_file_open(dir, &k, err, sizeof(err)), 0);
	assert_non_null(crun__journal_file_find(k, (const uint8_t *)"job", 3));
	crun__journal_file_destroy(k);
}

static void test_bad_dir(void **state)
{
	struct crun__journal_file *j;
	char err[512], path[128];

	(void)state;
	assert_int_equal(crun__journal_file_open("/nonexistent/crun", &j, err, sizeof(err)),
			 -ENOENT);
	assert_string_equal(err, "--state-dir '/nonexistent/crun': No such file or directory");
	snprintf(path, sizeof(path), "%s/%s", dir, CRUN_JOURNAL_FILE);
	assert_int_equal(crun__write_atomic(path, "x", 1, 0600), 0);
	assert_int_equal(crun__journal_file_open(path, &j, err, sizeof(err)), -ENOTDIR);
	assert_non_null(strstr(err, "not a directory"));
	if (geteuid() != 0) {
		assert_int_equal(unlink(path), 0);
		assert_int_equal(chmod(dir, 0500), 0);
		assert_int_equal(crun__journal_file_open(dir, &j, err, sizeof(err)), -EACCES);
		assert_non_null(strstr(err, "cannot write"));
		assert_int_equal(chmod(dir, 0700), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_refused),
		cmocka_unit_test_setup_teardown(test_file, setup_dir, remove_dir),
		cmocka_unit_test_setup_teardown(test_file_bounds, setup_dir, remove_dir),
		cmocka_unit_test_setup_teardown(test_lock, setup_dir, remove_dir),
		cmocka_unit_test_setup_teardown(test_bad_dir, setup_dir, remove_dir),
	};

	crun__log_init("test_journal", getenv("TEST_VERBOSE") ? CRUN_LOG_DEBUG : CRUN_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
