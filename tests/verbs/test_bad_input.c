/*
 * Robustness against arguments that rdma-core rejects. A generator with a fixed seed per
 * test throws random attribute masks and values, capacities, queue sizes, access flags,
 * ports, indexes, opcodes and flags at the library, in bounded loops. Nothing may crash,
 * and every call must answer as rdma-core 44 over a kernel provider (rxe, mlx5) may:
 *   - create/alloc/reg: a usable object, or NULL with an errno that the kernel gives
 *     for one of the mistakes in the arguments (EINVAL, EOPNOTSUPP, EFAULT), or ENOMEM;
 *   - modify/query/post: 0 or a positive errno (query_gid/query_pkey: 0 or -1), and a
 *     refused call changes nothing; a refused post names a WR of its chain in *bad_wr.
 * Every object a test creates is destroyed, and each test ends by destroying the
 * fixture's CQ and PD, which succeeds only if nothing kept a reference to them.
 *
 * NULL goes only where rdma-core checks it instead of dereferencing it: ibv_reg_mr's
 * address (the kernel cannot pin page 0: EFAULT), ibv_create_qp's CQs (EINVAL), and
 * ibv_post_send's empty list. ibv_dealloc_pd(NULL) and the other destroy calls with
 * NULL crash in rdma-core (they call through the object), so they are not tried.
 *
 * A failure names the iteration and the arguments; the seed is fixed, so it repeats.
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REPORTS 10 /* mismatches printed per test; all are counted */

/* ---- the generator ------------------------------------------------------------------ */

static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
	rng_state = seed;
}

/* splitmix64: deterministic, and every output bit is usable. */
static uint64_t rnd64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint32_t rnd_below(uint32_t n)
{
	return (uint32_t)(rnd64() % n);
}

static bool one_in(uint32_t n)
{
	return rnd_below(n) == 0;
}

/* A 32-bit value that stresses a field: a boundary of some width, a small number, or any. */
static uint32_t rnd_edge(void)
{
	static const uint32_t edges[] = {
		0,	    1,		2,	    3,		7,	     8,		 15,
		16,	    31,		32,	    63,		64,	     127,	 128,
		255,	    256,	0x7fff,	    0xffff,	0x10000,     0xffffff,	 0x1000000,
		0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff,
	};

	switch (rnd_below(3)) {
	case 0: return edges[rnd_below(ARRAY_LEN(edges))];
	case 1: return rnd_below(300);
	default: return (uint32_t)rnd64();
	}
}

/* @valid, or with probability 1/5 a stressing value instead. */
static uint32_t maybe(uint32_t valid)
{
	return one_in(5) ? rnd_edge() : valid;
}

/* ---- reporting and clean-up --------------------------------------------------------- */

struct tally {
	int calls;
	int bad;
};

static void flag(struct tally *t, const char *fmt, ...) CMOCKA_PRINTF_ATTRIBUTE(2, 3);

/* Counts a wrong answer; prints the first MAX_REPORTS. */
static void flag(struct tally *t, const char *fmt, ...)
{
	va_list ap;

	if (t->bad++ >= MAX_REPORTS)
		return;
	va_start(ap, fmt);
	vprint_error(fmt, ap);
	va_end(ap);
}

static void finish(const struct tally *t, const char *what)
{
	print_message("%s: %d calls, %d wrong answers\n", what, t->calls, t->bad);
	assert_true(t->calls > 0);
	assert_int_equal(t->bad, 0);
}

/*
 * The test destroyed everything it made: the fixture's CQ and PD go now (rdma-core
 * answers EBUSY while a QP, MR, SRQ or AH still holds them). tu_teardown skips them.
 */
static void release_fixture(struct tu_res *res)
{
	assert_int_equal(ibv_destroy_cq(res->cq), 0);
	res->cq = NULL;
	assert_int_equal(ibv_dealloc_pd(res->pd), 0);
	res->pd = NULL;
}

static const enum ibv_qp_type qp_types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

static const char *state_str(int s)
{
	static const char *const names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s >= 0 && s < (int)ARRAY_LEN(names) ? names[s] : "?";
}

/* ---- ibv_modify_qp ------------------------------------------------------------------ */

#define MODIFY_ROUNDS 60 /* per type and state */

static const enum ibv_qp_state modify_states[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
						   IBV_QPS_RTS,	  IBV_QPS_SQD,	IBV_QPS_ERR };

/* Puts @qp, in any state, into @st through legal transitions (RESET first). */
static void put_in_state(struct ibv_qp *qp, const struct tu_conn *c, enum ibv_qp_state st)
{
	enum ibv_qp_state connected = st == IBV_QPS_SQD || st == IBV_QPS_ERR ? IBV_QPS_RTS : st;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	if (connected != IBV_QPS_RESET)
		assert_int_equal(tu_qp_connect(qp, c, connected), 0);
	if (connected != st) {
		a.qp_state = st;
		assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	}
	assert_int_equal(tu_query_state(qp), st);
}

