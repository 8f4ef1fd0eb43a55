#include "common/util.h"

#include <arpa/inet.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void crun__seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int crun__free_port(void)
{
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
	struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = INADDR_ANY};
	struct sockaddr_storage got;
	socklen_t len = sizeof(got);
	int fd, off = 0, port, rc;

	fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
		if (bind(fd, (struct sockaddr *)&a6, sizeof(a6)) < 0) {
			close(fd);
			fd = -1;
		}
	}
	if (fd < 0) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) < 0) {
			rc = -errno;
			close(fd);
			return rc;
		}
	}
	if (getsockname(fd, (struct sockaddr *)&got, &len) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
					       : ((struct sockaddr_in *)&got)->sin_port);
	close(fd);
	return port;
}

uint64_t crun__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t crun__now_ms(void)
{
	return crun__now_ns() / 1000000ull;
}

uint64_t crun__wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

int crun__parse_int64(const char *s, int64_t min, int64_t max, int64_t *out, char *err,
		      size_t errlen)
{
	char *end;
	long long v;

	if (!s || !*s || isspace((unsigned char)*s)) {
		crun__seterr(err, errlen, "expected a whole number");
		return -EINVAL;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno == ERANGE || *end) {
		crun__seterr(err, errlen, "expected a whole number, got '%s'", s);
		return -EINVAL;
	}
	if (v < min || v > max) {
		crun__seterr(err, errlen, "%lld is out of range [%lld, %lld]", v, (long long)min,
			     (long long)max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int crun__parse_duration_ms(const char *s, int64_t *out_ms, char *err, size_t errlen)
{
	const char *q;
	char *end;
	double v, mult = 1000.0;
	int digits = 0;

	if (!s)
		goto bad;
	/* Plain decimals only: strtod would also take "inf", "nan", hex and
	 * exponents, none of which a person means as a timeout. A second dot
	 * ends strtod's number early and fails the end check below. */
	for (q = s; isdigit((unsigned char)*q) || *q == '.'; q++)
		digits += *q != '.';
	if (!digits)
		goto bad;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end != q || !isfinite(v))
		goto bad;
	if (!strcmp(end, "") || !strcmp(end, "s"))
		mult = 1000.0;
	else if (!strcmp(end, "ms"))
		mult = 1.0;
	else if (!strcmp(end, "m") || !strcmp(end, "min"))
		mult = 60000.0;
	else if (!strcmp(end, "h"))
		mult = 3600000.0;
	else
		goto bad;
	v *= mult;
	if (v < 0 || v > 9.0e15)
		goto bad;
	*out_ms = (int64_t)(v + 0.5);
	return 0;
bad:
	crun__seterr(err, errlen, "expected a duration like 30, 2.5s, 500ms or 1m, got '%s'",
		     s ? s : "");
	return -EINVAL;
}

int crun__parse_size(const char *s, uint64_t *out, char *err, size_t errlen)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!s || !*s || !isdigit((unsigned char)*s))
		goto bad;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		goto bad;
	if (!*end || !strcmp(end, "B"))
		mult = 1;
	else if (!strcmp(end, "K") || !strcmp(end, "KiB") || !strcmp(end, "k"))
		mult = 1ull << 10;
	else if (!strcmp(end, "M") || !strcmp(end, "MiB"))
		mult = 1ull << 20;
	else if (!strcmp(end, "G") || !strcmp(end, "GiB"))
		mult = 1ull << 30;
	else
		goto bad;
	if (v > UINT64_MAX / mult)
		goto bad;
	*out = v * mult;
	return 0;
bad:
	crun__seterr(err, errlen, "expected a size like 4096, 64KiB or 16MiB, got '%s'",
		     s ? s : "");
	return -EINVAL;
}

int crun__parse_endpoint(const char *s, int default_port, char *hostbuf, size_t hostlen, int *port,
			 char *err, size_t errlen)
{
	const char *host = s, *colon = NULL;
	size_t hlen;
	int64_t p;

	if (!s || !*s) {
		crun__seterr(err, errlen, "empty endpoint, expected HOST:PORT");
		return -EINVAL;
	}
	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (!close || close == s + 1) {
			crun__seterr(err, errlen, "bad endpoint '%s', expected [ADDR]:PORT", s);
			return -EINVAL;
		}
		host = s + 1;
		hlen = (size_t)(close - host);
		if (close[1] == ':')
			colon = close + 1;
		else if (close[1]) {
			crun__seterr(err, errlen, "bad endpoint '%s', expected [ADDR]:PORT", s);
			return -EINVAL;
		}
	} else {
		colon = strrchr(s, ':');
		if (colon && strchr(s, ':') != colon) {
			/* A bare IPv6 address without brackets: no port. */
			colon = NULL;
		}
		hlen = colon ? (size_t)(colon - s) : strlen(s);
	}
	if (hlen == 0 || hlen >= hostlen || memchr(host, '[', hlen) || memchr(host, ']', hlen)) {
		crun__seterr(err, errlen, "bad host in endpoint '%s'", s);
		return -EINVAL;
	}
	memcpy(hostbuf, host, hlen);
	hostbuf[hlen] = '\0';
	if (colon) {
		if (!isdigit((unsigned char)colon[1]) ||
		    crun__parse_int64(colon + 1, 0, 65535, &p, NULL, 0) < 0) {
			crun__seterr(err, errlen, "bad port in endpoint '%s', expected 0-65535", s);
			return -EINVAL;
		}
		*port = (int)p;
	} else {
		*port = default_port;
	}
	return 0;
}

