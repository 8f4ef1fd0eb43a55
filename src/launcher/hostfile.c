/* The hostfile's formats and filters, the command sent to each host, and
 * the exit status of a job of several hosts (hostfile.h). */
#include "launcher/hostfile.h"
#include "common/fnv.h"
#include "launcher/options.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMATS "expected 'HOST slots=N', 'HOST:N' or 'HOST'"
#define FILTER_SYNTAX "expected HOST[:SLOT,...]@HOST..., e.g. node1@node2:0,2"

void crun__hostfile_finish(struct crun__hostfile *hf)
{
	for (size_t i = 0; i < hf->nhosts; i++)
		free(hf->hosts[i].picked);
	free(hf->hosts);
	hf->hosts = NULL;
	hf->nhosts = 0;
}

static bool valid_host(const char *s, size_t len)
{
	if (!len || len > CRUN_HOSTFILE_HOST_MAX || s[0] == '-' || s[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr(".-_", s[i]))
			return false;
	return true;
}

/* Whole number in [1, max] from s[0..len). */
static int parse_count(const char *s, size_t len, int max, int *out)
{
	char buf[16];
	int64_t n;

	if (!len || len >= sizeof(buf) || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (crun__parse_int64(buf, 1, max, &n, NULL, 0) < 0)
		return -EINVAL;
	*out = (int)n;
	return 0;
}

static struct crun__hostfile_host *find_host(struct crun__hostfile *hf, const char *name,
					     size_t len)
{
	for (size_t i = 0; i < hf->nhosts; i++)
		if (strlen(hf->hosts[i].name) == len && !memcmp(hf->hosts[i].name, name, len))
			return &hf->hosts[i];
	return NULL;
}

/* One line without its newline; *host set when it names one. */
static int parse_line(const char *s, size_t len, struct crun__hostfile_host *h, bool *host,
		      char *reason, size_t rlen)
{
	const char *hash = memchr(s, '#', len), *p, *end, *tok2;
	size_t hlen;

	*host = false;
	if (hash)
		len = (size_t)(hash - s);
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	p = s;
	end = s + len;
	while (p < end && isspace((unsigned char)*p))
		p++;
	if (p == end)
		return 0;
	hlen = 0;
	while (p + hlen < end && !isspace((unsigned char)p[hlen]))
		hlen++;
	tok2 = p + hlen;
	while (tok2 < end && isspace((unsigned char)*tok2))
		tok2++;

	memset(h, 0, sizeof(*h));
	h->slots = 1;
	if (tok2 < end) { /* HOST slots=N */
		size_t tlen = (size_t)(end - tok2);

		if (tlen < 6 || memcmp(tok2, "slots=", 6) || memchr(tok2, ' ', tlen) ||
		    memchr(tok2, '\t', tlen)) {
			crun__seterr(reason, rlen, "'%.*s': " FORMATS, (int)(end - p), p);
			return -EINVAL;
		}
		if (parse_count(tok2 + 6, tlen - 6, CRUN_LAUNCH_MAX_NPROC, &h->slots) < 0) {
			crun__seterr(reason, rlen, "invalid slots '%.*s': expected 1 to %d",
				     (int)(tlen - 6), tok2 + 6, CRUN_LAUNCH_MAX_NPROC);
			return -EINVAL;
		}
	} else {
		const char *colon = memchr(p, ':', hlen);

		if (colon) { /* HOST:N */
			size_t nlen = hlen - (size_t)(colon + 1 - p);

			if (parse_count(colon + 1, nlen, CRUN_LAUNCH_MAX_NPROC, &h->slots) < 0) {
				crun__seterr(reason, rlen, "invalid slots '%.*s': expected 1 to %d",
					     (int)nlen, colon + 1, CRUN_LAUNCH_MAX_NPROC);
				return -EINVAL;
			}
			hlen = (size_t)(colon - p);
		}
	}
	if (!valid_host(p, hlen)) {
		crun__seterr(reason, rlen,
			     "invalid host '%.*s': expected a name or IPv4 address of letters, "
			     "digits, '.', '-', '_'",
			     (int)(hlen > 64 ? 64 : hlen), p);
		return -EINVAL;
	}
	memcpy(h->name, p, hlen);
	h->name[hlen] = '\0';
	h->nslots = h->slots;
	*host = true;
	return 0;
}

int crun__hostfile_parse(const char *text, size_t len, const char *path, struct crun__hostfile *hf,
			 char *err, size_t errlen)
{
	struct crun__hostfile out = {0};
	size_t cap = 0, off = 0;
	char reason[384];
	int line = 0, rc;

	crun__hostfile_finish(hf);
	if (len > CRUN_HOSTFILE_MAX_BYTES) {
		crun__seterr(err, errlen, "hostfile '%s': larger than %d bytes", path,
			     CRUN_HOSTFILE_MAX_BYTES);
		return -EINVAL;
	}
	while (off < len) {
		const char *s = text + off, *nl = memchr(s, '\n', len - off);
		size_t llen = nl ? (size_t)(nl - s) : len - off;
		struct crun__hostfile_host h, *dup;
		bool host;

		line++;
		off += llen + 1;
		if (llen > CRUN_HOSTFILE_MAX_LINE) {
			crun__seterr(reason, sizeof(reason), "longer than %d bytes",
				     CRUN_HOSTFILE_MAX_LINE);
			rc = -EINVAL;
			goto out_error;
		}
		if (memchr(s, '\0', llen)) {
			crun__seterr(reason, sizeof(reason), "a NUL byte");
			rc = -EINVAL;
			goto out_error;
		}
		rc = parse_line(s, llen, &h, &host, reason, sizeof(reason));
		if (rc)
			goto out_error;
		if (!host)
			continue;
		h.line = line;
		dup = find_host(&out, h.name, strlen(h.name));
		if (dup) {
			crun__seterr(reason, sizeof(reason),
				     "host '%s' is listed twice (first on line %d)", h.name,
				     dup->line);
			rc = -EINVAL;
			goto out_error;
		}
		if (out.nhosts == CRUN_HOSTFILE_MAX_HOSTS) {
			crun__seterr(reason, sizeof(reason), "more than %d hosts",
				     CRUN_HOSTFILE_MAX_HOSTS);
			rc = -EINVAL;
			goto out_error;
		}
		if (out.nhosts == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct crun__hostfile_host *n = realloc(out.hosts, ncap * sizeof(*n));

			if (!n) {
				crun__seterr(err, errlen, "out of memory");
				crun__hostfile_finish(&out);
				return -ENOMEM;
			}
			out.hosts = n;
			cap = ncap;
		}
		out.hosts[out.nhosts++] = h;
	}
	if (!out.nhosts) {
		crun__seterr(err, errlen, "hostfile '%s': no hosts (" FORMATS ")", path);
		return -EINVAL;
	}
	*hf = out;
	return 0;
out_error:
	crun__seterr(err, errlen, "hostfile '%s' line %d: %s", path, line, reason);
	crun__hostfile_finish(&out);
	return rc;
}

/* ---- filters --------------------------------------------------------- */

/* One HOST[:SLOTS] item of a filter: the host, and the slot list (NULL
 * when none) as text. */
struct filter_item {
	const char *host;
	size_t hlen;
	const char *slots;
	size_t slen;
};

/* Splits f at '@' into items; checks the syntax. Returns the count or
 * -EINVAL with the reason. */
static int split_filter(const char *f, struct filter_item *items, size_t max, char *reason,
			size_t rlen)
{
	const char *p = f;
	size_t n = 0;

	if (!*f || strlen(f) > CRUN_HOSTFILE_MAX_BYTES)
		goto bad;
	for (;;) {
		size_t len = strcspn(p, "@");
		const char *colon = memchr(p, ':', len);
		struct filter_item it = {.host = p, .hlen = colon ? (size_t)(colon - p) : len};

		if (!valid_host(it.host, it.hlen))
			goto bad;
		if (colon) {
			it.slots = colon + 1;
			it.slen = len - it.hlen - 1;
			if (!it.slen)
				goto bad;
			for (const char *q = it.slots; q < it.slots + it.slen;) {
				size_t dlen = 0;

				while (q + dlen < it.slots + it.slen &&
				       isdigit((unsigned char)q[dlen]))
					dlen++;
				if (!dlen || dlen > 6)
					goto bad;
				q += dlen;
				if (q < it.slots + it.slen && *q++ != ',')
					goto bad;
				if (q == it.slots + it.slen && q[-1] == ',')
					goto bad;
			}
		}
		if (n == max) {
			crun__seterr(reason, rlen, "more than %zu hosts", max);
			return -EINVAL;
		}
		items[n++] = it;
		if (!p[len])
			break;
		p += len + 1;
	}
	return (int)n;
bad:
	crun__seterr(reason, rlen, FILTER_SYNTAX);
	return -EINVAL;
}

int crun__hostfile_check_filter(const char *filter, char *err, size_t errlen)
{
	struct filter_item *items = calloc(CRUN_HOSTFILE_MAX_HOSTS, sizeof(*items));
	int rc;

	if (!items) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = split_filter(filter, items, CRUN_HOSTFILE_MAX_HOSTS, err, errlen);
	free(items);
	return rc < 0 ? rc : 0;
}

/* Marks in keep[0..h->slots) the slots an item lists. */
static int item_slots(const struct filter_item *it, const struct crun__hostfile_host *h, bool *keep,
		      const char *flag, char *err, size_t errlen)
{
	const char *q = it->slots, *end = it->slots + it->slen;

	while (q < end) {
		size_t dlen = strspn(q, "0123456789");
		int64_t v;
		char buf[8];

		memcpy(buf, q, dlen);
		buf[dlen] = '\0';
		if (crun__parse_int64(buf, 0, h->slots - 1, &v, NULL, 0) < 0) {
			crun__seterr(
				err, errlen,
				"invalid value for %s: host '%s' has no slot %s (slots 0 to %d)",
				flag, h->name, buf, h->slots - 1);
			return -EINVAL;
		}
		keep[v] = true;
		q += dlen + 1;
	}
	return 0;
}

int crun__hostfile_filter(struct crun__hostfile *hf, const char *include, const char *exclude,
			  char *err, size_t errlen)
{
	const char *filter = include ? include : exclude;
	const char *flag = include ? "--include" : "--exclude";
	struct filter_item *items;
	int *item_of = NULL; /* per host: its item, or -1 */
	bool *keep = NULL;
	size_t kept = 0;
	char reason[256];
	int n, rc = -EINVAL;

	if (include && exclude) {
		crun__seterr(err, errlen, "--include and --exclude cannot be used together");
		return -EINVAL;
	}
	if (!filter)
		return 0;
	items = calloc(CRUN_HOSTFILE_MAX_HOSTS, sizeof(*items));
	item_of = calloc(hf->nhosts, sizeof(*item_of));
	keep = calloc(CRUN_LAUNCH_MAX_NPROC, sizeof(*keep));
	if (!items || !item_of || !keep) {
		crun__seterr(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto out_free;
	}
	for (size_t i = 0; i < hf->nhosts; i++)
		item_of[i] = -1;
	n = split_filter(filter, items, CRUN_HOSTFILE_MAX_HOSTS, reason, sizeof(reason));
	if (n < 0) {
		crun__seterr(err, errlen, "invalid value '%s' for %s: %s", filter, flag, reason);
		goto out_free;
	}
	/* Every item names a host of the file, once. */
	for (int i = 0; i < n; i++) {
		struct crun__hostfile_host *h = find_host(hf, items[i].host, items[i].hlen);

		if (!h) {
			crun__seterr(err, errlen,
				     "invalid value for %s: host '%.*s' is not in the "
				     "hostfile",
				     flag, (int)items[i].hlen, items[i].host);
			goto out_free;
		}
		if (item_of[h - hf->hosts] >= 0) {
			crun__seterr(err, errlen, "invalid value for %s: host '%s' is named twice",
				     flag, h->name);
			goto out_free;
		}
		item_of[h - hf->hosts] = i;
	}
	for (size_t hi = 0; hi < hf->nhosts; hi++) {
		struct crun__hostfile_host *h = &hf->hosts[hi];
		const struct filter_item *it = item_of[hi] >= 0 ? &items[item_of[hi]] : NULL;
		int count = 0;
		memset(keep, 0, (size_t)h->slots * sizeof(*keep));
		if (include) {
			if (!it)
				continue; /* dropped */
			if (!it->slots) {
				hf->hosts[kept++] = *h;
				continue;
			}
			if (item_slots(it, h, keep, flag, err, errlen) < 0)
				goto out_free;
		} else {
			if (it && !it->slots) {
				free(h->picked);
				continue;
			}
			if (!it) {
				hf->hosts[kept++] = *h;
				continue;
			}
			if (item_slots(it, h, keep, flag, err, errlen) < 0)
				goto out_free;
			for (int s = 0; s < h->slots; s++)
				keep[s] = !keep[s];
		}
		for (int s = 0; s < h->slots; s++)
			count += keep[s];
		free(h->picked);
		h->picked = NULL;
		if (!count)
			continue;
		h->picked = calloc((size_t)count, sizeof(*h->picked));
		if (!h->picked) {
			crun__seterr(err, errlen, "out of memory");
			rc = -ENOMEM;
			goto out_free;
		}
		h->nslots = 0;
		for (int s = 0; s < h->slots; s++)
			if (keep[s])
				h->picked[h->nslots++] = s;
		hf->hosts[kept++] = *h;
	}
	hf->nhosts = kept;
	if (!kept) {
		crun__seterr(err, errlen, "invalid value '%s' for %s: no host is left", filter,
			     flag);
		goto out_free;
	}
	rc = 0;
out_free:
	free(keep);
	free(item_of);
	free(items);
	return rc;
}

/* ---- the command sent to a host -------------------------------------- */

const char *const crun__hostfile_env_prefixes[] = {
	"PET_", "CRUN_", "TORCH", "NCCL_", "GLOO_", "PYTHON", "OMP_NUM_THREADS=", NULL,
};

static bool stripped(enum crun__launch_opt id);

/* True when entry is PET_<NAME>=... of an option that only the
 * controller reads (--hostfile, --include...): the hosts get none. */
static bool controller_only(const char *entry)
{
	size_t count;
	const struct crun__launch_optdef *defs = crun__launch_optdefs(&count);

	if (strncmp(entry, "PET_", 4))
		return false;
	for (size_t i = 0; i < count; i++) {
		const char *n = defs[i].name, *e = entry + 4;

		if (!defs[i].pet || !stripped(defs[i].id))
			continue;
		for (; *n && *e == (*n == '-' ? '_' : toupper((unsigned char)*n)); n++, e++)
			;
		if (!*n && *e == '=')
			return true;
	}
	return false;
}

bool crun__hostfile_env_forwarded(const char *entry)
{
	if (!strchr(entry, '=') || !strncmp(entry, "CRUN_REMOTE_AGENT=", 18) ||
	    controller_only(entry))
		return false;
	for (size_t i = 0; crun__hostfile_env_prefixes[i]; i++)
		if (!strncmp(entry, crun__hostfile_env_prefixes[i],
			     strlen(crun__hostfile_env_prefixes[i])))
			return true;
	return false;
}

static int append(char *out, size_t outlen, size_t *used, const char *s)
{
	size_t len = strlen(s);

	if (*used + len + 1 > outlen)
		return -ENOSPC;
	memcpy(out + *used, s, len + 1);
	*used += len;
	return 0;
}

char *crun__hostfile_command(const char *dir, char **env, const char *extra_env, char *const *argv)
{
	size_t cap = CRUN_HOSTFILE_MAX_COMMAND, used = 0;
	char *out = malloc(cap);
	int rc;

	if (!out)
		return NULL;
	out[0] = '\0';
	rc = append(out, cap, &used, "cd ");
	rc = rc ? rc : crun__shell_quote(out, cap, &used, dir);
	rc = rc ? rc : append(out, cap, &used, " && exec env");
	for (char **e = env; !rc && e && *e; e++) {
		if (!crun__hostfile_env_forwarded(*e))
			continue;
		rc = append(out, cap, &used, " ");
		rc = rc ? rc : crun__shell_quote(out, cap, &used, *e);
	}
	if (!rc && extra_env) {
		rc = append(out, cap, &used, " ");
		rc = rc ? rc : crun__shell_quote(out, cap, &used, extra_env);
	}
	rc = rc ? rc : append(out, cap, &used, " CRUN_REMOTE_AGENT=1");
	for (char *const *a = argv; !rc && *a; a++) {
		rc = append(out, cap, &used, " ");
		rc = rc ? rc : crun__shell_quote(out, cap, &used, *a);
	}
	if (rc) {
		free(out);
		return NULL;
	}
	return out;
}

static bool stripped(enum crun__launch_opt id)
{
	return id == CRUN_OPT_HOSTFILE || id == CRUN_OPT_INCLUDE || id == CRUN_OPT_EXCLUDE ||
	       id == CRUN_OPT_SSH_OPTIONS || id == CRUN_OPT_DRY_RUN;
}

void crun__hostfile_argv_free(char **argv)
{
	for (char **a = argv; a && *a; a++)
		free(*a);
	free(argv);
}

char **crun__hostfile_agent_argv(const char *crun_path, int argc, char *const *argv,
				 int command_index, size_t nnodes, size_t rank, int nslots,
				 const char *endpoint, const char *run_id)
{
	size_t n = 0, cap = (size_t)argc + 8;
	char **out = calloc(cap, sizeof(*out));
	char buf[512];
	int i;

#define ADD(s)                               \
	do {                                 \
		if (!(out[n++] = strdup(s))) \
			goto out_nomem;      \
	} while (0)
	if (!out)
		return NULL;
	ADD(crun_path);
	for (i = 1; i < command_index && i < argc; i++) {
		bool inline_value;
		const struct crun__launch_optdef *d =
			crun__launch_cli_lookup(argv[i], &inline_value);
		bool has_next = d && d->takes_value && !inline_value;

		if (!strcmp(argv[i], "--"))
			break;
		if (d && stripped(d->id)) {
			i += has_next;
			continue;
		}
		ADD(argv[i]);
		if (has_next && i + 1 < argc)
			ADD(argv[++i]);
	}
	snprintf(buf, sizeof(buf), "--nnodes=%zu", nnodes);
	ADD(buf);
	snprintf(buf, sizeof(buf), "--node-rank=%zu", rank);
	ADD(buf);
	snprintf(buf, sizeof(buf), "--nproc-per-node=%d", nslots);
	ADD(buf);
	if (endpoint) {
		snprintf(buf, sizeof(buf), "--rdzv-endpoint=%s", endpoint);
		ADD(buf);
	}
	if (run_id) {
		snprintf(buf, sizeof(buf), "--rdzv-id=%s", run_id);
		ADD(buf);
	}
	ADD("--");
	for (i = command_index; i < argc; i++) {
		if (n + 1 >= cap) {
			char **m = realloc(out, (cap * 2) * sizeof(*out));

			if (!m)
				goto out_nomem;
			memset(m + cap, 0, cap * sizeof(*m));
			out = m;
			cap *= 2;
		}
		ADD(argv[i]);
	}
#undef ADD
	return out;
out_nomem:
	crun__hostfile_argv_free(out);
	return NULL;
}

/* ---- the store's port ------------------------------------------------ */

int crun__hostfile_rdzv_port(const char *run_id)
{
	uint32_t h = crun__fnv1a32(CRUN__FNV1A32_INIT, run_id, strlen(run_id));

	return CRUN_HOSTFILE_PORT_MIN + (int)(h % CRUN_HOSTFILE_PORT_COUNT);
}

/* ---- the job's end --------------------------------------------------- */

int crun__remote_exit_status(const struct crun__remote_end *ends, size_t n, int signal)
{
	if (signal > 0)
		return 128 + signal;
	for (size_t i = 0; i < n; i++) {
		if (ends[i].term_signal)
			return 128 + ends[i].term_signal;
		if (ends[i].exit_status == 255)
			return 1;
		if (ends[i].exit_status)
			return ends[i].exit_status;
	}
	return 0;
}

enum crun__ssh_failure crun__ssh_failure_kind(const char *line)
{
	static const char *const unreachable[] = {
		"connect to host",	     "Could not resolve hostname", "Connection timed out",
		"No route to host",	     "Connection refused",	   "Network is unreachable",
		"Name or service not known",
	};

	if (strstr(line, "Host key verification failed") ||
	    strstr(line, "REMOTE HOST IDENTIFICATION HAS CHANGED") ||
	    strstr(line, "No ED25519 host key is known") || strstr(line, "host key is known"))
		return CRUN_SSH_HOST_KEY;
	if (strstr(line, "Permission denied") || strstr(line, "Too many authentication failures"))
		return CRUN_SSH_AUTH;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(unreachable); i++)
		if (strstr(line, unreachable[i]))
			return CRUN_SSH_UNREACHABLE;
	return CRUN_SSH_OTHER;
}
