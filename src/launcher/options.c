/* The option table and the three readers (command line, PET_ variables,
 * config file) that fill struct crun__launch_opts. Each reader collects raw
 * text per option with its source; every text is checked when it is read
 * (so the message can name where it came from), and the winner of each
 * option is applied at the end. */
#include "launcher/options.h"
#include "launcher/torch_probe.h"
#include "launcher/config.h"
#include "launcher/hostfile.h"
#include "agent/straggler.h"
#include "common/suggest.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define G_WORKERS "Workers"
#define G_NODES "Nodes and rendezvous"
#define G_OUTPUT "Output and logs"
#define G_CRUN "crun"
#define G_LIVENESS "Liveness of the workers"

/* clang-format off */
static const struct crun__launch_optdef optdefs[CRUN_OPT_COUNT] = {
	{ CRUN_OPT_NPROC_PER_NODE, "nproc-per-node", 0, true, true, true,
	  "N|auto|cpu|gpu", "1",
	  "workers on this node: a number, gpu (one per NVIDIA GPU, honouring "
	  "CUDA_VISIBLE_DEVICES), cpu (one per online CPU) or auto (gpu when "
	  "there are GPUs, else cpu)", G_WORKERS },
	{ CRUN_OPT_ROLE, "role", 0, true, true, true, "NAME", "default",
	  "role of the workers (ROLE_NAME); letters, digits, '.', '_', '-'", G_WORKERS },
	{ CRUN_OPT_MODULE, "module", 'm', false, true, true, NULL, NULL,
	  "the command is a Python module: run $PYTHON_EXEC -u -m MODULE ARGS", G_WORKERS },
	{ CRUN_OPT_NO_PYTHON, "no-python", 0, false, true, true, NULL, NULL,
	  "execute the command directly, also a .py file (without it, SCRIPT.py "
	  "runs as $PYTHON_EXEC -u SCRIPT.py)", G_WORKERS },
	{ CRUN_OPT_RUN_PATH, "run-path", 0, false, true, true, NULL, NULL,
	  "run the script with runpy.run_path, as torchrun does: as __main__ in "
	  "$PYTHON_EXEC with sys.argv = [SCRIPT, ARGS...]; takes precedence over "
	  "-m and --no-python", G_WORKERS },
	{ CRUN_OPT_MAX_RESTARTS, "max-restarts", 0, true, true, true, "N", "3",
	  "restarts of the worker group before the job fails; crun restarts by "
	  "default, torchrun's default is 0", G_WORKERS },
	{ CRUN_OPT_MIN_ATTEMPT_TIME, "min-attempt-time", 0, true, true, true,
	  "DURATION", "60s",
	  "an attempt that fails as the previous one did (same rank, exit status "
	  "and error message) is not restarted again unless it ran this long or "
	  "its heartbeat step got further; 0: the rule is off", G_WORKERS },
	{ CRUN_OPT_SHUTDOWN_TIMEOUT, "shutdown-timeout", 0, true, true, true,
	  "DURATION", "30s",
	  "grace between SIGTERM and SIGKILL when workers are stopped: 30, 2.5s, "
	  "500ms, 1m (also TORCH_ELASTIC_SHUTDOWN_TIMEOUT)", G_WORKERS },
	{ CRUN_OPT_SIGNALS_TO_HANDLE, "signals-to-handle", 0, true, true, true,
	  "LIST", "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
	  "signals forwarded to every worker's process group; crun then exits "
	  "128+N", G_WORKERS },
	{ CRUN_OPT_VIRTUAL_LOCAL_RANK, "virtual-local-rank", 0, false, true, true, NULL, NULL,
	  "every worker sees LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES set to its own "
	  "GPU", G_WORKERS },
	{ CRUN_OPT_MONITOR_INTERVAL, "monitor-interval", 0, true, true, true,
	  "DURATION", "0.1",
	  "accepted for torchrun and checked, but unused: crun is event driven "
	  "and never polls its workers", G_WORKERS },
	{ CRUN_OPT_START_METHOD, "start-method", 0, true, true, true,
	  "spawn|fork|forkserver", "spawn",
	  "accepted for torchrun and checked, but unused: crun always executes "
	  "the command in a new process", G_WORKERS },
	{ CRUN_OPT_STRAGGLER_FACTOR, "straggler-factor", 0, true, true, true, "X", "1.5",
	  "warn once about a rank whose step time (from its heartbeats) is X "
	  "times the job's median or more; 0: never", G_WORKERS },
	{ CRUN_OPT_STRAGGLER_WINDOW, "straggler-window", 0, true, true, true, "STEPS", "20",
	  "steps over which a rank's step time is the median, 2 to 10000", G_WORKERS },
	{ CRUN_OPT_SIGNALS_TO_FORWARD, "signals-to-forward", 0, true, true, true,
	  "LIST|none", "SIGUSR1,SIGUSR2",
	  "signals forwarded to every worker's own process while crun goes on "
	  "(Slurm's --signal=USR1@60 warning, which may reach the workers from "
	  "Slurm too); one also in --signals-to-handle ends crun instead", G_WORKERS },
	{ CRUN_OPT_GPU_SAMPLE_INTERVAL, "gpu-sample-interval", 0, true, true, true,
	  "DURATION", "5s",
	  "how often the GPUs are read through NVML (when it is installed) for "
	  "crun status and the metrics; 0: never", G_WORKERS },
	{ CRUN_OPT_GPU_RELEASE_TIMEOUT, "gpu-release-timeout", 0, true, true, true,
	  "DURATION", "50s",
	  "before a restart, wait at most this long for the GPUs to drop the "
	  "failed attempt's processes (NVML); 0: do not wait", G_WORKERS },

	{ CRUN_OPT_NNODES, "nnodes", 0, true, true, true, "N|MIN:MAX", "1",
	  "number of nodes, or MIN:MAX for an elastic job that runs with MIN to "
	  "MAX nodes; more than one node needs --rdzv-endpoint (c10d) or "
	  "--rdzv-backend=static", G_NODES },
	{ CRUN_OPT_NODE_RANK, "node-rank", 0, true, true, true, "N", "0",
	  "rank of this node, below --nnodes: its fixed group rank with static; "
	  "with c10d only when given (else the rendezvous orders the nodes)", G_NODES },
	{ CRUN_OPT_RDZV_BACKEND, "rdzv-backend", 0, true, true, true, "c10d|static", "c10d",
	  "rendezvous backend: c10d (crun's own store and rounds, on "
	  "--rdzv-endpoint) or static (fixed node ranks, store on "
	  "--master-addr:--master-port hosted by node rank 0); unset with "
	  "--master-addr, a fixed --nnodes and no --rdzv-endpoint: static, as "
	  "torchrun", G_NODES },
	{ CRUN_OPT_RDZV_ENDPOINT, "rdzv-endpoint", 0, true, true, true,
	  "HOST[:PORT]", "none, port 29400",
	  "the rendezvous store, the same on every node: the agent on that host "
	  "serves it (or a crun-rdzvd there); IPv6 as [ADDR]:PORT", G_NODES },
	{ CRUN_OPT_RDZV_ID, "rdzv-id", 0, true, true, true, "ID", "none",
	  "job id shared by every node (TORCHELASTIC_RUN_ID); letters, digits "
	  "and . _ - : @ +", G_NODES },
	{ CRUN_OPT_RDZV_CONF, "rdzv-conf", 0, true, true, true, "K=V,...", "none",
	  "rendezvous settings: join_timeout (600s), last_call_timeout (30s), "
	  "close_timeout (30s), keep_alive_interval (5s), keep_alive_max_attempt "
	  "(3), is_host (from the endpoint), token_file (none), read_timeout "
	  "(60s), rejoin_timeout (join_timeout), blacklist_failures (3), "
	  "blacklist_window (10m), blacklist_cooldown_range (30s:5m), "
	  "reconnect_timeout (60s), timeout (static: join_timeout); torchrun's "
	  "heartbeat_timeout, cas_backoff_max_seconds, use_libuv, store_type "
	  "(tcp), rank and the etcd keys are checked and have no effect; see "
	  "crun(1)", G_NODES },
	{ CRUN_OPT_STANDALONE, "standalone", 0, false, true, true, NULL, NULL,
	  "one node with its own store on a free port and a random run id; "
	  "--rdzv-backend, --rdzv-endpoint and --rdzv-id are ignored (as in "
	  "torchrun)", G_NODES },
	{ CRUN_OPT_MASTER_ADDR, "master-addr", 0, true, true, true, "ADDR",
	  "--local-addr, else 127.0.0.1",
	  "one node: MASTER_ADDR for the workers; static: the store's address",
	  G_NODES },
	{ CRUN_OPT_MASTER_PORT, "master-port", 0, true, true, true, "PORT",
	  "a free port; static: 29500",
	  "one node: MASTER_PORT for the workers, 1-65535; static: the store's "
	  "port (on several nodes the node of rank 0 picks MASTER_PORT)", G_NODES },
	{ CRUN_OPT_LOCAL_ADDR, "local-addr", 0, true, true, true, "ADDR",
	  "the address the store sees",
	  "address of this node as the other nodes reach it (their MASTER_ADDR "
	  "when it holds rank 0)", G_NODES },
	{ CRUN_OPT_AGENT_STORE, "agent-store", 0, true, true, true, "auto|on|off",
	  "auto",
	  "on: PyTorch workers get TORCHELASTIC_USE_AGENT_STORE=True and "
	  "MASTER_ADDR:MASTER_PORT naming crun's store, which speaks TCPStore; "
	  "off: rank 0's worker hosts its TCPStore there; auto: on unless the "
	  "workers' PyTorch is not one of " CRUN_TORCH_RANGE " or "
	  "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", G_NODES },
	{ CRUN_OPT_SCHEDULER, "scheduler", 0, true, true, true,
	  "auto|slurm|kubernetes|none", "auto",
	  "read the job's shape (nodes, node rank, rendezvous endpoint, run id, "
	  "workers) from the scheduler that started crun: Slurm's SLURM_* "
	  "variables under srun, Kubernetes' (Kubeflow PyTorchJob, Trainer v2, "
	  "Indexed Job); auto: whichever is found; flags, PET_ variables and the "
	  "config file win over what is read", G_NODES },
	{ CRUN_OPT_SLURM_TASKS_AS_NODES, "slurm-tasks-as-nodes", 0, false, true, true,
	  NULL, NULL,
	  "in a Slurm step of several tasks per node, each task is one node of "
	  "the job (node rank SLURM_PROCID, its own GPUs); without it several "
	  "tasks per node are an error", G_NODES },
	{ CRUN_OPT_SLURM_REQUEUE, "slurm-requeue", 0, true, true, true,
	  "STATUS|none", "none",
	  "when crun ends on SIGTERM, exit STATUS (1-255) instead of 143: a "
	  "value of slurm.conf's RequeueExit, which requeues a job whose batch "
	  "script exits with it; never one Slurm ended (time limit, scancel)",
	  G_NODES },
	{ CRUN_OPT_HOSTFILE, "hostfile", 0, true, true, true, "FILE", "none",
	  "start one agent per host of FILE over ssh (lines 'HOST slots=N' as "
	  "DeepSpeed's, 'HOST:N' as horovodrun -H's, or 'HOST'; slots are the "
	  "host's workers), node 0 on the first host, and stream their output "
	  "back prefixed with the host; see crun(1) HOSTFILE", G_NODES },
	{ CRUN_OPT_INCLUDE, "include", 0, true, true, true, "HOST[:SLOTS]@...",
	  "all", "--hostfile: only these hosts, and of a host with a list only "
	  "those slots, e.g. node1@node2:0,2 (DeepSpeed's syntax)", G_NODES },
	{ CRUN_OPT_EXCLUDE, "exclude", 0, true, true, true, "HOST[:SLOTS]@...",
	  "none", "--hostfile: leave out these hosts, or of a host with a list "
	  "those slots", G_NODES },
	{ CRUN_OPT_SSH_OPTIONS, "ssh-options", 0, true, true, true, "K=V,...",
	  "none", "--hostfile: ssh options given to every ssh as -o K=V, e.g. "
	  "Port=2222,IdentityFile=/path/key; crun always adds BatchMode=yes", G_NODES },

	{ CRUN_OPT_LOG_DIR, "log-dir", 0, true, true, true, "DIR", "none",
	  "write the workers' redirected and teed streams to RUN_DIR/"
	  "attempt_N/LOCAL_RANK/{stdout,stderr}.log, where RUN_DIR is this run's "
	  "own: DIR/RUN_ID, or DIR/<UTC time> for the run id none, with .1, .2, ... "
	  "when taken", G_OUTPUT },
	{ CRUN_OPT_REDIRECTS, "redirects", 'r', true, true, true, "SPEC", "0",
	  "streams that go to the log files only: 0 none, 1 stdout, 2 stderr, "
	  "3 both, for every local rank, or per rank as 0:1,1:2", G_OUTPUT },
	{ CRUN_OPT_TEE, "tee", 't', true, true, true, "SPEC", "0",
	  "streams that go to the log files and the console, also those "
	  "--redirects names (as --redirects)", G_OUTPUT },
	{ CRUN_OPT_LOCAL_RANKS_FILTER, "local-ranks-filter", 0, true, true, true,
	  "LIST", "all",
	  "local ranks whose output reaches the console, e.g. 0,2 (log files "
	  "keep every rank)", G_OUTPUT },
	{ CRUN_OPT_LOG_LINE_PREFIX_TEMPLATE, "log-line-prefix-template", 0, true, true,
	  true, "TEMPLATE", "[${rank}]:, or [${role_name}${rank}]: with --role",
	  "prefix of each console line, torchrun's template: ${role_name}, "
	  "${rank}, ${local_rank}, ${hostname} are substituted, other text kept "
	  "(also TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)", G_OUTPUT },
	{ CRUN_OPT_EVENTS, "events", 0, true, true, true, "FILE", "none",
	  "append the job's events (rounds, members, workers, restarts, the "
	  "store, stragglers) to FILE, one JSON object per line; see crun(1) "
	  "EVENTS", G_OUTPUT },

	{ CRUN_OPT_HEARTBEAT_TIMEOUT, "heartbeat-timeout", 0, true, true, true,
	  "DURATION", "180s",
	  "a worker that beats on CRUN_HEARTBEAT_FD and then is silent this "
	  "long is hung: its stack is taken and the group restarts; 0: off",
	  G_LIVENESS },
	{ CRUN_OPT_HEARTBEAT_INITIAL_TIMEOUT, "heartbeat-initial-timeout", 0, true, true,
	  true, "DURATION", "600s",
	  "from a worker's first heartbeat line to its first beat or section "
	  "end; 0: off", G_LIVENESS },
	{ CRUN_OPT_HEARTBEAT_SECTION_TIMEOUTS, "heartbeat-section-timeouts", 0, true, true,
	  true, "NAME=DURATION,...", "none",
	  "timeouts of named sections (section begin NAME ... section end "
	  "NAME), e.g. checkpoint=10m,eval=5m", G_LIVENESS },
	{ CRUN_OPT_HEARTBEAT_AUTO_FACTOR, "heartbeat-auto-factor", 0, true, true, true,
	  "F", "0 (off)",
	  "once a worker has beaten 5 times after its first beat, its steady "
	  "timeout becomes F times the longest interval between its beats (at "
	  "least 1 s)", G_LIVENESS },
	{ CRUN_OPT_CONFIG, "config", 'c', true, false, false, "FILE", "none",
	  "read options from a YAML file (keys as the long options, e.g. "
	  "nproc_per_node: 4); the command line and PET_ variables win", G_CRUN },
	{ CRUN_OPT_DRY_RUN, "dry-run", 0, false, false, false, NULL, NULL,
	  "print the resolved configuration as key=value lines and exit without "
	  "starting anything", G_CRUN },
	{ CRUN_OPT_HELP, "help", 'h', false, false, false, NULL, NULL,
	  "print this help and exit", G_CRUN },
	{ CRUN_OPT_VERSION, "version", 0, false, false, false, NULL, NULL,
	  "print the version and exit", G_CRUN },
	{ CRUN_OPT_METRICS_PORT, "metrics-port", 0, true, true, true, "PORT", "off",
	  "serve Prometheus metrics of this node at http://HOST:PORT/metrics "
	  "(crun(1) METRICS); 0 picks a free port, printed at start", G_CRUN },
	{ CRUN_OPT_METRICS_HOST, "metrics-host", 0, true, true, true, "ADDR",
	  "0.0.0.0",
	  "address the metrics endpoint listens on; 127.0.0.1 keeps it to this "
	  "machine", G_CRUN },
};
/* clang-format on */

