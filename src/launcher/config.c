/* The config file reader: libyaml's event parser over the whole file held
 * in memory. Events, not a document tree, because the file is one flat
 * mapping and each value is at most one level deep; anything deeper is a
 * mistake we name with its line. */
#include "launcher/config.h"
#include "common/util.h"
#include "launcher/options.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

struct reader {
	const char *path;
	yaml_parser_t parser;
	char *err;
	size_t errlen;
};

static int line_of(const yaml_event_t *ev)
{
	return (int)ev->start_mark.line + 1;
}

static int next_event(struct reader *r, yaml_event_t *ev)
{
	if (yaml_parser_parse(&r->parser, ev))
		return 0;
	if (r->parser.context)
		crun_seterr(r->err, r->errlen, "config '%s' line %d: %s %s", r->path,
		       (int)r->parser.problem_mark.line + 1, r->parser.problem, r->parser.context);
	else
		crun_seterr(r->err, r->errlen, "config '%s' line %d: %s", r->path,
		       (int)r->parser.problem_mark.line + 1,
		       r->parser.problem ? r->parser.problem : "malformed YAML");
	return -EINVAL;
}

static bool scalar_is_null(const yaml_event_t *ev)
{
	const char *v = (const char *)ev->data.scalar.value;

	if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
	       !strcmp(v, "NULL");
}

static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
	struct stat st;
	size_t len = 0;
	char *buf;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		crun_seterr(err, errlen, "cannot read config '%s': %s", path, strerror(errno));
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		crun_seterr(err, errlen, "cannot read config '%s': not a regular file", path);
		rc = -EINVAL;
		goto out_close_fd;
	}
	buf = malloc(CRUN_LAUNCH_MAX_CONFIG + 1);
	if (!buf) {
		crun_seterr(err, errlen, "cannot read config '%s': out of memory", path);
		rc = -ENOMEM;
		goto out_close_fd;
	}
	for (;;) {
		ssize_t n = read(fd, buf + len, CRUN_LAUNCH_MAX_CONFIG + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -EINVAL;
			crun_seterr(err, errlen, "cannot read config '%s': %s", path, strerror(errno));
			goto out_free_buf;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > CRUN_LAUNCH_MAX_CONFIG) {
			crun_seterr(err, errlen, "cannot read config '%s': larger than %d bytes", path,
			       CRUN_LAUNCH_MAX_CONFIG);
			rc = -EINVAL;
			goto out_free_buf;
		}
	}
	close(fd);
	*out = buf;
	*outlen = len;
	return 0;
out_free_buf:
	free(buf);
out_close_fd:
	close(fd);
	return rc;
}

static void free_items(struct crun_config_value *v)
{
	for (size_t i = 0; i < v->nitems; i++)
		free(v->items[i]);
	free(v->items);
	v->items = NULL;
	v->nitems = 0;
}

static int push_item(struct crun_config_value *v, const char *s)
{
	char **items = realloc(v->items, (v->nitems + 1) * sizeof(*items));

	if (!items)
		return -ENOMEM;
	v->items = items;
	items[v->nitems] = strdup(s);
	if (!items[v->nitems])
		return -ENOMEM;
	v->nitems++;
	return 0;
}

/* Reads the scalars of a sequence or mapping up to its end event. */
static int read_collection(struct reader *r, const char *key, yaml_event_type_t end,
			   struct crun_config_value *v)
{
	yaml_event_t ev;
	int rc;

	for (;;) {
		rc = next_event(r, &ev);
		if (rc)
			return rc;
		if (ev.type == end) {
			yaml_event_delete(&ev);
			return 0;
		}
		if (ev.type != YAML_SCALAR_EVENT) {
			crun_seterr(r->err, r->errlen, "config '%s' line %d: wrong type for '%s': %s",
			       r->path, line_of(&ev), key,
			       ev.type == YAML_ALIAS_EVENT ? "YAML aliases are not supported"
							   : "values nest at most one level");
			yaml_event_delete(&ev);
			return -EINVAL;
		}
		rc = push_item(v, (const char *)ev.data.scalar.value);
		yaml_event_delete(&ev);
		if (rc) {
			crun_seterr(r->err, r->errlen, "config '%s': out of memory", r->path);
			return rc;
		}
	}
}

