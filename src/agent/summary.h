/* Failure records, the failure summary, and error files in the JSON
 * format of PyTorch's @record (TORCHELASTIC_ERROR_FILE): the workers'
 * (read) and crun's own (written).
 *
 * Owns: the failure list of an attempt. Knows nothing of workers or of
 * the group: the executor hands it plain records and the job's words. */
#ifndef CRUN_AGENT_SUMMARY_H
#define CRUN_AGENT_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct crun__failure {
	int rank;
	int local_rank;
	pid_t pid;
	int exit_code;
	int term_signal; /* 0: exited normally */
	uint64_t wall_ms;
	char *error_file; /* the worker's TORCHELASTIC_ERROR_FILE; NULL: none */
	char *log_file;	  /* stderr log (else stdout log); NULL: none */
	/* A worker crun found hung: "hung: no heartbeat for 30 s, last step
	 * 1184" and its stacks as taken then (NULL: none). It had not exited
	 * when it was recorded: exit_code and term_signal mean nothing. */
	char *hang;
	char *stack;
	/* The last line the worker wrote on stderr (else stdout), shown as
	 * its message when its error file has none; NULL: none. */
	char *last_line;
};

/* The failures of an attempt, in the order they were seen: the first is
 * the root cause. Zero-initialised it is empty. */
struct crun__failures {
	struct crun__failure *v;
	size_t n, cap;
};

/* Appends a copy of f (its strings copied too). 0 or -ENOMEM. */
int crun__failures_add(struct crun__failures *fl, const struct crun__failure *f);
void crun__failures_clear(struct crun__failures *fl);
/* Clears fl and frees its array. */
void crun__failures_finish(struct crun__failures *fl);

/* "exited with code 3" / "was killed by SIGSEGV" */
void agent_describe_exit(char *buf, size_t len, int exit_code, int term_signal);
/* "SIGTERM", or "signal 70" for one without a name. */
void crun__signal_format(char *buf, size_t len, int sig);

/* The root cause as the summary and crun's error file name it: "rank 3
 * (local_rank 1) on node2 exited with code 1", "... hung: no heartbeat
 * for 30 s, last step 1184". */
void crun__failure_describe(const struct crun__failure *f, const char *hostname, char *buf,
			    size_t len);

/* What the summary says about the job. */
struct crun__summary_job {
	const char *name; /* "train.py" in "train.py FAILED" */
	const char *hostname;
	int restart_count;	    /* "(after 2 restarts)" */
	bool keeps_files;	    /* error files stay (a log directory); else the
				     * summary says that the one it read goes */
	const char *own_error_file; /* crun's TORCHELASTIC_ERROR_FILE; NULL: none */
	/* With rendezvous, when the store ended the last round: its message
	 * (which rank on which host failed, or which node left) and round;
	 * NULL: none. */
	const char *round_end;
	int64_t round;
	/* Why the last failure was not restarted ("not restarting: rank 1
	 * failed the same way twice without progress: ..."); NULL or empty:
	 * it was, or the restarts ran out. */
	const char *not_restarting;
};

/* Prints the failure summary of the last attempt to stderr (torchrun's
 * ChildFailedError table) and, with own_error_file, writes the root cause
 * there. Without a local failure it reports job->round_end if set, else
 * nothing. */
void crun__summary_report(const struct crun__summary_job *job, const struct crun__failures *fl);

/* Writes root-cause JSON: the worker's error file (parsed from err_text,
 * errorCode set to code) if it parses as an object with a "message", else
 * a document made of message and detail. tmp file, fsync, rename. 0 or a
 * negative errno. */
int agent_error_file_write(const char *path, const char *err_text, size_t err_len,
			   const char *message, const char *detail, int code);
/* Reads the error file a worker wrote: message and traceback (malloc'd,
 * NULL when absent). 0, or a negative errno: -ENOENT and the like when
 * the file is missing or unreadable, -EFBIG when it is not a regular file
 * or larger than 4 MiB, -EPROTO when it is not the JSON of @record. */
int agent_error_file_read(const char *path, char **message, char **traceback);

#endif
