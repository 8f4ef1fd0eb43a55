/* The guard that keeps workers from outliving crun.
 *
 * Why a process: a parent-death signal (PR_SET_PDEATHSIG) reaches only the
 * worker itself, never what the worker started, and libuv runs no code of
 * ours between fork and exec to set it. A process group reaches them all:
 * every worker leads one (setsid), its children stay in it unless they
 * leave on purpose, and kill(-pgid, SIGKILL) ends the lot. The guard learns
 * each worker's group over a pipe whose write end only crun holds
 * (O_CLOEXEC, so no worker inherits it); the kernel closes that end however
 * crun dies, the guard reads EOF and kills. It blocks in read(2) the whole
 * time: no CPU, no timers.
 *
 * crun is not made a child subreaper (PR_SET_CHILD_SUBREAPER): a group kill
 * reaches grandchildren whoever their parent is by then, and a subreaper
 * would have to reap strangers with waitpid(-1), which would take workers'
 * statuses away from libuv.
 *
 * It is also the watchdog of a stopped agent: with rendezvous, crun says
 * "alive" every keep-alive interval, and when nothing comes for the
 * keep-alive window (crun was SIGSTOPped, or its loop stuck) the store has
 * dropped this node and the others go on without it; the guard then kills
 * the workers, which crun cannot do while it is stopped. It waits in
 * poll(2) with that deadline instead of read(2).
 *
 * Records on the pipe are 8 bytes (op, pgid), written with one write(2) each
 * so they arrive whole (a pipe write of at most PIPE_BUF bytes is atomic). */
#include "agent/reaper.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void agent_remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(dir);
}

enum {
	OP_WATCH = 1,
	OP_FORGET = 2,
	OP_BYE = 3,
	OP_ALIVE = 4, /* pgid: the window in ms */
};

static int64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The watchdog fired: kills every watched group and forgets it. */
static void kill_silent(pid_t *groups, size_t *n, int32_t window_ms)
{
	char line[200];
	int len;

	for (size_t i = 0; i < *n; i++)
		kill(-groups[i], SIGKILL);
	if (!*n)
		return;
	len = snprintf(line, sizeof(line),
		       "crun: the agent was silent for %d ms (stopped?) and has lost its place "
		       "in the job; killed %zu worker process group%s\n",
		       (int)window_ms, *n, *n == 1 ? "" : "s");
	if (len > 0)
		crun__write_all(STDERR_FILENO, line, (size_t)len);
	*n = 0;
}

struct record {
	int32_t op;
	int32_t pgid;
};

/* Leaves fds 0-2 and keep open; returns keep's new number (3). */
static int close_other_fds(int keep)
{
	long max;

	if (keep != 3) {
		if (dup2(keep, 3) < 0)
			return keep;
		close(keep);
		keep = 3;
	}
	if (close_range(4, ~0U, 0) == 0)
		return keep;
	max = sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 65536)
		max = 65536;
	for (int fd = 4; fd < max; fd++)
		close(fd);
	return keep;
}

