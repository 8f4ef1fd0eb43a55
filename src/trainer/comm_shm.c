/* The offer of a shared-memory ring, and whether a peer can open it
 * (comm_shm.h says why rings have no name). No I/O here: comm_cpu.c reads
 * the boot id and the PID namespace and opens the path. */
#include "trainer/comm_shm.h"
#include "common/le.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define OFFER_MAGIC "SHMF"

/* Offsets in an offer. */
enum {
	OFF_MAGIC = 0,
	OFF_PRESENT = 4,
	OFF_BOOT_ID = 8,
	OFF_PID_NS = 24,
	OFF_PID = 32,
	OFF_FD = 36,
	OFF_NONCE = 40,
	OFF_CAP = 48,
	OFF_END = 56,
};

_Static_assert(OFF_END == CRUN__SHM_OFFER_LEN, "the offer's fields fill it");

void crun__shm_offer_encode(uint8_t buf[CRUN__SHM_OFFER_LEN], const struct crun__shm_offer *o)
{
	memset(buf, 0, CRUN__SHM_OFFER_LEN);
	memcpy(buf + OFF_MAGIC, OFFER_MAGIC, 4);
	if (!o->present)
		return;
	crun__put_le32(buf + OFF_PRESENT, 1);
	memcpy(buf + OFF_BOOT_ID, o->place.boot_id, 16);
	crun__put_le64(buf + OFF_PID_NS, o->place.pid_ns);
	crun__put_le32(buf + OFF_PID, (uint32_t)o->pid);
	crun__put_le32(buf + OFF_FD, (uint32_t)o->fd);
	crun__put_le64(buf + OFF_NONCE, o->nonce);
	crun__put_le64(buf + OFF_CAP, o->cap);
}

int crun__shm_offer_decode(const uint8_t buf[CRUN__SHM_OFFER_LEN], struct crun__shm_offer *o)
{
	uint32_t present = crun__get_le32(buf + OFF_PRESENT);

	memset(o, 0, sizeof(*o));
	if (memcmp(buf + OFF_MAGIC, OFFER_MAGIC, 4) || present > 1)
		return -EPROTO;
	if (!present)
		return 0;
	o->present = true;
	memcpy(o->place.boot_id, buf + OFF_BOOT_ID, 16);
	o->place.pid_ns = crun__get_le64(buf + OFF_PID_NS);
	o->pid = (int32_t)crun__get_le32(buf + OFF_PID);
	o->fd = (int32_t)crun__get_le32(buf + OFF_FD);
	o->nonce = crun__get_le64(buf + OFF_NONCE);
	o->cap = crun__get_le64(buf + OFF_CAP);
	if (o->pid <= 0 || o->fd < 0 || o->cap < CRUN__SHM_MIN_CAP || o->cap > CRUN__SHM_MAX_CAP ||
	    o->cap % 64) {
		memset(o, 0, sizeof(*o));
		return -EPROTO;
	}
	return 0;
}

static bool place_known(const struct crun__shm_place *p)
{
	static const uint8_t zero[16];

	return p->pid_ns != 0 && memcmp(p->boot_id, zero, 16) != 0;
}

bool crun__shm_reachable(const struct crun__shm_place *here, const struct crun__shm_place *there)
{
	return place_known(here) && place_known(there) && here->pid_ns == there->pid_ns &&
	       memcmp(here->boot_id, there->boot_id, 16) == 0;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int crun__shm_parse_boot_id(const char *text, uint8_t out[16])
{
	size_t n = 0;
	int i;

	/* 8-4-4-4-12 hex digits */
	for (i = 0; i < 36; i++) {
		int hi, lo;

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (text[i] != '-')
				return -EINVAL;
			continue;
		}
		hi = hex_digit(text[i]);
		lo = hi < 0 ? -1 : hex_digit(text[i + 1]);
		if (lo < 0)
			return -EINVAL;
		out[n++] = (uint8_t)(hi << 4 | lo);
		i++;
	}
	if (n != 16 || (text[36] != '\0' && strcmp(text + 36, "\n")))
		return -EINVAL;
	return 0;
}

int crun__shm_proc_path(char *buf, size_t len, int32_t pid, int32_t fd)
{
	int n;

	if (pid <= 0 || fd < 0)
		return -EINVAL;
	n = snprintf(buf, len, "/proc/%d/fd/%d", (int)pid, (int)fd);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
