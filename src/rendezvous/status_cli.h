/* `crun status` and `crunctl status`: one implementation of the command
 * (crun(1) STATUS, crunctl(1)). */
#ifndef CRUN_RENDEZVOUS_STATUS_CLI_H
#define CRUN_RENDEZVOUS_STATUS_CLI_H

/* What crunctl's own options gave before the command (NULL: not given);
 * the command's options override them. */
struct crun__status_cli_defaults {
	const char *endpoint;
	const char *run_id;
	const char *token_file;
	int connect_timeout_ms; /* 0: 5 s */
	int timeout_ms;		/* each call on the store; 0: 5 s */
};

/* Runs the command with the arguments after "status" (argc of them in
 * argv); prog names it in messages ("crun status"). Returns its exit
 * status: 0 shown, 1 no such job, 2 usage, 3 cannot connect or
 * authenticate. */
int crun__status_main(const char *prog, const struct crun__status_cli_defaults *defaults, int argc,
		      char **argv);

/* ---- shared with crunctl's store commands --------------------------------- */

#include <stddef.h>

struct crun_store;

/* endpoint ("HOST:PORT", "[V6]:PORT" or "HOST": port default_port) into
 * host and port, the port 1 to 65535. 0, or 2 (usage) with one line
 * printed. */
int crun__store_endpoint(const char *endpoint, int default_port, char *host, size_t hostlen,
			 int *port);

/* The job token, in the documented order: token_file (the user's
 * --token-file), else $CRUN_TOKEN, else $CRUN_TOKEN_FILE, else
 * job_token_file (named by a job file: used only when it is a regular
 * file of this user). *tok: malloc'd (wipe it, then free), NULL when
 * none. 0; 2 (usage) for a file the user named that cannot be read; 3
 * for the job file's; one line printed. */
int crun__store_token(const char *token_file, const char *job_token_file, char **tok, size_t *len);

/* One line on why a call on s failed with rc: the store's own message
 * when it gave one, else the error's. */
const char *crun__store_reason(const struct crun_store *s, int rc);

#endif
