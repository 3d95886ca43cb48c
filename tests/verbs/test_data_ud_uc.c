/*
 * UD and UC data paths between two processes, black-box (sv_test_peer.h).
 *
 * What is asserted:
 * - UD (IBA 10.2.4, ibv_poll_cq(3), ibv_init_ah_from_wc(3)): the receiver finds a
 *   40-byte GRH in front of the data: byte_len is the message length + 40, IBV_WC_GRH is
 *   set, the GRH's SGID is the sender's GID at the AH's sgid_index and its DGID the AH's
 *   DGID; every other completion field is right too (tp_check_wc: src_qp, slid, qp_num,
 *   wc_flags exactly GRH, pkey_index, sl, dlid_path_bits); ibv_init_ah_from_wc makes an AH that
 *   reaches the sender back. A Q_Key mismatch drops the datagram (it consumes no
 *   receive); a Q_Key with the high bit set in the WR means the sending QP's own (IBA
 *   10.2.5). A LID-only AH reaches the destination too. A datagram larger than the path
 *   MTU fails with IBV_WC_LOC_LEN_ERR; a send error takes a UD or UC QP to SQE, not ERR,
 *   and its receive queue keeps working (IBA 10.3.1).
 * - UC: SEND (through the ring and pulled), WRITE and WRITE_WITH_IMM with their data and
 *   every completion field (slid, src_qp, wc_flags, pkey_index, sl, ... as tp_check_wc); a SEND's buffer is the sender's again once its completion is
 *   polled; a WRITE with a bad rkey is dropped by the responder (UC has no NAK): the
 *   requester completes, nothing is written, the responder's QP carries on.
 */
#include "verbs/sv_test_peer.h"
#include "wire/sv_qpn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_LEN (1u << 20)
#define W TP_WAIT_MS
#define GRH 40
#define QKEY 0x11111111u /* tu_conn_init's */

static const struct tp_qp_opts ud_opts = { .type = IBV_QPT_UD };
static const struct tp_qp_opts uc_opts = { .type = IBV_QPT_UC };

static void expect_gid(const union ibv_gid *got, const union ibv_gid *want, const char *field,
		       const char *what)
{
	char g[64], w[64];

	if (!memcmp(got, want, sizeof(*got)))
		return;
	inet_ntop(AF_INET6, got->raw, g, sizeof(g));
	inet_ntop(AF_INET6, want->raw, w, sizeof(w));
	fail_msg("%s: %s is %s, expected %s", what, field, g, w);
}

/* A datagram to the agent's QP: global AH from our GID @sgid_index to @dgid. */
static struct tp_wr dgram(const struct tp_pair *x, uint64_t id, uint32_t off, uint32_t len,
			  uint8_t sgid_index, const union ibv_gid *dgid, uint32_t qkey)
{
	struct tp_wr w = tp_wr1(id, IBV_WR_SEND, off, len);

	w.ah.is_global = 1;
	w.ah.grh.dgid = *dgid;
	w.ah.grh.sgid_index = sgid_index;
	w.ah.grh.hop_limit = 64;
	w.ah.dlid = x->pi.lid;
	w.ah.port_num = 1;
	w.remote_qpn = x->pi.qpn;
	w.remote_qkey = qkey;
	return w;
}

static struct tp_pair *pair_of(void **state, const struct tp_qp_opts *o)
{
	struct tp_pair *x = *state;

	tp_pair_open(x, BUF_LEN, o, NULL);
	tp_pair_connect(x);
	return x;
}

/* A send error moves a QP out of RTS by itself: the state it settles in. */
static enum ibv_qp_state state_after_rts(struct ibv_qp *qp)
{
	long long end = tu_now_ms() + W;
	enum ibv_qp_state s;

	while ((s = tu_query_state(qp)) == IBV_QPS_RTS && tu_now_ms() < end)
		sched_yield();
	return s;
}

static const char *state_str(enum ibv_qp_state s)
{
	static const char *const name[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return (unsigned int)s < ARRAY_LEN(name) ? name[s] : "?";
}

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return 128u << m; /* IBV_MTU_256 is 1 */
}

