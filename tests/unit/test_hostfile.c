/* Unit tests of crun --hostfile's core (src/launcher/hostfile.c): the
 * formats, the filters, the command sent to each host and the job's exit
 * status, table-driven. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/hostfile.h"
#include "common/util.h"

/* Parses text, applies the filters, and prints the hosts as
 * "name:nslots[=picked,...] ..." or the error. */
static void run(const char *text, const char *include, const char *exclude, char *out,
		size_t outlen)
{
	struct crun__hostfile hf = {0};
	char err[512];
	size_t used = 0;

	if (crun__hostfile_parse(text, strlen(text), "hf", &hf, err, sizeof(err)) < 0 ||
	    crun__hostfile_filter(&hf, include, exclude, err, sizeof(err)) < 0) {
		snprintf(out, outlen, "error: %s", err);
		crun__hostfile_finish(&hf);
		return;
	}
	out[0] = '\0';
	for (size_t i = 0; i < hf.nhosts; i++) {
		const struct crun__hostfile_host *h = &hf.hosts[i];

		used += (size_t)snprintf(out + used, outlen - used, "%s%s:%d", i ? " " : "",
					 h->name, h->nslots);
		for (int s = 0; h->picked && s < h->nslots; s++)
			used += (size_t)snprintf(out + used, outlen - used, "%c%d", s ? ',' : '=',
						 h->picked[s]);
	}
	crun__hostfile_finish(&hf);
}

static const struct {
	const char *text, *include, *exclude, *want;
} rows[] = {
	/* formats */
	{"a slots=4\nb slots=2\n", NULL, NULL, "a:4 b:2"},
	{"a:4\nb:2", NULL, NULL, "a:4 b:2"},
	{"# c\n\n  a  \n\tb slots=3 # gpu box\n10.0.0.7:2\n", NULL, NULL, "a:1 b:3 10.0.0.7:2"},
	{"a slots=4\r\n", NULL, NULL, "a:4"},
	{"", NULL, NULL,
	 "error: hostfile 'hf': no hosts (expected 'HOST slots=N', 'HOST:N' or "
	 "'HOST')"},
	{"# only\n", NULL, NULL,
	 "error: hostfile 'hf': no hosts (expected 'HOST slots=N', "
	 "'HOST:N' or 'HOST')"},
	{"a\nb\na slots=2\n", NULL, NULL,
	 "error: hostfile 'hf' line 3: host 'a' is listed twice (first on line 1)"},
	{"a slots=0\n", NULL, NULL,
	 "error: hostfile 'hf' line 1: invalid slots '0': expected 1 "
	 "to 4096"},
	{"a slots=x\n", NULL, NULL,
	 "error: hostfile 'hf' line 1: invalid slots 'x': expected 1 "
	 "to 4096"},
	{"a:4097\n", NULL, NULL,
	 "error: hostfile 'hf' line 1: invalid slots '4097': expected 1 "
	 "to 4096"},
	{"a max_slots=3\n", NULL, NULL,
	 "error: hostfile 'hf' line 1: 'a max_slots=3': expected 'HOST slots=N', 'HOST:N' or "
	 "'HOST'"},
	{"a slots=2 extra\n", NULL, NULL,
	 "error: hostfile 'hf' line 1: 'a slots=2 extra': expected 'HOST slots=N', 'HOST:N' or "
	 "'HOST'"},
	{"-oProxyCommand=x\n", NULL, NULL,
	 "error: hostfile 'hf' line 1: invalid host '-oProxyCommand=x': expected a name or IPv4 "
	 "address of letters, digits, '.', '-', '_'"},
	{"a;b\n", NULL, NULL,
	 "error: hostfile 'hf' line 1: invalid host 'a;b': expected a name or IPv4 address of "
	 "letters, digits, '.', '-', '_'"},
	/* --include */
	{"a:4\nb:2\nc:2", "c@a", NULL, "a:4 c:2"},
	{"a:4\nb:2\nc:2", "a:0,2@b", NULL, "a:2=0,2 b:2"},
	{"a:4\nb:2", "a:2,0,2", NULL, "a:2=0,2"},
	{"a:4\nb:2", "a:4", NULL,
	 "error: invalid value for --include: host 'a' has no slot 4 "
	 "(slots 0 to 3)"},
	{"a:4\nb:2", "z", NULL,
	 "error: invalid value for --include: host 'z' is not in the "
	 "hostfile"},
	{"a:4\nb:2", "a@a:1", NULL,
	 "error: invalid value for --include: host 'a' is named "
	 "twice"},
	{"a:4", "a:", NULL,
	 "error: invalid value 'a:' for --include: expected "
	 "HOST[:SLOT,...]@HOST..., e.g. node1@node2:0,2"},
	{"a:4", "a:1,", NULL,
	 "error: invalid value 'a:1,' for --include: expected "
	 "HOST[:SLOT,...]@HOST..., e.g. node1@node2:0,2"},
	{"a:4", "a@", NULL,
	 "error: invalid value 'a@' for --include: expected "
	 "HOST[:SLOT,...]@HOST..., e.g. node1@node2:0,2"},
	/* --exclude */
	{"a:4\nb:2\nc:2", NULL, "b", "a:4 c:2"},
	{"a:4\nb:2\nc:2", NULL, "a:1,3@c", "a:2=0,2 b:2"},
	{"a:2\nb:2", NULL, "a:0,1", "b:2"},
	{"a:2", NULL, "a", "error: invalid value 'a' for --exclude: no host is left"},
	{"a:2", "a", "a", "error: --include and --exclude cannot be used together"},
};

