/*
 * Two-process data tests: an endpoint (context, PD, CQs, QPs, one registered buffer) and a
 * peer process that runs one for the test.
 *
 * The peer is a child that runs this test program afresh: fork, then exec of
 * /proc/self/exe with "--tp-agent <fd>". It inherits none of the parent's library state
 * (its progress thread, locks that thread held at the fork) nor cmocka's. It is an agent:
 * it executes the ibv_* calls the parent asks for over a SOCK_SEQPACKET socketpair and
 * answers with what they returned. The parent asserts; the agent only reports, and exits
 * with the number of its own failures (0, or 1 if an ibv_* call it needed for setup
 * failed; it prints why). It dies with its parent (PR_SET_PDEATHSIG).
 *
 * Between requests the agent is blocked in read() on its socket (as it could be on a
 * pipe), calling nothing in the library: a test that leaves it there shows one-sided
 * progress (RDMA READ, WRITE and atomics complete with no help from the target process).
 *
 * Every test program whose tests start peers calls tp_main() first in main().
 */
#ifndef SV_TEST_PEER_H
#define SV_TEST_PEER_H

#include <sys/types.h>

#include "verbs/sv_test_util.h"

#define TP_MAX_QPS 8
#define TP_MAX_SGE 8
#define TP_MAX_WC 16
#define TP_MAX_AH 8
#define TP_PEEK_MAX 256

/* Every wait in the helpers is bounded by this unless a test passes its own. */
#define TP_WAIT_MS 5000

/* ---- an endpoint: what each side of a data test has --------------------------------- */

struct tp_qp_opts {
	uint32_t type;       /* enum ibv_qp_type */
	uint32_t max_wr;     /* send and receive queue; 0: 64 */
	uint32_t max_sge;    /* send and receive; 0: 4 */
	uint32_t max_inline; /* 0: 256 */
	uint32_t sig_all;    /* sq_sig_all */
	uint32_t use_srq;    /* receive on the endpoint's SRQ (tp_ep_create_srq first) */
};

struct tp_ep {
	struct tu_res *res; /* context, PD, port and GID 0 */
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq; /* every QP's send CQ and receive CQ, both on ch */
	struct ibv_srq *srq;
	struct ibv_qp *qp[TP_MAX_QPS];
	int nqp;
	unsigned char *buf; /* page aligned, zeroed */
	size_t len;
	struct ibv_mr *mr; /* buf, whole; NULL once deregistered */
	struct ibv_ah *ah[TP_MAX_AH];
	struct ibv_ah_attr ah_attr[TP_MAX_AH];
	int nah;
};

/* What a peer needs to reach an endpoint's QP and memory. */
struct tp_info {
	uint32_t qpn;
	uint32_t psn; /* the first PSN its send queue uses (tp_ep_info picks one per QP) */
	uint16_t lid;
	union ibv_gid gid;
	uint64_t addr; /* the buffer */
	uint64_t len;
	uint32_t rkey;
};

/* All access rights an MR can have. */
#define TP_ACCESS_ALL                                                                      \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |      \
	 IBV_ACCESS_REMOTE_ATOMIC)
