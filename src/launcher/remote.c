/* crun --hostfile's edge (remote.h): the controller's libuv loop over one
 * ssh per host, and the remote side's watch of its stdin. What is sent
 * and what the end means is decided in hostfile.c. */
#include "launcher/remote.h"
#include "launcher/hostfile.h"
#include "launcher/plan.h"
#include "agent/summary.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#define LINE_MAX_BYTES 4096
/* After a teardown or a forwarded signal, how long past the shutdown
 * timeout the hosts get before their ssh is killed. */
#define TEARDOWN_SLACK_MS 15000
/* After a host's ssh exits, how long its output may still come before
 * its pipes are closed: an ssh connection master (ControlPersist) that
 * the user's options start keeps them open for as long as it lives. */
#define DRAIN_MS 2000

bool crun__remote_agent_mode(char **envp)
{
	const char *v = crun__launch_env_lookup(envp, "CRUN_REMOTE_AGENT");

	return v && !strcmp(v, "1");
}

/* ---- the remote side ------------------------------------------------- */

static bool handled(const struct crun__agent_spec *spec, int sig)
{
	for (int i = 0; i < spec->nsignals; i++)
		if (spec->signals[i] == sig)
			return true;
	return false;
}

int crun__remote_agent_run(const struct crun__agent_spec *spec)
{
	static const int watched[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};
	sigset_t mask, old;
	char line[64];
	size_t used = 0;
	bool stdin_open = true, stopping = false;
	int sfd, status = 1;
	pid_t pid;

	/* The workers, and any crun they start, are not remote agents. */
	unsetenv("CRUN_REMOTE_AGENT");

	sigemptyset(&mask);
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(watched); i++)
		sigaddset(&mask, watched[i]);
	for (int i = 0; i < spec->nsignals; i++)
		sigaddset(&mask, spec->signals[i]);
	for (int i = 0; i < spec->nforward_signals; i++)
		sigaddset(&mask, spec->forward_signals[i]);
	if (sigprocmask(SIG_BLOCK, &mask, &old) < 0)
		return 1;
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sfd < 0) {
		crun__error("cannot watch signals: %s", strerror(errno));
		goto out_restore;
	}
	pid = fork();
	if (pid < 0) {
		crun__error("cannot fork the agent: %s", strerror(errno));
		goto out_close;
	}
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

		close(sfd);
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (fd >= 0) {
			dup2(fd, 0);
			close(fd);
		}
		status = crun__agent_run(spec);
		fflush(NULL);
		_exit(status);
	}
	for (;;) {
		struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
		struct signalfd_siginfo si;
		int wst = 0;

		if (poll(p, stdin_open ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			/* Nothing can be watched: stop the agent and wait. */
			crun__error("cannot watch the controller's connection: %s",
				    strerror(errno));
			kill(pid, SIGTERM);
			while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
				;
			status = WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);
			break;
		}
		if (p[0].revents & POLLIN && read(sfd, &si, sizeof(si)) == sizeof(si)) {
			if ((int)si.ssi_signo != SIGCHLD) {
				kill(pid, (int)si.ssi_signo);
				stopping |= handled(spec, (int)si.ssi_signo);
			} else if (waitpid(pid, &wst, WNOHANG) == pid) {
				status = WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);
				break;
			}
		}
		if (stdin_open && p[1].revents) {
			ssize_t n = read(0, line + used, sizeof(line) - 1 - used);

			if (n <= 0 && !(n < 0 && errno == EINTR)) {
				/* The controller or the connection is gone. After a
				 * handled signal the agent is stopping already: a
				 * second signal would cut its grace short. */
				if (!stopping) {
					crun__info("the controller's input ended "
						   "(CRUN_REMOTE_AGENT=1); stopping the agent");
					kill(pid, SIGTERM);
				}
				stdin_open = false;
				continue;
			}
			used += n > 0 ? (size_t)n : 0;
			line[used] = '\0';
			for (char *nl; (nl = strchr(line, '\n'));) {
				int sigs[1], nsigs = 0;

				*nl = '\0';
				if (crun__launch_parse_signals(line, sigs, &nsigs, NULL, 0) == 0 &&
				    nsigs == 1) {
					kill(pid, sigs[0]);
					stopping |= handled(spec, sigs[0]);
				}
				used -= (size_t)(nl + 1 - line);
				memmove(line, nl + 1, used + 1);
			}
			if (used == sizeof(line) - 1)
				used = 0; /* no signal name is this long */
		}
	}
