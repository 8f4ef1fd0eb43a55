/* crunctl: the command-line client of the crun store.
 *
 * One connection, one command, one exit status a script can act on:
 * 0 success, 1 missing key, timeout or refused operation, 2 usage error,
 * 3 cannot connect or authenticate (or the connection was lost). Every
 * command line is checked before anything is sent, so a typo never
 * touches the store. */
#include <crun/store.h>

#include "common/log.h"
#include "common/util.h"
#include "crun-config.h"
#include "rendezvous/status_cli.h"
#include "rendezvous/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#define DEFAULT_ENDPOINT "127.0.0.1:29400"
#define DEFAULT_PORT 29400
#define DEFAULT_CONNECT_TIMEOUT_MS 5000

enum exit_code {
	EXIT_OK = 0,
	EXIT_FAIL = 1,
	EXIT_USAGE = 2,
	EXIT_CONN = 3,
};

struct ctl {
	const char *endpoint;
	char host[256];
	int port;
	const char *run_id;
	char *token;
	size_t token_len;
	bool token_owned;
	int timeout_ms;
	bool timeout_given;
	int connect_timeout_ms;
	bool wait;
	int64_t num; /* add's N, checked before connecting */
	char **args;
	int nargs;
	struct crun_store *s;
};

struct command {
	const char *name;
	int min_args, max_args; /* max -1: any number */
	const char *synopsis;
	int (*run)(struct ctl *c);
};

static const char usage_text[] =
	"usage: crunctl [OPTION]... COMMAND [ARG]...\n"
	"Talk to a crun rendezvous store (crun's agent or crun-rdzvd).\n"
	"\n"
	"Options:\n"
	"  --endpoint HOST:PORT    store to talk to (default: $CRUN_STORE, else\n"
	"                          127.0.0.1:29400; IPv6 as [ADDR]:PORT)\n"
	"  --run ID                run id that scopes the keys (default: $CRUN_RUN_ID,\n"
	"                          else 'default')\n"
	"  --token-file FILE       file holding the job token (default: $CRUN_TOKEN,\n"
	"                          else the file named by $CRUN_TOKEN_FILE, else none)\n"
	"  --timeout DURATION      time limit of the command, and how long get --wait and\n"
	"                          wait wait (default: $CRUN_TIMEOUT, else 300s; watch:\n"
	"                          none); DURATION is 30, 2.5s, 500ms, 1m or 1h\n"
	"  --connect-timeout DURATION\n"
	"                          how long to keep retrying the connection (default 5s)\n"
	"  -v, --verbose           say what is being done, on stderr\n"
	"  -h, --help              print this help and exit\n"
	"      --version           print the version and exit\n"
	"\n"
	"Commands:\n"
	"  set KEY VALUE           set KEY to VALUE\n"
	"  get KEY [--wait]        print the value of KEY; --wait: wait until it is set\n"
	"  add KEY N               add the integer N to KEY (missing: 0), print the result\n"
	"  wait KEY...             wait until every KEY exists\n"
	"  del KEY                 delete KEY\n"
	"  ls                      print the run's keys, one per line, sorted\n"
	"  count                   print the number of keys in the run\n"
	"  append KEY VALUE        append VALUE to KEY (missing: created)\n"
	"  cas KEY EXPECTED DESIRED\n"
	"                          set KEY to DESIRED if it holds EXPECTED; print the value\n"
	"                          it holds afterwards\n"
	"  watch KEY...            print 'set KEY VALUE' and 'del KEY' lines as the keys\n"
	"                          change, until interrupted or --timeout\n"
	"  ping                    print the round-trip time to the store\n"
	"  status [--json] [--watch [SECONDS]]\n"
	"                          show the job: round, restarts, members, every rank\n"
	"                          (without --endpoint: the jobs of this machine; as\n"
	"                          'crun status', see 'crunctl status --help')\n"
	"--timeout and --wait may also follow the command's arguments; '--' ends them.\n"
	"\n"
	"Exit status: 0 success; 1 missing key, timeout, cas that did not swap, or an\n"
	"operation the store refused; 2 usage error; 3 cannot connect or authenticate.\n";

