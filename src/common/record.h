/* The error file of PyTorch's @record (TORCHELASTIC_ERROR_FILE), as
 * workers write it: {"message": {"message": ..., "extraInfo":
 * {"py_callstack": ..., "timestamp": "<unix seconds>"}}}. One builder for
 * crun-train's own error file and crun's, which adds "errorCode". */
#ifndef CRUN_COMMON_RECORD_H
#define CRUN_COMMON_RECORD_H

#include <jansson.h>

/* A JSON string of s made well-formed UTF-8 (crun__utf8_dup), since JSON
 * text is UTF-8 and s may not be (a path in another encoding, a worker's
 * line cut at a byte limit). Every JSON document crun writes takes text
 * of unknown encoding through here. NULL: out of memory. */
json_t *crun__record_text(const char *s);

/* The document of message and detail (py_callstack), stamped now. NULL:
 * out of memory. */
json_t *crun__record_doc(const char *message, const char *detail);

/* Writes doc as one line, with ", " and ": " between members as Python's
 * json.dumps writes it: tmp file, fsync, rename. 0 or a negative errno. */
int crun__record_write(const char *path, const json_t *doc);

#endif
