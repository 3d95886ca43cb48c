/* The QP transition table (src/core/sv_qp_table.c) entry by entry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/sv_qp_table.h"

static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

static void test_any_state_to_reset_and_most_to_err(void **state)
{
	(void)state;
	for (int t = 0; t < 3; t++) {
		for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; s++) {
			if (s == IBV_QPS_SQE && types[t] == IBV_QPT_RC)
				continue;
			assert_true(sv_qp_transition_ok(types[t], s, IBV_QPS_RESET, IBV_QP_STATE));
			/* Error is entered from every state but Reset */
			assert_int_equal(sv_qp_transition_ok(types[t], s, IBV_QPS_ERR, IBV_QP_STATE),
					 s != IBV_QPS_RESET);
			/* ... with no attributes beside the state */
			assert_false(sv_qp_transition_ok(types[t], s, IBV_QPS_RESET,
							 IBV_QP_STATE | IBV_QP_QKEY));
		}
	}
}

static void test_reset_to_init_requires(void **state)
{
	int rc = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	int ud = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;

	(void)state;
	assert_true(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, rc));
	assert_true(sv_qp_transition_ok(IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_INIT, rc));
	assert_true(sv_qp_transition_ok(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, ud));
	/* UD has no access flags; RC has no Q_Key */
	assert_false(sv_qp_transition_ok(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, rc));
	assert_false(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, ud));
	/* each required attribute is required */
	for (int bit = 1; bit < (1 << 21); bit <<= 1)
		if ((rc & bit) && bit != IBV_QP_STATE)
			assert_false(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT,
							 rc & ~bit));
}

static void test_init_to_rtr(void **state)
{
	int rc = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	int uc = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;

	(void)state;
	assert_true(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, rc));
	assert_false(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, uc));
	assert_true(sv_qp_transition_ok(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, uc));
	/* UC has no RDMA READ responder resources to set */
	assert_false(sv_qp_transition_ok(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, rc));
	assert_true(sv_qp_transition_ok(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_STATE));
	assert_true(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR,
					rc | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX));
}

static void test_rtr_to_rts(void **state)
{
	int rc = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;

	(void)state;
	assert_true(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, rc));
	assert_false(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS,
					 IBV_QP_STATE | IBV_QP_SQ_PSN));
	assert_true(sv_qp_transition_ok(IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS,
					IBV_QP_STATE | IBV_QP_SQ_PSN));
	assert_true(sv_qp_transition_ok(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS,
					IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_QKEY));
}

static void test_illegal_transitions(void **state)
{
	(void)state;
	for (int t = 0; t < 3; t++) {
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_RESET, IBV_QPS_RTR, IBV_QP_STATE));
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_RESET, IBV_QPS_RTS, IBV_QP_STATE));
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_INIT, IBV_QPS_RTS, IBV_QP_STATE));
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_RTR, IBV_QPS_INIT, IBV_QP_STATE));
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_RTS, IBV_QPS_RTR, IBV_QP_STATE));
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_ERR, IBV_QPS_INIT, IBV_QP_STATE));
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_ERR, IBV_QPS_RTS, IBV_QP_STATE));
		/* out-of-range states */
		assert_false(sv_qp_transition_ok(types[t], IBV_QPS_RESET, 42, IBV_QP_STATE));
	}
	/* RC never sits in SQE */
	assert_false(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RTS, IBV_QP_STATE));
	assert_true(sv_qp_transition_ok(IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, IBV_QP_STATE));
	/* unsupported types have no transitions */
	assert_false(sv_qp_transition_ok(IBV_QPT_XRC_SEND, IBV_QPS_RESET, IBV_QPS_ERR, IBV_QP_STATE));
	assert_false(sv_qp_type_supported(IBV_QPT_RAW_PACKET));
}

static void test_modify_without_state(void **state)
{
	(void)state;
	/* Without IBV_QP_STATE the QP stays where it is: RTS -> RTS attribute change */
	assert_true(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RESET,
					IBV_QP_MIN_RNR_TIMER));
	assert_false(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_SQ_PSN));
	/* INIT -> INIT may change the port; RESET -> RESET takes nothing */
	assert_true(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_PORT));
	assert_false(sv_qp_transition_ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RESET, IBV_QP_PORT));
}

/* XRC (ib_modify_qp_is_ok's XRC_INI and XRC_TGT columns): the initiator is RC without
 * the responder's attributes, the target RC without the requester's. */