/* "2s", "1.5s" or "250ms", for messages. */
static const char *fmt_duration(int ms, char *buf, size_t len)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%ds", ms / 1000);
	else if (ms >= 1000)
		snprintf(buf, len, "%.3gs", ms / 1000.0);
	else
		snprintf(buf, len, "%dms", ms);
	return buf;
}

static bool is_conn_error(int rc)
{
	return rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -EPIPE || rc == -ENOTCONN ||
	       rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -ECONNABORTED || rc == -EPROTO ||
	       rc == -EPROTONOSUPPORT || rc == -EMFILE;
}

static const char *store_reason(struct ctl *c, int rc)
{
	return crun__store_reason(c->s, rc);
}

/* Reports a failed operation on key (NULL: the run) and picks the exit
 * status. */
static int op_failed(struct ctl *c, const char *what, const char *key, int rc)
{
	char d[32];

	if (rc == -ENOENT && key) {
		crun__error("key '%s' not found", key);
		return EXIT_FAIL;
	}
	if (rc == -ETIMEDOUT) {
		if (key)
			crun__error("%s '%s' timed out after %s", what, key,
				    fmt_duration(c->timeout_ms, d, sizeof(d)));
		else
			crun__error("%s timed out after %s", what,
				    fmt_duration(c->timeout_ms, d, sizeof(d)));
		return EXIT_FAIL;
	}
	if (rc == -EACCES) {
		crun__error("%s", store_reason(c, rc));
		return EXIT_CONN;
	}
	if (is_conn_error(rc)) {
		crun__error("lost the connection to '%s': %s", c->endpoint, store_reason(c, rc));
		return EXIT_CONN;
	}
	if (key)
		crun__error("cannot %s '%s': %s", what, key, store_reason(c, rc));
	else
		crun__error("cannot %s: %s", what, store_reason(c, rc));
	return EXIT_FAIL;
}

static int print_value(const struct crun_store_buf *b)
{
	if (b->len)
		fwrite(b->data, 1, b->len, stdout);
	putchar('\n');
	return EXIT_OK;
}

static int cmd_set(struct ctl *c)
{
	int rc = crun_store_set(c->s, c->args[0], c->args[1], strlen(c->args[1]), c->timeout_ms);

	return rc < 0 ? op_failed(c, "set", c->args[0], rc) : EXIT_OK;
}

static int cmd_get(struct ctl *c)
{
	struct crun_store_buf b;
	int rc = crun_store_get(c->s, c->args[0], &b, c->wait ? c->timeout_ms : 0);

	if (rc < 0)
		return op_failed(c, c->wait ? "waiting for" : "get", c->args[0], rc);
	print_value(&b);
	crun_store_buf_finish(&b);
	return EXIT_OK;
}

static int cmd_add(struct ctl *c)
{
	int64_t v;
	int rc;

	rc = crun_store_add(c->s, c->args[0], c->num, &v, c->timeout_ms);
	if (rc < 0)
		return op_failed(c, "add to", c->args[0], rc);
	printf("%" PRId64 "\n", v);
	return EXIT_OK;
}

static int cmd_wait(struct ctl *c)
{
	const char *const *keys = (const char *const *)c->args;
	int rc = crun_store_wait(c->s, keys, (size_t)c->nargs, c->timeout_ms);
	char d[32];

	if (rc == -ETIMEDOUT) {
		/* Name the first key still missing: what a user looks for. */
		for (int i = 0; i < c->nargs; i++)
			if (crun_store_check(c->s, &keys[i], 1, -1) == 0) {
				crun__error("timed out after %s waiting for key '%s'",
					    fmt_duration(c->timeout_ms, d, sizeof(d)), keys[i]);
				return EXIT_FAIL;
			}
		crun__error("timed out after %s waiting for %d keys",
			    fmt_duration(c->timeout_ms, d, sizeof(d)), c->nargs);
		return EXIT_FAIL;
	}
	return rc < 0 ? op_failed(c, "wait for", c->nargs == 1 ? keys[0] : NULL, rc) : EXIT_OK;
}

