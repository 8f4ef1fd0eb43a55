/* Unit tests of libcrun's heartbeats (crun_worker_heartbeat*): what they
 * write, and that they never block. libcrun reads CRUN_HEARTBEAT_FD once
 * per process, so each case runs in a child of its own. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <crun/worker.h>

/* Runs fn in a child with CRUN_HEARTBEAT_FD=env (NULL: unset); returns
 * what fn returned (its exit status, offset by 128). */
static int in_child(const char *env, int (*fn)(void))
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		if (env)
			setenv("CRUN_HEARTBEAT_FD", env, 1);
		else
			unsetenv("CRUN_HEARTBEAT_FD");
		_exit(128 + fn());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status) - 128;
}

static int beat_once(void)
{
	return crun_worker_heartbeat(12);
}

static int beat_all(void)
{
	int rc = crun_worker_heartbeat(1184);

	rc = rc ? rc : crun_worker_heartbeat(-1);
	rc = rc ? rc : crun_worker_heartbeat_section("checkpoint", 1);
	rc = rc ? rc : crun_worker_heartbeat_section("checkpoint", 0);
	rc = rc ? rc : crun_worker_heartbeat_work(1185, 0.041);
	rc = rc ? rc : crun_worker_heartbeat_work(0, 0);
	if (rc)
		return rc;
	if (crun_worker_heartbeat_section("a b", 1) != -EINVAL ||
	    crun_worker_heartbeat_section("", 1) != -EINVAL ||
	    crun_worker_heartbeat_section(NULL, 0) != -EINVAL ||
	    crun_worker_heartbeat_work(-1, 1) != -EINVAL ||
	    crun_worker_heartbeat_work(1, -0.5) != -EINVAL ||
	    crun_worker_heartbeat_work(1, NAN) != -EINVAL ||
	    crun_worker_heartbeat_work(1, INFINITY) != -EINVAL ||
	    crun_worker_heartbeat_work(1, 1e300) != -EINVAL)
		return -100;
	return 0;
}

static void read_all(int fd, char *buf, size_t len)
{
	size_t have = 0;
	ssize_t n;

	while (have + 1 < len && (n = read(fd, buf + have, len - 1 - have)) > 0)
		have += (size_t)n;
	buf[have] = '\0';
}

static void test_lines(void **state)
{
	int sv[2];
	char env[16], buf[256];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	snprintf(env, sizeof(env), "%d", sv[1]);
	assert_int_equal(in_child(env, beat_all), 0);
	close(sv[1]);
	read_all(sv[0], buf, sizeof(buf));
	assert_string_equal(buf, "step 1184\nbeat\nsection begin checkpoint\n"
				 "section end checkpoint\nstep 1185 0.041000\nstep 0 0.000000\n");
	close(sv[0]);
}

static void test_pipe(void **state)
{
	int p[2];
	char env[16], buf[64];

	(void)state;
	assert_int_equal(pipe(p), 0);
	snprintf(env, sizeof(env), "%d", p[1]);
	assert_int_equal(in_child(env, beat_once), 0);
	close(p[1]);
	read_all(p[0], buf, sizeof(buf));
	assert_string_equal(buf, "step 12\n");
	close(p[0]);
}

static void test_unset_and_bad(void **state)
{
	(void)state;
	assert_int_equal(in_child(NULL, beat_once), 0);
	assert_int_equal(in_child("", beat_once), 0);
	assert_int_equal(in_child("999", beat_once), -EBADF);
	assert_int_equal(in_child("x", beat_once), -EBADF);
}

static int beat_twice(void)
{
	int rc = crun_worker_heartbeat(12);

	return rc == crun_worker_heartbeat(13) ? rc : -100;
}

/* A descendant that inherited CRUN_HEARTBEAT_FD but not the descriptor,
 * whose number now holds a regular file: refused, and the file is left
 * alone, now and on the next beat. */
static void test_not_a_channel(void **state)
{
	char path[] = "/tmp/crun-test-beat-XXXXXX", env[16];
	struct stat st;
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	unlink(path);
	snprintf(env, sizeof(env), "%d", fd);
	assert_int_equal(in_child(env, beat_twice), -EBADF);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 0);
	close(fd);
}

/* With nobody reading, beats are dropped, never waited for. */
static int beat_full(void)
{
	struct timespec a, b;
	int dropped = 0;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 200000 && !dropped; i++)
		dropped = crun_worker_heartbeat(i) == -EAGAIN;
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (!dropped)
		return -1;
	/* The next one is dropped too, at once. */
	if (crun_worker_heartbeat(1) != -EAGAIN)
		return -2;
	return b.tv_sec - a.tv_sec < 5 ? 0 : -3;
}

static void test_full(void **state)
{
	int sv[2], p[2];
	char env[16];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	snprintf(env, sizeof(env), "%d", sv[1]);
	assert_int_equal(in_child(env, beat_full), 0);
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(pipe(p), 0);
	snprintf(env, sizeof(env), "%d", p[1]);
	assert_int_equal(in_child(env, beat_full), 0);
	close(p[0]);
	close(p[1]);
}

/* crun gone: the reading end closed. -EPIPE, and the worker lives on
 * (no SIGPIPE), on a socket and on a pipe. */
static void test_gone(void **state)
{
	int sv[2], p[2];
	char env[16];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[0]);
	snprintf(env, sizeof(env), "%d", sv[1]);
	assert_int_equal(in_child(env, beat_once), -EPIPE);
	close(sv[1]);
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	snprintf(env, sizeof(env), "%d", p[1]);
	assert_int_equal(in_child(env, beat_once), -EPIPE);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines),	      cmocka_unit_test(test_pipe),
		cmocka_unit_test(test_unset_and_bad), cmocka_unit_test(test_full),
		cmocka_unit_test(test_gone),	      cmocka_unit_test(test_not_a_channel),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
