/* Big-endian fields, as the IBA's headers and MADs write them (rv_proto.c, rv_cm.c). */
#ifndef RV_BYTES_H
#define RV_BYTES_H

#include <stdint.h>

static inline void rv_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* 24 bits in three bytes (a QPN, a PSN). */
static inline void rv_put24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)v;
}

static inline void rv_put32(uint8_t *p, uint32_t v)
{
	rv_put16(p, (uint16_t)(v >> 16));
	rv_put16(p + 2, (uint16_t)v);
}

static inline void rv_put64(uint8_t *p, uint64_t v)
{
	rv_put32(p, (uint32_t)(v >> 32));
	rv_put32(p + 4, (uint32_t)v);
}

static inline uint16_t rv_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t rv_get24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static inline uint32_t rv_get32(const uint8_t *p)
{
	return (uint32_t)rv_get16(p) << 16 | rv_get16(p + 2);
}

static inline uint64_t rv_get64(const uint8_t *p)
{
	return (uint64_t)rv_get32(p) << 32 | rv_get32(p + 4);
}

#endif