/* The PET_ names, computed once from the table (PET_NPROC_PER_NODE). */
static char pet_names[CRUN_OPT_COUNT][48];

static const char *const torch_shutdown_env = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
static const char *const torch_prefix_env = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";

const struct crun__launch_optdef *crun__launch_optdefs(size_t *count)
{
	*count = CRUN_OPT_COUNT;
	return optdefs;
}

static const char *pet_name(enum crun__launch_opt id)
{
	char *p = pet_names[id];

	if (!optdefs[id].pet)
		return NULL;
	if (!*p) {
		const char *n = optdefs[id].name;
		size_t i = 0;

		memcpy(p, "PET_", 4);
		for (i = 0; n[i] && i + 5 < sizeof(pet_names[id]); i++)
			p[4 + i] = n[i] == '-' ? '_' : (char)toupper((unsigned char)n[i]);
		p[4 + i] = '\0';
	}
	return p;
}

/* "nproc-per-node" -> "nproc_per_node", the config key as written in
 * messages. */
static void config_key(enum crun__launch_opt id, char *buf, size_t len)
{
	size_t i;

	for (i = 0; optdefs[id].name[i] && i + 1 < len; i++)
		buf[i] = optdefs[id].name[i] == '-' ? '_' : optdefs[id].name[i];
	buf[i] = '\0';
}

