/* crun-test-fork: a worker that leaves a grandchild behind.
 *
 *   crun-test-fork MARKER [--exit C] [--escape]
 *
 * Forks a grandchild that runs "crun-test-fork --sleeper MARKER" (so ps and
 * pgrep can find it by MARKER) and sleeps up to 60 s in the worker's
 * process group, or in a session of its own with --escape. The worker
 * prints "grandchild <pid>" and then sleeps up to 60 s, or exits with C at
 * once with --exit. Both ignore nothing: SIGTERM and SIGKILL end them. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	bool escape = false;
	int exit_code = -1, ready[2];
	pid_t pid;
	char c;

	if (argc == 3 && !strcmp(argv[1], "--sleeper")) {
		for (int i = 0; i < 600; i++)
			usleep(100000);
		return 0;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: crun-test-fork MARKER [--exit C] [--escape]\n");
		return 64;
	}
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--escape"))
			escape = true;
		else if (!strcmp(argv[i], "--exit") && i + 1 < argc)
			exit_code = atoi(argv[++i]);
	}
	/* The pipe closes when the grandchild execs (O_CLOEXEC): by then
	 * it has left the group if it is to, and carries MARKER. */
	if (pipe2(ready, O_CLOEXEC) < 0)
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		char *args[] = {argv[0], "--sleeper", argv[1], NULL};
		close(ready[0]);
		if (escape)
			setsid();
		execv("/proc/self/exe", args);
		_exit(127);
	}
	close(ready[1]);
	while (read(ready[0], &c, 1) < 0 && errno == EINTR)
		;
	close(ready[0]);
	printf("grandchild %d\n", (int)pid);
	fflush(stdout);
	if (exit_code >= 0)
		return exit_code;
	for (int i = 0; i < 600; i++)
		usleep(100000);
	return 0;
}
