/* crun__agent_run(): sets up what the worker group needs — the guard, the
 * loop, the handled signals, the embedded store or the rendezvous, log and
 * error-file directories, the shared worker environment — starts the
 * group, runs the loop until the group reaches a final state, and tears
 * everything down. After the job, an agent that hosts the rendezvous store
 * serves it until the other nodes have left.
 *
 * The parts, each in a file of its own with a header that says what it
 * owns; each uses only those below it:
 *
 *   agent.c        this file: setup, signals, the store, teardown
 *   group.c        the worker group's executor (the libuv edge)
 *   group_step.c   the worker group's state machine (pure)
 *   spawn.c        workers: argv, environment, files, processes
 *   rendezvous.c   multi-node: the store client, rounds, MASTER_ADDR,
 *                  step summaries
 *   straggler_watch.c  step beats to the straggler detector, its lines
 *   straggler.c    step times and stragglers (pure)
 *   gpu_watch.c    the GPUs through NVML (nvml.c): samples, the wait for
 *                  the dead workers' GPUs before a restart; gpu.c (pure)
 *   output.c       output pipes: lines, prefixes, console, log files
 *   summary.c      failure records, the summary, error files (JSON)
 *   monitor.c      what an operator sees of this node (pure)
 *   events.c       the events file: the monitor's events as JSON lines
 *   heartbeat.c    the workers' heartbeats and torch's FileTimer (edge)
 *   liveness.c     who is hung and why (pure)
 *   stackdump.c    the stacks of a hung worker (py-spy, gdb, /proc)
 *   reaper.c       the guard process that kills workers if crun dies
 *   metrics.c      the monitor as Prometheus metrics (pure); the endpoint
 *                  is rendezvous/metrics_http.c
 *   status.c       this node's status in the job's store (crun status) */
#include "agent/agent_store.h"
#include "agent/gpu_watch.h"
#include "agent/logdir.h"
#include "agent/events.h"
#include "agent/group.h"
#include "agent/metrics.h"
#include "agent/monitor.h"
#include "agent/output.h"
#include "agent/reaper.h"
#include "agent/rendezvous.h"
#include "agent/spawn.h"
#include "agent/status.h"
#include "agent/summary.h"
#include "common/jobfile.h"
#include "common/log.h"
#include "common/fs.h"
#include "common/procstat.h"
#include "common/prom.h"
#include "common/util.h"
#include "crun-config.h"
#include "rendezvous/metrics_http.h"
#include "rendezvous/server.h"
#include "rendezvous/server_metrics.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <limits.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void crun__agent_spec_init(struct crun__agent_spec *spec)
{
	memset(spec, 0, sizeof(*spec));
	spec->nproc_per_node = 1;
	spec->nnodes = 1;
	spec->node_rank = 0;
	spec->role = "default";
	spec->max_restarts = 3;
	spec->shutdown_timeout_ms = 30000;
	spec->kill_timeout_ms = 5000;
	spec->min_attempt_ms = 60000;
	spec->run_id = "none";
	spec->signals[0] = SIGTERM;
	spec->signals[1] = SIGINT;
	spec->signals[2] = SIGHUP;
	spec->signals[3] = SIGQUIT;
	spec->nsignals = 4;
	spec->rdzv.is_host = -1;
	spec->rdzv.min_nodes = 1;
	spec->rdzv.max_nodes = 1;
	spec->rdzv.join_timeout_ms = 600000;
	spec->rdzv.last_call_timeout_ms = 30000;
	spec->rdzv.close_timeout_ms = 30000;
	spec->rdzv.keep_alive_interval_ms = 5000;
	spec->rdzv.keep_alive_max_attempt = 3;
	spec->rdzv.read_timeout_ms = 60000;
	spec->heartbeat.initial_timeout_ms = 600000;
	spec->heartbeat.timeout_ms = 180000;
	spec->rdzv.rejoin_timeout_ms = 600000;
	spec->rdzv.blacklist_failures = 3;
	spec->rdzv.blacklist_window_ms = 600000;
	spec->rdzv.cooldown_min_ms = 30000;
	spec->rdzv.cooldown_max_ms = 300000;
	spec->rdzv.reconnect_timeout_ms = 60000;
	spec->gpu_sample_interval_ms = 5000;
	spec->gpu_release_timeout_ms = 50000;
	spec->metrics_port = -1;
}

struct agent {
	uv_loop_t loop;
	const struct crun__agent_spec *spec;
	char hostname[256];
	uv_signal_t *signals;
	int nsignals;
	uv_timer_t linger; /* hosting: how long to serve after the end */
	uv_timer_t alive;  /* rendezvous: tells the guard each keep-alive
			    * interval that crun runs (reaper.h) */
	bool shut;	   /* agent_shutdown() was called */
	bool lingering;	   /* hosting: serving the store after the end */
	bool handles_closed;

	struct console console[2];
	struct reaper reaper;
	struct crun__server *server;
	struct crun__metrics_http *metrics; /* --metrics-port; NULL: none */
	char *store_env;		    /* CRUN_STORE=host:port */
	char *token_env;		    /* CRUN_TOKEN=... */
	char *log_root;			    /* the run's own (logdir.h), or NULL */
	char *tmp_dir;			    /* private dir for error files, or NULL */

