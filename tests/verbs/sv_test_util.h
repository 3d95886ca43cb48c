/* Shared helpers for the black-box verbs tests (cmocka). Only ibv_* is used. */
#ifndef SV_TEST_UTIL_H
#define SV_TEST_UTIL_H

#include <infiniband/verbs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Opens softverbs0 (fails the test if the list does not hold it). */
struct ibv_context *tu_open(void);

/* A context, a PD and a CQ of 64 entries: the common fixture. */
struct tu_res {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
};
int tu_setup(void **state);    /* cmocka group/test setup: *state = struct tu_res * */
int tu_teardown(void **state);

/* An RC/UC/UD QP on res's PD and CQ with small capacities. */
struct ibv_qp *tu_create_qp(struct tu_res *res, enum ibv_qp_type type);

/* Polls @cq until @n completions arrived or @timeout_ms passed; returns the count. */
int tu_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms);

#endif