/* A datagram's receive completion at @to from @from: every field. byte_len is the message
 * + the 40-byte GRH, wc_flags exactly IBV_WC_GRH (softverbs' port is Ethernet: every
 * datagram carries a GRH), src_qp and slid the sender's, pkey_index the receiving QP's
 * (0), sl and dlid_path_bits 0. */
static void check_ud_wc_imm(const struct ibv_wc *wc, const struct tp_info *to,
			    const struct tp_info *from, uint32_t len, bool imm, uint32_t imm_data,
			    const char *what)
{
	struct tp_wc_expect e = tp_recv_expect(wc->wr_id, to, from, IBV_WC_RECV, len + GRH);

	e.wc_flags = IBV_WC_GRH | (imm ? IBV_WC_WITH_IMM : 0);
	e.imm_data = imm_data;
	tp_check_wc(wc, &e, what);
}

static void check_ud_wc(const struct ibv_wc *wc, const struct tp_info *to,
			const struct tp_info *from, uint32_t len, const char *what)
{
	check_ud_wc_imm(wc, to, from, len, false, 0, what);
}

/* A datagram's receive completion at the agent, and its GRH; @w: the WR sent (its
 * immediate data), NULL for a plain SEND. */
static void check_ud_recv_of(struct tp_pair *x, uint64_t id, uint32_t len, uint32_t roff,
			     const union ibv_gid *sgid, const union ibv_gid *dgid,
			     const struct tp_wr *w, const char *what)
{
	struct ibv_wc wc;
	struct ibv_grh grh;

	tp_expect_peer_wc(&x->peer, false, id, IBV_WC_SUCCESS, &wc);
	check_ud_wc_imm(&wc, &x->pi, &x->li, len, w && w->opcode == IBV_WR_SEND_WITH_IMM,
			w ? w->imm : 0, what);
	if (sgid) {
		tp_peek(&x->peer, roff, &grh, sizeof(grh));
		expect_gid(&grh.sgid, sgid, "the GRH's SGID", what);
		expect_gid(&grh.dgid, dgid, "the GRH's DGID", what);
	}
}

static void check_ud_recv(struct tp_pair *x, uint64_t id, uint32_t len, uint32_t roff,
			  const union ibv_gid *sgid, const union ibv_gid *dgid, const char *what)
{
	check_ud_recv_of(x, id, len, roff, sgid, dgid, NULL, what);
}

/* ---- UD ------------------------------------------------------------------------------------ */

static void test_ud_grh_and_completion_fields(void **state)
{
	struct tp_pair *x = pair_of(state, &ud_opts);
	const uint32_t mtu = mtu_bytes(x->ep.res->port.active_mtu);
	const uint32_t lens[] = { 0, 1, 1000, mtu };

	for (unsigned int k = 0; k < ARRAY_LEN(lens); k++) {
		struct tp_wr w = dgram(x, k, 0, lens[k], 0, &x->pi.gid, QKEY);
		char what[64];

		snprintf(what, sizeof(what), "UD SEND of %u bytes", lens[k]);
		if (k == 1) {
			w.opcode = IBV_WR_SEND_WITH_IMM;
			w.imm = htonl(0xfeed);
		}
		tp_fill(x->ep.buf, lens[k], 10 + k, 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, k,
					      &(struct tp_sge){ 0, mtu + GRH }, 1), 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		check_ud_recv_of(x, k, lens[k], 0, &x->li.gid, &x->pi.gid, &w, what);
		tp_check_peer(&x->peer, GRH, lens[k], 10 + k, 0, what);
	}
	tp_pair_stop(x);
}

/*
 * A UD QP whose number lies in a QPN block the iWARP wire claimed is reachable: the agent's
 * first QP is an RC QP on iWARP (SOFTVERBS_WIRE=iwarp, which the agent inherits), so that
 * wire opened the block, and its UD QP (on shm, as UD always is) takes the next number of
 * the same block. The block's attach socket used to hang up on every shm peer, and the
 * datagram was lost (UCX over SOFTVERBS_WIRE=iwarp: its first QP is an RC probe, and its
 * UD wire-up never completed).
 */