static void test_xrc_columns(void **state)
{
	const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
	const int resp = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	const int rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
	const int req = IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;

	(void)state;
	assert_true(sv_qp_type_supported(IBV_QPT_XRC_SEND));
	assert_true(sv_qp_type_supported(IBV_QPT_XRC_RECV));
	for (int t = 0; t < 2; t++) {
		enum ibv_qp_type type = t ? IBV_QPT_XRC_RECV : IBV_QPT_XRC_SEND;

		assert_true(sv_qp_transition_ok(type, IBV_QPS_RESET, IBV_QPS_INIT, init));
		assert_false(sv_qp_transition_ok(type, IBV_QPS_RESET, IBV_QPS_INIT,
						 init & ~IBV_QP_ACCESS_FLAGS));
		/* No SQ Error state for either end: a send error takes the QP to Error. */
		assert_false(sv_qp_transition_ok(type, IBV_QPS_SQE, IBV_QPS_RTS, IBV_QP_STATE));
		assert_true(sv_qp_transition_ok(type, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QP_STATE));
	}
	assert_true(sv_qp_transition_ok(IBV_QPT_XRC_SEND, IBV_QPS_INIT, IBV_QPS_RTR, rtr));
	assert_false(sv_qp_transition_ok(IBV_QPT_XRC_SEND, IBV_QPS_INIT, IBV_QPS_RTR, rtr | resp));
	assert_false(sv_qp_transition_ok(IBV_QPT_XRC_RECV, IBV_QPS_INIT, IBV_QPS_RTR, rtr));
	assert_true(sv_qp_transition_ok(IBV_QPT_XRC_RECV, IBV_QPS_INIT, IBV_QPS_RTR, rtr | resp));
	assert_true(sv_qp_transition_ok(IBV_QPT_XRC_SEND, IBV_QPS_RTR, IBV_QPS_RTS, rts | req));
	assert_false(sv_qp_transition_ok(IBV_QPT_XRC_SEND, IBV_QPS_RTR, IBV_QPS_RTS, rts));
	assert_true(sv_qp_transition_ok(IBV_QPT_XRC_RECV, IBV_QPS_RTR, IBV_QPS_RTS, rts));
	assert_false(sv_qp_transition_ok(IBV_QPT_XRC_RECV, IBV_QPS_RTR, IBV_QPS_RTS, rts | req));
	assert_true(sv_qp_transition_ok(IBV_QPT_XRC_RECV, IBV_QPS_RTR, IBV_QPS_RTS,
					rts | IBV_QP_MIN_RNR_TIMER));
	assert_false(sv_qp_transition_ok(IBV_QPT_XRC_SEND, IBV_QPS_RTR, IBV_QPS_RTS,
					 rts | req | IBV_QP_MIN_RNR_TIMER));
	assert_int_equal(sv_qp_transition_required(IBV_QPT_XRC_RECV, IBV_QPS_RTR, IBV_QPS_RTS),
			 IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
	/* Which end talks to which. */
	assert_int_equal(sv_qp_type_peer(IBV_QPT_XRC_SEND), IBV_QPT_XRC_RECV);
	assert_int_equal(sv_qp_type_peer(IBV_QPT_XRC_RECV), IBV_QPT_XRC_SEND);
	assert_int_equal(sv_qp_type_peer(IBV_QPT_RC), IBV_QPT_RC);
	assert_true(sv_qp_type_reliable(IBV_QPT_XRC_RECV));
	assert_false(sv_qp_type_reliable(IBV_QPT_UC));
}

static void test_count_of_legal_pairs(void **state)
{
	/* Every one of the 7 states -> RESET (7), every one but RESET -> ERR (6), plus
	 * RESET->INIT, INIT->INIT, INIT->RTR, RTR->RTS, RTS->RTS, RTS->SQD, SQD->RTS,
	 * SQD->SQD (8): 21 for RC. UC and UD also leave SQE for RTS: 22. */
	int expect[] = { 21, 22, 22 };

	(void)state;
	for (int t = 0; t < 3; t++) {
		int n = 0;

		for (int c = 0; c <= IBV_QPS_ERR; c++)
			for (int x = 0; x <= IBV_QPS_ERR; x++)
				if (sv_qp_transition_required(types[t], c, x) >= 0)
					n++;
		assert_int_equal(n, expect[t]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_any_state_to_reset_and_most_to_err),
		cmocka_unit_test(test_reset_to_init_requires),
		cmocka_unit_test(test_init_to_rtr),
		cmocka_unit_test(test_rtr_to_rts),
		cmocka_unit_test(test_illegal_transitions),
		cmocka_unit_test(test_modify_without_state),
		cmocka_unit_test(test_xrc_columns),
		cmocka_unit_test(test_count_of_legal_pairs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
