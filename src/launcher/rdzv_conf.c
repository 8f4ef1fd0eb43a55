/* --rdzv-conf: one table of every key crun takes, its own and those that
 * torchrun's rendezvous backends read (c10d/dynamic, static, etcd and
 * etcd-v2, torch 1.13 to 2.x), so that a torchrun command line runs
 * unchanged. A torchrun key either sets crun's equivalent or is checked
 * and has no effect (crun(1) says why for each); an unknown key is an
 * error that names the closest known one. */
#include "launcher/options.h"
#include "common/suggest.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The store's limit (rdzv.h, CRUN_RDZV_MAX_BLACKLIST). */
#define BLACKLIST_MAX 1000

enum key_kind {
	KEY_DURATION,	/* positive duration into an int64_t of ms */
	KEY_ATTEMPTS,	/* 1-1000 into an int */
	KEY_FAILURES,	/* 0-BLACKLIST_MAX into an int */
	KEY_COOLDOWN,	/* MIN:MAX durations: cooldown_{min,max}_ms */
	KEY_IS_HOST,	/* bool into an int (-1 unset) */
	KEY_TOKEN_FILE, /* a path, copied */
	KEY_TIMEOUT,	/* torchrun's timeout: a positive duration */
	KEY_BOOL,	/* checked only */
	KEY_SECONDS,	/* a duration >= 0, checked only */
	KEY_RANK,	/* a whole number >= 0, checked only */
	KEY_STORE_TYPE, /* tcp, checked only */
	KEY_PROTOCOL,	/* http or https, checked only */
	KEY_TEXT,	/* anything, unused */
};

#define FIELD(f) offsetof(struct crun__rdzv_conf, f)
#define NO_FIELD ((size_t)-1)

static const struct rdzv_key {
	const char *name;
	enum key_kind kind;
	size_t field; /* NO_FIELD: checked, no effect */
} keys[] = {
	{"join_timeout", KEY_DURATION, FIELD(join_timeout_ms)},
	{"last_call_timeout", KEY_DURATION, FIELD(last_call_timeout_ms)},
	{"close_timeout", KEY_DURATION, FIELD(close_timeout_ms)},
	{"keep_alive_interval", KEY_DURATION, FIELD(keep_alive_interval_ms)},
	{"keep_alive_max_attempt", KEY_ATTEMPTS, FIELD(keep_alive_max_attempt)},
	{"is_host", KEY_IS_HOST, FIELD(is_host)},
	{"token_file", KEY_TOKEN_FILE, FIELD(token_file)},
	{"read_timeout", KEY_DURATION, FIELD(read_timeout_ms)},
	{"rejoin_timeout", KEY_DURATION, FIELD(rejoin_timeout_ms)},
	{"blacklist_failures", KEY_FAILURES, FIELD(blacklist_failures)},
	{"blacklist_window", KEY_DURATION, FIELD(blacklist_window_ms)},
	{"blacklist_cooldown_range", KEY_COOLDOWN, FIELD(cooldown_min_ms)},
	{"reconnect_timeout", KEY_DURATION, FIELD(reconnect_timeout_ms)},
	/* torchrun's, with a meaning in crun */
	{"timeout", KEY_TIMEOUT, FIELD(timeout_ms)},
	/* torchrun's, checked and without effect */
	{"heartbeat_timeout", KEY_DURATION, NO_FIELD},
	{"cas_backoff_max_seconds", KEY_SECONDS, NO_FIELD},
	{"use_libuv", KEY_BOOL, NO_FIELD},
	{"store_type", KEY_STORE_TYPE, NO_FIELD},
	{"rank", KEY_RANK, NO_FIELD},
	{"protocol", KEY_PROTOCOL, NO_FIELD},
	{"cacert", KEY_TEXT, NO_FIELD},
	{"cert", KEY_TEXT, NO_FIELD},
	{"key", KEY_TEXT, NO_FIELD},
	{"etcd_prefix", KEY_TEXT, NO_FIELD},
	{"ca_cert", KEY_TEXT, NO_FIELD},
	{"ssl_cert", KEY_TEXT, NO_FIELD},
	{"ssl_cert_key", KEY_TEXT, NO_FIELD},
};

