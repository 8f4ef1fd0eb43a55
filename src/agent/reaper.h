/* The guard process that kills the workers' process groups if crun dies
 * (reaper.c says why it is a process).
 *
 * Owns: the guard's pid and the write end of its pipe. */
#ifndef CRUN_AGENT_REAPER_H
#define CRUN_AGENT_REAPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The guard: a process forked before any worker that holds the read end
 * of a pipe whose write end only crun holds. crun tells it each worker's
 * process group; when the pipe reaches EOF without a goodbye (crun died,
 * even by SIGKILL) it SIGKILLs every group it knows, removes cleanup_dir,
 * and exits. It is in a process group of its own and ignores the terminal's
 * signals, so ^C or a signal to crun's group does not take it away. */
struct reaper {
	pid_t pid;   /* 0: no guard */
	int fd;	     /* write end, O_CLOEXEC; -1: none */
	bool broken; /* the guard is gone; warned once */
};

/* Forks the guard. capacity: the most groups watched at once. cleanup_dir
 * (may be NULL): a directory whose files the guard removes, with the
 * directory, if crun dies. 0 or a negative errno. */
int agent_reaper_start(struct reaper *r, size_t capacity, const char *cleanup_dir);
/* Tells the guard to kill group pgid if crun dies / to forget it. */
void agent_reaper_watch(struct reaper *r, pid_t pgid);
void agent_reaper_forget(struct reaper *r, pid_t pgid);
/* crun is alive: unless another call comes within window_ms, the guard
 * SIGKILLs every group it watches, forgets them, and says so on stderr
 * (a stopped agent's workers must not run beside the round the others
 * started without it). window_ms 0 turns the watchdog off. */
void agent_reaper_alive(struct reaper *r, int64_t window_ms);
/* Says goodbye (the guard kills nothing), waits for the guard to exit. */
void agent_reaper_stop(struct reaper *r);

/* Removes a directory of plain files (no subdirectories): the agent's
 * private directory of error files, by the agent at the end or by the
 * guard when crun died. */
void agent_remove_dir(const char *dir);

#endif