#define TP_QP_ACCESS_ALL                                                                   \
	(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* Opens an endpoint with a @len byte buffer registered with @mr_access (0: TP_ACCESS_ALL).
 * Fails the test if a part fails. */
void tp_ep_open(struct tp_ep *ep, size_t len, int mr_access);
/* True (and why) if @qp took a copy mode other than SOFTVERBS_SHM_COPY asks for: the
 * bounce copy's runs prove by it that no byte went by process_vm_*. tp_ep_close checks
 * every QP of the endpoint (the agent's too, at its exit). */
bool tp_copy_mode_wrong(struct ibv_qp *qp, char *why, size_t len);
/* Destroys what the endpoint holds; tolerant of a half-open endpoint. 0, or -1 if a
 * destroy failed, a CQ still held completions (a surplus completion, or one the test did
 * not poll) or an async event nobody waited for is pending: tp_close_why (and stderr)
 * names each. */
int tp_ep_close(struct tp_ep *ep);
extern char tp_close_why[512];
/* A QP on the endpoint's CQs: its index. Fails the test if creation fails. */
int tp_ep_create_qp(struct tp_ep *ep, const struct tp_qp_opts *o);
/* An SRQ of @max_wr receives with @max_sge each. */
void tp_ep_create_srq(struct tp_ep *ep, uint32_t max_wr, uint32_t max_sge);
void tp_ep_info(const struct tp_ep *ep, int qp, struct tp_info *info);
/* The connection from QP @self to QP @peer that the data tests use: tu_conn_init's values
 * towards the peer's QP, GID and LID, the two QPs' PSNs, every remote access, 16 RDMA
 * Read/atomic requests each way and min_rnr_timer 1 (10 us; rnr_retry stays 7: for
 * ever). @ep gives the port's MTU. */
void tp_conn(const struct tp_ep *ep, const struct tp_info *self, const struct tp_info *peer,
	     struct tu_conn *c);

/* A work request in terms of the endpoint's buffer, so that it can cross to the agent. */
struct tp_sge {
	uint32_t off, len; /* bytes [off, off+len) of the buffer */
};
struct tp_wr {
	uint64_t wr_id;
	uint32_t opcode;     /* enum ibv_wr_opcode */
	uint32_t send_flags; /* enum ibv_send_flags */
	uint32_t nsge;
	struct tp_sge sge[TP_MAX_SGE];
	uint32_t lkey_xor; /* XORed into the buffer's lkey: a bad lkey */
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t imm; /* network byte order, as in ibv_send_wr */
	uint64_t compare_add, swap;
	/* UD */
	struct ibv_ah_attr ah;
	uint32_t remote_qpn, remote_qkey;
	uint32_t xrc_srqn; /* XRC_SEND: the remote SRQ */
};

/* A signaled WR of @len bytes from the buffer at @off (no SGE when @len is 0). */
struct tp_wr tp_wr1(uint64_t id, enum ibv_wr_opcode op, uint32_t off, uint32_t len);

/* Fails the test with both values unless @got equals @want. */
void tp_expect_eq(long long got, long long want, const char *field, const char *what);

/* Posts @n WRs as one chain on QP @qp (SGEs into ep->buf; an AH from wr->ah for UD).
 * Returns ibv_post_send's value; *bad, if not NULL, the index of bad_wr (n if none). */
int tp_ep_post_send(struct tp_ep *ep, int qp, const struct tp_wr *wr, int n, int *bad);
/* Posts one receive to QP @qp (or to the SRQ if @qp < 0): ibv_post_recv's value. */
int tp_ep_post_recv(struct tp_ep *ep, int qp, uint64_t wr_id, const struct tp_sge *sge,
		    int nsge);

/* Message content: byte i of message @seed is tp_pattern(i, seed), a hash of both, so a
 * byte that lands at the wrong offset or from the wrong message shows. tp_fill writes
 * bytes [@start, @start+len) of the message to @buf; tp_mismatch gives the first index into
 * @buf that differs, or -1. */
unsigned char tp_pattern(size_t i, uint32_t seed);
void tp_fill(void *buf, size_t len, uint32_t seed, size_t start);
long tp_mismatch(const void *buf, size_t len, uint32_t seed, size_t start);
/* Fails the test, naming @what, if @buf does not hold those bytes of message @seed. */
void tp_assert_pattern(const void *buf, size_t len, uint32_t seed, size_t start,
		       const char *what);

/*
 * What a work completion must hold, field by field (IBA vol 1 11.4.2.1, rdma-core
 * ibv_poll_cq(3)). Which fields are defined depends on the status and the queue:
 * - status other than IBV_WC_SUCCESS: wr_id, status, qp_num and vendor_err only (softverbs
 *   reports vendor_err 0 for every status); nothing else is checked.
 * - success, send queue: wr_id, opcode, qp_num, vendor_err 0, wc_flags 0 (IMM, INV, GRH
 *   and IP_CSUM_OK are receive-side bits), byte_len for RDMA READ (the bytes read) and
 *   the atomics (8). The IBA leaves byte_len undefined for SEND and RDMA WRITE
 *   completions, and src_qp, slid, sl, dlid_path_bits, pkey_index and imm_data for every
 *   send completion: those are not checked (TP_WCE_SEND's mask).
 * - success, receive queue: every field: opcode (RECV or RECV_RDMA_WITH_IMM), byte_len
 *   (the bytes received; UD: with the 40-byte GRH), wc_flags exactly (GRH for a UD
 *   message that carried one, WITH_IMM, WITH_INV; IP_CSUM_OK and the rest never),
 *   imm_data with WITH_IMM (network order), invalidated_rkey with WITH_INV, qp_num (the
 *   receiving QP; XRC: the XRC target QP), src_qp (the sender's QPN: UD by the IBA; RC,
 *   UC and XRC as softverbs gives it, the connected peer), slid (the sender's LID), sl
 *   and dlid_path_bits (0: the paths the tests use), pkey_index (the receiving QP's).
 * @check says which groups are compared; a group left out is not looked at.
 */
enum {
	TP_WCE_QPN = 1 << 0,      /* qp_num */
	TP_WCE_OPCODE = 1 << 1,   /* opcode */
	TP_WCE_BYTE_LEN = 1 << 2, /* byte_len == byte_len (else, with byte_len_max: <=) */
	TP_WCE_FLAGS = 1 << 3,    /* wc_flags == wc_flags, and imm_data/invalidated_rkey */
	TP_WCE_SOURCE = 1 << 4,   /* src_qp, slid, sl, dlid_path_bits */
	TP_WCE_PKEY = 1 << 5,     /* pkey_index */
	TP_WCE_SEND = TP_WCE_QPN | TP_WCE_OPCODE | TP_WCE_FLAGS,
	TP_WCE_RECV = TP_WCE_QPN | TP_WCE_OPCODE | TP_WCE_BYTE_LEN | TP_WCE_FLAGS |
		      TP_WCE_SOURCE | TP_WCE_PKEY,
};
struct tp_wc_expect {
	uint64_t wr_id;
	enum ibv_wc_status status;
	unsigned int check; /* TP_WCE_*; for a status other than success only QPN counts */
	uint32_t qp_num;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len;
	uint32_t byte_len_max; /* without TP_WCE_BYTE_LEN: byte_len <= this, if not 0 */
	unsigned int wc_flags;
	unsigned int wc_flags_any; /* bits of wc_flags either way (with TP_WCE_FLAGS) */
	uint32_t imm_data;         /* with IBV_WC_WITH_IMM: imm_data; WITH_INV: the rkey */
	uint32_t src_qp;
	uint16_t slid;
	uint8_t sl, dlid_path_bits;
	uint16_t pkey_index;
};

/* A successful send-queue completion of @opcode on QP @qpn; @byte_len counts for RDMA
 * READ and the atomics only. */
struct tp_wc_expect tp_send_expect(uint64_t wr_id, uint32_t qpn, enum ibv_wc_opcode opcode,
				   uint32_t byte_len);
/* A successful receive at @to of a message from @from: opcode, @byte_len, every source
 * field from @from, pkey_index 0, no flags (the caller adds IMM, INV, GRH). */
struct tp_wc_expect tp_recv_expect(uint64_t wr_id, const struct tp_info *to,
				   const struct tp_info *from, enum ibv_wc_opcode opcode,
				   uint32_t byte_len);
/* The first field of @wc that differs from @e, as "FIELD is X, expected Y" in @msg
 * (prefixed with the completion's wr_id and status): true if one does. */
bool tp_wc_mismatch(const struct ibv_wc *wc, const struct tp_wc_expect *e, char *msg,
		    size_t len);
/* Fails the test, naming @what and the field, unless @wc is as @e says. */
void tp_check_wc(const struct ibv_wc *wc, const struct tp_wc_expect *e, const char *what);

/*
 * Polls @cq for one completion: fails the test after @timeout_ms or if its wr_id or status
 * is not the one expected (both named in the message). The endpoint helpers remember the
 * WRs posted through them (tp_ep_post_send, tp_ep_post_recv, here or at an agent), so the
 * completion is also checked against its WR: send queue, every field TP_WCE_SEND defines
 * (opcode from the WR's, qp_num of the QP it was posted to, byte_len for READ and
 * atomics); receive queue, qp_num (not for an SRQ), the opcode and flags a receive can
 * have (GRH only on UD), byte_len within the posted room. A test checks the rest of a
 * receive with tp_check_wc and tp_recv_expect.
 */
void tp_expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
		  int timeout_ms, struct ibv_wc *out);
