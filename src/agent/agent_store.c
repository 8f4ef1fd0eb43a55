/* The agent store's server (agent_store.h). */
#include "agent/agent_store.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "common/log.h"
#include "common/util.h"

void crun__agent_store_limits(struct crun__server_limits *limits, int nworkers)
{
	/* Two TCPStore connections a worker at most (PyTorch 1.13 opens a
	 * second, silent one), and room for crun's own clients besides. */
	uint64_t torch = 2 * (uint64_t)(nworkers > 0 ? nworkers : 1) + 64;
	uint64_t want = torch + 512;
	struct rlimit rl;

	if (want > UINT32_MAX / 2)
		want = UINT32_MAX / 2;
	if (want > limits->max_connections)
		limits->max_connections = (uint32_t)want;
	limits->max_tcpstore = (uint32_t)(torch < want ? torch : want);
	/* Half of the connections: the budget's own clamp (budget.h). */
	limits->max_preauth = limits->max_connections / 2;
	limits->max_preauth_per_source = limits->max_connections / 2;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < want + 64) {
		rlim_t old = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want + 64
				      ? (rlim_t)(want + 64)
				      : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
			crun__debug("open file limit raised from %llu to %llu for the store "
				    "connections of %d workers",
				    (unsigned long long)old, (unsigned long long)rl.rlim_cur,
				    nworkers);
	}
}

int crun__agent_store_open(uv_loop_t *loop, const struct crun__agent_spec *spec, const char *addr,
			   struct crun__server **out)
{
	const char *cand[3];
	struct crun__server_opts opts;
	char err[256] = "";
	int n = 0, rc = -EINVAL;

	/* An address that is not this machine's (NAT, a floating address):
	 * every address. */
	if (crun__addr_is_literal(addr))
		cand[n++] = addr;
	cand[n++] = "::";
	cand[n++] = "0.0.0.0";
	memset(&opts, 0, sizeof(opts));
	crun__server_limits_default(&opts.limits);
	crun__agent_store_limits(&opts.limits, spec->nnodes * spec->nproc_per_node);
	opts.token = spec->token;
	opts.token_len = spec->token_len;
	opts.quiet = true;
	opts.tcpstore = true;
	opts.token_hint = "--rdzv-conf token_file=FILE";
	for (int i = 0; i < n; i++) {
		*out = crun__server_create(loop, &opts);
		if (!*out) {
			crun__error("cannot create the agent store: %s", strerror(ENOMEM));
			return -ENOMEM;
		}
		rc = crun__server_listen(*out, cand[i], 0, err, sizeof(err));
		if (rc == 0) {
			crun__debug(
				"serving the workers' store (their MASTER_ADDR and MASTER_PORT) "
				"on '%s' port %d",
				cand[i], crun__server_port(*out));
			return 0;
		}
		crun__server_destroy(*out, NULL, NULL);
		*out = NULL;
		if (rc != -EADDRNOTAVAIL && rc != -EAFNOSUPPORT)
			break;
	}
	crun__error("cannot open the agent store on '%s': %s", addr, err[0] ? err : strerror(-rc));
	return rc;
}
