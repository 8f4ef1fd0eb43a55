/* The YAML reader of crun's config files (crun -c and crun-train's
 * configuration): loads one document into a tree of mappings, sequences
 * and scalars that remembers where each node starts, so that callers can
 * name the line of a bad value. What the keys mean is the caller's
 * business; this reader only knows YAML.
 *
 * Plain scalars are resolved by the YAML 1.2 core schema only as far as
 * null goes: null, Null, NULL, ~ and nothing at all are CRUN__YAML_NULL.
 * Everything else, booleans and numbers included, stays text as written,
 * for the caller's value parsers. A quoted or block scalar is never null.
 *
 * The stream holds at most one document; an empty stream, or one of only
 * comments, is one CRUN__YAML_NULL root. Aliases are kept as
 * CRUN__YAML_ALIAS nodes pointing at their anchored node, so that a caller
 * may follow them (crun__yaml_deref) or refuse them. */
#ifndef CRUN_COMMON_YAML_H
#define CRUN_COMMON_YAML_H

#include <stdbool.h>
#include <stddef.h>

/* Collections nest at most this deep. */
#define CRUN__YAML_MAX_DEPTH 64

enum crun__yaml_kind {
	CRUN__YAML_NULL,     /* text: as written ("" for nothing) */
	CRUN__YAML_SCALAR,   /* text: the value, quotes and escapes resolved */
	CRUN__YAML_SEQUENCE, /* items: n values */
	CRUN__YAML_MAPPING,  /* items: 2n, key, value, key, value ... */
	CRUN__YAML_ALIAS,    /* text: the anchor's name; target: its node */
};

struct crun__yaml_node {
	enum crun__yaml_kind kind;
	int line;	  /* 1-based, where the node starts */
	int column;	  /* 1-based */
	bool quoted;	  /* a scalar written in quotes or as a block (| or >) */
	const char *text; /* NULL, SCALAR, ALIAS; NULL for collections */
	size_t n;	  /* SEQUENCE: items; MAPPING: pairs */
	/* In file order; a mapping keeps keys given twice (the caller
	 * decides what that means) and keys of any kind. */
	struct crun__yaml_node **items;
	const struct crun__yaml_node *target; /* ALIAS: never itself an alias */
};

/* Why loading failed. line 0: the input could not be read at all (msg is
 * the reason, like "No such file or directory" or "not a regular file");
 * else the place of a YAML error and what it is. */
struct crun__yaml_error {
	int err; /* the negative errno returned */
	int line;
	int column;
	char msg[256];
};

struct crun__yaml_doc;

/* Parses len bytes of text. Returns 0 with *out set (free it with
 * crun__yaml_destroy), or -EINVAL (a YAML error, a second document, an
 * undefined alias, nesting deeper than CRUN__YAML_MAX_DEPTH) or -ENOMEM,
 * with e filled. */
int crun__yaml_load_string(const char *text, size_t len, struct crun__yaml_doc **out,
			   struct crun__yaml_error *e);

/* Reads the regular file at path (at most max_bytes, SIZE_MAX for no
 * limit) and parses it. Besides load_string's errors: -errno of open(2) or
 * read(2), -EISDIR for a directory ("is a directory"), -EINVAL for
 * anything else that is not a regular file, -EFBIG for a file larger than
 * max_bytes; e->line is 0 for all of them. */
int crun__yaml_load_file(const char *path, size_t max_bytes, struct crun__yaml_doc **out,
			 struct crun__yaml_error *e);

/* The document's root; never NULL. Owned by doc. */
const struct crun__yaml_node *crun__yaml_root(const struct crun__yaml_doc *doc);

/* Frees the document and every node in it. NULL is allowed. */
void crun__yaml_destroy(struct crun__yaml_doc *doc);

/* n itself, or the node an alias stands for. */
const struct crun__yaml_node *crun__yaml_deref(const struct crun__yaml_node *n);

/* Writes e as one line into err: "cannot read WHAT 'PATH': msg" when
 * e->line is 0 ("WHAT 'PATH' is a directory, not a file" for -EISDIR),
 * else "WHAT 'PATH' line N: msg". */
void crun__yaml_format_error(const struct crun__yaml_error *e, const char *what, const char *path,
			     char *err, size_t errlen);

/* Whether the document is empty: no content at all, only comments, or a
 * bare "---". A document that says null ("null", "~") is not: it holds a
 * value, if not one the caller wants. */
bool crun__yaml_is_empty(const struct crun__yaml_doc *doc);

/* The one line for an empty document, into err: "WHAT 'PATH' is empty:
 * it sets nothing (no content, only comments)". */
void crun__yaml_format_empty(const char *what, const char *path, char *err, size_t errlen);

#endif
