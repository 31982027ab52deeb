/* Unit tests of rsockets/rsocket_wire.h: the rsocket connection data, messages
 * and SGL/iomap entries, against byte strings written out by hand from
 * rdma-core's docs/rsocket (field by field, network order where the protocol
 * says so). Table-driven; also every truncated prefix of a valid connection
 * data is refused, and random input never decodes into a zero-entry SGL. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giw_test.h"
#include "../../rsockets/rsocket_wire.h"

static const uint8_t conn_bytes[GRS_CONN_LEN] = {
	0x01,                                           /* version */
	0x02,                                           /* flags: IOMAP, little-endian sender */
	0x01, 0x80,                                     /* credits 384 */
	0x00, 0x00, 0x00,                               /* reserved */
	0x81,                                           /* iomap size: scale of 256 */
	0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x78, 0x90, /* target_sgl.addr */
	0xaa, 0xbb, 0xcc, 0xdd,                         /* target_sgl.key */
	0x00, 0x00, 0x00, 0x02,                         /* target_sgl.length: 2 entries */
	0x00, 0x00, 0x7f, 0x00, 0x00, 0x01, 0x00, 0x00, /* data_buf.addr */
	0x11, 0x22, 0x33, 0x44,                         /* data_buf.key */
	0x00, 0x01, 0x00, 0x00,                         /* data_buf.length 64 KiB */
};

static const struct grs_conn conn_fields = {
	.version = 1,
	.flags = GRS_FLAG_IOMAP,
	.credits = 384,
	.iomap_scale = 0x81,
	.target = { 0x00007f1234567890ull, 0xaabbccdd, 2 },
	.data_buf = { 0x00007f0000010000ull, 0x11223344, 0x10000 },
};

static void test_conn(void)
{
	uint8_t out[GRS_CONN_LEN], bad[GRS_CONN_LEN];
	struct grs_conn c;

	grs_conn_encode(out, &conn_fields);
	CHECK(memcmp(out, conn_bytes, sizeof(out)) == 0);
	CHECK(grs_conn_decode(conn_bytes, sizeof(conn_bytes), &c) == 0);
	CHECK(c.version == 1 && c.flags == GRS_FLAG_IOMAP && c.credits == 384 && c.iomap_scale == 0x81);
	CHECK(c.target.addr == conn_fields.target.addr && c.target.key == conn_fields.target.key &&
	      c.target.length == 2);
	CHECK(c.data_buf.addr == conn_fields.data_buf.addr &&
	      c.data_buf.key == conn_fields.data_buf.key && c.data_buf.length == 0x10000);

	/* longer private data (MPA may pad) is fine: the first 40 bytes count */
	uint8_t longer[64] = { 0 };
	memcpy(longer, conn_bytes, sizeof(conn_bytes));
	CHECK(grs_conn_decode(longer, sizeof(longer), &c) == 0);

	/* every truncated prefix is refused */
	for (size_t n = 0; n < GRS_CONN_LEN; n++)
		CHECK(grs_conn_decode(conn_bytes, n, &c) == EPROTO);
	CHECK(grs_conn_decode(NULL, GRS_CONN_LEN, &c) == EPROTO);

	static const struct {
		size_t off;
		uint8_t val;
		int want;
	} cases[] = {
		{ 0, 0x00, EPROTO }, /* version 0 */
		{ 0, 0x02, EPROTO }, /* version 2 */
		{ 1, 0x03, 0 },      /* NET | IOMAP: big-endian peer, fine */
		{ 1, 0x00, 0 },      /* no iomap */
		{ 2, 0x00, 0 },      /* credits 0x0080 */
		{ 23, 0x00, EINVAL },/* target_sgl.length 0 */
		{ 4, 0xff, 0 },      /* reserved bytes are ignored */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(bad, conn_bytes, sizeof(bad));
		bad[cases[i].off] = cases[i].val;
		if (grs_conn_decode(bad, sizeof(bad), &c) != cases[i].want) {
			fprintf(stderr, "conn case %zu: byte %zu = 0x%02x\n", i, cases[i].off, cases[i].val);
			failures++;
		}
	}
	memcpy(bad, conn_bytes, sizeof(bad));
	bad[2] = bad[3] = 0; /* no credits */
	CHECK(grs_conn_decode(bad, sizeof(bad), &c) == EINVAL);
	memcpy(bad, conn_bytes, sizeof(bad));
	bad[21] = 0x01; /* 65538 SGL entries */
	CHECK(grs_conn_decode(bad, sizeof(bad), &c) == EINVAL);
}