/* Reads the secret of fd (opened from path; closed here). */
static int read_secret_fd(int fd, const char *path, size_t maxlen, char **out, size_t *outlen,
			  char *err, size_t errlen)
{
	int rc = 0;
	char *buf;
	size_t len = 0;

	buf = malloc(maxlen + 2);
	if (!buf) {
		rc = -ENOMEM;
		crun__seterr(err, errlen, "out of memory");
		goto out_close_fd;
	}
	for (;;) {
		ssize_t r = read(fd, buf + len, maxlen + 1 - len);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			crun__seterr(err, errlen, "cannot read '%s': %s", path, strerror(errno));
			goto out_free_buf;
		}
		if (r == 0)
			break;
		len += (size_t)r;
		if (len > maxlen) {
			rc = -EFBIG;
			crun__seterr(err, errlen, "'%s' is longer than %zu bytes", path, maxlen);
			goto out_free_buf;
		}
	}
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		len--;
	if (!len) {
		rc = -EINVAL;
		crun__seterr(err, errlen, "'%s' is empty", path);
		goto out_free_buf;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	close(fd);
	return 0;
out_free_buf:
	explicit_bzero(buf, maxlen + 2);
	free(buf);
out_close_fd:
	close(fd);
	return rc;
}

int crun__read_secret_file(const char *path, size_t maxlen, char **out, size_t *outlen, char *err,
			   size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		int rc = -errno;

		crun__seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno));
		return rc;
	}
	return read_secret_fd(fd, path, maxlen, out, outlen, err, errlen);
}

int crun__read_own_secret_file(const char *path, size_t maxlen, char **out, size_t *outlen,
			       char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;

	if (fd < 0) {
		int rc = -errno;

		crun__seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		crun__seterr(err, errlen, "'%s' is not a file of this user's: not trusted", path);
		close(fd);
		return -EPERM;
	}
	return read_secret_fd(fd, path, maxlen, out, outlen, err, errlen);
}

bool crun__addr_is_literal(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

bool crun__addr_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!host)
		return false;
	if (!strcmp(host, "localhost"))
		return true;
	/* Parsed, not compared as text: "127.example.com" is a host name
	 * that can resolve anywhere, and "::ffff:127.0.0.1" is loopback. */
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1) {
		if (IN6_IS_ADDR_LOOPBACK(&a6))
			return true;
		return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
	}
	return false;
}

void crun__format_endpoint(char *out, size_t outlen, const char *host, int port)
{
	snprintf(out, outlen, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

void crun__format_addr(const struct sockaddr *sa, char *out, size_t outlen, char *ip)
{
	char buf[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;

		if (!inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof(buf)))
			snprintf(buf, sizeof(buf), "?");
		snprintf(out, outlen, "[%s]:%u", buf, ntohs(s6->sin6_port));
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)sa;

		if (!inet_ntop(AF_INET, &s4->sin_addr, buf, sizeof(buf)))
			snprintf(buf, sizeof(buf), "?");
		snprintf(out, outlen, "%s:%u", buf, ntohs(s4->sin_port));
	} else {
		snprintf(out, outlen, "unknown");
	}
	if (ip)
		memcpy(ip, buf, sizeof(buf));
}

int crun__write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int crun__shell_quote(char *out, size_t outlen, size_t *used, const char *s)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
				   "-_=./:,@+%";
	size_t u = *used;

	if (*s && strspn(s, safe) == strlen(s)) {
		if (u + strlen(s) + 1 > outlen)
			return -ENOSPC;
		memcpy(out + u, s, strlen(s) + 1);
		*used = u + strlen(s);
		return 0;
	}
#define PUT(c)                          \
	do {                            \
		if (u + 1 >= outlen)    \
			return -ENOSPC; \
		out[u++] = (c);         \
	} while (0)
	PUT('\'');
	for (const char *p = s; *p; p++) {
		if (*p == '\'') {
			PUT('\'');
			PUT('\\');
			PUT('\'');
		}
		PUT(*p);
	}
	PUT('\'');
#undef PUT
	out[u] = '\0';
	*used = u;
	return 0;
}

void crun__format_bytes(uint64_t b, char *buf, size_t len)
{
	if (b >= (UINT64_C(1) << 30))
		snprintf(buf, len, "%.2f GiB", (double)b / (double)(UINT64_C(1) << 30));
	else if (b >= (UINT64_C(1) << 20))
		snprintf(buf, len, "%.2f MiB", (double)b / (double)(UINT64_C(1) << 20));
	else
		snprintf(buf, len, "%.1f KiB", (double)b / 1024);
}