/* The attributes the move to @to requires (IBA 10.3.1, as tu_qp_to_* set them). */
static int entry_mask(enum ibv_qp_type type, enum ibv_qp_state to)
{
	switch (to) {
	case IBV_QPS_INIT:
		return IBV_QP_PKEY_INDEX | IBV_QP_PORT |
		       (type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
	case IBV_QPS_RTR:
		if (type == IBV_QPT_UD)
			return 0;
		return IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       (type == IBV_QPT_RC ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0);
	case IBV_QPS_RTS:
		return IBV_QP_SQ_PSN | (type == IBV_QPT_RC ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
								     IBV_QP_RNR_RETRY |
								     IBV_QP_MAX_QP_RD_ATOMIC :
							     0);
	case IBV_QPS_SQD:
		return IBV_QP_EN_SQD_ASYNC_NOTIFY;
	default:
		return 0;
	}
}

static void random_ah(const struct tu_res *res, struct ibv_ah_attr *ah)
{
	tu_fill_ah(res, ah);
	ah->is_global = (uint8_t)maybe(1);
	ah->grh.sgid_index = (uint8_t)maybe(0);
	ah->grh.flow_label = maybe(0);
	ah->grh.traffic_class = (uint8_t)maybe(0);
	ah->dlid = (uint16_t)maybe(ah->dlid);
	ah->sl = (uint8_t)maybe(0);
	ah->static_rate = (uint8_t)maybe(0);
	ah->port_num = (uint8_t)maybe(1);
}

/*
 * A destination no other process can own: QP0 or QP1 (the special QPs), or a number past
 * 24 bits (refused). Any other number may be a live QP of another process on this host,
 * which the data path would connect to.
 */
static uint32_t nobodys_qpn(void)
{
	return one_in(3) ? rnd_below(2) : 0x1000000u | rnd_edge();
}

/*
 * A modify towards a random state: the mask the move needs with a few bits flipped (or
 * without IBV_QP_STATE at all), valid values of which about a fifth are replaced by
 * stressing ones.
 */
static int random_modify(const struct tu_res *res, const struct tu_conn *c,
			 enum ibv_qp_type type, enum ibv_qp_state cur, struct ibv_qp_attr *a)
{
	int mask;

	memset(a, 0, sizeof(*a));
	a->qp_state = one_in(8) ? (enum ibv_qp_state)rnd_edge() :
				  (enum ibv_qp_state)rnd_below(IBV_QPS_ERR + 1);
	a->cur_qp_state = one_in(2) ? cur : (enum ibv_qp_state)maybe(rnd_below(IBV_QPS_ERR + 2));
	a->path_mtu = (enum ibv_mtu)maybe(c->mtu);
	a->path_mig_state = (enum ibv_mig_state)maybe(IBV_MIG_MIGRATED);
	a->qkey = maybe(c->qkey);
	a->rq_psn = maybe(c->rq_psn);
	a->sq_psn = maybe(c->sq_psn);
	a->dest_qp_num = one_in(5) ? nobodys_qpn() : c->dest_qpn;
	a->qp_access_flags = maybe((unsigned int)c->access);
	a->cap.max_send_wr = maybe(16);
	a->cap.max_recv_wr = maybe(16);
	random_ah(res, &a->ah_attr);
	random_ah(res, &a->alt_ah_attr);
	a->pkey_index = (uint16_t)maybe(0);
	a->alt_pkey_index = (uint16_t)maybe(0);
	a->en_sqd_async_notify = (uint8_t)maybe(0);
	a->max_rd_atomic = (uint8_t)maybe(c->max_rd_atomic);
	a->max_dest_rd_atomic = (uint8_t)maybe(c->max_dest_rd_atomic);
	a->min_rnr_timer = (uint8_t)maybe(c->min_rnr_timer);
	a->port_num = (uint8_t)maybe(1);
	a->timeout = (uint8_t)maybe(c->timeout);
	a->retry_cnt = (uint8_t)maybe(c->retry_cnt);
	a->rnr_retry = (uint8_t)maybe(c->rnr_retry);
	a->alt_port_num = (uint8_t)maybe(1);
	a->alt_timeout = (uint8_t)maybe(c->timeout);

	/* Flips among the standard bits after IBV_QP_STATE, up to IBV_QP_DEST_QPN (1 << 20):
	 * the ones rdma-core hands to the kernel (the others: the _eopnotsupp test below). */
	mask = entry_mask(type, a->qp_state);
	for (int bit = 1; bit <= 20; bit++)
		if (one_in(16))
			mask ^= 1 << bit;
	if (!one_in(6))
		mask |= IBV_QP_STATE;
	return mask;
}

/* An address vector no port of ours takes: another port, or a source GID past the table. */
static bool bad_av(const struct tu_res *res, const struct ibv_ah_attr *ah)
{
	return ah->port_num != 1 || (ah->is_global && ah->grh.sgid_index >= res->port.gid_tbl_len);
}

/*
 * A value that makes the modify invalid whatever the state (test_qp_states checks each
 * of these alone: the kernel's ib_modify_qp_is_ok and the providers' attribute checks),
 * or NULL.
 */
static const char *invalid_value(const struct tu_res *res, const struct ibv_qp_attr *a,
				 int mask)
{
	int rd_max = res->dev.max_qp_rd_atom > res->dev.max_qp_init_rd_atom ?
			     res->dev.max_qp_rd_atom :
			     res->dev.max_qp_init_rd_atom;

	if ((mask & IBV_QP_STATE) && (unsigned int)a->qp_state > IBV_QPS_ERR)
		return "qp_state";
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return "port_num";
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= res->port.pkey_tbl_len)
		return "pkey_index";
	if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
		return "path_mtu";
	if ((mask & IBV_QP_AV) && bad_av(res, &a->ah_attr))
		return "ah_attr";
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > rd_max)
		return "max_rd_atomic";
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > rd_max)
		return "max_dest_rd_atomic";
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return "min_rnr_timer";
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return "timeout";
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return "retry_cnt";
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return "rnr_retry";
	return NULL;
}

/*
 * ibv_modify_qp with random masks (the standard bits) and values on RC, UC and UD QPs in
 * every state a modify reaches: the answer is 0 or EINVAL; afterwards ibv_query_qp and
 * qp->state agree on a valid state, which is the requested one after a success and the
 * old one after a refusal; a value no state accepts is never taken.
 */
static void test_modify_qp_random_attrs_answer_0_or_einval_and_keep_state(void **state)
{
	struct tu_res *res = *state;
	struct tally t = { 0 };
	int successes = 0;

	rng_seed(0x6d6f64696679ULL);
	for (size_t k = 0; k < ARRAY_LEN(qp_types); k++) {
		struct ibv_qp *peer = tu_keep_qp(res, tu_create_qp(res, qp_types[k]));
		struct ibv_qp *qp = tu_keep_qp(res, tu_create_qp(res, qp_types[k]));
		struct tu_conn c;

		tu_conn_init(&c, res, peer->qp_num);
		for (size_t s = 0; s < ARRAY_LEN(modify_states); s++) {
			enum ibv_qp_state before = modify_states[s];

			for (int round = 0; round < MODIFY_ROUNDS; round++) {
				struct ibv_qp_attr a, qa;
				struct ibv_qp_init_attr qia;
				enum ibv_qp_state want;
				const char *invalid;
				int mask, rc, qrc;

				put_in_state(qp, &c, before);
				mask = random_modify(res, &c, qp_types[k], before, &a);
				invalid = invalid_value(res, &a, mask);
				rc = ibv_modify_qp(qp, &a, mask);
				t.calls++;
				memset(&qa, 0, sizeof(qa));
				qrc = ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia);
				want = rc == 0 && (mask & IBV_QP_STATE) ? a.qp_state : before;
				successes += rc == 0;
				if ((rc != 0 && rc != EINVAL) || (rc == 0 && invalid) || qrc ||
				    qa.qp_state != qp->state || qa.qp_state != want)
					flag(&t,
					     "%s round %d in %s: modify to %s mask 0x%x "
					     "returned %d (want 0 or EINVAL%s%s); then query "
					     "%d, state %s, qp->state %s (want %s)\n",
					     tu_qp_type_str(qp_types[k]), round, state_str(before),
					     state_str(a.qp_state), (unsigned int)mask, rc,
					     invalid ? ", EINVAL for the invalid " : "",
					     invalid ? invalid : "", qrc, state_str(qa.qp_state),
					     state_str(qp->state), state_str(want));
			}
		}
		tu_destroy_qp(res, qp);
		tu_destroy_qp(res, peer);
	}
	print_message("%d of the modifies succeeded\n", successes);
	assert_true(successes > 0);
	finish(&t, "random modify_qp");
	release_fixture(res);
}