/* The same with every expected field given. */
void tp_expect_wc_full(struct ibv_cq *cq, const struct tp_wc_expect *e, int timeout_ms,
		       const char *what, struct ibv_wc *out);
/* The check tp_expect_wc makes against the WR @wc completes, if @cq's endpoint posted it
 * (the record is used up): true and @msg if a field is wrong. */
bool tp_posted_mismatch(struct ibv_cq *cq, const struct ibv_wc *wc, char *msg, size_t len);
/* tu_poll for exactly @n completions: fails the test if fewer came within @timeout_ms or
 * if a further one is already there (a surplus completion); each is checked against its
 * WR as tp_expect_wc does. */
void tp_poll_exact(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms,
		   const char *what);
/* Polls @cq for @ms: fails the test if a completion arrives (a negative check). */
void tp_expect_no_wc(struct ibv_cq *cq, int ms, const char *why);
/* Waits up to @timeout_ms for @qp to report @state (errors enter ERR asynchronously). */
bool tp_wait_state(struct ibv_qp *qp, enum ibv_qp_state state, int timeout_ms);
/* Waits for the next async event, which must be of @type: true and *ev (already
 * acknowledged; its element is for comparison only), or false after @timeout_ms. Any
 * other event fails the test, naming it. */
bool tp_wait_async(struct ibv_context *ctx, enum ibv_event_type type, int timeout_ms,
		   struct ibv_async_event *ev);