	struct agent_rdzv rdzv;
	struct crun__spawner spawner;
	struct crun__heartbeat heartbeat;
	/* What an operator sees of this node (monitor.h): its readers are the
	 * status in the store, the metrics endpoint and the events file. */
	struct crun__monitor monitor;
	struct crun__gpu_watch gpus; /* NVML: samples, release waits */
	struct crun__events events;  /* --events; fd -1: none */
	struct group group;
	/* `crun status`: this node's status in the store (status.h), and the
	 * job file and token file that let it find the job (jobfile.h). */
	struct crun__status_pub status;
	char job_dir[1024];    /* "": none */
	bool job_dir_failed;   /* said once: not tried again */
	char token_path[4096]; /* the token's file; "": none */
	bool job_file;	       /* written: removed at the end */
	uint64_t started_ms;   /* wall time */
	/* With rendezvous: the group's hooks, which the agent's own pass on
	 * (the first placement prints the start line), and that line. */
	struct crun__rdzv_hooks group_hooks;
	char *start_line;
};

static bool any_file_stream(const struct crun__agent_spec *spec)
{
	for (int lr = 0; lr < spec->nproc_per_node; lr++)
		if ((spec->redirects && spec->redirects[lr]) || (spec->tee && spec->tee[lr]))
			return true;
	return false;
}

static int check_rdzv(const struct crun__agent_spec *spec)
{
	const struct crun__agent_rdzv *r = &spec->rdzv;

	if (!r->host || !r->host[0] || r->port < 1 || r->port > 65535) {
		crun__error("invalid rendezvous endpoint");
		return -EINVAL;
	}
	if (r->min_nodes < 1 || r->min_nodes > r->max_nodes || r->max_nodes > CRUN_RDZV_MAX_NODES ||
	    spec->nproc_per_node > CRUN_RDZV_MAX_NPROC || spec->node_rank < -1 ||
	    spec->node_rank >= r->max_nodes) {
		crun__error("invalid node counts: nnodes %d:%d, node rank %d, nproc-per-node %d",
			    r->min_nodes, r->max_nodes, spec->node_rank, spec->nproc_per_node);
		return -EINVAL;
	}
	if (r->join_timeout_ms <= 0 || r->last_call_timeout_ms < 0 || r->close_timeout_ms < 0 ||
	    r->keep_alive_interval_ms <= 0 || r->keep_alive_max_attempt < 1 ||
	    r->read_timeout_ms <= 0 || r->is_host < -1 || r->is_host > 1 ||
	    r->rejoin_timeout_ms <= 0 || r->blacklist_failures < 0 ||
	    r->blacklist_failures > CRUN_RDZV_MAX_BLACKLIST || r->blacklist_window_ms < 0 ||
	    r->cooldown_min_ms < 0 || r->cooldown_min_ms > r->cooldown_max_ms ||
	    r->reconnect_timeout_ms <= 0) {
		crun__error("invalid rendezvous settings (timeouts, keep-alive or is_host)");
		return -EINVAL;
	}
	if (strlen(spec->run_id) > CRUN_RDZV_MAX_STR) {
		crun__error("run id is too long");
		return -EINVAL;
	}
	return 0;
}

static int check_spec(const struct crun__agent_spec *spec)
{
	if (!spec->argv || spec->argc < 1 || !spec->argv[0] || !spec->argv[0][0]) {
		crun__error("no command to run");
		return -EINVAL;
	}
	if (spec->rdzv.enabled) {
		if (spec->nproc_per_node < 1 || !spec->run_id || !spec->run_id[0] ||
		    check_rdzv(spec) < 0) {
			if (spec->nproc_per_node < 1 || !spec->run_id || !spec->run_id[0])
				crun__error("invalid worker count or run id");
			return -EINVAL;
		}
	} else if (spec->nproc_per_node < 1 || spec->nnodes < 1 || spec->node_rank < 0 ||
		   spec->node_rank >= spec->nnodes) {
		crun__error("invalid worker counts: nproc-per-node %d, nnodes %d, node rank %d",
			    spec->nproc_per_node, spec->nnodes, spec->node_rank);
		return -EINVAL;
	}
	if (!spec->rdzv.enabled && (int64_t)spec->nnodes * spec->nproc_per_node > 1 << 24) {
		crun__error("world size %lld is too large",
			    (long long)spec->nnodes * spec->nproc_per_node);
		return -EINVAL;
	}
	if (spec->max_restarts < 0 || spec->shutdown_timeout_ms < 0 || spec->kill_timeout_ms < 0 ||
	    spec->min_attempt_ms < 0 || spec->nsignals < 0 ||
	    spec->nsignals > CRUN_AGENT_MAX_SIGNALS || spec->nforward_signals < 0 ||
	    spec->nforward_signals > CRUN_AGENT_MAX_SIGNALS || spec->master_port < 0 ||
	    spec->master_port > 65535 || spec->store_port < 0 || spec->store_port > 65535) {
		crun__error("invalid agent settings (restarts, timeouts, signals or ports)");
		return -EINVAL;
	}
	if (!spec->role || !spec->role[0] || !spec->run_id || !spec->run_id[0]) {
		crun__error("role and run id must not be empty");
		return -EINVAL;
	}
	if (spec->token && (memchr(spec->token, '\0', spec->token_len) ||
			    memchr(spec->token, '\n', spec->token_len))) {
		crun__error("the store token must be text without NUL or newline");
		return -EINVAL;
	}
	return 0;
}

