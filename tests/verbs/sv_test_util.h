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
/* Destroys it; -1 (with the reason on stderr) if a destroy failed, the CQ still held
 * completions, or an async event nobody waited for is pending. */
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

/* The descriptors this process holds (/proc/self/fd), or -1 if it cannot tell (none
 * left to look with). */
int tu_fd_count(void);

/* Polls @cq until @n completions arrived or @timeout_ms passed; returns the count. */
int tu_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms);
/* tu_poll for exactly @n: if all came, one more poll must find the CQ empty (fails the
 * test, naming the surplus completion). Returns the count. */
int tu_poll_exact(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms);
/* Drains @cq: true, and the first few completions named in @msg, if it held any. */
bool tu_cq_leftover(struct ibv_cq *cq, char *msg, size_t len);

/* "IBV_EVENT_QP_FATAL about QP 17" and the like (a per-thread buffer). */
const char *tu_event_str(const struct ibv_async_event *ev);
/* The next async event within @timeout_ms (0: only one already there), acknowledged: 1
 * and *ev (its element for comparison only) and its description in @desc; 0 if none. */
int tu_next_async(struct ibv_context *ctx, int timeout_ms, struct ibv_async_event *ev,
		  char *desc, size_t len);
/* Reads what is pending on @ctx's async fd now: true, the events named in @msg, if any
 * was (every teardown checks: an event nobody waited for is a failure). */
bool tu_async_leftover(struct ibv_context *ctx, char *msg, size_t len);

/* Waits for the next async event, which must be @type about @qp: true if it came, false
 * after @timeout_ms; fails the test, naming it, on any other event. */
bool tu_wait_qp_event(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type type,
		      int timeout_ms);

/* The tests run over a wire SOFTVERBS_WIRE chose: iWARP has no Send with Immediate and
 * no RNR NAK (docs/conformance.md, "iWARP"), which the tests that need them check. */
bool tu_wire_iwarp(void);
/* SOFTVERBS_WIRE=roce: RC QPs connect over RoCE v2. */
bool tu_wire_roce(void);
#define TU_SKIP_ON_IWARP(why)                                                       \
	do {                                                                        \
		if (tu_wire_iwarp()) {                                              \
			print_message("skipped on iWARP: %s\n", why);               \
			skip();                                                     \
		}                                                                   \
	} while (0)

/* The same for RoCE v2 (SOFTVERBS_WIRE=roce: RC between QPs as a NIC carries it). */
#define TU_SKIP_ON_ROCE(why)                                                        \
	do {                                                                        \
		if (tu_wire_roce()) {                                               \
			print_message("skipped on RoCE: %s\n", why);                \
			skip();                                                     \
		}                                                                   \
	} while (0)

#endif
