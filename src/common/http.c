/* HTTP/1.1 request heads and reply heads (RFC 9110, RFC 9112), for the
 * metrics endpoint: strict where a lax reading could be exploited
 * (whitespace before a field's colon, a body), lenient where RFC 9112
 * allows it (bare LF, empty lines before the request). */
#include "common/http.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* RFC 9110's tchar: the characters of a token (a method, a field name). */
static bool is_tchar(char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* One line of buf[off..len): its end (the LF) in *eol and its length
 * without the CR LF in *n. False when no LF is in yet. */
static bool next_line(const char *buf, size_t len, size_t off, size_t *eol, size_t *n)
{
	const char *lf = memchr(buf + off, '\n', len - off);

	if (!lf)
		return false;
	*eol = (size_t)(lf - buf);
	*n = *eol - off;
	if (*n && buf[off + *n - 1] == '\r')
		(*n)--;
	return true;
}

/* A field value's tokens, comma-separated, against Connection's options. */
static void connection_options(const char *v, size_t n, bool *close, bool *keep)
{
	size_t i = 0;

	while (i < n) {
		size_t s, e;

		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		s = i;
		while (i < n && v[i] != ',')
			i++;
		e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == 5 && !strncasecmp(v + s, "close", 5))
			*close = true;
		else if (e - s == 10 && !strncasecmp(v + s, "keep-alive", 10))
			*keep = true;
	}
}

static int parse_request_line(const char *l, size_t n, struct crun__http_request *req)
{
	size_t m = 0, t, tn;
	const char *v;

	while (m < n && is_tchar(l[m]))
		m++;
	if (m == 0 || m == n || l[m] != ' ')
		return -400;
	if (m == 3 && !memcmp(l, "GET", 3))
		req->method = CRUN_HTTP_GET;
	else if (m == 4 && !memcmp(l, "HEAD", 4))
		req->method = CRUN_HTTP_HEAD;
	else
		req->method = CRUN_HTTP_OTHER;
	t = m + 1;
	tn = 0;
	while (t + tn < n && l[t + tn] != ' ') {
		unsigned char c = (unsigned char)l[t + tn];

		if (c <= 0x20 || c == 0x7f)
			return -400;
		tn++;
	}
	if (tn == 0 || t + tn == n)
		return -400;
	if (l[t] != '/' && !(tn == 1 && l[t] == '*'))
		return -400; /* crun serves origin-form targets only */
	/* "HTTP/x.y" after one space, and nothing after it. */
	v = l + t + tn + 1;
	if (n - (t + tn + 1) != 8 || memcmp(v, "HTTP/", 5) || v[6] != '.' || v[5] < '0' ||
	    v[5] > '9' || v[7] < '0' || v[7] > '9')
		return -400;
	if (v[5] != '1' || v[7] > '1')
		return -505;
	req->minor = v[7] - '0';
	{
		const char *q = memchr(l + t, '?', tn);
		size_t pn = q ? (size_t)(q - (l + t)) : tn;

		if (pn >= sizeof(req->path))
			return -414;
		memcpy(req->path, l + t, pn);
		req->path[pn] = '\0';
	}
	return 0;
}

int crun__http_parse(const char *buf, size_t len, struct crun__http_request *req)
{
	size_t off = 0, eol, n, nfields = 0;
	bool close = false, keep = false, host = false;
	int rc;

	memset(req, 0, sizeof(*req));
	/* RFC 9112 2.2: empty lines before the request line are ignored. */
	while (off < len && (buf[off] == '\r' || buf[off] == '\n'))
		off++;
	if (off >= CRUN_HTTP_MAX_HEAD)
		return -400;
	if (!next_line(buf, len, off, &eol, &n))
		return len >= CRUN_HTTP_MAX_HEAD ? -431 : 0;
	if (eol >= CRUN_HTTP_MAX_HEAD)
		return -431;
	rc = parse_request_line(buf + off, n, req);
	if (rc < 0)
		return rc;
	for (off = eol + 1;; off = eol + 1) {
		const char *f = buf + off, *v;
		size_t name, vn;

		if (!next_line(buf, len, off, &eol, &n))
			return len >= CRUN_HTTP_MAX_HEAD ? -431 : 0;
		if (eol >= CRUN_HTTP_MAX_HEAD)
			return -431;
		if (n == 0)
			break;
		if (++nfields > CRUN_HTTP_MAX_FIELDS)
			return -431;
		name = 0;
		while (name < n && is_tchar(f[name]))
			name++;
		/* No whitespace between a name and its colon (RFC 9112
		 * 5.1), no obsolete line folding (a line starting with
		 * whitespace). */
		if (name == 0 || name == n || f[name] != ':')
			return -400;
		v = f + name + 1;
		vn = n - name - 1;
		while (vn && (*v == ' ' || *v == '\t'))
			v++, vn--;
		while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
			vn--;
		for (size_t i = 0; i < vn; i++)
			if (((unsigned char)v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
				return -400;
		if (name == 4 && !strncasecmp(f, "Host", 4)) {
			if (host)
				return -400; /* RFC 9112 3.2: exactly one */
			host = true;
		} else if (name == 10 && !strncasecmp(f, "Connection", 10)) {
			connection_options(v, vn, &close, &keep);
		} else if (name == 14 && !strncasecmp(f, "Content-Length", 14)) {
			for (size_t i = 0; i < vn; i++)
				if (v[i] < '0' || v[i] > '9')
					return -400;
			if (vn == 0)
				return -400;
			for (size_t i = 0; i < vn; i++)
				if (v[i] != '0')
					return -413;
		} else if (name == 17 && !strncasecmp(f, "Transfer-Encoding", 17)) {
			return -413;
		}
	}
	if (req->minor == 1 && !host)
		return -400;
	req->keep_alive = req->minor == 1 ? !close : keep && !close;
	return (int)(eol + 1);
}

void crun__http_route(int parsed, const struct crun__http_request *req, const char *path,
		      struct crun__http_reply *reply)
{
	memset(reply, 0, sizeof(*reply));
	reply->close = true;
	if (parsed <= 0) {
		reply->status = parsed < 0 ? -parsed : 400;
		reply->body = crun__http_reason(reply->status);
		return;
	}
	if (req->method == CRUN_HTTP_OTHER) {
		reply->status = 405;
		reply->body = "Method Not Allowed";
		return;
	}
	reply->head_only = req->method == CRUN_HTTP_HEAD;
	reply->close = !req->keep_alive;
	reply->keep_alive = req->keep_alive && req->minor == 0;
	if (strcmp(req->path, path)) {
		reply->status = 404;
		reply->body = "Not Found";
		return;
	}
	reply->status = 200;
	reply->metrics = true;
}

const char *crun__http_reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 503:
		return "Service Unavailable";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Unknown";
	}
}

int crun__http_head(char *buf, size_t cap, const struct crun__http_reply *reply,
		    const char *content_type, size_t body_len)
{
	int n = snprintf(buf, cap,
			 "HTTP/1.1 %d %s\r\n"
			 "Content-Type: %s\r\n"
			 "Content-Length: %zu\r\n"
			 "%s%s"
			 "\r\n",
			 reply->status, crun__http_reason(reply->status), content_type, body_len,
			 reply->status == 405 ? "Allow: GET, HEAD\r\n" : "",
			 reply->close	     ? "Connection: close\r\n"
			 : reply->keep_alive ? "Connection: keep-alive\r\n"
					     : "");

	if (n < 0 || (size_t)n >= cap)
		return -ENOSPC;
	return n;
}