/* The name of the job when the launcher gives none: for an interpreter
 * ("python3 -u train.py", "python3 -m pkg.main") the script or module,
 * else the program. */
static const char *default_name(const struct crun__agent_spec *spec)
{
	const char *base = strrchr(spec->argv[0], '/');

	base = base ? base + 1 : spec->argv[0];
	if (strncmp(base, "python", 6))
		return spec->argv[0];
	for (int i = 1; i < spec->argc; i++) {
		if (!strcmp(spec->argv[i], "-m") && i + 1 < spec->argc)
			return spec->argv[i + 1];
		if (spec->argv[i][0] != '-')
			return spec->argv[i];
	}
	return spec->argv[0];
}

static void close_handles(struct agent *a);

static void on_signal(uv_signal_t *h, int sig)
{
	struct agent *a = h->data;

	if (a->lingering) {
		close_handles(a); /* stop serving the store at once */
		return;
	}
	crun__group_signal(&a->group, sig);
}

/* A signal that is only passed on: the group's state does not change. */
static void on_forward(uv_signal_t *h, int sig)
{
	struct agent *a = h->data;

	if (!a->lingering)
		crun__group_forward(&a->group, sig);
}

static char *make_temp_dir(const char *what)
{
	const char *tmp = getenv("TMPDIR");
	char *path;

	if (!tmp || !*tmp)
		tmp = "/tmp";
	if (asprintf(&path, "%s/crun-%s-XXXXXX", tmp, what) < 0)
		return NULL;
	if (!mkdtemp(path)) {
		crun__error("cannot create a directory in '%s': %s", tmp, strerror(errno));
		free(path);
		return NULL;
	}
	return path;
}

/* Log root and the private directory for error files. */
static bool serves_file_timer(const struct crun__agent_spec *spec);

static int setup_dirs(struct agent *a)
{
	const struct crun__agent_spec *spec = a->spec;
	char *tmp_logs = NULL;
	char what[PATH_MAX + 64];
	int err;

	if (!spec->log_dir && any_file_stream(spec)) {
		tmp_logs = make_temp_dir("logs");
		if (!tmp_logs)
			return -EIO;
	}
	if (spec->log_dir || tmp_logs) {
		/* A job that may have several nodes: one run directory for
		 * all, a directory per host in it. */
		const char *host =
			spec->rdzv.enabled && spec->rdzv.max_nodes > 1 ? a->hostname : NULL;

		err = crun__logdir_make(spec->log_dir ? spec->log_dir : tmp_logs, spec->run_id,
					host, time(NULL), &a->log_root, what, sizeof(what));
		free(tmp_logs);
		if (err == -EEXIST) {
			crun__error("cannot create the log directory '%s': it and its .1 to .%d "
				    "exist already",
				    what, CRUN__LOGDIR_TRIES - 1);
			return err;
		}
		if (err < 0) {
			crun__error("cannot create the log directory '%s': %s", what,
				    strerror(-err));
			return err;
		}
		crun__info("logs of this run in '%s'", a->log_root);
		/* The error files go to the log directory; the FileTimer pipe
		 * still needs the private directory that the guard removes. */
		if (!serves_file_timer(spec))
			return 0;
	}
	a->tmp_dir = make_temp_dir("errors");
	return a->tmp_dir ? 0 : -EIO;
}

/* The per-user directory of job files, made and checked; "" when it
 * cannot be (said once: `crun status` then needs --endpoint). */
static const char *job_dir(struct agent *a, const char *sub)
{
	int rc = 0;

	if (a->job_dir_failed)
		return NULL;
	if (!a->job_dir[0])
		rc = crun__jobfile_dir(a->job_dir, sizeof(a->job_dir), getenv("XDG_RUNTIME_DIR"),
				       geteuid());
	rc = rc < 0 ? rc : crun__jobfile_prepare(a->job_dir, sub);
	if (rc < 0) {
		crun__warn("cannot use the job directory '%s': %s; 'crun status' will not find "
			   "this job",
			   a->job_dir, strerror(-rc));
		a->job_dir[0] = '\0';
		a->job_dir_failed = true;
		return NULL;
	}
	return a->job_dir;
}

/* The token the agent made, for `crun status` on this machine. */
static void save_token(struct agent *a, const char *tok, size_t len)
{
	const char *dir = job_dir(a, "tokens");
	int rc;

	if (!dir)
		return;
	rc = crun__jobfile_write_token(dir, a->spec->run_id, (long)getpid(), tok, len,
				       a->token_path, sizeof(a->token_path));
	if (rc < 0) {
		crun__warn("cannot write the token file '%s': %s", a->token_path, strerror(-rc));
		a->token_path[0] = '\0';
	}
}

