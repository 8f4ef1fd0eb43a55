/* crun-test-signal: how a worker takes signals.
 *
 *   crun-test-signal catch    prints "got SIG<NAME>" on SIGTERM, SIGINT,
 *                             SIGHUP, SIGQUIT or SIGUSR1 and exits 0
 *   crun-test-signal ignore   ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT
 *
 * Either prints "ready <pid>" once its handlers are in place and waits at
 * most 60 s. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t got;

/* LeakSanitizer (in the sanitized builds) skips its exit-time check when
 * this returns non-zero. This test double allocates nothing to check, and
 * that check, run in a worker that has just handled the signal crun
 * forwarded to its process group, now and then never ended: the worker
 * spun while LeakSanitizer's tracer child sat in waitpid, and crun waited
 * for it until its own test gave up. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return 1;
}

static void on_signal(int sig)
{
	got = sig;
}

int main(int argc, char **argv)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1};
	bool ignore = argc == 2 && !strcmp(argv[1], "ignore");

	if (argc != 2 || (!ignore && strcmp(argv[1], "catch"))) {
		fprintf(stderr, "usage: crun-test-signal catch|ignore\n");
		return 64;
	}
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = ignore && sigs[i] != SIGUSR1 ? SIG_IGN : on_signal;
		sigaction(sigs[i], &sa, NULL);
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	for (int i = 0; i < 600 && !got; i++)
		usleep(100000);
	if (got) {
		printf("got SIG%s\n", sigabbrev_np(got));
		fflush(stdout);
	}
	return 0;
}
