#include "common/record.h"
#include "common/fs.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *crun__record_text(const char *s)
{
	json_t *v = json_string(s);
	char *copy;

	if (v)
		return v;
	copy = strdup(s);
	if (!copy)
		return NULL;
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	v = json_string(copy);
	free(copy);
	return v;
}

json_t *crun__record_doc(const char *message, const char *detail)
{
	char stamp[32];

	snprintf(stamp, sizeof(stamp), "%llu", (unsigned long long)(crun__wall_ms() / 1000));
	return json_pack("{s:{s:o, s:{s:o, s:s}}}", "message", "message",
			 crun__record_text(message), "extraInfo", "py_callstack",
			 crun__record_text(detail), "timestamp", stamp);
}

int crun__record_write(const char *path, const json_t *doc)
{
	char *out = json_dumps(doc, 0);
	int err;

	if (!out)
		return -ENOMEM;
	err = crun__write_atomic(path, out, strlen(out), 0666);
	free(out);
	return err;
}
