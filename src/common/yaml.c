/* libyaml's event parser builds the tree: events rather than libyaml's own
 * document API, because the events say whether a scalar was quoted and
 * carry aliases as they were written, and because only events let the
 * reader refuse a second document and bound the nesting depth. */
#include "common/yaml.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

struct crun__yaml_doc {
	struct crun__yaml_node *root;
};

struct anchor {
	char *name;
	const struct crun__yaml_node *node;
};

struct builder {
	yaml_parser_t parser;
	struct crun__yaml_error *e;
	struct anchor *anchors;
	size_t nanchors;
};

static int fail(struct crun__yaml_error *e, int rc, const yaml_mark_t *mark, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(struct crun__yaml_error *e, int rc, const yaml_mark_t *mark, const char *fmt, ...)
{
	va_list ap;

	e->err = rc;
	e->line = mark ? (int)mark->line + 1 : 0;
	e->column = mark ? (int)mark->column + 1 : 0;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return rc;
}

static int oom(struct builder *b)
{
	return fail(b->e, -ENOMEM, NULL, "out of memory");
}

static int next_event(struct builder *b, yaml_event_t *ev)
{
	const yaml_parser_t *p = &b->parser;

	if (yaml_parser_parse(&b->parser, ev))
		return 0;
	if (p->error == YAML_MEMORY_ERROR)
		return oom(b);
	return fail(b->e, -EINVAL, &p->problem_mark, "%s%s%s",
		    p->problem ? p->problem : "malformed YAML", p->context ? " " : "",
		    p->context ? p->context : "");
}

static void node_free(struct crun__yaml_node *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < (n->kind == CRUN__YAML_MAPPING ? 2 * n->n : n->n); i++)
		node_free(n->items[i]);
	free(n->items);
	free((char *)n->text);
	free(n);
}

static struct crun__yaml_node *node_new(enum crun__yaml_kind kind, const yaml_mark_t *mark)
{
	struct crun__yaml_node *n = calloc(1, sizeof(*n));

	if (n) {
		n->kind = kind;
		n->line = (int)mark->line + 1;
		n->column = (int)mark->column + 1;
	}
	return n;
}

static bool plain_null(const char *v)
{
	return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
	       !strcmp(v, "NULL");
}

static int add_anchor(struct builder *b, const yaml_char_t *name, const struct crun__yaml_node *n)
{
	struct anchor *a;

	if (!name)
		return 0;
	a = realloc(b->anchors, (b->nanchors + 1) * sizeof(*a));
	if (!a)
		return oom(b);
	b->anchors = a;
	a[b->nanchors].name = strdup((const char *)name);
	if (!a[b->nanchors].name)
		return oom(b);
	a[b->nanchors++].node = n;
	return 0;
}

/* The node of the latest anchor of that name (YAML lets an anchor be
 * given again; an alias means the one before it). */
static const struct crun__yaml_node *find_anchor(struct builder *b, const char *name)
{
	for (size_t i = b->nanchors; i-- > 0;)
		if (!strcmp(b->anchors[i].name, name))
			return b->anchors[i].node;
	return NULL;
}

static int build(struct builder *b, yaml_event_t *ev, int depth, struct crun__yaml_node **out);

/* Reads the items of a collection up to its end event into n. On failure
 * n holds only complete items (pairs, for a mapping), for node_free. */
static int build_items(struct builder *b, struct crun__yaml_node *n, yaml_event_type_t end,
		       int depth)
{
	bool map = n->kind == CRUN__YAML_MAPPING;
	size_t cap = 0, count = 0;
	int rc;

	for (;;) {
		struct crun__yaml_node *item = NULL;
		yaml_event_t ev;

		rc = next_event(b, &ev);
		if (rc)
			break;
		if (ev.type == end) {
			yaml_event_delete(&ev);
			break;
		}
		if (count == cap) {
			size_t ncap = cap ? 2 * cap : 8;
			struct crun__yaml_node **items = realloc(n->items, ncap * sizeof(*items));

			if (!items) {
				yaml_event_delete(&ev);
				rc = oom(b);
				break;
			}
			n->items = items;
			cap = ncap;
		}
		rc = build(b, &ev, depth, &item);
		yaml_event_delete(&ev);
		if (rc)
			break;
		n->items[count++] = item;
	}
	if (map && count % 2) /* a key whose value failed */
		node_free(n->items[--count]);
	n->n = map ? count / 2 : count;
	return rc;
}

