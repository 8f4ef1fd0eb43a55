#include "launcher/plan.h"
#include "launcher/torch_probe.h"
#include "common/util.h"
#include "rendezvous/wire.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

static bool all_digits(const char *s, size_t len)
{
	if (!len)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return true;
}

static int count_physical(const char *gpus_dir, const char *dev_dir)
{
	struct dirent *de;
	DIR *d;
	int n = 0;

	d = opendir(gpus_dir);
	if (d) {
		while ((de = readdir(d)))
			n += de->d_name[0] != '.';
		closedir(d);
		return n;
	}
	d = opendir(dev_dir);
	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += !strncmp(de->d_name, "nvidia", 6) &&
		     all_digits(de->d_name + 6, strlen(de->d_name + 6));
	closedir(d);
	return n;
}

int crun__launch_count_gpus(const char *gpus_dir, const char *dev_dir, const char *cvd)
{
	int n = count_physical(gpus_dir, dev_dir), count = 0;
	const char *p = cvd;
	unsigned char seen[CRUN_LAUNCH_MAX_NPROC] = {0};

	if (!cvd || !n)
		return n;
	/* The driver's reading: stop at the first entry that does not name a
	 * device (so "-1" or "" hide every GPU). */
	while (count < n) {
		size_t len = strcspn(p, ",");
		const char *s = p;
		size_t l = len;

		while (l && isspace((unsigned char)*s)) {
			s++;
			l--;
		}
		while (l && isspace((unsigned char)s[l - 1]))
			l--;
		if (all_digits(s, l)) {
			long idx = l > 6 ? CRUN_LAUNCH_MAX_NPROC : strtol(s, NULL, 10);

			if (idx >= n || idx >= CRUN_LAUNCH_MAX_NPROC || seen[idx])
				break;
			seen[idx] = 1;
		} else if (!(l > 4 && (!strncmp(s, "GPU-", 4) || !strncmp(s, "MIG-", 4)))) {
			break;
		}
		count++;
		if (!p[len])
			break;
		p += len + 1;
	}
	return count;
}

int crun__launch_free_port(int *port, char *err, size_t errlen)
{
	int rc = crun__free_port();

	if (rc < 0) {
		crun__seterr(err, errlen, "cannot find a free port: %s", strerror(-rc));
		return rc;
	}
	*port = rc;
	return 0;
}

/* A version 4 UUID from the kernel's random source, as torchrun's
 * --standalone run id. */