static void test_ud_qp_in_a_block_of_the_iwarp_wire(void **state)
{
	static const struct tp_qp_opts rc_opts = { .type = IBV_QPT_RC };
	struct tp_pair *x = *state;
	const char *was = getenv("SOFTVERBS_WIRE");
	char saved[16] = "";
	struct tp_wr w;
	int rq;

	if (was)
		snprintf(saved, sizeof(saved), "%s", was);
	setenv("SOFTVERBS_WIRE", "iwarp", 1);
	tp_start(&x->peer);
	if (*saved)
		setenv("SOFTVERBS_WIRE", saved, 1);
	else
		unsetenv("SOFTVERBS_WIRE");
	tp_open(&x->peer, BUF_LEN, 0);
	rq = tp_create_qp(&x->peer, &rc_opts);
	x->pq = tp_create_qp(&x->peer, &ud_opts);
	tp_info(&x->peer, x->pq, &x->pi);
	tp_info(&x->peer, rq, &x->li); /* (only to compare the blocks) */
	/* A fresh process numbers its first QPs from one block (sv_qpn_alloc). */
	if (x->li.qpn >> SV_QPN_BLOCK_BITS != x->pi.qpn >> SV_QPN_BLOCK_BITS)
		fail_msg("the agent's RC QP %u and UD QP %u are in different blocks", x->li.qpn,
			 x->pi.qpn);
	tp_ep_open(&x->ep, BUF_LEN, 0);
	x->lq = tp_ep_create_qp(&x->ep, &ud_opts);
	tp_ep_info(&x->ep, x->lq, &x->li);
	tp_conn(&x->ep, &x->li, &x->pi, &x->lc);
	tp_conn(&x->ep, &x->pi, &x->li, &x->pc);
	tp_pair_connect(x);
	w = dgram(x, 1, 0, 256, 0, &x->pi.gid, QKEY);
	tp_fill(x->ep.buf, 256, 77, 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0, 256 + GRH }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	check_ud_recv(x, 1, 256, 0, NULL, NULL, "a datagram to a UD QP in the iWARP wire's block");
	tp_check_peer(&x->peer, GRH, 256, 77, 0, "a datagram to a UD QP in the iWARP wire's block");
	tp_pair_stop(x);
}

/* The SGID is the sender's GID at the AH's sgid_index, the DGID the AH's. */
static bool is_v4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(g->raw, prefix, sizeof(prefix));
}

static void test_ud_grh_follows_the_ah(void **state)
{
	struct tp_pair *x = pair_of(state, &ud_opts);
	union ibv_gid g1, g2;
	struct tp_wr w;

	if (ibv_query_gid(x->ep.res->ctx, 1, 1, &g1) || ibv_query_gid(x->ep.res->ctx, 1, 2, &g2)) {
		tp_pair_stop(x);
		skip(); /* this host has fewer than 3 addresses */
	}
	if (getenv("SOFTVERBS_UDP") && !strcmp(getenv("SOFTVERBS_UDP"), "all") &&
	    is_v4_mapped(&g1) != is_v4_mapped(&g2)) {
		tp_pair_stop(x);
		skip(); /* over UDP an IPv4 source to an IPv6 destination is no IP packet */
	}
	w = dgram(x, 1, 0, 64, 1, &g2, QKEY);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0, 4096 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	check_ud_recv(x, 1, 64, 0, &g1, &g2, "UD SEND from sgid_index 1 to GID 2");
	tp_pair_stop(x);
}

