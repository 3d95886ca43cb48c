/*
 * Black-box tests of the QP state machine, through ibv_modify_qp / ibv_query_qp only.
 *
 * The rule table below is IBA vol 1 §10.3.1 (QP state transition properties) as Linux
 * applies it for every kernel provider (rxe, mlx5: ib_modify_qp_is_ok in
 * drivers/infiniband/core/verbs.c). A transition is legal when the table has a row for
 * (current, next); the mask must then hold every required attribute of that row for the
 * QP's type and nothing outside required | optional | IBV_QP_STATE. A modify without
 * IBV_QP_STATE is the transition from the current state to itself. Everything else is
 * EINVAL and leaves the QP as it was.
 *
 * SQE is entered only by a send error on UC/UD, never by a modify, so it appears only as
 * a target (always illegal) here.
 *
 * RESET -> ERR: the kernel table has no such row, so rxe, mlx5 and every other kernel
 * provider answer EINVAL (a 2007 mlx4 commit read the IBA text as allowing it; the core
 * table has refused it ever since ib_modify_qp_is_ok existed in its present form). These
 * tests follow what rdma-core on Linux shows.
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S(x) IBV_QPS_##x

/* Short names for the attribute bits, so that the table reads as one line per row. */
enum {
	A_CUR = IBV_QP_CUR_STATE,
	A_SQDN = IBV_QP_EN_SQD_ASYNC_NOTIFY,
	A_ACC = IBV_QP_ACCESS_FLAGS,
	A_PKEY = IBV_QP_PKEY_INDEX,
	A_PORT = IBV_QP_PORT,
	A_QKEY = IBV_QP_QKEY,
	A_AV = IBV_QP_AV,
	A_MTU = IBV_QP_PATH_MTU,
	A_TMO = IBV_QP_TIMEOUT,
	A_RETRY = IBV_QP_RETRY_CNT,
	A_RNRR = IBV_QP_RNR_RETRY,
	A_RQPSN = IBV_QP_RQ_PSN,
	A_RD = IBV_QP_MAX_QP_RD_ATOMIC,
	A_ALT = IBV_QP_ALT_PATH,
	A_RNRT = IBV_QP_MIN_RNR_TIMER,
	A_SQPSN = IBV_QP_SQ_PSN,
	A_DRD = IBV_QP_MAX_DEST_RD_ATOMIC,
	A_MIG = IBV_QP_PATH_MIG_STATE,
	A_CAP = IBV_QP_CAP,
	A_DQPN = IBV_QP_DEST_QPN,
};

/* Every attribute bit of the standard set (IBV_QP_STATE .. IBV_QP_DEST_QPN) but STATE. */
static const struct {
	int bit;
	const char *name;
} attr_bits[] = {
	{ A_CUR, "CUR_STATE" },   { A_SQDN, "EN_SQD_ASYNC_NOTIFY" },
	{ A_ACC, "ACCESS_FLAGS" }, { A_PKEY, "PKEY_INDEX" },
	{ A_PORT, "PORT" },        { A_QKEY, "QKEY" },
	{ A_AV, "AV" },            { A_MTU, "PATH_MTU" },
	{ A_TMO, "TIMEOUT" },      { A_RETRY, "RETRY_CNT" },
	{ A_RNRR, "RNR_RETRY" },   { A_RQPSN, "RQ_PSN" },
	{ A_RD, "MAX_QP_RD_ATOMIC" }, { A_ALT, "ALT_PATH" },
	{ A_RNRT, "MIN_RNR_TIMER" }, { A_SQPSN, "SQ_PSN" },
	{ A_DRD, "MAX_DEST_RD_ATOMIC" }, { A_MIG, "PATH_MIG_STATE" },
	{ A_CAP, "CAP" },          { A_DQPN, "DEST_QPN" },
};
#define N_ATTR_BITS (sizeof(attr_bits) / sizeof(attr_bits[0]))

enum { T_RC, T_UC, T_UD, T_N };

/* One legal transition: required and optional attributes per type (RC, UC, UD). */
struct rule {
	enum ibv_qp_state from, to;
	int req[T_N];
	int opt[T_N];
};

