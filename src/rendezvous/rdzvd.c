/* crun-rdzvd: the store server (server.c) as a standalone daemon.
 *
 * Exit status: 0 after SIGTERM/SIGINT, 1 when the server cannot start
 * (listen fails, ...), 2 for a usage or configuration error. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "common/fs.h"
#include "common/log.h"
#include "common/procstat.h"
#include "common/prom.h"
#include "common/util.h"
#include "crun-config.h"
#include "rendezvous/journal_file.h"
#include "rendezvous/metrics_http.h"
#include "rendezvous/notify.h"
#include "rendezvous/server.h"
#include "rendezvous/server_metrics.h"
#include "rendezvous/wire.h"

#define EXIT_USAGE 2

enum {
	OPT_HOST = 256,
	OPT_PORT,
	OPT_PORT_FILE,
	OPT_TOKEN_FILE,
	OPT_MAX_KEY,
	OPT_MAX_VALUE,
	OPT_MAX_KEYS,
	OPT_MAX_CONNS,
	OPT_MAX_BUFFER,
	OPT_HANDSHAKE,
	OPT_REQUIRE_TOKEN,
	OPT_STATE_DIR,
	OPT_MAX_TOTAL_BUFFER,
	OPT_MAX_PREAUTH,
	OPT_MAX_PREAUTH_SOURCE,
	OPT_REQUEST_TIMEOUT,
	OPT_IDLE_TIMEOUT,
	OPT_TCPSTORE,
	OPT_MAX_TCPSTORE,
	OPT_METRICS_PORT,
	OPT_METRICS_HOST,
};

static const struct option long_opts[] = {
	{"host", required_argument, NULL, OPT_HOST},
	{"port", required_argument, NULL, OPT_PORT},
	{"port-file", required_argument, NULL, OPT_PORT_FILE},
	{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	{"max-key-size", required_argument, NULL, OPT_MAX_KEY},
	{"max-value-size", required_argument, NULL, OPT_MAX_VALUE},
	{"max-keys", required_argument, NULL, OPT_MAX_KEYS},
	{"max-connections", required_argument, NULL, OPT_MAX_CONNS},
	{"max-buffer", required_argument, NULL, OPT_MAX_BUFFER},
	{"handshake-timeout", required_argument, NULL, OPT_HANDSHAKE},
	{"require-token", no_argument, NULL, OPT_REQUIRE_TOKEN},
	{"state-dir", required_argument, NULL, OPT_STATE_DIR},
	{"max-total-buffer", required_argument, NULL, OPT_MAX_TOTAL_BUFFER},
	{"max-preauth", required_argument, NULL, OPT_MAX_PREAUTH},
	{"max-preauth-per-source", required_argument, NULL, OPT_MAX_PREAUTH_SOURCE},
	{"request-timeout", required_argument, NULL, OPT_REQUEST_TIMEOUT},
	{"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
	{"tcpstore", required_argument, NULL, OPT_TCPSTORE},
	{"max-tcpstore-connections", required_argument, NULL, OPT_MAX_TCPSTORE},
	{"metrics-port", required_argument, NULL, OPT_METRICS_PORT},
	{"metrics-host", required_argument, NULL, OPT_METRICS_HOST},
	{"verbose", no_argument, NULL, 'v'},
	{"quiet", no_argument, NULL, 'q'},
	{"version", no_argument, NULL, 'V'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: crun-rdzvd [OPTION]...\n"
		"Run the crun rendezvous store as a standalone daemon.\n"
		"\n"
		"  --host ADDR               address to listen on (default 0.0.0.0)\n"
		"  --port PORT               TCP port, 0 picks a free one (default 29400)\n"
		"  --port-file FILE          write the bound port to FILE once listening\n"
		"  --token-file FILE         job token clients must prove (default: $CRUN_TOKEN,\n"
		"                            else the file named by $CRUN_TOKEN_FILE, else none)\n"
		"  --max-key-size SIZE       largest key or run id (default 4KiB)\n"
		"  --max-value-size SIZE     largest value (default 16MiB)\n"
		"  --max-keys N              keys per run (default 1000000)\n"
		"  --max-connections N       open connections (default 4096)\n"
		"  --max-buffer SIZE         bytes buffered per connection and direction\n"
		"                            (default 64MiB)\n"
		"  --handshake-timeout DURATION\n"
		"                            time to complete the handshake (default 10s)\n"
		"  --require-token           refuse to listen on an address that is not loopback\n"
		"                            without a token (default: off, a warning)\n"
		"  --state-dir DIR           keep a journal of the rendezvous rounds in DIR, so\n"
		"                            that a restarted daemon goes on with every run;\n"
		"                            one daemon per DIR (default: none, the rounds\n"
		"                            live in memory only)\n"
		"  --max-total-buffer SIZE   bytes buffered across all connections (default: a\n"
		"                            quarter of memory or of the cgroup limit if lower)\n"
		"  --max-preauth N           unauthenticated connections (default 1024)\n"
		"  --max-preauth-per-source N\n"
		"                            unauthenticated connections per address (default "
		"256)\n"
		"  --request-timeout DURATION\n"
		"                            time for a frame to arrive once begun, plus 1s per\n"
		"                            MiB; 0 for none (default 30s)\n"
		"  --idle-timeout DURATION   close an authenticated connection with nothing\n"
		"                            pending after this long; 0 for never (default 1h)\n"
		"  --tcpstore on|off         also serve PyTorch's TCPStore protocol on the port\n"
		"                            (torchrun --rdzv-backend=c10d agents and torch\n"
		"                            TCPStore clients, unauthenticated) (default: on,\n"
		"                            off with --require-token)\n"
		"  --max-tcpstore-connections N\n"
		"                            TCPStore connections past their first request\n"
		"                            (default: half of --max-connections)\n"
		"  --metrics-port PORT       serve Prometheus metrics at\n"
		"                            http://HOST:PORT/metrics, 0 picks a free port\n"
		"                            (default: off)\n"
		"  --metrics-host ADDR       address of the metrics endpoint (default 0.0.0.0)\n"
		"  -v, --verbose             log every request\n"
		"  -q, --quiet               log warnings and errors only\n"
		"      --version             print the version and exit\n"
		"  -h, --help                print this help and exit\n"
		"\n"
		"Exit status: 0 stopped by SIGTERM or SIGINT, 1 cannot serve, 2 usage error.\n");
}

static int bad_value(const char *opt, const char *value, const char *why)
{
	crun__error("invalid value '%s' for --%s: %s", value, opt, why);
	return -EINVAL;
}

/* A whole number in [0, max] written with digits only: crun__parse_int64
 * alone would take "+80". 0 or -EINVAL. */