/* True if @fd is readable now (an event is pending). */
bool tp_fd_ready(int fd);

/* ---- the peer process ---------------------------------------------------------------- */

struct tp_peer {
	pid_t pid; /* 0 once reaped */
	int sock;
	int pidfd;
	int status; /* the exit status once reaped: code, 128 + signal, or -1 (timed out) */
	int signal; /* the signal that ended it, or 0 */
};

/* "exited with status 3", "was killed by signal 11 (Segmentation fault)". */
const char *tp_status_str(const struct tp_peer *p);

/* First in main(): if this run is an agent, runs it and exits. Otherwise applies
 * SV_TEST_FILTER (a cmocka test name pattern), if set, to the tests about to run. */
void tp_main(int argc, char **argv);

/* The segment (its QP page) of QP @qpn of process @owner as this process maps it (an
 * arena of @owner's: the shm wire's layout, src/wire/shm/shm_msg.h), or NULL. Read it
 * with process_vm_readv: its owner may be unmapping it. */
unsigned char *tp_find_segment(uint32_t qpn, pid_t owner);

/*
 * Runs the calling test again in a fresh process: this program, with only that test
 * (SV_TEST_FILTER), so that nothing earlier tests did to the library's state in this
 * process (its progress thread's mode, say) shapes the outcome. Returns true in the fresh
 * process, where the test goes on; in the caller, waits up to @timeout_ms for it and
 * returns false if it passed, or fails the test (its output is above).
 */
bool tp_fresh(const char *test_name, int timeout_ms);

/* Starts an agent (as user SV_TEST_AGENT_UID if that is set and we are root). Fails the
 * test if it cannot. */
void tp_start(struct tp_peer *p);
/* The same with another role: runs this program again as `argv0 flag FD`, FD being the
 * child's end of the socketpair in p->sock (the program's main() dispatches on flag). */
