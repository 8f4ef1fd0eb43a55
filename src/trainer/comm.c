/* The comm interface: options from the environment, backend selection
 * through an ops table, argument checks and the sticky failure state that
 * every backend shares. */
#include "trainer/comm.h"
#include "trainer/comm_backend.h"

#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct crun__comm_ops *const backends[] = {
	&crun__comm_cpu_ops,
#ifdef CRUN_HAVE_NCCL
	&crun__comm_nccl_ops,
#endif
};

void crun__comm_set_error(struct crun__comm *comm, const char *fmt, ...)
{
	va_list ap;

	if (comm->errmsg[0])
		return;
	va_start(ap, fmt);
	vsnprintf(comm->errmsg, sizeof(comm->errmsg), fmt, ap);
	va_end(ap);
}

static int env_int(const char *name, int64_t min, int64_t max, int64_t *out, bool *present,
		   char *err, size_t errlen)
{
	const char *v = getenv(name);
	char why[160];

	*present = v && *v;
	if (!*present)
		return 0;
	if (crun__parse_int64(v, min, max, out, why, sizeof(why)) < 0) {
		crun__seterr(err, errlen, "invalid %s '%s': %s", name, v, why);
		return -EINVAL;
	}
	return 0;
}

static int env_size(const char *name, uint64_t max, size_t *out, char *err, size_t errlen)
{
	const char *v = crun__env_get(name);
	char why[160];
	uint64_t n;

	if (!v)
		return 0;
	if (crun__parse_size(v, &n, why, sizeof(why)) < 0) {
		crun__seterr(err, errlen, "invalid %s '%s': %s", name, v, why);
		return -EINVAL;
	}
	if (n == 0 || n > max) {
		crun__seterr(err, errlen, "invalid %s '%s': expected 1 to %llu bytes", name, v,
			     (unsigned long long)max);
		return -EINVAL;
	}
	*out = (size_t)n;
	return 0;
}

/* The first address (IPv4 preferred, then IPv6) of the first interface
 * named in a comma-separated list ("eth0,ib0"), as gloo reads
 * GLOO_SOCKET_IFNAME. 0 or -ENODEV. */
static int addr_of_interfaces(const char *names, char *buf, size_t len)
{
	struct ifaddrs *ifa, *i;
	char name[IF_NAMESIZE + 1];
	int rc = -ENODEV;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	while (*names && rc < 0) {
		size_t n = strcspn(names, ",");

		if (n && n <= IF_NAMESIZE) {
			memcpy(name, names, n);
			name[n] = '\0';
			for (int fam = 0; fam < 2 && rc < 0; fam++) {
				for (i = ifa; i && rc < 0; i = i->ifa_next) {
					int want = fam ? AF_INET6 : AF_INET;
					const void *a;

					if (!i->ifa_addr || i->ifa_addr->sa_family != want ||
					    strcmp(i->ifa_name, name))
						continue;
					a = want == AF_INET
						    ? (const void *)&(
							      (struct sockaddr_in *)i->ifa_addr)
							      ->sin_addr
						    : (const void *)&(
							      (struct sockaddr_in6 *)i->ifa_addr)
							      ->sin6_addr;
					if (inet_ntop(want, a, buf, (socklen_t)len))
						rc = 0;
				}
			}
		}
		names += n;
		if (*names == ',')
			names++;
	}
	freeifaddrs(ifa);
	return rc;
}

