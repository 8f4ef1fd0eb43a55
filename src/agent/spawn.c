/* One worker: its command line, its environment, its log files and its
 * process.
 *
 * The environment every worker shares is built once per job (crun__spawner_env_init)
 * as an array of pointers into crun's environment, extra_env and a few
 * strings of the agent's own; each spawn only adds the half dozen variables
 * that differ between workers and attempts. uv_spawn copies nothing but
 * uses the array in the child before exec, so it can be freed right after
 * uv_spawn returns. */
#include "agent/spawn.h"
#include "agent/prefix.h"
#include "common/log.h"
#include "common/fs.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* Set by the agent for every worker, whatever crun inherited. */
static const char *const agent_keys[] = {
	"LOCAL_RANK",
	"RANK",
	"GROUP_RANK",
	"ROLE_RANK",
	"ROLE_NAME",
	"ROLE_WORLD_SIZE",
	"LOCAL_WORLD_SIZE",
	"WORLD_SIZE",
	"GROUP_WORLD_SIZE",
	"MASTER_ADDR",
	"MASTER_PORT",
	"TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS",
	"TORCHELASTIC_RUN_ID",
	"TORCHELASTIC_USE_AGENT_STORE",
	"TORCHELASTIC_ERROR_FILE",
	CRUN__HEARTBEAT_ENV,
};
/* Set when the agent hosts the store or joins a rendezvous. */
static const char *const store_keys[] = {
	"CRUN_STORE", "CRUN_RUN_ID", "CRUN_ROUND", "CRUN_TOKEN", "CRUN_TOKEN_FILE",
};

static size_t key_len(const char *entry)
{
	const char *eq = strchr(entry, '=');

	return eq ? (size_t)(eq - entry) : strlen(entry);
}

static bool same_key(const char *entry, const char *key, size_t klen)
{
	return key_len(entry) == klen && !memcmp(entry, key, klen);
}

static bool in_keys(const char *entry, const char *const *keys, size_t n)
{
	size_t klen = key_len(entry);

	for (size_t i = 0; i < n; i++)
		if (strlen(keys[i]) == klen && !memcmp(entry, keys[i], klen))
			return true;
	return false;
}

/* True when the agent sets this key itself for every worker. */
static bool reserved(const struct crun__spawner *a, const char *entry)
{
	if (in_keys(entry, agent_keys, CRUN_ARRAY_SIZE(agent_keys)))
		return true;
	if (a->store_env && in_keys(entry, store_keys, CRUN_ARRAY_SIZE(store_keys)))
		return true;
	if (a->spec->virtual_local_rank && same_key(entry, "CUDA_VISIBLE_DEVICES", 20))
		return true;
	if (a->heartbeat && a->heartbeat->timer_env &&
	    same_key(entry, "TORCHELASTIC_TIMER_FILE", 23))
		return true;
	return false;
}

static const char *find_env(char **env, size_t n, const char *key)
{
	size_t klen = strlen(key);

	for (size_t i = 0; i < n; i++)
		if (same_key(env[i], key, klen))
			return env[i] + klen + 1;
	return NULL;
}

