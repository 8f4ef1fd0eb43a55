/* crun --hostfile, the edge: one agent per host over ssh.
 *
 * The controller (crun__remote_launch) reads the hostfile (hostfile.h),
 * and for node rank i runs, in a session of its own,
 *   ssh -T -o BatchMode=yes [-o OPT]... HOST 'cd DIR && exec env VARS
 *       CRUN_REMOTE_AGENT=1 CRUN OPTIONS --nnodes=N --node-rank=i
 *       --nproc-per-node=SLOTS --rdzv-endpoint=HOST0:PORT --rdzv-id=ID
 *       -- COMMAND'
 * (PORT from the run id, crun__hostfile_rdzv_port) and copies each
 * host's stdout and stderr lines to its own, prefixed "HOST: ". It runs
 * no workers itself.
 *
 * Signals: ssh gives the remote command no signal when its client ends,
 * so the ssh connection's standard input is the control channel. The
 * remote crun (CRUN_REMOTE_AGENT=1, crun__remote_agent_run) runs its agent
 * in a child and reads lines from stdin: a signal name ("SIGINT") is
 * sent to the agent, which handles it as if typed on that host; end of
 * input (the controller ended, was killed, or the connection dropped) is
 * SIGTERM, unless a handled signal came first (the agent is stopping
 * already). The controller writes the name of every handled
 * (--signals-to-handle) and forwarded (--signals-to-forward) signal it
 * receives to every host; after a handled one it waits for every host,
 * bounded by a kill timer. It closes every host's stdin (teardown) when
 * a host ends other than with 0 and no handled signal came. */
#ifndef CRUN_LAUNCHER_REMOTE_H
#define CRUN_LAUNCHER_REMOTE_H

#include <stdbool.h>

#include "agent/agent.h"
#include "launcher/options.h"

/* Runs the job of o on the hosts of o->hostfile (or prints the plan with
 * dry_run: one hostfile.* line per value). argc/argv are main's (the
 * options are passed on to every host, less the hostfile's own); envp
 * gives the variables forwarded (hostfile.h). Returns crun's exit status:
 * 2 for a bad hostfile or options, else as crun__remote_exit_status. */
int crun__remote_launch(const struct crun__launch_opts *o, int argc, char **argv, char **envp,
			bool dry_run);

/* True when envp says crun runs on a host for a controller
 * (CRUN_REMOTE_AGENT=1): the hostfile options are then ignored. */
bool crun__remote_agent_mode(char **envp);

/* Runs crun__agent_run(spec) in a child whose stdin is /dev/null and
 * whose environment lacks CRUN_REMOTE_AGENT (unset in this process), and
 * feeds it the signals read from this process's stdin (above) and those
 * this process receives. Returns the agent's exit status (128+N when a
 * signal N ended it). */
int crun__remote_agent_run(const struct crun__agent_spec *spec);

#endif