static const struct rule rules[] = {
	{ S(RESET), S(RESET), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(RESET), S(INIT),
	  { A_PKEY | A_PORT | A_ACC, A_PKEY | A_PORT | A_ACC, A_PKEY | A_PORT | A_QKEY },
	  { 0, 0, 0 } },

	{ S(INIT), S(RESET), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(INIT), S(ERR), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(INIT), S(INIT), { 0, 0, 0 },
	  { A_PKEY | A_PORT | A_ACC, A_PKEY | A_PORT | A_ACC, A_PKEY | A_PORT | A_QKEY } },
	{ S(INIT), S(RTR),
	  { A_AV | A_MTU | A_DQPN | A_RQPSN | A_DRD | A_RNRT, A_AV | A_MTU | A_DQPN | A_RQPSN,
	    0 },
	  { A_ALT | A_ACC | A_PKEY, A_ALT | A_ACC | A_PKEY, A_PKEY | A_QKEY } },

	{ S(RTR), S(RESET), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(RTR), S(ERR), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(RTR), S(RTS),
	  { A_TMO | A_RETRY | A_RNRR | A_SQPSN | A_RD, A_SQPSN, A_SQPSN },
	  { A_CUR | A_ALT | A_ACC | A_RNRT | A_MIG, A_CUR | A_ALT | A_ACC | A_MIG,
	    A_CUR | A_QKEY } },

	{ S(RTS), S(RESET), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(RTS), S(ERR), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(RTS), S(RTS), { 0, 0, 0 },
	  { A_CUR | A_ACC | A_ALT | A_MIG | A_RNRT, A_CUR | A_ACC | A_ALT | A_MIG,
	    A_CUR | A_QKEY } },
	{ S(RTS), S(SQD), { 0, 0, 0 }, { A_SQDN, A_SQDN, A_SQDN } },

	{ S(SQD), S(RESET), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(SQD), S(ERR), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(SQD), S(RTS), { 0, 0, 0 },
	  { A_CUR | A_ALT | A_ACC | A_RNRT | A_MIG, A_CUR | A_ALT | A_ACC | A_MIG,
	    A_CUR | A_QKEY } },
	{ S(SQD), S(SQD), { 0, 0, 0 },
	  { A_PORT | A_AV | A_TMO | A_RETRY | A_RNRR | A_RD | A_DRD | A_ALT | A_ACC | A_PKEY |
		    A_RNRT | A_MIG,
	    A_AV | A_ALT | A_ACC | A_PKEY | A_MIG, A_PKEY | A_QKEY } },

	{ S(SQE), S(RESET), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(SQE), S(ERR), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(SQE), S(RTS), { 0, 0, 0 }, { 0, A_CUR | A_ACC, A_CUR | A_QKEY } },

	{ S(ERR), S(RESET), { 0, 0, 0 }, { 0, 0, 0 } },
	{ S(ERR), S(ERR), { 0, 0, 0 }, { 0, 0, 0 } },
};
#define N_RULES (sizeof(rules) / sizeof(rules[0]))

static const char *const state_name[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

static const enum ibv_qp_state from_states[] = { S(RESET), S(INIT), S(RTR), S(RTS), S(SQD),
						 S(ERR) };
static const enum ibv_qp_state to_states[] = { S(RESET), S(INIT), S(RTR), S(RTS),
					       S(SQD),	 S(SQE),  S(ERR) };

#define WAIT_MS 2000

struct env {
	struct tu_res *res; /* keeps every QP, the peers included */
	enum ibv_mtu mtu;
	uint8_t rd; /* within both max_qp_rd_atom and max_qp_init_rd_atom */
	struct ibv_qp *peer[T_N];
};

static int type_index(enum ibv_qp_type type)
{
	return type == IBV_QPT_RC ? T_RC : type == IBV_QPT_UC ? T_UC : T_UD;
}

static const char *sname(int s)
{
	return s >= 0 && s < (int)ARRAY_LEN(state_name) ? state_name[s] : "?";
}

static const char *mask_str(int mask, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = 0;
	if (mask & IBV_QP_STATE)
		off += (size_t)snprintf(buf + off, len - off, "STATE");
	for (size_t i = 0; i < N_ATTR_BITS && off < len; i++)
		if (mask & attr_bits[i].bit)
			off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "|" : "",
						attr_bits[i].name);
	return buf;
}

static const struct rule *find_rule(enum ibv_qp_state from, enum ibv_qp_state to)
{
	for (size_t i = 0; i < N_RULES; i++)
		if (rules[i].from == from && rules[i].to == to)
			return &rules[i];
	return NULL;
}

static int req_mask(enum ibv_qp_state from, enum ibv_qp_state to, int t)
{
	const struct rule *r = find_rule(from, to);

	return r ? r->req[t] : 0;
}

/* For an illegal (from, to): the attributes `to` is normally entered with. */
static int entry_mask(enum ibv_qp_state to, int t)
{
	switch (to) {
	case IBV_QPS_INIT:
		return req_mask(S(RESET), S(INIT), t);
	case IBV_QPS_RTR:
		return req_mask(S(INIT), S(RTR), t);
	case IBV_QPS_RTS:
		return req_mask(S(RTR), S(RTS), t);
	default:
		return 0;
	}
}

/* ---- fixture ------------------------------------------------------------------------ */

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	if (!e || !(e->res = tu_res_open()))
		return -1;
	e->mtu = e->res->port.active_mtu < IBV_MTU_1024 ? e->res->port.active_mtu : IBV_MTU_1024;
	e->rd = (e->res->dev.max_qp_rd_atom >= 1 && e->res->dev.max_qp_init_rd_atom >= 1) ? 1 : 0;
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;
	int rc;

	if (!e)
		return 0;
	rc = tu_res_close(e->res);
	free(e);
	*state = NULL;
	return rc;
}

