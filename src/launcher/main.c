/* crun: parse, resolve, hand the job to the agent. Exit statuses are
 * crun(1)'s: 2 for bad usage or config (nothing started), else the
 * agent's. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/util.h"
#include "launcher/help.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "launcher/remote.h"
#include "launcher/sched_slurm.h"
#include "launcher/sibling.h"
#include "rendezvous/status_cli.h"

#include "crun-config.h"

extern char **environ;

static int set_log_level(char *err, size_t errlen)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	const char *v = crun__env_get("CRUN_LOG_LEVEL");

	for (size_t i = 0; i < CRUN_ARRAY_SIZE(names); i++) {
		if (v && !strcmp(v, names[i])) {
			crun__log_set_level((enum crun__log_level)i);
			return 0;
		}
	}
	snprintf(err, errlen,
		 "invalid value '%s' for CRUN_LOG_LEVEL: expected error, warn, info "
		 "or debug",
		 v ? v : "");
	return -1;
}

/* A command that is one of crun's own programs, missing from PATH, runs
 * from beside crun or from crun's build tree (sibling.h): the workers'
 * argv[0] becomes that path, kept in buf. */
static void find_own_program(struct crun__launch_plan *plan, char *buf, size_t len)
{
	char self[PATH_MAX], root[PATH_MAX];
	const char *build_root = NULL, *from;

	if (!plan->argc || crun__self_dir(self, sizeof(self)) < 0)
		return;
	if (realpath(CRUN_BUILD_ROOT, root))
		build_root = root;
	if (crun__launch_find_sibling(plan->argv[0], getenv("PATH"), self, build_root, buf, len,
				      &from) < 0)
		return;
	crun__info("'%s' is not in PATH; running crun's own '%s' (%s)", plan->argv[0], buf, from);
	plan->argv[0] = buf;
}

int main(int argc, char **argv)
{
	struct crun__launch_opts opts;
	struct crun__launch_plan plan;
	struct crun__agent_spec spec;
	char err[1024], own_program[PATH_MAX];
	int status = 2;

	crun__log_init("crun", CRUN_LOG_INFO);
	/* `crun status`: a command of crun's own (a program called status
	 * runs as `crun -- status`). */
	if (argc > 1 && !strcmp(argv[1], "status")) {
		if (set_log_level(err, sizeof(err)) < 0) {
			crun__error("%s", err);
			return 2;
		}
		return crun__status_main("crun status", NULL, argc - 2, argv + 2);
	}
	crun__launch_opts_init(&opts);
	memset(&plan, 0, sizeof(plan));
	if (set_log_level(err, sizeof(err)) < 0) {
		crun__error("%s", err);
		goto out_finish_opts;
	}
	if (crun__launch_opts_parse(&opts, argc, argv, environ, err, sizeof(err)) < 0) {
		crun__error("%s", err);
		goto out_finish_opts;
	}
	switch (opts.action) {
	case CRUN_LAUNCH_HELP:
		crun__launch_print_help(stdout);
		status = fflush(stdout) ? 1 : 0;
		goto out_finish_opts;
	case CRUN_LAUNCH_VERSION:
		printf("crun %s\n", CRUN_VERSION);
		status = fflush(stdout) ? 1 : 0;
		goto out_finish_opts;
	case CRUN_LAUNCH_RUN:
	case CRUN_LAUNCH_DRY_RUN:
		break;
	}
	if (opts.hostfile && !crun__remote_agent_mode(environ)) {
		status = crun__remote_launch(&opts, argc, argv, environ,
					     opts.action == CRUN_LAUNCH_DRY_RUN);
		goto out_finish_opts;
	}
	if (crun__launch_plan_make(&plan, &opts, environ, NULL, opts.action == CRUN_LAUNCH_RUN, err,
				   sizeof(err)) < 0) {
		crun__error("%s", err);
		goto out_finish_plan;
	}
	find_own_program(&plan, own_program, sizeof(own_program));
	if (opts.action == CRUN_LAUNCH_DRY_RUN) {
		crun__launch_plan_print(stdout, &plan, &opts);
		status = fflush(stdout) ? 1 : 0;
		goto out_finish_plan;
	}
	crun__agent_spec_init(&spec);
	crun__launch_plan_to_spec(&plan, &opts, &spec);
	if (opts.sched.kind != CRUN_SCHED_NONE)
		crun__info("scheduler %s: %s", crun__sched_kind_name(opts.sched.kind),
			   opts.sched.detail);
	spec.quiet_stop_hint = crun__remote_agent_mode(environ);
	status = crun__remote_agent_mode(environ) ? crun__remote_agent_run(&spec)
						  : crun__agent_run(&spec);
	if (crun__slurm_exit_status(status, opts.slurm_requeue) != status) {
		crun__info("ended by SIGTERM: exit %d for Slurm's RequeueExit (--slurm-requeue)",
			   opts.slurm_requeue);
		status = opts.slurm_requeue;
	}
out_finish_plan:
	crun__launch_plan_finish(&plan);
out_finish_opts:
	crun__launch_opts_finish(&opts);
	return status;
}