static int cmd_del(struct ctl *c)
{
	int rc = crun_store_delete(c->s, c->args[0], c->timeout_ms);

	if (rc == 0)
		rc = -ENOENT;
	return rc < 0 ? op_failed(c, "delete", c->args[0], rc) : EXIT_OK;
}

static int cmd_ls(struct ctl *c)
{
	char **keys;
	size_t n;
	int rc = crun_store_list(c->s, &keys, &n, c->timeout_ms);

	if (rc < 0)
		return op_failed(c, "list keys", NULL, rc);
	for (size_t i = 0; i < n; i++)
		printf("%s\n", keys[i]);
	crun_store_list_free(keys, n);
	return EXIT_OK;
}

static int cmd_count(struct ctl *c)
{
	int64_t n;
	int rc = crun_store_count(c->s, &n, c->timeout_ms);

	if (rc < 0)
		return op_failed(c, "count keys", NULL, rc);
	printf("%" PRId64 "\n", n);
	return EXIT_OK;
}

static int cmd_append(struct ctl *c)
{
	int rc = crun_store_append(c->s, c->args[0], c->args[1], strlen(c->args[1]), c->timeout_ms);

	return rc < 0 ? op_failed(c, "append to", c->args[0], rc) : EXIT_OK;
}

static int cmd_cas(struct ctl *c)
{
	const char *desired = c->args[2];
	struct crun_store_buf now;
	bool swapped;
	int rc = crun_store_cas(c->s, c->args[0], c->args[1], strlen(c->args[1]), desired,
				strlen(desired), 0, &now, c->timeout_ms);

	if (rc < 0)
		return op_failed(c, "compare-and-set", c->args[0], rc);
	swapped = rc == 1;
	print_value(&now);
	crun_store_buf_finish(&now);
	if (!swapped) {
		crun__error("key '%s' did not hold '%s': not swapped", c->args[0], c->args[1]);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int cmd_ping(struct ctl *c)
{
	int64_t us = crun_store_ping(c->s, c->timeout_ms);

	if (us < 0)
		return op_failed(c, "ping", NULL, (int)us);
	printf("%.3f ms\n", (double)us / 1000.0);
	return EXIT_OK;
}

/* watch ends on SIGINT/SIGTERM: the handler only writes to a pipe that
 * the event loop below polls next to the store's socket. */
static int sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	int saved = errno;
	ssize_t r;

	got_signal = sig;
	r = write(sig_pipe[1], "x", 1);
	(void)r;
	errno = saved;
}

static int catch_signals(void)
{
	struct sigaction sa = {.sa_handler = on_signal};

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		return -errno;
	return 0;
}

static void print_event(const struct crun_store_event *ev)
{
	if (ev->type == CRUN_STORE_EV_SET) {
		printf("set %s ", ev->key);
		fwrite(ev->value.data, 1, ev->value.len, stdout);
		putchar('\n');
	} else if (ev->type == CRUN_STORE_EV_DELETE) {
		printf("del %s\n", ev->key);
	} else {
		printf("overflow (changes were dropped: read the keys again)\n");
	}
	fflush(stdout);
}

static int cmd_watch(struct ctl *c)
{
	uint64_t end = c->timeout_given ? crun__now_ms() + (uint64_t)c->timeout_ms : 0;
	int rc;

	rc = catch_signals();
	if (rc < 0) {
		crun__error("cannot catch signals: %s", strerror(-rc));
		return EXIT_FAIL;
	}
	for (int i = 0; i < c->nargs; i++) {
		rc = crun_store_watch(c->s, c->args[i], -1);
		if (rc < 0)
			return op_failed(c, "watch", c->args[i], rc);
	}
	crun__debug("watching %d key%s for changes", c->nargs, c->nargs == 1 ? "" : "s");
	for (;;) {
		struct crun_store_event ev;
		struct pollfd p[2];
		int ms = -1;

		while ((rc = crun_store_next_event(c->s, &ev, 0)) == 0) {
			print_event(&ev);
			crun_store_event_finish(&ev);
		}
		if (rc == -ECONNRESET || rc == -ENOTCONN) {
			crun__warn("lost the connection to '%s', reconnecting", c->endpoint);
			rc = crun_store_connect(c->s);
			if (rc < 0)
				return op_failed(c, "reconnect", NULL,
						 rc == -ETIMEDOUT ? -ECONNRESET : rc);
			continue;
		}
		if (rc != -ETIMEDOUT)
			return op_failed(c, "watch", NULL, rc);
		if (got_signal)
			return EXIT_OK;
		if (end) {
			uint64_t now = crun__now_ms();

			if (now >= end)
				return EXIT_OK;
			ms = end - now > INT_MAX ? INT_MAX : (int)(end - now);
		}
		p[0] = (struct pollfd){.fd = crun_store_fd(c->s), .events = POLLIN};
		p[1] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
		if (poll(p, 2, ms) < 0 && errno != EINTR) {
			crun__error("poll failed: %s", strerror(errno));
			return EXIT_FAIL;
		}
	}
}

static const struct command commands[] = {
	{"set", 2, 2, "set KEY VALUE", cmd_set},
	{"get", 1, 1, "get KEY [--wait]", cmd_get},
	{"add", 2, 2, "add KEY N", cmd_add},
	{"wait", 1, -1, "wait KEY... [--timeout DURATION]", cmd_wait},
	{"del", 1, 1, "del KEY", cmd_del},
	{"ls", 0, 0, "ls", cmd_ls},
	{"count", 0, 0, "count", cmd_count},
	{"append", 2, 2, "append KEY VALUE", cmd_append},
	{"cas", 3, 3, "cas KEY EXPECTED DESIRED", cmd_cas},
	{"watch", 1, -1, "watch KEY...", cmd_watch},
	{"ping", 0, 0, "ping", cmd_ping},
};

static int parse_timeout(const char *opt, const char *v, int *out)
{
	char err[160];
	int64_t ms;

	if (crun__parse_duration_ms(v, &ms, err, sizeof(err)) < 0)
		return crun__usage_error("crunctl", "bad duration for %s: %s", opt, err);
	if (ms > INT_MAX)
		return crun__usage_error("crunctl", "bad duration for %s: '%s' is too long", opt,
					 v);
	*out = (int)ms;
	return 0;
}

/* Takes --timeout, --wait (get only) and '--' out of the command's
 * arguments, in place; the rest are positional. */
static int parse_command_args(struct ctl *c, const struct command *cmd, char **argv, int argc)
{
	bool opts_done = false;
	int n = 0, rc;

	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (!opts_done && !strcmp(a, "--")) {
			opts_done = true;
		} else if (!opts_done && !strcmp(a, "--timeout")) {
			if (i + 1 >= argc)
				return crun__usage_error("crunctl",
							 "option '--timeout' needs a value");
			rc = parse_timeout("--timeout", argv[++i], &c->timeout_ms);
			if (rc)
				return rc;
			c->timeout_given = true;
		} else if (!opts_done && !strncmp(a, "--timeout=", 10)) {
			rc = parse_timeout("--timeout", a + 10, &c->timeout_ms);
			if (rc)
				return rc;
			c->timeout_given = true;
		} else if (!opts_done && !strcmp(a, "--wait") && cmd->run == cmd_get) {
			c->wait = true;
		} else {
			argv[n++] = argv[i];
		}
	}
	if (n < cmd->min_args || (cmd->max_args >= 0 && n > cmd->max_args))
		return crun__usage_error("crunctl", "'%s' takes %s%s, got %d (usage: crunctl %s)",
					 cmd->name, cmd->max_args < 0 ? "at least " : "",
					 cmd->min_args == 0   ? "no arguments"
					 : cmd->min_args == 1 ? "one argument"
					 : cmd->min_args == 2 ? "two arguments"
							      : "three arguments",
					 n, cmd->synopsis);
	c->args = argv;
	c->nargs = n;
	if (cmd->run == cmd_add) {
		char err[160];

		if (crun__parse_int64(argv[1], INT64_MIN, INT64_MAX, &c->num, err, sizeof(err)) < 0)
			return crun__usage_error("crunctl", "bad number '%s' for add: %s", argv[1],
						 err);
	}
	return 0;
}