out_close:
	close(sfd);
out_restore:
	sigprocmask(SIG_SETMASK, &old, NULL);
	return status;
}

/* ---- the controller -------------------------------------------------- */

struct linebuf {
	char buf[LINE_MAX_BYTES];
	size_t len;
};

struct remote;

struct host_proc {
	struct remote *r;
	const struct crun__hostfile_host *host;
	size_t rank;
	uv_process_t proc;
	uv_pipe_t in, out, err;
	uv_timer_t drain; /* from ssh's exit until both pipes end */
	struct linebuf obuf, ebuf;
	bool spawned, exited, in_closed, out_eof, err_eof, drain_on, done;
	int64_t exit_status;
	int term_signal;
	char last_err[512]; /* the last line on stderr, for ssh's failures */
};

struct remote {
	const struct crun__launch_opts *o;
	uv_loop_t loop;
	struct crun__hostfile hf;
	struct host_proc *procs;
	struct crun__remote_end *ends;
	size_t nends;
	/* The handled signals, then the forwarded ones. */
	uv_signal_t sigs[2 * CRUN_AGENT_MAX_SIGNALS];
	int nsigs;
	uv_timer_t kill_timer;
	bool kill_timer_on;
	int signal; /* the first handled signal crun received, else 0 */
	bool tearing_down;
};

/* "HOST: LINE\n" in one write, so that hosts' lines do not mix. */
static void emit(struct host_proc *h, int fd, const char *line, size_t len)
{
	char out[LINE_MAX_BYTES + CRUN_HOSTFILE_HOST_MAX + 8];
	int n = snprintf(out, sizeof(out), "%s: ", h->host->name);

	memcpy(out + n, line, len);
	out[n + (int)len] = '\n';
	(void)crun__write_all(fd, out, (size_t)n + len + 1);
	if (fd == 2 && len) {
		size_t k = len < sizeof(h->last_err) - 1 ? len : sizeof(h->last_err) - 1;

		memcpy(h->last_err, line, k);
		h->last_err[k] = '\0';
	}
}

static void feed(struct host_proc *h, struct linebuf *lb, int fd, const char *data, size_t len)
{
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t take = nl ? (size_t)(nl - data) : len;

		if (take > sizeof(lb->buf) - lb->len)
			take = sizeof(lb->buf) - lb->len;
		memcpy(lb->buf + lb->len, data, take);
		lb->len += take;
		data += take;
		len -= take;
		if (len && *data == '\n') {
			data++;
			len--;
			emit(h, fd, lb->buf, lb->len);
			lb->len = 0;
		} else if (lb->len == sizeof(lb->buf)) {
			emit(h, fd, lb->buf, lb->len); /* a long line, in pieces */
			lb->len = 0;
		}
	}
}

static void teardown(struct remote *r);

static void report_end(struct host_proc *h)
{
	const char *why = NULL;

	if (h->exit_status != 255 || h->term_signal)
		return;
	switch (crun__ssh_failure_kind(h->last_err)) {
	case CRUN_SSH_UNREACHABLE:
		why = "is unreachable";
		break;
	case CRUN_SSH_AUTH:
		why = "refused the login (authentication failed)";
		break;
	case CRUN_SSH_HOST_KEY:
		why = "has no trusted host key (add it to known_hosts)";
		break;
	case CRUN_SSH_OTHER:
		why = "could not be reached over ssh";
		break;
	}
	crun__error("host '%s' (node %zu) %s: ssh exited 255: %s", h->host->name, h->rank, why,
		    h->last_err[0] ? h->last_err : "no message");
}