static int make_uuid(char *out, size_t len)
{
	unsigned char b[16];
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t n = getrandom(b + got, sizeof(b) - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	snprintf(out, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
		 b[13], b[14], b[15]);
	return 0;
}

static int resolve_nproc(const struct crun__launch_opts *o, char **envp,
			 const struct crun__launch_host *host, int *nproc, char *err, size_t errlen)
{
	const char *gpus_dir = host && host->gpus_dir ? host->gpus_dir : "/proc/driver/nvidia/gpus";
	const char *dev_dir = host && host->dev_dir ? host->dev_dir : "/dev";
	long ncpus = host && host->ncpus ? host->ncpus : sysconf(_SC_NPROCESSORS_ONLN);
	int gpus;

	if (ncpus < 1)
		ncpus = 1;
	if (ncpus > CRUN_LAUNCH_MAX_NPROC)
		ncpus = CRUN_LAUNCH_MAX_NPROC;
	switch (o->nproc_mode) {
	case CRUN_NPROC_COUNT:
		*nproc = o->nproc;
		return 0;
	case CRUN_NPROC_CPU:
		*nproc = (int)ncpus;
		return 0;
	case CRUN_NPROC_AUTO:
	case CRUN_NPROC_GPU:
		gpus = crun__launch_count_gpus(
			gpus_dir, dev_dir, crun__launch_env_lookup(envp, "CUDA_VISIBLE_DEVICES"));
		if (gpus > 0) {
			*nproc = gpus;
			return 0;
		}
		if (o->nproc_mode == CRUN_NPROC_AUTO) {
			*nproc = (int)ncpus;
			return 0;
		}
		crun__launch_opts_invalid(
			o, CRUN_OPT_NPROC_PER_NODE, "gpu",
			"no NVIDIA GPU found (none in /proc/driver/nvidia/gpus or "
			"/dev/nvidia*, or CUDA_VISIBLE_DEVICES hides them)",
			err, errlen);
		return -EINVAL;
	}
	return -EINVAL;
}

static int resolve_std(const struct crun__launch_opts *o, enum crun__launch_opt id,
		       const struct crun__std_spec *spec, int nproc, enum crun__std **out,
		       char *err, size_t errlen)
{
	enum crun__std *arr;

	for (size_t i = 0; i < spec->count; i++) {
		if (spec->ranks[i] >= nproc) {
			char v[32], reason[96];

			snprintf(v, sizeof(v), "%d:%d", spec->ranks[i], (int)spec->streams[i]);
			snprintf(reason, sizeof(reason),
				 "local rank %d is not below --nproc-per-node (%d)", spec->ranks[i],
				 nproc);
			crun__launch_opts_invalid(o, id, v, reason, err, errlen);
			return -EINVAL;
		}
	}
	if (spec->all == CRUN_STD_NONE && !spec->count)
		return 0;
	arr = calloc((size_t)nproc, sizeof(*arr));
	if (!arr) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (int lr = 0; lr < nproc; lr++)
		arr[lr] = crun__std_spec_get(spec, lr);
	*out = arr;
	return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* torchrun's --run-path calls runpy.run_path(SCRIPT, run_name="__main__")
 * in a process of its own with sys.argv = [SCRIPT, ARGS...], wrapped in
 * @record; sys.path[0] is the launcher's own: the cwd under "python -m
 * torch.distributed.run", torchrun's bin directory under "torchrun",
 * never the script's directory. This is that, for python -c SCRIPT ARGS:
 * sys.argv loses "-c"; sys.path[0] is the cwd as an absolute path (the
 * useful one of the two); an exception that ends the script is written to
 * TORCHELASTIC_ERROR_FILE as @record does, unless the script wrote the
 * file itself. */
static const char run_path_code[] =
	"import json, os, runpy, sys, time, traceback\n"
	"sys.argv = sys.argv[1:]\n"
	"if sys.path and sys.path[0] == '':\n"
	"    sys.path[0] = os.getcwd()\n"
	"try:\n"
	"    runpy.run_path(sys.argv[0], run_name='__main__')\n"
	"except Exception as e:\n"
	"    p = os.environ.get('TORCHELASTIC_ERROR_FILE')\n"
	"    if p and not os.path.exists(p):\n"
	"        with open(p, 'w') as f:\n"
	"            json.dump({'message': {'message': f'{type(e).__name__}: {e}',\n"
	"                       'extraInfo': {'py_callstack': traceback.format_exc(),\n"
	"                                     'timestamp': str(int(time.time()))}}}, f)\n"
	"    raise\n";

static int build_argv(struct crun__launch_plan *plan, const struct crun__launch_opts *o,
		      char **envp, char *err, size_t errlen)
{
	const char *python = crun__launch_env_lookup(envp, "PYTHON_EXEC");
	const char *pre[4];
	int npre = 0, k = 0;

	if (!python || !*python)
		python = "python3";
	if (o->run_path) {
		pre[npre++] = python;
		pre[npre++] = "-u";
		pre[npre++] = "-c";
		pre[npre++] = run_path_code;
	} else if (o->module) {
		pre[npre++] = python;
		pre[npre++] = "-u";
		pre[npre++] = "-m";
	} else if (!o->no_python && ends_with(o->command[0], ".py")) {
		pre[npre++] = python;
		pre[npre++] = "-u";
	}
	plan->argv = calloc((size_t)(npre + o->command_argc + 1), sizeof(*plan->argv));
	if (!plan->argv) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < npre; i++)
		plan->argv[k++] = (char *)pre[i];
	for (int i = 0; i < o->command_argc; i++)
		plan->argv[k++] = o->command[i];
	plan->argc = k;
	return 0;
}

/* The interpreter the workers' PyTorch would run in: the command itself
 * when it is a Python run directly, else PYTHON_EXEC or python3. */
static const char *worker_python(const struct crun__launch_opts *o, char **envp)
{
	const char *python = crun__launch_env_lookup(envp, "PYTHON_EXEC");
	const char *cmd = o->command_argc ? o->command[0] : "";
	const char *base = strrchr(cmd, '/');

	base = base ? base + 1 : cmd;
	if (o->no_python && !strncmp(base, "python", 6))
		return cmd;
	return python && *python ? python : "python3";
}

static void resolve_agent_store(struct crun__launch_plan *plan, const struct crun__launch_opts *o,
				char **envp)
{
	const char *disable = crun__launch_env_lookup(envp, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
	const char *python;
	struct crun__torch_found t;
	const size_t len = sizeof(plan->agent_store_why);

	if (o->agent_store != CRUN_AGENT_STORE_AUTO) {
		plan->agent_store = o->agent_store == CRUN_AGENT_STORE_ON;
		snprintf(plan->agent_store_why, len, "%s", plan->agent_store ? "on" : "off");
		return;
	}
	if (disable && !strcmp(disable, "1")) {
		plan->agent_store = false;
		snprintf(plan->agent_store_why, len, "off (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)");
		return;
	}
	python = worker_python(o, envp);
	crun__torch_probe(python, envp, &t);
	if (!t.found) {
		plan->agent_store = true;
		snprintf(plan->agent_store_why, len, "on (no PyTorch found for %s)", python);
		return;
	}
	plan->agent_store = crun__torch_version_supported(t.major, t.minor);
	snprintf(plan->agent_store_why, len, "%s (PyTorch %s in %s%s)",
		 plan->agent_store ? "on" : "off", t.version, t.dir,
		 plan->agent_store ? "" : ", outside " CRUN_TORCH_RANGE);
}

/* Several nodes: where the store is, who hosts it, the node rank. */
static int resolve_rendezvous(struct crun__launch_plan *plan, const struct crun__launch_opts *o,
			      char *err, size_t errlen)
{
	bool is_static = o->rdzv_backend == CRUN_RDZV_STATIC;
	char v[32], reason[256];
	const char *ep = o->rdzv_endpoint;
	int rc;

	/* torchrun's own default backend is static: the guides' two-node
	 * command (--nnodes=2 --node-rank=R --master-addr=A --master-port=P,
	 * no --rdzv-endpoint) must work unchanged, so a fixed node count with
	 * --master-addr and no endpoint and no explicit backend means static. */
	if (!is_static && !ep && o->source[CRUN_OPT_RDZV_BACKEND] == CRUN_SRC_DEFAULT &&
	    o->source[CRUN_OPT_MASTER_ADDR] != CRUN_SRC_DEFAULT && o->nnodes_min == o->nnodes_max &&
	    o->nnodes_max > 1 && !o->standalone)
		is_static = true;
	plan->rdzv_static = is_static;

	if (o->nnodes_min == o->nnodes_max)
		snprintf(v, sizeof(v), "%d", o->nnodes_max);
	else
		snprintf(v, sizeof(v), "%d:%d", o->nnodes_min, o->nnodes_max);
	plan->node_rank = o->node_rank;
	plan->is_host = o->rdzv_conf.is_host;
	if (o->standalone && o->nnodes_max > 1) {
		/* torchrun would wait for nodes that can never reach its store
		 * on localhost:0; running one node instead would be a quiet
		 * lie about the world size. */
		crun__launch_opts_invalid(o, CRUN_OPT_NNODES, v,
					  "--standalone runs one node (expected 1, or "
					  "--rdzv-endpoint instead of --standalone)",
					  err, errlen);
		return -EINVAL;
	}
	if (o->standalone || (o->nnodes_max == 1 && !ep))
		return 0;
	plan->rendezvous = true;
	if (is_static && o->nnodes_min != o->nnodes_max) {
		crun__launch_opts_invalid(o, CRUN_OPT_NNODES, v,
					  "--rdzv-backend=static needs a fixed number of nodes "
					  "(expected N)",
					  err, errlen);
		return -EINVAL;
	}
	if (!ep && !is_static) {
		crun__launch_opts_invalid(o, CRUN_OPT_NNODES, v,
					  "more than one node needs --rdzv-endpoint HOST[:PORT] "
					  "(or --rdzv-backend=static with --master-addr)",
					  err, errlen);
		return -EINVAL;
	}
	if (ep) {
		rc = crun__parse_endpoint(ep, 29400, plan->rdzv_host, sizeof(plan->rdzv_host),
					  &plan->rdzv_port, reason, sizeof(reason));
		if (rc || plan->rdzv_port < 1) {
			crun__launch_opts_invalid(o, CRUN_OPT_RDZV_ENDPOINT, ep,
						  rc ? reason
						     : "a store of several nodes needs a port "
						       "from 1 to 65535",
						  err, errlen);
			return -EINVAL;
		}
	} else {
		snprintf(plan->rdzv_host, sizeof(plan->rdzv_host), "%s",
			 o->master_addr ? o->master_addr : "127.0.0.1");
		plan->rdzv_port = o->master_port ? o->master_port : 29500;
	}
	if (is_static) {
		if (plan->is_host < 0)
			plan->is_host = o->node_rank == 0;
	} else if (o->source[CRUN_OPT_NODE_RANK] == CRUN_SRC_DEFAULT) {
		plan->node_rank = -1;
	}
	return 0;
}

/* A host the scheduler named (scheduler.h: resolve_host) must resolve when the
 * value it is part of won, or every node would wait for a store nobody
 * can reach. */
static int check_sched_host(const struct crun__launch_opts *o, char *err, size_t errlen)
{
	const struct crun__sched *s = &o->sched;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
	int rc;

	if (!s->resolve_host[0] || s->resolve_opt < 0 || s->resolve_opt >= CRUN_OPT_COUNT ||
	    o->source[s->resolve_opt] != CRUN_SRC_SCHED)
		return 0;
	rc = getaddrinfo(s->resolve_host, NULL, &hints, &res);
	if (rc) {
		crun__seterr(err, errlen, "%s %s: host '%s' does not resolve: %s",
			     crun__sched_kind_name(s->kind), s->resolve_origin, s->resolve_host,
			     rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -EINVAL;
	}
	freeaddrinfo(res);
	return 0;
}

int crun__launch_forward_signals(const struct crun__launch_opts *o, int *out)
{
	int n = 0;

	for (int i = 0; i < o->nforward_signals; i++) {
		bool handled = false;

		for (int j = 0; j < o->nsignals; j++)
			handled |= o->signals[j] == o->forward_signals[i];
		if (!handled)
			out[n++] = o->forward_signals[i];
	}
	return n;
}

int crun__launch_plan_make(struct crun__launch_plan *plan, const struct crun__launch_opts *o,
			   char **envp, const struct crun__launch_host *host, bool pick_port,
			   char *err, size_t errlen)
{
	char id[40], reason[256];
	int rc;

	memset(plan, 0, sizeof(*plan));
	rc = resolve_rendezvous(plan, o, err, errlen);
	if (rc)
		return rc;
	rc = check_sched_host(o, err, errlen);
	if (rc)
		return rc;
	rc = resolve_nproc(o, envp, host, &plan->nproc, err, errlen);
	if (rc)
		return rc;
	rc = resolve_std(o, CRUN_OPT_REDIRECTS, &o->redirects, plan->nproc, &plan->redirects, err,
			 errlen);
	if (rc)
		return rc;
	rc = resolve_std(o, CRUN_OPT_TEE, &o->tee, plan->nproc, &plan->tee, err, errlen);
	if (rc)
		return rc;
	if (o->ranks_filter) {
		plan->console_ranks = calloc((size_t)plan->nproc, sizeof(bool));
		if (!plan->console_ranks) {
			crun__seterr(err, errlen, "out of memory");
			return -ENOMEM;
		}
		for (size_t i = 0; i < o->nranks_filter; i++) {
			if (o->ranks_filter[i] >= plan->nproc) {
				char v[16];

				snprintf(v, sizeof(v), "%d", o->ranks_filter[i]);
				snprintf(reason, sizeof(reason),
					 "local rank %d is not below --nproc-per-node (%d)",
					 o->ranks_filter[i], plan->nproc);
				crun__launch_opts_invalid(o, CRUN_OPT_LOCAL_RANKS_FILTER, v, reason,
							  err, errlen);
				return -EINVAL;
			}
			plan->console_ranks[o->ranks_filter[i]] = true;
		}
	}
	if (o->rdzv_conf.token_file) {
		rc = crun__read_secret_file(o->rdzv_conf.token_file, CRUN_WIRE_TOKEN_MAX,
					    &plan->token, &plan->token_len, reason, sizeof(reason));
		if (rc) {
			crun__launch_opts_invalid(o, CRUN_OPT_RDZV_CONF, o->rdzv_conf.token_file,
						  reason, err, errlen);
			return -EINVAL;
		}
	}

	/* torchrun: --standalone gets a fresh uuid and ignores --rdzv-id. */
	if (o->standalone) {
		rc = make_uuid(id, sizeof(id));
		if (rc) {
			crun__seterr(err, errlen, "cannot make a run id: %s", strerror(-rc));
			return rc;
		}
		plan->run_id = strdup(id);
	} else {
		plan->run_id = strdup(o->rdzv_id ? o->rdzv_id : "none");
	}
	if (!plan->run_id) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	plan->master_addr = o->master_addr  ? o->master_addr
			    : o->local_addr ? o->local_addr
					    : "127.0.0.1";
	plan->master_port = o->master_port;
	resolve_agent_store(plan, o, envp);
	/* With the agent store one node's MASTER_PORT is its store's port. */
	if (!plan->master_port && pick_port && !plan->rendezvous && !plan->agent_store) {
		rc = crun__launch_free_port(&plan->master_port, err, errlen);
		if (rc)
			return rc;
	}
	return build_argv(plan, o, envp, err, errlen);
}

void crun__launch_plan_finish(struct crun__launch_plan *plan)
{
	free(plan->argv);
	free(plan->run_id);
	free(plan->redirects);
	free(plan->tee);
	free(plan->console_ranks);
	if (plan->token) {
		explicit_bzero(plan->token, plan->token_len);
		free(plan->token);
	}
	memset(plan, 0, sizeof(*plan));
}

/* Where one node's agent store listens so that MASTER_ADDR reaches it:
 * loopback for loopback, an address literal as it is, every IPv4 address
 * for a name (which may resolve to another of this host's addresses). */
static const char *store_bind_host(const char *master_addr)
{
	if (!strcmp(master_addr, "localhost"))
		return "127.0.0.1";
	if (crun__addr_is_literal(master_addr))
		return master_addr;
	return "0.0.0.0";
}

void crun__launch_plan_to_spec(const struct crun__launch_plan *plan,
			       const struct crun__launch_opts *o, struct crun__agent_spec *spec)
{
	spec->argv = plan->argv;
	spec->argc = plan->argc;
	if (o->run_path) /* the script, not python -c's code */
		spec->name = o->command[0];
	spec->nproc_per_node = plan->nproc;
	spec->nnodes = 1;
	spec->node_rank = o->node_rank;
	spec->role = o->role ? o->role : "default";
	spec->max_restarts = o->max_restarts;
	spec->metrics_port = o->metrics_port;
	spec->metrics_host = o->metrics_host;
	spec->straggler_factor = o->straggler_factor;
	spec->straggler_window = o->straggler_window;
	spec->gpu_sample_interval_ms = o->gpu_sample_interval_ms;
	spec->gpu_release_timeout_ms = o->gpu_release_timeout_ms;
	spec->shutdown_timeout_ms = o->shutdown_timeout_ms;
	spec->min_attempt_ms = o->min_attempt_ms;
	spec->heartbeat = o->heartbeat;
	spec->run_id = plan->run_id;
	spec->master_addr = plan->master_addr;
	spec->master_port = plan->master_port;
	spec->local_addr = o->local_addr;
	spec->log_dir = o->log_dir;
	spec->events_path = o->events;
	spec->redirects = plan->redirects;
	spec->tee = plan->tee;
	spec->console_ranks = plan->console_ranks;
	spec->log_line_prefix_template = o->log_line_prefix_template;
	for (int i = 0; i < o->nsignals; i++)
		spec->signals[i] = o->signals[i];
	spec->nsignals = o->nsignals;
	spec->nforward_signals = crun__launch_forward_signals(o, spec->forward_signals);
	spec->virtual_local_rank = o->virtual_local_rank;
	spec->token = plan->token;
	spec->token_len = plan->token_len;
	spec->token_file = o->rdzv_conf.token_file;
	spec->agent_store = plan->agent_store;
	if (plan->rendezvous) {
		const struct crun__rdzv_conf *rc = &o->rdzv_conf;

		spec->nnodes = o->nnodes_max;
		spec->node_rank = plan->node_rank;
		spec->rdzv.enabled = true;
		spec->rdzv.host = plan->rdzv_host;
		spec->rdzv.port = plan->rdzv_port;
		spec->rdzv.is_host = plan->is_host;
		spec->rdzv.min_nodes = o->nnodes_min;
		spec->rdzv.max_nodes = o->nnodes_max;
		spec->rdzv.join_timeout_ms = crun__rdzv_conf_join_timeout_ms(rc, plan->rdzv_static);
		spec->rdzv.last_call_timeout_ms = rc->last_call_timeout_ms;
		spec->rdzv.close_timeout_ms = rc->close_timeout_ms;
		spec->rdzv.keep_alive_interval_ms = rc->keep_alive_interval_ms;
		spec->rdzv.keep_alive_max_attempt = rc->keep_alive_max_attempt;
		spec->rdzv.read_timeout_ms = rc->read_timeout_ms;
		spec->rdzv.rejoin_timeout_ms =
			rc->rejoin_timeout_ms ? rc->rejoin_timeout_ms : spec->rdzv.join_timeout_ms;
		spec->rdzv.blacklist_failures = rc->blacklist_failures;
		spec->rdzv.blacklist_window_ms = rc->blacklist_window_ms;
		spec->rdzv.cooldown_min_ms = rc->cooldown_min_ms;
		spec->rdzv.cooldown_max_ms = rc->cooldown_max_ms;
		spec->rdzv.reconnect_timeout_ms = rc->reconnect_timeout_ms;
		return;
	}
	/* One node: the agent hosts the store for native workers on loopback,
	 * on a port the kernel picks; with the agent store it is also
	 * PyTorch's, at MASTER_ADDR:MASTER_PORT. */
	spec->host_store = true;
	spec->store_host = "127.0.0.1";
	spec->store_port = 0;
	if (plan->agent_store) {
		spec->store_host = store_bind_host(plan->master_addr);
		spec->store_port = plan->master_port;
	}
}

/* Single-quotes a word for a shell when it needs it. */
void crun__launch_print_word(FILE *f, const char *w)
{
	/* Quoted, a byte takes at most 4 ('\''), plus the quotes. */
	size_t cap = 4 * strlen(w) + 3, used = 0;
	char *buf = malloc(cap);

	if (buf && crun__shell_quote(buf, cap, &used, w) == 0)
		fputs(buf, f);
	else
		fputs("<out of memory>", f);
	free(buf);
}

static void print_std(FILE *f, const char *key, const struct crun__std_spec *spec)
{
	fprintf(f, "%s=", key);
	if (!spec->count)
		fprintf(f, "%d", (int)spec->all);
	for (size_t i = 0; i < spec->count; i++)
		fprintf(f, "%s%d:%d", i ? "," : "", spec->ranks[i], (int)spec->streams[i]);
	fputc('\n', f);
}

void crun__launch_plan_print(FILE *f, const struct crun__launch_plan *plan,
			     const struct crun__launch_opts *o)
{
	const struct crun__rdzv_conf *rc = &o->rdzv_conf;
	static const char *const backends[] = {"c10d", "static"};
	int64_t join_ms;

	fprintf(f, "nproc_per_node=%d\n", plan->nproc);
	if (o->nnodes_min == o->nnodes_max)
		fprintf(f, "nnodes=%d\n", o->nnodes_max);
	else
		fprintf(f, "nnodes=%d:%d\n", o->nnodes_min, o->nnodes_max);
	fprintf(f, "node_rank=%d\n", o->node_rank);
	fprintf(f, "standalone=%d\n", o->standalone);
	fprintf(f, "rdzv_backend=%s\n", plan->rdzv_static ? "static" : backends[o->rdzv_backend]);
	fprintf(f, "rdzv_endpoint=%s\n", o->rdzv_endpoint ? o->rdzv_endpoint : "");
	if (plan->rendezvous)
		fprintf(f,
			strchr(plan->rdzv_host, ':') ? "rdzv_store=[%s]:%d\n"
						     : "rdzv_store=%s:%d\n",
			plan->rdzv_host, plan->rdzv_port);
	else
		fprintf(f, "rdzv_store=none\n");
	fprintf(f, "run_id=%s\n", plan->run_id);
	join_ms = crun__rdzv_conf_join_timeout_ms(rc, plan->rdzv_static);
	fprintf(f, "rdzv_conf.join_timeout_ms=%lld\n", (long long)join_ms);
	fprintf(f, "rdzv_conf.last_call_timeout_ms=%lld\n", (long long)rc->last_call_timeout_ms);
	fprintf(f, "rdzv_conf.close_timeout_ms=%lld\n", (long long)rc->close_timeout_ms);
	fprintf(f, "rdzv_conf.keep_alive_interval_ms=%lld\n",
		(long long)rc->keep_alive_interval_ms);
	fprintf(f, "rdzv_conf.keep_alive_max_attempt=%d\n", rc->keep_alive_max_attempt);
	fprintf(f, "rdzv_conf.is_host=%s\n", rc->is_host < 0 ? "auto" : rc->is_host ? "1" : "0");
	fprintf(f, "rdzv_conf.token_file=%s\n", rc->token_file ? rc->token_file : "");
	fprintf(f, "rdzv_conf.read_timeout_ms=%lld\n", (long long)rc->read_timeout_ms);
	fprintf(f, "rdzv_conf.rejoin_timeout_ms=%lld\n",
		(long long)(rc->rejoin_timeout_ms ? rc->rejoin_timeout_ms : join_ms));
	fprintf(f, "rdzv_conf.blacklist_failures=%d\n", rc->blacklist_failures);
	fprintf(f, "rdzv_conf.blacklist_window_ms=%lld\n", (long long)rc->blacklist_window_ms);
	fprintf(f, "rdzv_conf.blacklist_cooldown_range_ms=%lld:%lld\n",
		(long long)rc->cooldown_min_ms, (long long)rc->cooldown_max_ms);
	fprintf(f, "rdzv_conf.reconnect_timeout_ms=%lld\n", (long long)rc->reconnect_timeout_ms);
	fprintf(f, "master_addr=%s\n", plan->master_addr);
	if (plan->master_port)
		fprintf(f, "master_port=%d\n", plan->master_port);
	else
		fprintf(f, "master_port=auto\n");
	fprintf(f, "local_addr=%s\n", o->local_addr ? o->local_addr : "");
	fprintf(f, "agent_store=%s\n", plan->agent_store_why);
	fprintf(f, "role=%s\n", o->role ? o->role : "default");
	fprintf(f, "max_restarts=%d\n", o->max_restarts);
	if (o->metrics_port >= 0)
		fprintf(f, "metrics=%s:%d\n", o->metrics_host ? o->metrics_host : "0.0.0.0",
			o->metrics_port);
	else
		fprintf(f, "metrics=off\n");
	fprintf(f, "shutdown_timeout_ms=%lld\n", (long long)o->shutdown_timeout_ms);
	fprintf(f, "min_attempt_time_ms=%lld\n", (long long)o->min_attempt_ms);
	fprintf(f, "monitor_interval_ms=%lld\n", (long long)o->monitor_interval_ms);
	fprintf(f, "heartbeat_timeout_ms=%lld\n", (long long)o->heartbeat.timeout_ms);
	fprintf(f, "heartbeat_initial_timeout_ms=%lld\n",
		(long long)o->heartbeat.initial_timeout_ms);
	fputs("heartbeat_section_timeouts=", f);
	for (int i = 0; i < o->heartbeat.nsections; i++)
		fprintf(f, "%s%s=%lldms", i ? "," : "", o->heartbeat.sections[i].name,
			(long long)o->heartbeat.sections[i].timeout_ms);
	fprintf(f, "%s\n", o->heartbeat.nsections ? "" : "none");
	fprintf(f, "heartbeat_auto_factor=%g\n", o->heartbeat.auto_factor);
	fprintf(f, "start_method=%s\n", o->start_method ? o->start_method : "spawn");
	fprintf(f, "straggler_factor=%g\n", o->straggler_factor);
	fprintf(f, "straggler_window=%d\n", o->straggler_window);
	fprintf(f, "gpu_sample_interval_ms=%lld\n", (long long)o->gpu_sample_interval_ms);
	fprintf(f, "gpu_release_timeout_ms=%lld\n", (long long)o->gpu_release_timeout_ms);
	fputs("signals_to_handle=", f);
	for (int i = 0; i < o->nsignals; i++)
		fprintf(f, "%s%s", i ? "," : "", crun__signal_name(o->signals[i]));
	fputc('\n', f);
	{
		int fwd[CRUN_AGENT_MAX_SIGNALS], n = crun__launch_forward_signals(o, fwd);

		fputs("signals_to_forward=", f);
		for (int i = 0; i < n; i++)
			fprintf(f, "%s%s", i ? "," : "", crun__signal_name(fwd[i]));
		fprintf(f, "%s\n", n ? "" : "none");
	}
	fprintf(f, "virtual_local_rank=%d\n", o->virtual_local_rank);
	fprintf(f, "log_dir=%s\n", o->log_dir ? o->log_dir : "");
	fprintf(f, "events=%s\n", o->events ? o->events : "");
	print_std(f, "redirects", &o->redirects);
	print_std(f, "tee", &o->tee);
	fputs("local_ranks_filter=", f);
	if (!o->ranks_filter)
		fputs("all", f);
	for (size_t i = 0; i < o->nranks_filter; i++)
		fprintf(f, "%s%d", i ? "," : "", o->ranks_filter[i]);
	fputc('\n', f);
	fprintf(f, "log_line_prefix_template=%s\n",
		o->log_line_prefix_template ? o->log_line_prefix_template : "");
	fprintf(f, "config=%s\n", o->config_path ? o->config_path : "");
	fputs("command=", f);
	for (int i = 0; i < plan->argc; i++) {
		if (i)
			fputc(' ', f);
		crun__launch_print_word(f, plan->argv[i]);
	}
	fputc('\n', f);
	fprintf(f, "scheduler=%s%s%s\n", crun__sched_kind_name(o->sched.kind),
		o->sched.detail[0] ? ": " : "", o->sched.detail);
	fprintf(f, "slurm_tasks_as_nodes=%d\n", o->sched.ask.slurm_tasks_as_nodes);
	if (o->slurm_requeue)
		fprintf(f, "slurm_requeue=%d\n", o->slurm_requeue);
	else
		fputs("slurm_requeue=none\n", f);
	if (o->sched.restart_count >= 0)
		fprintf(f, "slurm_restart_count=%d\n", o->sched.restart_count);
	/* Where each value that is not a default came from. */
	for (int id = 0; id < CRUN_OPT_COUNT; id++) {
		char key[48], origin[CRUN_SCHED_ORIGIN_MAX + 320];

		if (o->source[id] == CRUN_SRC_DEFAULT || id == CRUN_OPT_DRY_RUN)
			continue;
		crun__launch_config_key((enum crun__launch_opt)id, key, sizeof(key));
		crun__launch_opts_origin(o, (enum crun__launch_opt)id, origin, sizeof(origin));
		fprintf(f, "from.%s=%s\n", key, origin);
	}
}