/* Endpoint, run id, token and timeouts: flags first, then the
 * environment crun sets for workers, then the defaults. */
static int resolve_settings(struct ctl *c, const char *token_file)
{
	const char *v;
	int rc;

	if (!c->endpoint) {
		v = getenv("CRUN_STORE");
		c->endpoint = v && *v ? v : DEFAULT_ENDPOINT;
	}
	rc = crun__store_endpoint(c->endpoint, DEFAULT_PORT, c->host, sizeof(c->host), &c->port);
	if (rc) {
		crun__usage_hint("crunctl");
		return rc;
	}
	if (!c->run_id)
		c->run_id = crun__env_get("CRUN_RUN_ID");
	if (!c->run_id || !*c->run_id)
		return crun__usage_error("crunctl", "empty run id");
	if (!c->timeout_given) {
		v = crun__env_get("CRUN_TIMEOUT");
		c->timeout_ms = CRUN_WIRE_DEFAULT_TIMEOUT_MS;
		rc = v ? parse_timeout("CRUN_TIMEOUT", v, &c->timeout_ms) : 0;
		if (rc)
			return rc;
	}
	rc = crun__store_token(token_file, NULL, &c->token, &c->token_len);
	c->token_owned = c->token != NULL;
	if (rc == EXIT_USAGE)
		crun__usage_hint("crunctl");
	return rc;
}

