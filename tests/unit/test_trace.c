/* Unit tests of crun-train's step timeline: the recorder (bounds, JSON
 * escaping, the file and its name) and what the schedule records into it
 * on the cpu device, timed by the host's clock or by a device's stamps.
 * The files are parsed back with jansson. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "trainer/comm.h"
#include "trainer/device.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/parallel.h"
#include "trainer/trace.h"

static char tmpdir[] = "/tmp/crun-test-trace-XXXXXX";

static const struct crun__optim optim = {
	.lr = 1e-3,
	.beta1 = 0.9,
	.beta2 = 0.95,
	.eps = 1e-8,
	.weight_decay = 0.1,
	.grad_clip = 1.0,
};

static json_t *parse_trace(const struct crun__trace *t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_error_t e;
	json_t *doc;

	assert_non_null(f);
	assert_int_equal(crun__trace_write(t, f), 0);
	fclose(f);
	doc = json_loadb(buf, len, 0, &e);
	if (!doc)
		fail_msg("not JSON: %s at line %d: %s", e.text, e.line, buf);
	free(buf);
	return doc;
}

/* The "X" events of a parsed trace named name (NULL: all). */
static size_t count_x(json_t *doc, const char *name)
{
	json_t *evs = json_object_get(doc, "traceEvents"), *ev;
	size_t i, n = 0;

	json_array_foreach(evs, i, ev)
	{
		if (strcmp(json_string_value(json_object_get(ev, "ph")), "X"))
			continue;
		if (!name || !strcmp(json_string_value(json_object_get(ev, "name")), name))
			n++;
	}
	return n;
}

static void test_path(void **state)
{
	char out[64];

	(void)state;
	assert_int_equal(crun__trace_path("t.json", 0, 1, out, sizeof(out)), 0);
	assert_string_equal(out, "t.json");
	assert_int_equal(crun__trace_path("t.json", 3, 4, out, sizeof(out)), 0);
	assert_string_equal(out, "t.json.rank3");
	assert_int_equal(crun__trace_path("run/{rank}/t-{rank}.json", 12, 16, out, sizeof(out)), 0);
	assert_string_equal(out, "run/12/t-12.json");
	assert_int_equal(crun__trace_path("{rank}", 0, 1, out, sizeof(out)), 0);
	assert_string_equal(out, "0");
	assert_int_equal(crun__trace_path("0123456789", 1, 2, out, 12), -ENAMETOOLONG);
	assert_int_equal(crun__trace_path("0123456789{rank}", 10, 2, out, 12), -ENAMETOOLONG);
	assert_int_equal(crun__trace_path("0123456789{rank}", 1, 2, out, 12), 0);
	assert_string_equal(out, "01234567891");
}

static void test_escaping(void **state)
{
	static const char nasty[] = "a\"b\\c\nd\te\x01\x1f\x7f caf\xc3\xa9";
	struct crun__trace *t = crun__trace_create(5, 8, 4);
	struct crun__trace_event ev = {.name = "quote\"name",
				       .track = CRUN__TRACK_CHECKPOINT,
				       .ts_us = 10,
				       .dur_us = 2,
				       .step = 3,
				       .unit = -1,
				       .text = (char *)nasty};
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_t *doc, *x = NULL, *evs, *e;
	size_t i;

	(void)state;
	assert_int_equal(crun__trace_json_string(f, nasty), 0);
	fclose(f);
	assert_string_equal(buf, "\"a\\\"b\\\\c\\nd\\te\\u0001\\u001F\x7f caf\xc3\xa9\"");
	free(buf);

	assert_non_null(t);
	assert_int_equal(crun__trace_add(t, &ev), 0);
	doc = parse_trace(t);
	evs = json_object_get(doc, "traceEvents");
	json_array_foreach(evs, i, e)
	{
		if (!strcmp(json_string_value(json_object_get(e, "ph")), "X"))
			x = e;
		/* every event is the rank's */
		assert_int_equal(json_integer_value(json_object_get(e, "pid")), 5);
	}
	assert_non_null(x);
	assert_string_equal(json_string_value(json_object_get(x, "name")), "quote\"name");
	assert_string_equal(json_string_value(json_object_get(x, "cat")), "checkpoint");
	assert_int_equal(json_integer_value(json_object_get(x, "tid")), CRUN__TRACK_CHECKPOINT);
	assert_string_equal(json_string_value(json_object_get(json_object_get(x, "args"), "text")),
			    nasty);
	assert_null(json_object_get(json_object_get(x, "args"), "unit"));
	assert_string_equal(json_string_value(json_object_get(doc, "displayTimeUnit")), "ms");
	json_decref(doc);
	crun__trace_destroy(t);
}

/* A checkpoint directory named in Latin-1, and a name cut inside a
 * character: the trace stays UTF-8 JSON (scripts/trace-merge reads it). */
