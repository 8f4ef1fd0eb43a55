/* Unit tests of `crun status`'s pure parts: a node's status document from
 * a filled monitor (src/agent/status.c), the job document gathered from
 * several and its table (src/rendezvous/status_view.c), the closing line,
 * and the job files (src/common/jobfile.c). */
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
#include <jansson.h>

#include "agent/monitor.h"
#include "agent/status.h"
#include "common/jobfile.h"
#include "rendezvous/status_view.h"

#define T0 1700000000000ull

/* A node of a 2-node round: group rank gr, 2 workers (global ranks 2gr,
 * 2gr+1), the first beat 1.5 s before T0 + 10 s at step 40. */
static void fill(struct crun__monitor *m, const char *host, int gr)
{
	assert_int_equal(crun__monitor_init(m, "job7", host, 2, 3, T0), 0);
	snprintf(m->node_id, sizeof(m->node_id), "%s:100:abcd", host);
	m->round = 4;
	m->group_rank = gr;
	m->nnodes = 2;
	m->world_size = 4;
	m->restart_count = 1;
	m->group_state = "running";
	m->members = calloc(2, sizeof(*m->members));
	assert_non_null(m->members);
	m->nmembers = 2;
	for (int i = 0; i < 2; i++) {
		m->members[i].group_rank = i;
		snprintf(m->members[i].node_id, sizeof(m->members[i].node_id), "%s:100:abcd",
			 i ? "node1" : "node0");
		snprintf(m->members[i].host, sizeof(m->members[i].host), "node%d", i);
		snprintf(m->members[i].addr, sizeof(m->members[i].addr), "10.0.0.%d", i + 1);
		m->members[i].local_world_size = 2;
	}
	for (int lr = 0; lr < 2; lr++) {
		struct crun__mon_worker *w = &m->workers[lr];

		w->rank = 2 * gr + lr;
		w->pid = 1000 + w->rank;
		w->state = CRUN_MON_W_RUNNING;
		w->started_ms = T0 + 1000;
	}
	m->workers[0].last_beat_ms = T0 + 10000 - 1500;
	m->workers[0].step = 40;
	m->workers[0].step_s = 0.25;
	m->workers[0].straggler_ratio = 1.1;
}

static void finish(struct crun__monitor *m)
{
	free(m->members);
	m->members = NULL;
	free(m->gpus);
	m->gpus = NULL;
	crun__monitor_finish(m);
}

static const struct crun__status_info info = {
	.node_id = "ignored-when-the-monitor-has-one", .endpoint = "10.0.0.1:29400", .pid = 77};