/*
 * rdma-core hands only IBV_QP_STATE .. IBV_QP_DEST_QPN to the kernel's modify command:
 * ibv_cmd_modify_qp answers EOPNOTSUPP for IBV_QP_RATE_LIMIT and every bit above it,
 * and uverbs' modify_qp answers EOPNOTSUPP for any bit above IB_QP_DEST_QPN. Only
 * IBV_QP_RATE_LIMIT may also be EINVAL (mlx5 takes it to the extended command, where
 * the kernel's table refuses it for these QP types). The QP stays as it was.
 */
static void test_modify_qp_unknown_mask_bits_are_eopnotsupp(void **state)
{
	struct tu_res *res = *state;
	struct tally t = { 0 };

	for (size_t k = 0; k < ARRAY_LEN(qp_types); k++) {
		struct ibv_qp *qp = tu_keep_qp(res, tu_create_qp(res, qp_types[k]));
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 1 };
		unsigned int valid = IBV_QP_STATE | (unsigned int)entry_mask(qp_types[k],
									     IBV_QPS_INIT);

		for (int bit = 21; bit < 32; bit++) {
			int rc = ibv_modify_qp(qp, &a, (int)(valid | 1u << bit));
			bool ok = rc == EOPNOTSUPP || (bit == 25 && rc == EINVAL);

			t.calls++;
			if (!ok || tu_query_state(qp) != IBV_QPS_RESET ||
			    qp->state != IBV_QPS_RESET)
				flag(&t,
				     "%s RESET -> INIT with mask bit %d: returned %d (want "
				     "EOPNOTSUPP%s), state %s\n",
				     tu_qp_type_str(qp_types[k]), bit, rc,
				     bit == 25 ? " or EINVAL" : "", state_str(tu_query_state(qp)));
			if (rc == 0)
				put_in_state(qp, NULL, IBV_QPS_RESET);
		}
		tu_destroy_qp(res, qp);
	}
	finish(&t, "unknown modify_qp mask bits");
	release_fixture(res);
}

/* ---- ibv_create_qp ------------------------------------------------------------------ */

#define CREATE_QP_ROUNDS 300

/* A capacity: small, at the device limit (-1, 0, +1), a stressing value, or any valid. */
static uint32_t rnd_cap(uint32_t max)
{
	switch (rnd_below(8)) {
	case 0: case 1: case 2: return rnd_below(17);
	case 3: case 4: return max - 1 + rnd_below(3);
	case 5: case 6: return rnd_edge();
	default: return rnd_below(max + 1);
	}
}

static enum ibv_qp_type rnd_qp_type(void)
{
	static const enum ibv_qp_type others[] = {
		(enum ibv_qp_type)0,  (enum ibv_qp_type)1, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND,
		IBV_QPT_XRC_RECV,     IBV_QPT_DRIVER,	   (enum ibv_qp_type)5, (enum ibv_qp_type)7,
		(enum ibv_qp_type)11, (enum ibv_qp_type)-1,
	};

	if (!one_in(3))
		return qp_types[rnd_below(ARRAY_LEN(qp_types))];
	return one_in(4) ? (enum ibv_qp_type)rnd_edge() : others[rnd_below(ARRAY_LEN(others))];
}

/* Through ibv_create_qp (a PD, no XRC domain): an XRC target cannot be made. */
static bool supported_type(enum ibv_qp_type type)
{
	return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_UD ||
	       type == IBV_QPT_XRC_SEND;
}

/*
 * ibv_create_qp with random types, capacities, CQs (NULL among them) and SRQ: a QP of
 * the asked type in RESET with at least the asked capacities, which is destroyed, or
 * NULL with an errno the kernel gives for one of the mistakes: EOPNOTSUPP or EINVAL for
 * a type rxe/mlx5 do not create (EPERM for RAW_PACKET without CAP_NET_RAW), EINVAL for a
 * missing CQ or a capacity above the device's, ENOMEM. Valid arguments give a QP.
 */