static struct ibv_qp *new_qp(struct env *e, enum ibv_qp_type type)
{
	return tu_keep_qp(e->res, tu_create_qp(e->res, type));
}

static void free_qp(struct env *e, struct ibv_qp *qp)
{
	tu_destroy_qp(e->res, qp);
}

/* A QP of the same type whose number serves as the destination of RC/UC QPs. */
static uint32_t peer_qpn(struct env *e, enum ibv_qp_type type)
{
	int t = type_index(type);

	if (!e->peer[t])
		e->peer[t] = new_qp(e, type);
	return e->peer[t]->qp_num;
}

/* ---- attributes --------------------------------------------------------------------- */

/* Valid values for every attribute, for a transition from @from to @to. */
static void fill_attr(struct env *e, struct ibv_qp *qp, enum ibv_qp_state from,
		      enum ibv_qp_state to, struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = to;
	a->cur_qp_state = from;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qkey = 0x11111111;
	a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (qp->qp_type == IBV_QPT_RC)
		a->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	a->path_mtu = e->mtu;
	a->dest_qp_num = qp->qp_type == IBV_QPT_UD ? 0 : peer_qpn(e, qp->qp_type);
	a->rq_psn = 0x1234;
	a->sq_psn = 0x4321;
	a->max_dest_rd_atomic = e->rd;
	a->min_rnr_timer = 12;
	a->timeout = 14;
	a->retry_cnt = 7;
	a->rnr_retry = 7;
	a->max_rd_atomic = e->rd;
	tu_fill_ah(e->res, &a->ah_attr);
	tu_fill_ah(e->res, &a->alt_ah_attr);
	a->alt_pkey_index = 0;
	a->alt_port_num = 1;
	a->alt_timeout = 14;
	a->path_mig_state = IBV_MIG_MIGRATED;
	a->en_sqd_async_notify = 0;
	/* What tu_create_qp asked for: within the device limits. */
	a->cap.max_send_wr = 16;
	a->cap.max_recv_wr = 16;
	a->cap.max_send_sge = 2;
	a->cap.max_recv_sge = 2;
	a->cap.max_inline_data = 64;
}

static int query_state(struct ibv_qp *qp, int *sq_draining)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	if (sq_draining)
		*sq_draining = a.sq_draining;
	return a.qp_state;
}

/* IBA §10.3.1: SQD has a draining and a drained phase; leaving SQD needs drained. */
static int wait_drained(struct ibv_qp *qp)
{
	long long end = tu_now_ms() + WAIT_MS;
	int draining = 1;

	do {
		if (query_state(qp, &draining) != IBV_QPS_SQD)
			return -1;
	} while (draining && tu_now_ms() < end);
	return draining ? ETIMEDOUT : 0;
}

/* The legal move @from -> @to with exactly the required attributes. */
static int step(struct env *e, struct ibv_qp *qp, enum ibv_qp_state from, enum ibv_qp_state to)
{
	struct ibv_qp_attr a;

	fill_attr(e, qp, from, to, &a);
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | req_mask(from, to, type_index(qp->qp_type)));
}

/* RESET -> INIT -> RTR -> RTS [-> SQD (drained) | -> ERR] by the rows of the table above
 * (not tu_qp_connect: the masks are the table's and the values fill_attr's, which
 * test_modify_without_state tells apart from its new ones); 0 or the failing return. */
static int drive(struct env *e, struct ibv_qp *qp, enum ibv_qp_state target)
{
	enum ibv_qp_state stop = (target == S(SQD) || target == S(ERR)) ? S(RTS) : target;
	enum ibv_qp_state cur = S(RESET);
	int rc;

	while (cur != stop) {
		enum ibv_qp_state next = (enum ibv_qp_state)(cur + 1);

		rc = step(e, qp, cur, next);
		if (rc)
			return rc;
		cur = next;
	}
	if (target == S(SQD)) {
		rc = step(e, qp, S(RTS), S(SQD));
		return rc ? rc : wait_drained(qp);
	}
	if (target == S(ERR))
		return step(e, qp, S(RTS), S(ERR));
	return 0;
}

static struct ibv_qp *qp_in(struct env *e, enum ibv_qp_type type, enum ibv_qp_state st)
{
	struct ibv_qp *qp = new_qp(e, type);
	int rc = drive(e, qp, st);

	if (rc)
		fail_msg("%s: cannot drive a fresh QP to %s through legal transitions: %d",
			 tu_qp_type_str(type), sname(st), rc);
	return qp;
}

/*
 * Checks the outcome of one modify: return value, the state ibv_query_qp reports and
 * qp->state. Prints and returns 1 on a mismatch, so that a whole table is reported.
 */
static int check(struct ibv_qp *qp, int rc, int want_rc, enum ibv_qp_state want_state,
		 const char *what)
{
	int st = query_state(qp, NULL);

	if (rc == want_rc && st == (int)want_state && qp->state == want_state)
		return 0;
	print_error("%s %s: ibv_modify_qp returned %d (want %d); ibv_query_qp state %s, "
		    "qp->state %s (want %s)\n",
		    tu_qp_type_str(qp->qp_type), what, rc, want_rc, sname(st), sname(qp->state),
		    sname(want_state));
	return 1;
}