void crun__launch_config_key(enum crun__launch_opt id, char *out, size_t outlen)
{
	config_key(id, out, outlen);
}

/* Looks a name up in either spelling; NULL when unknown. */
static const struct crun__launch_optdef *find_long(const char *name, size_t len)
{
	for (size_t i = 0; i < CRUN_OPT_COUNT; i++) {
		const char *n = optdefs[i].name;
		size_t j;

		if (strlen(n) != len)
			continue;
		for (j = 0; j < len; j++) {
			char c = name[j] == '_' ? '-' : name[j];

			if (c != n[j])
				break;
		}
		if (j == len)
			return &optdefs[i];
	}
	return NULL;
}

/* True when name[0..len) ('_' read as '-') starts option name n. */
static bool is_prefix(const char *name, size_t len, const char *n)
{
	if (strlen(n) < len)
		return false;
	for (size_t j = 0; j < len; j++)
		if ((name[j] == '_' ? '-' : name[j]) != n[j])
			return false;
	return true;
}

/* An unknown long option, with the closest option named when one is
 * close ("--nproc-per-nod3": did you mean --nproc-per-node?). */
static void unknown_long(const char *name, size_t len, const char *shown, char *err, size_t errlen)
{
	const char *names[CRUN_OPT_COUNT], *near = NULL;
	char typed[CRUN__EDIT_MAX_LEN + 1];

	if (len < sizeof(typed)) {
		for (size_t j = 0; j < len; j++)
			typed[j] = name[j] == '_' ? '-' : name[j];
		typed[len] = '\0';
		for (size_t i = 0; i < CRUN_OPT_COUNT; i++)
			names[i] = optdefs[i].name;
		near = crun__closest_word(typed, names, CRUN_OPT_COUNT);
	}
	if (near)
		crun__seterr(err, errlen, "unknown option '%s'; did you mean '--%s'?", shown, near);
	else
		crun__seterr(err, errlen, "unknown option '%s' (see crun --help)", shown);
}

/* The long option a command line names, as argparse finds it: the exact
 * name, else the one option it is a prefix of. NULL with the reason in
 * err (shown: the option as typed) when none or several are. */
static const struct crun__launch_optdef *
find_long_abbrev(const char *name, size_t len, const char *shown, char *err, size_t errlen)
{
	const struct crun__launch_optdef *d = find_long(name, len), *found = NULL;
	char list[512];
	size_t used = 0, n = 0;

	if (d)
		return d;
	list[0] = '\0';
	for (size_t i = 0; len && i < CRUN_OPT_COUNT; i++) {
		if (!is_prefix(name, len, optdefs[i].name))
			continue;
		found = &optdefs[i];
		n++;
		if (used < sizeof(list)) {
			int w = snprintf(list + used, sizeof(list) - used, "%s--%s",
					 n > 1 ? ", " : "", optdefs[i].name);

			used += w > 0 ? (size_t)w : 0;
		}
	}
	if (n == 1)
		return found;
	if (n > 1)
		crun__seterr(err, errlen, "ambiguous option '%s' could match %s", shown, list);
	else
		unknown_long(name, len, shown, err, errlen);
	return NULL;
}

static const struct crun__launch_optdef *find_short(char c)
{
	for (size_t i = 0; i < CRUN_OPT_COUNT; i++)
		if (optdefs[i].short_name && optdefs[i].short_name == c)
			return &optdefs[i];
	return NULL;
}

const struct crun__launch_optdef *crun__launch_cli_lookup(const char *arg, bool *inline_value)
{
	char scratch[256];

	*inline_value = false;
	if (arg[0] != '-' || !arg[1] || !strcmp(arg, "--"))
		return NULL;
	if (arg[1] == '-') {
		const char *eq = strchr(arg + 2, '=');
		size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);

		*inline_value = eq != NULL;
		return find_long_abbrev(arg + 2, len, arg, scratch, sizeof(scratch));
	}
	*inline_value = arg[2] != '\0';
	return find_short(arg[1]);
}

/* ---- std specs, signals (rdzv conf: rdzv_conf.c) -------------------- */