static int add_own(struct crun__spawner *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int add_own(struct crun__spawner *a, const char *fmt, ...)
{
	va_list ap;
	char *s;
	int r;

	if (a->nenv_own >= (int)CRUN_ARRAY_SIZE(a->env_own))
		return -ENOMEM;
	va_start(ap, fmt);
	r = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (r < 0)
		return -ENOMEM;
	a->env_own[a->nenv_own++] = s;
	a->env[a->nenv++] = s;
	return 0;
}

int crun__spawner_env_init(struct crun__spawner *a)
{
	const struct crun__agent_spec *spec = a->spec;
	size_t ninherit = 0, nextra = 0;
	int err = 0;

	while (environ && environ[ninherit])
		ninherit++;
	while (spec->extra_env && spec->extra_env[nextra])
		nextra++;
	a->env = calloc(ninherit + nextra + CRUN_ARRAY_SIZE(a->env_own) + 1, sizeof(char *));
	if (!a->env)
		return -ENOMEM;
	a->nenv = 0;

	/* Inherited, unless extra_env or the agent sets the key. */
	for (size_t i = 0; i < ninherit; i++) {
		const char *e = environ[i];
		bool overridden = false;

		if (!strchr(e, '='))
			continue;
		if (a->spec->virtual_local_rank && same_key(e, "CUDA_VISIBLE_DEVICES", 20))
			a->cuda_visible = e + 21;
		if (reserved(a, e))
			continue;
		for (size_t j = 0; j < nextra && !overridden; j++)
			overridden = same_key(spec->extra_env[j], e, key_len(e));
		if (!overridden)
			a->env[a->nenv++] = (char *)e;
	}
	/* extra_env; of two entries with the same key the later wins. */
	for (size_t i = 0; i < nextra; i++) {
		const char *e = spec->extra_env[i];
		bool later = false;

		if (!strchr(e, '='))
			continue;
		if (a->spec->virtual_local_rank && same_key(e, "CUDA_VISIBLE_DEVICES", 20))
			a->cuda_visible = e + 21;
		if (reserved(a, e))
			continue;
		for (size_t j = i + 1; j < nextra && !later; j++)
			later = same_key(spec->extra_env[j], e, key_len(e));
		if (!later)
			a->env[a->nenv++] = (char *)e;
	}

	if (!find_env(a->env, a->nenv, "TORCH_NCCL_ASYNC_ERROR_HANDLING"))
		err = err ? err : add_own(a, "TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
	if (spec->nproc_per_node > 1 && !find_env(a->env, a->nenv, "OMP_NUM_THREADS")) {
		err = err ? err : add_own(a, "OMP_NUM_THREADS=1");
		crun__info("setting OMP_NUM_THREADS=1 for each worker to avoid overloading the "
			   "system; tune it for your application as needed");
	}
	/* GROUP_RANK, the world sizes and MASTER_* belong to the attempt
	 * (with rendezvous each round sets them): worker_env adds them. */
	err = err ? err : add_own(a, "ROLE_NAME=%s", spec->role);
	err = err ? err : add_own(a, "LOCAL_WORLD_SIZE=%d", spec->nproc_per_node);
	err = err ? err : add_own(a, "TORCHELASTIC_MAX_RESTARTS=%d", spec->max_restarts);
	err = err ? err : add_own(a, "TORCHELASTIC_RUN_ID=%s", spec->run_id);
	if (a->heartbeat) {
		err = err ? err : add_own(a, "%s=%d", CRUN__HEARTBEAT_ENV, CRUN__HEARTBEAT_FD);
		if (a->heartbeat->timer_env)
			err = err ? err : add_own(a, "%s", a->heartbeat->timer_env);
	}
	if (a->store_env) {
		err = err ? err : add_own(a, "%s", a->store_env);
		err = err ? err : add_own(a, "CRUN_RUN_ID=%s", spec->run_id);
		if (a->token_env)
			err = err ? err : add_own(a, "%s", a->token_env);
	}
	return err;
}

void crun__spawner_env_finish(struct crun__spawner *a)
{
	for (int i = 0; i < a->nenv_own; i++)
		free(a->env_own[i]);
	a->nenv_own = 0;
	free(a->env);
	a->env = NULL;
	a->nenv = 0;
}

/* The local rank's device: the lr-th entry of CUDA_VISIBLE_DEVICES
 * (indices, UUIDs or MIG names alike), else lr itself. */
static int cuda_device(const char *list, int lr, char *out, size_t outlen)
{
	const char *p = list;

	for (int i = 0; p && *p; i++) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		if (i == lr && n > 0 && n < outlen) {
			memcpy(out, p, n);
			out[n] = '\0';
			return 0;
		}
		p = comma ? comma + 1 : NULL;
	}
	return snprintf(out, outlen, "%d", lr) < 0 ? -EINVAL : 0;
}

/* argv with every "${local_rank}" replaced; NULL when out of memory. The
 * strings that change are malloc'd and listed in owned. */
static char **worker_argv(const struct crun__agent_spec *spec, int lr, char ***owned)
{
	static const char pat[] = "${local_rank}";
	char rank[16];
	char **argv = calloc((size_t)spec->argc + 1, sizeof(char *));
	char **own = calloc((size_t)spec->argc + 1, sizeof(char *));
	int nown = 0;

	if (!argv || !own)
		goto out_free;
	snprintf(rank, sizeof(rank), "%d", lr);
	for (int i = 0; i < spec->argc; i++) {
		const char *arg = spec->argv[i];
		size_t count = 0, len;
		char *s, *d;

		for (const char *q = strstr(arg, pat); q; q = strstr(q + sizeof(pat) - 1, pat))
			count++;
		if (!count) {
			argv[i] = (char *)arg;
			continue;
		}
		len = strlen(arg) + count * strlen(rank) + 1;
		s = d = malloc(len);
		if (!s)
			goto out_free;
		own[nown++] = s;
		while (*arg) {
			if (!strncmp(arg, pat, sizeof(pat) - 1)) {
				d = stpcpy(d, rank);
				arg += sizeof(pat) - 1;
			} else {
				*d++ = *arg++;
			}
		}
		*d = '\0';
		argv[i] = s;
	}
	*owned = own;
	return argv;
out_free:
	for (int i = 0; own && i < nown; i++)
		free(own[i]);
	free(own);
	free(argv);
	return NULL;
}

static void worker_free(struct worker *w)
{
	free(w->error_file);
	free(w->log_path[0]);
	free(w->log_path[1]);
	free(w);
}

/* A handle of w has closed: a pipe is told to the owner unless it has let
 * go of w, which may free w. */
static void handle_closed(struct worker *w, bool is_pipe)
{
	w->handles--;
	if (!w->detached) {
		if (is_pipe)
			w->sp->pipe_closed(w, w->sp->arg);
		return;
	}
	if (w->handles == 0)
		worker_free(w);
}

void crun__worker_detach(struct worker *w)
{
	w->detached = true;
	if (w->handles == 0)
		worker_free(w);
}

static void proc_closed(uv_handle_t *h)
{
	handle_closed(h->data, false);
}

static void pipe_closed(struct outpipe *p)
{
	handle_closed(p->data, true);
}

void crun__worker_abandon(struct worker *w)
{
	if (!w->running)
		return;
	w->running = false;
	w->exit_code = -1;
	uv_close((uv_handle_t *)&w->proc, proc_closed);
}

static void worker_exited(uv_process_t *proc, int64_t status, int term_signal)
{
	struct worker *w = proc->data;

	w->running = false;
	w->exit_code = (int)status;
	w->term_signal = term_signal;
	w->exit_wall_ms = crun__wall_ms();
	if (w->sp->heartbeat)
		crun__heartbeat_gone(w->sp->heartbeat, w->local_rank);
	uv_close((uv_handle_t *)proc, proc_closed);
	w->sp->exited(w, w->sp->arg);
}

static void set_prefix(struct worker *w, const struct crun__agent_spec *spec)
{
	const char *tmpl = spec->log_line_prefix_template;
	struct crun__prefix_vars v = {
		.role_name = spec->role, .rank = w->rank, .local_rank = w->local_rank};
	char host[256] = "";

	if (!tmpl)
		tmpl = strcmp(spec->role, "default") ? CRUN__PREFIX_DEFAULT_ROLE
						     : CRUN__PREFIX_DEFAULT;
	else if (gethostname(host, sizeof(host) - 1) == 0) /* socket.gethostname() */
		v.hostname = host;
	crun__prefix_render(tmpl, &v, w->prefix, sizeof(w->prefix));
}

/* True when local rank lr's stream (0 out, 1 err) goes to a file / to the
 * console. */
static bool stream_to_file(const struct crun__spawner *a, int lr, int stream)
{
	const struct crun__agent_spec *spec = a->spec;
	unsigned mask = 0;

	if (!a->log_root)
		return false;
	if (spec->redirects)
		mask |= (unsigned)spec->redirects[lr];
	if (spec->tee)
		mask |= (unsigned)spec->tee[lr];
	return mask & (1u << stream);
}

/* As torchrun: a teed stream reaches the console even when it is also
 * redirected (tee adds the console to the file). */
static bool stream_to_console(const struct crun__agent_spec *spec, int lr, int stream)
{
	bool teed = spec->tee && ((unsigned)spec->tee[lr] & (1u << stream));

	if (!teed && spec->redirects && ((unsigned)spec->redirects[lr] & (1u << stream)))
		return false;
	if (spec->console_ranks && !spec->console_ranks[lr])
		return false;
	return true;
}

static int open_log(struct worker *w, int stream, const char *dir)
{
	static const char *const names[] = {"stdout.log", "stderr.log"};
	int fd;

	if (asprintf(&w->log_path[stream], "%s/%s", dir, names[stream]) < 0) {
		w->log_path[stream] = NULL;
		return -ENOMEM;
	}
	fd = open(w->log_path[stream], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		int err = -errno;
		crun__error("cannot open log file '%s': %s", w->log_path[stream], strerror(-err));
		return err;
	}
	w->out[stream].file_fd = fd;
	w->out[stream].file_path = w->log_path[stream];
	return 0;
}

/* Log directory, log files and error file of w. */
static int worker_files(struct crun__spawner *a, struct worker *w)
{
	char *dir = NULL;
	int err = 0;

	if (a->log_root) {
		if (asprintf(&dir, "%s/attempt_%d/%d", a->log_root, w->seq, w->local_rank) < 0)
			return -ENOMEM;
		err = crun__mkdir_p(dir, 0777);
		if (err < 0) {
			crun__error("cannot create log directory '%s': %s", dir, strerror(-err));
			goto out_free;
		}
		for (int s = 0; s < 2; s++) {
			if (stream_to_file(a, w->local_rank, s)) {
				err = open_log(w, s, dir);
				if (err < 0)
					goto out_free;
			}
		}
		if (asprintf(&w->error_file, "%s/error.json", dir) < 0)
			w->error_file = NULL;
	} else if (asprintf(&w->error_file, "%s/error_%d_%d.json", a->tmp_dir, w->seq,
			    w->local_rank) < 0) {
		w->error_file = NULL;
	}
	if (!w->error_file) {
		err = -ENOMEM;
		goto out_free;
	}
	/* A file left by an earlier run must not pass for this worker's. */
	unlink(w->error_file);
out_free:
	free(dir);
	return err;
}

/* The variables that differ per worker, appended to the shared ones. */
static char **worker_env(const struct crun__spawner *a, const struct crun__placement *place,
			 const struct worker *w, char **block)
{
	const struct crun__agent_spec *spec = a->spec;
	size_t size = 1024 + strlen(w->error_file) + strlen(place->master_addr) +
		      (a->cuda_visible ? strlen(a->cuda_visible) : 0);
	char **env = calloc(a->nenv + 16, sizeof(char *));
	char *b = malloc(size), *p;
	size_t n = a->nenv;
	int lr = spec->virtual_local_rank ? 0 : w->local_rank;

	if (!env || !b) {
		free(env);
		free(b);
		return NULL;
	}
	memcpy(env, a->env, a->nenv * sizeof(char *));
	p = b;
#define ADD(...)                                                           \
	do {                                                               \
		env[n++] = p;                                              \
		p += snprintf(p, size - (size_t)(p - b), __VA_ARGS__) + 1; \
	} while (0)
	ADD("LOCAL_RANK=%d", lr);
	ADD("RANK=%d", w->rank);
	ADD("ROLE_RANK=%d", w->rank);
	ADD("GROUP_RANK=%d", place->group_rank);
	ADD("GROUP_WORLD_SIZE=%d", place->nnodes);
	ADD("WORLD_SIZE=%d", place->world_size);
	ADD("ROLE_WORLD_SIZE=%d", place->world_size);
	ADD("MASTER_ADDR=%s", place->master_addr);
	ADD("MASTER_PORT=%d", place->master_port);
	ADD("TORCHELASTIC_RESTART_COUNT=%d", w->attempt);
	ADD("TORCHELASTIC_USE_AGENT_STORE=%s", place->agent_store ? "True" : "False");
	ADD("TORCHELASTIC_ERROR_FILE=%s", w->error_file);
	if (a->store_env)
		ADD("CRUN_ROUND=%lld", (long long)place->round);
	if (spec->virtual_local_rank) {
		char dev[128];
		if (cuda_device(a->cuda_visible, w->local_rank, dev, sizeof(dev)) < 0)
			snprintf(dev, sizeof(dev), "%d", w->local_rank);
		ADD("CUDA_VISIBLE_DEVICES=%s", dev);
	}
#undef ADD
	env[n] = NULL;
	*block = b;
	return env;
}

struct worker *crun__worker_spawn(struct crun__spawner *a, const struct crun__placement *place,
				  int local_rank, int seq, int *errp)
{
	const struct crun__agent_spec *spec = a->spec;
	uv_stdio_container_t stdio[CRUN__HEARTBEAT_FD + 1];
	uv_pipe_t *beat = NULL;
	uv_process_options_t opts;
	struct worker *w;
	char **argv = NULL, **owned = NULL, **env = NULL, *block = NULL;
	int err;

	*errp = 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->sp = a;
	w->local_rank = local_rank;
	w->rank = place->rank_offset + local_rank;
	w->attempt = place->restart_count;
	w->seq = seq;
	set_prefix(w, spec);

	for (int s = 0; s < 2; s++) {
		err = crun__outpipe_init(&w->out[s], a->loop, w->prefix, w->rank, pipe_closed, w);
		if (err < 0) {
			crun__error("cannot create output pipe of rank %d: %s", w->rank,
				    uv_strerror(err));
			goto out_close;
		}
		w->handles++;
		if (stream_to_console(a->spec, local_rank, s))
			w->out[s].console = &a->console[s];
	}
	err = worker_files(a, w);
	if (err < 0)
		goto out_close;
	argv = worker_argv(spec, local_rank, &owned);
	env = argv ? worker_env(a, place, w, &block) : NULL;
	if (!env) {
		err = -ENOMEM;
		crun__error("cannot start rank %d: %s", w->rank, strerror(ENOMEM));
		goto out_close;
	}

	memset(&opts, 0, sizeof(opts));
	opts.file = argv[0];
	opts.args = argv;
	opts.env = env;
	opts.exit_cb = worker_exited;
	/* setsid(): the worker leads a session and process group of its own,
	 * and what it starts stays in that group unless it leaves on purpose. */
	opts.flags = UV_PROCESS_DETACHED;
	stdio[0].flags = UV_IGNORE; /* libuv opens /dev/null */
	for (int s = 0; s < 2; s++) {
		stdio[s + 1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
		stdio[s + 1].data.stream = (uv_stream_t *)&w->out[s].handle;
	}
	opts.stdio = stdio;
	opts.stdio_count = 3;
	if (a->heartbeat)
		beat = crun__heartbeat_channel(a->heartbeat, local_rank);
	if (beat) {
		/* The child writes; fd 3 is the only one between stderr and it. */
		stdio[CRUN__HEARTBEAT_FD].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
		stdio[CRUN__HEARTBEAT_FD].data.stream = (uv_stream_t *)beat;
		opts.stdio_count = CRUN__HEARTBEAT_FD + 1;
	}
	w->proc.data = w;
	err = uv_spawn(a->loop, &w->proc, &opts);
	w->handles++; /* the process handle is closed even after a failure */
	if (err < 0) {
		/* Reported by the group, which knows what it means. */
		w->exec_failed = true;
		uv_close((uv_handle_t *)&w->proc, proc_closed);
		if (a->heartbeat)
			crun__heartbeat_gone(a->heartbeat, local_rank);
		goto out_close;
	}
	if (a->heartbeat)
		crun__heartbeat_started(a->heartbeat, local_rank, w->proc.pid);
	w->spawned = true;
	w->running = true;
	w->pid = w->proc.pid;
	agent_reaper_watch(a->reaper, w->pid);
	for (int s = 0; s < 2; s++) {
		int r = crun__outpipe_start(&w->out[s]);
		if (r < 0) {
			crun__warn("cannot read output of rank %d: %s", w->rank, uv_strerror(r));
			crun__outpipe_close(&w->out[s]);
		}
	}
	goto out_free;
out_close:
	*errp = err;
	for (int s = 0; s < 2; s++)
		crun__outpipe_close(&w->out[s]);
out_free:
	for (int i = 0; owned && owned[i]; i++)
		free(owned[i]);
	free(owned);
	free(argv);
	free(env);
	free(block);
	return w;
}