/* ---- the transition matrix ---------------------------------------------------------- */

/* Every (from, to): legal pairs succeed with exactly the required mask and land in `to`;
 * illegal pairs fail with EINVAL and leave `from`. */
static void check_matrix(struct env *e, enum ibv_qp_type type)
{
	int t = type_index(type), bad = 0, n = 0;
	char what[160], mb[256];

	for (size_t i = 0; i < ARRAY_LEN(from_states); i++) {
		for (size_t j = 0; j < ARRAY_LEN(to_states); j++) {
			enum ibv_qp_state from = from_states[i], to = to_states[j];
			const struct rule *r = find_rule(from, to);
			int mask = IBV_QP_STATE | (r ? r->req[t] : entry_mask(to, t));
			struct ibv_qp *qp = new_qp(e, type);
			struct ibv_qp_attr a;
			int rc = drive(e, qp, from);

			n++;
			if (rc) {
				print_error("%s: cannot drive a fresh QP to %s: %d; skipped %s -> %s\n",
					    tu_qp_type_str(type), sname(from), rc, sname(from),
					    sname(to));
				bad++;
				free_qp(e, qp);
				continue;
			}
			fill_attr(e, qp, from, to, &a);
			rc = ibv_modify_qp(qp, &a, mask);
			snprintf(what, sizeof(what), "%s -> %s (%s, %s)", sname(from), sname(to),
				 r ? "legal" : "illegal", mask_str(mask, mb, sizeof(mb)));
			bad += check(qp, rc, r ? 0 : EINVAL, r ? to : from, what);
			free_qp(e, qp);
		}
	}
	print_message("%s: %d transitions checked, %d wrong\n", tu_qp_type_str(type), n, bad);
	assert_int_equal(bad, 0);
}

static void test_transition_matrix_rc(void **state)
{
	check_matrix(*state, IBV_QPT_RC);
}

static void test_transition_matrix_uc(void **state)
{
	check_matrix(*state, IBV_QPT_UC);
}

static void test_transition_matrix_ud(void **state)
{
	check_matrix(*state, IBV_QPT_UD);
}

/* ---- required attributes -------------------------------------------------------------- */

/* For every legal transition, dropping any one required attribute is EINVAL (state kept);
 * the full mask then succeeds, which shows the missing bit was the reason. */
static void check_required(struct env *e, enum ibv_qp_type type)
{
	int t = type_index(type), bad = 0, n = 0;
	char what[160];

	for (size_t i = 0; i < N_RULES; i++) {
		const struct rule *r = &rules[i];
		struct ibv_qp *qp;
		struct ibv_qp_attr a;

		if (!r->req[t] || r->from == S(SQE))
			continue;
		qp = qp_in(e, type, r->from);
		for (size_t b = 0; b < N_ATTR_BITS; b++) {
			if (!(r->req[t] & attr_bits[b].bit))
				continue;
			fill_attr(e, qp, r->from, r->to, &a);
			snprintf(what, sizeof(what), "%s -> %s without required %s", sname(r->from),
				 sname(r->to), attr_bits[b].name);
			bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE | (r->req[t] & ~attr_bits[b].bit)),
				     EINVAL, r->from, what);
			n++;
		}
		fill_attr(e, qp, r->from, r->to, &a);
		snprintf(what, sizeof(what), "%s -> %s with all required", sname(r->from),
			 sname(r->to));
		bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE | r->req[t]), 0, r->to, what);
		free_qp(e, qp);
	}
	print_message("%s: %d missing-attribute cases, %d wrong\n", tu_qp_type_str(type), n, bad);
	assert_true(n > 0);
	assert_int_equal(bad, 0);
}

static void test_missing_required_attr_rc(void **state)
{
	check_required(*state, IBV_QPT_RC);
}

static void test_missing_required_attr_uc(void **state)
{
	check_required(*state, IBV_QPT_UC);
}

static void test_missing_required_attr_ud(void **state)
{
	check_required(*state, IBV_QPT_UD);
}

/* ---- attributes outside required | optional ------------------------------------------- */

