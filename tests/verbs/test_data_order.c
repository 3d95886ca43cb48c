/*
 * Ordering of RDMA operations on one RC QP (IBA 9.5): a READ posted after WRITEs returns
 * what they wrote, whatever path each took (a post list of tiny WRITEs goes through the
 * responder's fifo as one burst, a lone READ by process_vm_readv); a burst's WRITEs land
 * with their own lengths; a bad rkey midway fails that WRITE alone and flushes the rest.
 * Two QPs of one process, connected to each other.
 */
#include "verbs/sv_test_util.h"

#include <stdlib.h>
#include <string.h>

enum { N_WRITES = 32, ROUNDS = 200 };

struct pair {
	struct tu_res *res;
	struct ibv_qp *a, *b;
	struct ibv_mr *src, *dst, *back;
	uint64_t src_buf[N_WRITES], dst_buf[N_WRITES], back_buf[N_WRITES];
};

/* A successful send-queue completion of QP a: opcode, qp_num, vendor_err, no flags and,
 * for RDMA READ, byte_len (ibv_poll_cq(3): the other fields are undefined for sends). */
static void check_send_fields(const struct pair *p, const struct ibv_wc *wc,
			      enum ibv_wc_opcode opcode, uint32_t read_len)
{
	assert_int_equal(wc->opcode, opcode);
	assert_int_equal(wc->qp_num, p->a->qp_num);
	assert_int_equal(wc->vendor_err, 0);
	assert_int_equal(wc->wc_flags, 0);
	if (opcode == IBV_WC_RDMA_READ)
		assert_int_equal(wc->byte_len, read_len);
}

static int setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 2 * N_WRITES, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct tu_conn ca, cb;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

	if (!p)
		return -1;
	p->res = tu_res_open();
	attr.send_cq = attr.recv_cq = ibv_create_cq(p->res->ctx, 4 * N_WRITES, NULL, NULL, 0);
	assert_non_null(attr.send_cq);
	p->a = ibv_create_qp(p->res->pd, &attr);
	p->b = ibv_create_qp(p->res->pd, &attr);
	assert_non_null(p->a);
	assert_non_null(p->b);
	tu_conn_init(&ca, p->res, p->b->qp_num);
	tu_conn_init(&cb, p->res, p->a->qp_num);
	ca.access = cb.access = access;
	ca.max_rd_atomic = ca.max_dest_rd_atomic = cb.max_rd_atomic = cb.max_dest_rd_atomic = 4;
	assert_int_equal(tu_qp_connect(p->a, &ca, IBV_QPS_RTS), 0);
	assert_int_equal(tu_qp_connect(p->b, &cb, IBV_QPS_RTS), 0);
	p->src = ibv_reg_mr(p->res->pd, p->src_buf, sizeof(p->src_buf), access);
	p->dst = ibv_reg_mr(p->res->pd, p->dst_buf, sizeof(p->dst_buf), access);
	p->back = ibv_reg_mr(p->res->pd, p->back_buf, sizeof(p->back_buf), access);
	assert_non_null(p->src);
	assert_non_null(p->dst);
	assert_non_null(p->back);
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct pair *p = *state;
	struct ibv_cq *cq = p->a->send_cq;

	ibv_dereg_mr(p->src);
	ibv_dereg_mr(p->dst);
	ibv_dereg_mr(p->back);
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(cq);
	tu_res_close(p->res);
	free(p);
	return 0;
}

/* A post list of 8-byte WRITEs, then a READ of the same bytes in the same chain. */
static void test_read_after_tiny_writes_sees_them(void **state)
{
	struct pair *p = *state;
	struct ibv_send_wr wr[N_WRITES + 1], *bad;
	struct ibv_sge sge[N_WRITES + 1];
	struct ibv_wc wc;

	for (int round = 0; round < ROUNDS; round++) {
		memset(p->back_buf, 0, sizeof(p->back_buf));
		for (int i = 0; i < N_WRITES; i++) {
			p->src_buf[i] = ((uint64_t)round << 32) | (uint64_t)i;
			sge[i] = (struct ibv_sge){ .addr = (uintptr_t)&p->src_buf[i], .length = 8,
						   .lkey = p->src->lkey };
			wr[i] = (struct ibv_send_wr){
				.wr_id = (uint64_t)i, .next = &wr[i + 1], .sg_list = &sge[i],
				.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.wr.rdma = { .remote_addr = (uintptr_t)&p->dst_buf[i],
					     .rkey = p->dst->rkey },
			};
		}
		sge[N_WRITES] = (struct ibv_sge){ .addr = (uintptr_t)p->back_buf,
						  .length = sizeof(p->back_buf), .lkey = p->back->lkey };
		wr[N_WRITES] = (struct ibv_send_wr){
			.wr_id = 1000, .sg_list = &sge[N_WRITES], .num_sge = 1,
			.opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { .remote_addr = (uintptr_t)p->dst_buf, .rkey = p->dst->rkey },
		};
		assert_int_equal(ibv_post_send(p->a, wr, &bad), 0);
		assert_int_equal(tu_poll_exact(p->a->send_cq, 1, &wc, 5000), 1);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_int_equal(wc.wr_id, 1000);
		check_send_fields(p, &wc, IBV_WC_RDMA_READ, sizeof(p->back_buf));
		for (int i = 0; i < N_WRITES; i++)
			if (p->back_buf[i] != p->src_buf[i])
				fail_msg("round %d: READ after WRITE got %#llx at %d, wrote %#llx", round,
					 (unsigned long long)p->back_buf[i], i,
					 (unsigned long long)p->src_buf[i]);
	}
}

