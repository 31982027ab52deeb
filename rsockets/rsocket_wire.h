/* rsockets on the wire: what goiwarp's rsockets and librdmacm's exchange.
 *
 * Pure encode/decode, no I/O and no state, so that tests/rsocket/wire_test.c
 * can check every field against hand-written byte strings. The protocol is
 * rdma-core's docs/rsocket; what an iWARP peer (librdmacm on siw, or us)
 * actually puts on the wire is:
 *
 *  - connection private data (request and reply): struct grs_conn below,
 *    40 bytes, multi-byte fields in network order;
 *  - messages: a 32-bit word, op in bits 31:29, argument in bits 28:0. iWARP
 *    has no RDMA Write with immediate, so librdmacm sends the word as a
 *    4-byte inline Send in the sender's byte order (RS_CONN_FLAG_NET tells
 *    the peer which); data goes first as a plain RDMA Write;
 *  - target SGL / iomap entries the peer RDMA-writes into our memory: 16-byte
 *    {addr, key, length} and 24-byte {offset, sge}, in the writer's byte
 *    order, swapped by the writer when the two hosts differ.
 */
#ifndef GRS_WIRE_H
#define GRS_WIRE_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define GRS_CONN_LEN 40      /* bytes of private data */
#define GRS_CONN_VERSION 1
#define GRS_FLAG_NET 0x01   /* sender is big-endian */
#define GRS_FLAG_IOMAP 0x02 /* sender has an iomap after its target SGL */
#define GRS_SGE_LEN 16
#define GRS_IOMAP_LEN 24
#define GRS_MSG_LEN 4

/* Message ops (bits 31:29). */
enum {
	GRS_OP_DATA = 0,      /* arg: bytes written into the current target buffer */
	GRS_OP_SGL = 4,       /* arg: new credit limit (sequence number); SGL may be updated */
	GRS_OP_IOMAP_SGL = 6, /* arg: index of the iomap entry written */
	GRS_OP_CTRL = 7,      /* arg: one of GRS_CTRL_* */
};
enum { GRS_CTRL_DISCONNECT = 0, GRS_CTRL_KEEPALIVE = 1, GRS_CTRL_SHUTDOWN = 2 };

#define GRS_MSG_ARG_MASK 0x1fffffffu

static inline uint32_t grs_msg(uint32_t op, uint32_t arg)
{
	return (op << 29) | (arg & GRS_MSG_ARG_MASK);
}
static inline uint32_t grs_msg_op(uint32_t m) { return m >> 29; }
static inline uint32_t grs_msg_arg(uint32_t m) { return m & GRS_MSG_ARG_MASK; }

static inline int grs_host_is_be(void)
{
	const uint16_t one = 1;
	return *(const uint8_t *)&one == 0;
}

static inline uint32_t grs_bswap32(uint32_t v) { return __builtin_bswap32(v); }
static inline uint64_t grs_bswap64(uint64_t v) { return __builtin_bswap64(v); }

/* Big-endian load/store, independent of the host. */
static inline void grs_put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static inline void grs_put_be32(uint8_t *p, uint32_t v)
{
	grs_put_be16(p, (uint16_t)(v >> 16));
	grs_put_be16(p + 2, (uint16_t)v);
}
static inline void grs_put_be64(uint8_t *p, uint64_t v)
{
	grs_put_be32(p, (uint32_t)(v >> 32));
	grs_put_be32(p + 4, (uint32_t)v);
}
static inline uint16_t grs_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t grs_be32(const uint8_t *p)
{
	return (uint32_t)grs_be16(p) << 16 | grs_be16(p + 2);
}
static inline uint64_t grs_be64(const uint8_t *p)
{
	return (uint64_t)grs_be32(p) << 32 | grs_be32(p + 4);
}

/* A remote buffer: where to write and with which STag. */
struct grs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

/* One side's connection data. */
struct grs_conn {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;        /* receive credits granted */
	uint8_t iomap_scale;     /* iomap entries, scaled (grs_scale_to_value) */
	struct grs_sge target;   /* our target SGL: length counts entries */
	struct grs_sge data_buf; /* our first receive buffer */
};