static void check_extra(struct env *e, enum ibv_qp_type type)
{
	int t = type_index(type), bad = 0, n = 0;
	char what[160];

	for (size_t i = 0; i < N_RULES; i++) {
		const struct rule *r = &rules[i];
		int allowed = r->req[t] | r->opt[t];
		struct ibv_qp *qp;
		struct ibv_qp_attr a;

		if (r->from == S(SQE))
			continue;
		qp = qp_in(e, type, r->from);
		for (size_t b = 0; b < N_ATTR_BITS; b++) {
			if (allowed & attr_bits[b].bit)
				continue;
			fill_attr(e, qp, r->from, r->to, &a);
			snprintf(what, sizeof(what), "%s -> %s with disallowed %s", sname(r->from),
				 sname(r->to), attr_bits[b].name);
			bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE | r->req[t] | attr_bits[b].bit),
				     EINVAL, r->from, what);
			n++;
		}
		fill_attr(e, qp, r->from, r->to, &a);
		snprintf(what, sizeof(what), "%s -> %s with the required mask", sname(r->from),
			 sname(r->to));
		bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE | r->req[t]), 0, r->to, what);
		free_qp(e, qp);
	}
	print_message("%s: %d disallowed-attribute cases, %d wrong\n", tu_qp_type_str(type), n, bad);
	assert_int_equal(bad, 0);
}

static void test_disallowed_attr_rc(void **state)
{
	check_extra(*state, IBV_QPT_RC);
}

static void test_disallowed_attr_uc(void **state)
{
	check_extra(*state, IBV_QPT_UC);
}

static void test_disallowed_attr_ud(void **state)
{
	check_extra(*state, IBV_QPT_UD);
}

/* ---- optional attributes ------------------------------------------------------------ */

/*
 * Each optional attribute alone, on top of the required ones, is accepted. Not exercised:
 * ALT_PATH and PATH_MIG_STATE (automatic path migration; the kernel refuses alternate
 * paths on RoCE ports in _ib_modify_qp), and AV/PORT in SQD -> SQD (uverbs ties the
 * port to the AV there).
 */
static void check_optional(struct env *e, enum ibv_qp_type type)
{
	int t = type_index(type), bad = 0, n = 0;
	char what[160];

	for (size_t i = 0; i < N_RULES; i++) {
		const struct rule *r = &rules[i];
		int opt = r->opt[t] & ~(A_ALT | A_MIG);

		if (r->from == S(SQE))
			continue;
		if (r->from == S(SQD) && r->to == S(SQD))
			opt &= ~(A_AV | A_PORT);
		for (size_t b = 0; b < N_ATTR_BITS; b++) {
			struct ibv_qp *qp;
			struct ibv_qp_attr a;

			if (!(opt & attr_bits[b].bit))
				continue;
			qp = qp_in(e, type, r->from);
			fill_attr(e, qp, r->from, r->to, &a);
			snprintf(what, sizeof(what), "%s -> %s with optional %s", sname(r->from),
				 sname(r->to), attr_bits[b].name);
			bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE | r->req[t] | attr_bits[b].bit),
				     0, r->to, what);
			free_qp(e, qp);
			n++;
		}
	}
	print_message("%s: %d optional-attribute cases, %d wrong\n", tu_qp_type_str(type), n, bad);
	assert_true(n > 0);
	assert_int_equal(bad, 0);
}

static void test_optional_attr_rc(void **state)
{
	check_optional(*state, IBV_QPT_RC);
}

static void test_optional_attr_uc(void **state)
{
	check_optional(*state, IBV_QPT_UC);
}

static void test_optional_attr_ud(void **state)
{
	check_optional(*state, IBV_QPT_UD);
}

/* ---- modify without IBV_QP_STATE ---------------------------------------------------- */

/* A new value for one attribute, distinct from what fill_attr gives where possible. */
static void set_new_value(struct ibv_qp_attr *a, int bit)
{
	switch (bit) {
	case A_RNRT: a->min_rnr_timer = 20; break;
	case A_ACC: a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE; break;
	case A_QKEY: a->qkey = 0x22222222; break;
	case A_MTU: a->path_mtu = IBV_MTU_256; break;
	case A_DQPN: a->dest_qp_num = 0xabcd; break;
	case A_RQPSN: a->rq_psn = 0x777; break;
	case A_SQPSN: a->sq_psn = 0x888; break;
	case A_DRD: a->max_dest_rd_atomic = 0; break;
	case A_TMO: a->timeout = 20; break;
	default: break; /* PKEY_INDEX 0, PORT 1: the only valid values */
	}
}

static uint64_t value_of(const struct ibv_qp_attr *a, int bit)
{
	switch (bit) {
	case A_RNRT: return a->min_rnr_timer;
	case A_ACC: return (uint64_t)a->qp_access_flags;
	case A_QKEY: return a->qkey;
	case A_MTU: return a->path_mtu;
	case A_DQPN: return a->dest_qp_num;
	case A_RQPSN: return a->rq_psn;
	case A_SQPSN: return a->sq_psn;
	case A_DRD: return a->max_dest_rd_atomic;
	case A_TMO: return a->timeout;
	case A_PKEY: return a->pkey_index;
	case A_PORT: return a->port_num;
	default: return 0;
	}
}

static uint64_t query_value(struct ibv_qp *qp, int bit)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	assert_int_equal(ibv_query_qp(qp, &a, bit | IBV_QP_STATE, &ia), 0);
	return value_of(&a, bit);
}