int crun__launch_parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};

	for (size_t i = 0; i < CRUN_ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(v, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(v, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

void crun__std_spec_finish(struct crun__std_spec *spec)
{
	free(spec->ranks);
	free(spec->streams);
	memset(spec, 0, sizeof(*spec));
}

enum crun__std crun__std_spec_get(const struct crun__std_spec *spec, int lr)
{
	for (size_t i = 0; i < spec->count; i++)
		if (spec->ranks[i] == lr)
			return spec->streams[i];
	return spec->all;
}

#define STD_EXPECTED                                                                   \
	"expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank as " \
	"0:1,1:2"

static int parse_stream(const char *s, size_t len, enum crun__std *out)
{
	if (len != 1 || s[0] < '0' || s[0] > '3')
		return -EINVAL;
	*out = (enum crun__std)(s[0] - '0');
	return 0;
}

int crun__launch_parse_std(const char *s, struct crun__std_spec *out, char *err, size_t errlen)
{
	struct crun__std_spec spec = {.all = CRUN_STD_NONE};
	const char *p = s;
	size_t n = 1;

	if (!strchr(s, ':')) {
		if (parse_stream(s, strlen(s), &spec.all) < 0)
			goto bad;
		*out = spec;
		return 0;
	}
	for (const char *q = s; *q; q++)
		n += *q == ',';
	spec.ranks = calloc(n, sizeof(*spec.ranks));
	spec.streams = calloc(n, sizeof(*spec.streams));
	if (!spec.ranks || !spec.streams) {
		crun__std_spec_finish(&spec);
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	while (spec.count < n) {
		const char *comma = strchr(p, ','), *colon = strchr(p, ':');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char rank[16];
		int64_t r;

		if (!colon || colon >= p + len || (size_t)(colon - p) >= sizeof(rank) || colon == p)
			goto bad_free;
		memcpy(rank, p, (size_t)(colon - p));
		rank[colon - p] = '\0';
		if (!isdigit((unsigned char)rank[0]) ||
		    crun__parse_int64(rank, 0, CRUN_LAUNCH_MAX_NPROC - 1, &r, NULL, 0) < 0)
			goto bad_free;
		if (parse_stream(colon + 1, len - (size_t)(colon + 1 - p),
				 &spec.streams[spec.count]) < 0)
			goto bad_free;
		for (size_t i = 0; i < spec.count; i++) {
			if (spec.ranks[i] == r) {
				crun__seterr(err, errlen, "local rank %d is given twice", (int)r);
				crun__std_spec_finish(&spec);
				return -EINVAL;
			}
		}
		spec.ranks[spec.count++] = (int)r;
		p += len + 1;
	}
	*out = spec;
	return 0;
bad_free:
	crun__std_spec_finish(&spec);
bad:
	crun__seterr(err, errlen, STD_EXPECTED);
	return -EINVAL;
}

static const struct {
	int sig;
	const char *name;
} signal_names[] = {
	{SIGHUP, "SIGHUP"},	  {SIGINT, "SIGINT"},	{SIGQUIT, "SIGQUIT"},
	{SIGILL, "SIGILL"},	  {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},
	{SIGBUS, "SIGBUS"},	  {SIGFPE, "SIGFPE"},	{SIGKILL, "SIGKILL"},
	{SIGUSR1, "SIGUSR1"},	  {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
	{SIGPIPE, "SIGPIPE"},	  {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
	{SIGCHLD, "SIGCHLD"},	  {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},
	{SIGTSTP, "SIGTSTP"},	  {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},
	{SIGURG, "SIGURG"},	  {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
	{SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
	{SIGIO, "SIGIO"},	  {SIGPWR, "SIGPWR"},	{SIGSYS, "SIGSYS"},
};

const char *crun__signal_name(int sig)
{
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(signal_names); i++)
		if (signal_names[i].sig == sig)
			return signal_names[i].name;
	return NULL;
}

int crun__launch_parse_signals(const char *s, int *sigs, int *nsigs, char *err, size_t errlen)
{
	const char *p = s;
	int n = 0;

	for (;;) {
		size_t len = strcspn(p, ",");
		char name[16];
		int sig = 0;

		if (len == 0 || len >= sizeof(name)) {
			crun__seterr(err, errlen,
				     "expected a comma-separated list of signal names like "
				     "SIGTERM,SIGUSR1");
			return -EINVAL;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		for (size_t i = 0; i < CRUN_ARRAY_SIZE(signal_names); i++) {
			const char *full = signal_names[i].name;

			if (!strcasecmp(name, full) || !strcasecmp(name, full + 3)) {
				sig = signal_names[i].sig;
				break;
			}
		}
		if (!sig) {
			crun__seterr(err, errlen,
				     "unknown signal '%s'; expected names like SIGTERM or "
				     "SIGUSR1",
				     name);
			return -EINVAL;
		}
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
			crun__seterr(err, errlen, "%s cannot be handled: %s",
				     crun__signal_name(sig),
				     sig == SIGCHLD ? "crun needs it to supervise the workers"
						    : "it cannot be caught");
			return -EINVAL;
		}
		bool dup = false;
		for (int i = 0; i < n; i++)
			dup |= sigs[i] == sig;
		if (!dup) {
			if (n >= CRUN_AGENT_MAX_SIGNALS) {
				crun__seterr(err, errlen, "more than %d signals",
					     CRUN_AGENT_MAX_SIGNALS);
				return -EINVAL;
			}
			sigs[n++] = sig;
		}
		if (!p[len])
			break;
		p += len + 1;
	}
	*nsigs = n;
	return 0;
}

/* ---- values of single options ---------------------------------------- */

static bool is_name_char(char c, const char *extra)
{
	return isalnum((unsigned char)c) || (c && strchr(extra, c));
}

static int check_word(const char *v, const char *extra, size_t maxlen)
{
	size_t len = strlen(v);

	if (!len || len > maxlen)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if (!is_name_char(v[i], extra))
			return -EINVAL;
	return 0;
}

static int check_host(const char *v, char *err, size_t errlen)
{
	size_t len = strlen(v);

	if (!len || len > 255) {
		crun__seterr(err, errlen, "expected a host name or address");
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++) {
		if (!isgraph((unsigned char)v[i]) || v[i] == '/' || v[i] == ',') {
			crun__seterr(err, errlen, "expected a host name or address");
			return -EINVAL;
		}
	}
	return 0;
}

static int set_string(char **dst, const char *v, char *err, size_t errlen)
{
	char *dup = strdup(v);

	if (!dup) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	free(*dst);
	*dst = dup;
	return 0;
}

static int parse_rank_list(const char *v, int **out, size_t *count, char *err, size_t errlen)
{
	const char *p = v;
	size_t n = 1, k = 0;
	int *ranks;

	for (const char *q = v; *q; q++)
		n += *q == ',';
	ranks = calloc(n, sizeof(*ranks));
	if (!ranks) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (;;) {
		size_t len = strcspn(p, ",");
		char buf[16];
		int64_t r;
		bool dup = false;

		if (!len || len >= sizeof(buf))
			goto bad;
		memcpy(buf, p, len);
		buf[len] = '\0';
		if (!isdigit((unsigned char)buf[0]) ||
		    crun__parse_int64(buf, 0, CRUN_LAUNCH_MAX_NPROC - 1, &r, NULL, 0) < 0)
			goto bad;
		for (size_t i = 0; i < k; i++)
			dup |= ranks[i] == r;
		if (!dup)
			ranks[k++] = (int)r;
		if (!p[len])
			break;
		p += len + 1;
	}
	free(*out);
	*out = ranks;
	*count = k;
	return 0;
bad:
	free(ranks);
	crun__seterr(err, errlen, "expected a comma-separated list of local ranks like 0,2");
	return -EINVAL;
}

/* "N" or "MIN:MAX", 1 <= MIN <= MAX <= CRUN_LAUNCH_MAX_NNODES. */
static int parse_nnodes(const char *v, int *min, int *max)
{
	const char *colon = strchr(v, ':');
	int64_t lo, hi;
	char buf[16];

	if (!colon)
		colon = v + strlen(v);
	if (colon == v || (size_t)(colon - v) >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, v, (size_t)(colon - v));
	buf[colon - v] = '\0';
	if (!isdigit((unsigned char)buf[0]) ||
	    crun__parse_int64(buf, 1, CRUN_LAUNCH_MAX_NNODES, &lo, NULL, 0) < 0)
		return -EINVAL;
	hi = lo;
	if (*colon &&
	    (!isdigit((unsigned char)colon[1]) ||
	     crun__parse_int64(colon + 1, 1, CRUN_LAUNCH_MAX_NNODES, &hi, NULL, 0) < 0 || lo > hi))
		return -EINVAL;
	*min = (int)lo;
	*max = (int)hi;
	return 0;
}

/* --straggler-factor: 0, or a decimal number above 1 up to 1000. */
static int parse_factor(const char *v, double *out, char *err, size_t errlen)
{
	char *end;
	double x;

	if (!*v || strspn(v, "0123456789.") != strlen(v))
		goto bad;
	x = strtod(v, &end);
	if (*end || !(x == 0 || (x > 1 && x <= 1000)))
		goto bad;
	*out = x;
	return 0;
bad:
	crun__seterr(err, errlen, "expected 0 (off) or a number above 1 up to 1000, like 1.5");
	return -EINVAL;
}

/* --ssh-options: Key=Value items, the key a word, the value not empty. */
static int check_ssh_options(const char *v)
{
	const char *p = v;

	if (strlen(v) > 4096)
		return -EINVAL;
	for (;;) {
		size_t len = strcspn(p, ","), klen = strcspn(p, "=,");

		if (!klen || klen + 1 >= len)
			return -EINVAL;
		for (size_t i = 0; i < klen; i++)
			if (!isalnum((unsigned char)p[i]))
				return -EINVAL;
		for (size_t i = klen; i < len; i++)
			if (!isprint((unsigned char)p[i]))
				return -EINVAL;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

/* Stores one option's value, given as text ("1"/"0" for flags), into o.
 * Returns 0 or -EINVAL with what is allowed in err. */
static int apply(struct crun__launch_opts *o, enum crun__launch_opt id, const char *v, char *err,
		 size_t errlen)
{
	char reason[256];
	int64_t n;
	int rc;

	switch (id) {
	case CRUN_OPT_NPROC_PER_NODE:
		if (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "gpu")) {
			o->nproc_mode = v[0] == 'a'   ? CRUN_NPROC_AUTO
					: v[0] == 'c' ? CRUN_NPROC_CPU
						      : CRUN_NPROC_GPU;
			return 0;
		}
		if (!isdigit((unsigned char)*v) ||
		    crun__parse_int64(v, 1, CRUN_LAUNCH_MAX_NPROC, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen,
				     "expected a positive number (at most %d), auto, cpu or "
				     "gpu",
				     CRUN_LAUNCH_MAX_NPROC);
			return -EINVAL;
		}
		o->nproc_mode = CRUN_NPROC_COUNT;
		o->nproc = (int)n;
		return 0;
	case CRUN_OPT_ROLE:
		if (check_word(v, "._-", 64) < 0) {
			crun__seterr(err, errlen,
				     "expected a name of letters, digits, '.', '_' or '-'");
			return -EINVAL;
		}
		return set_string(&o->role, v, err, errlen);
	case CRUN_OPT_MODULE:
		o->module = *v == '1';
		return 0;
	case CRUN_OPT_NO_PYTHON:
		o->no_python = *v == '1';
		return 0;
	case CRUN_OPT_RUN_PATH:
		o->run_path = *v == '1';
		return 0;
	case CRUN_OPT_STANDALONE:
		o->standalone = *v == '1';
		return 0;
	case CRUN_OPT_VIRTUAL_LOCAL_RANK:
		o->virtual_local_rank = *v == '1';
		return 0;
	case CRUN_OPT_DRY_RUN:
		if (*v == '1')
			o->action = CRUN_LAUNCH_DRY_RUN;
		return 0;
	case CRUN_OPT_MAX_RESTARTS:
		if (!isdigit((unsigned char)*v) ||
		    crun__parse_int64(v, 0, 1000000, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen, "expected a whole number from 0 to 1000000");
			return -EINVAL;
		}
		o->max_restarts = (int)n;
		return 0;
	case CRUN_OPT_MIN_ATTEMPT_TIME:
		rc = crun__parse_duration_ms(v, &n, NULL, 0);
		if (rc < 0 || n > 604800000) {
			crun__seterr(err, errlen,
				     "expected a duration up to 168h like 60, 90s, 500ms or 10m");
			return -EINVAL;
		}
		o->min_attempt_ms = n;
		return 0;
	case CRUN_OPT_SHUTDOWN_TIMEOUT:
		rc = crun__parse_duration_ms(v, &n, NULL, 0);
		if (rc < 0 || n > 86400000) {
			crun__seterr(err, errlen,
				     "expected a duration up to 24h like 30, 2.5s, 500ms or "
				     "1m");
			return -EINVAL;
		}
		o->shutdown_timeout_ms = n;
		return 0;
	case CRUN_OPT_GPU_SAMPLE_INTERVAL:
	case CRUN_OPT_GPU_RELEASE_TIMEOUT:
		rc = crun__parse_duration_ms(v, &n, NULL, 0);
		if (rc < 0 || n > 86400000) {
			crun__seterr(err, errlen,
				     "expected a duration up to 24h like 5, 2.5s, 500ms or 1m");
			return -EINVAL;
		}
		if (id == CRUN_OPT_GPU_SAMPLE_INTERVAL)
			o->gpu_sample_interval_ms = n;
		else
			o->gpu_release_timeout_ms = n;
		return 0;
	case CRUN_OPT_MONITOR_INTERVAL:
		if (crun__parse_duration_ms(v, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen, "expected a duration like 0.1, 5s or 500ms");
			return -EINVAL;
		}
		o->monitor_interval_ms = n;
		return 0;
	case CRUN_OPT_STRAGGLER_FACTOR:
		return parse_factor(v, &o->straggler_factor, err, errlen);
	case CRUN_OPT_STRAGGLER_WINDOW:
		if (!isdigit((unsigned char)*v) ||
		    crun__parse_int64(v, 2, CRUN__STRAGGLER_WINDOW_MAX, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen, "expected a whole number from 2 to %d",
				     CRUN__STRAGGLER_WINDOW_MAX);
			return -EINVAL;
		}
		o->straggler_window = (int)n;
		return 0;
	case CRUN_OPT_SIGNALS_TO_HANDLE:
		return crun__launch_parse_signals(v, o->signals, &o->nsignals, err, errlen);
	case CRUN_OPT_SIGNALS_TO_FORWARD:
		if (!strcmp(v, "none")) {
			o->nforward_signals = 0;
			return 0;
		}
		return crun__launch_parse_signals(v, o->forward_signals, &o->nforward_signals, err,
						  errlen);
	case CRUN_OPT_SLURM_TASKS_AS_NODES:
		o->sched.ask.slurm_tasks_as_nodes = *v == '1';
		return 0;
	case CRUN_OPT_SLURM_REQUEUE:
		if (!strcmp(v, "none")) {
			o->slurm_requeue = 0;
			return 0;
		}
		if (!isdigit((unsigned char)*v) || crun__parse_int64(v, 1, 255, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen, "expected an exit status from 1 to 255, or none");
			return -EINVAL;
		}
		o->slurm_requeue = (int)n;
		return 0;
	case CRUN_OPT_HEARTBEAT_TIMEOUT:
	case CRUN_OPT_HEARTBEAT_INITIAL_TIMEOUT:
		rc = crun__parse_duration_ms(v, &n, NULL, 0);
		if (rc < 0 || n > 7 * 86400000LL) {
			crun__seterr(err, errlen,
				     "expected a duration up to 7 days like 180, 2.5s, 500ms or "
				     "10m (0: off)");
			return -EINVAL;
		}
		if (id == CRUN_OPT_HEARTBEAT_TIMEOUT)
			o->heartbeat.timeout_ms = n;
		else
			o->heartbeat.initial_timeout_ms = n;
		return 0;
	case CRUN_OPT_HEARTBEAT_SECTION_TIMEOUTS:
		return crun__liveness_parse_sections(v, &o->heartbeat, err, errlen);
	case CRUN_OPT_HEARTBEAT_AUTO_FACTOR: {
		char *end;
		double f;

		errno = 0;
		f = strtod(v, &end);
		if (!*v || *end || errno || !(f == 0 || (f >= 1 && f <= 1000))) {
			crun__seterr(err, errlen, "expected 0 (off) or a factor from 1 to 1000");
			return -EINVAL;
		}
		o->heartbeat.auto_factor = f;
		return 0;
	}
	case CRUN_OPT_START_METHOD:
		if (strcmp(v, "spawn") && strcmp(v, "fork") && strcmp(v, "forkserver")) {
			crun__seterr(err, errlen, "expected spawn, fork or forkserver");
			return -EINVAL;
		}
		return set_string(&o->start_method, v, err, errlen);
	case CRUN_OPT_NNODES:
		if (parse_nnodes(v, &o->nnodes_min, &o->nnodes_max) < 0) {
			crun__seterr(err, errlen,
				     "expected N or MIN:MAX with 1 <= MIN <= MAX <= %d",
				     CRUN_LAUNCH_MAX_NNODES);
			return -EINVAL;
		}
		return 0;
	case CRUN_OPT_NODE_RANK:
		if (!isdigit((unsigned char)*v) ||
		    crun__parse_int64(v, 0, CRUN_LAUNCH_MAX_NNODES - 1, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen, "expected a whole number from 0 to %d",
				     CRUN_LAUNCH_MAX_NNODES - 1);
			return -EINVAL;
		}
		o->node_rank = (int)n;
		return 0;
	case CRUN_OPT_RDZV_BACKEND:
		if (!strcmp(v, "c10d")) {
			o->rdzv_backend = CRUN_RDZV_C10D;
		} else if (!strcmp(v, "static")) {
			o->rdzv_backend = CRUN_RDZV_STATIC;
		} else {
			crun__seterr(err, errlen, "expected c10d or static%s",
				     strncmp(v, "etcd", 4) ? "" : " (crun brings its own store)");
			return -EINVAL;
		}
		return 0;
	case CRUN_OPT_RDZV_ENDPOINT: {
		char host[256];
		int port;

		if (crun__parse_endpoint(v, 29400, host, sizeof(host), &port, reason,
					 sizeof(reason)) < 0 ||
		    check_host(host, NULL, 0) < 0) {
			crun__seterr(err, errlen,
				     "expected HOST[:PORT] or [ADDR]:PORT with a port 0-65535");
			return -EINVAL;
		}
		return set_string(&o->rdzv_endpoint, v, err, errlen);
	}
	case CRUN_OPT_RDZV_ID:
		if (check_word(v, "._-:@+", CRUN_LAUNCH_MAX_RUN_ID) < 0) {
			crun__seterr(err, errlen,
				     "expected up to %d letters, digits, '.', '_', '-', ':', "
				     "'@' or '+'",
				     CRUN_LAUNCH_MAX_RUN_ID);
			return -EINVAL;
		}
		return set_string(&o->rdzv_id, v, err, errlen);
	case CRUN_OPT_RDZV_CONF:
		crun__rdzv_conf_finish(&o->rdzv_conf);
		crun__rdzv_conf_init(&o->rdzv_conf);
		return crun__launch_parse_rdzv_conf(v, &o->rdzv_conf, err, errlen);
	case CRUN_OPT_MASTER_ADDR:
		if (check_host(v, err, errlen) < 0)
			return -EINVAL;
		return set_string(&o->master_addr, v, err, errlen);
	case CRUN_OPT_METRICS_PORT:
		if (!isdigit((unsigned char)*v) ||
		    crun__parse_int64(v, 0, 65535, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen, "expected a port from 0 to 65535");
			return -EINVAL;
		}
		o->metrics_port = (int)n;
		return 0;
	case CRUN_OPT_METRICS_HOST:
		if (check_host(v, err, errlen) < 0)
			return -EINVAL;
		return set_string(&o->metrics_host, v, err, errlen);
	case CRUN_OPT_MASTER_PORT:
		if (!isdigit((unsigned char)*v) ||
		    crun__parse_int64(v, 1, 65535, &n, NULL, 0) < 0) {
			crun__seterr(err, errlen, "expected a port from 1 to 65535");
			return -EINVAL;
		}
		o->master_port = (int)n;
		return 0;
	case CRUN_OPT_LOCAL_ADDR:
		if (check_host(v, err, errlen) < 0)
			return -EINVAL;
		return set_string(&o->local_addr, v, err, errlen);
	case CRUN_OPT_AGENT_STORE:
		if (!strcmp(v, "auto")) {
			o->agent_store = CRUN_AGENT_STORE_AUTO;
		} else if (!strcmp(v, "on")) {
			o->agent_store = CRUN_AGENT_STORE_ON;
		} else if (!strcmp(v, "off")) {
			o->agent_store = CRUN_AGENT_STORE_OFF;
		} else {
			crun__seterr(err, errlen, "expected auto, on or off");
			return -EINVAL;
		}
		return 0;
	case CRUN_OPT_SCHEDULER:
		if (!strcmp(v, "auto")) {
			o->sched_mode = CRUN_SCHED_MODE_AUTO;
		} else if (!strcmp(v, "slurm")) {
			o->sched_mode = CRUN_SCHED_MODE_SLURM;
		} else if (!strcmp(v, "kubernetes") || !strcmp(v, "k8s")) {
			o->sched_mode = CRUN_SCHED_MODE_KUBERNETES;
		} else if (!strcmp(v, "none")) {
			o->sched_mode = CRUN_SCHED_MODE_NONE;
		} else {
			crun__seterr(err, errlen, "expected auto, slurm, kubernetes or none");
			return -EINVAL;
		}
		return 0;
	case CRUN_OPT_HOSTFILE:
		if (!*v) {
			crun__seterr(err, errlen, "expected a file name");
			return -EINVAL;
		}
		return set_string(&o->hostfile, v, err, errlen);
	case CRUN_OPT_INCLUDE:
	case CRUN_OPT_EXCLUDE:
		rc = crun__hostfile_check_filter(v, err, errlen);
		if (rc)
			return rc;
		return set_string(id == CRUN_OPT_INCLUDE ? &o->include : &o->exclude, v, err,
				  errlen);
	case CRUN_OPT_SSH_OPTIONS:
		if (check_ssh_options(v) < 0) {
			crun__seterr(err, errlen,
				     "expected ssh options as Key=Value,... like "
				     "Port=2222,IdentityFile=/path/key");
			return -EINVAL;
		}
		return set_string(&o->ssh_options, v, err, errlen);
	case CRUN_OPT_LOG_DIR:
		if (!*v) {
			crun__seterr(err, errlen, "expected a directory");
			return -EINVAL;
		}
		return set_string(&o->log_dir, v, err, errlen);
	case CRUN_OPT_EVENTS:
		if (!*v) {
			crun__seterr(err, errlen, "expected a file");
			return -EINVAL;
		}
		return set_string(&o->events, v, err, errlen);
	case CRUN_OPT_REDIRECTS:
	case CRUN_OPT_TEE: {
		struct crun__std_spec *dst = id == CRUN_OPT_TEE ? &o->tee : &o->redirects;
		struct crun__std_spec spec;

		rc = crun__launch_parse_std(v, &spec, err, errlen);
		if (rc)
			return rc;
		crun__std_spec_finish(dst);
		*dst = spec;
		return 0;
	}
	case CRUN_OPT_LOCAL_RANKS_FILTER:
		return parse_rank_list(v, &o->ranks_filter, &o->nranks_filter, err, errlen);
	case CRUN_OPT_LOG_LINE_PREFIX_TEMPLATE:
		if (strlen(v) > CRUN_LAUNCH_PREFIX_TEMPLATE_MAX) {
			crun__seterr(err, errlen, "expected a template of at most %d bytes",
				     CRUN_LAUNCH_PREFIX_TEMPLATE_MAX);
			return -EINVAL;
		}
		if (!*v) { /* torchrun: empty is the default */
			free(o->log_line_prefix_template);
			o->log_line_prefix_template = NULL;
			return 0;
		}
		return set_string(&o->log_line_prefix_template, v, err, errlen);
	case CRUN_OPT_CONFIG:
		if (!*v) {
			crun__seterr(err, errlen, "expected a file name");
			return -EINVAL;
		}
		return set_string(&o->config_path, v, err, errlen);
	case CRUN_OPT_HELP:
	case CRUN_OPT_VERSION:
	case CRUN_OPT_COUNT:
		break;
	}
	return 0;
}

/* ---- the parse ------------------------------------------------------- */

struct parse_ctx {
	struct crun__launch_opts *o;
	const char *value[CRUN_OPT_COUNT]; /* the winning text of each option */
	char *owned[CRUN_OPT_COUNT];	   /* texts read from the config file */
	int config_line[CRUN_OPT_COUNT];   /* where the config file set each */
};

void crun__launch_opts_init(struct crun__launch_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->action = CRUN_LAUNCH_RUN;
	o->nproc_mode = CRUN_NPROC_COUNT;
	o->nproc = 1;
	o->nnodes_min = o->nnodes_max = 1;
	o->rdzv_backend = CRUN_RDZV_C10D;
	crun__rdzv_conf_init(&o->rdzv_conf);
	o->max_restarts = 3;
	o->metrics_port = -1;
	o->monitor_interval_ms = 100;
	o->straggler_factor = CRUN__STRAGGLER_FACTOR;
	o->straggler_window = CRUN__STRAGGLER_WINDOW;
	o->gpu_sample_interval_ms = 5000;
	o->gpu_release_timeout_ms = 50000;
	o->shutdown_timeout_ms = 30000;
	o->min_attempt_ms = 60000;
	crun__sched_init(&o->sched);
	o->heartbeat.timeout_ms = 180000;
	o->heartbeat.initial_timeout_ms = 600000;
	o->signals[0] = SIGTERM;
	o->signals[1] = SIGINT;
	o->signals[2] = SIGHUP;
	o->signals[3] = SIGQUIT;
	o->nsignals = 4;
	o->forward_signals[0] = SIGUSR1;
	o->forward_signals[1] = SIGUSR2;
	o->nforward_signals = 2;
}

void crun__launch_opts_finish(struct crun__launch_opts *o)
{
	free(o->rdzv_endpoint);
	free(o->rdzv_id);
	crun__rdzv_conf_finish(&o->rdzv_conf);
	free(o->start_method);
	free(o->role);
	free(o->master_addr);
	free(o->local_addr);
	free(o->metrics_host);
	free(o->hostfile);
	free(o->include);
	free(o->exclude);
	free(o->ssh_options);
	free(o->log_dir);
	free(o->events);
	crun__std_spec_finish(&o->redirects);
	crun__std_spec_finish(&o->tee);
	free(o->log_line_prefix_template);
	free(o->ranks_filter);
	free(o->config_path);
	memset(o, 0, sizeof(*o));
}

static void format_invalid(enum crun__launch_source src, const char *env_name,
			   const char *config_path, int line, enum crun__launch_opt id,
			   const char *value, const char *reason, char *err, size_t errlen)
{
	char key[48];

	switch (src) {
	case CRUN_SRC_ENV:
		crun__seterr(err, errlen, "invalid value '%s' for %s: %s", value, env_name, reason);
		break;
	case CRUN_SRC_CONFIG:
		config_key(id, key, sizeof(key));
		crun__seterr(err, errlen, "config '%s' line %d: invalid value '%s' for '%s': %s",
			     config_path ? config_path : "?", line, value, key, reason);
		break;
	case CRUN_SRC_SCHED: /* crun__launch_opts_invalid names the variable */
	case CRUN_SRC_CLI:
	case CRUN_SRC_DEFAULT:
		crun__seterr(err, errlen, "invalid value '%s' for --%s: %s", value,
			     optdefs[id].name, reason);
		break;
	}
}

void crun__launch_opts_invalid(const struct crun__launch_opts *o, enum crun__launch_opt id,
			       const char *value, const char *reason, char *err, size_t errlen)
{
	const char *env = pet_name(id);
	const struct crun__sched_value *sv = crun__sched_find(&o->sched, (int)id);

	if (o->source[id] == CRUN_SRC_SCHED && sv) {
		char key[48];

		config_key(id, key, sizeof(key));
		crun__seterr(err, errlen, "invalid value '%s' for %s from %s (%s): %s", value, key,
			     sv->origin, crun__sched_kind_name(o->sched.kind), reason);
		return;
	}
	if (id == CRUN_OPT_SHUTDOWN_TIMEOUT && o->source[id] == CRUN_SRC_ENV &&
	    o->shutdown_timeout_from_torch_env)
		env = torch_shutdown_env;
	format_invalid(o->source[id], env, o->config_path, o->config_line[id], id, value, reason,
		       err, errlen);
}

void crun__launch_opts_origin(const struct crun__launch_opts *o, enum crun__launch_opt id,
			      char *out, size_t outlen)
{
	const struct crun__sched_value *sv;

	switch (o->source[id]) {
	case CRUN_SRC_CLI:
		snprintf(out, outlen, "--%s", optdefs[id].name);
		return;
	case CRUN_SRC_ENV:
		snprintf(out, outlen, "%s",
			 id == CRUN_OPT_SHUTDOWN_TIMEOUT && o->shutdown_timeout_from_torch_env
				 ? torch_shutdown_env
				 : pet_name(id));
		return;
	case CRUN_SRC_CONFIG:
		snprintf(out, outlen, "config %s line %d", o->config_path ? o->config_path : "?",
			 o->config_line[id]);
		return;
	case CRUN_SRC_SCHED:
		sv = crun__sched_find(&o->sched, (int)id);
		snprintf(out, outlen, "%s %s", crun__sched_kind_name(o->sched.kind),
			 sv ? sv->origin : "?");
		return;
	case CRUN_SRC_DEFAULT:
		break;
	}
	snprintf(out, outlen, "default");
}

/* Checks text for option id without keeping it: apply() on a scratch set. */
static int check_value(enum crun__launch_opt id, const char *v, char *reason, size_t len)
{
	struct crun__launch_opts scratch;
	int rc;

	crun__launch_opts_init(&scratch);
	rc = apply(&scratch, id, v, reason, len);
	crun__launch_opts_finish(&scratch);
	return rc;
}

/* Offers a value from src; it wins over what a lower source gave. */
static void offer(struct parse_ctx *c, enum crun__launch_opt id, enum crun__launch_source src,
		  const char *v, int line)
{
	if (c->o->source[id] > src)
		return;
	c->value[id] = v;
	c->o->source[id] = src;
	c->o->config_line[id] = line;
}

static int parse_cli(struct parse_ctx *c, int argc, char **argv, char *err, size_t errlen)
{
	struct crun__launch_opts *o = c->o;
	char reason[256];
	int i;

	for (i = 1; i < argc; i++) {
		const struct crun__launch_optdef *d;
		const char *arg = argv[i], *val = NULL;
		char shown[64];

		if (!strcmp(arg, "--")) {
			i++;
			break;
		}
		if (arg[0] != '-' || !arg[1])
			break;
		if (arg[1] == '-') {
			const char *eq = strchr(arg + 2, '=');
			size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);

			snprintf(shown, sizeof(shown), "%.*s", (int)(len + 2), arg);
			d = find_long_abbrev(arg + 2, len, eq ? shown : arg, err, errlen);
			if (!d)
				return -EINVAL;
			if (eq)
				val = eq + 1;
		} else {
			d = find_short(arg[1]);
			if (arg[2])
				val = arg[2] == '=' ? arg + 3 : arg + 2;
			snprintf(shown, sizeof(shown), "-%c", arg[1]);
			if (d && !d->takes_value && val)
				d = NULL; /* "-mx": no bundling of flags */
		}
		if (!d) {
			crun__seterr(err, errlen, "unknown option '%s' (see crun --help)", arg);
			return -EINVAL;
		}
		if (d->id == CRUN_OPT_HELP || d->id == CRUN_OPT_VERSION) {
			if (val) {
				crun__seterr(err, errlen, "option '%s' takes no value", shown);
				return -EINVAL;
			}
			o->action = d->id == CRUN_OPT_HELP ? CRUN_LAUNCH_HELP : CRUN_LAUNCH_VERSION;
			return 0;
		}
		if (!d->takes_value) {
			if (val) {
				crun__seterr(err, errlen, "option '%s' takes no value", shown);
				return -EINVAL;
			}
			val = "1";
		} else if (!val) {
			if (i + 1 >= argc) {
				crun__seterr(err, errlen,
					     "option '%s' needs a value (see crun --help)", shown);
				return -EINVAL;
			}
			val = argv[++i];
		}
		if (check_value(d->id, val, reason, sizeof(reason)) < 0) {
			crun__seterr(err, errlen, "invalid value '%s' for --%s: %s", val, d->name,
				     reason);
			return -EINVAL;
		}
		offer(c, d->id, CRUN_SRC_CLI, val, 0);
	}
	if (i < argc) {
		o->command = &argv[i];
		o->command_argc = argc - i;
	}
	return 0;
}

const char *crun__launch_env_lookup(char **envp, const char *name)
{
	size_t len = strlen(name);

	for (char **e = envp; e && *e; e++)
		if (!strncmp(*e, name, len) && (*e)[len] == '=')
			return *e + len + 1;
	return NULL;
}

static int parse_env(struct parse_ctx *c, char **envp, char *err, size_t errlen)
{
	char reason[256];

	for (size_t i = 0; i < CRUN_OPT_COUNT; i++) {
		const struct crun__launch_optdef *d = &optdefs[i];
		const char *name = pet_name(d->id), *v;

		if (!name)
			continue;
		v = crun__launch_env_lookup(envp, name);
		if ((!v || !*v) && d->id == CRUN_OPT_SHUTDOWN_TIMEOUT) {
			name = torch_shutdown_env;
			v = crun__launch_env_lookup(envp, name);
		}
		if ((!v || !*v) && d->id == CRUN_OPT_LOG_LINE_PREFIX_TEMPLATE) {
			name = torch_prefix_env;
			v = crun__launch_env_lookup(envp, name);
		}
		if (!v || !*v) /* empty: as if unset */
			continue;
		if (!d->takes_value) {
			/* torchrun: bool(int(value)) */
			int64_t n;

			if (crun__parse_int64(v, INT32_MIN, INT32_MAX, &n, NULL, 0) < 0) {
				crun__seterr(err, errlen,
					     "invalid value '%s' for %s: expected 1 or 0", v, name);
				return -EINVAL;
			}
			v = n ? "1" : "0";
		} else if (check_value(d->id, v, reason, sizeof(reason)) < 0) {
			crun__seterr(err, errlen, "invalid value '%s' for %s: %s", v, name, reason);
			return -EINVAL;
		}
		if (d->id == CRUN_OPT_SHUTDOWN_TIMEOUT && c->o->source[d->id] <= CRUN_SRC_ENV)
			c->o->shutdown_timeout_from_torch_env = name == torch_shutdown_env;
		offer(c, d->id, CRUN_SRC_ENV, v, 0);
	}
	return 0;
}

/* Flattens a YAML value into the text the option takes. */
static int config_text(const struct crun__launch_optdef *d, const char *key,
		       const struct crun__config_value *v, char **out, char *err, size_t errlen)
{
	bool joinable = d->id == CRUN_OPT_SIGNALS_TO_HANDLE ||
			d->id == CRUN_OPT_LOCAL_RANKS_FILTER ||
			d->id == CRUN_OPT_SIGNALS_TO_FORWARD;
	bool pairs =
		d->id == CRUN_OPT_RDZV_CONF || d->id == CRUN_OPT_REDIRECTS || d->id == CRUN_OPT_TEE;
	const char *forbidden;
	size_t len = 1;
	char *s;
	bool b;

	switch (v->kind) {
	case CRUN_CONFIG_NULL:
		crun__seterr(err, errlen, "missing value for '%s'", key);
		return -EINVAL;
	case CRUN_CONFIG_SCALAR:
		if (!d->takes_value) {
			if (crun__launch_parse_bool(v->scalar, &b) < 0) {
				crun__seterr(err, errlen,
					     "invalid value '%s' for '%s': expected true or false",
					     v->scalar, key);
				return -EINVAL;
			}
			*out = strdup(b ? "1" : "0");
		} else {
			*out = strdup(v->scalar);
		}
		break;
	case CRUN_CONFIG_SEQUENCE:
	case CRUN_CONFIG_MAPPING:
		if (v->kind == CRUN_CONFIG_SEQUENCE ? !joinable : !pairs) {
			crun__seterr(err, errlen,
				     "wrong type for '%s': expected a single value, got a %s", key,
				     v->kind == CRUN_CONFIG_SEQUENCE ? "list" : "mapping");
			return -EINVAL;
		}
		if (!v->nitems) {
			crun__seterr(err, errlen, "missing value for '%s'", key);
			return -EINVAL;
		}
		/* The separators of the flattened text may not appear inside. */
		forbidden = v->kind == CRUN_CONFIG_SEQUENCE ? ","
			    : d->id == CRUN_OPT_RDZV_CONF   ? ",="
							    : ",:";
		for (size_t i = 0; i < v->nitems; i++) {
			if (strpbrk(v->items[i], forbidden)) {
				crun__seterr(err, errlen, "invalid value '%s' in '%s'", v->items[i],
					     key);
				return -EINVAL;
			}
			len += strlen(v->items[i]) + 1;
		}
		s = calloc(1, len);
		if (!s)
			break;
		for (size_t i = 0; i < v->nitems; i++) {
			if (i)
				strcat(s, v->kind == CRUN_CONFIG_SEQUENCE || i % 2 == 0 ? ","
					  : d->id == CRUN_OPT_RDZV_CONF			? "="
											: ":");
			strcat(s, v->items[i]);
		}
		*out = s;
		break;
	}
	if (!*out) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static int config_cb(void *ctx, const char *key, int line, const struct crun__config_value *v,
		     char *err, size_t errlen)
{
	struct parse_ctx *c = ctx;
	const struct crun__launch_optdef *d = find_long(key, strlen(key));
	char reason[256], canon[48];
	char *text = NULL;
	int rc;

	if (!d || !d->config) {
		crun__seterr(err, errlen, "unknown key '%s'", key);
		return -EINVAL;
	}
	config_key(d->id, canon, sizeof(canon));
	if (c->config_line[d->id]) {
		crun__seterr(err, errlen, "key '%s' is given twice (first on line %d)", canon,
			     c->config_line[d->id]);
		return -EINVAL;
	}
	rc = config_text(d, canon, v, &text, err, errlen);
	if (rc)
		return rc;
	if (d->takes_value && check_value(d->id, text, reason, sizeof(reason)) < 0) {
		crun__seterr(err, errlen, "invalid value '%s' for '%s': %s", text, canon, reason);
		free(text);
		return -EINVAL;
	}
	c->owned[d->id] = text;
	c->config_line[d->id] = line;
	offer(c, d->id, CRUN_SRC_CONFIG, text, line);
	return 0;
}

/* The scheduler's values, offered below everything the user wrote. The
 * mode is --scheduler's winning text, checked when it was read. */
static int offer_sched(struct parse_ctx *c, char **envp, char *err, size_t errlen)
{
	struct crun__launch_opts *o = c->o;
	char reason[256];
	int rc;

	if (c->value[CRUN_OPT_SLURM_TASKS_AS_NODES])
		apply(o, CRUN_OPT_SLURM_TASKS_AS_NODES, c->value[CRUN_OPT_SLURM_TASKS_AS_NODES],
		      reason, sizeof(reason));
	if (c->value[CRUN_OPT_SCHEDULER]) {
		rc = apply(o, CRUN_OPT_SCHEDULER, c->value[CRUN_OPT_SCHEDULER], reason,
			   sizeof(reason));
		if (rc) {
			crun__launch_opts_invalid(o, CRUN_OPT_SCHEDULER,
						  c->value[CRUN_OPT_SCHEDULER], reason, err,
						  errlen);
			return rc;
		}
	}
	/* With --hostfile this crun starts the job's agents itself: the
	 * hostfile, not the allocation it may run in, gives the job's shape. */
	rc = crun__sched_detect(envp,
				c->value[CRUN_OPT_HOSTFILE] ? CRUN_SCHED_MODE_NONE : o->sched_mode,
				&o->sched, err, errlen);
	if (rc)
		return rc;
	for (size_t i = 0; i < o->sched.nvalues; i++) {
		const struct crun__sched_value *v = &o->sched.values[i];
		enum crun__launch_opt id = (enum crun__launch_opt)v->opt;

		if (v->opt < 0 || v->opt >= CRUN_OPT_COUNT || o->source[id] > CRUN_SRC_SCHED)
			continue;
		/* The user's static rendezvous (--master-addr, or
		 * --rdzv-backend=static) is not overridden by the scheduler's
		 * endpoint, which would make it c10d. */
		if (id == CRUN_OPT_RDZV_ENDPOINT &&
		    (o->source[CRUN_OPT_MASTER_ADDR] > CRUN_SRC_SCHED ||
		     (o->source[CRUN_OPT_RDZV_BACKEND] > CRUN_SRC_SCHED &&
		      !strcmp(c->value[CRUN_OPT_RDZV_BACKEND], "static"))))
			continue;
		offer(c, id, CRUN_SRC_SCHED, v->text, 0);
	}
	return 0;
}

int crun__launch_opts_parse(struct crun__launch_opts *o, int argc, char **argv, char **envp,
			    char *err, size_t errlen)
{
	struct parse_ctx c = {.o = o};
	char reason[256];
	int rc;

	rc = parse_cli(&c, argc, argv, err, errlen);
	if (rc || o->action == CRUN_LAUNCH_HELP || o->action == CRUN_LAUNCH_VERSION)
		return rc;
	rc = parse_env(&c, envp, err, errlen);
	if (rc)
		return rc;
	if (c.value[CRUN_OPT_CONFIG]) {
		rc = apply(o, CRUN_OPT_CONFIG, c.value[CRUN_OPT_CONFIG], err, errlen);
		if (rc)
			goto out_free;
		rc = crun__launch_config_read(o->config_path, config_cb, &c, err, errlen);
		if (rc)
			goto out_free;
	}
	rc = offer_sched(&c, envp, err, errlen);
	if (rc)
		goto out_free;
	for (size_t i = 0; i < CRUN_OPT_COUNT; i++) {
		if (!c.value[i] || i == CRUN_OPT_CONFIG)
			continue;
		rc = apply(o, (enum crun__launch_opt)i, c.value[i], reason, sizeof(reason));
		if (rc) {
			crun__launch_opts_invalid(o, (enum crun__launch_opt)i, c.value[i], reason,
						  err, errlen);
			goto out_free;
		}
	}

	if (o->module && o->no_python && !o->run_path) {
		crun__seterr(err, errlen,
			     "--module and --no-python cannot be used together: a module "
			     "needs python");
		rc = -EINVAL;
		goto out_free;
	}
	/* A scheduler that knows this node's rank but not the node count (an
	 * Indexed Job's JOB_COMPLETION_INDEX) would otherwise make node 0 a
	 * world of one. */
	if (o->source[CRUN_OPT_NODE_RANK] == CRUN_SRC_SCHED &&
	    o->source[CRUN_OPT_NNODES] == CRUN_SRC_DEFAULT) {
		const struct crun__sched_value *sv =
			crun__sched_find(&o->sched, CRUN_OPT_NODE_RANK);

		crun__seterr(err, errlen,
			     "node_rank from %s (%s) needs the number of nodes: set PET_NNODES "
			     "(or --nnodes, or nnodes in the config file)",
			     sv ? sv->origin : "?", crun__sched_kind_name(o->sched.kind));
		rc = -EINVAL;
		goto out_free;
	}
	if ((o->include || o->exclude) && !o->hostfile) {
		crun__seterr(err, errlen, "%s needs --hostfile",
			     o->include ? "--include" : "--exclude");
		rc = -EINVAL;
		goto out_free;
	}
	if (o->node_rank >= o->nnodes_max) {
		char v[16];

		snprintf(v, sizeof(v), "%d", o->node_rank);
		snprintf(reason, sizeof(reason), "expected a node rank below --nnodes (%d)",
			 o->nnodes_max);
		crun__launch_opts_invalid(o, CRUN_OPT_NODE_RANK, v, reason, err, errlen);
		rc = -EINVAL;
		goto out_free;
	}
	if (!o->command) {
		crun__seterr(err, errlen,
			     "no command given: usage: crun [OPTIONS] SCRIPT.py|COMMAND "
			     "[ARGS...] (see crun --help)");
		rc = -EINVAL;
		goto out_free;
	}
out_free:
	for (size_t i = 0; i < CRUN_OPT_COUNT; i++)
		free(c.owned[i]);
	return rc;
}