static int connect_store(struct ctl *c)
{
	struct crun_store_opts o = {
		.host = c->host,
		.port = c->port,
		.run_id = c->run_id,
		.token = c->token,
		.token_len = c->token_len,
		.connect_timeout_ms = c->connect_timeout_ms,
		.timeout_ms = c->timeout_ms,
	};
	uint64_t t0 = crun__now_ns();
	int rc;

	c->s = crun_store_create(&o);
	if (!c->s) {
		crun__error("cannot create a store handle: out of memory");
		return EXIT_FAIL;
	}
	rc = crun_store_connect(c->s);
	if (rc == -EACCES) {
		crun__error("%s", store_reason(c, rc));
		return EXIT_CONN;
	}
	if (rc < 0) {
		/* The network's reasons are short; the store's refusals and
		 * name resolution say more in their own message. */
		const char *why = crun_store_strerror(rc);

		if ((rc != -ECONNREFUSED && rc != -ETIMEDOUT && rc != -ECONNRESET && rc != -EPIPE &&
		     rc != -ENETUNREACH && rc != -EHOSTUNREACH) ||
		    !strncmp(crun_store_errmsg(c->s), "cannot resolve", 14))
			why = store_reason(c, rc);
		crun__error("cannot connect to '%s': %s", c->endpoint, why);
		return EXIT_CONN;
	}
	crun__debug("connected to '%s' (run '%s', %s) in %.3f ms", c->endpoint, c->run_id,
		    c->token ? "with a token" : "without a token",
		    (double)(crun__now_ns() - t0) / 1e6);
	return EXIT_OK;
}