/* Builds the node that starts with ev (a scalar, alias or collection
 * start); ev stays the caller's. depth counts the collections around. */
static int build(struct builder *b, yaml_event_t *ev, int depth, struct crun__yaml_node **out)
{
	const yaml_char_t *anchor = NULL;
	struct crun__yaml_node *n;
	int rc = 0;

	switch (ev->type) {
	case YAML_SCALAR_EVENT: {
		const char *v = (const char *)ev->data.scalar.value;
		bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;

		n = node_new(plain && ev->data.scalar.plain_implicit && plain_null(v)
				     ? CRUN__YAML_NULL
				     : CRUN__YAML_SCALAR,
			     &ev->start_mark);
		if (!n)
			return oom(b);
		n->quoted = !plain;
		n->text = strdup(v);
		if (!n->text)
			rc = oom(b);
		anchor = ev->data.scalar.anchor;
		break;
	}
	case YAML_ALIAS_EVENT: {
		const char *name = (const char *)ev->data.alias.anchor;
		const struct crun__yaml_node *target = find_anchor(b, name);

		if (!target)
			return fail(b->e, -EINVAL, &ev->start_mark, "undefined alias '%s'", name);
		n = node_new(CRUN__YAML_ALIAS, &ev->start_mark);
		if (!n)
			return oom(b);
		n->target = target;
		n->text = strdup(name);
		if (!n->text)
			rc = oom(b);
		break;
	}
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT: {
		bool seq = ev->type == YAML_SEQUENCE_START_EVENT;

		if (depth >= CRUN__YAML_MAX_DEPTH)
			return fail(b->e, -EINVAL, &ev->start_mark,
				    "collections nest deeper than %d levels", CRUN__YAML_MAX_DEPTH);
		n = node_new(seq ? CRUN__YAML_SEQUENCE : CRUN__YAML_MAPPING, &ev->start_mark);
		if (!n)
			return oom(b);
		rc = build_items(b, n, seq ? YAML_SEQUENCE_END_EVENT : YAML_MAPPING_END_EVENT,
				 depth + 1);
		anchor = seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor;
		break;
	}
	default: /* the parser allows no other event here */
		return fail(b->e, -EINVAL, &ev->start_mark, "unexpected YAML event");
	}
	/* anchored once complete, so a node cannot contain an alias of itself */
	if (!rc)
		rc = add_anchor(b, anchor, n);
	if (rc) {
		node_free(n);
		return rc;
	}
	*out = n;
	return 0;
}

/* stream-start, then one document or none, then stream-end. */
static int build_stream(struct builder *b, struct crun__yaml_node **root)
{
	yaml_event_t ev;
	int rc;

	rc = next_event(b, &ev); /* stream start */
	if (rc)
		return rc;
	yaml_event_delete(&ev);
	rc = next_event(b, &ev);
	if (rc)
		return rc;
	if (ev.type == YAML_STREAM_END_EVENT) { /* empty, or only comments */
		*root = node_new(CRUN__YAML_NULL, &ev.start_mark);
		yaml_event_delete(&ev);
		if (!*root || !((*root)->text = strdup("")))
			return oom(b);
		return 0;
	}
	yaml_event_delete(&ev); /* document start */
	rc = next_event(b, &ev);
	if (rc)
		return rc;
	rc = build(b, &ev, 0, root);
	yaml_event_delete(&ev);
	if (rc)
		return rc;
	rc = next_event(b, &ev); /* document end */
	if (rc)
		return rc;
	yaml_event_delete(&ev);
	rc = next_event(b, &ev);
	if (rc)
		return rc;
	if (ev.type != YAML_STREAM_END_EVENT)
		rc = fail(b->e, -EINVAL, &ev.start_mark, "only one YAML document is allowed");
	yaml_event_delete(&ev);
	return rc;
}

int crun__yaml_load_string(const char *text, size_t len, struct crun__yaml_doc **out,
			   struct crun__yaml_error *e)
{
	struct builder b = {.e = e};
	struct crun__yaml_node *root = NULL;
	struct crun__yaml_doc *doc;
	int rc;

