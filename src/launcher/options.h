/* crun's options: command line, PET_ environment, config file, defaults.
 *
 * Every option is declared once, in the table of options.c, with its long
 * name (both spellings, --nproc-per-node and --nproc_per_node, are
 * accepted), its PET_ variable, its config key, its default and its help
 * text; --help (help.c) and the checks of the man page come from it.
 *
 * A value may come from five places; the first that has it wins:
 *   1. the command line
 *   2. the PET_<NAME> environment variable (torchrun's fallback)
 *   3. the config file named by -c/--config (crun's own)
 *   4. the scheduler that started crun (scheduler.h: Slurm, Kubernetes)
 *   5. the default
 * Every value that is given anywhere is checked, also one that a higher
 * source overrides, so a bad config file is always reported.
 *
 * Parsing never prints and never exits: it returns 0 or -EINVAL with one
 * line in the caller's buffer, without the "crun: " prefix and without a
 * newline, naming the flag, variable or config key and what is allowed:
 *   invalid value '-2' for --nproc-per-node: expected a positive number...
 *   invalid value 'x' for PET_NNODES: expected N or MIN:MAX ...
 *   config 'x.yaml' line 3: unknown key 'nproc'
 * main() prints it and exits 2. */
#ifndef CRUN_LAUNCHER_OPTIONS_H
#define CRUN_LAUNCHER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "launcher/scheduler.h"

#define CRUN_LAUNCH_MAX_NPROC 4096
#define CRUN_LAUNCH_MAX_NNODES 65536
#define CRUN_LAUNCH_MAX_RUN_ID 128
/* Largest config file read, in bytes. */
#define CRUN_LAUNCH_MAX_CONFIG (1 << 20)

enum crun__launch_action {
	CRUN_LAUNCH_RUN = 0,
	CRUN_LAUNCH_HELP,
	CRUN_LAUNCH_VERSION,
	CRUN_LAUNCH_DRY_RUN, /* print the resolved configuration, start nothing */
};

/* --nproc-per-node: a count, or a word resolved on this host (plan.h). */
enum crun__nproc_mode {
	CRUN_NPROC_COUNT = 0,
	CRUN_NPROC_AUTO, /* GPUs if there are any, else CPUs */
	CRUN_NPROC_CPU,	 /* online CPUs */
	CRUN_NPROC_GPU,	 /* NVIDIA GPUs; an error when there are none */
};

enum crun__rdzv_backend {
	CRUN_RDZV_C10D = 0, /* crun's store and rounds, torchrun's name */
	CRUN_RDZV_STATIC,   /* fixed ranks, store on master-addr:master-port */
};

/* --agent-store: whose TCPStore PyTorch's workers use (torch_probe.h). */
enum crun__agent_store_mode {
	CRUN_AGENT_STORE_AUTO = 0, /* on unless the workers' PyTorch is outside
				    * the supported range or
				    * TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 */
	CRUN_AGENT_STORE_ON,	   /* crun's store, as torchrun's agent store */
	CRUN_AGENT_STORE_OFF,	   /* rank 0's worker hosts it on MASTER_PORT */
};

/* Where the value of an option came from, in rising precedence. */
enum crun__launch_source {
	CRUN_SRC_DEFAULT = 0,
	CRUN_SRC_SCHED,
	CRUN_SRC_CONFIG,
	CRUN_SRC_ENV,
	CRUN_SRC_CLI,
};

