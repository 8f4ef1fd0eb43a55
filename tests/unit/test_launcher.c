/* crun's launcher without a process per case: the option parser (both
 * spellings, = and space forms, precedence of command line, PET_ variables,
 * config file and defaults), the value parsers (redirects, rdzv-conf,
 * signals), the YAML config file, the plan (GPU counting, command
 * resolution, run id, ports) and --help's layout. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/config.h"
#include "launcher/help.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "launcher/sibling.h"

#define MAXARGS 32

struct run {
	struct crun__launch_opts o;
	char *argv[MAXARGS];
	int argc;
	char *envp[MAXARGS];
	char err[1024];
	int rc;
};

static char tmpdir[64];

/* Parses a NULL-terminated list of arguments (argv[0] is added) with the
 * environment in env (NULL-terminated, may be NULL). */
static struct run *parse_env(const char *const *env, ...)
{
	struct run *r = calloc(1, sizeof(*r));
	va_list ap;
	const char *a;

	assert_non_null(r);
	r->argv[r->argc++] = "crun";
	va_start(ap, env);
	while ((a = va_arg(ap, const char *)) && r->argc < MAXARGS - 1)
		r->argv[r->argc++] = (char *)a;
	va_end(ap);
	for (int i = 0; env && env[i] && i < MAXARGS - 1; i++)
		r->envp[i] = (char *)env[i];
	crun__launch_opts_init(&r->o);
	r->err[0] = '\0';
	r->rc = crun__launch_opts_parse(&r->o, r->argc, r->argv, r->envp, r->err, sizeof(r->err));
	if (r->rc)
		assert_true(strlen(r->err) > 0 && !strchr(r->err, '\n'));
	return r;
}

#define parse(...) parse_env(NULL, __VA_ARGS__, NULL)

static void done(struct run *r)
{
	crun__launch_opts_finish(&r->o);
	free(r);
}

static void expect_error(struct run *r, const char *needle)
{
	if (r->rc != -EINVAL)
		fail_msg("accepted, expected an error with '%s'", needle);
	if (!strstr(r->err, needle))
		fail_msg("error '%s' does not contain '%s'", r->err, needle);
	done(r);
}

static char *write_file(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_defaults(void **state)
{
	struct run *r = parse("/bin/true");

	(void)state;
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.action, CRUN_LAUNCH_RUN);
	assert_int_equal(r->o.nproc_mode, CRUN_NPROC_COUNT);
	assert_int_equal(r->o.nproc, 1);
	assert_int_equal(r->o.nnodes_min, 1);
	assert_int_equal(r->o.nnodes_max, 1);
	assert_int_equal(r->o.max_restarts, 3);
	assert_true(r->o.shutdown_timeout_ms == 30000);
	assert_int_equal(r->o.nsignals, 4);
	assert_int_equal(r->o.signals[0], SIGTERM);
	assert_int_equal(r->o.signals[3], SIGQUIT);
	assert_int_equal(r->o.rdzv_backend, CRUN_RDZV_C10D);
	assert_null(r->o.rdzv_id);
	assert_null(r->o.role);
	assert_int_equal(r->o.command_argc, 1);
	assert_string_equal(r->o.command[0], "/bin/true");
	assert_int_equal(r->o.source[CRUN_OPT_NPROC_PER_NODE], CRUN_SRC_DEFAULT);
	assert_true(r->o.rdzv_conf.join_timeout_ms == 600000);
	assert_int_equal(r->o.rdzv_conf.keep_alive_max_attempt, 3);
	assert_int_equal(r->o.rdzv_conf.is_host, -1);
	done(r);
}

static void test_spellings_and_forms(void **state)
{
	static const char *const forms[][3] = {
		{"--nproc-per-node=4", NULL, NULL},
		{"--nproc-per-node", "4", NULL},
		{"--nproc_per_node=4", NULL, NULL},
		{"--nproc_per_node", "4", NULL},
		/* unambiguous prefixes, as argparse takes them */
		{"--nproc_per_nod=4", NULL, NULL},
		{"--nproc", "4", NULL},
	};
	struct run *r;

	(void)state;
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		r = forms[i][1] ? parse(forms[i][0], forms[i][1], "x") : parse(forms[i][0], "x");
		assert_int_equal(r->rc, 0);
		assert_int_equal(r->o.nproc, 4);
		assert_int_equal(r->o.source[CRUN_OPT_NPROC_PER_NODE], CRUN_SRC_CLI);
		done(r);
	}
	r = parse("--max_restarts=0", "--max-restarts", "7", "--rdzv_backend", "static",
		  "--node_rank=0", "--master_addr", "10.0.0.1", "--master-port=1234", "--role",
		  "trainer", "--rdzv-id=job7", "--local_addr", "node0", "--log-dir", "/tmp/l",
		  "--shutdown_timeout", "2.5s", "--monitor-interval=5", "--start_method", "fork",
		  "--standalone", "--virtual_local_rank", "--no_python", "x");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.max_restarts, 7); /* the last one wins */
	assert_int_equal(r->o.rdzv_backend, CRUN_RDZV_STATIC);
	assert_string_equal(r->o.master_addr, "10.0.0.1");
	assert_int_equal(r->o.master_port, 1234);
	assert_string_equal(r->o.role, "trainer");
	assert_string_equal(r->o.rdzv_id, "job7");
	assert_string_equal(r->o.local_addr, "node0");
	assert_string_equal(r->o.log_dir, "/tmp/l");
	assert_true(r->o.shutdown_timeout_ms == 2500);
	assert_true(r->o.monitor_interval_ms == 5000);
	assert_string_equal(r->o.start_method, "fork");
	assert_true(r->o.standalone && r->o.virtual_local_rank && r->o.no_python);
	done(r);

	/* Short options: -r3, -r 3, -r=3, -t SPEC, -m, -c FILE. */
	r = parse("-r3", "-t", "0:1,1:2", "-m", "pkg.mod");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.redirects.all, CRUN_STD_ALL);
	assert_int_equal(r->o.tee.count, 2);
	assert_int_equal(crun__std_spec_get(&r->o.tee, 0), CRUN_STD_OUT);
	assert_int_equal(crun__std_spec_get(&r->o.tee, 1), CRUN_STD_ERR);
	assert_int_equal(crun__std_spec_get(&r->o.tee, 2), CRUN_STD_NONE);
	assert_true(r->o.module);
	done(r);
	r = parse("-r", "2", "x");
	assert_int_equal(r->o.redirects.all, CRUN_STD_ERR);
	done(r);
	r = parse("-r=1", "x");
	assert_int_equal(r->o.redirects.all, CRUN_STD_OUT);
	done(r);

	r = parse("--nproc-per-node", "auto", "x");
	assert_int_equal(r->o.nproc_mode, CRUN_NPROC_AUTO);
	done(r);
	r = parse("--nproc-per-node=cpu", "x");
	assert_int_equal(r->o.nproc_mode, CRUN_NPROC_CPU);
	done(r);
	r = parse("--nproc-per-node=gpu", "x");
	assert_int_equal(r->o.nproc_mode, CRUN_NPROC_GPU);
	done(r);
	r = parse("--nnodes=2:4", "--node-rank=3", "x");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.nnodes_min, 2);
	assert_int_equal(r->o.nnodes_max, 4);
	assert_int_equal(r->o.node_rank, 3);
	done(r);
}

