/* crun --hostfile: the hosts of a job started over ssh, and what is sent
 * to each. Pure: text in, hosts and command lines out; remote.c is the
 * edge that reads the file, runs ssh and streams the output.
 *
 * The file, one host a line (the forms below, mixed freely):
 *   node1 slots=4      DeepSpeed, Open MPI, horovodrun --hostfile
 *   node2:4            horovodrun -H's form
 *   node3              one slot
 *   # comment          also after a host; blank lines are skipped
 * A host is a name or IPv4 address of letters, digits, '.', '-' and '_'
 * that does not start with '-'. Slots are 1 to CRUN_LAUNCH_MAX_NPROC; a
 * host listed twice is an error.
 *
 * Filters, DeepSpeed's syntax: HOST[:SLOT,SLOT...]@HOST..., where a slot
 * is an index from 0 below the host's slots. --include keeps only the
 * hosts named, and of a host with a slot list only those slots;
 * --exclude drops the hosts named without a slot list and the listed
 * slots of the others (a host left with no slot is dropped). The hosts
 * keep the file's order: node rank i is the i-th host that remains. */
#ifndef CRUN_LAUNCHER_HOSTFILE_H
#define CRUN_LAUNCHER_HOSTFILE_H

#include <stdbool.h>
#include <stddef.h>

#define CRUN_HOSTFILE_MAX_HOSTS 4096
#define CRUN_HOSTFILE_MAX_LINE 1024
#define CRUN_HOSTFILE_MAX_BYTES (1 << 20)
#define CRUN_HOSTFILE_HOST_MAX 255

struct crun__hostfile_host {
	char name[CRUN_HOSTFILE_HOST_MAX + 1];
	int line;   /* in the file, for messages */
	int slots;  /* from the file */
	int nslots; /* slots kept by the filters: the host's workers */
	/* The slot indexes kept, ascending; NULL: all, 0 .. slots-1. Set
	 * when a filter picked slots: the host's workers then see
	 * CUDA_VISIBLE_DEVICES set to this list, as DeepSpeed does. */
	int *picked;
};

struct crun__hostfile {
	size_t nhosts;
	struct crun__hostfile_host *hosts;
};

/* Parses text (len bytes, not necessarily NUL-terminated) into hf, which
 * is replaced. path names the file in messages. Returns 0, or -EINVAL
 * (-ENOMEM) with one line in err: "hostfile 'h' line 3: host 'a' is
 * listed twice (first on line 1)". hf must be finished either way. */
int crun__hostfile_parse(const char *text, size_t len, const char *path, struct crun__hostfile *hf,
			 char *err, size_t errlen);

/* Applies --include (include, NULL: none) or --exclude (exclude) to hf.
 * Both at once, a host or slot the file does not have, a host named
 * twice in a filter, and nothing left are errors (-EINVAL with one line
 * naming the flag). */
int crun__hostfile_filter(struct crun__hostfile *hf, const char *include, const char *exclude,
			  char *err, size_t errlen);

/* Checks the syntax of a filter without a file, as the option parser
 * does: 0 or -EINVAL with what is expected in err. */
int crun__hostfile_check_filter(const char *filter, char *err, size_t errlen);

void crun__hostfile_finish(struct crun__hostfile *hf);

/* ---- what is sent to a host ------------------------------------------ */

/* The environment variables forwarded to every host: names that start
 * with one of these prefixes (NULL-terminated list). */
extern const char *const crun__hostfile_env_prefixes[];
/* True when the variable NAME=VALUE is forwarded: it has such a prefix
 * and is none of CRUN_REMOTE_AGENT and the PET_ variables of the options
 * the hosts do not get (PET_HOSTFILE, PET_INCLUDE, PET_EXCLUDE,
 * PET_SSH_OPTIONS). */
bool crun__hostfile_env_forwarded(const char *entry);

/* One host's command as the remote shell runs it:
 *   cd 'DIR' && exec env 'NAME=V'... 'CRUN_REMOTE_AGENT=1' 'CRUN' 'ARG'...
 * env: the forwarded variables (NAME=VALUE, NULL-terminated; entries
 * not forwarded are skipped); argv: crun's arguments, argv[0] the crun
 * binary. Returns a string the caller frees, or NULL (out of memory, or
 * longer than CRUN_HOSTFILE_MAX_COMMAND). */
#define CRUN_HOSTFILE_MAX_COMMAND (256 * 1024)
char *crun__hostfile_command(const char *dir, char **env, const char *extra_env, char *const *argv);

/* crun's arguments on node rank `rank` of `nnodes`: crun_path, main's
 * options (argv[1 .. command_index), argc words in all) less --hostfile,
 * --include, --exclude, --ssh-options and --dry-run with their values,
 * then --nnodes, --node-rank, --nproc-per-node=nslots, --rdzv-endpoint
 * (endpoint; NULL: the user gave one) and --rdzv-id (run_id; NULL: the
 * user gave one), "--" and the command. NULL-terminated, every string
 * owned: free with crun__hostfile_argv_free. NULL when out of memory. */
char **crun__hostfile_agent_argv(const char *crun_path, int argc, char *const *argv,
				 int command_index, size_t nnodes, size_t rank, int nslots,
				 const char *endpoint, const char *run_id);
void crun__hostfile_argv_free(char **argv);

/* The port of the store on node 0 when --rdzv-endpoint is not given:
 * from the job's run id, in [CRUN_HOSTFILE_PORT_MIN, +PORT_COUNT), below
 * Linux's ephemeral ports, so that two jobs whose first host is the same
 * (almost always) get stores of their own. */
#define CRUN_HOSTFILE_PORT_MIN 29400
#define CRUN_HOSTFILE_PORT_COUNT 1000
int crun__hostfile_rdzv_port(const char *run_id);

/* How one host's ssh ended, in the order the hosts ended. */
struct crun__remote_end {
	int exit_status; /* ssh's exit status, or -1 when a signal ended it */
	int term_signal; /* the signal that ended ssh, else 0 */
};

/* crun's exit status for the job: 128+N when crun itself was ended by
 * signal N (signal > 0); else 0 when every host ended with 0; else the
 * status of the first host to end otherwise (the cause; the rest were
 * torn down after it), where ssh's own failure (255) is 1 and a host
 * whose ssh was killed by signal N is 128+N. */
int crun__remote_exit_status(const struct crun__remote_end *ends, size_t n, int signal);

/* What an ssh failure (exit 255) says, from its last line on stderr. */
enum crun__ssh_failure {
	CRUN_SSH_OTHER = 0,
	CRUN_SSH_UNREACHABLE, /* no route, refused, timed out, no such host */
	CRUN_SSH_AUTH,	      /* Permission denied */
	CRUN_SSH_HOST_KEY,    /* Host key verification failed */
};
enum crun__ssh_failure crun__ssh_failure_kind(const char *line);

#endif
