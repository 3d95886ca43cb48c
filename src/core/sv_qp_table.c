#include "core/sv_qp_table.h"

#include <stddef.h>

const char *const sv_qp_state_name[] = {
	[IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR",
	[IBV_QPS_RTS] = "RTS",     [IBV_QPS_SQD] = "SQD",   [IBV_QPS_SQE] = "SQE",
	[IBV_QPS_ERR] = "ERR",
};

/* XI: XRC initiator (IBV_QPT_XRC_SEND), XT: XRC target (IBV_QPT_XRC_RECV). */
enum { T_RC, T_UC, T_UD, T_XI, T_XT, T_NUM };

struct transition {
	bool valid;
	int req[T_NUM];
	int opt[T_NUM];
};

enum { NSTATES = IBV_QPS_ERR + 1 };

/* Abbreviations for the table. */
#define PKEY IBV_QP_PKEY_INDEX
#define PORT IBV_QP_PORT
#define QKEY IBV_QP_QKEY
#define ACC IBV_QP_ACCESS_FLAGS
#define AV IBV_QP_AV
#define MTU IBV_QP_PATH_MTU
#define DQPN IBV_QP_DEST_QPN
#define RQPSN IBV_QP_RQ_PSN
#define SQPSN IBV_QP_SQ_PSN
#define DRD IBV_QP_MAX_DEST_RD_ATOMIC
#define RD IBV_QP_MAX_QP_RD_ATOMIC
#define RNRT IBV_QP_MIN_RNR_TIMER
#define TMO IBV_QP_TIMEOUT
#define RETRY IBV_QP_RETRY_CNT
#define RNRR IBV_QP_RNR_RETRY
#define ALT IBV_QP_ALT_PATH
#define MIG IBV_QP_PATH_MIG_STATE
#define CUR IBV_QP_CUR_STATE
#define SQDN IBV_QP_EN_SQD_ASYNC_NOTIFY

/* [cur][next]; any state may go to RESET, and any but RESET to ERR, with no attributes. */
static const struct transition table[NSTATES][NSTATES] = {
	[IBV_QPS_RESET] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_INIT] = {
			.valid = true,
			.req = { [T_RC] = PKEY | PORT | ACC, [T_UC] = PKEY | PORT | ACC,
				 [T_UD] = PKEY | PORT | QKEY, [T_XI] = PKEY | PORT | ACC,
				 [T_XT] = PKEY | PORT | ACC },
		},
	},
	[IBV_QPS_INIT] = {
		[IBV_QPS_INIT] = {
			.valid = true,
			.opt = { [T_RC] = PKEY | PORT | ACC, [T_UC] = PKEY | PORT | ACC,
				 [T_UD] = PKEY | PORT | QKEY, [T_XI] = PKEY | PORT | ACC,
				 [T_XT] = PKEY | PORT | ACC },
		},
		[IBV_QPS_RTR] = {
			.valid = true,
			.req = { [T_RC] = AV | MTU | DQPN | RQPSN | DRD | RNRT,
				 [T_UC] = AV | MTU | DQPN | RQPSN, [T_XI] = AV | MTU | DQPN | RQPSN,
				 [T_XT] = AV | MTU | DQPN | RQPSN | DRD | RNRT },
			.opt = { [T_RC] = ALT | ACC | PKEY, [T_UC] = ALT | ACC | PKEY,
				 [T_UD] = PKEY | QKEY, [T_XI] = ALT | ACC | PKEY,
				 [T_XT] = ALT | ACC | PKEY },
		},
	},
	[IBV_QPS_RTR] = {
		[IBV_QPS_RTS] = {
			.valid = true,
			.req = { [T_RC] = SQPSN | TMO | RETRY | RNRR | RD, [T_UC] = SQPSN,
				 [T_UD] = SQPSN, [T_XI] = SQPSN | TMO | RETRY | RNRR | RD,
				 [T_XT] = SQPSN | TMO },
			.opt = { [T_RC] = CUR | ALT | ACC | RNRT | MIG,
				 [T_UC] = CUR | ALT | ACC | MIG, [T_UD] = CUR | QKEY,
				 [T_XI] = CUR | ALT | ACC | MIG, [T_XT] = CUR | ALT | ACC | RNRT | MIG },
		},
	},
	[IBV_QPS_RTS] = {
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = { [T_RC] = CUR | ACC | ALT | MIG | RNRT, [T_UC] = CUR | ACC | ALT | MIG,
				 [T_UD] = CUR | QKEY, [T_XI] = CUR | ACC | ALT | MIG,
				 [T_XT] = CUR | ACC | ALT | MIG | RNRT },
		},
		[IBV_QPS_SQD] = {
			.valid = true,
			.opt = { [T_RC] = SQDN, [T_UC] = SQDN, [T_UD] = SQDN, [T_XI] = SQDN,
				 [T_XT] = SQDN },
		},
	},
	[IBV_QPS_SQD] = {
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = { [T_RC] = CUR | ALT | ACC | RNRT | MIG, [T_UC] = CUR | ALT | ACC | MIG,
				 [T_UD] = CUR | QKEY, [T_XI] = CUR | ALT | ACC | MIG,
				 [T_XT] = CUR | ALT | ACC | RNRT | MIG },
		},
		[IBV_QPS_SQD] = {
			.valid = true,
			.opt = { [T_RC] = PORT | AV | TMO | RETRY | RNRR | RD | DRD | ALT | ACC | PKEY |
					  RNRT | MIG,
				 [T_UC] = AV | ALT | ACC | PKEY | MIG, [T_UD] = PKEY | QKEY,
				 [T_XI] = PORT | AV | TMO | RETRY | RNRR | RD | ALT | ACC | PKEY | MIG,
				 [T_XT] = PORT | AV | TMO | DRD | ALT | ACC | PKEY | RNRT | MIG },
		},
	},
	[IBV_QPS_SQE] = {
		/* SQE exists for UC and UD only: an RC or XRC send error takes the QP to ERR. */
		[IBV_QPS_RTS] = {
			.valid = true,
			.opt = { [T_UC] = CUR | ACC, [T_UD] = CUR | QKEY },
		},
	},
	[IBV_QPS_ERR] = {
		[IBV_QPS_ERR] = { .valid = true },
	},
};