static int parse_digits(const char *s, int64_t max, int64_t *out)
{
	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	return crun__parse_int64(s, 0, max, out, NULL, 0);
}

static int parse_u64_opt(const char *opt, const char *s, bool size, uint64_t min, uint64_t max,
			 uint64_t *out)
{
	char err[160], range[96];
	uint64_t v;
	int64_t i;

	if (size) {
		if (crun__parse_size(s, &v, err, sizeof(err)) < 0)
			return bad_value(opt, s, err);
	} else {
		if (parse_digits(s, INT64_MAX, &i) < 0)
			return bad_value(opt, s, "expected a whole number");
		v = (uint64_t)i;
	}
	if (v < min || v > max) {
		snprintf(range, sizeof(range), "must be between %llu and %llu",
			 (unsigned long long)min, (unsigned long long)max);
		return bad_value(opt, s, range);
	}
	*out = v;
	return 0;
}

/* A duration of 0 (none) to 49 days into *ms. */
static int parse_timeout_opt(const char *opt, const char *s, uint32_t *ms)
{
	char err[160];
	int64_t v;

	if (crun__parse_duration_ms(s, &v, err, sizeof(err)) < 0)
		return bad_value(opt, s, err);
	if (v < 0 || v > UINT32_MAX)
		return bad_value(opt, s, "must be between 0 and 49 days");
	*ms = (uint32_t)v;
	return 0;
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		crun__debug("cannot raise the open file limit: %s", strerror(errno));
}

/* Writes "PORT\n" to path atomically, so a reader never sees a
 * half-written file. */
static int write_port_file(const char *path, int port)
{
	char line[16];
	int n = snprintf(line, sizeof(line), "%d\n", port);

	return crun__write_atomic(path, line, (size_t)n, 0644);
}