/* Layout (offsets): version 0, flags 1, credits 2-3, reserved 4-6, iomap size 7,
 * target_sgl {addr 8, key 16, length 20}, data_buf {addr 24, key 32, length 36}. */
static inline void grs_conn_encode(uint8_t out[GRS_CONN_LEN], const struct grs_conn *c)
{
	memset(out, 0, GRS_CONN_LEN);
	out[0] = c->version;
	out[1] = c->flags;
	grs_put_be16(out + 2, c->credits);
	out[7] = c->iomap_scale;
	grs_put_be64(out + 8, c->target.addr);
	grs_put_be32(out + 16, c->target.key);
	grs_put_be32(out + 20, c->target.length);
	grs_put_be64(out + 24, c->data_buf.addr);
	grs_put_be32(out + 32, c->data_buf.key);
	grs_put_be32(out + 36, c->data_buf.length);
}

/* 0, or EPROTO for data too short or a version we do not speak, EINVAL
 * for a peer that offers nothing to write into (no SGL entry, no buffer). */
static inline int grs_conn_decode(const void *p, size_t len, struct grs_conn *c)
{
	const uint8_t *b = p;

	if (!p || len < GRS_CONN_LEN)
		return EPROTO;
	memset(c, 0, sizeof(*c));
	c->version = b[0];
	if (c->version != GRS_CONN_VERSION)
		return EPROTO;
	c->flags = b[1];
	c->credits = grs_be16(b + 2);
	c->iomap_scale = b[7];
	c->target.addr = grs_be64(b + 8);
	c->target.key = grs_be32(b + 16);
	c->target.length = grs_be32(b + 20);
	c->data_buf.addr = grs_be64(b + 24);
	c->data_buf.key = grs_be32(b + 32);
	c->data_buf.length = grs_be32(b + 36);
	if (c->target.length == 0 || c->target.length > 0xffff || c->credits == 0)
		return EINVAL;
	return 0;
}

/* iomap sizes travel in 8 bits: values up to 128 as they are, larger ones as
 * 0x80 | (value >> 8), i.e. multiples of 256. */
static inline uint8_t grs_value_to_scale(uint32_t v)
{
	if (v <= 128)
		return (uint8_t)v;
	if (v > 0x7f00)
		v = 0x7f00;
	return (uint8_t)(0x80 | (v >> 8));
}
static inline uint32_t grs_scale_to_value(uint8_t s)
{
	return s <= 128 ? s : (uint32_t)(s & 0x7f) << 8;
}

/* An SGE as the peer reads it from its target SGL: in our byte order, or
 * swapped when the peer's order differs (swap). */
static inline void grs_sge_encode(uint8_t out[GRS_SGE_LEN], const struct grs_sge *s, int swap)
{
	uint64_t a = swap ? grs_bswap64(s->addr) : s->addr;
	uint32_t k = swap ? grs_bswap32(s->key) : s->key;
	uint32_t l = swap ? grs_bswap32(s->length) : s->length;

	memcpy(out, &a, 8);
	memcpy(out + 8, &k, 4);
	memcpy(out + 12, &l, 4);
}

/* Entries the peer wrote into our memory are in our byte order already. */
static inline void grs_sge_decode(const uint8_t in[GRS_SGE_LEN], struct grs_sge *s)
{
	memcpy(&s->addr, in, 8);
	memcpy(&s->key, in + 8, 4);
	memcpy(&s->length, in + 12, 4);
}

static inline void grs_iomap_encode(uint8_t out[GRS_IOMAP_LEN], uint64_t offset,
				    const struct grs_sge *s, int swap)
{
	uint64_t o = swap ? grs_bswap64(offset) : offset;

	memcpy(out, &o, 8);
	grs_sge_encode(out + 8, s, swap);
}

static inline void grs_iomap_decode(const uint8_t in[GRS_IOMAP_LEN], uint64_t *offset,
				    struct grs_sge *s)
{
	memcpy(offset, in, 8);
	grs_sge_decode(in + 8, s);
}

#endif