/* Identifiers of the options, in the order of the table (and of --help). */
enum crun__launch_opt {
	CRUN_OPT_NPROC_PER_NODE = 0,
	CRUN_OPT_ROLE,
	CRUN_OPT_MODULE,
	CRUN_OPT_NO_PYTHON,
	CRUN_OPT_RUN_PATH,
	CRUN_OPT_MAX_RESTARTS,
	CRUN_OPT_MIN_ATTEMPT_TIME,
	CRUN_OPT_SHUTDOWN_TIMEOUT,
	CRUN_OPT_SIGNALS_TO_HANDLE,
	CRUN_OPT_VIRTUAL_LOCAL_RANK,
	CRUN_OPT_MONITOR_INTERVAL,
	CRUN_OPT_START_METHOD,
	CRUN_OPT_STRAGGLER_FACTOR,
	CRUN_OPT_STRAGGLER_WINDOW,
	CRUN_OPT_SIGNALS_TO_FORWARD,
	CRUN_OPT_GPU_SAMPLE_INTERVAL,
	CRUN_OPT_GPU_RELEASE_TIMEOUT,
	CRUN_OPT_NNODES,
	CRUN_OPT_NODE_RANK,
	CRUN_OPT_RDZV_BACKEND,
	CRUN_OPT_RDZV_ENDPOINT,
	CRUN_OPT_RDZV_ID,
	CRUN_OPT_RDZV_CONF,
	CRUN_OPT_STANDALONE,
	CRUN_OPT_MASTER_ADDR,
	CRUN_OPT_MASTER_PORT,
	CRUN_OPT_LOCAL_ADDR,
	CRUN_OPT_AGENT_STORE,
	CRUN_OPT_SCHEDULER,
	CRUN_OPT_SLURM_TASKS_AS_NODES,
	CRUN_OPT_SLURM_REQUEUE,
	CRUN_OPT_HOSTFILE,
	CRUN_OPT_INCLUDE,
	CRUN_OPT_EXCLUDE,
	CRUN_OPT_SSH_OPTIONS,
	CRUN_OPT_LOG_DIR,
	CRUN_OPT_REDIRECTS,
	CRUN_OPT_TEE,
	CRUN_OPT_LOCAL_RANKS_FILTER,
	CRUN_OPT_LOG_LINE_PREFIX_TEMPLATE,
	CRUN_OPT_EVENTS,
	CRUN_OPT_HEARTBEAT_TIMEOUT,
	CRUN_OPT_HEARTBEAT_INITIAL_TIMEOUT,
	CRUN_OPT_HEARTBEAT_SECTION_TIMEOUTS,
	CRUN_OPT_HEARTBEAT_AUTO_FACTOR,
	CRUN_OPT_CONFIG,
	CRUN_OPT_DRY_RUN,
	CRUN_OPT_HELP,
	CRUN_OPT_VERSION,
	CRUN_OPT_METRICS_PORT,
	CRUN_OPT_METRICS_HOST,
	CRUN_OPT_COUNT,
};

/* One row of the option table, for --help and the tests. */
struct crun__launch_optdef {
	enum crun__launch_opt id;
	const char *name;	  /* long name with dashes, without "--" */
	char short_name;	  /* 0: none */
	bool takes_value;	  /* false: a flag */
	bool pet;		  /* read from PET_<NAME> */
	bool config;		  /* allowed as a config file key */
	const char *metavar;	  /* for --help; NULL for flags */
	const char *default_text; /* "(default ...)" in --help; NULL: none */
	const char *help;
	const char *group; /* heading in --help */
};

const struct crun__launch_optdef *crun__launch_optdefs(size_t *count);

/* The --rdzv-conf keys, read by multi-node rounds. */
struct crun__rdzv_conf {
	int64_t join_timeout_ms;	/* 600 s */
	bool join_timeout_set;		/* given, not the default */
	int64_t last_call_timeout_ms;	/* 30 s */
	int64_t close_timeout_ms;	/* 30 s */
	int64_t keep_alive_interval_ms; /* 5 s */
	int keep_alive_max_attempt;	/* 3 */
	int is_host;			/* -1: decide from the endpoint, 0, 1 */
	char *token_file;		/* NULL: none */
	int64_t read_timeout_ms;	/* 60 s */
	int64_t rejoin_timeout_ms;	/* 0: join_timeout_ms */
	int blacklist_failures;		/* 3; 0: never exclude */
	int64_t blacklist_window_ms;	/* 10 min */
	int64_t cooldown_min_ms;	/* 30 s */
	int64_t cooldown_max_ms;	/* 5 min */
	int64_t reconnect_timeout_ms;	/* 60 s */
	int64_t timeout_ms;		/* torchrun's timeout; 0: not given */
};

