/* A small JSON reader and writer, enough for the error files of PyTorch's
 * @record. The reader never trusts its input: nesting is bounded, every
 * escape is checked, and any defect gives NULL with a reason (the summary
 * then shows "<N/A>"). */
#include "agent/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
	const char *s;
	size_t len;
	size_t pos;
	char *err;
	size_t errlen;
	bool failed;
};

static void fail(struct parser *p, const char *what)
{
	size_t line = 1, col = 1;

	if (p->failed)
		return;
	p->failed = true;
	for (size_t i = 0; i < p->pos && i < p->len; i++) {
		if (p->s[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	if (p->err && p->errlen)
		snprintf(p->err, p->errlen, "line %zu column %zu: %s", line, col, what);
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

void agent_json_free(struct json *v)
{
	while (v) {
		struct json *next = v->next;
		agent_json_free(v->child);
		free(v->str);
		free(v->key);
		free(v);
		v = next;
	}
}

struct json *agent_json_new(enum json_type type)
{
	struct json *v = calloc(1, sizeof(*v));

	if (v)
		v->type = type;
	return v;
}

struct json *agent_json_new_string(const char *s, size_t len)
{
	struct json *v = agent_json_new(JSON_STRING);

	if (!v)
		return NULL;
	v->str = malloc(len + 1);
	if (!v->str) {
		free(v);
		return NULL;
	}
	memcpy(v->str, s, len);
	v->str[len] = '\0';
	v->len = len;
	return v;
}

struct json *agent_json_new_number(long long n)
{
	char text[32];
	struct json *v;
	int len = snprintf(text, sizeof(text), "%lld", n);

	v = agent_json_new_string(text, (size_t)len);
	if (v)
		v->type = JSON_NUMBER;
	return v;
}

struct json *agent_json_get(const struct json *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	for (struct json *m = obj->child; m; m = m->next)
		if (m->key && !strcmp(m->key, key))
			return m;
	return NULL;
}

int agent_json_set(struct json *obj, const char *key, struct json *val)
{
	struct json **link = &obj->child;

	val->key = strdup(key);
	if (!val->key) {
		agent_json_free(val);
		return -ENOMEM;
	}
	for (; *link; link = &(*link)->next) {
		if ((*link)->key && !strcmp((*link)->key, key)) {
			val->next = (*link)->next;
			(*link)->next = NULL;
			agent_json_free(*link);
			*link = val;
			return 0;
		}
	}
	*link = val;
	return 0;
}

/* Growable byte buffer for strings being parsed and documents being
 * written; oom sticks. */
struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		char *np;
		while (cap < b->len + n + 1)
			cap *= 2;
		np = realloc(b->p, cap);
		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_addc(struct sbuf *b, char c)
{
	sb_add(b, &c, 1);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool read_hex4(struct parser *p, unsigned *out)
{
	unsigned v = 0;

	if (p->len - p->pos < 4) {
		fail(p, "truncated \\u escape");
		return false;
	}
	for (int i = 0; i < 4; i++) {
		int h = hexval(p->s[p->pos + (size_t)i]);
		if (h < 0) {
			fail(p, "bad \\u escape");
			return false;
		}
		v = v * 16 + (unsigned)h;
	}
	p->pos += 4;
	*out = v;
	return true;
}

static void add_utf8(struct sbuf *b, unsigned cp)
{
	char u[4];

	if (cp < 0x80) {
		sb_addc(b, (char)cp);
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		sb_add(b, u, 2);
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		sb_add(b, u, 3);
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		sb_add(b, u, 4);
	}
}

/* After "\\u": one code point, or a surrogate pair; a lone half becomes
 * U+FFFD, as Python would print it. */
static bool parse_u_escape(struct parser *p, struct sbuf *b)
{
	unsigned cp, lo;

	if (!read_hex4(p, &cp))
		return false;
	if (cp >= 0xd800 && cp < 0xdc00) {
		if (p->len - p->pos >= 6 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
			p->pos += 2;
			if (!read_hex4(p, &lo))
				return false;
			if (lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else {
				add_utf8(b, 0xfffd);
				cp = lo;
			}
		} else {
			cp = 0xfffd;
		}
	} else if (cp >= 0xdc00 && cp < 0xe000) {
		cp = 0xfffd;
	}
	add_utf8(b, cp);
	return true;
}

/* At the opening quote. Returns the string's bytes (malloc'd) or NULL. */
static char *parse_string(struct parser *p, size_t *outlen)
{
	static const char escapes[] = "\"\\/bfnrt";
	static const char unescaped[] = "\"\\/\b\f\n\r\t";
	struct sbuf b = {0};
	const char *esc;

	p->pos++; /* the quote */
	for (;;) {
		char c;

		if (p->pos >= p->len) {
			fail(p, "unterminated string");
			goto out_free;
		}
		c = p->s[p->pos++];
		if (c == '"')
			break;
		if ((unsigned char)c < 0x20) {
			fail(p, "control character in string");
			goto out_free;
		}
		if (c != '\\') {
			sb_addc(&b, c);
			continue;
		}
		if (p->pos >= p->len) {
			fail(p, "unterminated escape");
			goto out_free;
		}
		c = p->s[p->pos++];
		if (c == 'u') {
			if (!parse_u_escape(p, &b))
				goto out_free;
		} else if (c && (esc = strchr(escapes, c))) {
			sb_addc(&b, unescaped[esc - escapes]);
		} else {
			fail(p, "unknown escape in string");
			goto out_free;
		}
	}
	if (b.oom) {
		fail(p, "out of memory");
		goto out_free;
	}
	if (!b.p) {
		b.p = strdup("");
		if (!b.p) {
			fail(p, "out of memory");
			return NULL;
		}
	}
	*outlen = b.len;
	return b.p;
out_free:
	free(b.p);
	return NULL;
}

static struct json *parse_value(struct parser *p, int depth);

static struct json *parse_container(struct parser *p, int depth, bool object)
{
	struct json *v = agent_json_new(object ? JSON_OBJECT : JSON_ARRAY);
	struct json **tail;
	char close = object ? '}' : ']';

	if (!v) {
		fail(p, "out of memory");
		return NULL;
	}
	tail = &v->child;
	p->pos++; /* the bracket */
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		return v;
	}
	for (;;) {
		char *key = NULL;
		size_t keylen;
		struct json *m;

		skip_ws(p);
		if (object) {
			if (p->pos >= p->len || p->s[p->pos] != '"') {
				fail(p, "expected a string key");
				goto out_free;
			}
			key = parse_string(p, &keylen);
			if (!key)
				goto out_free;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':') {
				free(key);
				fail(p, "expected ':' after key");
				goto out_free;
			}
			p->pos++;
		}
		m = parse_value(p, depth + 1);
		if (!m) {
			free(key);
			goto out_free;
		}
		m->key = key;
		*tail = m;
		tail = &m->next;
		skip_ws(p);
		if (p->pos < p->len && p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->pos < p->len && p->s[p->pos] == close) {
			p->pos++;
			return v;
		}
		fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
		goto out_free;
	}
out_free:
	agent_json_free(v);
	return NULL;
}

static struct json *parse_number(struct parser *p)
{
	size_t start = p->pos;
	bool digits = false;

	if (p->pos < p->len && p->s[p->pos] == '-')
		p->pos++;
	if (p->pos < p->len && p->s[p->pos] == '0') {
		p->pos++;
		digits = true;
	} else {
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
			p->pos++;
			digits = true;
		}
	}
	if (!digits) {
		fail(p, "bad number");
		return NULL;
	}
	if (p->pos < p->len && p->s[p->pos] == '.') {
		p->pos++;
		digits = false;
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
			p->pos++;
			digits = true;
		}
		if (!digits) {
			fail(p, "bad fraction");
			return NULL;
		}
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		digits = false;
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
			p->pos++;
			digits = true;
		}
		if (!digits) {
			fail(p, "bad exponent");
			return NULL;
		}
	}
	struct json *v = agent_json_new_string(p->s + start, p->pos - start);
	if (!v) {
		fail(p, "out of memory");
		return NULL;
	}
	v->type = JSON_NUMBER;
	return v;
}

static bool match_word(struct parser *p, const char *word)
{
	size_t n = strlen(word);

	if (p->len - p->pos >= n && !memcmp(p->s + p->pos, word, n)) {
		p->pos += n;
		return true;
	}
	return false;
}

static struct json *parse_value(struct parser *p, int depth)
{
	struct json *v;

	if (depth > JSON_MAX_DEPTH) {
		fail(p, "nested too deeply");
		return NULL;
	}
	skip_ws(p);
	if (p->pos >= p->len) {
		fail(p, "unexpected end of input");
		return NULL;
	}
	switch (p->s[p->pos]) {
	case '{':
		return parse_container(p, depth, true);
	case '[':
		return parse_container(p, depth, false);
	case '"': {
		size_t len;
		char *s = parse_string(p, &len);
		if (!s)
			return NULL;
		v = agent_json_new(JSON_STRING);
		if (!v) {
			free(s);
			fail(p, "out of memory");
			return NULL;
		}
		v->str = s;
		v->len = len;
		return v;
	}
	case 't':
	case 'f':
	case 'n':
		if (match_word(p, "true")) {
			v = agent_json_new(JSON_BOOL);
			if (v)
				v->boolean = true;
		} else if (match_word(p, "false")) {
			v = agent_json_new(JSON_BOOL);
		} else if (match_word(p, "null")) {
			v = agent_json_new(JSON_NULL);
		} else {
			fail(p, "unknown literal");
			return NULL;
		}
		if (!v)
			fail(p, "out of memory");
		return v;
	default:
		if (p->s[p->pos] == '-' || (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))
			return parse_number(p);
		fail(p, "unexpected character");
		return NULL;
	}
}

struct json *agent_json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	struct parser p = {.s = text, .len = len, .err = err, .errlen = errlen};
	struct json *v;

	if (err && errlen)
		err[0] = '\0';
	v = parse_value(&p, 0);
	if (!v)
		return NULL;
	skip_ws(&p);
	if (p.pos != p.len) {
		fail(&p, "trailing characters after the value");
		agent_json_free(v);
		return NULL;
	}
	return v;
}