	memset(e, 0, sizeof(*e));
	doc = calloc(1, sizeof(*doc));
	if (!doc)
		return fail(e, -ENOMEM, NULL, "out of memory");
	if (!yaml_parser_initialize(&b.parser)) {
		free(doc);
		return fail(e, -ENOMEM, NULL, "out of memory");
	}
	yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, len);
	rc = build_stream(&b, &root);
	yaml_parser_delete(&b.parser);
	for (size_t i = 0; i < b.nanchors; i++)
		free(b.anchors[i].name);
	free(b.anchors);
	if (rc) {
		node_free(root);
		free(doc);
		return rc;
	}
	doc->root = root;
	*out = doc;
	return 0;
}

/* The whole file in a buffer of its own, NUL-terminated. */
static int read_all(const char *path, size_t max_bytes, char **out, size_t *outlen,
		    struct crun__yaml_error *e)
{
	size_t cap = 0, len = 0;
	struct stat st;
	char *buf = NULL;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = errno;
		return fail(e, -rc, NULL, "%s", strerror(rc));
	}
	if (fstat(fd, &st) < 0) {
		rc = errno;
		rc = fail(e, -rc, NULL, "%s", strerror(rc));
		goto out_close_fd;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = fail(e, -EISDIR, NULL, "is a directory");
		goto out_close_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = fail(e, -EINVAL, NULL, "not a regular file");
		goto out_close_fd;
	}
	for (;;) {
		ssize_t n;

		if (len + 1 >= cap) {
			size_t ncap = cap ? 2 * cap : 4096;
			char *bigger;

			if (max_bytes < SIZE_MAX - 1 && ncap > max_bytes + 2)
				ncap = max_bytes + 2;
			bigger = realloc(buf, ncap);
			if (!bigger) {
				rc = fail(e, -ENOMEM, NULL, "out of memory");
				goto out_free_buf;
			}
			buf = bigger;
			cap = ncap;
		}
		n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = errno;
			rc = fail(e, -rc, NULL, "%s", strerror(rc));
			goto out_free_buf;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max_bytes) {
			rc = fail(e, -EFBIG, NULL, "larger than %zu bytes", max_bytes);
			goto out_free_buf;
		}
	}
	close(fd);
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
out_free_buf:
	free(buf);
out_close_fd:
	close(fd);
	return rc;
}

int crun__yaml_load_file(const char *path, size_t max_bytes, struct crun__yaml_doc **out,
			 struct crun__yaml_error *e)
{
	size_t len = 0;
	char *buf = NULL;
	int rc;

	memset(e, 0, sizeof(*e));
	rc = read_all(path, max_bytes, &buf, &len, e);
	if (rc)
		return rc;
	rc = crun__yaml_load_string(buf, len, out, e);
	free(buf);
	return rc;
}

const struct crun__yaml_node *crun__yaml_root(const struct crun__yaml_doc *doc)
{
	return doc->root;
}

void crun__yaml_destroy(struct crun__yaml_doc *doc)
{
	if (!doc)
		return;
	node_free(doc->root);
	free(doc);
}

const struct crun__yaml_node *crun__yaml_deref(const struct crun__yaml_node *n)
{
	return n->kind == CRUN__YAML_ALIAS ? n->target : n;
}

void crun__yaml_format_error(const struct crun__yaml_error *e, const char *what, const char *path,
			     char *err, size_t errlen)
{
	if (e->line)
		crun__seterr(err, errlen, "%s '%s' line %d: %s", what, path, e->line, e->msg);
	else if (e->err == -EISDIR)
		crun__seterr(err, errlen, "%s '%s' is a directory, not a file", what, path);
	else
		crun__seterr(err, errlen, "cannot read %s '%s': %s", what, path, e->msg);
}

bool crun__yaml_is_empty(const struct crun__yaml_doc *doc)
{
	const struct crun__yaml_node *root = crun__yaml_root(doc);

	return root->kind == CRUN__YAML_NULL && !root->quoted && root->text && !root->text[0];
}

void crun__yaml_format_empty(const char *what, const char *path, char *err, size_t errlen)
{
	crun__seterr(err, errlen, "%s '%s' is empty: it sets nothing (no content, only comments)",
		     what, path);
}