/* Per-rank stream selection of --redirects/--tee, as torchrun writes it:
 * "3" (every local rank) or "0:1,1:2" (local rank:streams). */
struct crun__std_spec {
	enum crun__std all; /* value for ranks without an entry */
	size_t count;
	int *ranks;
	enum crun__std *streams;
};

struct crun__launch_opts {
	enum crun__launch_action action;

	enum crun__nproc_mode nproc_mode;
	int nproc;			      /* with CRUN_NPROC_COUNT */
	int nnodes_min, nnodes_max;	      /* 1:1 */
	int node_rank;			      /* 0 */
	enum crun__rdzv_backend rdzv_backend; /* c10d */
	char *rdzv_endpoint;		      /* NULL: none given */
	char *rdzv_id;			      /* NULL: none given */
	struct crun__rdzv_conf rdzv_conf;
	bool standalone;
	int max_restarts;	     /* 3 */
	int64_t monitor_interval_ms; /* 100; accepted, unused (event driven) */
	char *start_method;	     /* "spawn"; accepted, unused (crun execs) */
	double straggler_factor;     /* 1.5; 0: no straggler warnings */
	int straggler_window;	     /* 20 steps */
	char *role;		     /* "default" */
	/* --gpu-sample-interval: 5 s, 0: no sampling; --gpu-release-timeout:
	 * 50 s, 0: no wait before a restart */
	int64_t gpu_sample_interval_ms;
	int64_t gpu_release_timeout_ms;
	/* runpy.run_path; wins over module and no_python */
	bool run_path;
	bool module;
	bool no_python;
	char *master_addr;			 /* NULL: 127.0.0.1 on one node */
	int master_port;			 /* 0: a free port on one node */
	char *local_addr;			 /* NULL: none */
	enum crun__agent_store_mode agent_store; /* auto */
	enum crun__sched_mode sched_mode;	 /* --scheduler: auto */
	/* What the scheduler's environment gave (scheduler.h); its values are
	 * those whose source is CRUN_SRC_SCHED. */
	struct crun__sched sched;
	/* --hostfile, --include, --exclude, --ssh-options (hostfile.h);
	 * NULL: none. */
	char *hostfile, *include, *exclude, *ssh_options;
	char *log_dir; /* NULL: no log files */
	char *events;  /* --events FILE; NULL: none */
	struct crun__std_spec redirects, tee;
	int *ranks_filter; /* --local-ranks-filter; NULL: all */
	size_t nranks_filter;
	/* --log-line-prefix-template; NULL: crun's [RANK]: */
	char *log_line_prefix_template;
	int64_t shutdown_timeout_ms; /* 30 s */
	int64_t min_attempt_ms;	     /* 60 s */
	int signals[CRUN_AGENT_MAX_SIGNALS];
	int nsignals;
	/* --signals-to-forward: SIGUSR1, SIGUSR2; those also in signals are
	 * dropped by the plan */
	int forward_signals[CRUN_AGENT_MAX_SIGNALS];
	int nforward_signals;
	int slurm_requeue; /* --slurm-requeue: the exit status; 0: none */
	bool virtual_local_rank;
	struct crun__liveness_config heartbeat; /* 180 s, 600 s, no sections, 0 */
	char *config_path;			/* -c/--config; NULL: none */
	int metrics_port;			/* --metrics-port; -1: off */
	char *metrics_host;			/* NULL: 0.0.0.0 */

	/* The command and its arguments: pointers into the caller's argv,
	 * valid as long as it is. */
	char **command;
	int command_argc;

	/* Where each option's value came from, and for config values the
	 * line (for messages that name it). */
	enum crun__launch_source source[CRUN_OPT_COUNT];
	int config_line[CRUN_OPT_COUNT];
	/* The shutdown timeout came from TORCH_ELASTIC_SHUTDOWN_TIMEOUT. */
	bool shutdown_timeout_from_torch_env;
};