static void test_command_boundary(void **state)
{
	struct run *r;

	(void)state;
	/* Options end at the first non-option: the rest is the command's. */
	r = parse("--nproc-per-node", "2", "prog", "--nproc-per-node", "5", "-h");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.nproc, 2);
	assert_int_equal(r->o.action, CRUN_LAUNCH_RUN);
	assert_int_equal(r->o.command_argc, 4);
	assert_string_equal(r->o.command[0], "prog");
	assert_string_equal(r->o.command[3], "-h");
	done(r);
	r = parse("--", "-weird", "--x");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.command_argc, 2);
	assert_string_equal(r->o.command[0], "-weird");
	done(r);
	/* A lone "-" is a command, not an option. */
	r = parse("-", "a");
	assert_int_equal(r->rc, 0);
	assert_string_equal(r->o.command[0], "-");
	done(r);
	/* A value that looks like an option is still the value. */
	r = parse("--log-dir", "--weird", "x");
	assert_int_equal(r->rc, 0);
	assert_string_equal(r->o.log_dir, "--weird");
	done(r);
	/* Help and version end parsing at once, even with no command. */
	r = parse("--nproc-per-node=2", "-h");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.action, CRUN_LAUNCH_HELP);
	done(r);
	r = parse("--help");
	assert_int_equal(r->o.action, CRUN_LAUNCH_HELP);
	done(r);
	r = parse("--version");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.action, CRUN_LAUNCH_VERSION);
	done(r);
	r = parse("--dry-run", "x");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.action, CRUN_LAUNCH_DRY_RUN);
	done(r);
	r = parse("--dry_run", "x");
	assert_int_equal(r->o.action, CRUN_LAUNCH_DRY_RUN);
	done(r);
}

static void test_bad_command_lines(void **state)
{
	(void)state;
	expect_error(parse("--nproc-per-node=-2", "x"),
		     "invalid value '-2' for --nproc-per-node: expected a positive number");
	expect_error(parse("--nproc-per-node", "0", "x"), "for --nproc-per-node");
	expect_error(parse("--nproc-per-node", "4096000", "x"), "for --nproc-per-node");
	expect_error(parse("--nproc-per-node", "two", "x"), "auto, cpu or gpu");
	expect_error(parse("--nnodes", "3:2", "x"), "invalid value '3:2' for --nnodes");
	expect_error(parse("--nnodes", "0", "x"), "for --nnodes");
	expect_error(parse("--nnodes", "1:", "x"), "for --nnodes");
	expect_error(parse("--nnodes", "1:2:3", "x"), "for --nnodes");
	expect_error(parse("--node-rank", "1", "x"), "invalid value '1' for --node-rank");
	expect_error(parse("--nnodes=2", "--node-rank", "2", "x"), "below --nnodes (2)");
	expect_error(parse("--node-rank", "-1", "x"), "for --node-rank");
	expect_error(parse("--rdzv-backend", "etcd", "x"), "expected c10d or static");
	expect_error(parse("--rdzv-endpoint", "host:99999", "x"), "for --rdzv-endpoint");
	expect_error(parse("--rdzv-id", "a/b", "x"), "for --rdzv-id");
	expect_error(parse("--rdzv-conf", "join_timeout", "x"), "for --rdzv-conf");
	expect_error(parse("--rdzv-conf", "bogus=1", "x"), "unknown key 'bogus'");
	expect_error(parse("--max-restarts", "-1", "x"), "for --max-restarts");
	expect_error(parse("--max-restarts", "1.5", "x"), "for --max-restarts");
	expect_error(parse("--monitor-interval", "fast", "x"), "for --monitor-interval");
	expect_error(parse("--start-method", "thread", "x"), "spawn, fork or forkserver");
	expect_error(parse("--shutdown-timeout", "10q", "x"), "for --shutdown-timeout");
	expect_error(parse("--signals-to-handle", "SIGFOO", "x"), "unknown signal 'SIGFOO'");
	expect_error(parse("--signals-to-handle", "SIGKILL", "x"), "cannot be handled");
	expect_error(parse("--master-port", "0", "x"), "for --master-port");
	expect_error(parse("--master-port", "65536", "x"), "for --master-port");
	expect_error(parse("--master-addr", "a b", "x"), "for --master-addr");
	expect_error(parse("--role", "", "x"), "for --role");
	expect_error(parse("-r", "4", "x"), "for --redirects");
	expect_error(parse("--tee", "0:5", "x"), "for --tee");
	expect_error(parse("--local-ranks-filter", "0,x", "x"), "for --local-ranks-filter");
	expect_error(parse("--local-ranks-filter", "", "x"), "for --local-ranks-filter");
	expect_error(parse("--log-dir=", "x"), "for --log-dir");
	expect_error(parse("--bogus", "x"), "unknown option '--bogus'");
	expect_error(parse("--bogus=1", "x"), "unknown option '--bogus' (see crun --help)");
	expect_error(parse("--nproc-per-nod3=2", "x"),
		     "unknown option '--nproc-per-nod3'; did you mean '--nproc-per-node'?");
	expect_error(parse("--rdzv-endpiont=h:1", "x"),
		     "unknown option '--rdzv-endpiont'; did you mean '--rdzv-endpoint'?");
	expect_error(parse("--standlone", "x"),
		     "unknown option '--standlone'; did you mean '--standalone'?");
	expect_error(parse("--rdzv", "c10d", "x"),
		     "ambiguous option '--rdzv' could match --rdzv-backend, --rdzv-endpoint, "
		     "--rdzv-id, --rdzv-conf");
	expect_error(parse("--ma=1", "x"), "ambiguous option '--ma' could match --max-restarts");
	expect_error(parse("-z", "x"), "unknown option '-z'");
	expect_error(parse("-mx", "x"), "unknown option '-mx'");
	expect_error(parse("--nproc-per-node"), "option '--nproc-per-node' needs a value");
	expect_error(parse("--standalone=1", "x"), "option '--standalone' takes no value");
	expect_error(parse("--nproc-per-node=2"), "no command given");
	expect_error(parse("--run-path"), "no command given");
	expect_error(parse("-m", "--no-python", "x"), "cannot be used together");
	expect_error(parse("-c", "/nonexistent/crun.yaml", "x"),
		     "cannot read config '/nonexistent/crun.yaml'");
}