static void test_doc_fields(void **state)
{
	struct crun__monitor m;
	json_t *doc, *w0, *w1;

	(void)state;
	fill(&m, "node1", 1);
	doc = crun__status_doc(&m, &info, T0 + 10000);
	assert_non_null(doc);
	assert_int_equal(json_integer_value(json_object_get(doc, "version")), 1);
	assert_string_equal(json_string_value(json_object_get(doc, "run_id")), "job7");
	assert_string_equal(json_string_value(json_object_get(doc, "node")), "node1");
	assert_string_equal(json_string_value(json_object_get(doc, "node_id")), "node1:100:abcd");
	assert_string_equal(json_string_value(json_object_get(doc, "endpoint")), "10.0.0.1:29400");
	assert_int_equal(json_integer_value(json_object_get(doc, "pid")), 77);
	assert_int_equal(json_integer_value(json_object_get(doc, "time_ms")), T0 + 10000);
	assert_int_equal(json_integer_value(json_object_get(doc, "round")), 4);
	assert_int_equal(json_integer_value(json_object_get(doc, "group_rank")), 1);
	assert_int_equal(json_integer_value(json_object_get(doc, "world_size")), 4);
	assert_int_equal(json_integer_value(json_object_get(doc, "restart_count")), 1);
	assert_int_equal(json_integer_value(json_object_get(doc, "max_restarts")), 3);
	assert_string_equal(json_string_value(json_object_get(doc, "state")), "running");
	assert_true(json_is_false(json_object_get(doc, "store_lost")));
	assert_true(json_is_null(json_object_get(doc, "exit_status")));
	assert_true(json_is_null(json_object_get(doc, "last_failure")));
	/* Only group rank 0 lists the members. */
	assert_int_equal(json_array_size(json_object_get(doc, "members")), 0);
	w0 = json_array_get(json_object_get(doc, "workers"), 0);
	w1 = json_array_get(json_object_get(doc, "workers"), 1);
	assert_int_equal(json_integer_value(json_object_get(w0, "rank")), 2);
	assert_int_equal(json_integer_value(json_object_get(w0, "pid")), 1002);
	assert_string_equal(json_string_value(json_object_get(w0, "state")), "running");
	assert_int_equal(json_integer_value(json_object_get(w0, "step")), 40);
	assert_int_equal(json_integer_value(json_object_get(w0, "last_beat_ms")), T0 + 8500);
	assert_true(json_real_value(json_object_get(w0, "step_s")) == 0.25);
	/* What is not known is null, not 0. */
	assert_true(json_is_null(json_object_get(w1, "step")));
	assert_true(json_is_null(json_object_get(w1, "last_beat_ms")));
	assert_true(json_is_null(json_object_get(w1, "exit_code")));
	assert_true(json_is_null(json_object_get(w1, "gpu")));
	json_decref(doc);
	finish(&m);
	fill(&m, "node0", 0);
	doc = crun__status_doc(&m, &info, T0 + 10000);
	assert_non_null(doc);
	assert_int_equal(json_array_size(json_object_get(doc, "members")), 2);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(doc, "members"), 1), "addr")),
			    "10.0.0.2");
	json_decref(doc);
	finish(&m);
}

static void test_doc_failure_gpu_and_exit(void **state)
{
	struct crun__monitor m;
	struct crun__mon_gpu g = {.index = 1,
				  .uuid = "GPU-1",
				  .name = "NVIDIA H200",
				  .util = 0.5,
				  .mem_used = 1 << 30,
				  .mem_total = 4ll << 30,
				  .temp_c = -1,
				  .power_w = -1,
				  .sampled_ms = T0};
	json_t *doc, *w0, *fail;

	(void)state;
	fill(&m, "node0", 0);
	m.gpus = malloc(sizeof(g));
	assert_non_null(m.gpus);
	m.gpus[0] = g;
	m.ngpus = 1;
	m.workers[0].gpu = 0;
	m.workers[1].state = CRUN_MON_W_FAILED;
	m.workers[1].exit_code = 3;
	m.exit_status = 1;
	/* A worker's line need not be UTF-8. */
	snprintf(m.last_failure, sizeof(m.last_failure), "rank 1 exited 3: bad \xff byte");
	m.last_failure_ms = T0 + 5;
	doc = crun__status_doc(&m, &info, T0 + 10000);
	assert_non_null(doc);
	w0 = json_array_get(json_object_get(doc, "workers"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(w0, "gpu"), "uuid")),
			    "GPU-1");
	assert_true(json_is_null(json_object_get(json_object_get(w0, "gpu"), "temp_c")));
	assert_int_equal(json_integer_value(json_object_get(
				 json_array_get(json_object_get(doc, "workers"), 1), "exit_code")),
			 3);
	assert_int_equal(json_integer_value(json_object_get(doc, "exit_status")), 1);
	fail = json_object_get(doc, "last_failure");
	assert_string_equal(json_string_value(json_object_get(fail, "line")),
			    "rank 1 exited 3: bad \xef\xbf\xbd byte");
	json_decref(doc);
	finish(&m);
}

/* Node 1 and node 0 publish (in that order); the job has both members,
 * four ranks in order, ages from each node's time. */