struct daemon {
	uv_loop_t loop;
	uv_signal_t sigterm, sigint;
	struct crun__server *srv;
	struct crun__journal_file *journal; /* --state-dir; NULL: none */
	struct crun__metrics_http *metrics; /* --metrics-port; NULL: none */
	uint64_t started_ms;
};

static int render_metrics(void *arg, struct crun__prom *out)
{
	struct daemon *d = arg;
	struct crun__procstat ps;

	crun__metrics_build_info(out, CRUN_VERSION);
	if (d->srv)
		crun__server_metrics_render(out, crun__server_stats(d->srv),
					    crun__server_connections(d->srv));
	crun__procstat_read(&ps, d->started_ms);
	crun__procstat_render(out, &ps);
	return 0;
}

static void on_server_done(void *arg)
{
	(void)arg;
}

static void stop(struct daemon *d)
{
	if (!uv_is_closing((uv_handle_t *)&d->sigterm))
		uv_close((uv_handle_t *)&d->sigterm, NULL);
	if (!uv_is_closing((uv_handle_t *)&d->sigint))
		uv_close((uv_handle_t *)&d->sigint, NULL);
	/* The runs the server frees now are not over: the journal keeps them. */
	crun__journal_file_stop(d->journal);
	crun__metrics_http_destroy(d->metrics);
	d->metrics = NULL;
	crun__server_destroy(d->srv, on_server_done, NULL);
	d->srv = NULL;
}

/* Tells a service manager (systemd's Type=notify) how the daemon stands;
 * a failure costs a warning, never the service. */
static void notify(const char *state)
{
	int rc = crun__notify(state);

	if (rc < 0)
		crun__warn("cannot notify $NOTIFY_SOCKET of %s: %s", state, strerror(-rc));
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;

	if (!d->srv)
		return;
	crun__info("stopping on %s", signum == SIGTERM ? "SIGTERM" : "SIGINT");
	notify("STOPPING=1");
	stop(d);
}

static enum crun__log_level level_from_env(void)
{
	const char *v = crun__env_get("CRUN_LOG_LEVEL");

	if (!v)
		return CRUN_LOG_INFO;
	if (!strcmp(v, "error"))
		return CRUN_LOG_ERROR;
	if (!strcmp(v, "warn") || !strcmp(v, "warning"))
		return CRUN_LOG_WARN;
	if (!strcmp(v, "debug"))
		return CRUN_LOG_DEBUG;
	return CRUN_LOG_INFO;
}

/* The token: --token-file, else $CRUN_TOKEN, else the file $CRUN_TOKEN_FILE.
 * 0 with *token NULL when there is none. */