static void maybe_done(struct host_proc *h)
{
	struct remote *r = h->r;
	int status;

	if (h->done || !h->exited || !h->out_eof || !h->err_eof)
		return;
	h->done = true;
	if (h->drain_on) {
		h->drain_on = false;
		uv_close((uv_handle_t *)&h->drain, NULL);
	}
	r->ends[r->nends].exit_status = (int)h->exit_status;
	r->ends[r->nends].term_signal = h->term_signal;
	r->nends++;
	report_end(h);
	status = h->term_signal ? 128 + h->term_signal : (int)h->exit_status;
	if (status && status != 255 && (r->signal || r->tearing_down))
		crun__info("host '%s' (node %zu) ended with status %d", h->host->name, h->rank,
			   status);
	/* After a forwarded signal every host is stopping with its grace;
	 * the kill timer bounds the wait. */
	if (status && !r->tearing_down && !r->signal) {
		if (status != 255)
			crun__error("host '%s' (node %zu) ended with status %d; stopping the "
				    "other hosts",
				    h->host->name, h->rank, status);
		teardown(r);
	}
	if (!h->in_closed) {
		h->in_closed = true;
		uv_close((uv_handle_t *)&h->in, NULL);
	}
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
	static char chunk[65536];

	(void)handle;
	(void)suggested;
	*buf = uv_buf_init(chunk, sizeof(chunk));
}

/* The end of a host's stdout (is_out) or stderr: its last line out. */
static void close_stream(struct host_proc *h, bool is_out)
{
	uv_stream_t *s = is_out ? (uv_stream_t *)&h->out : (uv_stream_t *)&h->err;
	struct linebuf *lb = is_out ? &h->obuf : &h->ebuf;

	if (lb->len)
		emit(h, is_out ? 1 : 2, lb->buf, lb->len);
	lb->len = 0;
	uv_read_stop(s);
	uv_close((uv_handle_t *)s, NULL);
	if (is_out)
		h->out_eof = true;
	else
		h->err_eof = true;
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct host_proc *h = s->data;
	bool is_out = s == (uv_stream_t *)&h->out;
	struct linebuf *lb = is_out ? &h->obuf : &h->ebuf;

	if (n > 0) {
		feed(h, lb, is_out ? 1 : 2, buf->base, (size_t)n);
		return;
	}
	if (n == 0)
		return;
	close_stream(h, is_out);
	maybe_done(h);
}

static void drain_cb(uv_timer_t *t)
{
	struct host_proc *h = t->data;

	if (!h->out_eof)
		close_stream(h, true);
	if (!h->err_eof)
		close_stream(h, false);
	maybe_done(h);
}

static void exit_cb(uv_process_t *p, int64_t status, int sig)
{
	struct host_proc *h = p->data;

	h->exited = true;
	h->exit_status = sig ? -1 : status;
	h->term_signal = sig;
	uv_close((uv_handle_t *)p, NULL);
	if (!h->out_eof || !h->err_eof) {
		uv_timer_init(p->loop, &h->drain);
		h->drain.data = h;
		uv_timer_start(&h->drain, drain_cb, DRAIN_MS, 0);
		h->drain_on = true;
	}
	maybe_done(h);
}

static void kill_timer_cb(uv_timer_t *t)
{
	struct remote *r = t->data;

	for (size_t i = 0; i < r->hf.nhosts; i++) {
		struct host_proc *h = &r->procs[i];

		if (h->spawned && !h->exited) {
			crun__warn("host '%s' (node %zu) did not stop in time; killing its ssh",
				   h->host->name, h->rank);
			uv_process_kill(&h->proc, SIGKILL);
		}
	}
	uv_close((uv_handle_t *)t, NULL);
	r->kill_timer_on = false;
}