static json_t *two_nodes(bool only_first)
{
	struct crun__monitor m0, m1;
	json_t *nodes = json_array();

	fill(&m1, "node1", 1);
	json_array_append_new(nodes, crun__status_doc(&m1, &info, T0 + 10000));
	if (!only_first) {
		fill(&m0, "node0", 0);
		snprintf(m0.last_failure, sizeof(m0.last_failure), "rank 0 hung");
		m0.last_failure_ms = T0 + 7;
		json_array_append_new(nodes, crun__status_doc(&m0, &info, T0 + 9000));
		finish(&m0);
	}
	finish(&m1);
	return nodes;
}

static void test_job(void **state)
{
	json_t *nodes = two_nodes(false), *job, *ranks, *members;

	(void)state;
	job = crun__status_job("job7", "10.0.0.1:29400", nodes, T0 + 11000);
	assert_non_null(job);
	assert_int_equal(json_integer_value(json_object_get(job, "round")), 4);
	assert_int_equal(json_integer_value(json_object_get(job, "restart_count")), 1);
	members = json_object_get(job, "members");
	assert_int_equal(json_array_size(members), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(members, 0), "host")),
			    "node0");
	assert_string_equal(json_string_value(json_object_get(json_array_get(members, 1), "state")),
			    "running");
	ranks = json_object_get(job, "ranks");
	assert_int_equal(json_array_size(ranks), 4);
	for (int r = 0; r < 4; r++)
		assert_int_equal(
			json_integer_value(json_object_get(json_array_get(ranks, r), "rank")), r);
	assert_string_equal(json_string_value(json_object_get(json_array_get(ranks, 3), "node")),
			    "node1");
	/* Rank 2 beat 1.5 s before node1 published, 1 s before we read. */
	assert_true(json_real_value(json_object_get(json_array_get(ranks, 2), "beat_age_s")) ==
		    2.5);
	/* Rank 0 beat 0.5 s before node0 published, 2 s before we read. */
	assert_true(json_real_value(json_object_get(json_array_get(ranks, 0), "beat_age_s")) ==
		    2.5 - 1.0 + 1.0);
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(job, "last_failure"), "node")),
		"node0");
	/* The nodes' own documents, by group rank. */
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(job, "nodes"), 0), "node")),
			    "node0");
	json_decref(job);
	json_decref(nodes);
}

/* Hosts whose clocks differ by an hour: a beat's age counts on its node's
 * clock, and how long ago a node published only within the publishers'
 * period and gap; the newest failure is the one that is youngest on its
 * own node's clock; an exited worker has no beat age. */
static void test_job_clock_skew(void **state)
{
	const uint64_t hour = 3600000;
	struct crun__monitor m0, m1;
	json_t *nodes = json_array(), *job, *ranks, *fail;

	(void)state;
	fill(&m0, "node0", 0);
	fill(&m1, "node1", 1);
	/* node0 is an hour ahead: its beat 1.5 s before it published. */
	m0.workers[0].last_beat_ms += hour;
	snprintf(m0.last_failure, sizeof(m0.last_failure), "rank 0 hung");
	m0.last_failure_ms = T0 + hour + 1000; /* 9 s before node0 published */
	json_array_append_new(nodes, crun__status_doc(&m0, &info, T0 + hour + 10000));
	/* node1 is an hour behind; its rank 3 has exited. */
	m1.workers[0].last_beat_ms -= hour;
	m1.workers[1].state = CRUN_MON_W_SUCCEEDED;
	m1.workers[1].last_beat_ms = T0 + 9000 - hour;
	snprintf(m1.last_failure, sizeof(m1.last_failure), "rank 2 exited 1");
	m1.last_failure_ms = T0 + 9000 - hour; /* 1 s before node1 published */
	json_array_append_new(nodes, crun__status_doc(&m1, &info, T0 + 10000 - hour));
	finish(&m0);
	finish(&m1);
	job = crun__status_job("job7", "e:1", nodes, T0 + 11000);
	assert_non_null(job);
	ranks = json_object_get(job, "ranks");
	/* Ahead: published "in the future" by ours, so 1.5 s and no more. */
	assert_true(json_real_value(json_object_get(json_array_get(ranks, 0), "beat_age_s")) ==
		    1.5);
	/* Behind: an hour old by ours, but at most the lag bound (4 s). */
	assert_true(json_real_value(json_object_get(json_array_get(ranks, 2), "beat_age_s")) ==
		    1.5 + 4.0);
	assert_true(json_is_null(json_object_get(json_array_get(ranks, 3), "beat_age_s")));
	fail = json_object_get(job, "last_failure");
	assert_string_equal(json_string_value(json_object_get(fail, "line")), "rank 2 exited 1");
	json_decref(job);
	json_decref(nodes);
}