/* ibv_init_ah_from_wc(3): the AH made from a received datagram reaches its sender. */
static void test_ud_reply_with_ah_from_wc(void **state)
{
	struct tp_pair *x = pair_of(state, &ud_opts);
	struct tp_wr w = dgram(x, 1, 0, 100, 0, &x->pi.gid, QKEY);
	struct ibv_ah_attr ah;
	struct ibv_wc wc;
	struct ibv_ah *reply;
	struct ibv_sge sge = { (uintptr_t)x->ep.buf, 32, x->ep.mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	/* The agent sends to us. */
	w.ah.grh.dgid = x->li.gid;
	w.ah.dlid = x->li.lid;
	w.remote_qpn = x->li.qpn;
	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 7, &(struct tp_sge){ 8192, 4096 }, 1), 0);
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 1, IBV_WC_SUCCESS, NULL);
	tp_expect_wc(x->ep.rcq, 7, IBV_WC_SUCCESS, W, &wc);
	check_ud_wc(&wc, &x->li, &x->pi, 100, "datagram from the agent");
	memset(&ah, 0, sizeof(ah));
	assert_int_equal(ibv_init_ah_from_wc(x->ep.res->ctx, 1, &wc,
					     (struct ibv_grh *)(x->ep.buf + 8192), &ah), 0);
	expect_gid(&ah.grh.dgid, &x->pi.gid, "dgid", "AH from the agent's datagram");
	reply = ibv_create_ah_from_wc(x->ep.res->pd, &wc, (struct ibv_grh *)(x->ep.buf + 8192), 1);
	assert_non_null(reply);
	swr.wr.ud.ah = reply;
	swr.wr.ud.remote_qpn = wc.src_qp;
	swr.wr.ud.remote_qkey = QKEY;
	tp_fill(x->ep.buf, 32, 5, 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 3, &(struct tp_sge){ 0, 4096 }, 1), 0);
	assert_int_equal(ibv_post_send(x->ep.qp[x->lq], &swr, &bad), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	check_ud_recv(x, 3, 32, 0, NULL, NULL, "reply through an AH from a WC");
	tp_check_peer(&x->peer, GRH, 32, 5, 0, "reply through an AH from a WC");
	assert_int_equal(ibv_destroy_ah(reply), 0);
	tp_pair_stop(x);
}

/* IBA 10.2.4: a datagram whose Q_Key differs from the receiving QP's is dropped; it
 * consumes no receive, so the next good one lands in the receive that was waiting. */
static void test_ud_qkey(void **state)
{
	struct tp_pair *x = pair_of(state, &ud_opts);
	struct tp_wr w;
	int other;
	struct tp_info oi;
	struct tu_conn c;

	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0, 4096 }, 1), 0);
	tp_fill(x->ep.buf, 100, 1, 0);
	w = dgram(x, 1, 0, 100, 0, &x->pi.gid, 0x22222222);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_fill(x->ep.buf + 4096, 100, 2, 0);
	w = dgram(x, 2, 4096, 100, 0, &x->pi.gid, QKEY);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	/* Both complete at the sender: UD does not know what the receiver did. */
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	check_ud_recv(x, 1, 100, 0, NULL, NULL, "datagram after one with a wrong Q_Key");
	tp_check_peer(&x->peer, GRH, 100, 2, 0, "the receive after a wrong Q_Key");

	/* High bit set: the sending QP's own Q_Key, which here is the receiver's. */
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 2, &(struct tp_sge){ 0, 4096 }, 1), 0);
	tp_fill(x->ep.buf, 100, 3, 0);
	w = dgram(x, 3, 0, 100, 0, &x->pi.gid, 0x80000000u);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 3, IBV_WC_SUCCESS, W, NULL);
	check_ud_recv(x, 2, 100, 0, NULL, NULL, "datagram with Q_Key 0x80000000");
	tp_check_peer(&x->peer, GRH, 100, 3, 0, "datagram with Q_Key 0x80000000");

	/* A sender whose own Q_Key differs: the same WR is dropped. */
	other = tp_ep_create_qp(&x->ep, &ud_opts);
	tp_ep_info(&x->ep, other, &oi);
	tp_conn(&x->ep, &oi, &x->pi, &c);
	c.qkey = 0x33333333;
	assert_int_equal(tu_qp_connect(x->ep.qp[other], &c, IBV_QPS_RTS), 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 3, &(struct tp_sge){ 0, 4096 }, 1), 0);
	w = dgram(x, 4, 0, 100, 0, &x->pi.gid, 0x80000000u);
	assert_int_equal(tp_ep_post_send(&x->ep, other, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 4, IBV_WC_SUCCESS, W, NULL);
	tp_fill(x->ep.buf + 4096, 100, 5, 0);
	w = dgram(x, 5, 4096, 100, 0, &x->pi.gid, QKEY);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 5, IBV_WC_SUCCESS, W, NULL);
	check_ud_recv(x, 3, 100, 0, NULL, NULL, "datagram after one with the sender's Q_Key");
	tp_check_peer(&x->peer, GRH, 100, 5, 0, "datagram after one with the sender's Q_Key");
	tp_pair_stop(x);
}

