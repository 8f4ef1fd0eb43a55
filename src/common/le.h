/* Little-endian integers in byte buffers, for fixed layouts shared between
 * processes (the comm layer's handshakes and ring offers). */
#ifndef CRUN_COMMON_LE_H
#define CRUN_COMMON_LE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void crun__put_le32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void crun__put_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static inline uint32_t crun__get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t crun__get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

#endif
