/* Small helpers every crun binary shares: clocks, parsing of numbers, sizes,
 * durations and endpoints, and reading secrets from files.
 *
 * Parsers return 0 on success or -EINVAL and, where they take one, write a
 * one-line reason into the caller's buffer ("expected a number of seconds
 * like 30, 2.5s, 500ms or 1m", never a full stop, never a newline). */
#ifndef CRUN_COMMON_UTIL_H
#define CRUN_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRUN_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Writes a one-line reason into the caller's error buffer (printf
 * format). err may be NULL or errlen 0: then nothing is written. */
void crun__seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A TCP port that is free right now on the wildcard address of both
 * families (so on every address a worker may bind), found by binding port
 * 0 and closing. Returns the port or a negative errno. */
int crun__free_port(void);

/* Monotonic clock in milliseconds / nanoseconds. */
uint64_t crun__now_ms(void);
uint64_t crun__now_ns(void);
/* Wall clock in milliseconds since the epoch (for reports, never timeouts). */
uint64_t crun__wall_ms(void);

/* Whole decimal integer in [min, max]; no sign for unsigned use, no junk. */
int crun__parse_int64(const char *s, int64_t min, int64_t max, int64_t *out, char *err,
		      size_t errlen);

/* Duration: "30" (seconds), "2.5s", "500ms", "1m", "1h"; result in ms.
 * Negative values are refused. */
int crun__parse_duration_ms(const char *s, int64_t *out_ms, char *err, size_t errlen);

/* Size: "4096", "64K", "64KiB", "16M", "16MiB", "1G" (binary multiples). */
int crun__parse_size(const char *s, uint64_t *out, char *err, size_t errlen);

/* Endpoint "host:port", "[v6addr]:port" or "host" (then *port is set to
 * default_port). host is written to hostbuf without brackets. */
int crun__parse_endpoint(const char *s, int default_port, char *hostbuf, size_t hostlen, int *port,
			 char *err, size_t errlen);

/* Reads a secret from path: at most maxlen bytes, trailing newlines and
 * spaces stripped. *out is malloc'd and NUL-terminated; the caller frees it
 * (after wiping it). Returns 0 or a negative errno with a reason in err. */
int crun__read_secret_file(const char *path, size_t maxlen, char **out, size_t *outlen, char *err,
			   size_t errlen);
/* The same for a file named by someone who may not be this user (a job
 * file): a regular file, not a symbolic link, owned by this user (-EPERM
 * otherwise); opening does not block (a FIFO). */
int crun__read_own_secret_file(const char *path, size_t maxlen, char **out, size_t *outlen,
			       char *err, size_t errlen);

/* True when the textual address is a loopback address (127.0.0.0/8, ::1,
 * "localhost"). */
bool crun__addr_is_loopback(const char *host);

/* True when host is an IPv4 or IPv6 address literal, not a name. */
bool crun__addr_is_literal(const char *host);

struct sockaddr;
/* A socket address as "1.2.3.4:5678" or "[::1]:5678" ("unknown" for other
 * families) into out; the bare address ("?" when none) into ip, which
 * holds INET6_ADDRSTRLEN bytes, unless ip is NULL. */
void crun__format_addr(const struct sockaddr *sa, char *out, size_t outlen, char *ip);
/* host and port as "host:port", or "[host]:port" when host is an IPv6
 * address (has a ':'), into out. */
void crun__format_endpoint(char *out, size_t outlen, const char *host, int port);

/* Appends s to out (size outlen, NUL-terminated, used bytes *used) as one
 * POSIX shell word: as it is when it holds only letters, digits and
 * -_=./:,@+%, else in single quotes. -ENOSPC when it does not fit. */
int crun__shell_quote(char *out, size_t outlen, size_t *used, const char *s);

/* write(2)/read(2) of everything, retrying on EINTR. 0 or negative errno. */
int crun__write_all(int fd, const void *buf, size_t len);

/* b as "12.50 MiB": KiB, MiB or GiB with two decimals (one for KiB). */
void crun__format_bytes(uint64_t b, char *buf, size_t len);

/* Environment tunables: declared once, in one table (common/env.c), and
 * listed in the man pages' ENVIRONMENT sections. */
struct crun__env_param {
	const char *name;
	const char *default_value; /* NULL: unset by default */
	const char *meaning;
};
const struct crun__env_param *crun__env_params(size_t *count);
/* getenv() for a declared tunable, falling back to its default. */
const char *crun__env_get(const char *name);

#endif