static int type_index(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC: return T_RC;
	case IBV_QPT_UC: return T_UC;
	case IBV_QPT_UD: return T_UD;
	case IBV_QPT_XRC_SEND: return T_XI;
	case IBV_QPT_XRC_RECV: return T_XT;
	default: return -1;
	}
}

bool sv_qp_type_supported(enum ibv_qp_type type)
{
	return type_index(type) >= 0;
}

static const struct transition *lookup(int t, enum ibv_qp_state cur, enum ibv_qp_state next)
{
	static const struct transition to_reset_or_err = { .valid = true };

	if ((unsigned)cur >= NSTATES || (unsigned)next >= NSTATES)
		return NULL;
	/* IBA 10.3.1: Error is entered from every state but Reset. */
	if (next == IBV_QPS_RESET ||
	    (next == IBV_QPS_ERR && cur != IBV_QPS_ERR && cur != IBV_QPS_RESET))
		return &to_reset_or_err;
	if (cur == IBV_QPS_SQE && t != T_UC && t != T_UD)
		return NULL;
	if (!table[cur][next].valid)
		return NULL;
	return &table[cur][next];
}

bool sv_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur,
			 enum ibv_qp_state next, int mask)
{
	int t = type_index(type);
	const struct transition *tr;

	if (t < 0)
		return false;
	if (!(mask & IBV_QP_STATE))
		next = cur;
	tr = lookup(t, cur, next);
	if (!tr)
		return false;
	if ((mask & tr->req[t]) != tr->req[t])
		return false;
	if (mask & ~(tr->req[t] | tr->opt[t] | IBV_QP_STATE))
		return false;
	return true;
}

int sv_qp_transition_required(enum ibv_qp_type type, enum ibv_qp_state cur,
			      enum ibv_qp_state next)
{
	int t = type_index(type);
	const struct transition *tr = t < 0 ? NULL : lookup(t, cur, next);

	return tr ? tr->req[t] : -1;
}