void crun__rdzv_conf_init(struct crun__rdzv_conf *conf)
{
	conf->join_timeout_ms = 600000;
	conf->join_timeout_set = false;
	conf->last_call_timeout_ms = 30000;
	conf->close_timeout_ms = 30000;
	conf->keep_alive_interval_ms = 5000;
	conf->keep_alive_max_attempt = 3;
	conf->is_host = -1;
	conf->token_file = NULL;
	conf->read_timeout_ms = 60000;
	conf->rejoin_timeout_ms = 0;
	conf->blacklist_failures = 3;
	conf->blacklist_window_ms = 600000;
	conf->cooldown_min_ms = 30000;
	conf->cooldown_max_ms = 300000;
	conf->reconnect_timeout_ms = 60000;
	conf->timeout_ms = 0;
}

void crun__rdzv_conf_finish(struct crun__rdzv_conf *conf)
{
	free(conf->token_file);
	conf->token_file = NULL;
}

int64_t crun__rdzv_conf_join_timeout_ms(const struct crun__rdzv_conf *conf, bool is_static)
{
	if (is_static && conf->timeout_ms && !conf->join_timeout_set)
		return conf->timeout_ms;
	return conf->join_timeout_ms;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* "MIN:MAX" (Horovod's --blacklist-cooldown-range MIN MAX), or one
 * duration for both. */
static int parse_cooldown_range(struct crun__rdzv_conf *conf, const char *key, const char *val,
				char *err, size_t errlen)
{
	const char *colon = strchr(val, ':');
	char min[64];
	int64_t lo, hi;

	if (!colon) {
		snprintf(min, sizeof(min), "%s", val);
	} else if ((size_t)(colon - val) < sizeof(min)) {
		memcpy(min, val, (size_t)(colon - val));
		min[colon - val] = '\0';
	} else {
		min[0] = '\0';
	}
	if (crun__parse_duration_ms(min, &lo, NULL, 0) < 0 || lo <= 0 ||
	    crun__parse_duration_ms(colon ? colon + 1 : min, &hi, NULL, 0) < 0 || hi < lo) {
		crun__seterr(err, errlen,
			     "%s '%s': expected MIN:MAX, two positive durations like 30s:5m "
			     "with MIN <= MAX",
			     key, val);
		return -EINVAL;
	}
	conf->cooldown_min_ms = lo;
	conf->cooldown_max_ms = hi;
	return 0;
}

static void unknown_key(const char *key, char *err, size_t errlen)
{
	const char *names[CRUN_ARRAY_SIZE(keys)];
	const char *near;

	for (size_t i = 0; i < CRUN_ARRAY_SIZE(keys); i++)
		names[i] = keys[i].name;
	near = crun__closest_word(key, names, CRUN_ARRAY_SIZE(keys));
	if (near)
		crun__seterr(err, errlen, "unknown key '%s'; did you mean '%s'?", key, near);
	else
		crun__seterr(err, errlen,
			     "unknown key '%s' (crun(1) lists the keys under --rdzv-conf)", key);
}

static int set_key(struct crun__rdzv_conf *conf, const struct rdzv_key *k, const char *val,
		   char *err, size_t errlen)
{
	void *field = k->field == NO_FIELD ? NULL : (char *)conf + k->field;
	const char *key = k->name;
	int64_t v;
	bool b;

	switch (k->kind) {
	case KEY_DURATION:
	case KEY_TIMEOUT:
		if (crun__parse_duration_ms(val, &v, NULL, 0) < 0 || v <= 0) {
			crun__seterr(
				err, errlen,
				"%s '%s': expected a positive duration like 30, 2.5s, 500ms or 1m",
				key, val);
			return -EINVAL;
		}
		if (field)
			*(int64_t *)field = v;
		if (field == &conf->join_timeout_ms)
			conf->join_timeout_set = true;
		return 0;
	case KEY_SECONDS:
		if (crun__parse_duration_ms(val, &v, NULL, 0) < 0) {
			crun__seterr(err, errlen,
				     "%s '%s': expected a number of seconds, 0 or more, like 0.5",
				     key, val);
			return -EINVAL;
		}
		return 0;
	case KEY_ATTEMPTS:
		if (crun__parse_int64(val, 1, 1000, &v, NULL, 0) < 0) {
			crun__seterr(err, errlen, "%s '%s': expected a whole number from 1 to 1000",
				     key, val);
			return -EINVAL;
		}
		*(int *)field = (int)v;
		return 0;
	case KEY_FAILURES:
		if (crun__parse_int64(val, 0, BLACKLIST_MAX, &v, NULL, 0) < 0) {
			crun__seterr(err, errlen,
				     "%s '%s': expected a whole number from 0 (never) to %d", key,
				     val, BLACKLIST_MAX);
			return -EINVAL;
		}
		*(int *)field = (int)v;
		return 0;
	case KEY_RANK:
		if (crun__parse_int64(val, 0, INT32_MAX, &v, NULL, 0) < 0) {
			crun__seterr(err, errlen, "%s '%s': expected a whole number, 0 or more",
				     key, val);
			return -EINVAL;
		}
		return 0;
	case KEY_COOLDOWN:
		return parse_cooldown_range(conf, key, val, err, errlen);
	case KEY_IS_HOST:
	case KEY_BOOL:
		if (crun__launch_parse_bool(val, &b) < 0) {
			crun__seterr(err, errlen, "%s '%s': expected true, false, 1 or 0", key,
				     val);
			return -EINVAL;
		}
		if (field)
			*(int *)field = b;
		return 0;
	case KEY_TOKEN_FILE: {
		char *dup = strdup(val);

		if (!dup) {
			crun__seterr(err, errlen, "out of memory");
			return -ENOMEM;
		}
		free(*(char **)field);
		*(char **)field = dup;
		return 0;
	}
	case KEY_STORE_TYPE:
		if (strcasecmp(val, "tcp")) {
			crun__seterr(err, errlen,
				     "%s '%s': crun's store is a TCP store: only tcp is "
				     "supported",
				     key, val);
			return -EINVAL;
		}
		return 0;
	case KEY_PROTOCOL:
		if (strcasecmp(val, "http") && strcasecmp(val, "https")) {
			crun__seterr(err, errlen, "%s '%s': expected http or https", key, val);
			return -EINVAL;
		}
		return 0;
	case KEY_TEXT:
		return 0;
	}
	return -EINVAL;
}

static int rdzv_conf_set(struct crun__rdzv_conf *conf, const char *key, const char *val, char *err,
			 size_t errlen)
{
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(keys); i++)
		if (!strcmp(key, keys[i].name))
			return set_key(conf, &keys[i], val, err, errlen);
	unknown_key(key, err, errlen);
	return -EINVAL;
}

int crun__launch_parse_rdzv_conf(const char *s, struct crun__rdzv_conf *conf, char *err,
				 size_t errlen)
{
	char *copy, *item;
	size_t len;
	int rc = 0;

	copy = strdup(s);
	if (!copy) {
		crun__seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	item = trim(copy);
	len = strlen(item);
	/* Quotes around the whole value, passed on by a launch script that
	 * runs crun without a shell ('join_timeout=5,timeout=5', as in
	 * PyTorch's own launcher tests): not part of the first key or the
	 * last value. */
	if (len >= 2 && (item[0] == '\'' || item[0] == '"') && item[len - 1] == item[0]) {
		item[len - 1] = '\0';
		item = trim(item + 1);
	}
	if (!*item) /* torchrun: an empty string sets nothing */
		goto out_free_copy;
	for (;;) {
		bool last;

		len = strcspn(item, ",");
		last = !item[len];
		char *eq, *key, *val;

		item[len] = '\0';
		eq = strchr(item, '=');
		if (!eq) {
			crun__seterr(err, errlen,
				     "'%s' is not KEY=VALUE; expected KEY=VALUE,... (crun(1) "
				     "lists the keys under --rdzv-conf)",
				     trim(item));
			rc = -EINVAL;
			goto out_free_copy;
		}
		*eq = '\0';
		key = trim(item);
		val = trim(eq + 1);
		if (!*key || !*val) {
			crun__seterr(err, errlen, "%s in '%s': expected KEY=VALUE,...",
				     *key ? "empty value" : "empty key", s);
			rc = -EINVAL;
			goto out_free_copy;
		}
		rc = rdzv_conf_set(conf, key, val, err, errlen);
		if (rc || last)
			goto out_free_copy;
		item += len + 1;
	}
out_free_copy:
	free(copy);
	return rc;
}