void tp_spawn(struct tp_peer *p, const char *argv0, const char *flag);
/* Asks the agent to clean up and exit; fails the test unless it exits with 0. */
void tp_stop(struct tp_peer *p);
/* SIGKILL now, then reap (bounded). */
void tp_kill(struct tp_peer *p);
/* For teardown: kills the agent if it still runs, reaps it, closes the socket. 0, or -1
 * if the agent had not exited with status 0 by itself (with a message on stderr: still
 * running, its exit status or its signal). */
int tp_cleanup(struct tp_peer *p);

/* Requests: each fails the test if the agent does not answer within the bound. */
void tp_open(struct tp_peer *p, size_t len, int mr_access);
int tp_create_qp(struct tp_peer *p, const struct tp_qp_opts *o);
void tp_create_srq(struct tp_peer *p, uint32_t max_wr, uint32_t max_sge);
void tp_info(struct tp_peer *p, int qp, struct tp_info *info);
/* tu_qp_connect at the agent to RTS: its return. */
int tp_connect(struct tp_peer *p, int qp, const struct tu_conn *c);
int tp_post_send(struct tp_peer *p, int qp, const struct tp_wr *wr, int n, int *bad);
int tp_post_recv(struct tp_peer *p, int qp, uint64_t wr_id, const struct tp_sge *sge, int nsge);
/* Polls the agent's send (@send) or receive CQ for @n (<= TP_MAX_WC) completions within
 * @timeout_ms: how many came. */
int tp_poll(struct tp_peer *p, bool send, int n, int timeout_ms, struct ibv_wc *wc);
/* One completion at the agent, as tp_expect_wc. */
void tp_expect_peer_wc(struct tp_peer *p, bool send, uint64_t wr_id, enum ibv_wc_status status,
		       struct ibv_wc *out);
/* tp_fill and tp_assert_pattern on the agent's buffer at offset @off. */
void tp_fill_peer(struct tp_peer *p, uint64_t off, uint64_t len, uint32_t seed, uint64_t start);
void tp_check_peer(struct tp_peer *p, uint64_t off, uint64_t len, uint32_t seed, uint64_t start,
		   const char *what);
/* Up to TP_PEEK_MAX bytes of the agent's buffer. */
void tp_peek(struct tp_peer *p, uint64_t off, void *out, uint32_t len);
void tp_poke(struct tp_peer *p, uint64_t off, const void *in, uint32_t len);
enum ibv_qp_state tp_state(struct tp_peer *p, int qp);
/* Waits at the agent (up to @timeout_ms) until QP @qp reports @state. */
bool tp_wait_peer_state(struct tp_peer *p, int qp, enum ibv_qp_state state, int timeout_ms);
/* Waits at the agent for an async event of @type about its QP @qp, or its SRQ if @qp < 0:
 * false if none came; any other event fails the test, naming it. */
bool tp_wait_peer_async(struct tp_peer *p, enum ibv_event_type type, int qp, int timeout_ms);
/* True if the agent's async fd has an event pending now. */
bool tp_peer_async_pending(struct tp_peer *p);
/* ibv_req_notify_cq on the agent's receive CQ: its return. */
int tp_arm_recv_cq(struct tp_peer *p, bool solicited_only);
/* Waits at the agent for a CQ event on its channel (getting and acknowledging it): true if
 * one came within @timeout_ms. */
bool tp_wait_cq_event(struct tp_peer *p, int timeout_ms);
/* True if the agent's completion channel has an event pending now. */
bool tp_cq_event_pending(struct tp_peer *p);
/* ibv_modify_srq(IBV_SRQ_LIMIT) at the agent: its return. */
int tp_arm_srq(struct tp_peer *p, uint32_t limit);
/* srq_limit from ibv_query_srq at the agent. */
uint32_t tp_srq_limit(struct tp_peer *p);
/* Deregisters the agent's MR (and unmaps its buffer if @unmap): ibv_dereg_mr's return. */
int tp_dereg_mr(struct tp_peer *p, bool unmap);
int tp_destroy_qp(struct tp_peer *p, int qp);
/* The agent polls its receive CQ (for at most @timeout_ms) and destroys QP @qp the
 * moment a completion comes, as a program that leaves once it has its last message.
 * Returns the completion's status, or -1 (none came, or the destroy failed). */