int crun__comm_opts_from_env(struct crun__comm_opts *opts, char *err, size_t errlen)
{
	int64_t rank = 0, world = 1, local = 0, round = 0, timeout;
	bool has_rank, has_world, has_local, has_round;
	const char *v;
	char why[160];
	int rc;

	memset(opts, 0, sizeof(*opts));
	if ((rc = env_int("WORLD_SIZE", 1, 1 << 20, &world, &has_world, err, errlen)) < 0)
		return rc;
	if ((rc = env_int("RANK", 0, (1 << 20) - 1, &rank, &has_rank, err, errlen)) < 0)
		return rc;
	if ((rc = env_int("LOCAL_RANK", 0, (1 << 20) - 1, &local, &has_local, err, errlen)) < 0)
		return rc;
	if ((rc = env_int("CRUN_ROUND", 0, INT64_MAX, &round, &has_round, err, errlen)) < 0)
		return rc;
	if (has_rank != has_world) {
		crun__seterr(err, errlen, "%s is set but %s is not: set both or neither",
			     has_rank ? "RANK" : "WORLD_SIZE", has_rank ? "WORLD_SIZE" : "RANK");
		return -EINVAL;
	}
	if (rank >= world) {
		crun__seterr(err, errlen, "invalid RANK '%lld': must be below WORLD_SIZE %lld",
			     (long long)rank, (long long)world);
		return -EINVAL;
	}
	opts->rank = (int)rank;
	opts->world_size = (int)world;
	opts->local_rank = has_local ? (int)local : (int)rank;
	opts->round = round;

	opts->backend = crun__env_get("CRUN_COMM_BACKEND");
	v = crun__env_get("CRUN_COMM_TIMEOUT");
	if (v) {
		if (crun__parse_duration_ms(v, &timeout, why, sizeof(why)) < 0) {
			crun__seterr(err, errlen, "invalid CRUN_COMM_TIMEOUT '%s': %s", v, why);
			return -EINVAL;
		}
		if (timeout <= 0) {
			crun__seterr(err, errlen, "invalid CRUN_COMM_TIMEOUT '%s': must be above 0",
				     v);
			return -EINVAL;
		}
		opts->timeout_ms = timeout;
	}
	if ((rc = env_size("CRUN_COMM_CHUNK", 1ull << 30, &opts->chunk_bytes, err, errlen)) < 0)
		return rc;
	if ((rc = env_size("CRUN_COMM_SOCKBUF", 1ull << 30, &opts->sockbuf_bytes, err, errlen)) < 0)
		return rc;
	opts->addr = crun__env_get("CRUN_COMM_ADDR");
	if (!opts->addr) {
		const char *var = "CRUN_COMM_IFNAME";

		v = crun__env_get(var);
		if (!v) {
			var = "GLOO_SOCKET_IFNAME";
			v = getenv(var);
		}
		if (v && *v) {
			rc = addr_of_interfaces(v, opts->addr_storage, sizeof(opts->addr_storage));
			if (rc < 0) {
				crun__seterr(
					err, errlen,
					"invalid %s '%s': no such interface with an IPv4 or IPv6 "
					"address",
					var, v);
				return -EINVAL;
			}
			opts->addr = opts->addr_storage;
		}
	}
	v = crun__env_get("CRUN_COMM_SHM");
	if (v && strcmp(v, "0") && strcmp(v, "1")) {
		crun__seterr(err, errlen, "invalid CRUN_COMM_SHM '%s': expected 0 or 1", v);
		return -EINVAL;
	}
	opts->no_shm = v && !strcmp(v, "0");
	v = crun__env_get("CRUN_COMM_SEND_THREAD");
	if (v && strcmp(v, "0") && strcmp(v, "1")) {
		crun__seterr(err, errlen, "invalid CRUN_COMM_SEND_THREAD '%s': expected 0 or 1", v);
		return -EINVAL;
	}
	opts->send_thread = v && !strcmp(v, "1");
	return 0;
}