static void test_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(rows); i++) {
		char out[1024];

		run(rows[i].text, rows[i].include, rows[i].exclude, out, sizeof(out));
		if (strcmp(out, rows[i].want))
			print_error("row %zu: got '%s'\n      want '%s'\n", i, out, rows[i].want);
		assert_string_equal(out, rows[i].want);
	}
}

static void test_limits(void **state)
{
	struct crun__hostfile hf = {0};
	size_t n = CRUN_HOSTFILE_MAX_HOSTS + 1, len = 0;
	char *text = malloc(n * 16), err[256];

	(void)state;
	assert_non_null(text);
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(text + len, "h%zu\n", i);
	assert_int_equal(crun__hostfile_parse(text, len, "big", &hf, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "hostfile 'big' line 4097: more than 4096 hosts");
	memset(text, 'a', CRUN_HOSTFILE_MAX_LINE + 1);
	assert_int_equal(crun__hostfile_parse(text, CRUN_HOSTFILE_MAX_LINE + 1, "long", &hf, err,
					      sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "hostfile 'long' line 1: longer than 1024 bytes");
	assert_int_equal(crun__hostfile_parse("a\0b\n", 4, "nul", &hf, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "hostfile 'nul' line 1: a NUL byte");
	crun__hostfile_finish(&hf);
	free(text);
}

static void test_quote(void **state)
{
	char out[64];
	size_t used = 0;

	(void)state;
	assert_int_equal(crun__shell_quote(out, sizeof(out), &used, "plain-word_1.2=/x"), 0);
	assert_int_equal(crun__shell_quote(out, sizeof(out), &used, " it's $HOME"), 0);
	assert_string_equal(out, "plain-word_1.2=/x' it'\\''s $HOME'");
	used = 0;
	assert_int_equal(crun__shell_quote(out, sizeof(out), &used, ""), 0);
	assert_string_equal(out, "''");
	used = 0;
	assert_int_equal(crun__shell_quote(out, 4, &used, "abcd"), -ENOSPC);
}

static void test_agent_argv(void **state)
{
	char *argv[] = {"crun",
			"--hostfile",
			"hf",
			"--max-restarts=0",
			"--incl",
			"a",
			"-r",
			"3",
			"--ssh-options=Port=22",
			"--dry-run",
			"--tee=1",
			"--",
			"train",
			"--hostfile",
			"x",
			NULL};
	int argc = 15;
	char **a =
		crun__hostfile_agent_argv("/bin/crun", argc, argv, 12, 3, 1, 2, "a:29400", "run1");
	const char *want[] = {"/bin/crun",
			      "--max-restarts=0",
			      "-r",
			      "3",
			      "--tee=1",
			      "--nnodes=3",
			      "--node-rank=1",
			      "--nproc-per-node=2",
			      "--rdzv-endpoint=a:29400",
			      "--rdzv-id=run1",
			      "--",
			      "train",
			      "--hostfile",
			      "x",
			      NULL};
	char *cmd, *env[] = {"PATH=/bin",	    "PET_MAX_RESTARTS=1", "NCCL_DEBUG=INFO",
			     "CRUN_REMOTE_AGENT=1", "HOME=/root",	  NULL};

	(void)state;
	assert_non_null(a);
	for (size_t i = 0; want[i]; i++)
		assert_string_equal(a[i], want[i]);
	assert_null(a[CRUN_ARRAY_SIZE(want) - 1]);
	cmd = crun__hostfile_command("/my dir", env, "CUDA_VISIBLE_DEVICES=0,2", a);
	assert_non_null(cmd);
	assert_string_equal(cmd,
			    "cd '/my dir' && exec env PET_MAX_RESTARTS=1 NCCL_DEBUG=INFO "
			    "CUDA_VISIBLE_DEVICES=0,2 CRUN_REMOTE_AGENT=1 /bin/crun "
			    "--max-restarts=0 -r 3 --tee=1 --nnodes=3 --node-rank=1 "
			    "--nproc-per-node=2 --rdzv-endpoint=a:29400 --rdzv-id=run1 -- train "
			    "--hostfile x");
	free(cmd);
	crun__hostfile_argv_free(a);
	/* The user's own endpoint and run id are kept, not added. */
	a = crun__hostfile_agent_argv("/bin/crun", 3, (char *[]){"crun", "--rdzv-id=r", "t", NULL},
				      2, 1, 0, 1, NULL, NULL);
	assert_non_null(a);
	assert_string_equal(a[1], "--rdzv-id=r");
	assert_string_equal(a[4], "--nproc-per-node=1");
	assert_string_equal(a[5], "--");
	assert_string_equal(a[6], "t");
	assert_null(a[7]);
	crun__hostfile_argv_free(a);
}

static void test_exit_status(void **state)
{
	const struct crun__remote_end ok[] = {{0, 0}, {0, 0}};
	const struct crun__remote_end fail[] = {{0, 0}, {1, 0}, {143, 0}};
	const struct crun__remote_end ssh[] = {{255, 0}, {143, 0}};
	const struct crun__remote_end killed[] = {{-1, 9}, {1, 0}};

	(void)state;
	assert_int_equal(crun__remote_exit_status(ok, 2, 0), 0);
	assert_int_equal(crun__remote_exit_status(ok, 0, 0), 0);
	assert_int_equal(crun__remote_exit_status(fail, 3, 0), 1);
	assert_int_equal(crun__remote_exit_status(ssh, 2, 0), 1);
	assert_int_equal(crun__remote_exit_status(killed, 2, 0), 137);
	assert_int_equal(crun__remote_exit_status(fail, 3, 2), 130);
}

static void test_ssh_failure(void **state)
{
	(void)state;
	assert_int_equal(crun__ssh_failure_kind("ssh: connect to host 10.1.1.9 port 22: "
						"Connection refused"),
			 CRUN_SSH_UNREACHABLE);
	assert_int_equal(crun__ssh_failure_kind("ssh: Could not resolve hostname x: Name or "
						"service not known"),
			 CRUN_SSH_UNREACHABLE);
	assert_int_equal(crun__ssh_failure_kind("root@10.1.1.2: Permission denied (publickey)."),
			 CRUN_SSH_AUTH);
	assert_int_equal(crun__ssh_failure_kind("Host key verification failed."),
			 CRUN_SSH_HOST_KEY);
	assert_int_equal(crun__ssh_failure_kind("something else"), CRUN_SSH_OTHER);
}

static void test_env(void **state)
{
	(void)state;
	assert_true(crun__hostfile_env_forwarded("PET_NNODES=2"));
	assert_true(crun__hostfile_env_forwarded("TORCHELASTIC_ERROR_FILE=x"));
	assert_true(crun__hostfile_env_forwarded("OMP_NUM_THREADS=4"));
	assert_false(crun__hostfile_env_forwarded("OMP_NUM_THREADSX=4"));
	assert_false(crun__hostfile_env_forwarded("CRUN_REMOTE_AGENT=1"));
	assert_false(crun__hostfile_env_forwarded("CUDA_VISIBLE_DEVICES=0"));
	assert_false(crun__hostfile_env_forwarded("PATH=/bin"));
	/* The controller's own options stay with it. */
	assert_false(crun__hostfile_env_forwarded("PET_HOSTFILE=hosts"));
	assert_false(crun__hostfile_env_forwarded("PET_INCLUDE=node1"));
	assert_false(crun__hostfile_env_forwarded("PET_EXCLUDE=node1:0"));
	assert_false(crun__hostfile_env_forwarded("PET_SSH_OPTIONS=Port=22"));
	assert_true(crun__hostfile_env_forwarded("PET_INCLUDES=x"));
	assert_true(crun__hostfile_env_forwarded("PET_MAX_RESTARTS=1"));
}

static void test_rdzv_port(void **state)
{
	const char *ids[] = {"job7", "hostfile-0123456789abcdef", "hostfile-0123456789abcdee", ""};

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(ids); i++) {
		int p = crun__hostfile_rdzv_port(ids[i]);

		assert_in_range(p, 29400, 30399);
		assert_int_equal(p, crun__hostfile_rdzv_port(ids[i]));
	}
	assert_int_not_equal(crun__hostfile_rdzv_port(ids[1]), crun__hostfile_rdzv_port(ids[2]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),	    cmocka_unit_test(test_limits),
		cmocka_unit_test(test_quote),	    cmocka_unit_test(test_agent_argv),
		cmocka_unit_test(test_exit_status), cmocka_unit_test(test_ssh_failure),
		cmocka_unit_test(test_env),	    cmocka_unit_test(test_rdzv_port),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