static int read_mapping(struct reader *r, crun_config_key_cb cb, void *ctx)
{
	struct crun_config_value v;
	yaml_event_t kev, vev;
	char reason[512];
	int rc, line;

	for (;;) {
		rc = next_event(r, &kev);
		if (rc)
			return rc;
		if (kev.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&kev);
			return 0;
		}
		line = line_of(&kev);
		if (kev.type != YAML_SCALAR_EVENT) {
			crun_seterr(r->err, r->errlen, "config '%s' line %d: keys must be option names",
			       r->path, line);
			yaml_event_delete(&kev);
			return -EINVAL;
		}
		rc = next_event(r, &vev);
		if (rc)
			goto out_key;
		memset(&v, 0, sizeof(v));
		switch (vev.type) {
		case YAML_SCALAR_EVENT:
			v.kind = scalar_is_null(&vev) ? CRUN_CONFIG_NULL : CRUN_CONFIG_SCALAR;
			v.scalar = (const char *)vev.data.scalar.value;
			v.quoted = vev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
			break;
		case YAML_SEQUENCE_START_EVENT:
			v.kind = CRUN_CONFIG_SEQUENCE;
			rc = read_collection(r, (const char *)kev.data.scalar.value,
					     YAML_SEQUENCE_END_EVENT, &v);
			break;
		case YAML_MAPPING_START_EVENT:
			v.kind = CRUN_CONFIG_MAPPING;
			rc = read_collection(r, (const char *)kev.data.scalar.value,
					     YAML_MAPPING_END_EVENT, &v);
			break;
		default:
			crun_seterr(r->err, r->errlen,
			       "config '%s' line %d: wrong type for '%s': YAML aliases are not "
			       "supported",
			       r->path, line_of(&vev), (const char *)kev.data.scalar.value);
			rc = -EINVAL;
			break;
		}
		if (!rc) {
			reason[0] = '\0';
			rc = cb(ctx, (const char *)kev.data.scalar.value, line, &v, reason,
				sizeof(reason));
			if (rc)
				crun_seterr(r->err, r->errlen, "config '%s' line %d: %s", r->path, line,
				       reason);
		}
		free_items(&v);
		yaml_event_delete(&vev);
	out_key:
		yaml_event_delete(&kev);
		if (rc)
			return rc;
	}
}

int crun_launch_config_read(const char *path, crun_config_key_cb cb, void *ctx, char *err,
			    size_t errlen)
{
	struct reader r = {.path = path, .err = err, .errlen = errlen};
	yaml_event_t ev;
	size_t len = 0;
	char *buf = NULL;
	int rc;

	rc = read_file(path, &buf, &len, err, errlen);
	if (rc)
		return rc;
	if (!yaml_parser_initialize(&r.parser)) {
		crun_seterr(err, errlen, "cannot read config '%s': out of memory", path);
		rc = -ENOMEM;
		goto out_free_buf;
	}
	yaml_parser_set_input_string(&r.parser, (const unsigned char *)buf, len);

	rc = next_event(&r, &ev); /* stream start */
	if (rc)
		goto out_parser;
	yaml_event_delete(&ev);
	rc = next_event(&r, &ev);
	if (rc)
		goto out_parser;
	if (ev.type == YAML_STREAM_END_EVENT) { /* empty, or only comments */
		yaml_event_delete(&ev);
		goto out_parser;
	}
	yaml_event_delete(&ev); /* document start */
	rc = next_event(&r, &ev);
	if (rc)
		goto out_parser;
	if (ev.type == YAML_MAPPING_START_EVENT) {
		yaml_event_delete(&ev);
		rc = read_mapping(&r, cb, ctx);
		if (rc)
			goto out_parser;
	} else if (ev.type == YAML_SCALAR_EVENT && scalar_is_null(&ev)) {
		yaml_event_delete(&ev); /* "---" alone */
	} else {
		crun_seterr(err, errlen,
		       "config '%s' line %d: expected a mapping of option names to values", path,
		       line_of(&ev));
		yaml_event_delete(&ev);
		rc = -EINVAL;
		goto out_parser;
	}
	rc = next_event(&r, &ev); /* document end */
	if (rc)
		goto out_parser;
	yaml_event_delete(&ev);
	rc = next_event(&r, &ev);
	if (rc)
		goto out_parser;
	if (ev.type != YAML_STREAM_END_EVENT) {
		crun_seterr(err, errlen, "config '%s' line %d: only one YAML document is allowed", path,
		       line_of(&ev));
		rc = -EINVAL;
	}
	yaml_event_delete(&ev);
out_parser:
	yaml_parser_delete(&r.parser);
out_free_buf:
	free(buf);
	return rc;
}