static void test_create_qp_random_init_attr_gives_qp_or_null_with_errno(void **state)
{
	struct tu_res *res = *state;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(res->pd, &sa);
	uint32_t max_wr = (uint32_t)res->dev.max_qp_wr, max_sge = (uint32_t)res->dev.max_sge;
	struct tally t = { 0 };
	int created = 0;

	assert_non_null(srq);
	rng_seed(0x637265617465ULL);
	for (int round = 0; round < CREATE_QP_ROUNDS; round++) {
		struct ibv_qp_init_attr ia;
		struct ibv_qp_cap asked;
		bool type_ok, no_rq, cq_ok, caps_ok, inline_ok, inline_bad;
		struct ibv_qp *qp;
		int err;

		/* One draw per statement: an initializer list has no evaluation order. */
		memset(&ia, 0, sizeof(ia));
		ia.qp_context = (void *)(uintptr_t)rnd64();
		ia.send_cq = one_in(12) ? NULL : res->cq;
		ia.recv_cq = one_in(12) ? NULL : res->cq;
		ia.srq = one_in(5) ? srq : NULL;
		ia.cap.max_send_wr = rnd_cap(max_wr);
		ia.cap.max_recv_wr = rnd_cap(max_wr);
		ia.cap.max_send_sge = rnd_cap(max_sge);
		ia.cap.max_recv_sge = rnd_cap(max_sge);
		ia.cap.max_inline_data = one_in(2) ? rnd_below(65) : rnd_edge();
		ia.qp_type = rnd_qp_type();
		ia.sq_sig_all = (int)rnd_edge();
		asked = ia.cap;
		type_ok = supported_type(ia.qp_type);
		/* An XRC initiator has no receive side: its receive CQ, SRQ and caps are
		 * ignored. */
		no_rq = ia.qp_type == IBV_QPT_XRC_SEND;
		cq_ok = ia.send_cq && (no_rq || ia.recv_cq);
		caps_ok = asked.max_send_wr <= max_wr && asked.max_send_sge <= max_sge &&
			  (ia.srq || no_rq ||
			   (asked.max_recv_wr <= max_wr && asked.max_recv_sge <= max_sge));
		inline_ok = asked.max_inline_data <= 64;
		inline_bad = asked.max_inline_data >= (1u << 20);

		errno = 0;
		qp = ibv_create_qp(res->pd, &ia);
		err = errno;
		t.calls++;
		if (qp) {
			created++;
			if (!type_ok || !cq_ok || !caps_ok || inline_bad ||
			    qp->qp_type != ia.qp_type || qp->state != IBV_QPS_RESET ||
			    qp->srq != (no_rq ? NULL : ia.srq) || qp->qp_context != ia.qp_context ||
			    ia.cap.max_send_wr < asked.max_send_wr ||
			    ia.cap.max_send_sge < asked.max_send_sge ||
			    ia.cap.max_inline_data < asked.max_inline_data ||
			    (!ia.srq && !no_rq && (ia.cap.max_recv_wr < asked.max_recv_wr ||
					 ia.cap.max_recv_sge < asked.max_recv_sge)))
				flag(&t,
				     "round %d: created %s QP (state %d) from type %d cqs %d caps "
				     "%u/%u/%u/%u/%u srq %d, granted %u/%u/%u/%u/%u\n",
				     round, tu_qp_type_str(qp->qp_type), qp->state, ia.qp_type,
				     cq_ok, asked.max_send_wr, asked.max_recv_wr,
				     asked.max_send_sge, asked.max_recv_sge, asked.max_inline_data,
				     !!ia.srq, ia.cap.max_send_wr, ia.cap.max_recv_wr,
				     ia.cap.max_send_sge, ia.cap.max_recv_sge,
				     ia.cap.max_inline_data);
			assert_int_equal(ibv_destroy_qp(qp), 0);
		} else {
			bool raw = ia.qp_type == IBV_QPT_RAW_PACKET;
			bool why = err == ENOMEM ||
				   (!type_ok && (err == EOPNOTSUPP || err == EINVAL ||
						 (raw && err == EPERM))) ||
				   ((!cq_ok || !caps_ok || !inline_ok) && err == EINVAL);

			if (!why || (type_ok && cq_ok && caps_ok && inline_ok && err != ENOMEM))
				flag(&t,
				     "round %d: NULL with errno %d for type %d cqs %d caps "
				     "%u/%u/%u/%u/%u srq %d\n",
				     round, err, ia.qp_type, cq_ok, asked.max_send_wr,
				     asked.max_recv_wr, asked.max_send_sge, asked.max_recv_sge,
				     asked.max_inline_data, !!ia.srq);
		}
	}
	print_message("%d of %d QPs created\n", created, CREATE_QP_ROUNDS);
	assert_true(created > 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
	finish(&t, "random create_qp");
	release_fixture(res);
}

/* ---- ibv_create_cq ------------------------------------------------------------------ */

#define CREATE_CQ_ROUNDS 300

/*
 * ibv_create_cq with random cqe, comp_vector and channel: a CQ with at least cqe entries
 * carrying the context and channel, which is destroyed, exactly when 1 <= cqe <= max_cqe
 * and 0 <= comp_vector < num_comp_vectors (rxe_cq_chk_attr, uverbs create_cq: EINVAL
 * otherwise; the kernel reads both as unsigned); ENOMEM is allowed for valid ones.
 */
static void test_create_cq_random_cqe_and_comp_vector_gives_cq_or_einval(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	int max_cqe = res->dev.max_cqe, nvec = res->ctx->num_comp_vectors;
	struct tally t = { 0 };
	int created = 0;

	assert_non_null(ch);
	rng_seed(0x6371ULL);
	for (int round = 0; round < CREATE_CQ_ROUNDS; round++) {
		int cqe, vec;
		struct ibv_comp_channel *chan = one_in(3) ? ch : NULL;
		void *cq_context = (void *)(uintptr_t)rnd64();
		struct ibv_cq *cq;
		bool valid;
		int err;

		switch (rnd_below(4)) {
		case 0: cqe = (int)rnd_below(4097); break;
		case 1: cqe = max_cqe - 1 + (int)rnd_below(3); break;
		default: cqe = (int)rnd_edge(); break;
		}
		/* Valid sizes stay small: the test is about the answer, not the memory. */
		if (cqe > 4096 && cqe <= max_cqe && !one_in(50))
			cqe = max_cqe + 1;
		vec = one_in(2) ? 0 : one_in(2) ? nvec - 1 + (int)rnd_below(3) : (int)rnd_edge();
		valid = cqe >= 1 && cqe <= max_cqe && vec >= 0 && vec < nvec;

		errno = 0;
		cq = ibv_create_cq(res->ctx, cqe, cq_context, chan, vec);
		err = errno;
		t.calls++;
		if (cq) {
			created++;
			if (!valid || cq->cqe < cqe || cq->cq_context != cq_context ||
			    cq->channel != chan || cq->context != res->ctx)
				flag(&t, "round %d: a CQ of %d for cqe %d comp_vector %d%s\n",
				     round, cq->cqe, cqe, vec,
				     valid ? " echoing the wrong objects" : "");
			assert_int_equal(ibv_destroy_cq(cq), 0);
		} else if (valid ? err != ENOMEM : err != EINVAL) {
			flag(&t,
			     "round %d: NULL with errno %d for cqe %d comp_vector %d (want %s)\n",
			     round, err, cqe, vec, valid ? "a CQ" : "EINVAL");
		}
	}
	print_message("%d of %d CQs created\n", created, CREATE_CQ_ROUNDS);
	assert_true(created > 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
	finish(&t, "random create_cq");
	release_fixture(res);
}

/* ---- ibv_reg_mr --------------------------------------------------------------------- */

#define REG_MR_ROUNDS 300

enum {
	KNOWN_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		       IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
		       IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB,
	/* ib_access_writable(): the kernel pins for writing when any of these is set. */
	WRITABLE_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND,
	/* Bits 8, 9 are IB_ACCESS_FLUSH_* since Linux 6.2: EOPNOTSUPP without the cap. */
	FLUSH_ACCESS = 3 << 8,
};

static unsigned int rnd_access(void)
{
	unsigned int known;

	switch (rnd_below(5)) {
	case 0: /* what applications use */
		return IBV_ACCESS_LOCAL_WRITE | rnd_below(16) << 1;
	case 1: /* without LOCAL_WRITE: read-only pages may do */
		return (uint32_t)rnd64() & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND |
					    IBV_ACCESS_ZERO_BASED | IBV_ACCESS_HUGETLB);
	case 2:
		return rnd_below(KNOWN_ACCESS + 1);
	case 3: /* one draw per statement: operands are evaluated in no fixed order */
		known = rnd_below(KNOWN_ACCESS + 1);
		return known | 1u << rnd_below(32);
	default: return rnd_edge();
	}
}

/*
 * Four pages: two read-write, one read-only, one without access. A range is
 * registrable if it lies in the first three pages, and with a writable access only if
 * it lies in the first two (the kernel pins it for writing).
 */
struct mr_buf {
	char *base;
	size_t page;
};

static size_t rnd_len(const struct mr_buf *b, size_t off)
{
	switch (rnd_below(6)) {
	case 0: return rnd_below(3);
	case 1: return 1 + rnd_below((uint32_t)(3 * b->page - off)); /* ends in the buffer */
	case 2: return rnd_below((uint32_t)(4 * b->page));
	case 3: return (size_t)rnd_edge();
	case 4: return SIZE_MAX - rnd_below(4096); /* the end wraps */
	default: return (size_t)1 << (32 + rnd_below(16));
	}
}

/*
 * ibv_reg_mr on the buffer above (and at NULL) with random access bits and lengths: an
 * MR with a non-zero lkey covering the range asked, which is deregistered, exactly when
 * the kernel accepts the arguments; otherwise NULL with the errno of one of the
 * mistakes: EINVAL for unknown access bits, remote write/atomic without local write
 * (ib_check_mr_access), a zero length or a wrapping range (ib_umem_get); EOPNOTSUPP for
 * on-demand paging the device does not offer (and FLUSH bits); EFAULT for pages the
 * kernel cannot pin, for writing when the access is writable (not on demand: nothing is
 * pinned then).
 */
static void test_reg_mr_random_access_and_length_gives_mr_or_the_errno_of_a_fault(void **state)
{
	struct tu_res *res = *state;
	struct ibv_device_attr_ex dx;
	struct mr_buf b = { .page = (size_t)sysconf(_SC_PAGESIZE) };
	bool odp = false;
	struct tally t = { 0 };
	int created = 0;

	memset(&dx, 0, sizeof(dx));
	if (ibv_query_device_ex(res->ctx, NULL, &dx) == 0)
		odp = dx.odp_caps.general_caps & IBV_ODP_SUPPORT;
	b.base = mmap(NULL, 4 * b.page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(b.base != MAP_FAILED);
	memset(b.base, 0x5a, 3 * b.page);
	assert_int_equal(mprotect(b.base + 2 * b.page, b.page, PROT_READ), 0);
	assert_int_equal(mprotect(b.base + 3 * b.page, b.page, PROT_NONE), 0);

	rng_seed(0x7265676d72ULL);
	for (int round = 0; round < REG_MR_ROUNDS; round++) {
		size_t off = one_in(16) ? 0 : rnd_below((uint32_t)(3 * b.page));
		char *addr = one_in(16) ? NULL : b.base + off;
		size_t len = rnd_len(&b, off);
		unsigned int access = rnd_access();
		uintptr_t start = (uintptr_t)addr, end = start + len;
		uintptr_t rw_end = (uintptr_t)b.base + 2 * b.page;
		bool wraps = end < start;
		unsigned int unknown = access & ~(KNOWN_ACCESS | IBV_ACCESS_OPTIONAL_RANGE |
						  FLUSH_ACCESS);
		bool einval = unknown ||
			      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
			       !(access & IBV_ACCESS_LOCAL_WRITE)) ||
			      len == 0 || wraps;
		bool eopnotsupp = ((access & IBV_ACCESS_ON_DEMAND) && !odp);
		bool flush = access & FLUSH_ACCESS;
		/* On demand, nothing is pinned at registration: no fault then. */
		bool efault = !wraps && len && !(odp && (access & IBV_ACCESS_ON_DEMAND)) &&
			      (!addr || end > rw_end + b.page ||
			       ((access & WRITABLE_ACCESS) && end > rw_end));
		bool valid = !einval && !eopnotsupp && !flush && !efault;
		struct ibv_mr *mr;
		int err;

		errno = 0;
		mr = ibv_reg_mr(res->pd, addr, len, (int)access);
		err = errno;
		t.calls++;
		if (mr) {
			created++;
			if (!valid || mr->lkey == 0 || mr->addr != addr || mr->length != len ||
			    mr->pd != res->pd)
				flag(&t,
				     "round %d: MR (lkey 0x%x) for addr base+%zu%s len 0x%zx "
				     "access 0x%x; want %s\n",
				     round, mr->lkey, off, addr ? "" : " (NULL)", len, access,
				     valid ? "lkey != 0 and the range echoed" :
				     efault ? "EFAULT (pages not pinnable for this access)" :
					      "EINVAL or EOPNOTSUPP");
			assert_int_equal(ibv_dereg_mr(mr), 0);
		} else if (!((einval && err == EINVAL) ||
			     ((eopnotsupp || flush) && err == EOPNOTSUPP) ||
			     (flush && err == EINVAL) || (efault && err == EFAULT) ||
			     (valid && err == ENOMEM))) {
			flag(&t,
			     "round %d: NULL with errno %d for addr base+%zu%s len 0x%zx access "
			     "0x%x (want%s%s%s%s)\n",
			     round, err, off, addr ? "" : " (NULL)", len, access,
			     einval ? " EINVAL" : "", eopnotsupp || flush ? " EOPNOTSUPP" : "",
			     efault ? " EFAULT" : "", valid ? " an MR" : "");
		}
	}
	print_message("%d of %d MRs registered\n", created, REG_MR_ROUNDS);
	assert_true(created > 0);
	assert_int_equal(munmap(b.base, 4 * b.page), 0);
	finish(&t, "random reg_mr");
	release_fixture(res);
}

/*
 * The kernel pins an MR's pages for writing when its access lets anything write them,
 * MW_BIND included (ib_access_writable: a bound window may grant remote write), so on
 * read-only pages every such access is EFAULT; read access alone registers.
 */
static void test_reg_mr_writable_access_on_read_only_pages_is_efault(void **state)
{
	static const unsigned int writable[] = {
		IBV_ACCESS_LOCAL_WRITE,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_MW_BIND,
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND,
	};
	static const unsigned int readable[] = { 0, IBV_ACCESS_REMOTE_READ };
	struct tu_res *res = *state;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct tally t = { 0 };

	assert_true(ro != MAP_FAILED);
	for (size_t i = 0; i < ARRAY_LEN(writable); i++) {
		struct ibv_mr *mr;

		errno = 0;
		mr = ibv_reg_mr(res->pd, ro, page, (int)writable[i]);
		t.calls++;
		if (mr || errno != EFAULT)
			flag(&t,
			     "read-only page, access 0x%x: MR %p, errno %d (want NULL, EFAULT)\n",
			     writable[i], (void *)mr, errno);
		if (mr)
			assert_int_equal(ibv_dereg_mr(mr), 0);
	}
	for (size_t i = 0; i < ARRAY_LEN(readable); i++) {
		struct ibv_mr *mr = ibv_reg_mr(res->pd, ro, page, (int)readable[i]);

		t.calls++;
		if (!mr)
			flag(&t, "read-only page, access 0x%x: errno %d (want an MR)\n",
			     readable[i], errno);
		else
			assert_int_equal(ibv_dereg_mr(mr), 0);
	}
	assert_int_equal(munmap(ro, page), 0);
	finish(&t, "writable access on read-only pages");
	release_fixture(res);
}

/* ---- GID, P_Key and port queries ---------------------------------------------------- */

#define QUERY_ROUNDS 400

static int rnd_index(int len)
{
	switch (rnd_below(4)) {
	case 0: return (int)rnd_below((uint32_t)len);
	case 1: return len - 1 + (int)rnd_below(3);
	case 2: return -(int)rnd_below(3) - 1;
	default: return (int)rnd_edge();
	}
}

static uint8_t rnd_port(void)
{
	return one_in(2) ? 1 : (uint8_t)rnd_edge();
}

/* 0/-1 calls fail with EINVAL (uverbs' query ioctls) or ENOENT (the sysfs files). */
static bool failed_properly(int rc)
{
	return rc == -1 && (errno == EINVAL || errno == ENOENT);
}

/*
 * ibv_query_port, ibv_query_gid, _ibv_query_gid_ex and ibv_query_pkey with random port
 * numbers and indexes answer for port 1 and the indexes of its tables, and fail for every
 * other port and index: ibv_query_port with EINVAL, _ibv_query_gid_ex with EINVAL (and
 * with ENODATA for an empty entry in range, which ibv_query_gid reads as the zero GID;
 * flags are EINVAL), ibv_query_gid/ibv_query_pkey with -1. What gid_ex returns is what
 * query_gid returns.
 */
static void test_query_gid_pkey_port_answer_for_port_1_and_table_indexes_only(void **state)
{
	static const union ibv_gid zero_gid;
	struct tu_res *res = *state;
	int gid_len = res->port.gid_tbl_len, pkey_len = res->port.pkey_tbl_len;
	struct tally t = { 0 };

	rng_seed(0x7175657279ULL);
	for (int round = 0; round < QUERY_ROUNDS; round++) {
		uint8_t port = rnd_port();
		int gidx = rnd_index(gid_len);
		int pidx = rnd_index(pkey_len);
		uint32_t flags = one_in(8) ? rnd_edge() : 0;
		bool port_ok = port == 1;
		bool gid_ok = port_ok && gidx >= 0 && gidx < gid_len;
		bool pkey_ok = port_ok && pidx >= 0 && pidx < pkey_len;
		struct ibv_port_attr pa;
		struct ibv_gid_entry ge;
		union ibv_gid gid;
		__be16 pkey;
		bool gid_ex_ok;
		int rc;

		rc = ibv_query_port(res->ctx, port, &pa);
		if (port_ok ? rc != 0 : rc != EINVAL)
			flag(&t, "round %d: ibv_query_port(port %u) returned %d\n", round, port,
			     rc);

		memset(&gid, 0xff, sizeof(gid));
		errno = 0;
		rc = ibv_query_gid(res->ctx, port, gidx, &gid);
		if (gid_ok ? rc != 0 : !failed_properly(rc))
			flag(&t,
			     "round %d: ibv_query_gid(port %u, index %d) returned %d errno %d\n",
			     round, port, gidx, rc, errno);

		memset(&ge, 0xff, sizeof(ge));
		rc = ibv_query_gid_ex(res->ctx, port, (uint32_t)gidx, &ge, flags);
		if (!gid_ok || flags)
			gid_ex_ok = rc == EINVAL;
		else if (rc == 0)
			gid_ex_ok = !memcmp(&ge.gid, &gid, sizeof(gid)) &&
				    ge.gid_index == (uint32_t)gidx && ge.port_num == 1;
		else
			gid_ex_ok = rc == ENODATA && !memcmp(&gid, &zero_gid, sizeof(gid));
		if (!gid_ex_ok)
			flag(&t,
			     "round %d: ibv_query_gid_ex(port %u, index %d, flags 0x%x) returned "
			     "%d (entry %u port %u), query_gid %s\n",
			     round, port, gidx, flags, rc, ge.gid_index, ge.port_num,
			     gid_ok ? "answered" : "failed");

		errno = 0;
		rc = ibv_query_pkey(res->ctx, port, pidx, &pkey);
		if (pkey_ok ? rc != 0 : !failed_properly(rc))
			flag(&t,
			     "round %d: ibv_query_pkey(port %u, index %d) returned %d errno %d\n",
			     round, port, pidx, rc, errno);
		t.calls += 4;
	}
	finish(&t, "random port/GID/P_Key queries");
	release_fixture(res);
}

/* ---- ibv_post_send ------------------------------------------------------------------ */

#define POST_ROUNDS 150 /* per type and state */
/* A post only queues work: it never waits for a peer. The peer here never answers an
 * RNR-bound SEND, so a post that waited would wait forever; 5 s catches that and holds
 * on a loaded machine (a post takes microseconds). */
#define POST_MAX_MS 5000
#define POST_MAX_STALLS 1 /* then the type's rounds stop, to keep the test short */
#define CHAIN_MAX 4
#define SGE_MAX 64
#define POST_BUF 8192

struct post_env {
	struct tu_res *res;
	char *buf;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	struct ibv_qp *peer; /* the destination; stays in RESET, so nothing reaches it */
	struct ibv_send_wr wr[CHAIN_MAX];
	struct ibv_sge sge[CHAIN_MAX][SGE_MAX];
};

static enum ibv_wr_opcode rnd_opcode(void)
{
	switch (rnd_below(5)) {
	case 0: case 1: return IBV_WR_SEND; /* every type carries it */
	case 2: return (enum ibv_wr_opcode)rnd_edge();
	default: return (enum ibv_wr_opcode)rnd_below(12); /* RDMA_WRITE .. DRIVER1 */
	}
}

static unsigned int rnd_send_flags(void)
{
	/* FENCE, SIGNALED, SOLICITED, INLINE (one time in four), IP_CSUM, or anything. */
	unsigned int flags = rnd_below(32);

	if (!one_in(4))
		flags &= ~(unsigned int)IBV_SEND_INLINE;
	return one_in(5) ? rnd_edge() : flags;
}

/* A chain of 1..CHAIN_MAX random WRs over the env's buffer; returns its head. */
static struct ibv_send_wr *random_chain(struct post_env *p, enum ibv_qp_type type, int *n)
{
	*n = 1 + (int)rnd_below(CHAIN_MAX);
	memset(p->wr, 0, sizeof(p->wr));
	for (int i = 0; i < *n; i++) {
		struct ibv_send_wr *w = &p->wr[i];

		for (int j = 0; j < SGE_MAX; j++) {
			p->sge[i][j].addr = (uintptr_t)(p->buf + rnd_below(POST_BUF / 2));
			p->sge[i][j].length = one_in(4) ? rnd_edge() : rnd_below(65);
			p->sge[i][j].lkey = one_in(4) ? (uint32_t)rnd64() : p->mr->lkey;
		}
		w->wr_id = rnd64();
		w->next = i + 1 < *n ? &p->wr[i + 1] : NULL;
		w->sg_list = p->sge[i];
		w->num_sge = one_in(5) ? (int)rnd_edge() : (int)rnd_below(4);
		w->opcode = rnd_opcode();
		w->send_flags = rnd_send_flags();
		w->imm_data = (__be32)rnd64();
		if (type == IBV_QPT_UD) {
			/* A valid AH (rdma-core dereferences it) to our own idle peer. */
			w->wr.ud.ah = p->ah;
			w->wr.ud.remote_qpn = p->peer->qp_num;
			w->wr.ud.remote_qkey = (uint32_t)rnd64();
		} else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->wr.atomic.remote_addr = one_in(2) ? (uintptr_t)p->buf : rnd64();
			w->wr.atomic.compare_add = rnd64();
			w->wr.atomic.swap = rnd64();
			w->wr.atomic.rkey = one_in(2) ? p->mr->rkey : (uint32_t)rnd64();
		} else {
			w->wr.rdma.remote_addr = one_in(2) ? (uintptr_t)p->buf : rnd64();
			w->wr.rdma.rkey = one_in(2) ? p->mr->rkey : (uint32_t)rnd64();
		}
	}
	return &p->wr[0];
}

