/* `crun status` / `crunctl status` (status_cli.h): finds the job (its
 * flags, the environment crun gives workers, or the job files of this
 * machine, common/jobfile.h), reads the agents' status documents from its
 * store with libcrun, and shows them (status_view.h). */
#include "rendezvous/status_cli.h"

#include <crun/store.h>

#include "common/jobfile.h"
#include "common/log.h"
#include "common/util.h"
#include "rendezvous/status_view.h"
#include "rendezvous/wire.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

enum {
	EXIT_OK = 0,
	EXIT_NOT_FOUND = 1,
	EXIT_USAGE = 2,
	EXIT_CONN = 3,
};

#define DEFAULT_CONNECT_TIMEOUT_MS 5000
#define DEFAULT_WATCH_MS 2000
#define CALL_TIMEOUT_MS 5000
#define WATCH_LOST_MS 30000

static const char usage_text[] =
	"usage: %s [--endpoint HOST:PORT] [--run ID] [--token-file FILE] [--json]\n"
	"       [--watch [SECONDS]]\n"
	"Show a running crun job: its round, restarts, members and every rank.\n"
	"\n"
	"  --endpoint HOST:PORT    the job's store (default: $CRUN_STORE, else the jobs\n"
	"                          running on this machine, found by their job files)\n"
	"  --run ID                the run id (default: $CRUN_RUN_ID; without an\n"
	"                          endpoint: every job on this machine)\n"
	"  --token-file FILE       file holding the job token (default: $CRUN_TOKEN,\n"
	"                          else $CRUN_TOKEN_FILE, else the job file's)\n"
	"  --json                  one JSON document instead of the table\n"
	"  --watch [SECONDS]       show it again every SECONDS (default 2) until the\n"
	"                          job is gone or interrupted\n"
	"  --connect-timeout DURATION\n"
	"                          how long to keep retrying the connection (default 5s)\n"
	"  -h, --help              print this help and exit\n"
	"\n"
	"Exit status: 0 shown; 1 no such job; 2 usage error; 3 cannot connect or\n"
	"authenticate.\n";

struct target {
	char run_id[512];
	char endpoint[300];
	char token_file[4096]; /* the job file's ("": none) */
	struct crun_store *s;  /* NULL until the first look */
	bool from_file;	       /* found by its job file */
	int last;	       /* the exit status of the last look */
	uint64_t failing_ms;   /* since when looks fail (0: they do not) */
	bool gone;	       /* --watch: no longer shown */
};

struct opts {
	const char *prog;
	const char *endpoint, *run_id, *token_file;
	bool json;
	bool watch;
	int watch_ms;
	int connect_timeout_ms;
	int timeout_ms; /* each call on the store */
};

static volatile sig_atomic_t interrupted, pausing;

/* --watch only (without it SIGINT and SIGTERM keep their default): ends
 * the watch with exit 0, at once while it reads (the connection may be
 * retrying), else at the end of the pause. */
static void on_interrupt(int sig)
{
	(void)sig;
	if (!pausing)
		_exit(EXIT_OK);
	interrupted = 1;
}

static const char *value_of(const struct opts *o, int argc, char **argv, int *i, const char *name,
			    int *rc)
{
	size_t n = strlen(name);

	const char *v = NULL;

	if (!strncmp(argv[*i], name, n) && argv[*i][n] == '=')
		v = argv[*i] + n + 1;
	else if (*i + 1 < argc)
		v = argv[++*i];
	if (!v || !*v) {
		*rc = crun__usage_error(o->prog, "option '%s' needs a value", name);
		return NULL;
	}
	return v;
}

static bool is_opt(const char *arg, const char *name)
{
	size_t n = strlen(name);

	return !strncmp(arg, name, n) && (arg[n] == '\0' || arg[n] == '=');
}

static int parse_seconds(const struct opts *o, const char *v, int *ms)
{
	char *end;
	double s;

	errno = 0;
	s = strtod(v, &end);
	if (errno || end == v || *end || !(s >= 0.1) || s > 86400)
		return crun__usage_error(
			o->prog, "bad interval '%s' for --watch: expected seconds, 0.1 to 86400",
			v);
	*ms = (int)(s * 1000);
	return 0;
}