static void test_msg(void)
{
	static const struct {
		uint32_t op, arg, word;
	} cases[] = {
		{ GRS_OP_DATA, 0, 0x00000000 },
		{ GRS_OP_DATA, 65536, 0x00010000 },
		{ GRS_OP_DATA, 0x1fffffff, 0x1fffffff },
		{ GRS_OP_SGL, 384, 0x80000180 },
		{ GRS_OP_SGL, 0xffff, 0x8000ffff },
		{ GRS_OP_IOMAP_SGL, 3, 0xc0000003 },
		{ GRS_OP_CTRL, GRS_CTRL_DISCONNECT, 0xe0000000 },
		{ GRS_OP_CTRL, GRS_CTRL_KEEPALIVE, 0xe0000001 },
		{ GRS_OP_CTRL, GRS_CTRL_SHUTDOWN, 0xe0000002 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint32_t w = grs_msg(cases[i].op, cases[i].arg);

		if (w != cases[i].word || grs_msg_op(w) != cases[i].op || grs_msg_arg(w) != cases[i].arg) {
			fprintf(stderr, "msg case %zu: got 0x%08x\n", i, w);
			failures++;
		}
	}
	/* an argument too wide never spills into the op */
	CHECK(grs_msg_op(grs_msg(GRS_OP_DATA, 0xffffffff)) == GRS_OP_DATA);
}

static void test_scale(void)
{
	static const struct {
		uint32_t value;
		uint8_t scale;
		uint32_t back;
	} cases[] = {
		{ 0, 0, 0 }, { 1, 1, 1 }, { 128, 128, 128 }, { 129, 0x80, 128 },
		{ 256, 0x81, 256 }, { 300, 0x81, 256 }, { 512, 0x82, 512 },
		{ 0x7f00, 0xff, 0x7f00 }, { 0x10000, 0xff, 0x7f00 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t s = grs_value_to_scale(cases[i].value);

		if (s != cases[i].scale || grs_scale_to_value(s) != cases[i].back) {
			fprintf(stderr, "scale case %zu: %u -> 0x%02x -> %u\n", i, cases[i].value, s,
				grs_scale_to_value(s));
			failures++;
		}
	}
}

static void test_sge(void)
{
	const struct grs_sge s = { 0x0102030405060708ull, 0x0a0b0c0d, 0x00100000 };
	uint8_t b[GRS_SGE_LEN], m[GRS_IOMAP_LEN];
	struct grs_sge d;
	uint64_t off;

	/* same byte order: the peer reads our native layout {addr, key, length} */
	grs_sge_encode(b, &s, 0);
	grs_sge_decode(b, &d);
	CHECK(d.addr == s.addr && d.key == s.key && d.length == s.length);
	/* swapped for a peer of the other order: what it decodes natively */
	grs_sge_encode(b, &s, 1);
	grs_sge_decode(b, &d);
	CHECK(d.addr == __builtin_bswap64(s.addr) && d.key == __builtin_bswap32(s.key) &&
	      d.length == __builtin_bswap32(s.length));
	if (!grs_host_is_be()) {
		static const uint8_t le[GRS_SGE_LEN] = { 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
							 0x0d, 0x0c, 0x0b, 0x0a, 0x00, 0x00, 0x10, 0x00 };
		grs_sge_encode(b, &s, 0);
		CHECK(memcmp(b, le, sizeof(le)) == 0);
	}
	grs_iomap_encode(m, 0x4000, &s, 0);
	grs_iomap_decode(m, &off, &d);
	CHECK(off == 0x4000 && d.addr == s.addr && d.key == s.key && d.length == s.length);
}

/* Random private data: decode never reports success for a peer that offers
 * no SGL entry or no credits, and never reads past 40 bytes (ASan builds). */
static void test_random(void)
{
	uint8_t *b = malloc(GRS_CONN_LEN);
	struct grs_conn c;
	unsigned seed = 12;

	REQUIRE(b);
	for (int i = 0; i < 200000; i++) {
		for (int j = 0; j < GRS_CONN_LEN; j++)
			b[j] = (uint8_t)rand_r(&seed);
		if (i & 1)
			b[0] = GRS_CONN_VERSION;
		if (grs_conn_decode(b, GRS_CONN_LEN, &c) == 0)
			CHECK(c.version == GRS_CONN_VERSION && c.target.length > 0 &&
			      c.target.length <= 0xffff && c.credits > 0);
	}
	free(b);
}

int main(void)
{
	test_conn();
	test_msg();
	test_scale();
	test_sge();
	test_random();
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	else
		printf("PASS\n");
	return failures != 0;
}