enum {
	OPT_ENDPOINT = 256,
	OPT_TOKEN_FILE,
	OPT_RUN,
	OPT_TIMEOUT,
	OPT_CONNECT_TIMEOUT,
	OPT_VERSION,
};

static const struct option long_options[] = {
	{"endpoint", required_argument, NULL, OPT_ENDPOINT},
	{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	{"run", required_argument, NULL, OPT_RUN},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, OPT_VERSION},
	{NULL, 0, NULL, 0},
};

static int run(int argc, char **argv, struct ctl *c)
{
	const struct command *cmd = NULL;
	const char *token_file = NULL;
	int opt, rc;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+:vh", long_options, NULL)) != -1) {
		switch (opt) {
		case OPT_ENDPOINT:
			c->endpoint = optarg;
			break;
		case OPT_TOKEN_FILE:
			token_file = optarg;
			break;
		case OPT_RUN:
			c->run_id = optarg;
			break;
		case OPT_TIMEOUT:
			rc = parse_timeout("--timeout", optarg, &c->timeout_ms);
			if (rc)
				return rc;
			c->timeout_given = true;
			break;
		case OPT_CONNECT_TIMEOUT:
			rc = parse_timeout("--connect-timeout", optarg, &c->connect_timeout_ms);
			if (rc)
				return rc;
			if (c->connect_timeout_ms == 0)
				c->connect_timeout_ms = 1;
			break;
		case 'v':
			crun__log_set_level(CRUN_LOG_DEBUG);
			break;
		case 'h':
			fputs(usage_text, stdout);
			return EXIT_OK;
		case OPT_VERSION:
			printf("crunctl %s\n", CRUN_VERSION);
			return EXIT_OK;
		case ':':
			return crun__usage_error("crunctl", "option '%s' needs a value",
						 argv[optind - 1]);
		default:
			if (optopt && optopt < 256)
				return crun__usage_error("crunctl", "unknown option '-%c'", optopt);
			return crun__usage_error("crunctl", "unknown option '%s'",
						 argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return crun__usage_error("crunctl", "no command given");
	if (!strcmp(argv[optind], "status")) {
		struct crun__status_cli_defaults d = {
			.endpoint = c->endpoint,
			.run_id = c->run_id,
			.token_file = token_file,
			.connect_timeout_ms = c->connect_timeout_ms,
			.timeout_ms = c->timeout_given ? c->timeout_ms : 0,
		};

		if (c->timeout_given && c->timeout_ms == 0)
			return crun__usage_error("crunctl",
						 "bad duration for --timeout: must be more than 0");

		return crun__status_main("crunctl status", &d, argc - optind - 1,
					 argv + optind + 1);
	}
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(commands); i++)
		if (!strcmp(argv[optind], commands[i].name))
			cmd = &commands[i];
	if (!cmd)
		return crun__usage_error("crunctl", "unknown command '%s'", argv[optind]);
	rc = parse_command_args(c, cmd, argv + optind + 1, argc - optind - 1);
	if (rc)
		return rc;
	if (c->timeout_given && c->timeout_ms == 0 && cmd->run != cmd_wait)
		return crun__usage_error("crunctl",
					 "bad duration for --timeout: must be more than 0");
	rc = resolve_settings(c, token_file);
	if (rc)
		return rc;
	rc = connect_store(c);
	if (rc)
		return rc;
	return cmd->run(c);
}

int main(int argc, char **argv)
{
	struct ctl c = {.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS};
	int rc;

	crun__log_init("crunctl", CRUN_LOG_WARN);
	rc = run(argc, argv, &c);
	crun_store_destroy(c.s);
	if (c.token_owned) {
		OPENSSL_cleanse(c.token, c.token_len);
		free(c.token);
	}
	if (fflush(stdout) != 0 && rc == EXIT_OK) {
		crun__error("cannot write the output: %s", strerror(errno));
		rc = EXIT_FAIL;
	}
	return rc;
}