/* What *bad_wr holds before a post: a refused post must change it. */
static struct ibv_send_wr untouched;

/* -1 unless @bad is one of the first @n WRs of the env's chain: its index. */
static int index_in_chain(const struct post_env *p, const struct ibv_send_wr *bad, int n)
{
	for (int i = 0; i < n; i++)
		if (bad == &p->wr[i])
			return i;
	return -1;
}

static int post_env_setup(void **state)
{
	struct post_env *p = calloc(1, sizeof(*p));
	struct ibv_ah_attr aa;

	if (!p || !(p->res = tu_res_open()))
		return -1;
	p->buf = calloc(1, POST_BUF);
	if (!p->buf)
		return -1;
	p->mr = ibv_reg_mr(p->res->pd, p->buf, POST_BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	tu_fill_ah(p->res, &aa);
	p->ah = ibv_create_ah(p->res->pd, &aa);
	if (!p->mr || !p->ah)
		return -1;
	*state = p;
	return 0;
}

static int post_env_teardown(void **state)
{
	struct post_env *p = *state;
	int rc = 0;

	if (!p)
		return 0;
	rc |= tu_destroy_kept_qps(p->res);
	if (p->ah)
		rc |= ibv_destroy_ah(p->ah);
	if (p->mr)
		rc |= ibv_dereg_mr(p->mr);
	rc |= tu_res_close(p->res);
	free(p->buf);
	free(p);
	*state = NULL;
	return rc ? -1 : 0;
}

/* What the posting tests leave: the AH and MR go, then the fixture's CQ and PD. */
static void post_env_release(struct post_env *p)
{
	assert_int_equal(ibv_destroy_ah(p->ah), 0);
	p->ah = NULL;
	assert_int_equal(ibv_dereg_mr(p->mr), 0);
	p->mr = NULL;
	release_fixture(p->res);
}

/*
 * Random WR chains (opcodes, SGE counts, lengths, keys, flags) on RC, UC and UD QPs in
 * RESET: every post is EINVAL (IBA 10.8.3: nothing is posted before RTS) naming the
 * first WR, and the QP stays in RESET. An empty chain answers 0 or EINVAL.
 */
static void test_post_send_random_wrs_in_reset_are_einval_at_the_first_wr(void **state)
{
	struct post_env *p = *state;
	struct tally t = { 0 };

	rng_seed(0x7265736574ULL);
	for (size_t k = 0; k < ARRAY_LEN(qp_types); k++) {
		struct ibv_qp *qp = tu_keep_qp(p->res, tu_create_qp(p->res, qp_types[k]));
		struct ibv_send_wr *bad;
		int rc;

		p->peer = tu_keep_qp(p->res, tu_create_qp(p->res, qp_types[k]));
		for (int round = 0; round < POST_ROUNDS; round++) {
			int n;
			struct ibv_send_wr *head = random_chain(p, qp_types[k], &n);

			bad = NULL;
			rc = ibv_post_send(qp, head, &bad);
			t.calls++;
			if (rc != EINVAL || bad != head || qp->state != IBV_QPS_RESET ||
			    tu_query_state(qp) != IBV_QPS_RESET)
				flag(&t,
				     "%s round %d: post of %d WRs (first: opcode %d num_sge %d "
				     "flags 0x%x) in RESET returned %d, bad_wr %d (want EINVAL, "
				     "0)\n",
				     tu_qp_type_str(qp_types[k]), round, n, head->opcode,
				     head->num_sge, head->send_flags, rc,
				     index_in_chain(p, bad, n));
		}
		bad = &untouched;
		rc = ibv_post_send(qp, NULL, &bad);
		t.calls++;
		if ((rc != 0 && rc != EINVAL) || (rc && bad))
			flag(&t, "%s: empty chain in RESET returned %d, bad_wr %p\n",
			     tu_qp_type_str(qp_types[k]), rc, (void *)bad);
		tu_destroy_qp(p->res, qp);
		tu_destroy_qp(p->res, p->peer);
	}
	finish(&t, "random post_send in RESET");
	post_env_release(p);
}

/*
 * The same on QPs in RTS (connected to an idle peer of this process): each post answers
 * 0, EINVAL (a bad WR) or ENOMEM (a full queue), a refused post names a WR of its chain
 * in *bad_wr, and no post takes longer than POST_MAX_MS (rdma-core's post_send writes
 * to a queue and rings a doorbell; it does not wait for the destination). After each
 * post the QP goes back to RESET (which discards what was posted) and reconnects.
 */
static void test_post_send_random_wrs_in_rts_answer_0_einval_or_enomem(void **state)
{
	struct post_env *p = *state;
	struct tally t = { 0 };
	int accepted = 0;

	rng_seed(0x727473ULL);
	for (size_t k = 0; k < ARRAY_LEN(qp_types); k++) {
		struct ibv_qp *qp = tu_keep_qp(p->res, tu_create_qp(p->res, qp_types[k]));
		struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };
		struct ibv_send_wr *bad;
		struct tu_conn c;
		int rc, stalls = 0;

		p->peer = tu_keep_qp(p->res, tu_create_qp(p->res, qp_types[k]));
		tu_conn_init(&c, p->res, p->peer->qp_num);
		for (int round = 0; round < POST_ROUNDS && stalls < POST_MAX_STALLS; round++) {
			int n, at;
			struct ibv_send_wr *head = random_chain(p, qp_types[k], &n);
			long long took;

			assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
			bad = NULL;
			took = tu_now_ms();
			rc = ibv_post_send(qp, head, &bad);
			took = tu_now_ms() - took;
			at = index_in_chain(p, bad, n);
			t.calls++;
			accepted += rc == 0;
			stalls += took > POST_MAX_MS;
			if ((rc != 0 && rc != EINVAL && rc != ENOMEM) || (rc && at < 0) ||
			    took > POST_MAX_MS)
				flag(&t,
				     "%s round %d: post of %d WRs (first: opcode %d num_sge %d "
				     "flags 0x%x) in RTS returned %d, bad_wr %d, after %lld ms%s\n",
				     tu_qp_type_str(qp_types[k]), round, n, head->opcode,
				     head->num_sge, head->send_flags, rc, at, took,
				     stalls == POST_MAX_STALLS ? "; its other rounds skipped" : "");
			assert_int_equal(ibv_modify_qp(qp, &reset, IBV_QP_STATE), 0);
		}
		assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
		bad = &untouched;
		rc = ibv_post_send(qp, NULL, &bad);
		t.calls++;
		if ((rc != 0 && rc != EINVAL) || (rc && bad))
			flag(&t, "%s: empty chain in RTS returned %d, bad_wr %p\n",
			     tu_qp_type_str(qp_types[k]), rc, (void *)bad);
		tu_destroy_qp(p->res, qp);
		tu_destroy_qp(p->res, p->peer);
	}
	print_message("%d posts accepted\n", accepted);
	assert_true(accepted > 0);
	finish(&t, "random post_send in RTS");
	post_env_release(p);
}

