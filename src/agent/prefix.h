/* The prefix of a worker's console lines: a template with torchrun's
 * placeholders (--log-line-prefix-template), or crun's default "[3]:" /
 * "[trainer3]:". Pure: no I/O. */
#ifndef CRUN_AGENT_PREFIX_H
#define CRUN_AGENT_PREFIX_H

#include <stddef.h>

/* crun's default templates: the global rank, with the role in front when
 * it is not "default". */
#define CRUN__PREFIX_DEFAULT "[${rank}]:"
#define CRUN__PREFIX_DEFAULT_ROLE "[${role_name}${rank}]:"

/* What the placeholders stand for. */
struct crun__prefix_vars {
	const char *role_name; /* ${role_name} */
	int rank;	       /* ${rank}, the global rank */
	int local_rank;	       /* ${local_rank} */
	const char *hostname;  /* ${hostname} */
};

/* Renders tmpl as Python's string.Template(tmpl).safe_substitute does
 * with torchrun's names (role_name, rank, local_rank, hostname): "$name"
 * and "${name}" are replaced, "$$" is "$"; an unknown name ("${node}",
 * "$Rank": names are case-sensitive) and a "$" that starts no name stay
 * as written. Writes at most len - 1 bytes and a NUL (len > 0); returns
 * the length of the whole prefix, so a result >= len means it was cut. */
size_t crun__prefix_render(const char *tmpl, const struct crun__prefix_vars *v, char *out,
			   size_t len);

#endif