static void test_modify_without_state(void **state)
{
	static const struct {
		enum ibv_qp_type type;
		enum ibv_qp_state in;
		int bit;
		int want;
	} cases[] = {
		/* optional in (s -> s): applied, state kept */
		{ IBV_QPT_RC, S(RTS), A_RNRT, 0 },
		{ IBV_QPT_RC, S(RTS), A_ACC, 0 },
		{ IBV_QPT_UC, S(RTS), A_ACC, 0 },
		{ IBV_QPT_UD, S(RTS), A_QKEY, 0 },
		{ IBV_QPT_RC, S(INIT), A_PKEY, 0 },
		{ IBV_QPT_RC, S(INIT), A_ACC, 0 },
		{ IBV_QPT_UC, S(INIT), A_PORT, 0 },
		{ IBV_QPT_UD, S(INIT), A_QKEY, 0 },
		{ IBV_QPT_RC, S(SQD), A_TMO, 0 },
		/* required only in another transition: refused, value kept */
		{ IBV_QPT_RC, S(RTS), A_MTU, EINVAL },
		{ IBV_QPT_RC, S(RTS), A_DQPN, EINVAL },
		{ IBV_QPT_RC, S(RTS), A_RQPSN, EINVAL },
		{ IBV_QPT_RC, S(RTS), A_SQPSN, EINVAL },
		{ IBV_QPT_RC, S(RTS), A_DRD, EINVAL },
		{ IBV_QPT_RC, S(RTS), A_TMO, EINVAL },
		{ IBV_QPT_RC, S(RTS), A_PKEY, EINVAL },
		{ IBV_QPT_UC, S(RTS), A_RNRT, EINVAL },
		{ IBV_QPT_UC, S(RTS), A_SQPSN, EINVAL },
		{ IBV_QPT_UD, S(RTS), A_SQPSN, EINVAL },
		{ IBV_QPT_UD, S(RTS), A_PKEY, EINVAL },
		{ IBV_QPT_RC, S(INIT), A_DQPN, EINVAL },
		{ IBV_QPT_UD, S(INIT), A_SQPSN, EINVAL },
		/* states without a (s -> s) row take nothing */
		{ IBV_QPT_RC, S(RTR), A_RNRT, EINVAL },
		{ IBV_QPT_UD, S(RTR), A_QKEY, EINVAL },
		{ IBV_QPT_RC, S(RESET), A_PKEY, EINVAL },
		{ IBV_QPT_UD, S(ERR), A_QKEY, EINVAL },
	};
	struct env *e = *state;
	int bad = 0;
	char what[160];

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct ibv_qp *qp = qp_in(e, cases[i].type, cases[i].in);
		uint64_t before = query_value(qp, cases[i].bit), want, after;
		struct ibv_qp_attr a;
		int rc;

		fill_attr(e, qp, cases[i].in, cases[i].in, &a);
		set_new_value(&a, cases[i].bit);
		want = cases[i].want ? before : value_of(&a, cases[i].bit);
		rc = ibv_modify_qp(qp, &a, cases[i].bit);
		snprintf(what, sizeof(what), "in %s, mask %s alone (no IBV_QP_STATE)",
			 sname(cases[i].in), mask_str(cases[i].bit, (char[64]){ 0 }, 64));
		bad += check(qp, rc, cases[i].want, cases[i].in, what);
		after = query_value(qp, cases[i].bit);
		if (after != want) {
			print_error("%s %s: attribute reads %llu after the modify, want %llu\n",
				    tu_qp_type_str(cases[i].type), what, (unsigned long long)after,
				    (unsigned long long)want);
			bad++;
		}
		free_qp(e, qp);
	}
	assert_int_equal(bad, 0);
}

/* ---- bad attribute values ----------------------------------------------------------- */

enum tweak {
	TW_PORT_2,
	TW_PORT_0,
	TW_PKEY_TBL_LEN,
	TW_MTU_0,
	TW_MTU_ABOVE_4096,
	TW_DEST_RD_ATOMIC_ABOVE_MAX,
	TW_MIN_RNR_TIMER_32,
	TW_SGID_INDEX_TBL_LEN,
	TW_AV_PORT_2,
	TW_RD_ATOMIC_ABOVE_MAX,
	TW_RETRY_CNT_8,
	TW_RNR_RETRY_8,
	TW_TIMEOUT_32,
};

