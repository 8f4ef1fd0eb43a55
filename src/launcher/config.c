/* The config file reader: common/yaml.c loads the file, and this walks its
 * one flat mapping, flattening each value for the callback. A value nested
 * deeper than one level, or an alias, is a mistake we name with its line. */
#include "launcher/config.h"
#include "common/util.h"
#include "common/yaml.h"
#include "launcher/options.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

static bool is_scalar(const struct crun__yaml_node *n)
{
	return n->kind == CRUN__YAML_SCALAR || n->kind == CRUN__YAML_NULL;
}

/* The texts of a sequence's items or a mapping's keys and values, in
 * order; scalars only. */
static int flatten(const char *path, const char *key, const struct crun__yaml_node *n,
		   struct crun__config_value *v, char *err, size_t errlen)
{
	size_t count = n->kind == CRUN__YAML_MAPPING ? 2 * n->n : n->n;

	v->items = calloc(count ? count : 1, sizeof(*v->items));
	if (!v->items) {
		crun__seterr(err, errlen, "config '%s': out of memory", path);
		return -ENOMEM;
	}
	for (size_t i = 0; i < count; i++) {
		const struct crun__yaml_node *item = n->items[i];

		if (!is_scalar(item)) {
			crun__seterr(err, errlen, "config '%s' line %d: wrong type for '%s': %s",
				     path, item->line, key,
				     item->kind == CRUN__YAML_ALIAS
					     ? "YAML aliases are not supported"
					     : "values nest at most one level");
			return -EINVAL;
		}
		v->items[v->nitems++] = item->text;
	}
	return 0;
}

static int read_pair(const char *path, const struct crun__yaml_node *k,
		     const struct crun__yaml_node *val, crun__config_key_cb cb, void *ctx,
		     char *err, size_t errlen)
{
	struct crun__config_value v = {0};
	char reason[512];
	int rc = 0;

	if (!is_scalar(k)) {
		crun__seterr(err, errlen, "config '%s' line %d: keys must be option names", path,
			     k->line);
		return -EINVAL;
	}
	switch (val->kind) {
	case CRUN__YAML_NULL:
	case CRUN__YAML_SCALAR:
		v.kind = val->kind == CRUN__YAML_NULL ? CRUN_CONFIG_NULL : CRUN_CONFIG_SCALAR;
		v.scalar = val->text;
		v.quoted = val->quoted;
		break;
	case CRUN__YAML_SEQUENCE:
	case CRUN__YAML_MAPPING:
		v.kind = val->kind == CRUN__YAML_SEQUENCE ? CRUN_CONFIG_SEQUENCE
							  : CRUN_CONFIG_MAPPING;
		rc = flatten(path, k->text, val, &v, err, errlen);
		break;
	case CRUN__YAML_ALIAS:
		crun__seterr(err, errlen,
			     "config '%s' line %d: wrong type for '%s': YAML aliases are not "
			     "supported",
			     path, val->line, k->text);
		rc = -EINVAL;
		break;
	}
	if (!rc) {
		reason[0] = '\0';
		rc = cb(ctx, k->text, k->line, &v, reason, sizeof(reason));
		if (rc)
			crun__seterr(err, errlen, "config '%s' line %d: %s", path, k->line, reason);
	}
	free(v.items);
	return rc;
}

int crun__launch_config_read(const char *path, crun__config_key_cb cb, void *ctx, char *err,
			     size_t errlen)
{
	const struct crun__yaml_node *root;
	struct crun__yaml_error e;
	struct crun__yaml_doc *doc;
	int rc;

	rc = crun__yaml_load_file(path, CRUN_LAUNCH_MAX_CONFIG, &doc, &e);
	if (rc) {
		crun__yaml_format_error(&e, "config", path, err, errlen);
		return rc == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	root = crun__yaml_root(doc);
	if (root->kind == CRUN__YAML_MAPPING) {
		for (size_t i = 0; i < root->n && !rc; i++)
			rc = read_pair(path, root->items[2 * i], root->items[2 * i + 1], cb, ctx,
				       err, errlen);
	} else if (crun__yaml_is_empty(doc)) {
		crun__yaml_format_empty("config", path, err, errlen);
		rc = -EINVAL;
	} else {
		crun__seterr(err, errlen,
			     "config '%s' line %d: expected a mapping of option names to values",
			     path, root->line);
		rc = -EINVAL;
	}
	crun__yaml_destroy(doc);
	return rc;
}