int tp_leave_on_recv(struct tp_peer *p, int qp, int timeout_ms);
int tp_modify_state(struct tp_peer *p, int qp, enum ibv_qp_state state);
/*
 * @n fetch-and-adds of @add to (@raddr, @rkey) from the agent's QP @qp, at most @window
 * outstanding; the original values land at the start of the agent's buffer. Returns how
 * many of them broke the rule that ((value >> shift) & 0xffffffff) of the i-th is i (the
 * agent's adds are the only ones in those bits, and one QP's atomics execute in order),
 * or -1 if an atomic failed.
 */
long tp_faa_burst(struct tp_peer *p, int qp, uint32_t n, uint64_t add, uint64_t raddr,
		  uint32_t rkey, uint32_t window, uint32_t shift);

/* tp_faa_burst in two steps, for bursts that run at the same time in several agents. */
void tp_faa_burst_start(struct tp_peer *p, int qp, uint32_t n, uint64_t add, uint64_t raddr,
			uint32_t rkey, uint32_t window, uint32_t shift);
long tp_faa_burst_result(struct tp_peer *p, int timeout_ms);

/* Any request in two steps, for one that runs while the test does other work: sends
 * request @op (TP_DEREG_MR, TP_DESTROY_QP, ...) with its QP index and argument... */
void tp_request_async(struct tp_peer *p, uint32_t op, int qp, uint64_t a);
/* ...is its answer there yet... */
bool tp_answer_ready(struct tp_peer *p);
/* ...and its rc (fails the test after @timeout_ms). */
int tp_answer(struct tp_peer *p, int timeout_ms);

/*
 * The agent turns rogue: it finds, among the QP segments it has mapped, the one of its
 * parent's QP number @qpn (the wire layout of src/wire/shm: a page, then the inbound
 * fifo) and writes into its fifo what no softverbs peer writes. @how: TP_SCRIBBLE_EMPTY
 * publishes one header that claims 0 slots; TP_SCRIBBLE_GARBAGE publishes up to @rounds
 * (one lap of the ring at most) headers of random bytes (seed @seed), most with a real
 * opcode and a small slot count, and overwrites the ring's size field and, now and
 * then, its tail with random values. TP_SCRIBBLE_ACK writes (@seed << 32) | @rounds
 * into the page's acknowledgement word (an ACK from QP @seed up to msn @rounds).
 * Returns 0, or -1 if no such segment is mapped.
 */
enum { TP_SCRIBBLE_EMPTY = 1, TP_SCRIBBLE_GARBAGE = 2, TP_SCRIBBLE_ACK = 3 };
int tp_scribble(struct tp_peer *p, uint32_t qpn, int how, uint32_t rounds, uint32_t seed);

/*
 * The agent watches the last byte of its buffer's [@off, @off + @len) until it holds
 * byte @len - 1 of message @seed (tp_pattern), then checks the bytes before it. _start
 * returns once the agent watches; _result gives the index of the first byte before the
 * last that was not yet in place when the last one was (-1: none), and fails the test if
 * the last byte did not come within @timeout_ms.
 */
void tp_watch_last_start(struct tp_peer *p, uint64_t off, uint64_t len, uint32_t seed,
			 int timeout_ms);
long tp_watch_last_result(struct tp_peer *p);

/*
 * The agent forges a copy-assist job (src/wire/shm/shm_assist.h) on the page of its
 * parent's QP @qpn, as if it were the requester of an RDMA WRITE of @len bytes to
 * (@addr, @rkey) from its own buffer's first @len bytes: @how says what is wrong with
 * it. It then waits, up to @timeout_ms, for the parent's progress thread to take and
 * finish every chunk (the parent must keep its library busy meanwhile: _result is
 * async). _result: 1 if the helper marked the job failed, 0 if not; -1 if the job was
 * not finished in time. TP_FORGE_GARBAGE posts @len rounds of random words instead.
 */