/* node1 still publishes round 3 while node0 is in round 4, and node2
 * publishes round 4 without being a member of it: only node0's ranks are
 * the job's, the other two are shown apart. */
static void test_job_old_round(void **state)
{
	struct crun__monitor m0, m1, m2;
	json_t *nodes = json_array(), *job, *ranks, *apart, *members;

	(void)state;
	fill(&m0, "node0", 0);
	fill(&m1, "node1", 1);
	fill(&m2, "node2", 1);
	m1.round = 3;
	m1.group_state = "stopped";
	json_array_append_new(nodes, crun__status_doc(&m1, &info, T0 + 10000));
	json_array_append_new(nodes, crun__status_doc(&m0, &info, T0 + 10000));
	json_array_append_new(nodes, crun__status_doc(&m2, &info, T0 + 10000));
	finish(&m0);
	finish(&m1);
	finish(&m2);
	job = crun__status_job("job7", "e:1", nodes, T0 + 11000);
	assert_non_null(job);
	assert_int_equal(json_integer_value(json_object_get(job, "round")), 4);
	ranks = json_object_get(job, "ranks");
	assert_int_equal(json_array_size(ranks), 2);
	for (size_t r = 0; r < 2; r++)
		assert_string_equal(
			json_string_value(json_object_get(json_array_get(ranks, r), "node")),
			"node0");
	members = json_object_get(job, "members");
	assert_int_equal(json_array_size(members), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(members, 1), "state")),
			    "missing");
	apart = json_object_get(job, "not_in_round");
	assert_int_equal(json_array_size(apart), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(apart, 0), "node")),
			    "node1");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(apart, 0), "round")), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(apart, 1), "node")),
			    "node2");
	{
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);

		assert_non_null(f);
		crun__status_render(f, job);
		fclose(f);
		assert_non_null(strstr(text, "\nnot in the round: node1 (round 3, state stopped)\n"
					     "not in the round: node2 (round 4, state running)\n"));
		free(text);
	}
	json_decref(job);
	json_decref(nodes);
}

static void test_job_missing_member(void **state)
{
	json_t *nodes = two_nodes(true), *job;
	struct crun__monitor m0;

	(void)state;
	/* Only node1 publishes: without group rank 0 the members are the
	 * nodes of the round that publish. */
	job = crun__status_job("job7", "e:1", nodes, T0 + 11000);
	assert_non_null(job);
	assert_int_equal(json_array_size(json_object_get(job, "members")), 1);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(job, "members"), 0), "host")),
			    "node1");
	assert_int_equal(json_array_size(json_object_get(job, "ranks")), 2);
	assert_true(json_is_null(json_object_get(job, "last_failure")));
	json_decref(job);
	json_decref(nodes);
	/* Only node0 publishes: node1 is a member that is missing. */
	nodes = json_array();
	fill(&m0, "node0", 0);
	json_array_append_new(nodes, crun__status_doc(&m0, &info, T0 + 10000));
	finish(&m0);
	job = crun__status_job("job7", "e:1", nodes, T0 + 11000);
	assert_non_null(job);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(job, "members"), 1), "state")),
			    "missing");
	json_decref(job);
	json_decref(nodes);
	assert_null(crun__status_job("x", "e:1", NULL, 0));
}