static int setup_store(struct agent *a)
{
	const struct crun__agent_spec *spec = a->spec;
	struct crun__server_opts opts;
	const char *host = spec->store_host ? spec->store_host : "127.0.0.1";
	char token[65], err[256];
	const char *tok = spec->token;
	size_t toklen = spec->token_len;
	int r;

	if (!tok) {
		unsigned char raw[16];
		if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
			crun__error("cannot make a job token: %s", strerror(errno));
			return -EIO;
		}
		for (size_t i = 0; i < sizeof(raw); i++)
			snprintf(token + 2 * i, 3, "%02x", raw[i]);
		tok = token;
		toklen = 2 * sizeof(raw);
	}
	if (!spec->token)
		save_token(a, tok, toklen);
	memset(&opts, 0, sizeof(opts));
	crun__server_limits_default(&opts.limits);
	opts.token = tok;
	opts.token_len = toklen;
	opts.quiet = true;
	opts.token_hint = "--rdzv-conf token_file=FILE";
	opts.tcpstore = spec->agent_store;
	if (spec->agent_store)
		crun__agent_store_limits(&opts.limits, spec->nnodes * spec->nproc_per_node);
	a->server = crun__server_create(&a->loop, &opts);
	if (!a->server) {
		crun__error("cannot create the store server");
		return -ENOMEM;
	}
	r = crun__server_listen(a->server, host, spec->store_port, err, sizeof(err));
	if (r < 0) {
		crun__error("cannot listen for the store on '%s:%d': %s", host, spec->store_port,
			    err[0] ? err : strerror(-r));
		return r;
	}
	if (asprintf(&a->store_env, strchr(host, ':') ? "CRUN_STORE=[%s]:%d" : "CRUN_STORE=%s:%d",
		     host, crun__server_port(a->server)) < 0 ||
	    asprintf(&a->token_env, "CRUN_TOKEN=%.*s", (int)toklen, tok) < 0) {
		explicit_bzero(token, sizeof(token));
		return -ENOMEM;
	}
	explicit_bzero(token, sizeof(token));
	return 0;
}

static int setup_signals(struct agent *a)
{
	const struct crun__agent_spec *spec = a->spec;

	int n = spec->nsignals + spec->nforward_signals;

	a->signals = calloc((size_t)n + 1, sizeof(*a->signals));
	if (!a->signals)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		bool forward = i >= spec->nsignals;
		int sig = forward ? spec->forward_signals[i - spec->nsignals] : spec->signals[i];
		int err = uv_signal_init(&a->loop, &a->signals[i]);
		if (err < 0)
			return err;
		a->nsignals++;
		a->signals[i].data = a;
		err = uv_signal_start(&a->signals[i], forward ? on_forward : on_signal, sig);
		if (err < 0) {
			crun__error("cannot handle signal %d: %s", sig, uv_strerror(err));
			return err;
		}
	}
	return 0;
}

static void server_gone(void *arg)
{
	(void)arg;
}

/* A stopped agent's workers must not outlive its place in the job: the
 * guard kills them when this stops for the keep-alive window, as long as
 * the store takes to drop this node. */
static void say_alive(uv_timer_t *t)
{
	struct agent *a = t->data;
	const struct crun__agent_rdzv *r = &a->spec->rdzv;
	uint64_t now = uv_now(&a->loop), window = (uint64_t)a->group.frozen_after_ms;
	char why[96];

	/* The first tick after a stop longer than the window: the store has
	 * dropped this node (what the loss and the workers' exits say next). */
	if (window && now - a->group.last_alive_ms >= window) {
		snprintf(why, sizeof(why), "this agent was stopped for %.1fs",
			 (double)(now - a->group.last_alive_ms) / 1000.0);
		crun__monitor_member_evicted(&a->monitor, crun__wall_ms(), NULL, why);
	}
	agent_reaper_alive(&a->reaper, r->keep_alive_interval_ms * r->keep_alive_max_attempt);
	a->group.last_alive_ms = now;
}

static void close_handles(struct agent *a)
{
	if (a->handles_closed)
		return;
	a->handles_closed = true;
	a->lingering = false;
	uv_close((uv_handle_t *)&a->linger, NULL);
	uv_close((uv_handle_t *)&a->alive, NULL);
	crun__group_close(&a->group);
	crun__gpu_watch_close(&a->gpus);
	crun__heartbeat_close(&a->heartbeat);
	for (int i = 0; i < a->nsignals; i++)
		uv_close((uv_handle_t *)&a->signals[i], NULL);
	if (a->server) {
		crun__server_destroy(a->server, server_gone, NULL);
		a->server = NULL;
	}
	crun__metrics_http_destroy(a->metrics);
	a->metrics = NULL;
}

/* The endpoint's text: the agent's figures, the store's when this agent
 * hosts one, the process's. */
