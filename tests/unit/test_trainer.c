/* Unit tests of crun-train: config, model gradients, data and sampler,
 * optimizer, the strategies on one rank, and checkpoints. Tests that need
 * several ranks are integration tests (tests/integration/train-*.sh). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>
#include <cmocka.h>

#include "common/util.h"
#include "trainer/checkpoint.h"
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/device.h"
#include "trainer/hostmem.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/parallel.h"
#include "trainer/rng.h"

static char tmpdir[] = "/tmp/crun-test-trainer-XXXXXX";

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int load_text(const char *text, struct crun__train_config *cfg, char *err, size_t len)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/c.yaml", tmpdir);
	write_file(path, text);
	return crun__train_config_load(cfg, path, err, len);
}

static void test_config_defaults_roundtrip(void **state)
{
	struct crun__train_config a, b;
	char *ta = NULL, *tb = NULL, path[256], err[512];
	size_t la, lb;
	FILE *f;

	(void)state;
	assert_int_equal(crun__train_config_init(&a), 0);
	assert_int_equal(a.model.context, 32);
	assert_string_equal(a.parallel.strategy, "ddp");
	assert_string_equal(a.data.path, "");
	assert_true(a.checkpoint.resume);
	assert_true(fabs(a.optim.lr - 0.003) < 1e-12);

	assert_int_equal(crun__train_config_set(&a, "model.width=64", err, sizeof(err)), 0);
	assert_int_equal(crun__train_config_set(&a, "data.path=some file.txt", err, sizeof(err)),
			 0);
	assert_int_equal(crun__train_config_set(&a, "optim.lr=1e-4", err, sizeof(err)), 0);
	assert_int_equal(crun__train_config_set(&a, "parallel.strategy=fsdp", err, sizeof(err)), 0);
	assert_int_equal(crun__train_config_set(&a, "checkpoint.resume=no", err, sizeof(err)), 0);
	f = open_memstream(&ta, &la);
	crun__train_config_print(&a, f);
	fclose(f);

	snprintf(path, sizeof(path), "%s/p.yaml", tmpdir);
	write_file(path, ta);
	assert_int_equal(crun__train_config_init(&b), 0);
	assert_int_equal(crun__train_config_load(&b, path, err, sizeof(err)), 0);
	f = open_memstream(&tb, &lb);
	crun__train_config_print(&b, f);
	fclose(f);
	assert_string_equal(ta, tb);
	assert_int_equal(b.model.width, 64);
	assert_string_equal(b.data.path, "some file.txt");
	assert_false(b.checkpoint.resume);
	free(ta);
	free(tb);
	crun__train_config_finish(&a);
	crun__train_config_finish(&b);
}

static void expect_error(const char *yaml, const char *want)
{
	struct crun__train_config cfg;
	char err[512], full[600];

	assert_int_equal(crun__train_config_init(&cfg), 0);
	assert_int_equal(load_text(yaml, &cfg, err, sizeof(err)), -EINVAL);
	snprintf(full, sizeof(full), "config '%s/c.yaml' %s", tmpdir, want);
	if (strncmp(err, full, strlen(full)))
		fail_msg("got \"%s\", want prefix \"%s\"", err, full);
	crun__train_config_finish(&cfg);
}

static void test_config_errors(void **state)
{
	struct crun__train_config cfg;
	char err[512];

	(void)state;
	expect_error("model:\n  context: 8\n  # a comment\n  widht: 3\n",
		     "line 4: unknown key 'model.widht'");
	expect_error("model:\n  width: abc\n",
		     "line 2: key 'model.width' expects an integer from 1 to 65536, got 'abc'");
	expect_error("model:\n  width: 0\n", "line 2: key 'model.width' expects an integer");
	expect_error("optim:\n  lr: [1, 2]\n", "line 2: key 'optim.lr' expects a number");
	expect_error("optim:\n  lr: 0\n", "line 2: key 'optim.lr' expects a number above 0");
	expect_error("parallel:\n  strategy: zero4\n",
		     "line 2: key 'parallel.strategy' expects one of ddp|zero1|zero2|zero3|fsdp");
	expect_error("checkpoint:\n  resume: maybe\n",
		     "line 2: key 'checkpoint.resume' expects true or false");
	expect_error("train:\n  steps: 3\n  steps: 4\n", "line 3: duplicate key 'train.steps'");
	expect_error("modle:\n  width: 3\n", "line 1: unknown key 'modle'");
	expect_error("model: 3\n", "line 1: section 'model' must be a mapping");
	expect_error("- a\n- b\n", "line 1: expected a mapping of sections");
	expect_error("model:\n  width: [1\n", "line ");

	/* nothing, or only comments: an error, not "every default" */
	expect_error("", "is empty");
	expect_error("# model:\n#   width: 64\n\n", "is empty");
	expect_error("---\n", "is empty");
	expect_error("Null\n", "line 1: expected a mapping of sections");

	assert_int_equal(crun__train_config_init(&cfg), 0);
	assert_int_equal(load_text("model:\nlog:\n  every: 5\n", &cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg.log.every, 5);
	assert_int_equal(crun__train_config_set(&cfg, "model.widht=3", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "--set 'model.widht=3': unknown key 'model.widht'");
	assert_int_equal(crun__train_config_set(&cfg, "steps=3", err, sizeof(err)), -EINVAL);
	assert_int_equal(crun__train_config_set(&cfg, "train.steps=x", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "key 'train.steps' expects an integer"));
	assert_int_equal(crun__train_config_set(&cfg, "parallel.timeout=2s", err, sizeof(err)), 0);
	assert_int_equal(cfg.parallel.timeout_ms, 2000);

	assert_int_equal(crun__train_config_check(&cfg, 4, err, sizeof(err)), 0);
	assert_int_equal(crun__train_config_set(&cfg, "parallel.grad_accum=3", err, sizeof(err)),
			 0);
	assert_int_equal(crun__train_config_check(&cfg, 4, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "train.batch_size 64 does not split evenly"));
	crun__train_config_finish(&cfg);

	assert_int_equal(crun__train_config_load(&cfg, "/nonexistent/x.yaml", err, sizeof(err)),
			 -ENOENT);
}

/* The YAML the config reader shares with crun -c: the core schema's nulls,
 * aliases, one document, files that are not files. */
static void test_config_yaml(void **state)
{
	struct crun__train_config cfg;
	char err[512], want[512];

	(void)state;
	assert_int_equal(crun__train_config_init(&cfg), 0);
	assert_int_equal(load_text("data:\n  path: Null\nlog:\n  csv: ~\nmodel: NULL\n", &cfg, err,
				   sizeof(err)),
			 0);
	assert_string_equal(cfg.data.path, "");
	assert_string_equal(cfg.log.csv, "");
	assert_int_equal(load_text("data:\n  path: 'Null'\n", &cfg, err, sizeof(err)), 0);
	assert_string_equal(cfg.data.path, "Null");
	assert_int_equal(
		load_text("model:\n  width: &w 96\n  embed_dim: *w\n", &cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg.model.embed_dim, 96);
	crun__train_config_finish(&cfg);

	expect_error("model:\n  width: NULL\n", "line 2: key 'model.width' expects an integer");
	expect_error("model:\n  width: 3\n---\nmodel:\n  width: 4\n",
		     "line 3: only one YAML document is allowed");
	expect_error("model:\n  width: *w\n", "line 2: undefined alias 'w'");

	assert_int_equal(crun__train_config_init(&cfg), 0);
	assert_int_equal(crun__train_config_load(&cfg, tmpdir, err, sizeof(err)), -EISDIR);
	snprintf(want, sizeof(want), "config '%s' is a directory, not a file", tmpdir);
	assert_string_equal(err, want);
	assert_int_equal(crun__train_config_load(&cfg, "/dev/null", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "cannot read config '/dev/null': not a regular file");
	crun__train_config_finish(&cfg);
}

/* The working directory before a test that changes it, given back after
 * it whether it passed or not. */
static int save_cwd(void **state)
{
	static char cwd[4096];

	*state = getcwd(cwd, sizeof(cwd));
	return *state ? 0 : -1;
}

static int restore_cwd(void **state)
{
	return chdir(*state);
}

/* Where a config argument is found: as given, else in the data
 * directories' configs/ and themselves, in order. */
static void test_config_find(void **state)
{
	char d1[300], d2[300], path[400], out[512], want[2048], err[2048];
	const char *dirs[] = {d1, d2, NULL}, *none[] = {NULL};
	bool elsewhere;

	(void)state;
	snprintf(d1, sizeof(d1), "%s/find1", tmpdir);
	snprintf(d2, sizeof(d2), "%s/find2", tmpdir);
	snprintf(path, sizeof(path), "%s/configs", d1);
	assert_int_equal(mkdir(d1, 0700), 0);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(mkdir(d2, 0700), 0);
	snprintf(path, sizeof(path), "%s/configs/a.yaml", d1);
	write_file(path, "model:\n");
	snprintf(path, sizeof(path), "%s/b.yaml", d2);
	write_file(path, "model:\n");
	snprintf(path, sizeof(path), "%s/configs", d2);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/configs/a.yaml", d2); /* second: never taken */
	write_file(path, "model:\n");
	snprintf(path, sizeof(path), "%s/work", tmpdir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(chdir(path), 0);
	write_file("here.yaml", "model:\n");
	assert_int_equal(mkdir("b.yaml", 0700), 0); /* exists: taken as given */

	/* as given, relative or absolute */
	assert_int_equal(crun__train_config_find("here.yaml", dirs, out, sizeof(out), &elsewhere,
						 err, sizeof(err)),
			 0);
	assert_string_equal(out, "here.yaml");
	assert_false(elsewhere);
	assert_int_equal(crun__train_config_find("b.yaml", dirs, out, sizeof(out), &elsewhere, err,
						 sizeof(err)),
			 0);
	assert_string_equal(out, "b.yaml");
	assert_int_equal(crun__train_config_find("/nonexistent/a.yaml", dirs, out, sizeof(out),
						 &elsewhere, err, sizeof(err)),
			 0);
	assert_string_equal(out, "/nonexistent/a.yaml");
	assert_false(elsewhere);

	/* a bare name and configs/NAME both find DIR/configs/NAME, the first
	 * directory first; DIR/NAME after DIR/configs/NAME */
	snprintf(want, sizeof(want), "%s/configs/a.yaml", d1);
	assert_int_equal(crun__train_config_find("a.yaml", dirs, out, sizeof(out), &elsewhere, err,
						 sizeof(err)),
			 0);
	assert_string_equal(out, want);
	assert_true(elsewhere);
	assert_int_equal(crun__train_config_find("configs/a.yaml", dirs, out, sizeof(out),
						 &elsewhere, err, sizeof(err)),
			 0);
	assert_string_equal(out, want);
	/* a name with a ".." component stays as given: no data directory's
	 * neighbours */
	assert_int_equal(crun__train_config_find("../b.yaml", dirs, out, sizeof(out), &elsewhere,
						 err, sizeof(err)),
			 0);
	assert_string_equal(out, "../b.yaml");
	assert_false(elsewhere);
	assert_int_equal(crun__train_config_find("configs/../b.yaml", dirs, out, sizeof(out),
						 &elsewhere, err, sizeof(err)),
			 0);
	assert_string_equal(out, "configs/../b.yaml");
	assert_false(elsewhere);
	/* "..." and "..x" are names, not ".." */
	snprintf(path, sizeof(path), "%s/configs/..x.yaml", d2);
	write_file(path, "model:\n");
	snprintf(want, sizeof(want), "%s/configs/..x.yaml", d2);
	assert_int_equal(crun__train_config_find("..x.yaml", dirs, out, sizeof(out), &elsewhere,
						 err, sizeof(err)),
			 0);
	assert_string_equal(out, want);
	assert_true(elsewhere);

	/* nowhere: every place searched, in order */
	assert_int_equal(crun__train_config_find("c.yaml", dirs, out, sizeof(out), &elsewhere, err,
						 sizeof(err)),
			 -ENOENT);
	snprintf(want, sizeof(want),
		 "cannot read config 'c.yaml': not in the working directory, '%s/configs', '%s', "
		 "'%s/configs' or '%s'",
		 d1, d1, d2, d2);
	assert_string_equal(err, want);
	/* more places than the message holds: whole ones, then ", …" */
	{
		char long_dir[200];
		const char *many[] = {long_dir, long_dir, long_dir, long_dir, long_dir, NULL};
		const char *tail;

		memset(long_dir, 'd', sizeof(long_dir) - 1);
		long_dir[0] = '/';
		long_dir[sizeof(long_dir) - 1] = '\0';
		assert_int_equal(crun__train_config_find("c.yaml", many, out, sizeof(out),
							 &elsewhere, err, sizeof(err)),
				 -ENOENT);
		assert_true(strlen(err) < 1100);
		tail = err + strlen(err) - strlen("d', …");
		assert_string_equal(tail, "d', …");
		assert_null(strstr(err, " or "));
	}
	/* no data directories: as given, for the load to say it is missing */
	assert_int_equal(crun__train_config_find("c.yaml", none, out, sizeof(out), &elsewhere, err,
						 sizeof(err)),
			 0);
	assert_string_equal(out, "c.yaml");
}

/* The line of a run that does not fit in host memory: the bytes needed,
 * in all and per kind, and what bounds the bytes available. */
static void test_host_oom_message(void **state)
{
	const uint64_t GiB = UINT64_C(1) << 30, MiB = UINT64_C(1) << 20;
	struct crun__host_need need = {
		.param_bytes = GiB,
		.grad_bytes = GiB,
		.optim_bytes = 2 * GiB,
		.act_bytes = 3 * MiB,
		.token_bytes = 2048,
	};
	struct crun__host_avail avail = {.mem_available = 3 * GiB};
	char msg[1024], h[32];

	(void)state;
	crun__format_bytes(512, h, sizeof(h));
	assert_string_equal(h, "0.5 KiB");
	crun__format_bytes(3 * MiB / 2, h, sizeof(h));
	assert_string_equal(h, "1.50 MiB");
	crun__format_bytes(5 * GiB / 4, h, sizeof(h));
	assert_string_equal(h, "1.25 GiB");

	/* MemAvailable bounds it */
	crun__host_oom_message(&need, &avail, msg, sizeof(msg));
	assert_string_equal(msg, "out of host memory for the model and its buffers: they need "
				 "4298115072 bytes (4.00 GiB: parameters 1.00 GiB, gradients 1.00 "
				 "GiB, optimizer state 2.00 GiB, activations 3.00 MiB, token batch "
				 "2.0 KiB), 3221225472 bytes (3.00 GiB) available: MemAvailable of "
				 "/proc/meminfo: see OUT OF MEMORY in crun-train(1)");
	/* a limit below it, less what the process holds */
	avail.mem_available = 8 * GiB;
	avail.as_limit = 4 * GiB;
	avail.as_used = 512 * MiB;
	avail.data_limit = 6 * GiB;
	avail.data_used = 100 * MiB;
	crun__host_oom_message(&need, &avail, msg, sizeof(msg));
	assert_non_null(strstr(msg,
			       ", 3758096384 bytes (3.50 GiB) available: RLIMIT_AS (ulimit -v) "
			       "4.00 GiB less 512.00 MiB in use; MemAvailable 8.00 GiB: see "
			       "OUT OF MEMORY in crun-train(1)"));
	avail.data_limit = GiB;
	crun__host_oom_message(&need, &avail, msg, sizeof(msg));
	assert_non_null(strstr(msg, "available: RLIMIT_DATA (ulimit -d) 1.00 GiB less 100.00 MiB"));
	/* enough available, refused all the same: the limits that may refuse */
	avail.as_limit = avail.data_limit = 0;
	avail.mem_available = 22 * GiB;
	crun__host_oom_message(&need, &avail, msg, sizeof(msg));
	assert_non_null(strstr(msg, "available: MemAvailable of /proc/meminfo; the allocator "
				    "refused them all the same, by a limit not shown here "
				    "(vm.overcommit_memory=2, a cgroup's memory.max, a sanitizer's "
				    "allocation limit): see OUT OF MEMORY in crun-train(1)"));
	avail.overcommit_memory = 2;
	avail.commit_limit = 10 * GiB;
	avail.committed_as = 7 * GiB;
	avail.cgroup_max = 6 * GiB;
	avail.cgroup_current = 3 * GiB;
	crun__host_oom_message(&need, &avail, msg, sizeof(msg));
	assert_non_null(strstr(msg, "refused them all the same: vm.overcommit_memory=2 leaves "
				    "3.00 GiB (CommitLimit less Committed_AS); cgroup memory.max "
				    "6.00 GiB, 3.00 GiB in use: see OUT OF MEMORY"));
	/* not enough: no word of the allocator */
	avail.mem_available = 2 * GiB;
	crun__host_oom_message(&need, &avail, msg, sizeof(msg));
	assert_null(strstr(msg, "refused"));
	/* nothing known */
	memset(&avail, 0, sizeof(avail));
	crun__host_oom_message(&need, &avail, msg, sizeof(msg));
	assert_non_null(strstr(msg, "2.0 KiB); the memory available is unknown (no MemAvailable "
				    "in /proc/meminfo): see OUT OF MEMORY in crun-train(1)"));
	/* a short buffer is cut, still a string */
	crun__host_oom_message(&need, &avail, msg, 40);
	assert_int_equal(strlen(msg), 39);
}

static struct crun__model *small_model(int T, int d, int H, int L, int mult)
{
	struct crun__model_config mc = {T, d, H, L, mult, 0.3f};
	char err[256];
	struct crun__model *m = crun__model_create(&mc, err, sizeof(err));

	assert_non_null(m);
	return m;
}

static void random_tokens(uint8_t *t, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		t[i] = (uint8_t)(crun__rng_at(seed, 7, i) % 256);
}

static double full_loss(const struct crun__model *m, const float *p, struct crun__model_acts *a,
			const uint8_t *tokens, int B)
{
	for (int u = 0; u < m->n_units; u++)
		crun__model_forward_unit(m, u, p + m->unit_off[u], a, tokens, B);
	return crun__model_loss_sum(a);
}

/* Finite differences against the hand-written backward, for every
 * parameter of a small model. */
static void test_gradcheck(void **state)
{
	struct crun__model *m = small_model(3, 2, 6, 2, 2);
	const int B = 4;
	struct crun__model_acts *a = crun__model_acts_create(m, B);
	size_t n = m->n_params, bad = 0;
	float *p = malloc(n * sizeof(float)), *g = calloc(n, sizeof(float));
	uint8_t tokens[4 * 4];
	const float scale = 1.0f / B;
	double worst = 0;

	(void)state;
	assert_non_null(a);
	random_tokens(tokens, sizeof(tokens), 3);
	crun__model_init_params(m, 42, 0, n, p);
	/* move norms and biases off their constant start so every path counts */
	for (size_t i = 0; i < n; i++)
		p[i] += 0.1f * (float)crun__rng_normal_at(9, 9, i);
	full_loss(m, p, a, tokens, B);
	for (int u = m->n_units - 1; u >= 0; u--)
		crun__model_backward_unit(m, u, p + m->unit_off[u], g + m->unit_off[u], a, tokens,
					  B, scale);
	for (size_t i = 0; i < n; i++) {
		const float eps = 1e-2f;
		float keep = p[i];
		double lp, lm, num, diff;

		p[i] = keep + eps;
		lp = full_loss(m, p, a, tokens, B) * scale;
		p[i] = keep - eps;
		lm = full_loss(m, p, a, tokens, B) * scale;
		p[i] = keep;
		num = (lp - lm) / (2.0 * eps);
		diff = fabs(num - g[i]);
		if (diff > 2e-3 + 2e-2 * fabs(num)) {
			bad++;
			print_message("param %zu: numeric %.6f analytic %.6f\n", i, num, g[i]);
		}
		if (diff > worst)
			worst = diff;
	}
	assert_int_equal(bad, 0);
	free(p);
	free(g);
	crun__model_acts_destroy(a);
	crun__model_destroy(m);
}

static void test_model_layout(void **state)
{
	struct crun__model *m = small_model(32, 16, 128, 2, 4);
	struct crun__model_acts *a = crun__model_acts_create(m, 64);
	float *p = malloc(m->n_params * sizeof(float));
	uint8_t tokens[64 * 33];
	double loss;

	(void)state;
	assert_int_equal(m->n_units, 4);
	assert_int_equal(m->unit_off[0], 0);
	assert_int_equal(m->unit_off[4], m->n_params);
	for (int i = 1; i < m->n_tensors; i++)
		assert_int_equal(m->tensors[i].offset,
				 m->tensors[i - 1].offset + m->tensors[i - 1].numel);
	/* 256*16 + 32*16 + 128*512 + 128, 2 * (2*128 + 2*(512*128) + 512 + 128),
	 * 2*128 + 256*128 + 256 */
	assert_int_equal(m->n_params,
			 4096 + 512 + 65536 + 128 + 2 * (256 + 131072 + 640) + 256 + 32768 + 256);
	/* the initial loss of a small-init head is close to ln 256 */
	random_tokens(tokens, sizeof(tokens), 1);
	m->cfg.init_std = 0.02f;
	for (int i = 0; i < m->n_tensors; i++)
		if (!strcmp(m->tensors[i].name, "head.weight"))
			m->tensors[i].init = 0.02f;
	crun__model_init_params(m, 1, 0, m->n_params, p);
	loss = full_loss(m, p, a, tokens, 64) / 64;
	assert_true(fabs(loss - log(256.0)) < 0.1);
	/* slices initialise exactly as the whole */
	{
		float *q = malloc(1000 * sizeof(float));

		crun__model_init_params(m, 1, 70000, 1000, q);
		assert_memory_equal(q, p + 70000, 1000 * sizeof(float));
		free(q);
	}
	free(p);
	crun__model_acts_destroy(a);
	crun__model_destroy(m);
}

static void test_data(void **state)
{
	uint8_t a[5000], b[5000], uni[512];
	struct crun__data d;
	struct crun__sampler s;
	char err[256];
	size_t n = 103;
	unsigned char *seen;

	(void)state;
	crun__data_generate(a, sizeof(a), 5);
	crun__data_generate(b, sizeof(b), 5);
	assert_memory_equal(a, b, sizeof(a));
	crun__data_generate(b, sizeof(b), 6);
	assert_memory_not_equal(a, b, sizeof(a));
	for (size_t i = 0; i < sizeof(a); i++)
		assert_true(a[i] == '\n' || (a[i] >= 32 && a[i] < 127));
	for (int i = 0; i < 512; i++)
		uni[i] = (uint8_t)i;
	assert_true(fabs(crun__data_unigram_bits(uni, 512) - 8.0) < 1e-12);
	assert_true(crun__data_unigram_bits(a, sizeof(a)) > 3.5);
	assert_true(crun__data_unigram_bits(a, sizeof(a)) < 5.0);

	assert_int_equal(crun__data_load(&d, NULL, 10000, 5, 0.1, 8, err, sizeof(err)), 0);
	assert_int_equal(d.train_len, 9000);
	assert_int_equal(d.n_train, 8992);
	assert_int_equal(d.n_val, 992);
	{
		uint8_t row[9];

		crun__data_sample(&d, 1, 3, row);
		assert_memory_equal(row, d.bytes + 9003, 9);
	}
	crun__data_finish(&d);
	assert_int_equal(crun__data_load(&d, NULL, 100, 5, 0.05, 8, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "too small"));
	assert_int_equal(crun__data_load(&d, "/nonexistent", 0, 0, 0.1, 8, err, sizeof(err)),
			 -ENOENT);

	/* every epoch a permutation; the ranks' positions tile it */
	seen = calloc(n, 1);
	assert_int_equal(crun__sampler_init(&s, n, 11), 0);
	for (int64_t e = 0; e < 3; e++) {
		memset(seen, 0, n);
		for (size_t pos = 0; pos < n; pos++)
			seen[crun__sampler_at(&s, e, pos)]++;
		for (size_t i = 0; i < n; i++)
			assert_int_equal(seen[i], 1);
	}
	assert_int_not_equal(crun__sampler_at(&s, 0, 0) * 1000 + crun__sampler_at(&s, 0, 1),
			     crun__sampler_at(&s, 1, 0) * 1000 + crun__sampler_at(&s, 1, 1));
	/* world 4 pads 103 to 104: rank 3's last position wraps to the start */
	assert_int_equal(crun__sampler_rank_at(&s, 2, 3, 4, 25), crun__sampler_at(&s, 2, 0));
	assert_int_equal(crun__sampler_rank_at(&s, 2, 1, 4, 7), crun__sampler_at(&s, 2, 29));
	crun__sampler_finish(&s);
	free(seen);
}

static void test_optim(void **state)
{
	struct crun__optim o = {.lr = 1.0,
				.schedule = CRUN_LR_COSINE,
				.warmup_steps = 10,
				.min_lr_ratio = 0.1,
				.beta1 = 0.9,
				.beta2 = 0.95,
				.eps = 1e-8,
				.weight_decay = 0.5,
				.grad_clip = 1.0};
	struct crun__model *m = small_model(2, 2, 4, 1, 1);
	float *p = calloc(m->n_params, sizeof(float)), *g = calloc(m->n_params, sizeof(float));
	float *mm = calloc(m->n_params, sizeof(float)), *vv = calloc(m->n_params, sizeof(float));

	(void)state;
	assert_true(fabs(crun__optim_lr(&o, 0, 110) - 0.1) < 1e-12);
	assert_true(fabs(crun__optim_lr(&o, 9, 110) - 1.0) < 1e-12);
	assert_true(fabs(crun__optim_lr(&o, 10, 110) - 1.0) < 1e-12);
	assert_true(fabs(crun__optim_lr(&o, 109, 110) - 0.1) < 1e-12);
	assert_true(crun__optim_lr(&o, 60, 110) < 0.6 && crun__optim_lr(&o, 60, 110) > 0.5);
	o.schedule = CRUN_LR_LINEAR;
	assert_true(fabs(crun__optim_lr(&o, 55, 101) - 0.55) < 1e-12);
	o.schedule = CRUN_LR_CONSTANT;
	assert_true(fabs(crun__optim_lr(&o, 100, 110) - 1.0) < 1e-12);

	assert_true(crun__optim_clip_scale(&o, 0.5) == 1.0f);
	assert_true(fabs(crun__optim_clip_scale(&o, 4.0) - 0.25) < 1e-6);
	o.grad_clip = 0;
	assert_true(crun__optim_clip_scale(&o, 4.0) == 1.0f);

	/* first step: p -= lr * (sign(g) + wd * p) where the tensor decays */
	for (size_t i = 0; i < m->n_params; i++) {
		p[i] = 1.0f;
		g[i] = (i % 2) ? 3.0f : -2.0f;
	}
	crun__optim_adamw(&o, m, 0, m->n_params, p, g, mm, vv, 1, 0.01, 1.0f);
	for (int t = 0; t < m->n_tensors; t++) {
		const struct crun__tensor *tn = &m->tensors[t];

		for (size_t i = tn->offset; i < tn->offset + tn->numel; i++) {
			float want =
				1.0f - 0.01f * ((i % 2 ? 1.0f : -1.0f) + (tn->decay ? 0.5f : 0.0f));

			assert_true(fabsf(p[i] - want) < 1e-6f);
		}
	}
	free(p);
	free(g);
	free(mm);
	free(vv);
	crun__model_destroy(m);
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

/* Full parameter vector of a one-rank par. */
static float *params_of(struct crun__parallel *par, const struct crun__model *m)
{
	float *out = calloc(m->n_params, sizeof(float));

	for (int s = 0; s < crun__parallel_n_segments(par); s++) {
		struct crun__view pv, ov;

		crun__parallel_held(par, s, &pv, &ov);
		memcpy(out + pv.flat, pv.p, pv.n * sizeof(float));
	}
	return out;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += (double)a[i] * a[i];
	}
	return sqrt(num / den);
}

static const struct crun__optim test_optim_cfg = {
	.lr = 3e-3,
	.schedule = CRUN_LR_COSINE,
	.warmup_steps = 2,
	.min_lr_ratio = 0.1,
	.beta1 = 0.9,
	.beta2 = 0.95,
	.eps = 1e-8,
	.weight_decay = 0.1,
	.grad_clip = 1.0,
};

/* Trains steps steps of a global batch of 16 on one rank. */
static float *train_one_rank(struct crun__comm *comm, const struct crun__model *m,
			     enum crun__strategy st, int accum, size_t bucket, int steps)
{
	struct crun__parallel_opts po = {st, accum, 16 / accum, bucket};
	struct crun__parallel *par = crun__parallel_create(m, comm, &po);
	uint8_t tokens[16 * 9];
	float *out;

	assert_non_null(par);
	crun__parallel_init_params(par, 7);
	for (int s = 0; s < steps; s++) {
		double loss, gnorm;

		random_tokens(tokens, sizeof(tokens), 100 + (uint64_t)s);
		assert_int_equal(crun__parallel_step(par, &test_optim_cfg, tokens, 16, s + 1,
						     crun__optim_lr(&test_optim_cfg, s, steps),
						     &loss, &gnorm),
				 0);
		assert_true(isfinite(loss) && loss > 0);
	}
	out = params_of(par, m);
	crun__parallel_destroy(par);
	return out;
}

/* On one rank every strategy, bucket size and accumulation computes the
 * same mathematics; one configuration is bitwise repeatable. */
static void test_strategies_one_rank(void **state)
{
	struct crun__comm *comm = single_comm();
	struct crun__model *m = small_model(8, 4, 16, 2, 4);
	float *ref = train_one_rank(comm, m, CRUN_STRATEGY_DDP, 1, 1 << 20, 6);
	float *again = train_one_rank(comm, m, CRUN_STRATEGY_DDP, 1, 1 << 20, 6);
	const enum crun__strategy all[] = {CRUN_STRATEGY_DDP, CRUN_STRATEGY_ZERO1,
					   CRUN_STRATEGY_ZERO2, CRUN_STRATEGY_ZERO3};
	float *init = calloc(m->n_params, sizeof(float));

	(void)state;
	assert_memory_equal(ref, again, m->n_params * sizeof(float));
	crun__model_init_params(m, 7, 0, m->n_params, init);
	assert_true(rel_diff(init, ref, m->n_params) > 1e-3);
	for (size_t i = 0; i < 4; i++) {
		for (int accum = 1; accum <= 4; accum *= 2) {
			float *p = train_one_rank(comm, m, all[i], accum, 1024, 6);
			double d = rel_diff(ref, p, m->n_params);

			if (d > 1e-5)
				fail_msg("%s accum %d: relative difference %g",
					 crun__strategy_name(all[i]), accum, d);
			free(p);
		}
	}
	free(init);
	free(ref);
	free(again);
	crun__model_destroy(m);
	crun__comm_destroy(comm);
}

static void test_parallel_memory(void **state)
{
	struct crun__comm *comm = single_comm();
	struct crun__model *m = small_model(8, 4, 16, 3, 4);
	struct crun__parallel_opts po = {CRUN_STRATEGY_ZERO3, 1, 4, 1 << 20};
	struct crun__parallel *par = crun__parallel_create(m, comm, &po);
	struct crun__parallel_memory mem;

	(void)state;
	assert_non_null(par);
	assert_int_equal(crun__parallel_n_segments(par), m->n_units);
	crun__parallel_memory(par, &mem);
	assert_int_equal(mem.param_bytes, m->n_params * 4);
	assert_int_equal(mem.total_param_bytes, m->n_params * 4);
	crun__parallel_destroy(par);
	po.strategy = CRUN_STRATEGY_DDP;
	par = crun__parallel_create(m, comm, &po);
	assert_int_equal(crun__parallel_n_segments(par), 1);
	crun__parallel_destroy(par);
	po.bucket_bytes = 1; /* one unit per bucket */
	par = crun__parallel_create(m, comm, &po);
	assert_int_equal(crun__parallel_n_segments(par), m->n_units);
	crun__parallel_destroy(par);
	crun__model_destroy(m);
	crun__comm_destroy(comm);
}

/* ---- the schedule on a recording device ---- */

/* A device that computes nothing: it writes the passes and collectives
 * the schedule issues into a trace, and checks the queue order a device
 * with two queues relies on (every collective sees what compute queued
 * before it, compute reads what comm wrote only after waiting for it, a
 * gather buffer is read only after its gather and refilled only after
 * compute released it). */
struct rec_device {
	struct crun__device d;
	struct crun__device_ops ops;
	char trace[1024];
	int n_compute, n_comm;	     /* operations queued so far */
	int computed, communicated;  /* counts at the last signal of each */
	int comm_sees, compute_sees; /* counts the other queue waited for */
	int params_at;		     /* n_compute after the last params_changed */
	bool gathered_ok[2], freed[2];
};

static struct rec_device *rec(struct crun__device *d)
{
	return (struct rec_device *)d;
}

static void rec_put(struct crun__device *d, const char *fmt, ...)
{
	struct rec_device *r = rec(d);
	size_t n = strlen(r->trace);
	va_list ap;

	if (n)
		r->trace[n++] = ' ';
	va_start(ap, fmt);
	vsnprintf(r->trace + n, sizeof(r->trace) - n, fmt, ap);
	va_end(ap);
}

static struct crun__device *rec_open(const struct crun__device_opts *o, char *err, size_t len)
{
	struct rec_device *r = calloc(1, sizeof(*r));

	(void)o, (void)err, (void)len;
	return &r->d;
}

static int rec_attach(struct crun__device *d, char *err, size_t len)
{
	(void)err, (void)len;
	rec(d)->freed[0] = rec(d)->freed[1] = true;
	return 0;
}

static void rec_close(struct crun__device *d)
{
	free(d);
}

static void rec_nop(struct crun__device *d)
{
	(void)d;
}

static void rec_download(struct crun__device *d, bool optim)
{
	(void)d, (void)optim;
}

static void rec_signal(struct crun__device *d, enum crun__queue q, enum crun__event ev, int slot)
{
	struct rec_device *r = rec(d);

	if (ev == CRUN__EV_COMPUTED)
		r->computed = r->n_compute;
	if (ev == CRUN__EV_COMMUNICATED)
		r->communicated = r->n_comm;
	if (ev == CRUN__EV_FREED) {
		assert_int_equal(q, CRUN__QUEUE_COMPUTE);
		r->freed[slot] = true;
	}
}

static void rec_wait(struct crun__device *d, enum crun__queue q, enum crun__event ev, int slot)
{
	struct rec_device *r = rec(d);

	if (ev == CRUN__EV_COMPUTED && q == CRUN__QUEUE_COMM)
		r->comm_sees = r->computed;
	if (ev == CRUN__EV_COMMUNICATED && q == CRUN__QUEUE_COMPUTE)
		r->compute_sees = r->communicated;
	if (ev == CRUN__EV_GATHERED && q == CRUN__QUEUE_COMPUTE)
		r->gathered_ok[slot] = true;
}

static void rec_mark(struct crun__device *d, enum crun__mark m)
{
	(void)d, (void)m;
}

static void rec_begin(struct crun__device *d, const uint8_t *tokens, size_t bytes)
{
	(void)tokens, (void)bytes;
	rec(d)->n_compute++;
}

/* p as the schedule named it: a gather buffer must be full. */
static void rec_reads(struct crun__device *d, struct crun__ref p)
{
	if (p.buf == CRUN__BUF_GATHER)
		assert_true(rec(d)->gathered_ok[p.slot]);
}

static void rec_forward(struct crun__device *d, int unit, struct crun__ref p, size_t row, int rows)
{
	(void)row, (void)rows;
	rec_reads(d, p);
	rec(d)->n_compute++;
	rec_put(d, "F%d", unit);
}

static void rec_backward(struct crun__device *d, int unit, struct crun__ref p, struct crun__ref g,
			 size_t row, int rows, float scale)
{
	(void)g, (void)row, (void)rows, (void)scale;
	rec_reads(d, p);
	rec(d)->n_compute++;
	rec_put(d, "B%d", unit);
}

static void rec_zero(struct crun__device *d, struct crun__ref x, size_t n)
{
	(void)x, (void)n;
	rec(d)->n_compute++;
}

/* A collective that reads what compute wrote. */
static void rec_collective(struct crun__device *d, const char *name)
{
	struct rec_device *r = rec(d);

	assert_int_equal(r->comm_sees, r->n_compute);
	r->n_comm++;
	rec_put(d, "%s", name);
}

static int rec_allreduce(struct crun__device *d, struct crun__ref x, size_t chunk)
{
	(void)x, (void)chunk;
	rec_collective(d, "A");
	return 0;
}

static int rec_reduce_scatter(struct crun__device *d, struct crun__ref in, struct crun__ref out,
			      size_t chunk)
{
	(void)in, (void)out, (void)chunk;
	rec_collective(d, "S");
	return 0;
}

static int rec_gather(struct crun__device *d, struct crun__ref in, struct crun__ref out,
		      size_t chunk)
{
	struct rec_device *r = rec(d);

	(void)chunk;
	if (out.buf != CRUN__BUF_GATHER) {
		rec_collective(d, "G");
		return 0;
	}
	/* zero3: the compute copy is current and the buffer was released */
	assert_int_equal(in.buf, CRUN__BUF_COMPUTE);
	assert_true(r->comm_sees >= r->params_at);
	assert_true(r->freed[out.slot]);
	r->freed[out.slot] = false;
	r->gathered_ok[out.slot] = false;
	r->n_comm++;
	rec_put(d, "G%d:%d", out.slot,
		d->lay->seg[d->lay->unit_seg[0]].shard_off == in.off ? 0 : -1);
	return 0;
}

static void rec_sumsq(struct crun__device *d, int part, struct crun__ref x, size_t n)
{
	(void)part, (void)x, (void)n;
	assert_int_equal(rec(d)->compute_sees, rec(d)->n_comm);
	rec(d)->n_compute++;
}

static void rec_sumsq_total(struct crun__device *d, int n_parts)
{
	(void)n_parts;
	rec(d)->n_compute++;
}

static int rec_sumsq_allreduce(struct crun__device *d)
{
	rec_collective(d, "N");
	return 0;
}

static void rec_clip(struct crun__device *d, const struct crun__optim *o)
{
	(void)o;
	assert_int_equal(rec(d)->compute_sees, rec(d)->n_comm);
	rec(d)->n_compute++;
}

static void rec_adamw(struct crun__device *d, const struct crun__optim *o, size_t flat, size_t n,
		      struct crun__ref p, struct crun__ref g, size_t moff, int64_t t, double lr)
{
	(void)o, (void)flat, (void)n, (void)p, (void)g, (void)moff, (void)t, (void)lr;
	assert_int_equal(rec(d)->compute_sees, rec(d)->n_comm);
	rec(d)->n_compute++;
	rec_put(d, "U");
}

static void rec_params_changed(struct crun__device *d)
{
	struct rec_device *r = rec(d);

	assert_int_equal(r->compute_sees, r->n_comm);
	r->params_at = ++r->n_compute;
}

static int rec_finish(struct crun__device *d, double *loss, double *sumsq)
{
	(void)d;
	*loss = 1;
	if (sumsq)
		*sumsq = 1;
	return 0;
}

static void rec_memory(const struct crun__device *d, struct crun__device_memory *out)
{
	(void)d;
	memset(out, 0, sizeof(*out));
}

static void rec_times(const struct crun__device *d, struct crun__device_times *out)
{
	(void)d;
	memset(out, 0, sizeof(*out));
}

static void rec_describe(const struct crun__device *d, char *buf, size_t len)
{
	(void)d, (void)len;
	buf[0] = '\0';
}

static const struct crun__device_ops rec_ops = {
	.name = "rec",
	.open = rec_open,
	.attach = rec_attach,
	.close = rec_close,
	.upload = rec_nop,
	.download = rec_download,
	.signal = rec_signal,
	.wait = rec_wait,
	.mark = rec_mark,
	.begin = rec_begin,
	.forward = rec_forward,
	.backward = rec_backward,
	.zero = rec_zero,
	.allreduce = rec_allreduce,
	.reduce_scatter = rec_reduce_scatter,
	.gather = rec_gather,
	.sumsq = rec_sumsq,
	.sumsq_total = rec_sumsq_total,
	.sumsq_allreduce = rec_sumsq_allreduce,
	.clip = rec_clip,
	.adamw = rec_adamw,
	.params_changed = rec_params_changed,
	.finish = rec_finish,
	.memory = rec_memory,
	.times = rec_times,
	.describe = rec_describe,
};

/* One step of a 3-unit model (embedding, one block, head) on one rank, as
 * the schedule issues it: F/B forward/backward of a unit, A all-reduce, S
 * reduce-scatter, G all-gather (zero3: Gslot:0 when it gathers unit 0's
 * segment), N the norm's all-reduce, U an AdamW range. */
static void test_schedule_trace(void **state)
{
	static const struct {
		enum crun__strategy st;
		int accum, slots;
		size_t bucket;
		const char *trace;
	} cases[] = {
		/* one bucket: reduced once the backward pass is through */
		{CRUN_STRATEGY_DDP, 1, 1, 1 << 20, "F0 F1 F2 B2 B1 B0 A U"},
		/* a bucket per unit, reduced as soon as it is complete; only
		 * the last micro-step communicates */
		{CRUN_STRATEGY_DDP, 2, 2, 1, "F0 F1 F2 B2 B1 B0 F0 F1 F2 B2 A B1 A B0 A U U U"},
		{CRUN_STRATEGY_ZERO1, 1, 1, 1, "F0 F1 F2 B2 S B1 S B0 S N U U U G G G"},
		{CRUN_STRATEGY_ZERO2, 1, 2, 1, "F0 F1 F2 B2 S B1 S B0 S N U U U G G G"},
		/* one gather buffer: each unit before it computes, the head
		 * kept from its forward for its backward */
		{CRUN_STRATEGY_ZERO3, 1, 1, 1,
		 "G0:0 F0 G0:-1 F1 G0:-1 F2 B2 S G0:-1 B1 S G0:0 B0 S N U U U"},
		/* two: the next unit's gather is queued before this one computes */
		{CRUN_STRATEGY_ZERO3, 1, 2, 1,
		 "G1:0 G0:-1 F0 G1:-1 F1 F2 B2 S G1:0 B1 S B0 S N U U U"},
	};
	struct crun__comm *comm = single_comm();
	struct crun__model *m = small_model(8, 4, 16, 1, 4);
	uint8_t tokens[16 * 9];
	char err[256];

	(void)state;
	assert_int_equal(m->n_units, 3);
	memset(tokens, 1, sizeof(tokens));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct crun__parallel_opts po = {cases[i].st, cases[i].accum, 16 / cases[i].accum,
						 cases[i].bucket};
		struct crun__parallel *host = crun__parallel_create_storage(m, comm, &po);
		struct crun__device_ops ops = rec_ops;
		struct crun__device *d;
		double loss, gnorm;

		ops.gather_slots = ops.bucket_slots = cases[i].slots;
		assert_non_null(host);
		d = crun__device_open(&ops, NULL, err, sizeof(err));
		assert_non_null(d);
		assert_int_equal(crun__device_attach(d, m, host, comm, err, sizeof(err)), 0);
		assert_int_equal(
			crun__schedule_step(d, &test_optim_cfg, tokens, 16, 1, 1e-3, &loss, &gnorm),
			0);
		if (strcmp(rec(d)->trace, cases[i].trace))
			fail_msg("%s, grad_accum %d, %d slots:\n  got  %s\n  want %s",
				 crun__strategy_name(cases[i].st), cases[i].accum, cases[i].slots,
				 rec(d)->trace, cases[i].trace);
		crun__device_close(d);
		crun__parallel_destroy(host);
	}
	crun__model_destroy(m);
	crun__comm_destroy(comm);
}

static void corrupt_byte(const char *path, long off)
{
	FILE *f = fopen(path, "r+b");
	int c;

	assert_non_null(f);
	fseek(f, off, SEEK_SET);
	c = fgetc(f);
	fseek(f, off, SEEK_SET);
	fputc(c ^ 0x40, f);
	fclose(f);
}

/* Rewrites the MANIFEST of checkpoint CKPT with each line that starts with
 * "KEY " replaced by WITH (several lines, or "" to drop it), for the pairs
 * KEY, WITH ending with NULL. */
static void edit_manifest(const char *ckpt, ...)
{
	char path[600], text[4096], out[4096] = "", *save = NULL;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/MANIFEST", ckpt);
	f = fopen(path, "r");
	assert_non_null(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *with = line;
		va_list ap;

		va_start(ap, ckpt);
		for (const char *key = va_arg(ap, const char *); key;
		     key = va_arg(ap, const char *)) {
			const char *repl = va_arg(ap, const char *);

			if (!strncmp(line, key, strlen(key)) &&
			    (line[strlen(key)] == ' ' || !line[strlen(key)]))
				with = repl;
		}
		va_end(ap);
		if (*with) {
			assert_true(strlen(out) + strlen(with) + 2 < sizeof(out));
			strcat(out, with);
			strcat(out, "\n");
		}
	}
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(out, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void test_checkpoint(void **state)
{
	struct crun__comm *comm = single_comm();
	struct crun__model *m = small_model(8, 4, 16, 2, 4);
	struct crun__parallel_opts po = {CRUN_STRATEGY_ZERO1, 1, 16, 1024};
	struct crun__parallel *a = crun__parallel_create(m, comm, &po), *b;
	struct crun__ckpt_meta meta = {0};
	struct crun__model_config mc;
	char dir[256], path[512], out[1024], err[512];
	uint8_t tokens[16 * 9];
	float *pa, *pb, *pc;
	size_t n;
	int64_t step;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/ckpt", tmpdir);
	assert_int_equal(crun__ckpt_latest(dir, &step, err, sizeof(err)), -ENOENT);
	crun__parallel_init_params(a, 3);
	for (int s = 0; s < 3; s++) {
		double loss, gn;

		random_tokens(tokens, sizeof(tokens), (uint64_t)s);
		assert_int_equal(crun__parallel_step(a, &test_optim_cfg, tokens, 16, s + 1, 1e-3,
						     &loss, &gn),
				 0);
	}
	meta.world_size = 1;
	snprintf(meta.strategy, sizeof(meta.strategy), "zero1");
	meta.model = m->cfg;
	meta.n_params = m->n_params;
	for (int64_t s = 1; s <= 3; s++) {
		uint64_t bytes = 0;
		struct stat st;

		meta.step = s;
		meta.train_loss = 5.5 - 0.25 * (double)s;
		meta.elapsed_s = 1.5 * (double)s;
		assert_int_equal(crun__ckpt_save(a, comm, dir, &meta, 2, &bytes, err, sizeof(err)),
				 0);
		/* the bytes of its one shard */
		crun__ckpt_path(dir, s, path, sizeof(path));
		strcat(path, "/shard-00000-of-00001.bin");
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(bytes, (uint64_t)st.st_size);
	}
	/* keep 2: step 1 is gone */
	crun__ckpt_path(dir, 1, path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(crun__ckpt_latest(dir, &step, err, sizeof(err)), 0);
	assert_int_equal(step, 3);
	/* the manifest keeps the step's loss and the training time so far; one
	 * without them (an older crun-train's) reads as unknown and 0; a bad
	 * value of either reads as absent; a key it does not know is skipped
	 * before the shards, refused after them */
	{
		struct crun__ckpt_meta got;

		crun__ckpt_path(dir, 3, path, sizeof(path));
		assert_int_equal(crun__ckpt_read_meta(path, &got, err, sizeof(err)), 0);
		assert_true(got.train_loss == 4.75);
		assert_true(got.elapsed_s == 4.5);
		crun__ckpt_path(dir, 2, path, sizeof(path));
		edit_manifest(path, "train_loss", "", "elapsed_s", "", NULL);
		assert_int_equal(crun__ckpt_read_meta(path, &got, err, sizeof(err)), 0);
		assert_true(isnan(got.train_loss));
		assert_true(got.elapsed_s == 0);
		assert_int_equal(got.step, 2);
		edit_manifest(path, "strategy",
			      "strategy zero1\ntrain_loss x1\nelapsed_s -4\nfuture.key 17\n"
			      "future_flag on",
			      NULL);
		assert_int_equal(crun__ckpt_read_meta(path, &got, err, sizeof(err)), 0);
		assert_true(isnan(got.train_loss));
		assert_true(got.elapsed_s == 0);
		assert_string_equal(got.strategy, "zero1");
		assert_int_equal(got.step, 2);
		edit_manifest(path, "end", "future.key 17\nend", NULL);
		assert_int_equal(crun__ckpt_read_meta(path, &got, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "bad MANIFEST"));
		edit_manifest(path, "future.key", "", NULL);
		assert_int_equal(crun__ckpt_read_meta(path, &got, err, sizeof(err)), 0);
	}

	/* load into another strategy: same parameters and moments */
	po.strategy = CRUN_STRATEGY_ZERO3;
	b = crun__parallel_create(m, comm, &po);
	crun__ckpt_path(dir, 3, path, sizeof(path));
	assert_int_equal(crun__ckpt_load(b, m, path, err, sizeof(err)), 0);
	pa = params_of(a, m);
	pb = params_of(b, m);
	assert_memory_equal(pa, pb, m->n_params * sizeof(float));
	{
		double la, lb, gn;

		random_tokens(tokens, sizeof(tokens), 77);
		assert_int_equal(
			crun__parallel_step(a, &test_optim_cfg, tokens, 16, 4, 1e-3, &la, &gn), 0);
		assert_int_equal(
			crun__parallel_step(b, &test_optim_cfg, tokens, 16, 4, 1e-3, &lb, &gn), 0);
		free(pa);
		free(pb);
		pa = params_of(a, m);
		pb = params_of(b, m);
		assert_true(rel_diff(pa, pb, m->n_params) < 1e-6);
	}

	/* export of the newest one */
	snprintf(out, sizeof(out), "%s/model.bin", tmpdir);
	assert_int_equal(crun__ckpt_export(dir, out, err, sizeof(err)), 0);
	assert_int_equal(crun__ckpt_read_consolidated(out, &pc, &n, &mc, &step, err, sizeof(err)),
			 0);
	assert_int_equal(n, m->n_params);
	assert_int_equal(step, 3);
	assert_int_equal(mc.width, 16);
	free(pc);

	/* a damaged shard is refused, a checkpoint without MANIFEST ignored */
	snprintf(out, sizeof(out), "%s/shard-00000-of-00001.bin", path);
	corrupt_byte(out, 100);
	assert_int_equal(crun__ckpt_load(b, m, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "checksum"));
	snprintf(out, sizeof(out), "%s/MANIFEST", path);
	assert_int_equal(unlink(out), 0);
	assert_int_equal(crun__ckpt_latest(dir, &step, err, sizeof(err)), 0);
	assert_int_equal(step, 2);

	/* another model is refused */
	{
		struct crun__model *other = small_model(8, 4, 32, 2, 4);
		struct crun__parallel *c = crun__parallel_create(other, comm, &po);

		crun__ckpt_path(dir, 2, path, sizeof(path));
		assert_int_equal(crun__ckpt_load(c, other, path, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "another model"));
		crun__parallel_destroy(c);
		crun__model_destroy(other);
	}
	free(pa);
	free(pb);
	crun__parallel_destroy(a);
	crun__parallel_destroy(b);
	crun__model_destroy(m);
	crun__comm_destroy(comm);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_defaults_roundtrip),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_config_yaml),
		cmocka_unit_test_setup_teardown(test_config_find, save_cwd, restore_cwd),
		cmocka_unit_test(test_host_oom_message),
		cmocka_unit_test(test_gradcheck),
		cmocka_unit_test(test_model_layout),
		cmocka_unit_test(test_data),
		cmocka_unit_test(test_optim),
		cmocka_unit_test(test_strategies_one_rank),
		cmocka_unit_test(test_parallel_memory),
		cmocka_unit_test(test_schedule_trace),
		cmocka_unit_test(test_checkpoint),
	};

	openblas_set_num_threads(1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