/* A post list of WRITEs of 1 to 16 bytes, each at the start of its own 16 bytes of a
 * zeroed buffer: each lands exactly (a burst's records carry their own lengths). */
static void test_tiny_writes_of_every_length(void **state)
{
	struct pair *p = *state;
	struct ibv_send_wr wr[16], *bad;
	struct ibv_sge sge[16];
	unsigned char *src = (unsigned char *)p->src_buf, *dst = (unsigned char *)p->dst_buf;
	struct ibv_wc wc;

	memset(p->dst_buf, 0, sizeof(p->dst_buf));
	for (int i = 0; i < 16; i++) {
		/* WRITE i: i + 1 bytes of value 0x40 + i, at 16 * i. */
		memset(src + 16 * i, 0x40 + i, 16);
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)(src + 16 * i),
					   .length = (uint32_t)i + 1, .lkey = p->src->lkey };
		wr[i] = (struct ibv_send_wr){
			.wr_id = (uint64_t)i, .next = i < 15 ? &wr[i + 1] : NULL, .sg_list = &sge[i],
			.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = i == 15 ? IBV_SEND_SIGNALED : 0,
			.wr.rdma = { .remote_addr = (uintptr_t)(dst + 16 * i), .rkey = p->dst->rkey },
		};
	}
	assert_int_equal(ibv_post_send(p->a, wr, &bad), 0);
	assert_int_equal(tu_poll_exact(p->a->send_cq, 1, &wc, 5000), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 15);
	check_send_fields(p, &wc, IBV_WC_RDMA_WRITE, 0);
	for (int i = 0; i < 16; i++)
		for (int k = 0; k < 16; k++)
			if (dst[16 * i + k] != (k <= i ? 0x40 + i : 0))
				fail_msg("byte %d of WRITE %d's place is 0x%02x", k, i, dst[16 * i + k]);
}

/* A bad rkey in the middle of a post list of tiny WRITEs: those before it land and
 * complete, it fails with REM_ACCESS_ERR, the rest are flushed and land nowhere. */
static void test_tiny_writes_with_a_bad_rkey_midway(void **state)
{
	struct pair *p = *state;
	struct ibv_send_wr wr[N_WRITES], *bad;
	struct ibv_sge sge[N_WRITES];
	struct ibv_wc wc[N_WRITES];

	memset(p->dst_buf, 0, sizeof(p->dst_buf));
	for (int i = 0; i < N_WRITES; i++) {
		p->src_buf[i] = 0x1000 + (uint64_t)i;
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)&p->src_buf[i], .length = 8,
					   .lkey = p->src->lkey };
		wr[i] = (struct ibv_send_wr){
			.wr_id = (uint64_t)i, .next = i + 1 < N_WRITES ? &wr[i + 1] : NULL,
			.sg_list = &sge[i], .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { .remote_addr = (uintptr_t)&p->dst_buf[i],
				     .rkey = i == 10 ? p->dst->rkey ^ 0x5a00 : p->dst->rkey },
		};
	}
	assert_int_equal(ibv_post_send(p->a, wr, &bad), 0);
	assert_int_equal(tu_poll_exact(p->a->send_cq, N_WRITES, wc, 5000), N_WRITES);
	for (int i = 0; i < N_WRITES; i++) {
		enum ibv_wc_status want = i < 10 ? IBV_WC_SUCCESS :
					  i == 10 ? IBV_WC_REM_ACCESS_ERR : IBV_WC_WR_FLUSH_ERR;

		if (wc[i].wr_id != (uint64_t)i || wc[i].status != want)
			fail_msg("completion %d: wr_id %llu status %s, expected %s", i,
				 (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status),
				 ibv_wc_status_str(want));
		if (want == IBV_WC_SUCCESS)
			check_send_fields(p, &wc[i], IBV_WC_RDMA_WRITE, 0);
		else
			assert_int_equal(wc[i].qp_num, p->a->qp_num); /* defined for errors too */
		if (p->dst_buf[i] != (i < 10 ? p->src_buf[i] : 0))
			fail_msg("WRITE %d left %#llx at its place", i,
				 (unsigned long long)p->dst_buf[i]);
	}
}

