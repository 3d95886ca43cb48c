/*
 * libFuzzer target: an RC connection's packet translation on the RoCE wire
 * (src/wire/udp/udp_rc.c) driven by arbitrary input, read as a script: requests sent
 * (new ones, and ones sent again after a go-back, as the core does), and packets that
 * arrive (their headers from the input, decoded as the wire decodes a datagram) in
 * either role, each taken or held by a responder that says so at random. Whatever comes,
 * it keeps: no access outside its state (ASan, UBSan); at most UDP_RC_READS READs
 * outstanding; an answer names a request that was sent (its msn at most the last sent);
 * a READ response segment is at a multiple of the MTU and its PSN inside an outstanding
 * READ's; a request in sequence gets the msn the responder expects, and the expected
 * PSN moves only when a request in sequence is taken.
 *
 * Build and run: tests/fuzz/build.sh OUTDIR fuzz_udp_rc, then
 *   OUTDIR/fuzz_udp_rc -max_total_time=60
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "wire/udp/udp_rc.h"

struct in {
	const uint8_t *p;
	size_t n;
};

static uint8_t take8(struct in *in)
{
	uint8_t v = 0;

	if (in->n) {
		v = *in->p++;
		in->n--;
	}
	return v;
}

static uint32_t take32(struct in *in)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v = v << 8 | take8(in);
	return v;
}

/* A request the core would send: @msn, of a kind and length from the input. */
static struct sv_hdr request(struct in *in, uint32_t msn)
{
	static const uint8_t ops[] = { SV_OP_SEND, SV_OP_WRITE, SV_OP_READ_REQ, SV_OP_ATOMIC,
				       SV_OP_TERMINATE };
	uint8_t k = take8(in);
	struct sv_hdr h = { .op = ops[k % sizeof(ops)], .msn = msn };

	h.flags = (uint16_t)((k >> 3) & (SV_F_FIRST | SV_F_LAST | SV_F_IMM | SV_F_SOLICITED));
	h.total = take32(in) % (1u << 20);
	h.len = (uint32_t)(h.total < 4096 ? h.total : 4096);
	h.raddr = take32(in);
	h.rkey = take32(in);
	return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct udp_rc *rc = calloc(1, sizeof(*rc));
	uint32_t sent = 0; /* the last msn sent */
	uint8_t m = take8(&in);

	if (m & 0x80)
		udp_rc_uc(rc); /* (UC: the same packets' UC forms, no answers) */
	udp_rc_rtr(rc, take32(&in), 256u << (m % 5));
	udp_rc_rts(rc, take32(&in));
	while (in.n) {
		uint8_t what = take8(&in);

		if (what % 3 == 0 || (what % 3 == 1 && !sent)) { /* a new request */
			struct sv_hdr h = request(&in, sent + 1);
			struct rv_pkt p = { 0 };

			if (!udp_rc_encode(rc, &h, &p))
				sent++;
			CHECK(rc->n_reads <= UDP_RC_READS);
		} else if (what % 3 == 1) { /* sent again, from an earlier one */
			uint32_t back = take8(&in) % 8, msn = sent > back ? sent - back : 1;
			struct sv_hdr h = request(&in, msn);
			struct rv_pkt p = { 0 };

			if (!udp_rc_encode(rc, &h, &p))
				sent = msn;
			CHECK(rc->n_reads <= UDP_RC_READS);
		} else { /* a packet arrives: its header bytes from the input, a payload */
			uint8_t dg[RV_HDR_MAX + 4096 + 8] = { 0 };
			uint32_t hl = take8(&in) % (RV_HDR_MAX + 1), pl = take32(&in) % 4097;
			uint32_t epsn = rc->epsn, emsn = rc->emsn;
			struct rv_pkt p;
			struct sv_hdr h;
			enum udp_rc_rx r;

			for (uint32_t i = 0; i < hl; i++)
				dg[i] = take8(&in);
			pl -= (hl + pl) & 3;
			if (rv_decode(dg, hl + pl + RV_ICRC, &p))
				continue;
			r = udp_rc_decode(rc, &p, 7, &h);
			CHECK(h.src_qpn == 7);
			if (r == UDP_RC_ANSWER) {
				CHECK(rc->cls != RV_UC); /* (UC has no answers) */
				CHECK(h.op > SV_OP_REQ_MAX);
				CHECK(!sent || (int32_t)(h.msn - sent) <= 0);
				if (h.op == SV_OP_READ_RESP) {
					CHECK(h.offset % rc->mtu == 0);
					CHECK(h.len <= rc->mtu);
					udp_rc_answered(rc, &h);
				}
				CHECK(rc->n_reads <= UDP_RC_READS);
			} else if (r == UDP_RC_REQUEST) {
				CHECK(h.op < SV_OP_REQ_MAX);
				if (rc->cls == RV_UC) { /* taken in order: a start anywhere, the rest after it */
					CHECK(h.msn == 0 && rc->epsn == p.psn);
					CHECK(h.op == SV_OP_SEND || h.op == SV_OP_WRITE);
					epsn = rc->epsn;
				} else if (p.psn == epsn) {
					CHECK(h.msn == emsn);
				}
				udp_rc_arrived(rc, &p, &h);
				if (take8(&in) % 2) { /* the responder took it */
					udp_rc_taken(rc, &p, &h);
					if (p.psn != epsn)
						CHECK(rc->epsn == epsn && rc->emsn == emsn);
				}
			}
			/* (UC: a message's first packet, even dropped, restarts the sequence) */
			if (r == UDP_RC_ANSWER || (r == UDP_RC_DROP && rc->cls != RV_UC))
				CHECK(rc->epsn == epsn && rc->emsn == emsn);
		}
	}
	free(rc);
	return 0;
}