/* ---- async events of destroyed objects ---------------------------------------------- */

enum {
	CHILD_OK = 0,
	CHILD_SETUP_FAILED = 10,
	CHILD_NO_EVENT_RAISED = 11,
	CHILD_EVENT_OF_DESTROYED_QP = 12,
};

/* Child: a UD QP moves RTS -> SQD asking for SQ Drained, and is destroyed unread. */
static int destroy_qp_with_pending_event(void)
{
	struct ibv_context *ctx = NULL;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr ia = { .cap = { .max_send_wr = 1, .max_recv_wr = 1 },
				       .qp_type = IBV_QPT_UD };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1 };
	struct pollfd pfd = { .events = POLLIN };
	struct ibv_async_event ev;
	struct tu_conn c = { .qkey = 1 };
	struct ibv_pd *pd;
	struct ibv_qp *qp;
	uintptr_t gone;

	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "softverbs0"))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		return CHILD_SETUP_FAILED;
	pd = ibv_alloc_pd(ctx);
	ia.send_cq = ia.recv_cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	qp = pd && ia.send_cq ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp || tu_qp_connect(qp, &c, IBV_QPS_RTS) ||
	    ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY))
		return CHILD_SETUP_FAILED;
	pfd.fd = ctx->async_fd;
	if (poll(&pfd, 1, 2000) != 1)
		return CHILD_NO_EVENT_RAISED;
	gone = (uintptr_t)qp;
	if (ibv_destroy_qp(qp) || fcntl(ctx->async_fd, F_SETFL, O_NONBLOCK))
		return CHILD_SETUP_FAILED;
	while (ibv_get_async_event(ctx, &ev) == 0) {
		if ((uintptr_t)ev.element.qp == gone)
			return CHILD_EVENT_OF_DESTROYED_QP;
		ibv_ack_async_event(&ev);
	}
	return CHILD_OK;
}

