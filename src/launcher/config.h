/* crun's config file: a YAML mapping of option names to values.
 *
 *   nproc_per_node: 4          # or nproc-per-node
 *   max_restarts: 2
 *   rdzv_conf: {join_timeout: 60}   # or "join_timeout=60"
 *   signals_to_handle: [SIGTERM, SIGUSR1]
 *
 * This reader knows YAML, not the options: it hands every top-level key
 * with its value, flattened to text, to a callback (options.c), which
 * looks the key up and checks the value. */
#ifndef CRUN_LAUNCHER_CONFIG_H
#define CRUN_LAUNCHER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

enum crun__config_kind {
	CRUN_CONFIG_SCALAR = 0,
	CRUN_CONFIG_NULL,     /* "key:" with nothing, "~", "null", "Null" or "NULL" */
	CRUN_CONFIG_SEQUENCE, /* items: the scalars, in order */
	CRUN_CONFIG_MAPPING,  /* items: key, value, key, value ... */
};

struct crun__config_value {
	enum crun__config_kind kind;
	const char *scalar; /* SCALAR; NULL: the text as written */
	bool quoted;	    /* the scalar was written in quotes */
	const char **items; /* sequence and mapping: scalars only */
	size_t nitems;
};

/* Called once per top-level key, in file order, after the whole file has
 * been read and found to be YAML. line is 1-based. value and its strings
 * are valid during the call only. Returns
 * 0, or -EINVAL with the reason in err (without the "config 'P' line N: "
 * prefix, which the reader adds). */
typedef int (*crun__config_key_cb)(void *ctx, const char *key, int line,
				   const struct crun__config_value *value, char *err,
				   size_t errlen);

/* Reads the file at path (at most CRUN_LAUNCH_MAX_CONFIG bytes). Returns 0
 * or -EINVAL with one line in err: "cannot read config 'P': reason",
 * "config 'P' is a directory, not a file", "config 'P' sets no option: ..."
 * (an empty file, or one of comments only, is a mistake: a wrong file, not
 * a way to ask for the defaults) or "config 'P' line N: reason" (a YAML
 * syntax error, a top level that is not a mapping, a value nested deeper
 * than one level, an alias, or what the callback said, for instance about
 * a key given twice). */
int crun__launch_config_read(const char *path, crun__config_key_cb cb, void *ctx, char *err,
			     size_t errlen);

#endif