static void guard_main(int rfd, pid_t *groups, size_t cap, const char *cleanup_dir)
{
	static const int ignored[] = {SIGINT,  SIGTERM, SIGHUP,	 SIGQUIT, SIGPIPE,
				      SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2};
	struct record rec[64];
	size_t n = 0, have = 0;
	int64_t due = -1; /* watchdog deadline (mono_ms); -1: none */
	int32_t window = 0;
	sigset_t none;
	int devnull;

	/* Out of crun's process group: ^C and kill(-crun__pgid) miss us. */
	setpgid(0, 0);
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(ignored); i++)
		signal(ignored[i], SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_NAME, "crun-guard", 0, 0, 0);
	/* Hold nothing of crun's but stderr: no pipe or socket may stay open
	 * because of us. */
	rfd = close_other_fds(rfd);
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		if (devnull > STDERR_FILENO)
			close(devnull);
	}

	for (;;) {
		struct pollfd p = {.fd = rfd, .events = POLLIN};
		int64_t left = due < 0 ? -1 : due - mono_ms();
		ssize_t r;
		int pr;

		if (due >= 0 && left <= 0) {
			kill_silent(groups, &n, window);
			due = -1;
			continue;
		}
		pr = poll(&p, 1, left < 0 ? -1 : (int)(left < INT32_MAX ? left : INT32_MAX));
		if (pr == 0 || (pr < 0 && errno == EINTR))
			continue;
		r = read(rfd, (char *)rec + have, sizeof(rec) - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break; /* crun is gone */
		have += (size_t)r;
		size_t whole = have / sizeof(rec[0]);
		for (size_t i = 0; i < whole; i++) {
			pid_t g = rec[i].pgid;
			switch (rec[i].op) {
			case OP_WATCH:
				if (n < cap && g > 1)
					groups[n++] = g;
				break;
			case OP_FORGET:
				for (size_t j = 0; j < n; j++) {
					if (groups[j] == g) {
						groups[j] = groups[--n];
						break;
					}
				}
				break;
			case OP_BYE:
				_exit(0);
			case OP_ALIVE:
				window = g;
				due = g > 0 ? mono_ms() + g : -1;
				break;
			}
		}
		have -= whole * sizeof(rec[0]);
		memmove(rec, (char *)rec + whole * sizeof(rec[0]), have);
	}
	for (size_t i = 0; i < n; i++)
		kill(-groups[i], SIGKILL);
	if (n) {
		char line[160];
		int len = snprintf(line, sizeof(line),
				   "crun: agent exited unexpectedly; killed %zu worker process "
				   "group%s\n",
				   n, n == 1 ? "" : "s");
		if (len > 0)
			crun__write_all(STDERR_FILENO, line, (size_t)len);
	}
	if (cleanup_dir)
		agent_remove_dir(cleanup_dir);
	_exit(0);
}

int agent_reaper_start(struct reaper *r, size_t capacity, const char *cleanup_dir)
{
	pid_t *groups;
	int fds[2];
	pid_t pid;
	int err;

	r->pid = 0;
	r->fd = -1;
	r->broken = false;
	/* Allocated before fork: the guard does not call malloc. */
	groups = calloc(capacity ? capacity : 1, sizeof(*groups));
	if (!groups)
		return -ENOMEM;
	if (pipe2(fds, O_CLOEXEC) < 0) {
		err = -errno;
		goto out_free;
	}
	pid = fork();
	if (pid < 0) {
		err = -errno;
		close(fds[0]);
		close(fds[1]);
		goto out_free;
	}
	if (pid == 0) {
		close(fds[1]);
		guard_main(fds[0], groups, capacity, cleanup_dir);
	}
	close(fds[0]);
	/* The guard leaves our group itself; doing it here too closes the
	 * window before it runs (either call may lose the race harmlessly). */
	setpgid(pid, pid);
	free(groups);
	r->pid = pid;
	r->fd = fds[1];
	return 0;
out_free:
	free(groups);
	return err;
}

static void send_record(struct reaper *r, int op, pid_t pgid)
{
	struct record rec = {.op = op, .pgid = (int32_t)pgid};
	ssize_t w;

	if (r->fd < 0)
		return;
	do
		w = write(r->fd, &rec, sizeof(rec));
	while (w < 0 && errno == EINTR);
	if (w != (ssize_t)sizeof(rec) && !r->broken) {
		r->broken = true;
		crun__warn("orphan guard is gone: workers may outlive crun if it is killed");
	}
}

void agent_reaper_watch(struct reaper *r, pid_t pgid)
{
	send_record(r, OP_WATCH, pgid);
}

void agent_reaper_forget(struct reaper *r, pid_t pgid)
{
	send_record(r, OP_FORGET, pgid);
}

void agent_reaper_alive(struct reaper *r, int64_t window_ms)
{
	send_record(r, OP_ALIVE, (pid_t)(window_ms < INT32_MAX ? window_ms : INT32_MAX));
}

void agent_reaper_stop(struct reaper *r)
{
	int status;

	if (r->fd >= 0) {
		send_record(r, OP_BYE, 0);
		close(r->fd);
		r->fd = -1;
	}
	if (r->pid > 0) {
		/* Our own direct child, not one of libuv's: waiting for it by
		 * pid does not take a worker's status away from libuv. */
		while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR)
			;
		r->pid = 0;
	}
}