/*
 * uverbs drops the pending async events of a QP when it is destroyed
 * (ib_uverbs_release_uevent), so ibv_get_async_event never hands out an event naming a
 * destroyed QP (whose ibv_ack_async_event would write to freed memory). Found by the
 * modify test above, whose RTS -> SQD moves with EN_SQD_ASYNC_NOTIFY queue
 * IBV_EVENT_SQ_DRAINED. In a child process, since reading freed memory may crash it;
 * alarm() bounds it.
 */
static void test_destroyed_qp_gets_no_async_event(void **state)
{
	const char *what;
	int status = 0;
	pid_t pid;

	(void)state;
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(10);
		_exit(destroy_qp_with_pending_event());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("the child died of signal %d (%s) reading the async events after the QP "
			 "was destroyed",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	switch (WEXITSTATUS(status)) {
	case CHILD_OK:
		return;
	case CHILD_SETUP_FAILED:
		what = "setting up the QP in SQD failed";
		break;
	case CHILD_NO_EVENT_RAISED:
		what = "RTS -> SQD with EN_SQD_ASYNC_NOTIFY raised no async event";
		break;
	case CHILD_EVENT_OF_DESTROYED_QP:
		what = "ibv_get_async_event handed out an event naming a QP destroyed before "
		       "(uverbs drops the pending events of a destroyed object)";
		break;
	default:
		what = "the child exited with an unexpected status (a sanitizer report above?)";
		break;
	}
	fail_msg("child status %d: %s", WEXITSTATUS(status), what);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
#define TP(f) cmocka_unit_test_setup_teardown(f, post_env_setup, post_env_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_modify_qp_random_attrs_answer_0_or_einval_and_keep_state),
		T(test_modify_qp_unknown_mask_bits_are_eopnotsupp),
		T(test_create_qp_random_init_attr_gives_qp_or_null_with_errno),
		T(test_create_cq_random_cqe_and_comp_vector_gives_cq_or_einval),
		T(test_reg_mr_random_access_and_length_gives_mr_or_the_errno_of_a_fault),
		T(test_reg_mr_writable_access_on_read_only_pages_is_efault),
		T(test_query_gid_pkey_port_answer_for_port_1_and_table_indexes_only),
		TP(test_post_send_random_wrs_in_reset_are_einval_at_the_first_wr),
		TP(test_post_send_random_wrs_in_rts_answer_0_einval_or_enomem),
		cmocka_unit_test(test_destroyed_qp_gets_no_async_event),
	};

	return cmocka_run_group_tests_name("verbs_bad_input", tests, NULL, NULL);
}