static void arm_kill_timer(struct remote *r)
{
	if (r->kill_timer_on)
		return;
	uv_timer_init(&r->loop, &r->kill_timer);
	r->kill_timer.data = r;
	uv_timer_start(&r->kill_timer, kill_timer_cb,
		       (uint64_t)r->o->shutdown_timeout_ms + TEARDOWN_SLACK_MS, 0);
	uv_unref((uv_handle_t *)&r->kill_timer);
	r->kill_timer_on = true;
}

/* Every host's stdin closes: each remote crun stops its agent (SIGTERM). */
static void teardown(struct remote *r)
{
	r->tearing_down = true;
	for (size_t i = 0; i < r->hf.nhosts; i++) {
		struct host_proc *h = &r->procs[i];

		if (h->spawned && !h->in_closed) {
			h->in_closed = true;
			uv_close((uv_handle_t *)&h->in, NULL);
		}
	}
	arm_kill_timer(r);
}

static void write_cb(uv_write_t *w, int status)
{
	(void)status;
	free(w);
}

/* Writes the signal's name to every host still connected. */
static void send_signal(struct remote *r, int signum)
{
	const char *name = crun__signal_name(signum);

	crun__info("%s: forwarding it to every host", name ? name : "signal");
	for (size_t i = 0; name && i < r->hf.nhosts; i++) {
		struct host_proc *h = &r->procs[i];
		uv_write_t *w;
		uv_buf_t b;

		if (!h->spawned || h->in_closed)
			continue;
		w = malloc(sizeof(*w) + 16);
		if (!w)
			continue;
		b = uv_buf_init((char *)(w + 1),
				(unsigned)snprintf((char *)(w + 1), 16, "%s\n", name));
		if (uv_write(w, (uv_stream_t *)&h->in, &b, 1, write_cb) < 0)
			free(w);
	}
}

/* A handled signal: every host stops, within the kill timer. */
static void signal_cb(uv_signal_t *s, int signum)
{
	struct remote *r = s->data;

	if (!r->signal) {
		long long ms = (long long)r->o->shutdown_timeout_ms;
		char name[32], grace[32];

		/* The hosts' agents keep theirs off the console (remote agent
		 * mode): said once, here. */
		r->signal = signum;
		crun__signal_format(name, sizeof(name), signum);
		/* As the agents write it (crun__rdzv_format_ms(), whose header
		 * clashes with the launcher's options.h). */
		if (ms >= 1000 && ms % 1000 == 0)
			snprintf(grace, sizeof(grace), "%llds", ms / 1000);
		else
			snprintf(grace, sizeof(grace), "%lldms", ms);
		crun__info("got %s; stopping the workers on every host (SIGKILL after %s, "
			   "--shutdown-timeout); %s",
			   name, grace,
			   signum == SIGINT ? "a second Ctrl-C kills them at once"
					    : "a second signal kills them at once");
	}
	send_signal(r, signum);
	arm_kill_timer(r);
}

/* A forwarded signal (--signals-to-forward): the job goes on. */
static void forward_cb(uv_signal_t *s, int signum)
{
	send_signal(s->data, signum);
}