static void dump_string(struct sbuf *b, const char *s, size_t len)
{
	sb_addc(b, '"');
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		switch (c) {
		case '"':
			sb_add(b, "\\\"", 2);
			break;
		case '\\':
			sb_add(b, "\\\\", 2);
			break;
		case '\n':
			sb_add(b, "\\n", 2);
			break;
		case '\r':
			sb_add(b, "\\r", 2);
			break;
		case '\t':
			sb_add(b, "\\t", 2);
			break;
		case '\b':
			sb_add(b, "\\b", 2);
			break;
		case '\f':
			sb_add(b, "\\f", 2);
			break;
		default:
			if (c < 0x20) {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				sb_add(b, esc, 6);
			} else {
				sb_addc(b, (char)c);
			}
		}
	}
	sb_addc(b, '"');
}

static void dump_value(struct sbuf *b, const struct json *v)
{
	switch (v->type) {
	case JSON_NULL:
		sb_add(b, "null", 4);
		break;
	case JSON_BOOL:
		if (v->boolean)
			sb_add(b, "true", 4);
		else
			sb_add(b, "false", 5);
		break;
	case JSON_NUMBER:
		sb_add(b, v->str, v->len);
		break;
	case JSON_STRING:
		dump_string(b, v->str, v->len);
		break;
	case JSON_ARRAY:
	case JSON_OBJECT:
		sb_addc(b, v->type == JSON_ARRAY ? '[' : '{');
		for (const struct json *m = v->child; m; m = m->next) {
			if (m != v->child)
				sb_add(b, ", ", 2);
			if (v->type == JSON_OBJECT) {
				dump_string(b, m->key ? m->key : "", m->key ? strlen(m->key) : 0);
				sb_add(b, ": ", 2);
			}
			dump_value(b, m);
		}
		sb_addc(b, v->type == JSON_ARRAY ? ']' : '}');
		break;
	}
}

char *agent_json_dump(const struct json *v)
{
	struct sbuf b = {0};

	dump_value(&b, v);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
