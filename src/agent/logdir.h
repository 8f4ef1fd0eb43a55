/* A run's own log directory under --log-dir.
 *
 * Two runs with the same --log-dir must not write into each other's
 * files, nor two nodes that share the directory over a network file
 * system. A job of one node takes a directory of its own under the log
 * dir: named after the run id, or after the UTC time when the run id is
 * the default "none"; when that name is taken, NAME.1, NAME.2, ... A job
 * that may have several nodes shares one directory per run id (the run
 * id as it is, "none" included, since the nodes' clocks differ), and each
 * node takes HOSTNAME, HOSTNAME.1, ... in it (a rerun of the id, or a
 * second agent on the host). The unique names are taken with mkdir(2),
 * which only one process can win. */
#ifndef CRUN_AGENT_LOGDIR_H
#define CRUN_AGENT_LOGDIR_H

#include <stddef.h>
#include <time.h>

/* How many suffixes (.1 up to .CRUN__LOGDIR_TRIES - 1) are tried after the
 * bare name before giving up with -EEXIST. */
#define CRUN__LOGDIR_TRIES 1000

/* The name of try n (0: the bare name) of a run's directory: run_id, or
 * for run_id "none" the UTC time now as 20261202T112233Z; ".n" appended
 * for n > 0. Returns 0, or -ENAMETOOLONG when it does not fit len. */
int crun__logdir_name(char *buf, size_t len, const char *run_id, time_t now, int n);

/* Makes parent (and the directories above it) and then the run's own
 * directory in it. host NULL (a job of one node): the first name of
 * crun__logdir_name() for n = 0, 1, ... that mkdir(2) creates, *out
 * "parent/name". Otherwise parent/run_id, shared (one that exists is
 * used), and in it the first of host, host.1, ... that mkdir(2) creates,
 * *out "parent/run_id/host[.n]". *out is malloc'ed, the caller frees it.
 * Returns 0, or a negative errno (-EEXIST: every name is taken); on
 * failure what (at least PATH_MAX bytes) names the directory that could
 * not be made, for -EEXIST the bare name (n = 0). */
int crun__logdir_make(const char *parent, const char *run_id, const char *host, time_t now,
		      char **out, char *what, size_t whatlen);

#endif