static int load_token(const char *file, char **token, size_t *len)
{
	const char *env = getenv("CRUN_TOKEN");
	char err[300];

	*token = NULL;
	*len = 0;
	if (!file && env && *env) {
		*len = strlen(env);
		*token = strdup(env);
		return *token ? 0 : -ENOMEM;
	}
	if (!file) {
		file = getenv("CRUN_TOKEN_FILE");
		if (!file || !*file)
			return 0;
	}
	if (crun__read_secret_file(file, CRUN_WIRE_TOKEN_MAX, token, len, err, sizeof(err)) < 0) {
		crun__error("cannot read the token: %s", err);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct crun__server_opts opts = {0};
	const char *host = "0.0.0.0", *token_file = NULL, *port_file = NULL, *state_dir = NULL;
	const char *metrics_host = "0.0.0.0";
	int metrics_port = -1;
	enum crun__log_level level;
	struct daemon d;
	int port = 29400, opt, rc, status = 0, tcpstore = -1;
	char err[512], *token = NULL;
	uint64_t v;

	crun__log_init("crun-rdzvd", level_from_env());
	level = crun__log_get_level();
	crun__server_limits_default(&opts.limits);

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":vqh", long_opts, NULL)) != -1) {
		const char *name = NULL;

		for (const struct option *o = long_opts; o->name; o++)
			if (o->val == opt)
				name = o->name;
		switch (opt) {
		case OPT_HOST:
			if (!*optarg) {
				bad_value(name, optarg, "expected an address or host name");
				return EXIT_USAGE;
			}
			host = optarg;
			break;
		case OPT_PORT: {
			int64_t p;

			if (parse_digits(optarg, 65535, &p) < 0) {
				bad_value(name, optarg, "expected a port number from 0 to 65535");
				return EXIT_USAGE;
			}
			port = (int)p;
			break;
		}
		case OPT_METRICS_PORT: {
			int64_t p;

			if (parse_digits(optarg, 65535, &p) < 0) {
				bad_value(name, optarg, "expected a port number from 0 to 65535");
				return EXIT_USAGE;
			}
			metrics_port = (int)p;
			break;
		}
		case OPT_METRICS_HOST:
			if (!*optarg) {
				bad_value(name, optarg, "expected an address or host name");
				return EXIT_USAGE;
			}
			metrics_host = optarg;
			break;
		case OPT_PORT_FILE:
			port_file = optarg;
			break;
		case OPT_TOKEN_FILE:
			token_file = optarg;
			break;
		case OPT_MAX_KEY:
			if (parse_u64_opt(name, optarg, true, 1, 1u << 20, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_key_size = (uint32_t)v;
			break;
		case OPT_MAX_VALUE:
			if (parse_u64_opt(name, optarg, true, 0, 1u << 30, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_value_size = (uint32_t)v;
			break;
		case OPT_MAX_KEYS:
			if (parse_u64_opt(name, optarg, false, 1, UINT64_MAX >> 1, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_keys_per_run = v;
			break;
		case OPT_MAX_CONNS:
			if (parse_u64_opt(name, optarg, false, 1, 1000000, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_connections = (uint32_t)v;
			break;
		case OPT_MAX_BUFFER:
			if (parse_u64_opt(name, optarg, true, 4096, 2ull << 30, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_conn_buffer = v;
			break;
		case OPT_HANDSHAKE: {
			int64_t ms;

			if (crun__parse_duration_ms(optarg, &ms, err, sizeof(err)) < 0) {
				bad_value(name, optarg, err);
				return EXIT_USAGE;
			}
			if (ms < 1 || ms > UINT32_MAX) {
				bad_value(name, optarg, "must be between 1ms and 49 days");
				return EXIT_USAGE;
			}
			opts.limits.handshake_timeout_ms = (uint32_t)ms;
			break;
		}
		case OPT_REQUIRE_TOKEN:
			opts.require_token = true;
			break;
		case OPT_TCPSTORE:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				bad_value(name, optarg, "expected on or off");
				return EXIT_USAGE;
			}
			tcpstore = strcmp(optarg, "on") == 0;
			break;
		case OPT_STATE_DIR:
			if (!*optarg) {
				bad_value(name, optarg, "expected a directory");
				return EXIT_USAGE;
			}
			state_dir = optarg;
			break;
		case OPT_MAX_TOTAL_BUFFER:
			if (parse_u64_opt(name, optarg, true, 1u << 20, UINT64_MAX >> 1, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_total_buffer = v;
			break;
		case OPT_MAX_PREAUTH:
			if (parse_u64_opt(name, optarg, false, 1, 1000000, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_preauth = (uint32_t)v;
			break;
		case OPT_MAX_TCPSTORE:
			if (parse_u64_opt(name, optarg, false, 1, 1000000, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_tcpstore = (uint32_t)v;
			break;
		case OPT_MAX_PREAUTH_SOURCE:
			if (parse_u64_opt(name, optarg, false, 1, 1000000, &v) < 0)
				return EXIT_USAGE;
			opts.limits.max_preauth_per_source = (uint32_t)v;
			break;
		case OPT_REQUEST_TIMEOUT:
			if (parse_timeout_opt(name, optarg, &opts.limits.request_timeout_ms) < 0)
				return EXIT_USAGE;
			break;
		case OPT_IDLE_TIMEOUT:
			if (parse_timeout_opt(name, optarg, &opts.limits.idle_timeout_ms) < 0)
				return EXIT_USAGE;
			break;
		case 'v':
			level = CRUN_LOG_DEBUG;
			break;
		case 'q':
			level = CRUN_LOG_WARN;
			break;
		case 'V':
			printf("crun-rdzvd %s\n", CRUN_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			crun__error("option '%s' needs a value (see --help)", argv[optind - 1]);
			return EXIT_USAGE;
		default:
			if (optopt)
				crun__error("unknown option '-%c' (see --help)", optopt);
			else
				crun__error("unknown option '%s' (see --help)", argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		crun__error("unexpected argument '%s' (see --help)", argv[optind]);
		return EXIT_USAGE;
	}
	crun__log_set_level(level);
	/* Unauthenticated by nature: a daemon told to require a token serves
	 * TCPStore only when told so too. */
	opts.tcpstore = tcpstore >= 0 ? tcpstore : !opts.require_token;
	if ((uint64_t)opts.limits.max_value_size + opts.limits.max_key_size + 64 >
	    opts.limits.max_conn_buffer)
		crun__warn("--max-buffer is smaller than one frame with the largest key and value; "
			   "such frames will be refused");

	if (load_token(token_file, &token, &opts.token_len) < 0)
		return EXIT_USAGE;
	opts.token = token;
	d.journal = NULL;
	d.metrics = NULL;
	d.started_ms = crun__wall_ms();
	if (state_dir) {
		rc = crun__journal_file_open(state_dir, &d.journal, err, sizeof(err));
		if (rc == -EPROTO) {
			/* A restart would not fix it: exit as for a bad value. */
			crun__error("cannot load the journal: %s (move the file away to start "
				    "without it)",
				    err);
			status = EXIT_USAGE;
			goto out_free_token;
		}
		if (rc < 0) {
			/* Not a writable directory, or another daemon's
			 * (-EBUSY): a restart would not fix it either. */
			crun__error("%s", err);
			status = rc == -ENOMEM ? 1 : EXIT_USAGE;
			goto out_free_token;
		}
	}

	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	if (uv_loop_init(&d.loop) < 0) {
		crun__error("cannot create the event loop");
		status = 1;
		goto out_free_token;
	}
	d.srv = crun__server_create(&d.loop, &opts);
	if (!d.srv) {
		crun__error("cannot create the server: out of memory");
		status = 1;
		goto out_close_loop;
	}
	if (d.journal)
		crun__server_set_journal(d.srv, d.journal);
	uv_signal_init(&d.loop, &d.sigterm);
	uv_signal_init(&d.loop, &d.sigint);
	d.sigterm.data = d.sigint.data = &d;
	uv_signal_start(&d.sigterm, on_signal, SIGTERM);
	uv_signal_start(&d.sigint, on_signal, SIGINT);

	rc = crun__server_listen(d.srv, host, port, err, sizeof(err));
	if (rc < 0) {
		crun__error("%s", err);
		status = rc == -ENOKEY ? EXIT_USAGE : 1;
		stop(&d);
		goto out_run;
	}
	port = crun__server_port(d.srv);
	crun__info(strchr(host, ':') ? "listening on [%s]:%d" : "listening on %s:%d", host, port);
	crun__info("buffer budget: %llu MiB across all connections",
		   (unsigned long long)(crun__server_total_buffer(d.srv) >> 20));
	if (metrics_port >= 0) {
		d.metrics = crun__metrics_http_create(&d.loop, render_metrics, &d);
		rc = d.metrics ? crun__metrics_http_listen(d.metrics, metrics_host, metrics_port,
							   err, sizeof(err))
			       : -ENOMEM;
		if (rc < 0) {
			crun__error("metrics: %s", d.metrics ? err : "out of memory");
			status = 1;
			stop(&d);
			goto out_run;
		}
		crun__info(strchr(metrics_host, ':') ? "metrics at http://[%s]:%d/metrics"
						     : "metrics at http://%s:%d/metrics",
			   metrics_host, crun__metrics_http_port(d.metrics));
	}
	if (port_file) {
		rc = write_port_file(port_file, port);
		if (rc < 0) {
			crun__error("cannot write '%s': %s", port_file, strerror(-rc));
			status = 1;
			stop(&d);
		}
	}
	if (d.srv)
		notify("READY=1");
out_run:
	uv_run(&d.loop, UV_RUN_DEFAULT);
out_close_loop:
	if (uv_loop_close(&d.loop) < 0)
		crun__debug("some connections or timers were still open at the end; they close "
			    "with the process");
out_free_token:
	crun__journal_file_destroy(d.journal);
	if (token) {
		memset(token, 0, opts.token_len);
		free(token);
	}
	return status;
}