static int parse_args(struct opts *o, int argc, char **argv)
{
	int rc = 0;

	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v;
		char err[160];
		int64_t ms;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf(usage_text, o->prog);
			return -1;
		} else if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (is_opt(a, "--watch")) {
			o->watch = true;
			if (a[7] == '=')
				rc = parse_seconds(o, a + 8, &o->watch_ms);
			else if (i + 1 < argc && argv[i + 1][0] != '-')
				rc = parse_seconds(o, argv[++i], &o->watch_ms);
		} else if (is_opt(a, "--endpoint")) {
			if ((v = value_of(o, argc, argv, &i, "--endpoint", &rc)))
				o->endpoint = v;
		} else if (is_opt(a, "--run")) {
			if ((v = value_of(o, argc, argv, &i, "--run", &rc)))
				o->run_id = v;
		} else if (is_opt(a, "--token-file")) {
			if ((v = value_of(o, argc, argv, &i, "--token-file", &rc)))
				o->token_file = v;
		} else if (is_opt(a, "--connect-timeout")) {
			v = value_of(o, argc, argv, &i, "--connect-timeout", &rc);
			if (v && crun__parse_duration_ms(v, &ms, err, sizeof(err)) < 0)
				rc = crun__usage_error(
					o->prog, "bad duration for --connect-timeout: %s", err);
			else if (v)
				o->connect_timeout_ms = ms < 1	       ? 1
							: ms > INT_MAX ? INT_MAX
								       : (int)ms;
		} else if (a[0] == '-') {
			rc = crun__usage_error(o->prog, "unknown option '%s'", a);
		} else {
			rc = crun__usage_error(o->prog, "unexpected argument '%s'", a);
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int set_target(const struct opts *o, struct target *t, const char *run_id,
		      const char *endpoint, const char *token_file)
{
	if (snprintf(t->run_id, sizeof(t->run_id), "%s", run_id) >= (int)sizeof(t->run_id) ||
	    snprintf(t->endpoint, sizeof(t->endpoint), "%s", endpoint) >=
		    (int)sizeof(t->endpoint) ||
	    snprintf(t->token_file, sizeof(t->token_file), "%s", token_file ? token_file : "") >=
		    (int)sizeof(t->token_file))
		return crun__usage_error(o->prog, "run id, endpoint or token file name too long");
	return 0;
}

/* The jobs to show: the one named by the flags or the environment, else
 * those of this machine's job files (only --run's). *n 0: none. */
static int find_targets(const struct opts *o, struct target **out, size_t *n)
{
	const char *endpoint = o->endpoint ? o->endpoint : getenv("CRUN_STORE");
	const char *run_id = o->run_id ? o->run_id : getenv("CRUN_RUN_ID");
	struct crun__jobfile *jobs;
	char dir[1024];
	size_t njobs;
	int rc;

	*out = NULL;
	*n = 0;
	if (endpoint && *endpoint) {
		if (!run_id || !*run_id)
			return crun__usage_error(
				o->prog, "which run? --endpoint needs --run ID (or $CRUN_RUN_ID)");
		*out = calloc(1, sizeof(**out));
		if (!*out)
			return EXIT_NOT_FOUND;
		*n = 1;
		return set_target(o, *out, run_id, endpoint, NULL);
	}
	rc = crun__jobfile_dir(dir, sizeof(dir), getenv("XDG_RUNTIME_DIR"), geteuid());
	if (rc == 0)
		rc = crun__jobfile_list(dir, &jobs, &njobs);
	if (rc == -EPERM) {
		crun__error("'%s' or '%s/jobs' is not a directory of this user's alone (mode 0700, "
			    "not a link): its job files are not trusted",
			    dir, dir);
		return EXIT_NOT_FOUND;
	}
	if (rc < 0 && rc != -ENOENT) {
		crun__error("cannot read the job files in '%s/jobs': %s", dir, strerror(-rc));
		return EXIT_NOT_FOUND;
	}
	if (rc < 0)
		njobs = 0, jobs = NULL;
	*out = calloc(njobs ? njobs : 1, sizeof(**out));
	if (!*out) {
		free(jobs);
		return EXIT_NOT_FOUND;
	}
	for (size_t i = 0; i < njobs; i++) {
		if (o->run_id && strcmp(o->run_id, jobs[i].run_id))
			continue;
		/* Agents of one run on this machine: one store, one job. */
		if (*n && !strcmp((*out)[*n - 1].run_id, jobs[i].run_id) &&
		    !strcmp((*out)[*n - 1].endpoint, jobs[i].endpoint))
			continue;
		rc = set_target(o, &(*out)[*n], jobs[i].run_id, jobs[i].endpoint,
				jobs[i].token_file);
		if (rc) {
			free(jobs);
			return rc;
		}
		(*out)[*n].from_file = true;
		++*n;
	}
	free(jobs);
	return 0;
}

int crun__store_endpoint(const char *endpoint, int default_port, char *host, size_t hostlen,
			 int *port)
{
	char err[256];

	if (crun__parse_endpoint(endpoint, default_port, host, hostlen, port, err, sizeof(err)) <
	    0) {
		crun__error("%s", err);
		return EXIT_USAGE;
	}
	if (*port == 0) {
		crun__error("bad port in endpoint '%s', expected 1-65535", endpoint);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

static int load_token(const char *file, const char *what, bool own, char **tok, size_t *len)
{
	char err[256];

	if ((own ? crun__read_own_secret_file : crun__read_secret_file)(
		    file, CRUN_WIRE_TOKEN_MAX, tok, len, err, sizeof(err)) < 0) {
		crun__error("bad %s: %s", what, err);
		/* One the user named is a usage error; the job's own is the
		 * job's: it cannot be authenticated with. */
		return own ? EXIT_CONN : EXIT_USAGE;
	}
	return EXIT_OK;
}

int crun__store_token(const char *token_file, const char *job_token_file, char **tok, size_t *len)
{
	const char *v;

	*tok = NULL;
	*len = 0;
	if (token_file)
		return load_token(token_file, "--token-file", false, tok, len);
	v = getenv("CRUN_TOKEN");
	if (v && *v) {
		*tok = strdup(v);
		*len = strlen(v);
		if (*tok)
			return EXIT_OK;
		crun__error("out of memory");
		return EXIT_NOT_FOUND;
	}
	v = getenv("CRUN_TOKEN_FILE");
	if (v && *v)
		return load_token(v, "CRUN_TOKEN_FILE", false, tok, len);
	if (job_token_file && *job_token_file)
		return load_token(job_token_file, "token file", true, tok, len);
	return EXIT_OK;
}

const char *crun__store_reason(const struct crun_store *s, int rc)
{
	const char *m = crun_store_errmsg(s);

	return m && *m ? m : crun_store_strerror(rc);
}

static bool has_prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

/* t's store handle, made and connected on the first look and kept
 * (libcrun reconnects it by itself) so that --watch holds one
 * connection. Prints one line and returns the exit status when it cannot. */
static int open_store(const struct opts *o, struct target *t)
{
	struct crun_store_opts so = {
		.run_id = t->run_id,
		.connect_timeout_ms = o->connect_timeout_ms,
		.timeout_ms = o->timeout_ms,
	};
	char host[256], *tok = NULL;
	size_t toklen = 0;
	int port, status;

	if (t->s)
		return EXIT_OK;
	status = crun__store_endpoint(t->endpoint, 29400, host, sizeof(host), &port);
	if (status == EXIT_USAGE)
		crun__usage_hint(o->prog);
	if (status)
		return status;
	status = crun__store_token(o->token_file, t->token_file, &tok, &toklen);
	if (status)
		return status;
	so.host = host;
	so.port = port;
	so.token = tok;
	so.token_len = toklen;
	t->s = crun_store_create(&so);
	if (tok) {
		OPENSSL_cleanse(tok, toklen);
		free(tok);
	}
	if (!t->s) {
		crun__error("cannot create a store handle: out of memory");
		return EXIT_NOT_FOUND;
	}
	return EXIT_OK;
}

static int store_error(struct crun_store *s, const struct target *t, const char *what, int rc)
{
	if (rc == -EACCES)
		crun__error("%s", crun__store_reason(s, rc));
	else
		crun__error("cannot %s '%s': %s", what, t->endpoint, crun__store_reason(s, rc));
	return EXIT_CONN;
}

/* The documents of keys into nodes: one MGET; a key gone meanwhile (a
 * node that left) fails it, and then each is read alone. */
static int read_docs(const struct target *t, char **keys, size_t n, json_t *nodes)
{
	struct crun_store_buf *bufs = calloc(n ? n : 1, sizeof(*bufs));
	int rc;

	if (!bufs)
		return -ENOMEM;
	if (!n) {
		free(bufs);
		return 0;
	}
	rc = crun_store_mget(t->s, (const char *const *)keys, n, bufs, 0);
	for (size_t i = 0; rc == -ENOENT && i < n; i++) {
		int one = crun_store_get(t->s, keys[i], &bufs[i], 0);

		if (one < 0 && one != -ENOENT) {
			for (size_t k = 0; k < i; k++)
				crun_store_buf_finish(&bufs[k]);
			free(bufs);
			return one;
		}
		if (i + 1 == n)
			rc = 0;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		json_t *doc = bufs[i].data
				      ? json_loadb((const char *)bufs[i].data, bufs[i].len, 0, NULL)
				      : NULL;

		if (json_is_object(doc))
			json_array_append_new(nodes, doc);
		else
			json_decref(doc);
	}
	for (size_t i = 0; rc == 0 && i < n; i++)
		crun_store_buf_finish(&bufs[i]);
	free(bufs);
	return rc;
}

/* Reads the agents' documents of t into *job: the run's keys, then the
 * status documents with one MGET. Prints one line and returns the exit
 * status when it cannot. */
static int fetch(const struct opts *o, struct target *t, json_t **job)
{
	char **keys = NULL;
	size_t nkeys = 0, nstatus = 0;
	json_t *nodes = NULL;
	int rc, status;

	*job = NULL;
	status = open_store(o, t);
	if (status)
		return status;
	rc = crun_store_list(t->s, &keys, &nkeys, o->timeout_ms);
	if (rc < 0) {
		status = store_error(t->s, t, "connect to", rc);
		goto out;
	}
	/* The status keys first, in place. */
	for (size_t i = 0; i < nkeys; i++) {
		if (!has_prefix(keys[i], CRUN_STATUS_KEY_PREFIX))
			continue;
		char *k = keys[nstatus];

		keys[nstatus++] = keys[i];
		keys[i] = k;
	}
	nodes = json_array();
	rc = nodes ? read_docs(t, keys, nstatus, nodes) : -ENOMEM;
	if (rc == -ENOMEM) {
		crun__error("out of memory");
		status = EXIT_NOT_FOUND;
		goto out;
	}
	if (rc < 0) {
		status = store_error(t->s, t, "read the status from", rc);
		goto out;
	}
	if (!json_array_size(nodes)) {
		crun__error("run '%s' at '%s' has no status: no crun agent publishes there",
			    t->run_id, t->endpoint);
		status = EXIT_NOT_FOUND;
		goto out;
	}
	*job = crun__status_job(t->run_id, t->endpoint, nodes, crun__wall_ms());
	status = *job ? EXIT_OK : EXIT_NOT_FOUND;
	if (!*job)
		crun__error("out of memory");
out:
	json_decref(nodes);
	crun_store_list_free(keys, nkeys);
	return status;
}

/* One look at every target; the worst status. */
static int show(const struct opts *o, struct target *t, size_t n, bool clear)
{
	int worst = EXIT_OK;

	if (clear)
		fputs("\033[H\033[J", stdout);
	for (size_t i = 0; i < n; i++) {
		json_t *job;
		int rc;

		if (t[i].gone)
			continue;
		rc = t[i].last = fetch(o, &t[i], &job);
		if (rc) {
			worst = rc > worst ? rc : worst;
			continue;
		}
		if (o->json) {
			json_dumpf(job, stdout, JSON_COMPACT);
			putchar('\n');
		} else {
			if (i)
				putchar('\n');
			crun__status_render(stdout, job);
		}
		json_decref(job);
	}
	fflush(stdout);
	return worst;
}

/* Whether the job file of t is still there, its agent alive. */
static bool job_file_present(const struct target *t)
{
	struct crun__jobfile *jobs;
	char dir[1024];
	size_t n;
	bool found = false;

	if (crun__jobfile_dir(dir, sizeof(dir), getenv("XDG_RUNTIME_DIR"), geteuid()) < 0 ||
	    crun__jobfile_list(dir, &jobs, &n) < 0)
		return false;
	for (size_t i = 0; i < n && !found; i++)
		found = !strcmp(jobs[i].run_id, t->run_id) &&
			!strcmp(jobs[i].endpoint, t->endpoint);
	free(jobs);
	return found;
}

/* --watch after a look: which targets are gone. A job is gone when its
 * store says no agent publishes there, or, for one found by its job file,
 * when that file is gone; a failure to reach it is otherwise passing
 * (reported, and watched again), up to WATCH_LOST_MS for a job named by
 * its endpoint. *lost: one was given up for that. True when every target
 * is gone. */
static bool watch_gone(struct target *t, size_t n, bool *lost)
{
	bool all = true;

	for (size_t i = 0; i < n; i++) {
		uint64_t now = crun__now_ms();

		if (t[i].gone)
			continue;
		if (t[i].last == EXIT_OK) {
			t[i].failing_ms = 0;
		} else if (t[i].from_file ? !job_file_present(&t[i])
					  : t[i].last == EXIT_NOT_FOUND) {
			t[i].gone = true;
		} else if (!t[i].from_file && t[i].failing_ms &&
			   now - t[i].failing_ms > WATCH_LOST_MS) {
			crun__error("run '%s' at '%s' could not be read for %d s: giving up",
				    t[i].run_id, t[i].endpoint, WATCH_LOST_MS / 1000);
			t[i].gone = *lost = true;
		} else if (!t[i].failing_ms) {
			t[i].failing_ms = now;
		}
		if (t[i].gone && !*lost)
			crun__info("run '%s' is gone", t[i].run_id);
		all = all && t[i].gone;
	}
	return all;
}

static void pause_ms(int ms)
{
	pausing = 1;
	for (int left = ms; left > 0 && !interrupted; left -= 100) {
		struct timespec ts = {0, (left < 100 ? left : 100) * 1000000L};

		nanosleep(&ts, NULL);
	}
	pausing = 0;
}

int crun__status_main(const char *prog, const struct crun__status_cli_defaults *defaults, int argc,
		      char **argv)
{
	struct opts o = {.prog = prog, .watch_ms = DEFAULT_WATCH_MS};
	struct target *t = NULL;
	struct sigaction sa;
	size_t n = 0;
	bool clear, shown = false, lost = false;
	int rc;

	if (defaults) {
		o.endpoint = defaults->endpoint;
		o.run_id = defaults->run_id;
		o.token_file = defaults->token_file;
		o.connect_timeout_ms = defaults->connect_timeout_ms;
		o.timeout_ms = defaults->timeout_ms;
	}
	if (!o.timeout_ms)
		o.timeout_ms = CALL_TIMEOUT_MS;
	if (!o.connect_timeout_ms)
		o.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
	rc = parse_args(&o, argc, argv);
	if (rc)
		return rc < 0 ? (fflush(stdout) ? 1 : EXIT_OK) : rc;
	rc = find_targets(&o, &t, &n);
	if (rc)
		goto out;
	if (!n) {
		if (o.run_id)
			crun__error("no job '%s' runs on this machine (give --endpoint to look "
				    "elsewhere)",
				    o.run_id);
		else
			crun__error("no crun job runs on this machine (give --endpoint and --run "
				    "to look elsewhere)");
		rc = EXIT_NOT_FOUND;
		goto out;
	}
	if (o.json && n > 1) {
		rc = crun__usage_error(o.prog, "%zu jobs run on this machine; pick one with --run",
				       n);
		goto out;
	}
	if (o.watch) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_interrupt; /* no SA_RESTART: a sleep ends at once */
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	clear = o.watch && !o.json && isatty(STDOUT_FILENO);
	for (;;) {
		rc = show(&o, t, n, clear);
		if (!o.watch || interrupted || (rc && !shown) || rc == EXIT_USAGE)
			break;
		shown = true;
		if (watch_gone(t, n, &lost)) {
			/* Every job went while we watched: that is the end. */
			rc = lost ? EXIT_CONN : EXIT_OK;
			break;
		}
		pause_ms(o.watch_ms);
		if (interrupted)
			break;
	}
out:
	for (size_t i = 0; i < n; i++)
		crun_store_destroy(t[i].s);
	free(t);
	return rc;
}