static void test_not_utf8(void **state)
{
	struct crun__trace *t = crun__trace_create(0, 1, 4);
	struct crun__trace_event ev = {.name = "save caf\xc3",
				       .track = CRUN__TRACK_CHECKPOINT,
				       .step = 1,
				       .unit = -1,
				       .text = "/ckpt/r\xe9sum\xe9/"};
	json_t *doc, *evs, *e, *x = NULL;
	size_t i;

	(void)state;
	assert_non_null(t);
	assert_int_equal(crun__trace_add(t, &ev), 0);
	doc = parse_trace(t);
	evs = json_object_get(doc, "traceEvents");
	json_array_foreach(evs, i, e)
	{
		if (!strcmp(json_string_value(json_object_get(e, "ph")), "X"))
			x = e;
	}
	assert_non_null(x);
	assert_string_equal(json_string_value(json_object_get(x, "name")), "save caf");
	assert_string_equal(json_string_value(json_object_get(json_object_get(x, "args"), "text")),
			    "/ckpt/r\xef\xbf\xbdsum\xef\xbf\xbd/");
	json_decref(doc);
	crun__trace_destroy(t);
}

static void test_bounds(void **state)
{
	struct crun__trace *t = crun__trace_create(1, 2, 3);
	struct crun__trace_event ev = {
		.name = "forward", .track = CRUN__TRACK_COMPUTE, .dur_us = 5, .unit = 2};
	char path[256];
	json_t *doc, *other;
	json_error_t e;

	(void)state;
	assert_non_null(t);
	/* an empty recorder is a valid trace too */
	doc = parse_trace(t);
	assert_int_equal(count_x(doc, NULL), 0);
	json_decref(doc);
	for (int i = 0; i < 5; i++) {
		ev.ts_us = 100 * i;
		assert_int_equal(crun__trace_add(t, &ev), i < 3 ? 0 : -ENOSPC);
	}
	assert_int_equal(crun__trace_count(t), 3);
	assert_int_equal(crun__trace_dropped(t), 2);

	snprintf(path, sizeof(path), "%s/t.json", tmpdir);
	assert_int_equal(crun__trace_save(t, path), 0);
	doc = json_load_file(path, 0, &e);
	assert_non_null(doc);
	assert_int_equal(count_x(doc, "forward"), 3);
	other = json_object_get(doc, "otherData");
	assert_int_equal(json_integer_value(json_object_get(other, "dropped")), 2);
	assert_int_equal(json_integer_value(json_object_get(other, "rank")), 1);
	assert_int_equal(json_integer_value(json_object_get(other, "world_size")), 2);
	json_decref(doc);
	unlink(path);
	snprintf(path, sizeof(path), "%s/no/such/dir/t.json", tmpdir);
	assert_int_equal(crun__trace_save(t, path), -ENOENT);
	crun__trace_destroy(t);
	crun__trace_destroy(NULL);

	/* memory grows with the events, up to the capacity */
	t = crun__trace_create(0, 1, 1000);
	assert_non_null(t);
	for (int i = 0; i < 1200; i++) {
		ev.ts_us = i;
		assert_int_equal(crun__trace_add(t, &ev), i < 1000 ? 0 : -ENOSPC);
	}
	doc = parse_trace(t);
	assert_int_equal(count_x(doc, "forward"), 1000);
	json_decref(doc);
	crun__trace_destroy(t);
}

static struct crun__comm *single_comm(void)
{
	struct crun__comm_opts o;
	char err[256];
	struct crun__comm *c;

	memset(&o, 0, sizeof(o));
	o.backend = "cpu";
	o.world_size = 1;
	c = crun__comm_create(&o, err, sizeof(err));
	assert_non_null(c);
	return c;
}

/* A device with stamps: the cpu device whose stamp k of a step is at
 * 1000 + 10 k microseconds. */
static int stamps_given;

static int fake_stamp(struct crun__device *d, enum crun__queue q)
{
	(void)d;
	(void)q;
	return stamps_given++;
}

static void fake_stamp_times(struct crun__device *d, int64_t *us, int n)
{
	(void)d;
	assert_int_equal(n, stamps_given);
	for (int i = 0; i < n; i++)
		us[i] = 1000 + 10 * i;
	stamps_given = 0;
}

/* One traced step of strategy st (grad_accum accum) on the cpu device, or
 * on the stamping one; checks what it recorded. */
