/*
 * Shared helpers for the black-box rdma_cm tests (cmocka). Only rdma_* and ibv_* are used.
 *
 * Every wait is bounded (CT_WAIT_MS unless the caller gives its own) and fails the test
 * with a message naming what was expected and what came instead.
 */
#ifndef CM_TEST_UTIL_H
#define CM_TEST_UTIL_H

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <cmocka.h>

#define CT_WAIT_MS 5000

/* ---- events --------------------------------------------------------------------------- */

/* The next event on @ch, or NULL if none came within @timeout_ms. Waits with poll() on
 * ch->fd; the fd's O_NONBLOCK flag is as the caller left it once this returns. */
struct rdma_cm_event *ct_next_event(struct rdma_event_channel *ch, int timeout_ms);

/* The next event on @ch, which must be of @type: fails the test (naming @type and what
 * came, with its status, or that nothing came within @timeout_ms) otherwise. The caller
 * acknowledges the event. */
struct rdma_cm_event *ct_wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
				    int timeout_ms);

/* ct_wait_event within CT_WAIT_MS, then checks the status is @status and acknowledges. */
void ct_expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type type, int status);

/* After DISCONNECTED on @ch: RDMA_CM_EVENT_TIMEWAIT_EXIT for the same id comes (status
 * 0), as a RoCE port's IB CM says it after its timewait; on iWARP (ct_cm_iwarp) none. */
void ct_expect_timewait_exit(struct rdma_event_channel *ch, struct rdma_cm_id *id);

/* Fails the test, naming @why, if an event arrives on @ch within @ms (a negative check). */
void ct_expect_no_event(struct rdma_event_channel *ch, int ms, const char *why);

/* ---- addresses ------------------------------------------------------------------------ */

/* The loopback address of @family (127.0.0.1 or ::1) with @port (host order) in @ss;
 * returns @ss as a sockaddr. */
struct sockaddr *ct_loopback(struct sockaddr_storage *ss, int family, uint16_t port);
/* A port of @ss (host order), and setting it. */
uint16_t ct_port(const struct sockaddr *sa);
void ct_set_port(struct sockaddr *sa, uint16_t port);
/* True if ::1 can be bound here (IPv6 loopback configured). */
bool ct_have_ipv6(void);
/* A port (host order) nothing uses now on @family's loopback: bound with port 0 by an
 * rdma_cm id, read back with rdma_get_src_port, the id destroyed. */
uint16_t ct_free_port(int family);
/* "IPv4", "IPv6". */
const char *ct_family_str(int family);

/* ---- the wire -------------------------------------------------------------------------- */

/* True when the tests run with SOFTVERBS_CM_WIRE=iwarp (ctest's *_iwarp entries): the
 * connections are iWARP on loopback. */
bool ct_cm_iwarp(void);
/* Skips the test with @why when ct_cm_iwarp(): an IB CM behaviour iWARP answers
 * differently (docs/conformance.md, "Between hosts"; test_cm_iwarp.c checks iWARP's). */
#define ct_skip_on_iwarp(why)                                                              \
	do {                                                                               \
		if (ct_cm_iwarp()) {                                                       \
			print_message("    IB CM behaviour; on iWARP %s: skipped\n", why);  \
			skip();                                                            \
		}                                                                          \
	} while (0)

/* ---- completions ---------------------------------------------------------------------- */

/* Polls @cq for one completion: fails the test after @timeout_ms, or if its wr_id or
 * status is not the expected one. */
void ct_expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status, int timeout_ms,
		  struct ibv_wc *out);

/* ---- a connected RC pair in one process ----------------------------------------------- */

/*
 * A listener (on its own channel, lch) and a connecting id (on cch) in this process,
 * connected over the loopback of @family. Both QPs come from rdma_create_qp with the
 * default PD and CQs the library creates (id->send_cq, id->recv_cq), CT_QP_WR work
 * requests each way, one SGE, CT_QP_INLINE inline bytes.
 */
#define CT_QP_WR 16
#define CT_QP_INLINE 64

struct ct_pair {
	int family;
	enum rdma_port_space ps;
	struct rdma_event_channel *lch, *cch; /* listener side, connecting side */
	struct rdma_cm_id *listen_id;         /* bound to the loopback, port picked */
	struct rdma_cm_id *server;            /* the new id of the connect request */
	struct rdma_cm_id *client;
	struct sockaddr_storage addr;         /* the listener's address and port */
	/* The private data the events carried (the padded length each event reported). */
	unsigned char req_pd[256], rep_pd[256];
	uint8_t req_pd_len, rep_pd_len;
	uint32_t req_qp_num, rep_qp_num; /* param.conn.qp_num of CONNECT_REQUEST, ESTABLISHED */
};

/* The qp_init_attr ct_pair_connect gives rdma_create_qp (no CQs: the library's). */
struct ibv_qp_init_attr ct_qp_attr(enum ibv_qp_type type);

/* Zeroes @p and creates both channels: a pair with no listener (the test makes its own,
 * or none). Fails the test if a step fails. */
void ct_pair_channels(struct ct_pair *p, int family, enum rdma_port_space ps);

/* ct_pair_channels, then a listening id (@ps) bound to @family's loopback
 * with a port the system picks. Fails the test if a step fails. */
void ct_pair_listen(struct ct_pair *p, int family, enum rdma_port_space ps);

/* The connecting half: creates p->client (context @p, port space p->ps) on cch, resolves
 * its address and route towards p->addr (reading both events), creates its QP with
 * ct_qp_attr (RC or UD after the port space) and calls rdma_connect(@cparam; NULL: the
 * defaults below). Fails the test if a step fails. */
void ct_client_connect(struct ct_pair *p, const struct rdma_conn_param *cparam);

/* Resolves the client's address and route, creates its QP, connects (@cparam; NULL:
 * responder_resources 1, initiator_depth 1, retry 7, rnr_retry 7); takes the connect request
 * (req_pd), creates the server's QP, accepts (@sparam; NULL likewise); then the client's
 * ESTABLISHED (rep_pd) and the server's, both with status 0. RC only. Fails the test if a
 * step fails. */
void ct_pair_connect(struct ct_pair *p, const struct rdma_conn_param *cparam,
		     const struct rdma_conn_param *sparam);

/* Both ends of ct_pair_listen + ct_pair_connect with defaults. */
void ct_pair_open(struct ct_pair *p, int family);

/* Destroys the QPs (rdma_destroy_qp), ids and channels that exist; tolerant of any half
 * set-up state and safe to call twice. Fails the test, once all is destroyed, if an
 * rdma_destroy_id failed. */
void ct_pair_close(struct ct_pair *p);

#endif