static void test_render(void **state)
{
	json_t *nodes = two_nodes(false), *job;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	(void)state;
	assert_non_null(f);
	job = crun__status_job("job7", "10.0.0.1:29400", nodes, T0 + 11000);
	crun__status_render(f, job);
	fclose(f);
	assert_non_null(strstr(text, "run job7  store 10.0.0.1:29400  round 4  restarts 1/3  "
				     "state running\n"));
	assert_non_null(strstr(text, "\n1      node1                    10.0.0.2               2   "
				     "   running\n"));
	assert_non_null(strstr(text, "\n2      node1                    0      1002     running    "
				     "2.5s    40       -\n"));
	assert_non_null(strstr(text, "\n3      node1                    1      1003     running    "
				     "-       -        -\n"));
	assert_non_null(strstr(text, "\nlast failure (node0): rank 0 hung\n"));
	free(text);
	json_decref(job);
	json_decref(nodes);
}

static void test_closing_line(void **state)
{
	char buf[600];

	(void)state;
	crun__status_closing_line(buf, sizeof(buf), "r1", 0, NULL, 0, 3.21);
	assert_string_equal(buf, "run 'r1' ended: succeeded (0 restarts, 3.2s)");
	crun__status_closing_line(buf, sizeof(buf), "r1", 1,
				  "rank 1 (local_rank 1) on host-a exited "
				  "with code 3",
				  2, 10);
	assert_string_equal(buf, "run 'r1' ended: failed: rank 1 (local_rank 1) on host-a exited "
				 "with code 3 (2 restarts, 10.0s)");
	crun__status_closing_line(buf, sizeof(buf), "r1", 1, NULL, 1, 1);
	assert_string_equal(buf, "run 'r1' ended: failed: exit status 1 (1 restart, 1.0s)");
	crun__status_closing_line(buf, sizeof(buf), "r1", 130, NULL, 0, 1);
	assert_string_equal(buf, "run 'r1' ended: stopped by SIGINT (0 restarts, 1.0s)");
	crun__status_closing_line(buf, sizeof(buf), "r1", 127, NULL, 0, 0);
	assert_string_equal(buf, "run 'r1' ended: exit status 127 (0 restarts, 0.0s)");
}

static void test_jobfile_paths(void **state)
{
	char p[256];

	(void)state;
	assert_int_equal(crun__jobfile_dir(p, sizeof(p), "/run/user/5", 5), 0);
	assert_string_equal(p, "/run/user/5/crun");
	assert_int_equal(crun__jobfile_dir(p, sizeof(p), NULL, 5), 0);
	assert_string_equal(p, "/tmp/crun-5");
	assert_int_equal(crun__jobfile_dir(p, sizeof(p), "relative", 5), 0);
	assert_string_equal(p, "/tmp/crun-5");
	assert_int_equal(crun__jobfile_path(p, sizeof(p), "/d", "jobs", "a-b_c.9", 12, "json"), 0);
	assert_string_equal(p, "/d/jobs/a-b_c.9.12.json");
	assert_int_equal(crun__jobfile_path(p, sizeof(p), "/d", "jobs", "../x y/%", 3, "json"), 0);
	assert_string_equal(p, "/d/jobs/%2E.%2Fx%20y%2F%25.3.json");
	assert_int_equal(crun__jobfile_path(p, 14, "/d", "jobs", "abcdef", 1, "json"),
			 -ENAMETOOLONG);
}

