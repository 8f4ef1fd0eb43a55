#include "common/record.h"
#include "common/fs.h"
#include "common/utf8.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *crun__record_text(const char *s)
{
	char *copy = crun__utf8_dup(s);
	json_t *v;

	if (!copy)
		return NULL;
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
