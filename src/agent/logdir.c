/* A run's own log directory (logdir.h). */
#include "agent/logdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fs.h"

int crun__logdir_name(char *buf, size_t len, const char *run_id, time_t now, int n)
{
	char base[64];
	const char *name = run_id;
	struct tm tm;
	int k;

	if (!strcmp(run_id, "none")) {
		if (!gmtime_r(&now, &tm) || !strftime(base, sizeof(base), "%Y%m%dT%H%M%SZ", &tm))
			return -EINVAL;
		name = base;
	}
	if (n > 0)
		k = snprintf(buf, len, "%s.%d", name, n);
	else
		k = snprintf(buf, len, "%s", name);
	return k < 0 || (size_t)k >= len ? -ENAMETOOLONG : 0;
}

int crun__logdir_make(const char *parent, const char *run_id, time_t now, char **out, char *what,
		      size_t whatlen)
{
	char name[256];
	char *path;
	int err;

	*out = NULL;
	snprintf(what, whatlen, "%s", parent);
	err = crun__mkdir_p(parent, 0777);
	if (err < 0)
		return err;
	for (int n = 0; n < CRUN__LOGDIR_TRIES; n++) {
		err = crun__logdir_name(name, sizeof(name), run_id, now, n);
		if (err < 0)
			return err;
		if (asprintf(&path, "%s/%s", parent, name) < 0)
			return -ENOMEM;
		snprintf(what, whatlen, "%s", path);
		if (!mkdir(path, 0777)) {
			*out = path;
			return 0;
		}
		err = -errno;
		free(path);
		if (err != -EEXIST)
			return err;
	}
	return -EEXIST;
}
