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
};

/* Runs the command with the arguments after "status" (argc of them in
 * argv); prog names it in messages ("crun status"). Returns its exit
 * status: 0 shown, 1 no such job, 2 usage, 3 cannot connect or
 * authenticate. */
int crun__status_main(const char *prog, const struct crun__status_cli_defaults *defaults, int argc,
		      char **argv);

#endif