/* An AH with a LID and no GRH (is_global 0). */
static void test_ud_lid_only_ah(void **state)
{
	struct tp_pair *x = pair_of(state, &ud_opts);
	struct tp_wr w = dgram(x, 1, 0, 300, 0, &x->pi.gid, QKEY);

	memset(&w.ah, 0, sizeof(w.ah));
	w.ah.dlid = x->pi.lid;
	w.ah.port_num = 1;
	tp_fill(x->ep.buf, 300, 9, 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0, 4096 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	check_ud_recv(x, 1, 300, 0, NULL, NULL, "datagram through a LID-only AH");
	tp_check_peer(&x->peer, GRH, 300, 9, 0, "datagram through a LID-only AH");
	tp_pair_stop(x);
}

/* A UD message is one packet: larger than the path MTU is a local length error. IBA
 * 10.3.1: a send error takes a UD QP to SQE; its receive queue keeps working. */
static void test_ud_larger_than_mtu(void **state)
{
	struct tp_pair *x = pair_of(state, &ud_opts);
	const uint32_t mtu = mtu_bytes(x->ep.res->port.active_mtu);
	struct tp_wr w = dgram(x, 1, 0, mtu + 1, 0, &x->pi.gid, QKEY);
	struct ibv_wc wc;

	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 9, &(struct tp_sge){ 65536, 4096 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	enum ibv_qp_state s;

	tp_expect_wc(x->ep.scq, 1, IBV_WC_LOC_LEN_ERR, W, NULL);
	s = state_after_rts(x->ep.qp[x->lq]);
	if (s != IBV_QPS_SQE)
		fail_msg("a UD QP whose send failed is in %s, expected SQE (IBA 10.3.1)",
			 state_str(s));
	/* The receive queue: the posted receive was not flushed and takes a datagram. */
	tp_expect_no_wc(x->ep.rcq, 0, "receive queue of a UD QP in SQE");
	w = dgram(x, 2, 0, 50, 0, &x->li.gid, QKEY);
	w.ah.dlid = x->li.lid;
	w.remote_qpn = x->li.qpn;
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 2, IBV_WC_SUCCESS, NULL);
	tp_expect_wc(x->ep.rcq, 9, IBV_WC_SUCCESS, W, &wc);
	check_ud_wc(&wc, &x->li, &x->pi, 50, "datagram to a UD QP in SQE");
	tp_pair_stop(x);
}

/* ---- UC ------------------------------------------------------------------------------------ */

static void check_uc_recv(struct tp_pair *x, uint64_t id, enum ibv_wc_opcode op, uint32_t len,
			  bool imm, uint32_t imm_data, const char *what)
{
	struct ibv_wc wc;
	struct tp_wc_expect e;

	tp_expect_peer_wc(&x->peer, false, id, IBV_WC_SUCCESS, &wc);
	/* Every field: slid the sender's LID, src_qp its QP (softverbs: the connected
	 * peer), no GRH flag (connected), IMM only if sent with one. */
	e = tp_recv_expect(id, &x->pi, &x->li, op, len);
	if (imm) {
		e.wc_flags = IBV_WC_WITH_IMM;
		e.imm_data = imm_data;
	}
	tp_check_wc(&wc, &e, what);
}

static void test_uc_send_write_write_imm(void **state)
{
	struct tp_pair *x = pair_of(state, &uc_opts);
	const uint32_t lens[] = { 0, 1, 8192, 8193, 65536 };

	for (unsigned int k = 0; k < ARRAY_LEN(lens); k++) {
		bool imm = k % 2 && !tu_wire_iwarp(); /* iWARP: no Send with Immediate */
		struct tp_wr w = tp_wr1(k, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, 0, lens[k]);
		char what[64];

		snprintf(what, sizeof(what), "UC SEND of %u bytes", lens[k]);
		w.imm = htonl(0x1000 + k);
		tp_fill(x->ep.buf, lens[k], 20 + k, 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, k, &(struct tp_sge){ 0, 65536 }, 1),
				 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		check_uc_recv(x, k, IBV_WC_RECV, lens[k], imm, w.imm, what);
		tp_check_peer(&x->peer, 0, lens[k], 20 + k, 0, what);
	}
	/* A UC requester's completion says the message left, not that it was placed: the
	 * WRITE is checked once the WRITE_WITH_IMM after it arrived (one QP's messages are
	 * placed in order). */
	for (unsigned int k = 0; k < ARRAY_LEN(lens); k++) {
		struct tp_wr w[2] = { tp_wr1(10 + k, IBV_WR_RDMA_WRITE, 0, lens[k]),
				      tp_wr1(20 + k, IBV_WR_RDMA_WRITE_WITH_IMM, 65536, lens[k]) };
		struct ibv_wc wc;
		char what[64], what_imm[64];

		snprintf(what, sizeof(what), "UC WRITE of %u bytes", lens[k]);
		snprintf(what_imm, sizeof(what_imm), "UC WRITE_WITH_IMM of %u bytes", lens[k]);
		w[0].remote_addr = x->pi.addr + 100000;
		w[1].remote_addr = x->pi.addr + 200000;
		w[0].rkey = w[1].rkey = x->pi.rkey;
		w[1].imm = htonl(0x2000 + k);
		tp_fill(x->ep.buf, lens[k], 30 + k, 0);
		tp_fill(x->ep.buf + 65536, lens[k], 40 + k, 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 20 + k, NULL, 0), 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, NULL), 0);
		tp_expect_wc(x->ep.scq, 10 + k, IBV_WC_SUCCESS, W, &wc);
		tp_expect_eq(wc.opcode, IBV_WC_RDMA_WRITE, "opcode", what);
		tp_expect_wc(x->ep.scq, 20 + k, IBV_WC_SUCCESS, W, &wc);
		tp_expect_eq(wc.opcode, IBV_WC_RDMA_WRITE, "opcode", what_imm);
		check_uc_recv(x, 20 + k, IBV_WC_RECV_RDMA_WITH_IMM, lens[k], true, w[1].imm, what_imm);
		tp_check_peer(&x->peer, 200000, lens[k], 40 + k, 0, what_imm);
		tp_check_peer(&x->peer, 100000, lens[k], 30 + k, 0, what);
	}
	tp_pair_stop(x);
}

