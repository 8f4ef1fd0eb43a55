/* crun-test-exit: a worker that fails on purpose.
 *
 *   crun-test-exit [--fail-rank R] [--fail-below N] [--code C]
 *                  [--signal S] [--delay-ms D] [--stagger-ms T]
 *                  [--others-ms M] [--ignore-term 1]
 *
 * Prints "start rank=<RANK> restart=<TORCHELASTIC_RESTART_COUNT>
 * pid=<pid>". The failing ranks (R, or every rank when R is -1, the
 * default) fail while the restart count is below N (default: always):
 * after D + T * RANK ms they exit with code C (default 1) or, with
 * --signal, raise S. Every other rank sleeps M ms (default 0) and exits 0.
 * With --ignore-term 1 the worker ignores SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (ms > 0 && nanosleep(&ts, &ts) < 0)
		;
}

static long env_long(const char *name)
{
	const char *v = getenv(name);

	return v ? strtol(v, NULL, 10) : -1;
}

int main(int argc, char **argv)
{
	long fail_rank = -1, fail_below = -1, code = 1, sig = 0, delay = 0, others = 0;
	long stagger = 0, ignore_term = 0;
	long rank = env_long("RANK"), restart = env_long("TORCHELASTIC_RESTART_COUNT");

	for (int i = 1; i + 1 < argc; i += 2) {
		long v = strtol(argv[i + 1], NULL, 10);
		if (!strcmp(argv[i], "--fail-rank"))
			fail_rank = v;
		else if (!strcmp(argv[i], "--fail-below"))
			fail_below = v;
		else if (!strcmp(argv[i], "--code"))
			code = v;
		else if (!strcmp(argv[i], "--signal"))
			sig = v;
		else if (!strcmp(argv[i], "--delay-ms"))
			delay = v;
		else if (!strcmp(argv[i], "--others-ms"))
			others = v;
		else if (!strcmp(argv[i], "--stagger-ms"))
			stagger = v;
		else if (!strcmp(argv[i], "--ignore-term"))
			ignore_term = v;
		else {
			fprintf(stderr, "crun-test-exit: unknown option '%s'\n", argv[i]);
			return 64;
		}
	}
	if (ignore_term)
		signal(SIGTERM, SIG_IGN);
	printf("start rank=%ld restart=%ld pid=%d\n", rank, restart, (int)getpid());
	fflush(stdout);
	if ((fail_rank < 0 || fail_rank == rank) && (fail_below < 0 || restart < fail_below)) {
		sleep_ms(delay + stagger * (rank > 0 ? rank : 0));
		if (sig) {
			signal((int)sig, SIG_DFL);
			raise((int)sig);
		}
		return (int)code;
	}
	sleep_ms(others);
	return 0;
}