/* Applies @tw to @a; false when the device limits leave no invalid value to try. */
static bool apply_tweak(struct env *e, enum tweak tw, struct ibv_qp_attr *a)
{
	/* The initiator depth is bounded by max_qp_init_rd_atom and the responder depth by
	 * max_qp_rd_atom; one past the larger of the two is invalid for both. */
	unsigned int rd_max = e->res->dev.max_qp_rd_atom > e->res->dev.max_qp_init_rd_atom ?
				      (unsigned int)e->res->dev.max_qp_rd_atom :
				      (unsigned int)e->res->dev.max_qp_init_rd_atom;

	switch (tw) {
	case TW_PORT_2: a->port_num = 2; return true;
	case TW_PORT_0: a->port_num = 0; return true;
	case TW_PKEY_TBL_LEN: a->pkey_index = e->res->port.pkey_tbl_len; return true;
	case TW_MTU_0: a->path_mtu = (enum ibv_mtu)0; return true;
	case TW_MTU_ABOVE_4096: a->path_mtu = (enum ibv_mtu)(IBV_MTU_4096 + 1); return true;
	case TW_DEST_RD_ATOMIC_ABOVE_MAX:
		if (rd_max >= UINT8_MAX)
			return false;
		a->max_dest_rd_atomic = (uint8_t)(rd_max + 1);
		return true;
	case TW_MIN_RNR_TIMER_32: a->min_rnr_timer = 32; return true;
	case TW_SGID_INDEX_TBL_LEN:
		if (e->res->port.gid_tbl_len > UINT8_MAX)
			return false;
		a->ah_attr.grh.sgid_index = (uint8_t)e->res->port.gid_tbl_len;
		return true;
	case TW_AV_PORT_2: a->ah_attr.port_num = 2; return true;
	case TW_RD_ATOMIC_ABOVE_MAX:
		if (rd_max >= UINT8_MAX)
			return false;
		a->max_rd_atomic = (uint8_t)(rd_max + 1);
		return true;
	case TW_RETRY_CNT_8: a->retry_cnt = 8; return true;
	case TW_RNR_RETRY_8: a->rnr_retry = 8; return true;
	case TW_TIMEOUT_32: a->timeout = 32; return true;
	}
	return false;
}

#define RC_ (1u << T_RC)
#define UC_ (1u << T_UC)
#define UD_ (1u << T_UD)

static void test_bad_attribute_values(void **state)
{
	static const struct {
		const char *what;
		enum ibv_qp_state from, to;
		unsigned int types;
		enum tweak tw;
	} cases[] = {
		{ "port_num 2 (one port)", S(RESET), S(INIT), RC_ | UC_ | UD_, TW_PORT_2 },
		{ "port_num 0", S(RESET), S(INIT), RC_ | UC_ | UD_, TW_PORT_0 },
		{ "pkey_index = pkey_tbl_len", S(RESET), S(INIT), RC_ | UC_ | UD_, TW_PKEY_TBL_LEN },
		{ "pkey_index = pkey_tbl_len", S(INIT), S(INIT), RC_ | UD_, TW_PKEY_TBL_LEN },
		{ "path_mtu 0", S(INIT), S(RTR), RC_ | UC_, TW_MTU_0 },
		{ "path_mtu above IBV_MTU_4096", S(INIT), S(RTR), RC_ | UC_, TW_MTU_ABOVE_4096 },
		{ "max_dest_rd_atomic above the device limit", S(INIT), S(RTR), RC_,
		  TW_DEST_RD_ATOMIC_ABOVE_MAX },
		{ "min_rnr_timer 32 (5-bit field)", S(INIT), S(RTR), RC_, TW_MIN_RNR_TIMER_32 },
		{ "sgid_index = gid_tbl_len", S(INIT), S(RTR), RC_ | UC_, TW_SGID_INDEX_TBL_LEN },
		{ "ah_attr.port_num 2", S(INIT), S(RTR), RC_ | UC_, TW_AV_PORT_2 },
		{ "max_rd_atomic above the device limit", S(RTR), S(RTS), RC_,
		  TW_RD_ATOMIC_ABOVE_MAX },
		{ "retry_cnt 8 (3-bit field)", S(RTR), S(RTS), RC_, TW_RETRY_CNT_8 },
		{ "rnr_retry 8 (3-bit field)", S(RTR), S(RTS), RC_, TW_RNR_RETRY_8 },
		{ "timeout 32 (5-bit field)", S(RTR), S(RTS), RC_, TW_TIMEOUT_32 },
		{ "min_rnr_timer 32 (5-bit field)", S(RTS), S(RTS), RC_, TW_MIN_RNR_TIMER_32 },
	};
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct env *e = *state;
	int bad = 0, n = 0;
	char what[200];

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		for (size_t k = 0; k < ARRAY_LEN(types); k++) {
			int t = type_index(types[k]);
			int mask;
			struct ibv_qp *qp;
			struct ibv_qp_attr a;

			if (!(cases[i].types & (1u << t)))
				continue;
			qp = qp_in(e, types[k], cases[i].from);
			fill_attr(e, qp, cases[i].from, cases[i].to, &a);
			if (!apply_tweak(e, cases[i].tw, &a)) {
				print_message("skipped %s: no invalid value within the field\n",
					      cases[i].what);
				free_qp(e, qp);
				continue;
			}
			mask = IBV_QP_STATE | req_mask(cases[i].from, cases[i].to, t);
			if (cases[i].from == cases[i].to) /* an optional attribute there */
				mask |= cases[i].tw == TW_PKEY_TBL_LEN ? A_PKEY : A_RNRT;
			snprintf(what, sizeof(what), "%s -> %s with %s", sname(cases[i].from),
				 sname(cases[i].to), cases[i].what);
			bad += check(qp, ibv_modify_qp(qp, &a, mask), EINVAL, cases[i].from, what);
			/* the same modify with valid values goes through */
			fill_attr(e, qp, cases[i].from, cases[i].to, &a);
			snprintf(what, sizeof(what), "%s -> %s, valid values after '%s'",
				 sname(cases[i].from), sname(cases[i].to), cases[i].what);
			bad += check(qp, ibv_modify_qp(qp, &a, mask), 0, cases[i].to, what);
			free_qp(e, qp);
			n++;
		}
	}
	print_message("%d bad-value cases, %d wrong\n", n, bad);
	assert_int_equal(bad, 0);
}