static int render_metrics(void *arg, struct crun__prom *out)
{
	struct agent *a = arg;
	struct crun__procstat ps;

	crun__metrics_build_info(out, CRUN_VERSION);
	crun__agent_metrics_render(out, &a->monitor, crun__wall_ms());
	if (a->server)
		crun__server_metrics_render(out, crun__server_stats(a->server),
					    crun__server_connections(a->server));
	crun__procstat_read(&ps, a->monitor.started_ms);
	crun__procstat_render(out, &ps);
	return 0;
}

static int setup_metrics(struct agent *a)
{
	const char *host = a->spec->metrics_host ? a->spec->metrics_host : "0.0.0.0";
	char err[512];
	int rc;

	a->metrics = crun__metrics_http_create(&a->loop, render_metrics, a);
	if (!a->metrics) {
		crun__error("out of memory");
		return -ENOMEM;
	}
	rc = crun__metrics_http_listen(a->metrics, host, a->spec->metrics_port, err, sizeof(err));
	if (rc < 0) {
		crun__error("metrics: %s", err);
		return rc;
	}
	crun__info(strchr(host, ':') ? "metrics at http://[%s]:%d/metrics"
				     : "metrics at http://%s:%d/metrics",
		   host, crun__metrics_http_port(a->metrics));
	return 0;
}

static void linger_over(uv_timer_t *t)
{
	close_handles(t->data);
}

/* The hosting agent after the job: each node left closes its connection;
 * when none is left (the server's hook may not destroy the server, so the
 * timer does it on the next turn of the loop). */
static void node_left(struct crun__server *srv, const char *run_id, const char *peer, void *arg)
{
	struct agent *a = arg;

	(void)run_id;
	(void)peer;
	if (a->lingering && crun__server_connections(srv) == 0)
		uv_timer_start(&a->linger, linger_over, 0, 0);
}

/* Ends the loop: closes the agent's own handles (signals, timers, store).
 * After a job that succeeded or failed (serve_others) a hosting agent
 * first serves the store to the other nodes for a while. */
static void agent_shutdown(struct agent *a, bool serve_others)
{
	if (a->shut)
		return;
	a->shut = true;
	crun__status_pub_now(&a->status); /* the state it ended in */
	crun__status_pub_close(&a->status);
	uv_timer_stop(&a->alive);
	agent_reaper_alive(&a->reaper, 0);
	crun__rdzv_finish(&a->rdzv);
	/* The others may still wait for their exit barrier's reply, or must
	 * hear that the run failed: serve them until they have left, for
	 * close_timeout at most. Not after a signal: then crun goes now. */
	if (serve_others && a->server && a->rdzv.hosting && a->spec->rdzv.close_timeout_ms > 0 &&
	    crun__server_connections(a->server) > 0) {
		a->lingering = true;
		crun__server_set_disconnect_cb(a->server, node_left, a);
		crun__debug("serving the store until the other nodes have left (%.1f s at most)",
			    (double)a->spec->rdzv.close_timeout_ms / 1000.0);
		uv_timer_start(&a->linger, linger_over, (uint64_t)a->spec->rdzv.close_timeout_ms,
			       0);
		return;
	}
	close_handles(a);
}

static void free_token_env(struct agent *a)
{
	if (a->token_env) {
		explicit_bzero(a->token_env, strlen(a->token_env));
		free(a->token_env);
		a->token_env = NULL;
	}
}

/* The job's end as the events file and the status tell it. */
static void record_end(struct agent *a, enum crun__group_end end)
{
	char msg[CRUN_MON_TEXT + 32], sig[32];

	switch (end) {
	case CRUN__GEND_SUCCEEDED:
		snprintf(msg, sizeof(msg), "succeeded");
		break;
	case CRUN__GEND_STOPPED:
		crun__signal_format(sig, sizeof(sig), a->group.core.stop_signal);
		snprintf(msg, sizeof(msg), "stopped by %s", sig);
		break;
	case CRUN__GEND_NOT_FOUND:
	case CRUN__GEND_NOT_EXECUTABLE:
		snprintf(msg, sizeof(msg), "cannot execute '%s'", a->spec->argv[0]);
		break;
	default:
		snprintf(msg, sizeof(msg), "failed%s%s", a->monitor.last_failure[0] ? ": " : "",
			 a->monitor.last_failure);
		break;
	}
	crun__monitor_job_finished(&a->monitor, crun__wall_ms(), crun__group_status(&a->group),
				   msg);
}

static void group_finished(void *arg, enum crun__group_end end)
{
	record_end(arg, end);
	/* Not after a signal or an exec failure: then crun goes now. */
	agent_shutdown(arg, end == CRUN__GEND_SUCCEEDED || end == CRUN__GEND_FAILED ||
				    end == CRUN__GEND_AGENT_ERROR);
}

/* torch's FileTimer, as torchrun serves it: asked for, and not one of the
 * user's own (which passes through untouched). */
static bool serves_file_timer(const struct crun__agent_spec *spec)
{
	const char *on = getenv("TORCHELASTIC_ENABLE_FILE_TIMER");

	if (!on || strcmp(on, "1") || getenv("TORCHELASTIC_TIMER_FILE"))
		return false;
	for (char **e = spec->extra_env; e && *e; e++)
		if (!strncmp(*e, "TORCHELASTIC_TIMER_FILE=", 24))
			return false;
	return true;
}