static int read_hostfile(const struct crun__launch_opts *o, struct crun__hostfile *hf, char *err,
			 size_t errlen)
{
	FILE *f = fopen(o->hostfile, "re");
	char *text;
	size_t len;
	int rc;

	if (!f) {
		crun__seterr(err, errlen, "cannot read hostfile '%s': %s", o->hostfile,
			     strerror(errno));
		return -errno;
	}
	text = malloc(CRUN_HOSTFILE_MAX_BYTES + 1);
	if (!text) {
		fclose(f);
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	len = fread(text, 1, CRUN_HOSTFILE_MAX_BYTES + 1, f);
	if (ferror(f)) {
		crun__seterr(err, errlen, "cannot read hostfile '%s': %s", o->hostfile,
			     strerror(errno));
		rc = -EIO;
	} else {
		rc = crun__hostfile_parse(text, len, o->hostfile, hf, err, errlen);
		if (!rc)
			rc = crun__hostfile_filter(hf, o->include, o->exclude, err, errlen);
	}
	free(text);
	fclose(f);
	return rc;
}

/* The options the hostfile decides may not be given elsewhere. */
static int check_conflicts(const struct crun__launch_opts *o, char *err, size_t errlen)
{
	static const enum crun__launch_opt decided[] = {
		CRUN_OPT_NNODES, CRUN_OPT_NODE_RANK, CRUN_OPT_NPROC_PER_NODE, CRUN_OPT_STANDALONE};

	for (size_t i = 0; i < CRUN_ARRAY_SIZE(decided); i++) {
		char origin[128];

		if (o->source[decided[i]] <= CRUN_SRC_SCHED)
			continue;
		crun__launch_opts_origin(o, decided[i], origin, sizeof(origin));
		crun__seterr(err, errlen,
			     "%s cannot be used with --hostfile: the hostfile gives the nodes and "
			     "their workers",
			     origin);
		return -EINVAL;
	}
	return 0;
}

/* ssh's arguments for host h: the fixed ones, the user's, the command. */
static char **ssh_argv(const struct crun__launch_opts *o, const char *host, char *command)
{
	/* No connection sharing: a master started for one host would keep
	 * that host's pipes open after its ssh ends. */
	static const char *const defaults[] = {"ConnectTimeout=10", "ServerAliveInterval=15",
					       "LogLevel=ERROR", "ControlMaster=no",
					       "ControlPath=none"};
	size_t n = 0, cap = 16 + CRUN_ARRAY_SIZE(defaults) * 2;
	char **a;

	if (o->ssh_options)
		for (const char *p = o->ssh_options; *p; p++)
			cap += 2 * (*p == ',');
	a = calloc(cap, sizeof(*a));
	if (!a) {
		free(command);
		return NULL;
	}
	a[n++] = strdup("ssh");
	a[n++] = strdup("-T");
	a[n++] = strdup("-o");
	a[n++] = strdup("BatchMode=yes");
	/* ssh keeps the first value of an option: the user's come first. */
	for (const char *p = o->ssh_options; p && *p;) {
		size_t len = strcspn(p, ",");

		a[n++] = strdup("-o");
		a[n++] = strndup(p, len);
		p += len + (p[len] == ',');
	}
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(defaults); i++) {
		a[n++] = strdup("-o");
		a[n++] = strdup(defaults[i]);
	}
	a[n++] = strdup(host);
	a[n++] = command;
	for (size_t i = 0; i < n; i++) {
		if (!a[i])
			goto out_free;
	}
	return a;
out_free:
	/* By index: a failed strdup left a NULL among the strings. */
	for (size_t i = 0; i < n; i++)
		free(a[i]);
	free(a);
	return NULL;
}

static void print_argv(FILE *f, char **a)
{
	for (size_t i = 0; a[i]; i++) {
		if (i)
			fputc(' ', f);
		crun__launch_print_word(f, a[i]);
	}
	fputc('\n', f);
}

static int make_run_id(char *out, size_t len)
{
	unsigned char b[8];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -EIO;
	snprintf(out, len, "hostfile-%02x%02x%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
		 b[4], b[5], b[6], b[7]);
	return 0;
}

