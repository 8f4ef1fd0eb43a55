#include "rendezvous/server_metrics.h"

#include <ctype.h>
#include <stdio.h>

#include "common/prom.h"
#include "rendezvous/tcpstore.h"
#include "rendezvous/wire.h"

_Static_assert(CRUN__TS_OPS <= sizeof(((struct crun__server_stats *)0)->tcpstore_requests) /
				       sizeof(uint64_t),
	       "tcpstore_requests holds every TCPStore op");

/* "RDZV_JOIN" -> "rdzv_join": label values in the names' own case. */
static void lower(char *out, size_t outlen, const char *s)
{
	size_t i = 0;

	for (; s[i] && i + 1 < outlen; i++)
		out[i] = (char)tolower((unsigned char)s[i]);
	out[i] = '\0';
}

void crun__server_metrics_render(struct crun__prom *p, const struct crun__server_stats *st,
				 uint32_t connections)
{
	char op[48];

	crun__prom_family(p, "crun_store_connections", "gauge",
			  "Connections to the store open now.");
	crun__prom_sample_u64(p, "crun_store_connections", connections, NULL);
	crun__prom_family(p, "crun_store_connections_accepted_total", "counter",
			  "Connections the store accepted (refusals at accept not included).");
	crun__prom_sample_u64(p, "crun_store_connections_accepted_total", st->accepted, NULL);

	crun__prom_family(p, "crun_store_requests_total", "counter",
			  "Requests the store received, by protocol (crun, tcpstore) and "
			  "operation.");
	for (int t = 0; t < 256; t++) {
		if (!crun__wire_is_request((uint8_t)t) && !st->requests[t])
			continue;
		lower(op, sizeof(op), crun__wire_type_name((uint8_t)t));
		crun__prom_sample_u64(p, "crun_store_requests_total", st->requests[t], "protocol",
				      "crun", "op", op, NULL);
	}
	for (int t = 0; t < CRUN__TS_OPS; t++) {
		lower(op, sizeof(op), crun__tcpstore_op_name((enum crun__tcpstore_op)t));
		crun__prom_sample_u64(p, "crun_store_requests_total", st->tcpstore_requests[t],
				      "protocol", "tcpstore", "op", op, NULL);
	}

	crun__prom_family(p, "crun_store_received_bytes_total", "counter",
			  "Bytes the store read from its connections.");
	crun__prom_sample_u64(p, "crun_store_received_bytes_total", st->bytes_received, NULL);
	crun__prom_family(p, "crun_store_sent_bytes_total", "counter",
			  "Bytes the store queued to its connections.");
	crun__prom_sample_u64(p, "crun_store_sent_bytes_total", st->bytes_sent, NULL);

	crun__prom_family(p, "crun_store_refusals_total", "counter",
			  "Connections the store refused or closed, by reason.");
	for (int r = 0; r < CRUN_SRV_NREFUSALS; r++)
		crun__prom_sample_u64(p, "crun_store_refusals_total", st->refusals[r], "reason",
				      crun__server_refusal_name((enum crun__server_refusal)r),
				      NULL);

	crun__prom_family(p, "crun_rdzv_rounds_formed_total", "counter",
			  "Rendezvous rounds formed (members assigned), over every run.");
	crun__prom_sample_u64(p, "crun_rdzv_rounds_formed_total", st->rounds_formed, NULL);
	crun__prom_family(p, "crun_rdzv_round_formation_seconds", "histogram",
			  "Seconds from a round's first joiner to its formation.");
	crun__prom_histogram(p, "crun_rdzv_round_formation_seconds", crun__server_round_bounds,
			     st->round_buckets, CRUN_SRV_ROUND_BUCKETS, st->round_seconds_sum,
			     st->rounds_formed);
}

void crun__metrics_build_info(struct crun__prom *p, const char *version)
{
	crun__prom_family(p, "crun_build_info", "gauge", "The crun version, as a label; always 1.");
	crun__prom_sample(p, "crun_build_info", 1, "version", version, NULL);
}
