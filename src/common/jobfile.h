/* The jobs running on this machine, as `crun status` finds them: each
 * agent writes one job file at start and removes it at exit.
 *
 * The files live in a directory of the user's own: $XDG_RUNTIME_DIR/crun
 * when XDG_RUNTIME_DIR is an absolute path, else /tmp/crun-<uid>, mode
 * 0700 and owned by the user (a directory that is not, or a symbolic
 * link, is refused: someone else could read or plant files there).
 * Inside it, jobs/<run>.<pid>.json (pid: the agent's, so that agents of
 * one run on one machine keep a file each) holds one JSON object:
 *   {"run_id": "...", "endpoint": "HOST:PORT", "token_file": "PATH" or
 *    absent, "pid": N, "node": "host", "started_ms": N}
 * and its agent holds an exclusive flock on it while it runs.
 * and tokens/<run>.<pid>.token the job token the agent made itself, each mode
 * 0600. <run> is the run id with every byte outside [A-Za-z0-9._-]
 * written %XX, so that any run id is one file name.
 *
 * Every action returns 0 or a negative errno. */
#ifndef CRUN_COMMON_JOBFILE_H
#define CRUN_COMMON_JOBFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct crun__jobfile {
	char run_id[512];
	char endpoint[300];
	char token_file[4096]; /* "": none */
	char node[256];
	long pid;
	uint64_t started_ms;
};

/* The per-user directory into out, from the value of XDG_RUNTIME_DIR
 * (NULL: unset) and the user id. Pure. 0 or -ENAMETOOLONG. */
int crun__jobfile_dir(char *out, size_t len, const char *xdg_runtime_dir, uid_t uid);

/* <dir>/<sub>/<run>.<pid>.<ext>, with the run id encoded as above. Pure.
 * 0 or -ENAMETOOLONG. */
int crun__jobfile_path(char *out, size_t len, const char *dir, const char *sub, const char *run_id,
		       long pid, const char *ext);

/* Creates dir (0700) and dir/sub (0700) as needed and checks that both
 * are directories of this user, not symbolic links, with no access for
 * others (-EPERM otherwise). */
int crun__jobfile_prepare(const char *dir, const char *sub);

/* The file's JSON text (malloc'd, NUL-terminated), or NULL when out of
 * memory. */
char *crun__jobfile_format(const struct crun__jobfile *jf);
/* Parses a job file's text into jf: 0, or -EINVAL for text that is not a
 * job file. Pure. */
int crun__jobfile_parse(const char *text, size_t len, struct crun__jobfile *jf);

/* Writes jf into dir/jobs (prepared), 0600, atomically. lock_fd (NULL:
 * none): a descriptor of the file (close-on-exec) holding an exclusive
 * flock, which says that the job lives: keep it open while the agent
 * runs (the lock ends with the process). */
int crun__jobfile_write(const char *dir, const struct crun__jobfile *jf, int *lock_fd);
/* Writes len bytes of token to dir/tokens/<run>.<pid>.token (prepared),
 * 0600, atomically, and its path into path. */
int crun__jobfile_write_token(const char *dir, const char *run_id, long pid, const void *token,
			      size_t len, char *path, size_t pathlen);
/* Removes the job file and the token file of the run's agent pid, if
 * they are there. */
void crun__jobfile_remove(const char *dir, const char *run_id, long pid);

/* The job files of dir/jobs whose agent still runs: it holds the file's
 * lock (crun__jobfile_write), which a pid cannot say (it may have been
 * reused); a file without it is removed (with its token file), one that
 * is not a job file is skipped.
 * Someone else may have made the directory first (/tmp): dir and dir/jobs
 * must be directories of this user, not symbolic links, with no access
 * for others (-EPERM otherwise), and only regular files of this user that
 * no one else can write are read (never a FIFO, a device or a link).
 * *out: malloc'd array of *n (NULL when none); sorted by run id. 0, or
 * -ENOENT when there is no such directory, or another negative errno. */
int crun__jobfile_list(const char *dir, struct crun__jobfile **out, size_t *n);

#endif
