/* Shared helpers for the black-box verbs tests (cmocka). Only ibv_* is used. */
#ifndef SV_TEST_UTIL_H
#define SV_TEST_UTIL_H

#include <infiniband/verbs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define TU_MAX_QPS 64

/* Opens softverbs0 (fails the test if the list does not hold it). */
struct ibv_context *tu_open(void);

/*
 * The common fixture: a context, a PD and a CQ of 64 entries, what the device and port 1
 * report, and the QPs a test keeps (tu_keep_qp), which teardown destroys if the test
 * stopped before it did.
 */
struct tu_res {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_device_attr dev;
	struct ibv_port_attr port; /* port 1 */
	union ibv_gid gid;         /* GID 0 of port 1: an address of this host */
	struct ibv_qp *qps[TU_MAX_QPS];
	int nqps;
};
/* The fixture for tests that embed it in their own: NULL, or -1, if a part failed. */
struct tu_res *tu_res_open(void);
int tu_res_close(struct tu_res *res);
/* The fixture as cmocka group/test setup and teardown: *state = struct tu_res *. */
int tu_setup(void **state);
int tu_teardown(void **state);

/* An RC/UC/UD QP on res's PD and CQ with small capacities. */
struct ibv_qp *tu_create_qp(struct tu_res *res, enum ibv_qp_type type);

/* Tracks @qp (failing the test, with errno, if it is NULL) and returns it. */
struct ibv_qp *tu_keep_qp(struct tu_res *res, struct ibv_qp *qp);
/* Stops tracking @qp (which must be kept) and destroys it; the destroy must succeed. */
void tu_destroy_qp(struct tu_res *res, struct ibv_qp *qp);
/* Destroys every kept QP, newest first: 0, or -1 if a destroy failed. */
int tu_destroy_kept_qps(struct tu_res *res);

/* "RC", "UC", "UD", "XRC_SEND", "XRC_RECV" or "QP type <n>", for messages. */
const char *tu_qp_type_str(enum ibv_qp_type type);

/* A global address vector to our own GID 0 on port 1 (sgid_index 0, hop limit 64). */
void tu_fill_ah(const struct tu_res *res, struct ibv_ah_attr *ah);

/*
 * What tu_qp_to_init/_rtr/_rts give a QP; each sets the attributes its transition
 * requires for the QP's type (IBA 10.3.1), and only those:
 *   RESET -> INIT  PKEY_INDEX (0 unless set), PORT 1, and QKEY (UD) or ACCESS_FLAGS
 *                  (the others);
 *   INIT -> RTR    connected types: AV, PATH_MTU, DEST_QPN, RQ_PSN; RC and XRC_RECV also
 *                  MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER; UD: nothing;
 *   RTR -> RTS     SQ_PSN; RC and XRC_SEND also TIMEOUT, RETRY_CNT, RNR_RETRY,
 *                  MAX_QP_RD_ATOMIC; XRC_RECV also TIMEOUT.
 */
struct tu_conn {
	uint32_t dest_qpn;     /* RC, UC */
	struct ibv_ah_attr ah; /* RC, UC: the path to dest_qpn */
	enum ibv_mtu mtu;      /* RC, UC */
	uint32_t rq_psn, sq_psn;
	uint32_t qkey; /* UD */
	/* RC's qp_access_flags. UC carries neither RDMA Read nor atomics, and a QP has no
	 * use for LOCAL_WRITE: a UC QP gets only the IBV_ACCESS_REMOTE_WRITE bit. */
	int access;
	uint16_t pkey_index; /* RESET -> INIT (0 from tu_conn_init) */
	uint8_t max_rd_atomic, max_dest_rd_atomic, min_rnr_timer; /* RC */
	uint8_t timeout, retry_cnt, rnr_retry;                    /* RC */
};

/* Valid values towards @dest_qpn on this host: tu_fill_ah's path, path MTU the port's
 * active one up to 1024, PSNs 0, Q_Key 0x11111111, access REMOTE_WRITE, no RDMA Read or
 * atomic depth, min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7. */
void tu_conn_init(struct tu_conn *c, const struct tu_res *res, uint32_t dest_qpn);

/* One transition each; the return of ibv_modify_qp. */
int tu_qp_to_init(struct ibv_qp *qp, const struct tu_conn *c);
int tu_qp_to_rtr(struct ibv_qp *qp, const struct tu_conn *c);
int tu_qp_to_rts(struct ibv_qp *qp, const struct tu_conn *c);
/* RESET -> INIT [-> RTR [-> RTS]], stopping at @target: 0 or the first failing return. */
int tu_qp_connect(struct ibv_qp *qp, const struct tu_conn *c, enum ibv_qp_state target);

/* The state ibv_query_qp reports (the query must succeed). */
enum ibv_qp_state tu_query_state(struct ibv_qp *qp);

/* CLOCK_MONOTONIC in milliseconds. */
long long tu_now_ms(void);

/* Polls @cq until @n completions arrived or @timeout_ms passed; returns the count. */
int tu_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms);

/* Reads async events (acknowledging each) until one of @type about @qp came: true, or
 * false after @timeout_ms or 32 other events. */
bool tu_wait_qp_event(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type type,
		      int timeout_ms);

#endif