/* The job's place without rendezvous (with it, each round brings one). */
static int fixed_placement(const struct crun__agent_spec *spec, struct crun__placement *place)
{
	*place = (struct crun__placement){
		.group_rank = spec->node_rank,
		.nnodes = spec->nnodes,
		.world_size = spec->nnodes * spec->nproc_per_node,
		.rank_offset = spec->node_rank * spec->nproc_per_node,
		.master_addr = spec->master_addr ? spec->master_addr : "127.0.0.1",
		.master_port = spec->master_port,
	};
	/* With the agent store one node's MASTER_PORT is its store's. */
	if (spec->rdzv.enabled || place->master_port || (spec->agent_store && spec->host_store))
		return 0;
	place->master_port = crun__free_port();
	if (place->master_port < 0) {
		crun__error("cannot find a free port for MASTER_PORT: %s",
			    strerror(-place->master_port));
		return place->master_port;
	}
	return 0;
}

/* With rendezvous: CRUN_STORE names the endpoint, CRUN_TOKEN the token. */
static int rdzv_env(struct agent *a)
{
	const struct crun__agent_spec *spec = a->spec;

	if (asprintf(&a->store_env, "CRUN_STORE=%s", a->rdzv.endpoint) < 0) {
		a->store_env = NULL;
		return -ENOMEM;
	}
	if (spec->token && asprintf(&a->token_env, "CRUN_TOKEN=%.*s", (int)spec->token_len,
				    (const char *)spec->token) < 0) {
		a->token_env = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void say_start(struct agent *a)
{
	if (!a->start_line)
		return;
	crun__info("%s", a->start_line);
	free(a->start_line);
	a->start_line = NULL;
}

/* The rendezvous hooks of the group, through the agent's. */
static void rdzv_ready(void *arg, const struct crun__placement *place)
{
	struct agent *a = arg;

	say_start(a);
	a->group_hooks.ready(a->group_hooks.arg, place);
}

static void rdzv_ended(void *arg, const struct crun__round_end *end)
{
	struct agent *a = arg;

	a->group_hooks.ended(a->group_hooks.arg, end);
}

static void rdzv_done(void *arg)
{
	struct agent *a = arg;

	a->group_hooks.done(a->group_hooks.arg);
}

static void rdzv_failed(void *arg, bool lost, const char *message)
{
	struct agent *a = arg;

	a->group_hooks.failed(a->group_hooks.arg, lost, message);
}

static int put_server(void *arg, const char *key, const char *doc, size_t len)
{
	struct agent *a = arg;

	return crun__server_set(a->server, a->spec->run_id, key, doc, len);
}

static int put_rdzv(void *arg, const char *key, const char *doc, size_t len)
{
	return crun__rdzv_publish_status(arg, key, doc, len);
}

/* Where `crun status` finds the job: the job file, the start line, this
 * node's status in the store. */
static void announce(struct agent *a, const char *endpoint)
{
	const struct crun__agent_spec *spec = a->spec;
	struct crun__status_info info = {
		.node_id = spec->rdzv.enabled ? a->rdzv.node_id : a->hostname,
		.endpoint = endpoint,
		.pid = (long)getpid(),
	};
	struct crun__jobfile jf = {.pid = (long)getpid(), .started_ms = a->started_ms};
	char real[PATH_MAX];
	const char *dir;
	int rc, lock;

	if (spec->token_file)
		snprintf(a->token_path, sizeof(a->token_path), "%s",
			 realpath(spec->token_file, real) ? real : spec->token_file);
	dir = job_dir(a, "jobs");
	if (dir) {
		snprintf(jf.run_id, sizeof(jf.run_id), "%s", spec->run_id);
		snprintf(jf.endpoint, sizeof(jf.endpoint), "%s", endpoint);
		snprintf(jf.token_file, sizeof(jf.token_file), "%s", a->token_path);
		snprintf(jf.node, sizeof(jf.node), "%s", a->hostname);
		/* The lock lives as long as this process: its descriptor is
		 * never closed (close-on-exec: the workers do not hold it). */
		rc = crun__jobfile_write(dir, &jf, &lock);
		if (rc < 0)
			crun__warn("cannot write the job file in '%s/jobs': %s", dir,
				   strerror(-rc));
		a->job_file = rc == 0;
	}
	if (a->token_path[0])
		rc = asprintf(
			&a->start_line,
			"run '%s' store on %s (token file '%s'); status: crun status --run %s",
			spec->run_id, endpoint, a->token_path, spec->run_id);
	else
		rc = asprintf(&a->start_line, "run '%s' store on %s; status: crun status --run %s",
			      spec->run_id, endpoint, spec->run_id);
	if (rc < 0)
		a->start_line = NULL;
	/* With rendezvous, once the job has a round (a join that fails says
	 * why in one line of its own). */
	if (!spec->rdzv.enabled)
		say_start(a);
	rc = crun__status_pub_start(&a->status, &a->loop, &a->monitor, &info,
				    spec->rdzv.enabled ? put_rdzv : put_server,
				    spec->rdzv.enabled ? (void *)&a->rdzv : (void *)a,
				    spec->rdzv.enabled ? (uint64_t)spec->rdzv.keep_alive_interval_ms
						       : 0);
	if (rc < 0)
		crun__debug("this node's status (for crun status) will not be published: %s",
			    strerror(-rc));
}

/* The closing line of a job that started workers, but on the node that
 * hosts the rendezvous store: the store says there how the run ended. (A
 * rendezvous that never formed ends with the line that says why.) */
static void say_end(struct agent *a, int status)
{
	const struct crun__failures *f = &a->group.failures;
	char cause[CRUN_MON_TEXT], line[CRUN_MON_TEXT + 256];

	/* the root cause in the words of the summary and the events file */
	cause[0] = '\0';
	if (a->monitor.last_failure[0])
		snprintf(cause, sizeof(cause), "%s", a->monitor.last_failure);
	else if (f->n)
		crun__failure_describe(&f->v[0], a->hostname, cause, sizeof(cause));
	crun__status_closing_line(line, sizeof(line), a->spec->run_id, status, cause,
				  (int)a->monitor.restart_count,
				  (double)(crun__wall_ms() - a->started_ms) / 1000.0);
	if (status == 0)
		crun__info("%s", line);
	else
		crun__error("%s", line);
}

/* Every step beat of a local worker goes to the straggler watch. */
static void straggler_step(void *arg, int local_rank, int64_t step, double work_s, uint64_t now_ms)
{
	crun__straggler_watch_step(arg, local_rank, step, work_s, now_ms);
}

int crun__agent_run(const struct crun__agent_spec *spec)
{
	struct crun__rdzv_hooks hooks;
	struct crun__placement place;
	struct agent *a;
	struct group *g;
	int status = 1, err;

	if (check_spec(spec) < 0)
		return 2;
	a = calloc(1, sizeof(*a));
	if (!a) {
		crun__error("out of memory");
		return 1;
	}
	g = &a->group;
	a->events.fd = -1;
	/* A console nobody reads must not kill the agent: writes fail with
	 * EPIPE instead, and workers get their default back from libuv. */
	signal(SIGPIPE, SIG_IGN);
	a->spec = spec;
	a->reaper.fd = -1;
	a->started_ms = crun__wall_ms();
	if (gethostname(a->hostname, sizeof(a->hostname) - 1) < 0)
		snprintf(a->hostname, sizeof(a->hostname), "localhost");
	g->spec = spec;
	g->loop = &a->loop;
	g->spawner = &a->spawner;
	g->rdzv = spec->rdzv.enabled ? &a->rdzv : NULL;
	g->reaper = &a->reaper;
	g->name = spec->name ? spec->name : default_name(spec);
	g->hostname = a->hostname;
	g->own_error_file = getenv("TORCHELASTIC_ERROR_FILE");
	if (g->own_error_file && !*g->own_error_file)
		g->own_error_file = NULL;
	g->finished = group_finished;
	g->arg = a;
	if (crun__monitor_init(&a->monitor, spec->run_id, a->hostname, spec->nproc_per_node,
			       spec->max_restarts, crun__wall_ms()) < 0) {
		crun__error("out of memory");
		goto out_free;
	}
	g->monitor = &a->monitor;
	a->heartbeat.monitor = &a->monitor;
	a->rdzv.monitor = &a->monitor;
	if (spec->events_path) {
		err = crun__events_open(&a->events, spec->events_path);
		if (err < 0) {
			crun__error("cannot open the events file '%s': %s", spec->events_path,
				    strerror(-err));
			status = 2;
			goto out_free;
		}
		crun__monitor_observe(&a->monitor, crun__events_observe, &a->events);
	}
	if (fixed_placement(spec, &place) < 0)
		goto out_free;
	if (setup_dirs(a) < 0)
		goto out_dirs;
	g->keeps_files = a->log_root != NULL;
	/* The guard first: it must hold none of what follows. */
	err = agent_reaper_start(&a->reaper, (size_t)spec->nproc_per_node + 16, a->tmp_dir);
	if (err < 0) {
		crun__error("cannot start the orphan guard: %s", strerror(-err));
		goto out_dirs;
	}
	err = uv_loop_init(&a->loop);
	if (err < 0) {
		crun__error("cannot create the event loop: %s", uv_strerror(err));
		goto out_reaper;
	}
	crun__console_init(&a->console[0], STDOUT_FILENO);
	crun__console_init(&a->console[1], STDERR_FILENO);
	uv_timer_init(&a->loop, &a->linger);
	a->linger.data = a;
	uv_timer_init(&a->loop, &a->alive);
	a->alive.data = a;
	a->spawner.loop = &a->loop;
	a->spawner.spec = spec;
	a->spawner.log_root = a->log_root;
	a->spawner.tmp_dir = a->tmp_dir;
	a->spawner.console = a->console;
	a->spawner.reaper = &a->reaper;
	a->heartbeat.loop = &a->loop;
	err = crun__heartbeat_init(&a->heartbeat, &spec->heartbeat, spec->nproc_per_node,
				   serves_file_timer(spec), a->tmp_dir);
	if (err < 0) {
		crun__error("cannot set up the heartbeats: %s", strerror(-err));
		goto out_loop;
	}
	a->spawner.heartbeat = &a->heartbeat;
	g->heartbeat = &a->heartbeat;
	g->on_step = straggler_step;
	g->on_step_arg = &g->stragglers;
	if (!spec->rdzv.enabled && spec->host_store) {
		if (setup_store(a) < 0)
			goto out_loop;
		announce(a, a->store_env + strlen("CRUN_STORE="));
		/* MASTER_ADDR as the user gave it (PyTorch compares it with
		 * the address it is asked to connect to), the store's port. */
		if (spec->agent_store)
			place.master_port = crun__server_port(a->server);
		place.agent_store = spec->agent_store;
	}
	err = crun__gpu_watch_init(&a->gpus, &a->loop, &a->monitor, spec->nproc_per_node,
				   spec->gpu_sample_interval_ms, spec->gpu_release_timeout_ms,
				   spec->nvml_library ? spec->nvml_library
						      : crun__env_get("CRUN_NVML_LIBRARY"),
				   environ, spec->extra_env, spec->virtual_local_rank);
	if (err < 0) {
		crun__error("cannot set up the GPU monitor: %s", strerror(-err));
		goto out_loop;
	}
	g->gpus = &a->gpus;
	err = crun__group_init(g, &place);
	if (err < 0) {
		crun__error("cannot set up the worker group: %s", uv_strerror(err));
		goto out_loop;
	}
	if (setup_signals(a) < 0)
		goto out_loop;
	if (spec->metrics_port >= 0 && setup_metrics(a) < 0)
		goto out_loop;
	if (spec->rdzv.enabled) {
		crun__group_rdzv_hooks(g, &a->group_hooks);
		hooks = (struct crun__rdzv_hooks){
			.ready = rdzv_ready,
			.ended = rdzv_ended,
			.done = rdzv_done,
			.failed = rdzv_failed,
			.arg = a,
		};
		if (crun__rdzv_setup(&a->rdzv, &a->loop, spec, a->hostname, &hooks, &a->server) < 0)
			goto out_loop;
		snprintf(a->monitor.node_id, sizeof(a->monitor.node_id), "%s", a->rdzv.node_id);
		/* Twice per interval: never at the window's edge. */
		g->frozen_after_ms =
			spec->rdzv.keep_alive_interval_ms * spec->rdzv.keep_alive_max_attempt;
		g->last_alive_ms = uv_now(&a->loop);
		uv_timer_start(&a->alive, say_alive, 0,
			       (uint64_t)(spec->rdzv.keep_alive_interval_ms / 2 + 1));
		if (rdzv_env(a) < 0) {
			crun__error("out of memory");
			goto out_loop;
		}
		announce(a, a->rdzv.endpoint);
	}
	a->spawner.store_env = a->store_env;
	a->spawner.token_env = a->token_env;
	if (spec->agent_store && !spec->rdzv.enabled)
		a->spawner.agent_store = a->server;
	if (crun__spawner_env_init(&a->spawner) < 0) {
		crun__error("out of memory");
		goto out_loop;
	}

	crun__monitor_job_started(&a->monitor, crun__wall_ms());
	crun__group_start(g);
	uv_run(&a->loop, UV_RUN_DEFAULT);
	status = crun__group_status(g);
	if (status < 0) {
		crun__error("internal error: the worker group ended in state '%s'",
			    crun__group_state_name(g->core.state));
		status = 1;
	}
	if (crun__log_enabled(CRUN_LOG_DEBUG)) {
		char how[160];

		crun__group_describe(g, how, sizeof(how));
		crun__debug("the worker group is done: %s; crun's exit status is %d", how, status);
	}
	if (g->attempts > 0 && (!spec->rdzv.enabled || !a->rdzv.hosting))
		say_end(a, status);
	goto out_close;

out_loop:
	agent_shutdown(a, false);
	uv_run(&a->loop, UV_RUN_DEFAULT);
out_close:
	agent_shutdown(a, false);
	uv_run(&a->loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&a->loop) < 0)
		crun__debug("some of crun's connections or timers were still open at the end; "
			    "they close with the process");
out_reaper:
	agent_reaper_stop(&a->reaper);
out_dirs:
	if (a->tmp_dir)
		agent_remove_dir(a->tmp_dir);
out_free:
	if (a->job_dir[0])
		crun__jobfile_remove(a->job_dir, spec->run_id, (long)getpid());
	crun__group_finish(g);
	crun__heartbeat_finish(&a->heartbeat);
	crun__gpu_watch_finish(&a->gpus);
	crun__events_close(&a->events);
	crun__monitor_finish(&a->monitor);
	crun__spawner_env_finish(&a->spawner);
	free_token_env(a);
	free(a->store_env);
	free(a->start_line);
	free(a->signals);
	free(a->tmp_dir);
	free(a->log_root);
	free(a);
	return status;
}