static void test_jobfile_files(void **state)
{
	char dir[64] = "/tmp/test-status-XXXXXX", path[512];
	struct crun__jobfile jf = {.pid = (long)getpid(), .started_ms = 5}, back, *list;
	struct crun__jobfile dead = {.pid = 0x3ffffff0}, reused = {.pid = (long)getpid() - 1};
	int lock;
	char *text;
	size_t n;
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(dir));
	strcat(dir, "/crun");
	snprintf(jf.run_id, sizeof(jf.run_id), "run/1");
	snprintf(jf.endpoint, sizeof(jf.endpoint), "127.0.0.1:5");
	snprintf(jf.node, sizeof(jf.node), "vm");
	text = crun__jobfile_format(&jf);
	assert_int_equal(crun__jobfile_parse(text, strlen(text), &back), 0);
	assert_string_equal(back.run_id, "run/1");
	assert_string_equal(back.token_file, "");
	assert_int_equal(back.pid, jf.pid);
	free(text);
	assert_int_equal(crun__jobfile_parse("{\"run_id\":\"x\"}", 14, &back), -EINVAL);
	assert_int_equal(crun__jobfile_parse("nope", 4, &back), -EINVAL);

	assert_int_equal(crun__jobfile_list(dir, &list, &n), -ENOENT);
	assert_int_equal(crun__jobfile_prepare(dir, "jobs"), 0);
	assert_int_equal(crun__jobfile_prepare(dir, "tokens"), 0);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(crun__jobfile_write(dir, &jf, &lock), 0);
	assert_true(lock >= 0);
	assert_int_equal(
		crun__jobfile_write_token(dir, "run/1", jf.pid, "secret", 6, path, sizeof(path)),
		0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* A job whose agent is gone is removed when listed. */
	dead.started_ms = 1;
	snprintf(dead.run_id, sizeof(dead.run_id), "dead");
	snprintf(dead.endpoint, sizeof(dead.endpoint), "127.0.0.1:6");
	assert_int_equal(crun__jobfile_write(dir, &dead, NULL), 0);
	/* So is one whose pid runs another process now (this one): its
	 * agent's lock is gone. */
	snprintf(reused.run_id, sizeof(reused.run_id), "reused");
	snprintf(reused.endpoint, sizeof(reused.endpoint), "127.0.0.1:7");
	assert_int_equal(crun__jobfile_write(dir, &reused, NULL), 0);
	assert_int_equal(crun__jobfile_list(dir, &list, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].run_id, "run/1");
	free(list);
	assert_int_equal(
		crun__jobfile_path(path, sizeof(path), dir, "jobs", "dead", dead.pid, "json"), 0);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(
		crun__jobfile_path(path, sizeof(path), dir, "jobs", "reused", reused.pid, "json"),
		0);
	assert_int_equal(access(path, F_OK), -1);
	close(lock);

	crun__jobfile_remove(dir, "run/1", jf.pid);
	assert_int_equal(crun__jobfile_list(dir, &list, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(
		crun__jobfile_path(path, sizeof(path), dir, "tokens", "run/1", jf.pid, "token"), 0);
	assert_int_equal(access(path, F_OK), -1);
	/* Someone else's access refuses the directory. */
	assert_int_equal(chmod(dir, 0755), 0);
	assert_int_equal(crun__jobfile_prepare(dir, "jobs"), -EPERM);
	snprintf(path, sizeof(path), "%s/jobs", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/tokens", dir);
	rmdir(path);
	rmdir(dir);
	*strrchr(dir, '/') = '\0';
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_doc_fields),
		cmocka_unit_test(test_doc_failure_gpu_and_exit),
		cmocka_unit_test(test_job),
		cmocka_unit_test(test_job_clock_skew),
		cmocka_unit_test(test_job_old_round),
		cmocka_unit_test(test_job_missing_member),
		cmocka_unit_test(test_render),
		cmocka_unit_test(test_closing_line),
		cmocka_unit_test(test_jobfile_paths),
		cmocka_unit_test(test_jobfile_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