/*
 * A send completes before the receive of a reply the peer sent after receiving it (on a
 * wire the ACK goes ahead of the reply; programs that share one completion channel, such
 * as perftest's -e, take the events in that order). A's sends and receives share one CQ,
 * so the order is seen as pushed: A's SEND (after a READ every other round: an ACK read
 * before the READ's answer must not complete the READ), then B's reply.
 */
static void test_send_completes_before_the_reply(void **state)
{
	struct pair *p = *state;
	struct ibv_cq *cq_a = ibv_create_cq(p->res->ctx, 8, NULL, NULL, 0);
	struct ibv_cq *cq_b = ibv_create_cq(p->res->ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *a, *b;
	struct tu_conn ca, cb;
	uint64_t *buf = p->src_buf, *back = p->back_buf;

	assert_non_null(cq_a);
	assert_non_null(cq_b);
	attr.send_cq = attr.recv_cq = cq_a;
	a = ibv_create_qp(p->res->pd, &attr);
	attr.send_cq = attr.recv_cq = cq_b;
	b = ibv_create_qp(p->res->pd, &attr);
	assert_non_null(a);
	assert_non_null(b);
	tu_conn_init(&ca, p->res, b->qp_num);
	tu_conn_init(&cb, p->res, a->qp_num);
	ca.access = cb.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
	ca.max_rd_atomic = ca.max_dest_rd_atomic = cb.max_rd_atomic = cb.max_dest_rd_atomic = 4;
	assert_int_equal(tu_qp_connect(a, &ca, IBV_QPS_RTS), 0);
	assert_int_equal(tu_qp_connect(b, &cb, IBV_QPS_RTS), 0);

	for (int round = 0; round < ROUNDS; round++) {
		struct ibv_sge s_a = { .addr = (uintptr_t)&buf[0], .length = 8, .lkey = p->src->lkey };
		struct ibv_sge s_b = { .addr = (uintptr_t)&buf[1], .length = 8, .lkey = p->src->lkey };
		struct ibv_sge r_a = { .addr = (uintptr_t)&buf[2], .length = 8, .lkey = p->src->lkey };
		struct ibv_sge r_b = { .addr = (uintptr_t)&buf[3], .length = 8, .lkey = p->src->lkey };
		struct ibv_sge s_rd = { .addr = (uintptr_t)back, .length = 64, .lkey = p->back->lkey };
		struct ibv_recv_wr rwa = { .wr_id = 2, .sg_list = &r_a, .num_sge = 1 }, *rbad;
		struct ibv_recv_wr rwb = { .wr_id = 3, .sg_list = &r_b, .num_sge = 1 };
		struct ibv_send_wr send = { .wr_id = 1, .sg_list = &s_a, .num_sge = 1,
					    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr read = {
			.wr_id = 4, .next = &send, .sg_list = &s_rd, .num_sge = 1,
			.opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { .remote_addr = (uintptr_t)p->dst_buf, .rkey = p->dst->rkey },
		};
		struct ibv_send_wr reply = { .wr_id = 5, .sg_list = &s_b, .num_sge = 1,
					     .opcode = IBV_WR_SEND };
		struct ibv_send_wr *bad;
		bool with_read = round & 1;
		struct ibv_wc wc[3];
		int want = with_read ? 3 : 2;

		assert_int_equal(ibv_post_recv(a, &rwa, &rbad), 0);
		assert_int_equal(ibv_post_recv(b, &rwb, &rbad), 0);
		assert_int_equal(ibv_post_send(a, with_read ? &read : &send, &bad), 0);
		/* B receives, then replies (unsignaled): its ACK of the SEND precedes the reply. */
		assert_int_equal(tu_poll_exact(cq_b, 1, wc, 5000), 1);
		assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
		assert_int_equal(wc[0].wr_id, 3);
		assert_int_equal(ibv_post_send(b, &reply, &bad), 0);
		assert_int_equal(tu_poll_exact(cq_a, want, wc, 5000), want);
		for (int i = 0; i < want; i++)
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		if (with_read)
			assert_int_equal(wc[0].wr_id, 4);
		if (wc[want - 2].wr_id != 1 || wc[want - 1].wr_id != 2)
			fail_msg("round %d: A's completions in the order wr_id %llu, %llu: the reply's "
				 "receive (2) came before the send it answers (1)", round,
				 (unsigned long long)wc[want - 2].wr_id,
				 (unsigned long long)wc[want - 1].wr_id);
	}
	assert_int_equal(ibv_destroy_qp(a), 0);
	assert_int_equal(ibv_destroy_qp(b), 0);
	assert_int_equal(ibv_destroy_cq(cq_a), 0);
	assert_int_equal(ibv_destroy_cq(cq_b), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_read_after_tiny_writes_sees_them, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_tiny_writes_of_every_length, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tiny_writes_with_a_bad_rkey_midway, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_send_completes_before_the_reply, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