/* Sets every option to its default; no command. */
void crun__launch_opts_init(struct crun__launch_opts *o);
/* Frees what parsing allocated; the struct may be initialised again. */
void crun__launch_opts_finish(struct crun__launch_opts *o);

/* Parses argv[1..argc-1] (options up to the first argument that is not an
 * option, or "--"; the rest is the command), the PET_ variables of envp
 * (NULL-terminated "NAME=value" strings; NULL: none) and the config file.
 * -h/--help and --version end parsing at once and set o->action. Returns 0
 * or -EINVAL with one line in err (see above). o must be initialised; on
 * error it still must be finished. */
int crun__launch_opts_parse(struct crun__launch_opts *o, int argc, char **argv, char **envp,
			    char *err, size_t errlen);

/* Writes "invalid value 'V' for ORIGIN: REASON" for option id into err,
 * where ORIGIN is the flag, the PET_ variable or the config key and line
 * that gave the value (for checks made after parsing, such as plan.c's). */
void crun__launch_opts_invalid(const struct crun__launch_opts *o, enum crun__launch_opt id,
			       const char *value, const char *reason, char *err, size_t errlen);

/* Where option id's value came from, for --dry-run: "--nnodes",
 * "PET_NNODES", "config x.yaml line 3", "slurm SLURM_NNODES", "default". */
void crun__launch_opts_origin(const struct crun__launch_opts *o, enum crun__launch_opt id,
			      char *out, size_t outlen);

/* The option a command-line word names, as crun__launch_opts_parse
 * reads it (either spelling, a unique prefix, a short name), or NULL when
 * arg is not an option crun knows. *inline_value: the word holds the
 * value too ("--nnodes=2", "-r3"). */
const struct crun__launch_optdef *crun__launch_cli_lookup(const char *arg, bool *inline_value);

/* The config key of option id ("nproc_per_node"). */
void crun__launch_config_key(enum crun__launch_opt id, char *out, size_t outlen);

/* Parsers of single values, also used by the tests. Each returns 0 or
 * -EINVAL with the reason (what is allowed) in err. */

/* "3" or "0:1,1:2"; streams 0-3. */
int crun__launch_parse_std(const char *s, struct crun__std_spec *out, char *err, size_t errlen);
void crun__std_spec_finish(struct crun__std_spec *spec);
/* Streams of local rank lr. */
enum crun__std crun__std_spec_get(const struct crun__std_spec *spec, int lr);

/* "k=v,k=v" with the known keys (rdzv_conf.c: crun's and torchrun's);
 * values checked per key; an unknown key is an error that suggests the
 * closest known one. conf must hold the defaults (or earlier values). */
int crun__launch_parse_rdzv_conf(const char *s, struct crun__rdzv_conf *conf, char *err,
				 size_t errlen);
void crun__rdzv_conf_init(struct crun__rdzv_conf *conf);
void crun__rdzv_conf_finish(struct crun__rdzv_conf *conf);
/* The join timeout in effect: with static, torchrun's timeout (the time
 * its static store waits for every node) unless join_timeout was given. */
int64_t crun__rdzv_conf_join_timeout_ms(const struct crun__rdzv_conf *conf, bool is_static);

/* 1, true, yes, on / 0, false, no, off (any case). 0 or -EINVAL. */
int crun__launch_parse_bool(const char *v, bool *out);

/* The longest --log-line-prefix-template, in bytes. */
#define CRUN_LAUNCH_PREFIX_TEMPLATE_MAX 256

/* "SIGTERM,SIGINT" (also "TERM", any case); signals that cannot be caught
 * or that crun needs (SIGKILL, SIGSTOP, SIGCHLD) are refused. Duplicates
 * are dropped. */
int crun__launch_parse_signals(const char *s, int *sigs, int *nsigs, char *err, size_t errlen);
/* "SIGTERM" for SIGTERM; NULL for a signal the table does not name. */
const char *crun__signal_name(int sig);

/* The value of NAME in envp (a NULL-terminated "KEY=VALUE" array, as main's
 * third argument), or NULL. Points into envp. */
const char *crun__launch_env_lookup(char **envp, const char *name);

#endif