static const struct crun__comm_ops *find_backend(const char *name)
{
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(backends); i++)
		if (!strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

struct crun__comm *crun__comm_create(const struct crun__comm_opts *opts, char *err, size_t errlen)
{
	const char *name = opts->backend && *opts->backend ? opts->backend : "cpu";
	const struct crun__comm_ops *ops = find_backend(name);
	struct crun__comm *comm;

	if (!ops) {
#ifdef CRUN_HAVE_NCCL
		crun__seterr(err, errlen, "unknown comm backend '%s': expected cpu or nccl", name);
#else
		crun__seterr(err, errlen, "unknown comm backend '%s': expected cpu", name);
#endif
		return NULL;
	}
	if (opts->world_size < 1 || opts->rank < 0 || opts->rank >= opts->world_size) {
		crun__seterr(err, errlen, "invalid rank %d for world size %d", opts->rank,
			     opts->world_size);
		return NULL;
	}
	if (opts->timeout_ms < 0) {
		crun__seterr(err, errlen, "invalid comm timeout %lld ms",
			     (long long)opts->timeout_ms);
		return NULL;
	}
	comm = calloc(1, sizeof(*comm));
	if (!comm) {
		crun__seterr(err, errlen, "cannot allocate the communicator: %s", strerror(ENOMEM));
		return NULL;
	}
	comm->ops = ops;
	comm->rank = opts->rank;
	comm->size = opts->world_size;
	if (ops->init(comm, opts) < 0) {
		crun__seterr(err, errlen, "%s",
			     comm->errmsg[0] ? comm->errmsg : "comm setup failed");
		free(comm);
		return NULL;
	}
	return comm;
}

void crun__comm_destroy(struct crun__comm *comm)
{
	if (!comm)
		return;
	comm->ops->finish(comm);
	free(comm);
}

int crun__comm_rank(const struct crun__comm *comm)
{
	return comm->rank;
}

int crun__comm_size(const struct crun__comm *comm)
{
	return comm->size;
}

const char *crun__comm_errmsg(const struct crun__comm *comm)
{
	return comm->errmsg;
}

const char *crun__comm_backend(const struct crun__comm *comm)
{
	return comm->ops->name;
}

uint64_t crun__comm_wait_ns(const struct crun__comm *comm)
{
	return comm->ops->counts_blocked ? comm->blocked_ns : comm->inside_ns;
}

/* Stands in for NULL buffers of empty collectives, so that backends
 * never do arithmetic on a null pointer. */
static double empty[1];

/* Common entry of every collective: refuses calls on a failed
 * communicator and bad arguments (which are the caller's bug, and do not
 * poison the communicator since no byte has moved). */
static int enter(struct crun__comm *comm, const char *what, bool bad_args)
{
	if (comm->failed)
		return -ENOTCONN;
	if (bad_args) {
		/* Not sticky: the group is still in step. */
		snprintf(comm->errmsg, sizeof(comm->errmsg), "invalid arguments to %s", what);
		return -EINVAL;
	}
	comm->errmsg[0] = '\0';
	comm->entered_ns = crun__now_ns();
	return 0;
}

/* Common exit of every collective that enter() let in. */
static int leave(struct crun__comm *comm, int rc)
{
	comm->inside_ns += crun__now_ns() - comm->entered_ns;
	if (rc < 0) {
		comm->failed = true;
		if (!comm->errmsg[0])
			crun__comm_set_error(comm, "collective failed: %s", strerror(-rc));
	}
	return rc;
}

int crun__comm_allreduce_f32(struct crun__comm *comm, float *buf, size_t count)
{
	int rc = enter(comm, "all-reduce", count && (!buf || count > SIZE_MAX / sizeof(float)));

	if (rc < 0)
		return rc;
	return leave(comm, comm->ops->allreduce_f32(comm, buf ? buf : (float *)empty, count));
}

int crun__comm_reduce_scatter_f32(struct crun__comm *comm, float *in, float *out, size_t count)
{
	int rc = enter(comm, "reduce-scatter",
		       count && (!in || !out || count > SIZE_MAX / sizeof(float) / comm->size));

	if (rc < 0)
		return rc;
	return leave(comm, comm->ops->reduce_scatter_f32(comm, in ? in : (float *)empty,
							 out ? out : (float *)empty, count));
}

int crun__comm_allgather_f32(struct crun__comm *comm, const float *in, float *out, size_t count)
{
	int rc = enter(comm, "all-gather",
		       count && (!in || !out || count > SIZE_MAX / sizeof(float) / comm->size));

	if (rc < 0)
		return rc;
	return leave(comm, comm->ops->allgather_f32(comm, in ? in : (float *)empty,
						    out ? out : (float *)empty, count));
}

int crun__comm_broadcast(struct crun__comm *comm, void *buf, size_t bytes, int root)
{
	int rc = enter(comm, "broadcast", (bytes && !buf) || root < 0 || root >= comm->size);

	if (rc < 0)
		return rc;
	return leave(comm, comm->ops->broadcast(comm, buf ? buf : (void *)empty, bytes, root));
}

int crun__comm_barrier(struct crun__comm *comm)
{
	int rc = enter(comm, "barrier", false);

	return rc < 0 ? rc : leave(comm, comm->ops->barrier(comm));
}

int crun__comm_allreduce_f64(struct crun__comm *comm, double *buf, size_t count)
{
	int rc = enter(comm, "all-reduce (f64)",
		       count && (!buf || count > SIZE_MAX / sizeof(double) / comm->size));

	if (rc < 0)
		return rc;
	return leave(comm, comm->ops->allreduce_f64(comm, buf ? buf : empty, count));
}