static void test_env_precedence(void **state)
{
	const char *env[] = {"PET_NPROC_PER_NODE=3", "PET_STANDALONE=1",
			     "PET_MAX_RESTARTS=9",   "PET_RDZV_CONF=join_timeout=7",
			     "PET_NNODES=",	     NULL};
	char *cfg = write_file("prec.yaml", "nproc_per_node: 5\nmax_restarts: 2\n"
					    "role: fromconfig\n");
	struct run *r;

	(void)state;
	/* command line > PET_ > config > default */
	r = parse_env(env, "-c", cfg, "--max-restarts=1", "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.nproc, 3);
	assert_int_equal(r->o.source[CRUN_OPT_NPROC_PER_NODE], CRUN_SRC_ENV);
	assert_int_equal(r->o.max_restarts, 1);
	assert_int_equal(r->o.source[CRUN_OPT_MAX_RESTARTS], CRUN_SRC_CLI);
	assert_string_equal(r->o.role, "fromconfig");
	assert_int_equal(r->o.source[CRUN_OPT_ROLE], CRUN_SRC_CONFIG);
	assert_int_equal(r->o.config_line[CRUN_OPT_ROLE], 3);
	assert_true(r->o.standalone);
	assert_true(r->o.rdzv_conf.join_timeout_ms == 7000);
	assert_int_equal(r->o.nnodes_max, 1); /* empty PET_ value: unset */
	done(r);

	r = parse_env(NULL, "-c", cfg, "x", NULL);
	assert_int_equal(r->o.nproc, 5);
	assert_int_equal(r->o.max_restarts, 2);
	done(r);
	r = parse_env(env, "--nproc_per_node=2", "x", NULL);
	assert_int_equal(r->o.nproc, 2);
	assert_int_equal(r->o.max_restarts, 9);
	done(r);

	/* Flags: PET_X=0 is off; a non-number is an error naming the variable. */
	{
		const char *e0[] = {"PET_STANDALONE=0", "PET_MODULE=1", NULL};
		const char *e1[] = {"PET_STANDALONE=yes", NULL};
		const char *e2[] = {"PET_NNODES=abc", NULL};
		const char *e3[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=5", NULL};
		const char *e4[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=5", "PET_SHUTDOWN_TIMEOUT=7",
				    NULL};
		const char *e5[] = {"PET_RUN_PATH=1", NULL};
		const char *e6[] = {"PET_RUN_PATH=0", NULL};

		r = parse_env(e0, "x", NULL);
		assert_int_equal(r->rc, 0);
		assert_false(r->o.standalone);
		assert_true(r->o.module);
		done(r);
		expect_error(parse_env(e1, "x", NULL),
			     "invalid value 'yes' for PET_STANDALONE: expected 1 or 0");
		expect_error(parse_env(e2, "x", NULL), "invalid value 'abc' for PET_NNODES");
		r = parse_env(e3, "x", NULL);
		assert_true(r->o.shutdown_timeout_ms == 5000);
		done(r);
		r = parse_env(e4, "x", NULL);
		assert_true(r->o.shutdown_timeout_ms == 7000);
		done(r);
		r = parse_env(e5, "x", NULL);
		assert_int_equal(r->rc, 0);
		assert_true(r->o.run_path);
		done(r);
		r = parse_env(e6, "x", NULL);
		assert_int_equal(r->rc, 0);
		assert_false(r->o.run_path);
		done(r);
	}
}

/* The scheduler's values sit below everything the user wrote; a crun in a
 * worker of a job reads no scheduler; the user's static rendezvous keeps
 * the scheduler's endpoint out; a --hostfile controller reads none. */
static void test_scheduler_source(void **state)
{
	const char *step[] = {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0",	      "SLURM_NNODES=2",
			      "SLURM_NODEID=1",	 "SLURM_JOB_NODELIST=n[1-2]", NULL};
	const char *worker[] = {"SLURM_JOB_ID=77",
				"SLURM_STEP_ID=0",
				"SLURM_NNODES=2",
				"SLURM_NODEID=1",
				"SLURM_JOB_NODELIST=n[1-2]",
				"LOCAL_RANK=0",
				NULL};
	const char *batch[] = {"SLURM_JOB_ID=77", "SLURM_NNODES=2", "SLURM_NODEID=0",
			       "SLURM_JOB_NODELIST=n[1-2]", NULL};
	char *cfg = write_file("sched.yaml", "nnodes: 3\n");
	struct run *r;

	(void)state;
	r = parse_env(step, "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.sched.kind, CRUN_SCHED_SLURM);
	assert_int_equal(r->o.nnodes_max, 2);
	assert_int_equal(r->o.source[CRUN_OPT_NNODES], CRUN_SRC_SCHED);
	assert_int_equal(r->o.source[CRUN_OPT_RDZV_ENDPOINT], CRUN_SRC_SCHED);
	done(r);

	/* config > scheduler */
	r = parse_env(step, "-c", cfg, "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.nnodes_max, 3);
	assert_int_equal(r->o.source[CRUN_OPT_NNODES], CRUN_SRC_CONFIG);
	done(r);

	/* inside a worker: no scheduler, unless asked for */
	r = parse_env(worker, "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.sched.kind, CRUN_SCHED_NONE);
	assert_int_equal(r->o.nnodes_max, 1);
	done(r);
	r = parse_env(worker, "--scheduler=slurm", "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.sched.kind, CRUN_SCHED_SLURM);
	done(r);

	/* the user's static rendezvous: no endpoint from the scheduler */
	r = parse_env(step, "--master-addr=10.0.0.9", "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.source[CRUN_OPT_RDZV_ENDPOINT], CRUN_SRC_DEFAULT);
	assert_int_equal(r->o.source[CRUN_OPT_NNODES], CRUN_SRC_SCHED);
	done(r);
	r = parse_env(step, "--rdzv-backend=static", "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.source[CRUN_OPT_RDZV_ENDPOINT], CRUN_SRC_DEFAULT);
	done(r);
	r = parse_env(step, "--rdzv-backend=c10d", "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.source[CRUN_OPT_RDZV_ENDPOINT], CRUN_SRC_SCHED);
	done(r);

	/* a batch script of several nodes is an error, but not for a
	 * --hostfile controller, which reads no scheduler */
	expect_error(parse_env(batch, "x", NULL), "srun");
	r = parse_env(batch, "--hostfile", write_file("hosts", "a slots=1\nb slots=1\n"), "x",
		      NULL);
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.sched.kind, CRUN_SCHED_NONE);
	done(r);
}

static void test_std_spec(void **state)
{
	static const char *const bad[] = {
		"",	"4",	"-1",	   "33",      "a",   "0:",    ":1",  "0:4",
		"0:1,", ",0:1", "0:1,0:2", "0:1;1:2", "x:1", "0:1:2", "3,2",
	};
	struct crun__std_spec s;
	char err[256];

	(void)state;
	assert_int_equal(crun__launch_parse_std("0", &s, err, sizeof(err)), 0);
	assert_int_equal(s.all, CRUN_STD_NONE);
	crun__std_spec_finish(&s);
	assert_int_equal(crun__launch_parse_std("0:3,2:1,10:2", &s, err, sizeof(err)), 0);
	assert_int_equal(s.count, 3);
	assert_int_equal(crun__std_spec_get(&s, 0), CRUN_STD_ALL);
	assert_int_equal(crun__std_spec_get(&s, 1), CRUN_STD_NONE);
	assert_int_equal(crun__std_spec_get(&s, 2), CRUN_STD_OUT);
	assert_int_equal(crun__std_spec_get(&s, 10), CRUN_STD_ERR);
	crun__std_spec_finish(&s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (crun__launch_parse_std(bad[i], &s, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
		assert_true(err[0]);
	}
}

/* --log-line-prefix-template: the flag, PET_, then torchrun's
 * TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; empty is the default. */
static void test_log_line_prefix_template(void **state)
{
	const char *torch[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=${rank}>", NULL};
	const char *both[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=${rank}>",
			      "PET_LOG_LINE_PREFIX_TEMPLATE=${local_rank}|", NULL};
	const char *empty[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=", NULL};
	char longer[CRUN_LAUNCH_PREFIX_TEMPLATE_MAX + 2];
	struct run *r;

	(void)state;
	r = parse("x");
	assert_null(r->o.log_line_prefix_template);
	done(r);
	r = parse("--log-line-prefix-template", "${role_name}-${rank}:${local_rank}", "x");
	assert_string_equal(r->o.log_line_prefix_template, "${role_name}-${rank}:${local_rank}");
	done(r);
	r = parse("--log_line_prefix_template=[${node}]", "x"); /* kept as written */
	assert_string_equal(r->o.log_line_prefix_template, "[${node}]");
	done(r);
	r = parse_env(torch, "x", NULL);
	assert_string_equal(r->o.log_line_prefix_template, "${rank}>");
	done(r);
	r = parse_env(both, "x", NULL);
	assert_string_equal(r->o.log_line_prefix_template, "${local_rank}|");
	done(r);
	r = parse_env(both, "--log-line-prefix-template=<$rank>", "x", NULL);
	assert_string_equal(r->o.log_line_prefix_template, "<$rank>");
	done(r);
	r = parse_env(empty, "x", NULL);
	assert_int_equal(r->rc, 0);
	assert_null(r->o.log_line_prefix_template);
	done(r);
	r = parse("--log-line-prefix-template=", "x");
	assert_int_equal(r->rc, 0);
	assert_null(r->o.log_line_prefix_template);
	done(r);
	r = parse("-c", write_file("prefix.yaml", "log_line_prefix_template: \"${rank}: \"\n"),
		  "x");
	assert_string_equal(r->o.log_line_prefix_template, "${rank}: ");
	done(r);
	memset(longer, 'a', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	expect_error(parse("--log-line-prefix-template", longer, "x"),
		     "expected a template of at most 256 bytes");
	longer[sizeof(longer) - 2] = '\0';
	r = parse("--log-line-prefix-template", longer, "x");
	assert_int_equal(r->rc, 0);
	done(r);
}

static void test_rdzv_conf(void **state)
{
	static const char *const bad[] = {"join_timeout",
					  "=5",
					  "join_timeout=",
					  "join_timeout=-1",
					  "join_timeout=0",
					  "join_timeout=x",
					  "keep_alive_max_attempt=0",
					  "is_host=maybe",
					  "a=1,,b=2",
					  "join_timeout=1,",
					  "nope=1"};
	struct crun__rdzv_conf c;
	char err[512];

	(void)state;
	crun__rdzv_conf_init(&c);
	assert_int_equal(crun__launch_parse_rdzv_conf("", &c, err, sizeof(err)), 0);
	assert_int_equal(crun__launch_parse_rdzv_conf(
				 " join_timeout = 60 ,last_call_timeout=500ms,close_timeout=2s,"
				 "keep_alive_interval=1,keep_alive_max_attempt=5,is_host=true,"
				 "token_file=/etc/tok,read_timeout=1m",
				 &c, err, sizeof(err)),
			 0);
	assert_true(c.join_timeout_ms == 60000);
	assert_true(c.last_call_timeout_ms == 500);
	assert_true(c.close_timeout_ms == 2000);
	assert_true(c.keep_alive_interval_ms == 1000);
	assert_int_equal(c.keep_alive_max_attempt, 5);
	assert_int_equal(c.is_host, 1);
	assert_string_equal(c.token_file, "/etc/tok");
	assert_true(c.read_timeout_ms == 60000);
	crun__rdzv_conf_finish(&c);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		crun__rdzv_conf_init(&c);
		err[0] = '\0';
		if (crun__launch_parse_rdzv_conf(bad[i], &c, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
		assert_true(err[0]);
		crun__rdzv_conf_finish(&c);
	}
	crun__rdzv_conf_init(&c);
	assert_int_equal(crun__launch_parse_rdzv_conf("nope=1", &c, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "unknown key 'nope' (crun(1) lists the keys under --rdzv-conf)");
	crun__rdzv_conf_finish(&c);
}

/* Every key torchrun's rendezvous backends read (c10d/dynamic, static,
 * etcd, etcd-v2; torch 1.13 to 2.x) is accepted; each value is checked;
 * a mistyped key names the closest one. */
static void test_rdzv_conf_torchrun(void **state)
{
	static const struct {
		const char *conf;
		const char *error; /* NULL: accepted */
	} cases[] = {
		{"timeout=900", NULL},
		{"timeout=5", NULL},
		{"timeout=0", "timeout '0': expected a positive duration"},
		{"heartbeat_timeout=5", NULL},
		{"heartbeat_timeout=soon", "heartbeat_timeout 'soon': expected a positive"},
		{"cas_backoff_max_seconds=0", NULL},
		{"cas_backoff_max_seconds=0.5", NULL},
		{"cas_backoff_max_seconds=-1", "cas_backoff_max_seconds '-1': expected a number"},
		{"use_libuv=1", NULL},
		{"use_libuv=False", NULL},
		{"use_libuv=2", "use_libuv '2': expected true, false, 1 or 0"},
		{"store_type=tcp", NULL},
		{"store_type=TCP", NULL},
		{"store_type=file", "store_type 'file': crun's store is a TCP store"},
		{"rank=0", NULL},
		{"rank=3", NULL},
		{"rank=-1", "rank '-1': expected a whole number, 0 or more"},
		{"protocol=https,cacert=/ca.pem,cert=/c.pem,key=/k.pem,etcd_prefix=/p", NULL},
		{"protocol=ftp", "protocol 'ftp': expected http or https"},
		{"ca_cert=/ca.pem,ssl_cert=/c.pem,ssl_cert_key=/k.pem", NULL},
		{"join_timout=5", "unknown key 'join_timout'; did you mean 'join_timeout'?"},
		{"timout=5", "unknown key 'timout'; did you mean 'timeout'?"},
		{"is-host=1", "unknown key 'is-host'; did you mean 'is_host'?"},
		{"keep_alive_max_attempts=3",
		 "unknown key 'keep_alive_max_attempts'; did you mean 'keep_alive_max_attempt'?"},
		{"read_timeout=5,lastcall_timeout=1",
		 "unknown key 'lastcall_timeout'; did you mean 'last_call_timeout'?"},
		{"local_addr=10.0.0.1", "unknown key 'local_addr' (crun(1) lists the keys"},
	};
	struct crun__rdzv_conf c;
	char err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;

		crun__rdzv_conf_init(&c);
		err[0] = '\0';
		rc = crun__launch_parse_rdzv_conf(cases[i].conf, &c, err, sizeof(err));
		if (!cases[i].error && rc)
			fail_msg("'%s': %s", cases[i].conf, err);
		if (cases[i].error &&
		    (rc != -EINVAL || strncmp(err, cases[i].error, strlen(cases[i].error))))
			fail_msg("'%s': rc %d '%s'", cases[i].conf, rc, err);
		crun__rdzv_conf_finish(&c);
	}

	/* Quotes around the whole value are not part of it. */
	crun__rdzv_conf_init(&c);
	assert_int_equal(
		crun__launch_parse_rdzv_conf("'join_timeout=5,last_call_timeout=1,timeout=5'", &c,
					     err, sizeof(err)),
		0);
	assert_true(c.join_timeout_ms == 5000 && c.last_call_timeout_ms == 1000);
	assert_int_equal(crun__launch_parse_rdzv_conf("\" read_timeout=7 \"", &c, err, sizeof(err)),
			 0);
	assert_true(c.read_timeout_ms == 7000);
	assert_int_equal(crun__launch_parse_rdzv_conf("''", &c, err, sizeof(err)), 0);
	assert_int_equal(crun__launch_parse_rdzv_conf("'timeout=5\"", &c, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "unknown key ''timeout'; did you mean 'timeout'?");
	crun__rdzv_conf_finish(&c);

	/* timeout is static's join timeout, unless join_timeout is given;
	 * with c10d it has no effect (torchrun's c10d backend ignores it). */
	crun__rdzv_conf_init(&c);
	assert_int_equal(crun__launch_parse_rdzv_conf("timeout=5", &c, err, sizeof(err)), 0);
	assert_true(crun__rdzv_conf_join_timeout_ms(&c, true) == 5000);
	assert_true(crun__rdzv_conf_join_timeout_ms(&c, false) == 600000);
	assert_int_equal(crun__launch_parse_rdzv_conf("join_timeout=7", &c, err, sizeof(err)), 0);
	assert_true(crun__rdzv_conf_join_timeout_ms(&c, true) == 7000);
	assert_true(crun__rdzv_conf_join_timeout_ms(&c, false) == 7000);
	crun__rdzv_conf_finish(&c);
	crun__rdzv_conf_init(&c);
	assert_true(crun__rdzv_conf_join_timeout_ms(&c, true) == 600000);
	/* torchrun's keys change none of crun's settings */
	assert_int_equal(crun__launch_parse_rdzv_conf(
				 "heartbeat_timeout=1,use_libuv=0,rank=2,store_type=tcp", &c, err,
				 sizeof(err)),
			 0);
	assert_true(c.read_timeout_ms == 60000 && c.keep_alive_interval_ms == 5000);
	assert_int_equal(c.is_host, -1);
	crun__rdzv_conf_finish(&c);
}

static void test_signals(void **state)
{
	int sigs[CRUN_AGENT_MAX_SIGNALS], n = 0;
	char err[256];

	(void)state;
	assert_int_equal(
		crun__launch_parse_signals("SIGTERM,usr1,SIGTERM,HUP", sigs, &n, err, sizeof(err)),
		0);
	assert_int_equal(n, 3);
	assert_int_equal(sigs[0], SIGTERM);
	assert_int_equal(sigs[1], SIGUSR1);
	assert_int_equal(sigs[2], SIGHUP);
	assert_string_equal(crun__signal_name(SIGUSR2), "SIGUSR2");
	assert_int_equal(crun__launch_parse_signals("", sigs, &n, err, sizeof(err)), -EINVAL);
	assert_int_equal(crun__launch_parse_signals("SIGTERM,", sigs, &n, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(crun__launch_parse_signals("SIGSTOP", sigs, &n, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(crun__launch_parse_signals("SIGCHLD", sigs, &n, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "SIGCHLD"));
	assert_int_equal(crun__launch_parse_signals("15", sigs, &n, err, sizeof(err)), -EINVAL);
}

static void test_config_file(void **state)
{
	struct run *r;
	char *p;

	(void)state;
	p = write_file("ok.yaml", "# launcher config\n"
				  "nproc-per-node: 4\n"
				  "max_restarts: 2\n"
				  "rdzv_conf: {join_timeout: 60, is_host: true}\n"
				  "signals_to_handle: [SIGTERM, SIGUSR1]\n"
				  "local_ranks_filter: [0, 2]\n"
				  "tee: {0: 3, 1: 1}\n"
				  "standalone: yes\n"
				  "log_dir: \"/tmp/with space\"\n");
	r = parse("-c", p, "x");
	assert_int_equal(r->rc, 0);
	assert_int_equal(r->o.nproc, 4);
	assert_int_equal(r->o.max_restarts, 2);
	assert_true(r->o.rdzv_conf.join_timeout_ms == 60000);
	assert_int_equal(r->o.rdzv_conf.is_host, 1);
	assert_int_equal(r->o.nsignals, 2);
	assert_int_equal(r->o.signals[1], SIGUSR1);
	assert_int_equal(r->o.nranks_filter, 2);
	assert_int_equal(r->o.ranks_filter[1], 2);
	assert_int_equal(crun__std_spec_get(&r->o.tee, 0), CRUN_STD_ALL);
	assert_int_equal(crun__std_spec_get(&r->o.tee, 1), CRUN_STD_OUT);
	assert_true(r->o.standalone);
	assert_string_equal(r->o.log_dir, "/tmp/with space");
	assert_string_equal(r->o.config_path, p);
	done(r);

	/* rdzv_conf as a string, --config= form (the last one given is read), files
	 * that set nothing. */
	p = write_file("str.yaml", "rdzv_conf: \"join_timeout=5,read_timeout=2\"\n");
	r = parse("--config=/dev/null", "--config", p, "x");
	assert_int_equal(r->rc, 0);
	assert_true(r->o.rdzv_conf.read_timeout_ms == 2000);
	done(r);
	expect_error(parse("-c", write_file("empty.yaml", ""), "x"),
		     "empty.yaml' is empty: it sets nothing (no content, only comments)");
	expect_error(parse("-c", write_file("comments.yaml", "# nothing\n---\n"), "x"),
		     "comments.yaml' is empty");
	expect_error(parse("-c", write_file("null.yaml", "null\n"), "x"),
		     "null.yaml' line 1: expected a mapping of option names to values");

	expect_error(parse("-c", write_file("unknown.yaml", "max_restarts: 1\n\nnproc: 4\n"), "x"),
		     "unknown.yaml' line 3: unknown key 'nproc'");
	expect_error(
		parse("-c", write_file("type.yaml", "nproc_per_node: [1, 2]\n"), "x"),
		"line 1: wrong type for 'nproc_per_node': expected a single value, got a list");
	expect_error(parse("-c", write_file("map.yaml", "role: {a: b}\n"), "x"),
		     "wrong type for 'role'");
	expect_error(parse("-c", write_file("val.yaml", "\nnproc_per_node: -2\n"), "x"),
		     "line 2: invalid value '-2' for 'nproc_per_node'");
	expect_error(parse("-c", write_file("bool.yaml", "standalone: 2\n"), "x"),
		     "invalid value '2' for 'standalone': expected true or false");
	expect_error(parse("-c", write_file("null.yaml", "role:\n"), "x"),
		     "line 1: missing value for 'role'");
	expect_error(parse("-c", write_file("null2.yaml", "role: NULL\n"), "x"),
		     "line 1: missing value for 'role'");
	expect_error(parse("-c", write_file("dup.yaml", "max_restarts: 1\nmax-restarts: 2\n"), "x"),
		     "line 2: key 'max_restarts' is given twice (first on line 1)");
	expect_error(parse("-c", write_file("syntax.yaml", "a: b: c\n"), "x"), "line 1:");
	expect_error(parse("-c", write_file("list.yaml", "- a\n- b\n"), "x"),
		     "expected a mapping of option names to values");
	expect_error(parse("-c", write_file("two.yaml", "role: a\n---\nrole: b\n"), "x"),
		     "only one YAML document");
	expect_error(parse("-c", write_file("nested.yaml", "rdzv_conf: {a: {b: 1}}\n"), "x"),
		     "values nest at most one level");
	expect_error(parse("-c", write_file("alias.yaml", "role: &r x\nrdzv_id: *r\n"), "x"),
		     "aliases are not supported");
	expect_error(parse("-c", write_file("cfg.yaml", "config: other.yaml\n"), "x"),
		     "unknown key 'config'");
	expect_error(parse("-c", write_file("rdzv.yaml", "rdzv_conf: {bogus: 1}\n"), "x"),
		     "unknown key 'bogus'");
	r = parse("-c", write_file("runpath.yaml", "run_path: true\n"), "x");
	assert_int_equal(r->rc, 0);
	assert_true(r->o.run_path);
	done(r);
	expect_error(parse("-c", tmpdir, "x"), "is a directory, not a file");
	expect_error(parse("-c", "/dev/null", "x"), "not a regular file");
	/* A bad value is reported even where the command line overrides it. */
	expect_error(parse("-c", write_file("over.yaml", "nproc_per_node: zero\n"),
			   "--nproc-per-node=2", "x"),
		     "invalid value 'zero' for 'nproc_per_node'");
}

static void make_dir(const char *path)
{
	assert_int_equal(mkdir(path, 0700), 0);
}

/* An executable file at tmpdir/rel (its directories made). */
static void make_exe(const char *rel)
{
	char path[256];
	char *p;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, rel);
	for (p = strchr(path + strlen(tmpdir) + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		mkdir(path, 0700);
		*p = '/';
	}
	write_file(rel, "#!/bin/sh\n");
	assert_int_equal(chmod(path, 0755), 0);
}

static void test_sibling(void **state)
{
	char bin[192], sbin[192], root[192], launcher[192], pathbin[192], out[256], want[256];
	const char *from;

	(void)state;
	assert_true(crun__launch_is_own_program("crun-train"));
	assert_true(crun__launch_is_own_program("crunctl"));
	assert_true(crun__launch_is_own_program("crun-rdzvd"));
	assert_true(crun__launch_is_own_program("crun-trace-merge"));
	assert_true(crun__launch_is_own_program("crun-plot-loss"));
	assert_false(crun__launch_is_own_program("crun-plot-"));
	assert_false(crun__launch_is_own_program("crun"));
	assert_false(crun__launch_is_own_program("python3"));

	make_exe("t/bin/crun-train");
	make_exe("t/bin/crun-plot-loss");
	make_exe("t/sbin/crun-rdzvd");
	make_exe("t/bin/other");
	write_file("t/bin/crunctl", "not executable\n");
	make_exe("b/src/trainer/crun-train");
	make_exe("b/src/rendezvous/crunctl");
	make_exe("b/src/launcher/crun");
	make_exe("p/crun-train");
	snprintf(bin, sizeof(bin), "%s/t/bin", tmpdir);
	snprintf(sbin, sizeof(sbin), "%s/t/sbin", tmpdir);
	snprintf(root, sizeof(root), "%s/b", tmpdir);
	snprintf(launcher, sizeof(launcher), "%s/b/src/launcher", tmpdir);
	snprintf(pathbin, sizeof(pathbin), "%s/p", tmpdir);

	/* PATH: its entries in order, an empty one the current directory. */
	assert_true(crun__launch_in_path("crun-train", pathbin));
	assert_false(crun__launch_in_path("crun-train", "/nonexistent::/nonexistent2"));
	assert_false(crun__launch_in_path("crunctl", bin));
	assert_false(crun__launch_in_path("t", tmpdir)); /* a directory */

	/* Next to crun, and sbin beside bin for crun-rdzvd. */
	assert_int_equal(crun__launch_find_sibling("crun-train", "/nonexistent", bin, root, out,
						   sizeof(out), &from),
			 0);
	snprintf(want, sizeof(want), "%s/crun-train", bin);
	assert_string_equal(out, want);
	assert_string_equal(from, "next to crun");
	assert_int_equal(
		crun__launch_find_sibling("crun-plot-loss", "", bin, NULL, out, sizeof(out), &from),
		0);
	assert_int_equal(crun__launch_find_sibling("crun-rdzvd", "/nonexistent", bin, NULL, out,
						   sizeof(out), &from),
			 0);
	snprintf(want, sizeof(want), "%s/crun-rdzvd", sbin);
	assert_string_equal(out, want);
	/* Not crun's own, a slash, in PATH, not executable: left to exec. */
	assert_int_equal(crun__launch_find_sibling("other", "/nonexistent", bin, NULL, out,
						   sizeof(out), &from),
			 -ENOENT);
	assert_int_equal(crun__launch_find_sibling("./crun-train", "/nonexistent", bin, NULL, out,
						   sizeof(out), &from),
			 -ENOENT);
	assert_int_equal(crun__launch_find_sibling("crun-train", pathbin, bin, NULL, out,
						   sizeof(out), &from),
			 -ENOENT);
	assert_int_equal(crun__launch_find_sibling("crunctl", "/nonexistent", bin, root, out,
						   sizeof(out), &from),
			 -ENOENT);
	assert_null(from);

	/* The build tree: only for the crun in <root>/src/launcher. */
	assert_int_equal(crun__launch_find_sibling("crun-train", "/nonexistent", launcher, root,
						   out, sizeof(out), &from),
			 0);
	snprintf(want, sizeof(want), "%s/src/trainer/crun-train", root);
	assert_string_equal(out, want);
	assert_string_equal(from, "in crun's build tree");
	assert_int_equal(crun__launch_find_sibling("crunctl", "/nonexistent", launcher, root, out,
						   sizeof(out), &from),
			 0);
	snprintf(want, sizeof(want), "%s/src/rendezvous/crunctl", root);
	assert_string_equal(out, want);
	assert_int_equal(crun__launch_find_sibling("crunctl", "/nonexistent", launcher, NULL, out,
						   sizeof(out), &from),
			 -ENOENT);
}

static void test_count_gpus(void **state)
{
	char gpus[128], dev[128], p[192];

	(void)state;
	snprintf(gpus, sizeof(gpus), "%s/gpus", tmpdir);
	snprintf(dev, sizeof(dev), "%s/dev", tmpdir);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, NULL), 0);
	make_dir(dev);
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/nvidia%d", dev, i);
		write_file(p + strlen(tmpdir) + 1, "");
	}
	write_file("dev/nvidiactl", "");
	write_file("dev/nvidia-uvm", "");
	assert_int_equal(crun__launch_count_gpus(gpus, dev, NULL), 3);
	make_dir(gpus);
	for (int i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/0000:0%d:00.0", gpus, i);
		make_dir(p);
	}
	/* /proc/driver/nvidia/gpus wins over /dev. */
	assert_int_equal(crun__launch_count_gpus(gpus, dev, NULL), 4);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, "0,2"), 2);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, " 3 , 1"), 2);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, ""), 0);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, "-1"), 0);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, "0,1,7,2"), 2);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, "1,1"), 1);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, "GPU-8a3c,MIG-12ab,0"), 3);
	assert_int_equal(crun__launch_count_gpus(gpus, dev, "0,1,2,3,0"), 4);
}

static struct crun__launch_plan *plan_for(struct run *r, const char *const *env,
					  const struct crun__launch_host *host, int expect_rc)
{
	static struct crun__launch_plan plan;
	char err[512];
	int rc;

	assert_int_equal(r->rc, 0);
	rc = crun__launch_plan_make(&plan, &r->o, (char **)env, host, false, err, sizeof(err));
	if (rc != expect_rc)
		fail_msg("plan: %d (%s), expected %d", rc, rc ? err : "", expect_rc);
	if (rc) {
		r->rc = rc;
		strcpy(r->err, err);
	}
	return &plan;
}

static void test_plan(void **state)
{
	struct crun__launch_host nogpu = {
		.gpus_dir = "/nonexistent/g", .dev_dir = "/nonexistent", .ncpus = 6};
	struct crun__launch_host gpus = {.ncpus = 6};
	const char *py[] = {"PYTHON_EXEC=/opt/py/bin/python", NULL};
	char gdir[128];
	struct crun__launch_plan *p;
	struct run *r;

	(void)state;
	snprintf(gdir, sizeof(gdir), "%s/gpus", tmpdir);
	gpus.gpus_dir = gdir;
	gpus.dev_dir = "/nonexistent";

	/* Command resolution. */
	r = parse("train.py", "--lr", "3e-4");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_int_equal(p->argc, 5);
	assert_string_equal(p->argv[0], "python3");
	assert_string_equal(p->argv[1], "-u");
	assert_string_equal(p->argv[2], "train.py");
	assert_string_equal(p->argv[4], "3e-4");
	assert_null(p->argv[5]);
	assert_int_equal(p->nproc, 1);
	assert_string_equal(p->run_id, "none");
	assert_string_equal(p->master_addr, "127.0.0.1");
	assert_int_equal(p->master_port, 0);
	assert_null(p->redirects);
	assert_null(p->console_ranks);
	crun__launch_plan_finish(p);
	done(r);
	r = parse("dir/train.py");
	p = plan_for(r, py, &nogpu, 0);
	assert_string_equal(p->argv[0], "/opt/py/bin/python");
	assert_string_equal(p->argv[2], "dir/train.py");
	crun__launch_plan_finish(p);
	done(r);
	r = parse("-m", "pkg.train", "a");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_int_equal(p->argc, 5);
	assert_string_equal(p->argv[2], "-m");
	assert_string_equal(p->argv[3], "pkg.train");
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--no-python", "tool.py", "a");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_int_equal(p->argc, 2);
	assert_string_equal(p->argv[0], "tool.py");
	crun__launch_plan_finish(p);
	done(r);
	r = parse("/bin/echo", "x.py");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_int_equal(p->argc, 2);
	assert_string_equal(p->argv[0], "/bin/echo");
	crun__launch_plan_finish(p);
	done(r);
	/* --run-path: python -u -c CODE SCRIPT ARGS, over --no-python and -m
	 * too, as torchrun; the job is named after the script. */
	{
		const char *const *cases[] = {
			(const char *[]){"--run-path", "/abs/train.py", "a", "b c", NULL, NULL},
			(const char *[]){"--run-path", "--no-python", "/abs/train.py", "a", "b c",
					 NULL},
			(const char *[]){"--run-path", "-m", "--no-python", "/abs/train.py", "a",
					 "b c", NULL},
		};

		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			struct crun__agent_spec spec = {0};
			const char *const *a = cases[i];

			r = parse(a[0], a[1], a[2], a[3], a[4], a[5]);
			assert_int_equal(r->rc, 0);
			assert_true(r->o.run_path);
			p = plan_for(r, py, &nogpu, 0);
			assert_int_equal(p->argc, 7);
			assert_string_equal(p->argv[0], "/opt/py/bin/python");
			assert_string_equal(p->argv[1], "-u");
			assert_string_equal(p->argv[2], "-c");
			assert_non_null(strstr(p->argv[3], "runpy.run_path(sys.argv[0], "
							   "run_name='__main__')"));
			assert_string_equal(p->argv[4], "/abs/train.py");
			assert_string_equal(p->argv[6], "b c");
			crun__launch_plan_to_spec(p, &r->o, &spec);
			assert_string_equal(spec.name, "/abs/train.py");
			crun__launch_plan_finish(p);
			done(r);
		}
	}

	/* nproc words. */
	r = parse("--nproc-per-node=auto", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_int_equal(p->nproc, 6);
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--nproc-per-node=auto", "x");
	p = plan_for(r, NULL, &gpus, 0);
	assert_int_equal(p->nproc, 4);
	crun__launch_plan_finish(p);
	done(r);
	{
		const char *cvd[] = {"CUDA_VISIBLE_DEVICES=1", NULL};

		r = parse("--nproc-per-node=gpu", "x");
		p = plan_for(r, cvd, &gpus, 0);
		assert_int_equal(p->nproc, 1);
		crun__launch_plan_finish(p);
		done(r);
	}
	r = parse("--nproc-per-node=cpu", "x");
	p = plan_for(r, NULL, &gpus, 0);
	assert_int_equal(p->nproc, 6);
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--nproc-per-node=gpu", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "invalid value 'gpu' for --nproc-per-node: no NVIDIA GPU found");
	{
		const char *env[] = {"PET_NPROC_PER_NODE=gpu", NULL};

		r = parse_env(env, "x", NULL);
		p = plan_for(r, env, &nogpu, -EINVAL);
		crun__launch_plan_finish(p);
		expect_error(r, "for PET_NPROC_PER_NODE: no NVIDIA GPU");
	}

	/* Several nodes: c10d needs an endpoint, static a fixed count. */
	r = parse("--nnodes=2", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "invalid value '2' for --nnodes: more than one node needs --rdzv-endpoint");
	r = parse("--nnodes=1:3", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "invalid value '1:3' for --nnodes");
	r = parse("--nnodes=2:3", "--rdzv-backend=static", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "--rdzv-backend=static needs a fixed number of nodes");
	r = parse("--nnodes=2", "--rdzv-endpoint=[::1]:0", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "invalid value '[::1]:0' for --rdzv-endpoint: a store of several nodes");

	/* c10d: the endpoint (default port 29400), dynamic ranks unless one
	 * is given, is_host decided by the agent. */
	r = parse("--nnodes=2:4", "--rdzv-endpoint=node0", "--rdzv-id=j", "--rdzv-conf",
		  "last_call_timeout=2s,keep_alive_interval=1s", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_true(p->rendezvous);
	assert_string_equal(p->rdzv_host, "node0");
	assert_int_equal(p->rdzv_port, 29400);
	assert_int_equal(p->node_rank, -1);
	assert_int_equal(p->is_host, -1);
	{
		struct crun__agent_spec spec;

		memset(&spec, 0, sizeof(spec));
		crun__launch_plan_to_spec(p, &r->o, &spec);
		assert_true(spec.rdzv.enabled);
		assert_false(spec.host_store);
		assert_string_equal(spec.rdzv.host, "node0");
		assert_int_equal(spec.rdzv.min_nodes, 2);
		assert_int_equal(spec.rdzv.max_nodes, 4);
		assert_int_equal(spec.node_rank, -1);
		assert_true(spec.rdzv.last_call_timeout_ms == 2000);
		assert_true(spec.rdzv.keep_alive_interval_ms == 1000);
		assert_true(spec.rdzv.join_timeout_ms == 600000);
		assert_int_equal(spec.rdzv.keep_alive_max_attempt, 3);
	}
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--nnodes=2", "--node-rank=1", "--rdzv-endpoint=[fd00::1]:7000", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_string_equal(p->rdzv_host, "fd00::1");
	assert_int_equal(p->rdzv_port, 7000);
	assert_int_equal(p->node_rank, 1);
	crun__launch_plan_finish(p);
	done(r);
	/* One node with an endpoint joins a rendezvous too (as torchrun);
	 * --standalone never does, and refuses several nodes rather than
	 * quietly running one. */
	r = parse("--rdzv-endpoint=h:1234", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_true(p->rendezvous);
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--standalone", "--rdzv-endpoint=h:1234", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_false(p->rendezvous);
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--standalone", "--nnodes=2", "--rdzv-endpoint=h:1234", "x");
	plan_for(r, NULL, &nogpu, -EINVAL);
	expect_error(r, "invalid value '2' for --nnodes: --standalone runs one node");

	/* static: the store on master-addr:master-port (29500), node rank 0
	 * hosts it unless is_host says otherwise. */
	r = parse("--nnodes=3", "--rdzv-backend=static", "--node-rank=2", "--master-addr=n0", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_string_equal(p->rdzv_host, "n0");
	assert_int_equal(p->rdzv_port, 29500);
	assert_int_equal(p->node_rank, 2);
	assert_int_equal(p->is_host, 0);
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--nnodes=3", "--rdzv-backend=static", "--master-port=4000", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_string_equal(p->rdzv_host, "127.0.0.1");
	assert_int_equal(p->rdzv_port, 4000);
	assert_int_equal(p->node_rank, 0);
	assert_int_equal(p->is_host, 1);
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--nnodes=2", "--rdzv-backend=static", "--rdzv-conf=is_host=0", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_int_equal(p->is_host, 0);
	crun__launch_plan_finish(p);
	done(r);

	/* Ranks beyond the workers. */
	r = parse("--nproc-per-node=2", "-r", "0:1,2:3", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "invalid value '2:3' for --redirects: local rank 2 is not below");
	r = parse("--nproc-per-node=2", "--local-ranks-filter=1,5", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "invalid value '5' for --local-ranks-filter");

	/* Per-rank arrays, run ids, addresses. */
	r = parse("--nproc-per-node=3", "-r", "1:2", "-t", "3", "--local-ranks-filter=0,2",
		  "--rdzv-id=job7", "--local-addr=node0", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_non_null(p->redirects);
	assert_int_equal(p->redirects[0], CRUN_STD_NONE);
	assert_int_equal(p->redirects[1], CRUN_STD_ERR);
	assert_int_equal(p->tee[2], CRUN_STD_ALL);
	assert_true(p->console_ranks[0] && !p->console_ranks[1] && p->console_ranks[2]);
	assert_string_equal(p->run_id, "job7");
	assert_string_equal(p->master_addr, "node0");
	{
		struct crun__agent_spec spec;

		memset(&spec, 0, sizeof(spec));
		crun__launch_plan_to_spec(p, &r->o, &spec);
		assert_int_equal(spec.nproc_per_node, 3);
		assert_int_equal(spec.nnodes, 1);
		assert_int_equal(spec.max_restarts, 3);
		assert_string_equal(spec.role, "default");
		assert_string_equal(spec.run_id, "job7");
		assert_true(spec.host_store);
		/* The agent store, reached at MASTER_ADDR, a name. */
		assert_true(spec.agent_store);
		assert_string_equal(spec.store_host, "0.0.0.0");
		assert_int_equal(spec.nsignals, 4);
		assert_true(spec.shutdown_timeout_ms == 30000);
		assert_ptr_equal(spec.argv, p->argv);
	}
	crun__launch_plan_finish(p);
	done(r);
	r = parse("--standalone", "--rdzv-id=ignored", "--master-addr=10.1.1.1",
		  "--master-port=2222", "x");
	p = plan_for(r, NULL, &nogpu, 0);
	assert_int_equal(strlen(p->run_id), 36);
	assert_int_equal(p->run_id[14], '4');
	assert_string_equal(p->master_addr, "10.1.1.1");
	assert_int_equal(p->master_port, 2222);
	crun__launch_plan_finish(p);
	done(r);

	/* The token file of --rdzv-conf is read; a missing one is an error. */
	r = parse("--rdzv-conf", "token_file=/nonexistent/tok", "x");
	p = plan_for(r, NULL, &nogpu, -EINVAL);
	crun__launch_plan_finish(p);
	expect_error(r, "for --rdzv-conf: cannot open '/nonexistent/tok'");
}

static void test_free_port(void **state)
{
	int a = 0, b = 0;
	char err[256];

	(void)state;
	assert_int_equal(crun__launch_free_port(&a, err, sizeof(err)), 0);
	assert_int_equal(crun__launch_free_port(&b, err, sizeof(err)), 0);
	assert_true(a > 0 && a < 65536 && b > 0 && b < 65536);
}

static void test_help_layout(void **state)
{
	const struct crun__launch_optdef *defs;
	char *buf = NULL, *line, *save = NULL;
	size_t len = 0, n;
	FILE *f = open_memstream(&buf, &len);

	(void)state;
	assert_non_null(f);
	crun__launch_print_help(f);
	fclose(f);
	defs = crun__launch_optdefs(&n);
	assert_int_equal(n, CRUN_OPT_COUNT);
	for (size_t i = 0; i < n; i++) {
		char flag[64];

		assert_int_equal(defs[i].id, (int)i);
		snprintf(flag, sizeof(flag), "--%s", defs[i].name);
		if (!strstr(buf, flag))
			fail_msg("%s is missing from --help", flag);
	}
	assert_non_null(strstr(buf, "(default: 3)"));
	assert_non_null(strstr(buf, "(default: SIGTERM,SIGINT,SIGHUP,SIGQUIT)"));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (strlen(line) > 79)
			fail_msg("help line longer than 79 columns: '%s'", line);
	free(buf);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_launcher.XXXXXX");
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
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_spellings_and_forms),
		cmocka_unit_test(test_command_boundary),
		cmocka_unit_test(test_bad_command_lines),
		cmocka_unit_test(test_env_precedence),
		cmocka_unit_test(test_scheduler_source),
		cmocka_unit_test(test_std_spec),
		cmocka_unit_test(test_rdzv_conf),
		cmocka_unit_test(test_rdzv_conf_torchrun),
		cmocka_unit_test(test_log_line_prefix_template),
		cmocka_unit_test(test_signals),
		cmocka_unit_test(test_config_file),
		cmocka_unit_test(test_count_gpus),
		cmocka_unit_test(test_sibling),
		cmocka_unit_test(test_plan),
		cmocka_unit_test(test_free_port),
		cmocka_unit_test(test_help_layout),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