/* ibv_post_send(3)/IBA 10.8.3: once a send's completion is polled its buffer is the
 * application's again. The next bytes written there must not reach the receiver. */
static void test_uc_send_buffer_reusable_after_completion(void **state)
{
	struct tp_pair *x = pair_of(state, &uc_opts);
	const uint32_t lens[] = { 4096, 65536 };

	for (unsigned int k = 0; k < ARRAY_LEN(lens); k++) {
		struct tp_wr w = tp_wr1(k, IBV_WR_SEND, 0, lens[k]);
		char what[80];

		snprintf(what, sizeof(what), "UC SEND of %u bytes, buffer rewritten after its "
			 "completion", lens[k]);
		tp_fill(x->ep.buf, lens[k], 50 + k, 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, k, &(struct tp_sge){ 0, 65536 }, 1),
				 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		memset(x->ep.buf, 0xee, lens[k]);
		check_uc_recv(x, k, IBV_WC_RECV, lens[k], false, 0, what);
		tp_check_peer(&x->peer, 0, lens[k], 50 + k, 0, what);
	}
	tp_pair_stop(x);
}

/* UC has no acknowledgements: a WRITE the responder refuses is lost without a trace at
 * the requester, and the responder drops it and carries on. */
static void test_uc_write_with_bad_rkey_is_dropped(void **state)
{
	struct tp_pair *x = pair_of(state, &uc_opts);
	struct tp_wr w = tp_wr1(1, IBV_WR_RDMA_WRITE, 0, 100);

	tp_fill_peer(&x->peer, 0, 100, 60, 0);
	tp_fill(x->ep.buf, 100, 61, 0);
	w.remote_addr = x->pi.addr;
	w.rkey = x->pi.rkey ^ 0x00100000;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	/* Both still move data: a SEND after it arrives (and, placed in order, shows that
	 * the WRITE was handled before it). */
	w = tp_wr1(2, IBV_WR_SEND, 0, 100);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 2, &(struct tp_sge){ 4096, 4096 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	check_uc_recv(x, 2, IBV_WC_RECV, 100, false, 0, "UC SEND after a dropped WRITE");
	tp_check_peer(&x->peer, 4096, 100, 61, 0, "UC SEND after a dropped WRITE");
	tp_check_peer(&x->peer, 0, 100, 60, 0, "target of a UC WRITE with a bad rkey");
	tp_expect_eq(tp_state(&x->peer, x->pq), IBV_QPS_RTS, "responder's state",
		  "after a UC WRITE with a bad rkey");
	tp_expect_eq(tu_query_state(x->ep.qp[x->lq]), IBV_QPS_RTS, "requester's state",
		  "after a UC WRITE with a bad rkey");
	tp_pair_stop(x);
}

/* IBA 10.3.1: a UC send error (here a bad lkey) takes the QP to SQE; the rest of the send
 * queue flushes, the receive queue keeps working. */
static void test_uc_send_error_goes_to_sqe(void **state)
{
	struct tp_pair *x = pair_of(state, &uc_opts);
	struct tp_wr w[2] = { tp_wr1(1, IBV_WR_SEND, 0, 100), tp_wr1(2, IBV_WR_SEND, 0, 100) };
	struct tp_wc_expect e;
	enum ibv_qp_state s;

	w[0].lkey_xor = 0x00100000;
	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 9, &(struct tp_sge){ 65536, 4096 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_LOC_PROT_ERR, W, NULL);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_WR_FLUSH_ERR, W, NULL);
	s = state_after_rts(x->ep.qp[x->lq]);
	if (s != IBV_QPS_SQE)
		fail_msg("a UC QP whose send failed is in %s, expected SQE (IBA 10.3.1)",
			 state_str(s));
	tp_expect_no_wc(x->ep.rcq, 0, "receive queue of a UC QP in SQE");
	w[0] = tp_wr1(3, IBV_WR_SEND, 0, 64);
	assert_int_equal(tp_post_send(&x->peer, x->pq, w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 3, IBV_WC_SUCCESS, NULL);
	e = tp_recv_expect(9, &x->li, &x->pi, IBV_WC_RECV, 64);
	tp_expect_wc_full(x->ep.rcq, &e, W, "UC SEND to a QP in SQE", NULL);
	tp_pair_stop(x);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tp_pair_setup, tp_pair_teardown)
		T(test_ud_grh_and_completion_fields),
		T(test_ud_qp_in_a_block_of_the_iwarp_wire),
		T(test_ud_grh_follows_the_ah),
		T(test_ud_reply_with_ah_from_wc),
		T(test_ud_qkey),
		T(test_ud_lid_only_ah),
		T(test_ud_larger_than_mtu),
		T(test_uc_send_write_write_imm),
		T(test_uc_send_buffer_reusable_after_completion),
		T(test_uc_write_with_bad_rkey_is_dropped),
		T(test_uc_send_error_goes_to_sqe),
#undef T
	};

	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