/* qp_state / cur_qp_state beyond IBV_QPS_ERR are EINVAL (uverbs modify_qp). */
static void test_bad_state_values(void **state)
{
	struct env *e = *state;
	struct ibv_qp *qp = qp_in(e, IBV_QPT_RC, S(INIT));
	struct ibv_qp_attr a;
	int bad = 0;

	fill_attr(e, qp, S(INIT), S(INIT), &a);
	a.qp_state = IBV_QPS_UNKNOWN;
	bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL, S(INIT),
		     "INIT -> IBV_QPS_UNKNOWN");
	a.qp_state = (enum ibv_qp_state)0x7f;
	bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL, S(INIT), "INIT -> state 0x7f");

	assert_int_equal(step(e, qp, S(INIT), S(RTR)), 0);
	fill_attr(e, qp, S(RTR), S(RTS), &a);
	a.cur_qp_state = (enum ibv_qp_state)9;
	bad += check(qp, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE |
						  req_mask(S(RTR), S(RTS), T_RC)),
		     EINVAL, S(RTR), "RTR -> RTS with cur_qp_state 9");
	assert_int_equal(bad, 0);
}

/* ---- reuse and SQD ------------------------------------------------------------------ */

/* ERR -> RESET returns a QP to a state from which it connects again, twice over. */
static void test_reuse_after_error(void **state)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct env *e = *state;

	for (size_t k = 0; k < ARRAY_LEN(types); k++) {
		struct ibv_qp *qp = qp_in(e, types[k], S(ERR));

		for (int round = 0; round < 2; round++) {
			assert_int_equal(query_state(qp, NULL), IBV_QPS_ERR);
			assert_int_equal(step(e, qp, S(ERR), S(RESET)), 0);
			assert_int_equal(query_state(qp, NULL), IBV_QPS_RESET);
			assert_int_equal(qp->state, IBV_QPS_RESET);
			assert_int_equal(step(e, qp, S(RESET), S(INIT)), 0);
			assert_int_equal(step(e, qp, S(INIT), S(RTR)), 0);
			assert_int_equal(step(e, qp, S(RTR), S(RTS)), 0);
			assert_int_equal(query_state(qp, NULL), IBV_QPS_RTS);
			assert_int_equal(qp->state, IBV_QPS_RTS);
			assert_int_equal(step(e, qp, S(RTS), S(ERR)), 0);
		}
		free_qp(e, qp);
	}
}

/* IBA §11.6.3: RTS -> SQD with EN_SQD_ASYNC_NOTIFY raises SQ Drained once the SQ is
 * empty; the QP can then return to RTS. */
static void test_sqd_drained_event(void **state)
{
	struct env *e = *state;
	struct ibv_qp *qp = qp_in(e, IBV_QPT_RC, S(RTS));
	struct ibv_qp_attr a;
	int draining = -1;

	fill_attr(e, qp, S(RTS), S(SQD), &a);
	a.en_sqd_async_notify = 1;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
	assert_int_equal(qp->state, IBV_QPS_SQD);
	if (!tu_wait_qp_event(e->res->ctx, qp, IBV_EVENT_SQ_DRAINED, WAIT_MS))
		fail_msg("no IBV_EVENT_SQ_DRAINED for the QP within %d ms", WAIT_MS);
	assert_int_equal(query_state(qp, &draining), IBV_QPS_SQD);
	assert_int_equal(draining, 0);
	assert_int_equal(step(e, qp, S(SQD), S(RTS)), 0);
	assert_int_equal(query_state(qp, NULL), IBV_QPS_RTS);
}

#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_transition_matrix_rc),	 T(test_transition_matrix_uc),
		T(test_transition_matrix_ud),	 T(test_missing_required_attr_rc),
		T(test_missing_required_attr_uc), T(test_missing_required_attr_ud),
		T(test_disallowed_attr_rc),	 T(test_disallowed_attr_uc),
		T(test_disallowed_attr_ud),	 T(test_optional_attr_rc),
		T(test_optional_attr_uc),	 T(test_optional_attr_ud),
		T(test_modify_without_state),	 T(test_bad_attribute_values),
		T(test_bad_state_values),	 T(test_reuse_after_error),
		T(test_sqd_drained_event),
	};

	return cmocka_run_group_tests_name("verbs_qp_states", tests, NULL, NULL);
}