/* Every host's ssh argv; NULL entries on failure. */
static int build_commands(struct remote *r, int argc, char **argv, char **envp, char ***cmds,
			  char *err, size_t errlen)
{
	const struct crun__launch_opts *o = r->o;
	char self[PATH_MAX], dir[PATH_MAX], endpoint[CRUN_HOSTFILE_HOST_MAX + 16], run_id[64];
	int command_index = (int)(o->command - argv);
	int rc = crun__self_exe(self, sizeof(self));

	if (rc < 0) {
		crun__seterr(err, errlen, "cannot find crun's own path: %s", strerror(-rc));
		return -EIO;
	}
	if (!getcwd(dir, sizeof(dir))) {
		crun__seterr(err, errlen, "cannot find the current directory: %s", strerror(errno));
		return -EIO;
	}
	if (!o->rdzv_id && make_run_id(run_id, sizeof(run_id)) < 0) {
		crun__seterr(err, errlen, "cannot make a run id: %s", strerror(errno));
		return -EIO;
	}
	snprintf(endpoint, sizeof(endpoint), "%s:%d", r->hf.hosts[0].name,
		 crun__hostfile_rdzv_port(o->rdzv_id ? o->rdzv_id : run_id));
	for (size_t i = 0; i < r->hf.nhosts; i++) {
		const struct crun__hostfile_host *h = &r->hf.hosts[i];
		char cvd[CRUN_LAUNCH_MAX_NPROC * 6 + 32] = "", *command = NULL;
		char **a = crun__hostfile_agent_argv(
			self, argc, argv, command_index, r->hf.nhosts, i, h->nslots,
			o->rdzv_endpoint ? NULL : endpoint, o->rdzv_id ? NULL : run_id);

		if (h->picked) {
			size_t used = (size_t)snprintf(cvd, sizeof(cvd), "CUDA_VISIBLE_DEVICES=");

			for (int s = 0; s < h->nslots; s++)
				used += (size_t)snprintf(cvd + used, sizeof(cvd) - used, "%s%d",
							 s ? "," : "", h->picked[s]);
		}
		if (a)
			command = crun__hostfile_command(dir, envp, cvd[0] ? cvd : NULL, a);
		crun__hostfile_argv_free(a);
		cmds[i] = command ? ssh_argv(o, h->name, command) : NULL;
		if (!cmds[i]) {
			if (!command)
				crun__seterr(
					err, errlen,
					"the command for host '%s' is too long or out of memory",
					h->name);
			else
				crun__seterr(err, errlen, "out of memory");
			return -ENOMEM;
		}
	}
	return 0;
}

static int spawn_host(struct remote *r, struct host_proc *h, char **args, char *err, size_t errlen)
{
	uv_stdio_container_t stdio[3];
	uv_process_options_t po = {0};
	int rc;

	uv_pipe_init(&r->loop, &h->in, 0);
	uv_pipe_init(&r->loop, &h->out, 0);
	uv_pipe_init(&r->loop, &h->err, 0);
	h->in.data = h->out.data = h->err.data = h->proc.data = h;
	stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
	stdio[0].data.stream = (uv_stream_t *)&h->in;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&h->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&h->err;
	po.file = args[0];
	po.args = args;
	po.stdio = stdio;
	po.stdio_count = 3;
	po.exit_cb = exit_cb;
	/* A session of its own: a Ctrl-C on the terminal reaches crun only,
	 * which forwards it; ssh would otherwise end and drop the channel. */
	po.flags = UV_PROCESS_DETACHED;
	rc = uv_spawn(&r->loop, &h->proc, &po);
	if (rc < 0) {
		crun__seterr(err, errlen, "cannot run 'ssh' for host '%s': %s", h->host->name,
			     uv_strerror(rc));
		uv_close((uv_handle_t *)&h->proc, NULL);
		uv_close((uv_handle_t *)&h->in, NULL);
		uv_close((uv_handle_t *)&h->out, NULL);
		uv_close((uv_handle_t *)&h->err, NULL);
		h->in_closed = true;
		return rc;
	}
	h->spawned = true;
	uv_read_start((uv_stream_t *)&h->out, alloc_cb, read_cb);
	uv_read_start((uv_stream_t *)&h->err, alloc_cb, read_cb);
	return 0;
}

