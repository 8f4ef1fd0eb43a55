/* Where a hung process is: its stacks, taken from outside, bounded in time.
 *
 * The first tool found is used: `py-spy dump --pid PID` when py-spy is on
 * PATH, else `gdb -batch -p PID -ex 'thread apply all bt'` when gdb is.
 * Their output (stdout and stderr, at most CRUN__STACKDUMP_MAX bytes) is
 * the dump; when neither is installed, or the tool fails or runs out of
 * time (it is then SIGKILLed), the kernel's view is added: /proc/PID/wchan
 * and /proc/PID/stack (readable by root). The tool runs as a child on the
 * loop: nothing blocks. */
#ifndef CRUN_AGENT_STACKDUMP_H
#define CRUN_AGENT_STACKDUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define CRUN__STACKDUMP_MAX (64 * 1024)

struct crun__stackdump;

/* Starts taking pid's stacks. done runs once, from the loop (never from
 * inside this call), within timeout_ms plus a moment, with the text
 * (NUL-terminated, owned by the dump: valid during the call only) and the
 * name of the tool ("py-spy", "gdb", "/proc"). Returns 0, or a negative
 * errno when nothing could be started (then done never runs). */
int crun__stackdump_start(uv_loop_t *loop, pid_t pid, uint64_t timeout_ms,
			  void (*done)(void *arg, const char *text, const char *tool), void *arg);

/* The program named by name on PATH, as execvp(3) finds it
 * (crun__path_search()), into buf: true when found. */
bool crun__find_program(const char *name, char *buf, size_t len);

#endif