static void traced_step(enum crun__strategy st, int accum, bool stamped)
{
	struct crun__comm *comm = single_comm();
	struct crun__model_config mc = {8, 4, 16, 2, 4, 0.3f};
	char err[256];
	struct crun__model *m = crun__model_create(&mc, err, sizeof(err));
	struct crun__parallel_opts po = {st, accum, 8 / accum, 1 << 20};
	struct crun__parallel *host;
	struct crun__device_ops ops = crun__device_cpu_ops;
	struct crun__device *d;
	struct crun__trace *t;
	uint8_t tokens[8 * 9];
	int64_t before, after;
	double loss, gnorm;
	json_t *doc, *evs, *ev;
	size_t i, units;

	assert_non_null(m);
	units = (size_t)m->n_units;
	memset(tokens, 3, sizeof(tokens));
	host = crun__parallel_create_storage(m, comm, &po);
	assert_non_null(host);
	if (stamped) {
		ops.stamp = fake_stamp;
		ops.stamp_times = fake_stamp_times;
	}
	d = crun__device_open(&ops, NULL, err, sizeof(err));
	assert_non_null(d);
	assert_int_equal(crun__device_attach(d, m, host, comm, err, sizeof(err)), 0);
	crun__parallel_init_params(host, 1);
	t = crun__trace_create(0, 1, 64 * crun__schedule_trace_events(d));
	assert_non_null(t);

	/* not armed: nothing */
	assert_int_equal(crun__schedule_step(d, &optim, tokens, 8, 1, 1e-3, &loss, &gnorm), 0);
	assert_int_equal(crun__trace_count(t), 0);
	assert_int_equal(crun__schedule_trace(d, t, 2), 0);
	before = crun__trace_now_us();
	assert_int_equal(crun__schedule_step(d, &optim, tokens, 8, 2, 1e-3, &loss, &gnorm), 0);
	after = crun__trace_now_us();
	/* armed for that step only */
	assert_int_equal(crun__schedule_step(d, &optim, tokens, 8, 3, 1e-3, &loss, &gnorm), 0);
	assert_int_equal(crun__schedule_forward(d, tokens, 4, &loss), 0);
	assert_int_equal(stamps_given, 0);
	assert_true(crun__trace_count(t) <= crun__schedule_trace_events(d));
	assert_int_equal(crun__trace_dropped(t), 0);

	doc = parse_trace(t);
	assert_int_equal(count_x(doc, "forward"), units * (size_t)accum);
	assert_int_equal(count_x(doc, "backward"), units * (size_t)accum);
	assert_int_equal(count_x(doc, "grad norm"), 1);
	assert_int_equal(count_x(doc, "adamw"), 1);
	assert_int_equal(count_x(doc, "all-reduce loss"), 1);
	assert_int_equal(count_x(doc, "step"), 1);
	if (st == CRUN_STRATEGY_DDP) {
		assert_int_equal(count_x(doc, "all-reduce"), 1); /* one bucket */
		assert_int_equal(count_x(doc, "all-gather"), 0);
	} else {
		assert_int_equal(count_x(doc, "reduce-scatter"),
				 (size_t)crun__parallel_n_segments(host));
		assert_int_equal(count_x(doc, "all-reduce grad norm"), 1);
		/* zero3 gathers each unit before forward and backward (one
		 * buffer on the cpu) */
		if (st == CRUN_STRATEGY_ZERO3)
			assert_true(count_x(doc, "all-gather") >= units);
		else /* the updated chunks, per segment */
			assert_int_equal(count_x(doc, "all-gather"),
					 (size_t)crun__parallel_n_segments(host));
	}
	evs = json_object_get(doc, "traceEvents");
	json_array_foreach(evs, i, ev)
	{
		json_t *args = json_object_get(ev, "args");
		const char *name = json_string_value(json_object_get(ev, "name"));
		const char *cat = json_string_value(json_object_get(ev, "cat"));
		int64_t ts, dur;

		if (strcmp(json_string_value(json_object_get(ev, "ph")), "X"))
			continue;
		ts = json_integer_value(json_object_get(ev, "ts"));
		dur = json_integer_value(json_object_get(ev, "dur"));
		assert_int_equal(json_integer_value(json_object_get(args, "step")), 2);
		assert_true(dur >= 0);
		if (!strcmp(name, "forward") || !strcmp(name, "backward")) {
			assert_string_equal(cat, "compute");
			assert_true(json_integer_value(json_object_get(args, "unit")) <
				    (json_int_t)units);
		}
		if (!strncmp(name, "all-", 4) || !strcmp(name, "reduce-scatter")) {
			assert_string_equal(cat, "comm");
			assert_true(json_integer_value(json_object_get(args, "bytes")) > 0);
		}
		if (stamped && strcmp(name, "step") && strcmp(name, "all-reduce loss")) {
			/* on the device's clock: stamps 2k and 2k+1 */
			assert_int_equal((ts - 1000) % 20, 0);
			assert_int_equal(dur, 10);
		} else {
			assert_true(ts >= before && ts + dur <= after);
		}
	}
	json_decref(doc);
	crun__trace_destroy(t);
	crun__device_close(d);
	crun__parallel_destroy(host);
	crun__model_destroy(m);
	crun__comm_destroy(comm);
}

static void test_schedule_ddp(void **state)
{
	(void)state;
	traced_step(CRUN_STRATEGY_DDP, 1, false);
}

static void test_schedule_zero3_accum(void **state)
{
	(void)state;
	traced_step(CRUN_STRATEGY_ZERO3, 2, false);
}

static void test_schedule_stamped(void **state)
{
	(void)state;
	traced_step(CRUN_STRATEGY_DDP, 1, true);
	traced_step(CRUN_STRATEGY_ZERO2, 1, true);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_not_utf8),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_schedule_ddp),
		cmocka_unit_test(test_schedule_zero3_accum),
		cmocka_unit_test(test_schedule_stamped),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