enum {
	TP_FORGE_VALID = 1,  /* the agent's own lkey and buffer: a legitimate job */
	TP_FORGE_BAD_LKEY,   /* the agent's lkey with another tag */
	TP_FORGE_NO_LENGTH,  /* an SGE shorter than the job */
	TP_FORGE_GARBAGE,    /* random descriptors and claim words */
};
void tp_forge_assist_start(struct tp_peer *p, uint32_t qpn, int how, uint64_t addr,
			   uint32_t rkey, uint64_t len, int timeout_ms);
int tp_forge_assist_result(struct tp_peer *p, int timeout_ms);

/*
 * The agent plays the progress thread of its QP @qp as a slow helper: it takes the last
 * chunk of a copy-assist job a requester posts there (the first it wins a chunk of, within
 * @timeout_ms; _start returns once it watches), holds it @hold_ms while watching the last
 * byte of its buffer's [@off, @off + @len), then reports the chunk failed (for the
 * requester to copy) and counts it. _result: 1 if that last byte changed while the chunk
 * was held, else 0; *chunk: the chunk it held.
 */
void tp_hold_chunk_start(struct tp_peer *p, int qp, uint64_t off, uint64_t len, int hold_ms,
			 int timeout_ms);
int tp_hold_chunk_result(struct tp_peer *p, int *chunk);

/* ---- the usual shape: one QP here, one in an agent, connected ----------------------- */

struct tp_pair {
	struct tp_ep ep;       /* ours */
	struct tp_peer peer;   /* the agent */
	int lq, pq;            /* our QP's index, the agent's */
	struct tp_info li, pi; /* ours, the agent's */
	struct tu_conn lc, pc; /* our QP's connection (to the agent), the agent's (to us) */
};

/* Starts the agent and opens both endpoints, each with a @len byte buffer and one QP (@po
 * NULL: as @lo); fills lc and pc with tp_conn's values, which the test may change before
 * tp_pair_connect. */
void tp_pair_open(struct tp_pair *x, size_t len, const struct tp_qp_opts *lo,
		  const struct tp_qp_opts *po);
/* Both QPs to RTS, the agent's first. */
void tp_pair_connect(struct tp_pair *x);
/* Stops the agent (it must exit cleanly) and closes our endpoint. */
void tp_pair_stop(struct tp_pair *x);
/* cmocka setup/teardown: *state is a zeroed struct tp_pair; teardown kills an agent that
 * still runs and closes what is open, and fails (-1) if the agent had not exited with 0 by
 * itself or tp_ep_close found something left. */
int tp_pair_setup(void **state);
int tp_pair_teardown(void **state);

/* What the agent is asked to do; each tp_* request above sends one. */
enum tp_op {
	TP_OPEN = 1,
	TP_CREATE_QP,
	TP_CREATE_SRQ,
	TP_INFO,
	TP_CONNECT,
	TP_POST_SEND,
	TP_POST_RECV,
	TP_POLL,
	TP_FILL,
	TP_CHECK,
	TP_PEEK,
	TP_POKE,
	TP_STATE,
	TP_WAIT_STATE,
	TP_WAIT_ASYNC,
	TP_ASYNC_PENDING,
	TP_ARM_CQ,
	TP_WAIT_CQ_EVENT,
	TP_CQ_EVENT_PENDING,
	TP_ARM_SRQ,
	TP_SRQ_LIMIT,
	TP_DEREG_MR,
	TP_DESTROY_QP,
	TP_LEAVE_ON_RECV,
	TP_MODIFY_STATE,
	TP_FAA_BURST,
	TP_SCRIBBLE,
	TP_WATCH_LAST,
	TP_FORGE_ASSIST,
	TP_HOLD_CHUNK,
	TP_EXIT,
};

#endif