static void print_plan(FILE *f, struct remote *r, char ***cmds)
{
	fprintf(f, "hostfile=%s\n", r->o->hostfile);
	fprintf(f, "hostfile.nodes=%zu\n", r->hf.nhosts);
	for (size_t i = 0; i < r->hf.nhosts; i++) {
		const struct crun__hostfile_host *h = &r->hf.hosts[i];

		fprintf(f, "hostfile.node.%zu=%s slots=%d", i, h->name, h->nslots);
		for (int s = 0; h->picked && s < h->nslots; s++)
			fprintf(f, "%s%d", s ? "," : " cuda_visible_devices=", h->picked[s]);
		fprintf(f, "\nhostfile.ssh.%zu=", i);
		print_argv(f, cmds[i]);
	}
}

int crun__remote_launch(const struct crun__launch_opts *o, int argc, char **argv, char **envp,
			bool dry_run)
{
	struct remote r = {.o = o};
	char ***cmds = NULL;
	char err[1024];
	int fwd[CRUN_AGENT_MAX_SIGNALS], nfwd, status = 2;

	if (check_conflicts(o, err, sizeof(err)) < 0 ||
	    read_hostfile(o, &r.hf, err, sizeof(err)) < 0) {
		crun__error("%s", err);
		goto out_finish;
	}
	cmds = calloc(r.hf.nhosts, sizeof(*cmds));
	r.procs = calloc(r.hf.nhosts, sizeof(*r.procs));
	r.ends = calloc(r.hf.nhosts, sizeof(*r.ends));
	if (!cmds || !r.procs || !r.ends) {
		crun__error("out of memory");
		goto out_free;
	}
	if (build_commands(&r, argc, argv, envp, cmds, err, sizeof(err)) < 0) {
		crun__error("%s", err);
		goto out_free;
	}
	if (dry_run) {
		print_plan(stdout, &r, cmds);
		status = fflush(stdout) ? 1 : 0;
		goto out_free;
	}
	signal(SIGPIPE, SIG_IGN);
	if (uv_loop_init(&r.loop) < 0) {
		crun__error("cannot start the event loop");
		goto out_free;
	}
	nfwd = crun__launch_forward_signals(o, fwd);
	for (int i = 0; i < o->nsignals + nfwd; i++) {
		bool stops = i < o->nsignals;

		uv_signal_init(&r.loop, &r.sigs[i]);
		r.sigs[i].data = &r;
		uv_signal_start(&r.sigs[i], stops ? signal_cb : forward_cb,
				stops ? o->signals[i] : fwd[i - o->nsignals]);
		uv_unref((uv_handle_t *)&r.sigs[i]);
		r.nsigs++;
	}
	crun__info("starting %zu node%s over ssh from hostfile '%s'", r.hf.nhosts,
		   r.hf.nhosts == 1 ? "" : "s", o->hostfile);
	for (size_t i = 0; i < r.hf.nhosts; i++) {
		struct host_proc *h = &r.procs[i];

		h->r = &r;
		h->host = &r.hf.hosts[i];
		h->rank = i;
		if (spawn_host(&r, h, cmds[i], err, sizeof(err)) < 0) {
			crun__error("%s", err);
			r.ends[r.nends++].exit_status = 2;
			teardown(&r);
			break;
		}
	}
	uv_run(&r.loop, UV_RUN_DEFAULT);
	for (int i = 0; i < r.nsigs; i++)
		uv_close((uv_handle_t *)&r.sigs[i], NULL);
	if (r.kill_timer_on)
		uv_close((uv_handle_t *)&r.kill_timer, NULL);
	uv_run(&r.loop, UV_RUN_DEFAULT);
	uv_loop_close(&r.loop);
	status = crun__remote_exit_status(r.ends, r.nends, r.signal);
out_free:
	for (size_t i = 0; cmds && i < r.hf.nhosts; i++)
		crun__hostfile_argv_free(cmds[i]);
	free(cmds);
	free(r.procs);
	free(r.ends);
out_finish:
	crun__hostfile_finish(&r.hf);
	return status;
}
