/*
 * random_verbs: a seeded, replayable, time-bounded random walk through the verbs API by
 * two processes (a parent and a forked child, a socketpair between them), every call's
 * result checked against what rdma-core documents. Only <infiniband/verbs.h>.
 *
 *   random_verbs [--seed S] [--ops N] [--seconds T] [--known-defects] [--verbose]
 *
 * The parent directs: it draws every step from the seed's PRNG and tells the child what
 * to do; the child answers "ok" or prints why it failed and exits 1. A failure names the
 * seed, the operation number and the call, so `--seed S` (with the same --ops) replays it.
 *
 * Steps:
 * - local: on private pools (PDs, MRs, CQs, SRQs, QPs, AHs) of either process: create
 *   with random arguments, valid and invalid; destroy (EBUSY while in use); modify_qp
 *   along the IBA state table (valid transitions with the attributes they require,
 *   invalid ones, a required attribute missing, one that is not allowed, values past the
 *   device's limits); posts in states that refuse them.
 * - data: one connected pair (RC, UC or UD) between the two processes at a time, each
 *   end with a new MR of random size and access; SEND, SEND_WITH_IMM, RDMA WRITE (+IMM),
 *   RDMA READ, atomics, inline; good and bad lkeys, rkeys, ranges past the MR, SGE lists,
 *   receives too small, opcodes the QP type lacks. Every registered buffer sits between
 *   64-byte canaries in its own mapping, and every byte of the mapping is compared with a
 *   shadow copy after every data step on both sides: what was written must be exactly
 *   what was sent, nothing else may change.
 *
 * What is expected (rdma-core's man pages ibv_post_send(3), ibv_post_recv(3),
 * ibv_poll_cq(3), ibv_modify_qp(3), ibv_reg_mr(3), ibv_create_cq(3), ibv_create_qp(3);
 * IBA vol 1 chapters 9-11; softverbs' docs/conformance.md where rdma-core leaves a choice):
 * - create/alloc/reg: an object, or NULL with errno EINVAL for the argument mistakes
 *   listed at each call (ENOMEM is not expected: every size stays far below the limits);
 * - ibv_post_*: 0 or a positive errno (EINVAL here: too many SGEs, inline data above
 *   max_inline_data, an opcode the QP type does not carry, a QP state that refuses posts)
 *   with *bad_wr the first WR not posted, the WRs before it posted;
 * - work completions: IBV_WC_LOC_PROT_ERR for a bad lkey or a range outside the MR or
 *   a scatter into an MR without LOCAL_WRITE (IBA 10.6.3: the L_Key is checked while
 *   gathering, whether or not anyone receives), IBV_WC_REM_ACCESS_ERR for a remote
 *   access the responder refuses (RC), IBV_WC_LOC_LEN_ERR at a receiver whose buffer is
 *   too small with IBV_WC_REM_INV_REQ_ERR at the RC requester, IBV_WC_REM_OP_ERR at the
 *   RC requester whose SEND hit a bad receive (IBA 9.7.5.2.4), IBV_WC_WR_FLUSH_ERR for
 *   everything outstanding once a QP is in Error; an RC error takes the QP to ERR, a UC
 *   or UD send error to SQE (IBA 10.3.1); UC and UD lose what the responder refuses.
 *
 * The cases of two defects this test found, since fixed, are behind --known-defects (on
 * in ctest and tests/random/run_long.sh): UC/UD sends with a bad lkey to an absent peer,
 * and an on-demand MR over a PROT_NONE page used by a SEND.
 */
#include <infiniband/verbs.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define GUARD 64          /* canary bytes before and after every registered buffer */
#define CANARY 0xc5       /* their pattern (xor the offset) */
#define WAIT_MS 5000      /* bound on every completion, message and event */
#define MSG_WAIT_MS 30000 /* bound on a peer's answer (it may itself wait WAIT_MS) */
#define MAX_SEG 4
#define QKEY_BASE 0x11110000u
#define GRH_LEN 40

/* ---- PRNG: splitmix64 to seed, xorshift64* to draw -------------------------------- */

struct rng {
	uint64_t s;
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void rng_init(struct rng *r, uint64_t seed)
{
	uint64_t x = seed;

	r->s = splitmix64(&x);
	if (!r->s)
		r->s = 1;
}

static uint64_t rnext(struct rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545f4914f6cdd1dULL;
}

static uint32_t rbelow(struct rng *r, uint32_t n)
{
	return n ? (uint32_t)((rnext(r) >> 32) % n) : 0;
}

static bool rone(struct rng *r, uint32_t n)
{
	return rbelow(r, n) == 0;
}

/* 1 .. max, log-uniform: small values as often as large ones. */
static uint32_t rsize(struct rng *r, uint32_t max)
{
	uint32_t bits = 0, v;

	while ((1u << bits) < max && bits < 31)
		bits++;
	/* One draw per statement: the operands of an expression have no fixed order, and
	 * a replay must draw the same numbers whatever the compiler chose. */
	v = (uint32_t)(rnext(r) >> 33);
	v &= (1u << rbelow(r, bits + 1)) - 1;
	return v % max + 1;
}

/* ---- state of one process ---------------------------------------------------------- */

enum { MAX_PD = 4, MAX_MR = 12, MAX_CQ = 6, MAX_SRQ = 4, MAX_QP = 10, MAX_AH = 6 };

struct lqp {                 /* a QP of the local pools */
	struct ibv_qp *qp;
	int pd, scq, rcq, srq;   /* pool indexes (srq -1: none) */
	enum ibv_qp_state state; /* the model's */
	uint64_t recv_ids[16];   /* receives outstanding, in order */
	int nrecv;
	uint32_t max_recv_wr;    /* as granted */
};

struct lmr {
	struct ibv_mr *mr;
	int pd;
	char *map;
	size_t maplen;
};

struct pools {
	struct ibv_pd *pd[MAX_PD];
	int pd_users[MAX_PD];
	struct lmr mr[MAX_MR];
	struct ibv_cq *cq[MAX_CQ];
	int cq_users[MAX_CQ];
	struct ibv_srq *srq[MAX_SRQ];
	int srq_pd[MAX_SRQ], srq_users[MAX_SRQ];
	struct lqp qp[MAX_QP];
	struct ibv_ah *ah[MAX_AH];
	int ah_pd[MAX_AH];
};

/* What one end of the data connection tells the other. */
struct cinfo {
	uint32_t qpn, qkey, rkey, len, mr_access, qp_access;
	uint32_t max_inline, max_send_sge, max_recv_sge, type;
	uint64_t addr;
	union ibv_gid gid;
	uint16_t lid;
};

/* The data connection of this process. */
struct conn {
	bool up;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_ah *ah; /* UD: to the peer */
	struct ibv_srq *srq; /* the QP's receives come from it (or NULL) */
	bool last_wqe_seen;
	char *map, *buf;   /* the mapping; the registered buffer inside it */
	unsigned char *shadow;
	size_t maplen;
	struct cinfo me, peer;
	uint64_t recv_ids[64];
	int nrecv;
	int async_expect;  /* the async event that must come (-1: none) */
	bool async_seen;
};

struct side {
	int role; /* 0: parent, 1: child */
	int fd;
	uint64_t seed, op;
	bool verbose;
	struct ibv_context *ctx;
	struct ibv_pd *pd; /* the data PD */
	struct ibv_cq *scq, *rcq;
	struct ibv_device_attr dev;
	struct ibv_port_attr port;
	union ibv_gid gid;
	int gid_index;
	struct pools p;
	struct conn c;
	uint64_t wr_seq;
	uint64_t calls;
};

static struct side S_;
static pid_t child_pid; /* the parent's: its child */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "random_verbs: FAIL seed 0x%016" PRIx64 " op %" PRIu64 " (%s): ",
		S_.seed, S_.op, S_.role ? "child" : "parent");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (S_.role == 0 && child_pid > 0) {
		/* Say how the child ended; a child still running goes with us. */
		int st = 0;
		pid_t w = 0;

		for (int i = 0; i < 200 && (w = waitpid(child_pid, &st, WNOHANG)) == 0; i++)
			usleep(10000);
		if (w == child_pid && WIFSIGNALED(st))
			fprintf(stderr, "random_verbs: the child was killed by signal %d (%s)\n",
				WTERMSIG(st), strsignal(WTERMSIG(st)));
		else if (w == child_pid)
			fprintf(stderr, "random_verbs: the child exited with %d\n", WEXITSTATUS(st));
		else
			kill(child_pid, SIGKILL);
	}
	fflush(stderr);
	_exit(1);
}

#define CHECK(cond, ...)                                                              \
	do {                                                                          \
		S_.calls++;                                                           \
		if (!(cond))                                                          \
			fail(__VA_ARGS__);                                            \
	} while (0)

static void vlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void vlog(const char *fmt, ...)
{
	va_list ap;

	if (!S_.verbose)
		return;
	fprintf(stderr, "op %" PRIu64 " %s: ", S_.op, S_.role ? "child" : "parent");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- messages between the two processes ------------------------------------------- */

enum mtype {
	M_OK = 1, M_LOCAL, M_CONN_NEW, M_CONN_GO, M_CONN_DOWN, M_PREP, M_INIT, M_CHECK, M_END,
};

struct seg {
	uint32_t off, len; /* off from the registered buffer's start; may be "before" it */
	int32_t before;    /* 1: the address is buf - 8 */
	uint32_t bad_lkey;
};

/* One data operation, as the director drew it: both ends run their part of it. */
struct dop {
	uint32_t opcode;   /* enum ibv_wr_opcode */
	uint32_t len;      /* message length */
	uint32_t nseg;     /* initiator's SGEs (0: none) */
	struct seg seg[MAX_SEG];
	uint32_t post_nsge; /* num_sge as posted (> nseg: too many) */
	uint32_t inl;       /* IBV_SEND_INLINE */
	uint32_t roff;      /* remote offset for RDMA/atomics */
	int32_t rbefore;    /* remote address buf - 8 */
	uint32_t bad_rkey;
	uint32_t prefix;    /* valid WRITEs posted before it in one chain (RC/UC) */
	uint32_t imm;
	uint64_t cmp, swap; /* atomics */
	/* the receive at the target */
	uint32_t recv;      /* post a receive */
	uint32_t rnseg;
	struct seg rseg[MAX_SEG];
	uint32_t bad_recv_post; /* post an invalid receive (too many SGEs) first */
	/* UD */
	uint32_t bad_qkey, absent_qpn, absent;
	/* expectations */
	int32_t post_rc;        /* the post's return */
	int32_t wc_status;      /* initiator's completion (-1: none) */
	int32_t recv_status;    /* target's receive completion (-1: none, stays posted) */
	uint32_t lands;         /* the data reaches the target's memory (WRITE/SEND/atomic) */
	uint32_t reads;         /* READ/atomic: data lands at the initiator */
	uint32_t lost;          /* UC/UD: dropped at the target; a fence SEND proves it */
	uint32_t broken;        /* the connection is to be torn down after it */
	int32_t i_state, t_state; /* QP states then (-1: not checked) */
	int32_t wc_alt;         /* another status the documents allow (-1: none) */
	uint32_t odp_hole;      /* known defect 11: gather from an ODP MR over PROT_NONE */
	uint32_t ghost;         /* UC: a send on a new QP whose peer QPN does not exist */
	uint32_t fence;         /* a SEND after it proves what the target got (UC, UD) */
	int32_t async_t;        /* an async event the target may see (-1: none) */
	uint64_t id;            /* unique per dop: wr_ids and the pattern */
};

#define MSG_DATA 8192 /* the largest RDMA READ: the target's bytes travel in the answer */

struct msg {
	uint32_t type, dlen;
	uint64_t op, arg, arg2;
	struct dop d;
	struct cinfo ci;
	unsigned char data[MSG_DATA];
};

static void msg_send(const struct msg *m)
{
	size_t len = offsetof(struct msg, data) + m->dlen;
	ssize_t n = send(S_.fd, m, len, MSG_NOSIGNAL);

	if (n != (ssize_t)len)
		fail("send to the other process: %zd (%s)", n, strerror(errno));
}

static void msg_recv(struct msg *m, int ms)
{
	struct pollfd pfd = { .fd = S_.fd, .events = POLLIN };
	int r = poll(&pfd, 1, ms);
	ssize_t n;

	if (r == 0)
		fail("no message from the other process within %d ms", ms);
	if (r < 0)
		fail("poll on the socketpair: %s", strerror(errno));
	n = recv(S_.fd, m, sizeof(*m), 0);
	if (n == 0)
		fail("the other process closed the socketpair (it failed or died)");
	if (n < (ssize_t)offsetof(struct msg, data) ||
	    n != (ssize_t)(offsetof(struct msg, data) + m->dlen))
		fail("recv from the other process: %zd (%s)", n, strerror(errno));
}

/* ---- memory: buffers between canaries, shadows ------------------------------------ */

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static uint8_t canary_at(size_t off)
{
	return (uint8_t)(CANARY ^ off);
}

static uint8_t pat(uint64_t op, uint32_t i)
{
	uint64_t x = S_.seed ^ (op * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)(i >> 3) << 17);

	return (uint8_t)(splitmix64(&x) >> ((i & 7) * 8));
}

/* A mapping with the registered buffer of @len at GUARD from its start, canaries and the
 * tail filled with the canary pattern, the buffer with @fill; the shadow equal to it. */
static void buf_make(size_t len, uint8_t fill, char **map, size_t *maplen, char **buf,
		     unsigned char **shadow)
{
	size_t pg = page_size();
	size_t ml = (len + 2 * GUARD + pg - 1) / pg * pg;
	char *m = mmap(NULL, ml, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		fail("mmap %zu: %s", ml, strerror(errno));
	for (size_t i = 0; i < ml; i++)
		m[i] = (char)canary_at(i);
	memset(m + GUARD, fill, len);
	*map = m;
	*maplen = ml;
	*buf = m + GUARD;
	if (shadow) {
		*shadow = malloc(ml);
		if (!*shadow)
			fail("malloc");
		memcpy(*shadow, m, ml);
	}
}

/* Every byte of the mapping equals the shadow: the canaries and all that no step wrote. */
static void buf_check(const struct conn *c, const char *when)
{
	const unsigned char *m = (const unsigned char *)c->map;

	for (size_t i = 0; i < c->maplen; i++) {
		if (m[i] != c->shadow[i]) {
			bool in_buf = i >= GUARD && i < GUARD + c->me.len;

			fail("%s: byte %zu of the mapping (%s %zd) is 0x%02x, want 0x%02x "
			     "(registered buffer %u bytes at %d)",
			     when, i, in_buf ? "buffer offset" : "canary, buffer offset",
			     (ssize_t)i - GUARD, m[i], c->shadow[i], c->me.len, GUARD);
		}
	}
}

/* ---- completions ------------------------------------------------------------------- */

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	long long end = now_ms() + ms;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			fail("ibv_poll_cq returned %d", n);
		if (n == 1)
			return 1;
		if (now_ms() > end)
			return 0;
		sched_yield();
	}
}

static void expect_empty(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);

	CHECK(n == 0, "%s: an unexpected completion: wr_id 0x%" PRIx64 " status %s opcode %d "
	      "qp_num %u", what, wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode, wc.qp_num);
}

static void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st, int opcode,
		      uint32_t qpn, const char *what, struct ibv_wc *out)
{
	struct ibv_wc wc;

	if (!poll_one(cq, &wc, WAIT_MS))
		fail("%s: no completion for wr_id 0x%" PRIx64 " within %d ms (want %s)", what,
		     wr_id, WAIT_MS, ibv_wc_status_str(st));
	CHECK(wc.wr_id == wr_id && wc.status == st && wc.qp_num == qpn &&
		      (st != IBV_WC_SUCCESS || opcode < 0 || (int)wc.opcode == opcode),
	      "%s: completion wr_id 0x%" PRIx64 " status %s opcode %d qp_num %u; want wr_id 0x%"
	      PRIx64 " status %s opcode %d qp_num %u", what, wc.wr_id,
	      ibv_wc_status_str(wc.status), wc.opcode, wc.qp_num, wr_id, ibv_wc_status_str(st),
	      opcode, qpn);
	if (out)
		*out = wc;
}

/* Async events: none unexpected. @allowed (or -1) may come; QP events name our QP. */
static bool drain_async(int allowed, const char *what)
{
	struct ibv_async_event ev;
	struct pollfd pfd = { .fd = S_.ctx->async_fd, .events = POLLIN };
	bool seen = false;

	while (poll(&pfd, 1, 0) == 1) {
		if (ibv_get_async_event(S_.ctx, &ev))
			fail("%s: ibv_get_async_event failed although the fd is readable: %s",
			     what, strerror(errno));
		ibv_ack_async_event(&ev);
		if (S_.c.srq && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
		    ev.element.qp == S_.c.qp) {
			/* IBA 11.6.3: a QP with an SRQ that entered ERR (after an error). */
			S_.c.last_wqe_seen = true;
			continue;
		}
		CHECK(allowed >= 0 && ev.event_type == (enum ibv_event_type)allowed &&
			      !(S_.c.up && ev.element.qp != S_.c.qp),
		      "%s: unexpected async event %s", what, ibv_event_type_str(ev.event_type));
		seen = true;
	}
	return seen;
}

/* IBA 11.6.3 (ibv_get_async_event(3)): a QP with an SRQ that enters Error reports
 * IBV_EVENT_QP_LAST_WQE_REACHED for itself. */
static void expect_last_wqe(struct ibv_qp *qp)
{
	struct ibv_async_event ev;
	struct pollfd pfd = { .fd = S_.ctx->async_fd, .events = POLLIN };

	if (poll(&pfd, 1, WAIT_MS) != 1)
		fail("no IBV_EVENT_QP_LAST_WQE_REACHED within %d ms for QPN %u (SRQ, to ERR)",
		     WAIT_MS, qp->qp_num);
	if (ibv_get_async_event(S_.ctx, &ev))
		fail("ibv_get_async_event: %s", strerror(errno));
	ibv_ack_async_event(&ev);
	CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == qp,
	      "async event %s for %p; want IBV_EVENT_QP_LAST_WQE_REACHED for QPN %u",
	      ibv_event_type_str(ev.event_type), (void *)ev.element.qp, qp->qp_num);
}

static enum ibv_qp_state query_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);

	CHECK(rc == 0, "ibv_query_qp(QPN %u) returned %d", qp->qp_num, rc);
	return a.qp_state;
}

/* ---- the local pools ----------------------------------------------------------------- */

static int pick_used(struct rng *r, void *const *arr, int n)
{
	int k = 0, idx[32];

	for (int i = 0; i < n; i++)
		if (arr[i])
			idx[k++] = i;
	return k ? idx[rbelow(r, (uint32_t)k)] : -1;
}

static int pick_free(void *const *arr, int n)
{
	for (int i = 0; i < n; i++)
		if (!arr[i])
			return i;
	return -1;
}

static void *const *qp_ptrs(void)
{
	static void *v[MAX_QP];

	for (int i = 0; i < MAX_QP; i++)
		v[i] = S_.p.qp[i].qp;
	return v;
}

static void *const *mr_ptrs(void)
{
	static void *v[MAX_MR];

	for (int i = 0; i < MAX_MR; i++)
		v[i] = S_.p.mr[i].mr;
	return v;
}

static const unsigned int ACC_ALL = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
				    IBV_ACCESS_MW_BIND;

/* ibv_reg_mr(3) and ib_check_mr_access: REMOTE_WRITE or REMOTE_ATOMIC without
 * LOCAL_WRITE is EINVAL, as is a zero length; anything else on read-write memory an MR
 * covering exactly the range, keys non-zero. */
static void l_reg_mr(struct rng *r)
{
	struct pools *p = &S_.p;
	int i = pick_free(mr_ptrs(), MAX_MR), pd = pick_used(r, (void *const *)p->pd, MAX_PD);
	unsigned int access = (unsigned int)rnext(r) & ACC_ALL;
	size_t len = rone(r, 10) ? 0 : rsize(r, 1 << 17);
	bool einval = len == 0 || ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
				   !(access & IBV_ACCESS_LOCAL_WRITE));
	struct lmr *m;
	char *buf;
	struct ibv_mr *mr;
	int err;

	if (i < 0 || pd < 0)
		return;
	if (rone(r, 4))
		access |= IBV_ACCESS_ON_DEMAND;
	m = &p->mr[i];
	buf_make(len ? len : 1, 0x33, &m->map, &m->maplen, &buf, NULL);
	errno = 0;
	mr = ibv_reg_mr(p->pd[pd], buf, len, (int)access);
	err = errno;
	if (einval) {
		CHECK(!mr && err == EINVAL, "ibv_reg_mr(len %zu, access 0x%x) gave %p errno %d; want "
		      "NULL, EINVAL", len, access, (void *)mr, err);
		munmap(m->map, m->maplen);
		return;
	}
	CHECK(mr && mr->addr == buf && mr->length == len && mr->pd == p->pd[pd] && mr->lkey &&
		      mr->rkey,
	      "ibv_reg_mr(len %zu, access 0x%x) gave %p (errno %d); want an MR of that range",
	      len, access, (void *)mr, err);
	m->mr = mr;
	m->pd = pd;
	p->pd_users[pd]++;
}

static void l_dereg_mr(struct rng *r)
{
	int i = pick_used(r, mr_ptrs(), MAX_MR);
	struct lmr *m;
	size_t len;
	int rc;

	if (i < 0)
		return;
	m = &S_.p.mr[i];
	len = m->mr->length;
	rc = ibv_dereg_mr(m->mr);
	CHECK(rc == 0, "ibv_dereg_mr returned %d", rc);
	/* Nothing wrote into it: the buffer as filled, the canaries intact. */
	for (size_t k = 0; k < m->maplen; k++) {
		uint8_t want = k >= GUARD && k < GUARD + len ? 0x33 : canary_at(k);

		CHECK((uint8_t)m->map[k] == want, "pool MR mapping byte %zu is 0x%02x, want 0x%02x",
		      k, (uint8_t)m->map[k], want);
	}
	munmap(m->map, m->maplen);
	S_.p.pd_users[m->pd]--;
	memset(m, 0, sizeof(*m));
}

static void l_alloc_pd(struct rng *r)
{
	int i = pick_free((void *const *)S_.p.pd, MAX_PD);

	(void)r;
	if (i < 0)
		return;
	S_.p.pd[i] = ibv_alloc_pd(S_.ctx);
	CHECK(S_.p.pd[i] && S_.p.pd[i]->context == S_.ctx, "ibv_alloc_pd: NULL (errno %d)", errno);
	S_.p.pd_users[i] = 0;
}

/* A PD still holding MRs, QPs, SRQs or AHs: EBUSY (uverbs' usecnt; conformance.md). */
static void l_dealloc_pd(struct rng *r)
{
	int i = pick_used(r, (void *const *)S_.p.pd, MAX_PD);
	int rc;

	if (i < 0)
		return;
	rc = ibv_dealloc_pd(S_.p.pd[i]);
	if (S_.p.pd_users[i]) {
		CHECK(rc == EBUSY, "ibv_dealloc_pd of a PD with %d objects returned %d; want EBUSY",
		      S_.p.pd_users[i], rc);
		return;
	}
	CHECK(rc == 0, "ibv_dealloc_pd of an unused PD returned %d", rc);
	S_.p.pd[i] = NULL;
}

/* ibv_create_cq(3): cqe between 1 and max_cqe gives a CQ of at least cqe entries;
 * 0, negative or above max_cqe: EINVAL (rxe_cq_chk_attr, uverbs). */
static void l_create_cq(struct rng *r)
{
	int i = pick_free((void *const *)S_.p.cq, MAX_CQ);
	int max = S_.dev.max_cqe, cqe;
	struct ibv_cq *cq;
	bool ok;

	if (i < 0)
		return;
	switch (rbelow(r, 6)) {
	case 0: cqe = 0; break;
	case 1: cqe = max + 1 + (int)rbelow(r, 1000); break;
	case 2: cqe = -1 - (int)rbelow(r, 5); break;
	case 3: cqe = max - (int)rbelow(r, 3); break;
	default: cqe = (int)rsize(r, 4096); break;
	}
	ok = cqe >= 1 && cqe <= max;
	if (ok && cqe > 65536 && !rone(r, 8)) /* big CQs cost memory: few of them */
		cqe = 65536;
	errno = 0;
	cq = ibv_create_cq(S_.ctx, cqe, (void *)(uintptr_t)0xc0ffee, NULL, 0);
	if (!ok) {
		CHECK(!cq && errno == EINVAL, "ibv_create_cq(cqe %d, max %d) gave %p errno %d; "
		      "want NULL, EINVAL", cqe, max, (void *)cq, errno);
		return;
	}
	CHECK(cq && cq->cqe >= cqe && cq->cq_context == (void *)(uintptr_t)0xc0ffee,
	      "ibv_create_cq(cqe %d) gave %p (cqe %d) errno %d; want a CQ of >= %d entries",
	      cqe, (void *)cq, cq ? cq->cqe : 0, errno, cqe);
	S_.p.cq[i] = cq;
	S_.p.cq_users[i] = 0;
}

/* A CQ that QPs use: EBUSY. */
static void l_destroy_cq(struct rng *r)
{
	int i = pick_used(r, (void *const *)S_.p.cq, MAX_CQ);
	int rc;

	if (i < 0)
		return;
	rc = ibv_destroy_cq(S_.p.cq[i]);
	if (S_.p.cq_users[i]) {
		CHECK(rc == EBUSY, "ibv_destroy_cq of a CQ %d QPs use returned %d; want EBUSY",
		      S_.p.cq_users[i], rc);
		return;
	}
	CHECK(rc == 0, "ibv_destroy_cq returned %d", rc);
	S_.p.cq[i] = NULL;
}

/* ibv_create_srq(3): max_wr 1..max_srq_wr, max_sge 1..max_srq_sge, else EINVAL. */
static void l_create_srq(struct rng *r)
{
	int i = pick_free((void *const *)S_.p.srq, MAX_SRQ);
	int pd = pick_used(r, (void *const *)S_.p.pd, MAX_PD);
	struct ibv_srq_init_attr sa = { 0 };
	struct ibv_srq *srq;
	bool ok;

	if (i < 0 || pd < 0)
		return;
	sa.attr.max_wr = rone(r, 6) ? (rone(r, 2) ? 0 : (uint32_t)S_.dev.max_srq_wr + 1 + rbelow(r, 9))
				    : rsize(r, 512);
	sa.attr.max_sge = rone(r, 6) ? (uint32_t)S_.dev.max_srq_sge + 1 + rbelow(r, 3)
				     : rsize(r, (uint32_t)S_.dev.max_srq_sge);
	ok = sa.attr.max_wr >= 1 && sa.attr.max_wr <= (uint32_t)S_.dev.max_srq_wr &&
	     sa.attr.max_sge >= 1 && sa.attr.max_sge <= (uint32_t)S_.dev.max_srq_sge;
	{
		uint32_t want_wr = sa.attr.max_wr, want_sge = sa.attr.max_sge;

		errno = 0;
		srq = ibv_create_srq(S_.p.pd[pd], &sa);
		if (!ok) {
			CHECK(!srq && errno == EINVAL, "ibv_create_srq(max_wr %u, max_sge %u) gave "
			      "%p errno %d; want NULL, EINVAL", want_wr, want_sge, (void *)srq, errno);
			return;
		}
		CHECK(srq && sa.attr.max_wr >= want_wr && sa.attr.max_sge >= want_sge,
		      "ibv_create_srq(max_wr %u, max_sge %u) gave %p (errno %d), granted %u/%u",
		      want_wr, want_sge, (void *)srq, errno, sa.attr.max_wr, sa.attr.max_sge);
	}
	S_.p.srq[i] = srq;
	S_.p.srq_pd[i] = pd;
	S_.p.srq_users[i] = 0;
	S_.p.pd_users[pd]++;
}

static void l_destroy_srq(struct rng *r)
{
	int i = pick_used(r, (void *const *)S_.p.srq, MAX_SRQ);
	int rc;

	if (i < 0)
		return;
	rc = ibv_destroy_srq(S_.p.srq[i]);
	if (S_.p.srq_users[i]) {
		CHECK(rc == EBUSY, "ibv_destroy_srq of an SRQ %d QPs use returned %d; want EBUSY",
		      S_.p.srq_users[i], rc);
		return;
	}
	CHECK(rc == 0, "ibv_destroy_srq returned %d", rc);
	S_.p.pd_users[S_.p.srq_pd[i]]--;
	S_.p.srq[i] = NULL;
}

static enum ibv_qp_type rtype(struct rng *r)
{
	static const enum ibv_qp_type t[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

	return t[rbelow(r, 3)];
}

/* ibv_create_qp(3): capacities up to the device's (max_qp_wr, max_sge; inline 64 as
 * softverbs reports) give a QP in RESET with at least them; above: EINVAL. */
static void l_create_qp(struct rng *r)
{
	struct pools *p = &S_.p;
	int i = pick_free(qp_ptrs(), MAX_QP);
	int pd = pick_used(r, (void *const *)p->pd, MAX_PD);
	int scq = pick_used(r, (void *const *)p->cq, MAX_CQ);
	int rcq = pick_used(r, (void *const *)p->cq, MAX_CQ);
	int srq = rone(r, 3) ? pick_used(r, (void *const *)p->srq, MAX_SRQ) : -1;
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_cap want;
	uint32_t mw = (uint32_t)S_.dev.max_qp_wr, ms = (uint32_t)S_.dev.max_sge;
	struct ibv_qp *qp;
	bool ok;

	if (i < 0 || pd < 0 || scq < 0 || rcq < 0)
		return;
	ia.qp_type = rtype(r);
	ia.send_cq = p->cq[scq];
	ia.recv_cq = p->cq[rcq];
	ia.srq = srq >= 0 ? p->srq[srq] : NULL;
	ia.cap.max_send_wr = rone(r, 8) ? mw + 1 + rbelow(r, 100) : rsize(r, 256);
	ia.cap.max_recv_wr = rone(r, 8) ? mw + 1 + rbelow(r, 100) : rsize(r, 256);
	ia.cap.max_send_sge = rone(r, 8) ? ms + 1 + rbelow(r, 4) : rsize(r, ms);
	ia.cap.max_recv_sge = rone(r, 8) ? ms + 1 + rbelow(r, 4) : rsize(r, ms);
	ia.cap.max_inline_data = rbelow(r, 65);
	want = ia.cap;
	/* With an SRQ the receive capacities are not the QP's (ignored, as the kernel). */
	ok = want.max_send_wr <= mw && want.max_send_sge <= ms &&
	     (ia.srq || (want.max_recv_wr <= mw && want.max_recv_sge <= ms));
	errno = 0;
	qp = ibv_create_qp(p->pd[pd], &ia);
	if (!ok) {
		CHECK(!qp && errno == EINVAL, "ibv_create_qp(type %d, caps %u/%u/%u/%u/%u%s) gave %p "
		      "errno %d; want NULL, EINVAL", ia.qp_type, want.max_send_wr,
		      want.max_recv_wr, want.max_send_sge, want.max_recv_sge, want.max_inline_data,
		      ia.srq ? " srq" : "", (void *)qp, errno);
		return;
	}
	CHECK(qp && qp->state == IBV_QPS_RESET && qp->qp_type == ia.qp_type &&
		      ia.cap.max_send_wr >= want.max_send_wr &&
		      ia.cap.max_send_sge >= want.max_send_sge &&
		      ia.cap.max_inline_data >= want.max_inline_data &&
		      (ia.srq || (ia.cap.max_recv_wr >= want.max_recv_wr &&
				  ia.cap.max_recv_sge >= want.max_recv_sge)),
	      "ibv_create_qp(type %d, caps %u/%u/%u/%u/%u%s) gave %p errno %d, granted "
	      "%u/%u/%u/%u/%u", ia.qp_type, want.max_send_wr, want.max_recv_wr,
	      want.max_send_sge, want.max_recv_sge, want.max_inline_data, ia.srq ? " srq" : "",
	      (void *)qp, errno, ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge,
	      ia.cap.max_recv_sge, ia.cap.max_inline_data);
	p->qp[i] = (struct lqp){ .qp = qp, .pd = pd, .scq = scq, .rcq = rcq, .srq = srq,
				 .state = IBV_QPS_RESET, .max_recv_wr = ia.cap.max_recv_wr };
	p->pd_users[pd]++;
	p->cq_users[scq]++;
	p->cq_users[rcq]++;
	if (srq >= 0)
		p->srq_users[srq]++;
}

static void l_destroy_qp(struct rng *r)
{
	int i = pick_used(r, qp_ptrs(), MAX_QP);
	struct lqp *q;
	int rc;

	if (i < 0)
		return;
	q = &S_.p.qp[i];
	rc = ibv_destroy_qp(q->qp);
	CHECK(rc == 0, "ibv_destroy_qp returned %d", rc);
	/* Destroying discards what was posted: no completion (ibv_destroy_qp(3)). */
	expect_empty(S_.p.cq[q->rcq], "after ibv_destroy_qp");
	S_.p.pd_users[q->pd]--;
	S_.p.cq_users[q->scq]--;
	S_.p.cq_users[q->rcq]--;
	if (q->srq >= 0)
		S_.p.srq_users[q->srq]--;
	memset(q, 0, sizeof(*q));
}

static void fill_ah_attr(struct ibv_ah_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->is_global = 1;
	a->grh.dgid = S_.gid;
	a->grh.sgid_index = (uint8_t)S_.gid_index;
	a->grh.hop_limit = 64;
	a->dlid = S_.port.lid;
	a->port_num = 1;
}

/* ibv_create_ah(3): a port the device lacks or a GID index past the table: EINVAL. */
static void l_create_ah(struct rng *r)
{
	int i = pick_free((void *const *)S_.p.ah, MAX_AH);
	int pd = pick_used(r, (void *const *)S_.p.pd, MAX_PD);
	struct ibv_ah_attr a;
	struct ibv_ah *ah;
	bool ok = true;

	if (i < 0 || pd < 0)
		return;
	fill_ah_attr(&a);
	switch (rbelow(r, 5)) {
	case 0: a.port_num = rone(r, 2) ? 0 : 2; ok = false; break;
	case 1: a.grh.sgid_index = (uint8_t)(S_.port.gid_tbl_len + rbelow(r, 8)); ok = false; break;
	default: break;
	}
	errno = 0;
	ah = ibv_create_ah(S_.p.pd[pd], &a);
	if (!ok) {
		CHECK(!ah && errno == EINVAL, "ibv_create_ah(port %u, sgid_index %u) gave %p errno "
		      "%d; want NULL, EINVAL", a.port_num, a.grh.sgid_index, (void *)ah, errno);
		return;
	}
	CHECK(ah && ah->pd == S_.p.pd[pd], "ibv_create_ah gave NULL, errno %d", errno);
	S_.p.ah[i] = ah;
	S_.p.ah_pd[i] = pd;
	S_.p.pd_users[pd]++;
}

static void l_destroy_ah(struct rng *r)
{
	int i = pick_used(r, (void *const *)S_.p.ah, MAX_AH);
	int rc;

	if (i < 0)
		return;
	rc = ibv_destroy_ah(S_.p.ah[i]);
	CHECK(rc == 0, "ibv_destroy_ah returned %d", rc);
	S_.p.pd_users[S_.p.ah_pd[i]]--;
	S_.p.ah[i] = NULL;
}

/* ---- modify_qp along IBA 10.3.1's table ------------------------------------------- */

static const char *st_name(int s)
{
	static const char *n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s >= 0 && s < (int)ARRAY_LEN(n) ? n[s] : "?";
}

/* The attributes a transition requires (IBA 10.3.1 table 91; ibv_modify_qp(3)); -1: the
 * transition does not exist. RESET and ERR are reachable from anywhere with the state
 * alone. */
static int required_mask(enum ibv_qp_type t, int from, int to)
{
	/* The kernel's qp_state_table (ib_modify_qp_is_ok): RESET goes only to RESET or
	 * INIT, ERR only to RESET or ERR; every other state to RESET and ERR too. */
	if (to == IBV_QPS_RESET)
		return 0;
	if (to == IBV_QPS_ERR)
		return from == IBV_QPS_RESET ? -1 : 0;
	if (from == IBV_QPS_ERR)
		return -1;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
		return IBV_QP_PKEY_INDEX | IBV_QP_PORT |
		       (t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
	if (from == IBV_QPS_INIT && to == IBV_QPS_INIT)
		return 0;
	if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		if (t == IBV_QPT_UD)
			return 0;
		return IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       (t == IBV_QPT_RC ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0);
	}
	if (from == IBV_QPS_RTR && to == IBV_QPS_RTS)
		return IBV_QP_SQ_PSN | (t == IBV_QPT_RC ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0);
	if (from == IBV_QPS_RTS && to == IBV_QPS_RTS)
		return 0;
	return -1;
}

/* An attribute that no transition of the type allows, or that this one does not:
 * RESET->INIT carries no path nor PSN; UD never has a destination QPN or path MTU. */
static int forbidden_bit(enum ibv_qp_type t, int from, int to, struct rng *r)
{
	if (t == IBV_QPT_UD)
		return rone(r, 2) ? IBV_QP_DEST_QPN : IBV_QP_PATH_MTU;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
		return rone(r, 2) ? IBV_QP_SQ_PSN : IBV_QP_DEST_QPN;
	if (from == IBV_QPS_RTR && to == IBV_QPS_RTS)
		return IBV_QP_DEST_QPN; /* fixed at INIT->RTR */
	if (from == IBV_QPS_INIT && to == IBV_QPS_RTR)
		return IBV_QP_SQ_PSN;
	return IBV_QP_SQ_PSN; /* INIT->INIT, RTS->RTS(RQ side fixed): RTS->RTS allows no SQ_PSN */
}

static void fill_qp_attr(struct ibv_qp_attr *a, struct rng *r, int to)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ibv_qp_state)to;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qkey = QKEY_BASE | rbelow(r, 0x10000);
	a->qp_access_flags = (unsigned int)rnext(r) & (IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_REMOTE_READ |
						      IBV_ACCESS_REMOTE_ATOMIC);
	fill_ah_attr(&a->ah_attr);
	a->path_mtu = (enum ibv_mtu)(IBV_MTU_256 + rbelow(r, 5));
	a->dest_qp_num = (uint32_t)rnext(r) & 0xffffff;
	a->rq_psn = (uint32_t)rnext(r) & 0xffffff;
	a->sq_psn = (uint32_t)rnext(r) & 0xffffff;
	a->max_dest_rd_atomic = (uint8_t)rbelow(r, 17);
	a->max_rd_atomic = (uint8_t)rbelow(r, 17);
	a->min_rnr_timer = (uint8_t)rbelow(r, 32);
	a->timeout = (uint8_t)rbelow(r, 32);
	a->retry_cnt = (uint8_t)rbelow(r, 8);
	a->rnr_retry = (uint8_t)rbelow(r, 8);
}

static void l_modify_qp(struct rng *r)
{
	int i = pick_used(r, qp_ptrs(), MAX_QP);
	struct lqp *q;
	struct ibv_qp_attr a;
	enum ibv_qp_type t;
	int from, to, req, mask, rc, how;
	bool ok;
	const char *why = "valid";

	if (i < 0)
		return;
	q = &S_.p.qp[i];
	t = q->qp->qp_type;
	from = (int)q->state;
	/* Mostly the next state up; sometimes any of RESET..RTS or ERR. */
	if (rone(r, 3)) {
		to = (int)rbelow(r, 5);
		if (to == 4)
			to = IBV_QPS_ERR;
	} else {
		to = from == IBV_QPS_RTS || from == IBV_QPS_ERR ? (int)rbelow(r, 2) * IBV_QPS_RESET
								  : from + 1;
		if (from == IBV_QPS_ERR)
			to = IBV_QPS_RESET;
	}
	req = required_mask(t, from, to);
	fill_qp_attr(&a, r, to);
	mask = IBV_QP_STATE | (req > 0 ? req : 0);
	ok = req >= 0;
	how = (int)rbelow(r, 8);
	if (ok && how == 0 && req > 0) { /* drop one required attribute */
		int bits[32], n = 0;

		for (int b = 0; b < 31; b++)
			if (req & (1 << b))
				bits[n++] = 1 << b;
		mask &= ~bits[rbelow(r, (uint32_t)n)];
		ok = false;
		why = "a required attribute missing";
	} else if (ok && how == 1 && to != IBV_QPS_RESET && to != IBV_QPS_ERR) {
		mask |= forbidden_bit(t, from, to, r);
		ok = false;
		why = "an attribute the transition does not allow";
	} else if (ok && how == 2 && (mask & IBV_QP_PORT)) {
		a.port_num = 2;
		ok = false;
		why = "port 2 (the device has one)";
	} else if (ok && how == 3 && (mask & IBV_QP_PKEY_INDEX)) {
		a.pkey_index = (uint16_t)(S_.port.pkey_tbl_len + rbelow(r, 4));
		ok = false;
		why = "a P_Key index past the table";
	} else if (ok && how == 4 && (mask & IBV_QP_MAX_DEST_RD_ATOMIC)) {
		a.max_dest_rd_atomic = (uint8_t)(S_.dev.max_qp_rd_atom + 1 + (int)rbelow(r, 8));
		ok = a.max_dest_rd_atomic <= S_.dev.max_qp_rd_atom; /* uint8 may wrap */
		why = "max_dest_rd_atomic above max_qp_rd_atom";
	} else if (ok && how == 5 && (mask & IBV_QP_MAX_QP_RD_ATOMIC)) {
		a.max_rd_atomic = (uint8_t)(S_.dev.max_qp_init_rd_atom + 1 + (int)rbelow(r, 8));
		ok = a.max_rd_atomic <= S_.dev.max_qp_init_rd_atom;
		why = "max_rd_atomic above max_qp_init_rd_atom";
	}
	if (!ok && req < 0)
		why = "a transition IBA 10.3.1 does not have";
	vlog("modify_qp pool %d QPN %u type %d srq %d recvs %d: %s -> %s mask 0x%x (%s)", i,
	     q->qp->qp_num, t, q->srq, q->nrecv, st_name(from), st_name(to), mask, why);
	rc = ibv_modify_qp(q->qp, &a, mask);
	if (!ok) {
		CHECK(rc == EINVAL && q->qp->state == (enum ibv_qp_state)from &&
			      query_state(q->qp) == (enum ibv_qp_state)from,
		      "ibv_modify_qp(%s QPN %u, %s -> %s, mask 0x%x: %s) returned %d, state %s; "
		      "want EINVAL, state unchanged", t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ?
		      "UC" : "UD", q->qp->qp_num, st_name(from), st_name(to), mask, why, rc,
		      st_name(query_state(q->qp)));
		return;
	}
	CHECK(rc == 0 && q->qp->state == (enum ibv_qp_state)to &&
		      query_state(q->qp) == (enum ibv_qp_state)to,
	      "ibv_modify_qp(%s QPN %u, %s -> %s, mask 0x%x) returned %d, state %s; want 0",
	      t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD", q->qp->qp_num,
	      st_name(from), st_name(to), mask, rc, st_name(query_state(q->qp)));
	q->state = (enum ibv_qp_state)to;
	if (to == IBV_QPS_ERR && from != IBV_QPS_ERR) {
		/* IBA 10.3.1: entering Error flushes every outstanding receive, in order. */
		for (int k = 0; k < q->nrecv; k++)
			expect_wc(S_.p.cq[q->rcq], q->recv_ids[k], IBV_WC_WR_FLUSH_ERR, -1,
				  q->qp->qp_num, "a receive flushed on entering ERR", NULL);
		q->nrecv = 0;
		if (q->srq >= 0)
			expect_last_wqe(q->qp);
	}
	if (to == IBV_QPS_RESET)
		q->nrecv = 0; /* RESET empties the queues without completions */
	expect_empty(S_.p.cq[q->rcq], "after ibv_modify_qp");
	expect_empty(S_.p.cq[q->scq], "after ibv_modify_qp");
}

/* Posts on a local QP. ibv_post_send before RTS: EINVAL (IBA 10.8.3: an immediate error
 * in RESET, INIT, RTR). ibv_post_recv: EINVAL in RESET or with an SRQ (the QP has no
 * receive queue); else 0, and in ERR a flush completion at once. bad_wr: the WR. */
static void l_post(struct rng *r)
{
	int i = pick_used(r, qp_ptrs(), MAX_QP);
	struct lqp *q;
	int rc;

	if (i < 0)
		return;
	q = &S_.p.qp[i];
	if (rone(r, 2)) {
		struct ibv_send_wr wr = { .wr_id = ++S_.wr_seq, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;

		if (q->state > IBV_QPS_RTR)
			return; /* not connected to anything: would only time out */
		rc = ibv_post_send(q->qp, &wr, &bad);
		CHECK(rc == EINVAL && bad == &wr, "ibv_post_send on a QP in %s returned %d, bad_wr "
		      "%s; want EINVAL, the WR", st_name(q->state), rc, bad == &wr ? "the WR" :
		      "not the WR");
	} else {
		struct ibv_recv_wr wr = { .wr_id = ++S_.wr_seq }, *bad = NULL;
		bool ok = q->state != IBV_QPS_RESET && q->srq < 0;
		bool full = (uint32_t)q->nrecv >= q->max_recv_wr;

		int pending = 0;

		for (int k = 0; k < MAX_QP; k++)
			if (S_.p.qp[k].qp && S_.p.qp[k].rcq == q->rcq)
				pending += S_.p.qp[k].nrecv;
		/* Room in the CQ for every flush these receives may give (no overrun). */
		if (ok && !full && (q->nrecv >= 16 || pending >= S_.p.cq[q->rcq]->cqe))
			return;
		rc = ibv_post_recv(q->qp, &wr, &bad);
		if (ok && full) {
			/* ibv_post_recv(3): ENOMEM, the receive queue is full. */
			CHECK(rc == ENOMEM && bad == &wr, "ibv_post_recv on a full receive queue "
			      "(%d of %u) returned %d; want ENOMEM, bad_wr the WR", q->nrecv,
			      q->max_recv_wr, rc);
			return;
		}
		if (!ok) {
			CHECK(rc == EINVAL && bad == &wr, "ibv_post_recv on a QP in %s%s returned "
			      "%d; want EINVAL, bad_wr the WR", st_name(q->state),
			      q->srq >= 0 ? " with an SRQ" : "", rc);
			return;
		}
		CHECK(rc == 0, "ibv_post_recv on a QP in %s returned %d", st_name(q->state), rc);
		vlog("post_recv pool %d QPN %u in %s: wr_id 0x%" PRIx64, i, q->qp->qp_num,
		     st_name(q->state), wr.wr_id);
		if (q->state == IBV_QPS_ERR)
			expect_wc(S_.p.cq[q->rcq], wr.wr_id, IBV_WC_WR_FLUSH_ERR, -1,
				  q->qp->qp_num, "a receive posted in ERR", NULL);
		else
			q->recv_ids[q->nrecv++] = wr.wr_id;
	}
}

static void local_steps(uint64_t subseed, int n)
{
	struct rng r;

	rng_init(&r, subseed);
	for (int k = 0; k < n; k++) {
		switch (rbelow(&r, 14)) {
		case 0: l_alloc_pd(&r); break;
		case 1: l_dealloc_pd(&r); break;
		case 2: case 3: l_reg_mr(&r); break;
		case 4: l_dereg_mr(&r); break;
		case 5: l_create_cq(&r); break;
		case 6: l_destroy_cq(&r); break;
		case 7: l_create_srq(&r); break;
		case 8: l_destroy_srq(&r); break;
		case 9: l_create_qp(&r); break;
		case 10: l_destroy_qp(&r); break;
		case 11: l_modify_qp(&r); l_modify_qp(&r); break;
		case 12: l_post(&r); break;
		default: if (rone(&r, 2)) l_create_ah(&r); else l_destroy_ah(&r); break;
		}
	}
}

/* Everything of the pools, newest dependencies first; each destroy must succeed. */
static void pools_free(void)
{
	struct pools *p = &S_.p;

	for (int i = 0; i < MAX_QP; i++)
		if (p->qp[i].qp)
			CHECK(ibv_destroy_qp(p->qp[i].qp) == 0, "ibv_destroy_qp at the end");
	for (int i = 0; i < MAX_AH; i++)
		if (p->ah[i])
			CHECK(ibv_destroy_ah(p->ah[i]) == 0, "ibv_destroy_ah at the end");
	for (int i = 0; i < MAX_SRQ; i++)
		if (p->srq[i])
			CHECK(ibv_destroy_srq(p->srq[i]) == 0, "ibv_destroy_srq at the end");
	for (int i = 0; i < MAX_MR; i++)
		if (p->mr[i].mr) {
			CHECK(ibv_dereg_mr(p->mr[i].mr) == 0, "ibv_dereg_mr at the end");
			munmap(p->mr[i].map, p->mr[i].maplen);
		}
	for (int i = 0; i < MAX_CQ; i++)
		if (p->cq[i])
			CHECK(ibv_destroy_cq(p->cq[i]) == 0, "ibv_destroy_cq at the end");
	for (int i = 0; i < MAX_PD; i++)
		if (p->pd[i])
			CHECK(ibv_dealloc_pd(p->pd[i]) == 0, "ibv_dealloc_pd at the end");
	memset(p, 0, sizeof(*p));
}

/* ---- the data connection ------------------------------------------------------------ */

static const char *qpt_name(uint32_t t)
{
	return t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : t == IBV_QPT_UD ? "UD" : "?";
}

/* Creates this end: an MR of the asked size and access between canaries, a QP. */
static void conn_new(enum ibv_qp_type type, uint64_t subseed, struct cinfo *out)
{
	struct conn *c = &S_.c;
	struct rng r;
	struct ibv_qp_init_attr ia = { 0 };
	unsigned int acc = 0;
	uint32_t len, srq_sge;

	rng_init(&r, subseed);
	len = 64 + rsize(&r, 1 << 15);
	/* UC and UD take receives into this MR: LOCAL_WRITE. RC may lack it (then also
	 * remote write and atomics: ibv_reg_mr(3)). */
	if (type != IBV_QPT_RC || !rone(&r, 8))
		acc |= IBV_ACCESS_LOCAL_WRITE;
	if ((acc & IBV_ACCESS_LOCAL_WRITE) && !rone(&r, 5))
		acc |= IBV_ACCESS_REMOTE_WRITE;
	if (!rone(&r, 5))
		acc |= IBV_ACCESS_REMOTE_READ;
	if ((acc & IBV_ACCESS_LOCAL_WRITE) && !rone(&r, 4))
		acc |= IBV_ACCESS_REMOTE_ATOMIC;
	if (rone(&r, 4))
		acc |= IBV_ACCESS_ON_DEMAND;
	memset(c, 0, sizeof(*c));
	c->async_expect = -1;
	buf_make(len, 0, &c->map, &c->maplen, &c->buf, &c->shadow);
	for (uint32_t i = 0; i < len; i++) /* something known, not zero */
		c->buf[i] = (char)(c->shadow[GUARD + i] = (unsigned char)(i * 7 + 1));
	errno = 0;
	c->mr = ibv_reg_mr(S_.pd, c->buf, len, (int)acc);
	CHECK(c->mr, "ibv_reg_mr(data, len %u, access 0x%x): NULL errno %d", len, acc, errno);
	ia.qp_type = type;
	ia.send_cq = S_.scq;
	ia.recv_cq = S_.rcq;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = 1 + rbelow(&r, MAX_SEG);
	ia.cap.max_recv_sge = 1 + rbelow(&r, MAX_SEG);
	ia.cap.max_inline_data = rbelow(&r, 65);
	ia.sq_sig_all = 1;
	srq_sge = 0;
	if (rone(&r, 4)) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64,
							  .max_sge = ia.cap.max_recv_sge } };

		c->srq = ibv_create_srq(S_.pd, &sa);
		CHECK(c->srq && sa.attr.max_sge >= ia.cap.max_recv_sge,
		      "ibv_create_srq (data): %p errno %d", (void *)c->srq, errno);
		ia.srq = c->srq;
		srq_sge = sa.attr.max_sge;
	}
	errno = 0;
	c->qp = ibv_create_qp(S_.pd, &ia);
	CHECK(c->qp, "ibv_create_qp(data %d): NULL errno %d", type, errno);
	c->me = (struct cinfo){
		.qpn = c->qp->qp_num, .qkey = QKEY_BASE | rbelow(&r, 0x10000),
		.rkey = c->mr->rkey, .len = len, .mr_access = acc, .type = type,
		.max_inline = ia.cap.max_inline_data, .max_send_sge = ia.cap.max_send_sge,
		.max_recv_sge = c->srq ? srq_sge : ia.cap.max_recv_sge, .addr = (uintptr_t)c->buf, .gid = S_.gid,
		.lid = S_.port.lid,
	};
	if (type == IBV_QPT_RC)
		c->me.qp_access = (unsigned int)rnext(&r) & (IBV_ACCESS_REMOTE_WRITE |
							   IBV_ACCESS_REMOTE_READ |
							   IBV_ACCESS_REMOTE_ATOMIC);
	else if (type == IBV_QPT_UC)
		c->me.qp_access = rone(&r, 6) ? 0 : IBV_ACCESS_REMOTE_WRITE;
	if (type == IBV_QPT_RC && rbelow(&r, 8)) /* mostly all rights: more traffic lands */
		c->me.qp_access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC;
	vlog("conn_new %s QPN %u MR len %u access 0x%x QP access 0x%x%s caps sge %u/%u inline %u",
	     qpt_name(type), c->qp->qp_num, len, acc, c->me.qp_access, c->srq ? " SRQ" : "",
	     c->me.max_send_sge, c->me.max_recv_sge, c->me.max_inline);
	*out = c->me;
}

/* RESET -> INIT -> RTR -> RTS towards @peer, with the attributes each transition
 * requires for the type. */
static void conn_go(const struct cinfo *peer)
{
	struct conn *c = &S_.c;
	struct ibv_qp_attr a = { 0 };
	enum ibv_qp_type t = (enum ibv_qp_type)c->me.type;
	int rc;

	c->peer = *peer;
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qkey = c->me.qkey;
	a.qp_access_flags = c->me.qp_access;
	rc = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      (t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
	CHECK(rc == 0, "data QP RESET -> INIT: %d", rc);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	fill_ah_attr(&a.ah_attr);
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.dlid = peer->lid;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = 0x123;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = 1;
	rc = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | (t == IBV_QPT_UD ? 0 :
			   IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   (t == IBV_QPT_RC ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0)));
	CHECK(rc == 0, "data QP INIT -> RTR: %d", rc);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x123;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 16;
	rc = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
			   (t == IBV_QPT_RC ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			    IBV_QP_MAX_QP_RD_ATOMIC : 0));
	CHECK(rc == 0, "data QP RTR -> RTS: %d", rc);
	{
		/* ibv_query_qp(3): what the transitions set, and the capacities granted. */
		struct ibv_qp_init_attr ia;

		memset(&a, 0, sizeof(a));
		rc = ibv_query_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN |
				  IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU |
				  IBV_QP_SQ_PSN | IBV_QP_RQ_PSN | IBV_QP_PORT, &ia);
		CHECK(rc == 0 && a.qp_state == IBV_QPS_RTS && a.sq_psn == 0x123 &&
			      ia.cap.max_send_sge == c->me.max_send_sge &&
			      ia.cap.max_inline_data == c->me.max_inline && ia.qp_type == t &&
			      ia.srq == c->srq &&
			      (t == IBV_QPT_UD ? a.qkey == c->me.qkey
					       : a.dest_qp_num == peer->qpn && a.rq_psn == 0x123 &&
							 a.path_mtu == IBV_MTU_4096 &&
							 a.qp_access_flags == c->me.qp_access),
		      "ibv_query_qp after RTS: rc %d state %s sq_psn 0x%x rq_psn 0x%x dest %u "
		      "(want %u) mtu %d qkey 0x%x (want 0x%x) access 0x%x (want 0x%x) send_sge %u "
		      "(want %u) inline %u (want %u)", rc, st_name(a.qp_state), a.sq_psn,
		      a.rq_psn, a.dest_qp_num, peer->qpn, a.path_mtu, a.qkey, c->me.qkey,
		      a.qp_access_flags, c->me.qp_access, ia.cap.max_send_sge, c->me.max_send_sge,
		      ia.cap.max_inline_data, c->me.max_inline);
	}
	if (t == IBV_QPT_UD) {
		struct ibv_ah_attr aa;

		fill_ah_attr(&aa);
		aa.grh.dgid = peer->gid;
		aa.dlid = peer->lid;
		c->ah = ibv_create_ah(S_.pd, &aa);
		CHECK(c->ah, "ibv_create_ah to the peer: errno %d", errno);
	}
	c->up = true;
}

/* Tears this end down: the state the last step left (checked if @want >= 0), ERR, the
 * outstanding receives flushed in order, nothing else, the memory as the shadow says. */
static void conn_down(int want)
{
	struct conn *c = &S_.c;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	enum ibv_qp_state st;
	int rc;

	if (!c->up)
		return;
	st = query_state(c->qp);
	/* A responder's own move to ERR and its event need not come before its NAK
	 * reaches the requester: both within a bound. */
	for (long long until = now_ms() + WAIT_MS;
	     want >= 0 && st != (enum ibv_qp_state)want && now_ms() < until; sched_yield())
		st = query_state(c->qp);
	CHECK(want < 0 || st == (enum ibv_qp_state)want,
	      "data QP (%s) is in %s after the step; want %s",
	      c->me.type == IBV_QPT_RC ? "RC" : c->me.type == IBV_QPT_UC ? "UC" : "UD",
	      st_name(st), st_name(want));
	if (st == IBV_QPS_ERR || st == IBV_QPS_SQE) {
		/* IBA 10.8.3.3 / 11.4.2: a WR posted to a QP in Error (or its send queue in
		 * SQE) is accepted and completes with IBV_WC_WR_FLUSH_ERR. */
		struct ibv_send_wr wr = { .wr_id = 0xf1u | (S_.op << 8), .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;

		if (c->me.type == IBV_QPT_UD) {
			wr.wr.ud.ah = c->ah;
			wr.wr.ud.remote_qpn = c->peer.qpn;
			wr.wr.ud.remote_qkey = c->peer.qkey;
		}
		rc = ibv_post_send(c->qp, &wr, &bad);
		CHECK(rc == 0, "ibv_post_send to a QP in %s returned %d; want 0 and a flush",
		      st_name(st), rc);
		expect_wc(S_.scq, wr.wr_id, IBV_WC_WR_FLUSH_ERR, -1, c->qp->qp_num,
			  "a SEND posted after the error", NULL);
	}
	rc = ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
	CHECK(rc == 0, "data QP -> ERR: %d", rc);
	if (c->srq) {
		/* The SRQ's receives are not the QP's: nothing flushed (IBA 10.2.9.5); the QP
		 * in ERR reports IBV_EVENT_QP_LAST_WQE_REACHED (IBA 11.6.3). */
		struct pollfd pfd = { .fd = S_.ctx->async_fd, .events = POLLIN };

		for (long long until = now_ms() + WAIT_MS; !c->last_wqe_seen && now_ms() < until;) {
			if (poll(&pfd, 1, WAIT_MS) == 1)
				c->async_seen |= drain_async(c->async_expect, "teardown (SRQ)");
		}
		CHECK(c->last_wqe_seen, "no IBV_EVENT_QP_LAST_WQE_REACHED within %d ms for a data "
		      "QP with an SRQ in ERR", WAIT_MS);
	} else {
		for (int k = 0; k < c->nrecv; k++)
			expect_wc(S_.rcq, c->recv_ids[k], IBV_WC_WR_FLUSH_ERR, -1, c->qp->qp_num,
				  "an outstanding receive flushed at teardown", NULL);
	}
	expect_empty(S_.rcq, "teardown, receive CQ");
	expect_empty(S_.scq, "teardown, send CQ");
	if (c->async_expect >= 0 && !c->async_seen) {
		struct pollfd pfd = { .fd = S_.ctx->async_fd, .events = POLLIN };

		if (poll(&pfd, 1, WAIT_MS) != 1)
			fail("no async event %s within %d ms",
			     ibv_event_type_str((enum ibv_event_type)c->async_expect), WAIT_MS);
		c->async_seen = drain_async(c->async_expect, "teardown");
	}
	drain_async(c->async_expect, "teardown");
	buf_check(c, "teardown");
	if (c->ah)
		CHECK(ibv_destroy_ah(c->ah) == 0, "ibv_destroy_ah (data)");
	CHECK(ibv_destroy_qp(c->qp) == 0, "ibv_destroy_qp (data)");
	if (c->srq) {
		CHECK(ibv_destroy_srq(c->srq) == 0, "ibv_destroy_srq (data)");
		expect_empty(S_.rcq, "after destroying the SRQ (its receives go without completions)");
	}
	CHECK(ibv_dereg_mr(c->mr) == 0, "ibv_dereg_mr (data)");
	munmap(c->map, c->maplen);
	free(c->shadow);
	memset(c, 0, sizeof(*c));
}

static uint64_t seg_addr(const struct conn *c, const struct seg *s)
{
	return s->before ? (uintptr_t)c->buf - 8 : (uintptr_t)c->buf + s->off;
}

static uint32_t seg_key(const struct conn *c, const struct seg *s)
{
	return s->bad_lkey ? c->mr->lkey ^ s->bad_lkey : c->mr->lkey;
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Scatters @len bytes of @src over the segments @sg of the shadow, in order. */
static void shadow_scatter(struct conn *c, const struct seg *sg, uint32_t n,
			   const unsigned char *src, uint32_t len)
{
	uint32_t pos = 0;

	for (uint32_t k = 0; k < n && pos < len; k++) {
		uint32_t take = sg[k].len < len - pos ? sg[k].len : len - pos;

		memcpy(c->shadow + GUARD + sg[k].off, src + pos, take);
		pos += take;
	}
}

/* The target's part before the post: the receive (and an invalid one first). For a READ
 * or an atomic, the bytes its memory holds at the remote range go back in @out. */
static uint32_t do_prep(const struct dop *d, unsigned char *out)
{
	struct conn *c = &S_.c;
	struct ibv_sge sg[MAX_SEG + 4];
	struct ibv_recv_wr wr = { 0 }, *bad = NULL;
	int rc;

	if (d->bad_recv_post) {
		/* ibv_post_recv(3): more SGEs than max_recv_sge: EINVAL, bad_wr the WR. */
		uint32_t n = c->me.max_recv_sge + 1;

		for (uint32_t k = 0; k < n; k++)
			sg[k] = (struct ibv_sge){ .addr = (uintptr_t)c->buf, .length = 1,
						  .lkey = c->mr->lkey };
		wr.wr_id = (d->id << 8) | 0xbd;
		wr.sg_list = sg;
		wr.num_sge = (int)n;
		rc = c->srq ? ibv_post_srq_recv(c->srq, &wr, &bad) : ibv_post_recv(c->qp, &wr, &bad);
		CHECK(rc == EINVAL && bad == &wr, "ibv_post_recv with %u SGEs (max_recv_sge %u) "
		      "returned %d; want EINVAL, bad_wr the WR", n, c->me.max_recv_sge, rc);
	}
	if (d->recv) {
		for (uint32_t k = 0; k < d->rnseg; k++)
			sg[k] = (struct ibv_sge){ .addr = seg_addr(c, &d->rseg[k]),
						  .length = d->rseg[k].len,
						  .lkey = seg_key(c, &d->rseg[k]) };
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = (d->id << 8) | 0x52;
		wr.sg_list = d->rnseg ? sg : NULL;
		wr.num_sge = (int)d->rnseg;
		bad = NULL;
		rc = c->srq ? ibv_post_srq_recv(c->srq, &wr, &bad) : ibv_post_recv(c->qp, &wr, &bad);
		CHECK(rc == 0, "ibv_post_%srecv (%u SGEs, max %u) returned %d", c->srq ? "srq_" : "",
		      d->rnseg, c->me.max_recv_sge, rc);
		c->recv_ids[c->nrecv++] = wr.wr_id;
	}
	if (d->reads && !d->rbefore && d->roff + d->len <= c->me.len) {
		memcpy(out, c->shadow + GUARD + d->roff, d->len);
		return d->len;
	}
	return 0;
}


/* Known defect 10's UC half: a new UC QP whose peer QPN nobody has; a SEND from it
 * completes (UC is unacknowledged: the message is lost), with a bad lkey it fails with
 * IBV_WC_LOC_PROT_ERR all the same (IBA 10.6.3) and the QP goes to SQE. */
static void do_ghost(const struct dop *d)
{
	struct conn *c = &S_.c;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_UC, .send_cq = S_.scq, .recv_cq = S_.rcq,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(S_.pd, &ia);
	struct ibv_qp *gone = ibv_create_qp(S_.pd, &ia);
	struct cinfo saved = c->me, saved_peer = c->peer, peer;
	struct ibv_qp *main_qp = c->qp;
	struct ibv_srq *main_srq = c->srq;
	struct ibv_sge sg = { .addr = (uintptr_t)c->buf, .length = d->len,
			      .lkey = d->seg[0].bad_lkey ? c->mr->lkey ^ d->seg[0].bad_lkey : c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = (d->id << 8) | 0x47, .sg_list = &sg, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	bool was_up = c->up;
	int rc;

	CHECK(qp && gone, "ibv_create_qp (UC ghost): errno %d", errno);
	/* A QP number that existed and does not any more: nobody has it. */
	peer = c->peer;
	peer.qpn = gone->qp_num;
	CHECK(ibv_destroy_qp(gone) == 0, "ibv_destroy_qp (ghost peer)");
	c->qp = qp;
	c->srq = NULL;
	c->me.type = IBV_QPT_UC;
	c->me.qp_access = IBV_ACCESS_REMOTE_WRITE;
	c->me.max_send_sge = ia.cap.max_send_sge;
	c->me.max_inline = ia.cap.max_inline_data;
	conn_go(&peer);
	rc = ibv_post_send(qp, &wr, &bad);
	CHECK(rc == 0, "ibv_post_send (UC ghost) returned %d", rc);
	expect_wc(S_.scq, wr.wr_id, (enum ibv_wc_status)d->wc_status, IBV_WC_SEND, qp->qp_num,
		  d->seg[0].bad_lkey ? "UC SEND with a bad lkey to a QPN nobody has"
				     : "UC SEND to a QPN nobody has", NULL);
	CHECK(query_state(qp) == (d->wc_status ? IBV_QPS_SQE : IBV_QPS_RTS),
	      "UC ghost QP in %s after the send", st_name(query_state(qp)));
	expect_empty(S_.scq, "after the UC ghost send");
	CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp (UC ghost)");
	c->qp = main_qp;
	c->srq = main_srq;
	c->me = saved;
	c->up = was_up;
	c->peer = saved_peer;
}

/* The initiator's part: fill the source, post, check the post and the completion(s),
 * take in what a READ or atomic brought, check every byte of its mapping. */
static void do_init(const struct dop *d, const unsigned char *remote_old)
{
	struct conn *c = &S_.c;
	struct ibv_sge sg[MAX_SEG + 4];
	struct ibv_send_wr wr[4], *bad = NULL;
	struct ibv_sge psg[3];
	uint32_t nsge = d->post_nsge, pos = 0;
	int n = 0, rc, opc = -1;
	struct ibv_mr *hole_mr = NULL;
	char *hole = NULL;
	size_t pg = page_size();
	char what[200];

	if (d->ghost) {
		do_ghost(d);
		return;
	}
	memset(wr, 0, sizeof(wr));
	/* What the message gathers (SEND, WRITE): this op's pattern, in order. */
	if (d->opcode == IBV_WR_SEND || d->opcode == IBV_WR_SEND_WITH_IMM ||
	    d->opcode == IBV_WR_RDMA_WRITE || d->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		for (uint32_t k = 0; k < d->nseg; k++) {
			const struct seg *s = &d->seg[k];

			if (s->before || s->off + s->len > c->me.len)
				continue; /* outside the MR: the canary stays as it is */
			for (uint32_t b = 0; b < s->len; b++, pos++)
				c->buf[s->off + b] = (char)(c->shadow[GUARD + s->off + b] = pat(d->id, pos));
		}
	}
	/* Valid WRITEs ahead of it in the same chain (filled last: the rejected WR after
	 * them never gathers): posted, completed, landed. */
	for (uint32_t k = 0; k < d->prefix; k++) {
		uint32_t off = k * 8;

		for (uint32_t b = 0; b < 8; b++)
			c->buf[off + b] = (char)(c->shadow[GUARD + off + b] = pat(d->id, 1000 + off + b));
		psg[k] = (struct ibv_sge){ .addr = (uintptr_t)c->buf + off, .length = 8,
					   .lkey = c->mr->lkey };
		wr[n].wr_id = (d->id << 8) | k;
		wr[n].sg_list = &psg[k];
		wr[n].num_sge = 1;
		wr[n].opcode = IBV_WR_RDMA_WRITE;
		wr[n].send_flags = IBV_SEND_SIGNALED;
		wr[n].wr.rdma.remote_addr = c->peer.addr + off;
		wr[n].wr.rdma.rkey = c->peer.rkey;
		n++;
	}
	for (uint32_t k = 0; k < nsge; k++) {
		const struct seg *s = &d->seg[k < d->nseg ? k : 0];

		sg[k] = (struct ibv_sge){ .addr = seg_addr(c, s), .length = k < d->nseg ? s->len : 1,
					  .lkey = seg_key(c, s) };
	}
	if (d->odp_hole) {
		/* Known defect 11: two pages, the second PROT_NONE, an on-demand MR over both
		 * (registration succeeds: nothing is pinned); 128 bytes across the boundary. */
		hole = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(hole != MAP_FAILED, "mmap");
		CHECK(mprotect(hole + pg, pg, PROT_NONE) == 0, "mprotect");
		hole_mr = ibv_reg_mr(S_.pd, hole, 2 * pg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
		CHECK(hole_mr, "ibv_reg_mr(ON_DEMAND over PROT_NONE): errno %d", errno);
		sg[0] = (struct ibv_sge){ .addr = (uintptr_t)hole + pg - 64, .length = 128,
					  .lkey = hole_mr->lkey };
		nsge = 1;
	}
	wr[n].wr_id = (d->id << 8) | 0x53;
	wr[n].sg_list = nsge ? sg : NULL;
	wr[n].num_sge = (int)nsge;
	wr[n].opcode = (enum ibv_wr_opcode)d->opcode;
	wr[n].send_flags = IBV_SEND_SIGNALED | (d->inl ? IBV_SEND_INLINE : 0);
	wr[n].imm_data = htonl(d->imm);
	switch (d->opcode) {
	case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_RDMA_READ:
		wr[n].wr.rdma.remote_addr = d->rbefore ? c->peer.addr - 8 : c->peer.addr + d->roff;
		wr[n].wr.rdma.rkey = d->bad_rkey ? c->peer.rkey ^ d->bad_rkey : c->peer.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
		wr[n].wr.atomic.remote_addr = d->rbefore ? c->peer.addr - 8 : c->peer.addr + d->roff;
		wr[n].wr.atomic.rkey = d->bad_rkey ? c->peer.rkey ^ d->bad_rkey : c->peer.rkey;
		wr[n].wr.atomic.compare_add = d->cmp;
		wr[n].wr.atomic.swap = d->swap;
		break;
	default:
		break;
	}
	if (c->me.type == IBV_QPT_UD) {
		wr[n].wr.ud.ah = c->ah;
		wr[n].wr.ud.remote_qpn = d->absent ? d->absent_qpn : c->peer.qpn;
		wr[n].wr.ud.remote_qkey = d->bad_qkey ? c->peer.qkey ^ d->bad_qkey : c->peer.qkey;
	}
	for (int k = 0; k < n; k++)
		wr[k].next = &wr[k + 1];
	snprintf(what, sizeof(what), "%s opcode %d len %u nseg %u (posted %u, max %u)%s%s%s%s%s",
		 qpt_name(c->me.type), d->opcode, d->len, d->nseg, nsge, c->me.max_send_sge,
		 d->inl ? " inline" : "", d->bad_rkey || d->rbefore ? " bad remote" : "",
		 d->absent ? " to an absent QPN" : "", d->bad_qkey ? " bad Q_Key" : "",
		 d->odp_hole ? " ODP hole" : "");
	rc = ibv_post_send(c->qp, &wr[0], &bad);
	CHECK(rc == d->post_rc && (rc == 0 || bad == &wr[n]),
	      "ibv_post_send(%s, inline max %u, prefix %u) returned %d, bad_wr %s; want %d%s",
	      what, c->me.max_inline, d->prefix, rc,
	      !rc ? "-" : bad == &wr[n] ? "the WR" : bad ? "another WR" : "NULL", d->post_rc,
	      d->post_rc ? ", bad_wr the WR" : "");
	for (uint32_t k = 0; k < d->prefix; k++)
		expect_wc(S_.scq, wr[k].wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, c->qp->qp_num,
			  "a valid WRITE ahead in the chain", NULL);
	switch (d->opcode) {
	case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: opc = IBV_WC_SEND; break;
	case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: opc = IBV_WC_RDMA_WRITE; break;
	case IBV_WR_RDMA_READ: opc = IBV_WC_RDMA_READ; break;
	case IBV_WR_ATOMIC_CMP_AND_SWP: opc = IBV_WC_COMP_SWAP; break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: opc = IBV_WC_FETCH_ADD; break;
	}
	if (d->wc_status >= 0 && !d->post_rc) {
		struct ibv_wc wc;
		enum ibv_wc_status st = (enum ibv_wc_status)d->wc_status;

		if (!poll_one(S_.scq, &wc, WAIT_MS))
			fail("%s: no completion within %d ms (want %s)", what, WAIT_MS,
			     ibv_wc_status_str(st));
		if (d->wc_alt >= 0 && wc.status == (enum ibv_wc_status)d->wc_alt)
			st = wc.status;
		CHECK(wc.wr_id == wr[n].wr_id && wc.status == st && wc.qp_num == c->qp->qp_num &&
			      (st != IBV_WC_SUCCESS || (int)wc.opcode == opc),
		      "%s: completion wr_id 0x%" PRIx64 " status %s opcode %d qp_num %u; want "
		      "wr_id 0x%" PRIx64 " status %s%s%s opcode %d qp_num %u", what, wc.wr_id,
		      ibv_wc_status_str(wc.status), wc.opcode, wc.qp_num, wr[n].wr_id,
		      ibv_wc_status_str(st), d->wc_alt >= 0 ? " or " : "",
		      d->wc_alt >= 0 ? ibv_wc_status_str((enum ibv_wc_status)d->wc_alt) : "", opc,
		      c->qp->qp_num);
		if (st == IBV_WC_SUCCESS && d->reads)
			shadow_scatter(c, d->seg, d->nseg, remote_old,
				       d->opcode == IBV_WR_RDMA_READ ? d->len : 8);
	}
	expect_empty(S_.scq, "after the post's completions");
	if (hole_mr) {
		CHECK(ibv_dereg_mr(hole_mr) == 0, "ibv_dereg_mr (ODP hole)");
		munmap(hole, 2 * pg);
	}
	buf_check(c, "the initiator's memory after its completion");
}

/* The target's part after the initiator's completion: the receive's completion, what
 * landed applied to the shadow, every byte of the mapping checked. */
static void do_check(const struct dop *d)
{
	struct conn *c = &S_.c;
	struct ibv_wc wc;
	bool received = false;

	if (d->recv && d->recv_status >= 0) {
		uint64_t id = c->recv_ids[0];
		bool imm = d->opcode == IBV_WR_SEND_WITH_IMM || d->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
		uint32_t want_len = d->len + (c->me.type == IBV_QPT_UD ? GRH_LEN : 0);
		int opc = d->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
								   : IBV_WC_RECV;
		char what[160];

		snprintf(what, sizeof(what), "the target's receive (%s opcode %d len %u, %u SGEs)",
			 qpt_name(c->me.type), d->opcode, d->len, d->rnseg);
		expect_wc(S_.rcq, id, (enum ibv_wc_status)d->recv_status, opc, c->qp->qp_num, what,
			  &wc);
		memmove(c->recv_ids, c->recv_ids + 1, (size_t)--c->nrecv * sizeof(c->recv_ids[0]));
		if (d->recv_status == IBV_WC_SUCCESS) {
			/* ibv_poll_cq(3): byte_len, imm_data with IBV_WC_WITH_IMM, src_qp (UD),
			 * IBV_WC_GRH (UD). */
			CHECK(wc.byte_len == want_len && !!(wc.wc_flags & IBV_WC_WITH_IMM) == imm &&
				      (!imm || ntohl(wc.imm_data) == d->imm) &&
				      (c->me.type != IBV_QPT_UD ||
				       ((wc.wc_flags & IBV_WC_GRH) && wc.src_qp == c->peer.qpn)),
			      "%s: byte_len %u (want %u) wc_flags 0x%x imm 0x%x (want %s0x%x) "
			      "src_qp %u (peer %u)", what, wc.byte_len, want_len, wc.wc_flags,
			      ntohl(wc.imm_data), imm ? "" : "none, ", d->imm, wc.src_qp,
			      c->peer.qpn);
			received = true;
		}
	}
	expect_empty(S_.rcq, "after the receive");
	if (d->lands && (received || !d->recv)) {
		switch (d->opcode) {
		case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM:
			for (uint32_t i = 0; i < d->len; i++)
				c->shadow[GUARD + d->roff + i] = pat(d->id, i);
			break;
		case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: {
			static unsigned char stream[GRH_LEN + (1 << 16)];
			uint32_t skip = c->me.type == IBV_QPT_UD ? GRH_LEN : 0;

			for (uint32_t i = 0; i < d->len; i++)
				stream[skip + i] = pat(d->id, i);
			if (skip) {
				/* The GRH: what the library wrote in its 40 bytes (IBA 8.3)
				 * taken as it is, its SGID the sender's, its DGID ours. */
				uint32_t p = 0;

				for (uint32_t k = 0; k < d->rnseg && p < GRH_LEN; k++)
					for (uint32_t b = 0; b < d->rseg[k].len && p < GRH_LEN; b++)
						stream[p++] = (unsigned char)c->buf[d->rseg[k].off + b];
				CHECK(memcmp(stream + 8, &c->peer.gid, 16) == 0 &&
					      memcmp(stream + 24, &c->me.gid, 16) == 0,
				      "the GRH's SGID/DGID are not the sender's GID and ours");
			}
			shadow_scatter(c, d->rseg, d->rnseg, stream, d->len + skip);
			break;
		}
		case IBV_WR_ATOMIC_CMP_AND_SWP:
			if (load64(c->shadow + GUARD + d->roff) == d->cmp)
				memcpy(c->shadow + GUARD + d->roff, &d->swap, 8);
			break;
		case IBV_WR_ATOMIC_FETCH_AND_ADD: {
			uint64_t v = load64(c->shadow + GUARD + d->roff) + d->cmp;

			memcpy(c->shadow + GUARD + d->roff, &v, 8);
			break;
		}
		}
	}
	for (uint32_t k = 0; k < d->prefix; k++)
		for (uint32_t b = 0; b < 8; b++)
			c->shadow[GUARD + k * 8 + b] = pat(d->id, 1000 + k * 8 + b);
	if (d->async_t >= 0)
		c->async_expect = d->async_t;
	if (c->me.type == IBV_QPT_RC || !d->fence) {
		/* RC: the completion came after the responder placed it (its ACK); RDMA READ
		 * and atomics likewise. UC/UD without a receive: a fence follows. */
		buf_check(c, "the target's memory after the step");
		c->async_seen |= drain_async(c->async_expect, "after the step");
	}
}

/* ---- the director: draws every step, runs each end's part where it lives ----------- */

static struct {
	uint64_t seed, ops;
	double seconds;
	bool known, verbose;
} O = { .ops = 1000000, .seconds = 10 };

static uint32_t umin(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static uint32_t nonzero32(struct rng *r)
{
	uint32_t v = (uint32_t)rnext(r);

	return v ? v : 0x100;
}

/* Cuts [off, off + len) into @n contiguous segments of at least one byte. */
static void split(struct rng *r, struct seg *s, uint32_t n, uint32_t off, uint32_t len)
{
	uint32_t left = len;

	for (uint32_t k = 0; k < n; k++) {
		uint32_t take = k == n - 1 ? left : 1 + rbelow(r, left - (n - 1 - k));

		s[k] = (struct seg){ .off = off, .len = take };
		off += take;
		left -= take;
	}
}

static bool is_rdma(uint32_t op)
{
	return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ;
}

static bool is_atomic(uint32_t op)
{
	return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

static bool is_send(uint32_t op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
}

/* A data operation from @ini's end to @tgt's, and what each end must see. */
static void gen_dop(struct rng *r, const struct cinfo *ini, const struct cinfo *tgt,
		    struct dop *d, uint64_t id)
{
	enum ibv_qp_type t = (enum ibv_qp_type)ini->type;
	bool rc = t == IBV_QPT_RC, uc = t == IBV_QPT_UC, ud = t == IBV_QPT_UD;
	bool lw = ini->mr_access & IBV_ACCESS_LOCAL_WRITE;
	bool tlw = tgt->mr_access & IBV_ACCESS_LOCAL_WRITE;
	bool rw = (tgt->mr_access & IBV_ACCESS_REMOTE_WRITE) && (tgt->qp_access & IBV_ACCESS_REMOTE_WRITE);
	bool rr = (tgt->mr_access & IBV_ACCESS_REMOTE_READ) && (tgt->qp_access & IBV_ACCESS_REMOTE_READ);
	bool ra = (tgt->mr_access & IBV_ACCESS_REMOTE_ATOMIC) && (tgt->qp_access & IBV_ACCESS_REMOTE_ATOMIC);
	uint32_t err_state = rc ? IBV_QPS_ERR : IBV_QPS_SQE;
	uint32_t maxlen, need, op;
	bool local_err = false, remote_err = false, permitted = true;

	memset(d, 0, sizeof(*d));
	d->id = id;
	d->wc_status = IBV_WC_SUCCESS;
	d->wc_alt = -1;
	d->recv_status = -1;
	d->async_t = -1;
	d->i_state = IBV_QPS_RTS;
	d->t_state = IBV_QPS_RTS;
	d->imm = (uint32_t)rnext(r);

	/* UC to a QPN nobody has: the SEND completes; with a bad lkey, known defect 10. */
	if (uc && rone(r, 40)) {
		d->ghost = 1;
		d->len = 1 + rbelow(r, umin(ini->len, 256));
		if (O.known && rone(r, 2)) {
			d->seg[0].bad_lkey = nonzero32(r);
			d->wc_status = IBV_WC_LOC_PROT_ERR;
		}
		return;
	}
	/* Known defect 11: a SEND gathering from an on-demand MR over a PROT_NONE page fails
	 * (IBV_WC_LOC_PROT_ERR, or LOC_ACCESS_ERR as an ODP NIC may say); it must not crash. */
	if (O.known && !ud && rone(r, 60)) {
		d->opcode = IBV_WR_SEND;
		d->odp_hole = 1;
		d->len = 128;
		d->post_nsge = 1;
		d->wc_status = IBV_WC_LOC_PROT_ERR;
		d->wc_alt = IBV_WC_LOC_ACCESS_ERR;
		d->i_state = (int32_t)err_state;
		d->broken = 1;
		return;
	}

	/* The opcode: one the type carries; sometimes one it does not (ibv_post_send(3):
	 * EINVAL, as rxe's and mlx5's post for an opcode outside the QP type's set). */
	if (!rc && rone(r, 14)) {
		static const uint32_t uc_bad[] = { IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
						   IBV_WR_ATOMIC_FETCH_AND_ADD };
		static const uint32_t ud_bad[] = { IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
						   IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
						   IBV_WR_ATOMIC_FETCH_AND_ADD };

		d->opcode = uc ? uc_bad[rbelow(r, 3)] : ud_bad[rbelow(r, 5)];
		d->len = 8;
		d->nseg = d->post_nsge = 1;
		d->seg[0] = (struct seg){ .off = 0, .len = 8 };
		d->post_rc = EINVAL;
		d->wc_status = -1;
		return;
	} else {
		static const uint32_t ops[] = { IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
						IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
						IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
						IBV_WR_ATOMIC_FETCH_AND_ADD };

		op = ops[rbelow(r, rc ? 7 : uc ? 4 : 2)];
	}
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM && !rw)
		op = IBV_WR_RDMA_WRITE;
	/* READ and atomics scatter locally: without LOCAL_WRITE a LOC_PROT_ERR, but only
	 * when the responder would answer (else which error comes first is not fixed). */
	if ((op == IBV_WR_RDMA_READ && !(rr || lw)) || (is_atomic(op) && !(ra || lw)))
		op = IBV_WR_SEND;
	if ((op == IBV_WR_RDMA_READ && !rr && !lw) || (is_atomic(op) && !ra && !lw))
		op = IBV_WR_SEND;
	d->opcode = op;

	/* The length. UD: at most the path MTU (4096), the target's buffer holds the GRH
	 * too. A READ's bytes travel in one message between the processes. */
	maxlen = umin(umin(ini->len, tgt->len), 16384);
	if (ud)
		maxlen = umin(maxlen, umin(4096, tgt->len - GRH_LEN));
	if (op == IBV_WR_RDMA_READ)
		maxlen = umin(maxlen, MSG_DATA);
	if (is_atomic(op))
		d->len = 8;
	else if (rone(r, 2))
		d->len = rsize(r, maxlen);
	else
		d->len = rbelow(r, umin(maxlen, 64) + 1);
	if ((is_rdma(op)) && d->len == 0)
		d->len = 1; /* zero-length RDMA: the R_Key need not be checked (IBA 9.4.4) */

	/* The initiator's SGEs. */
	if (is_atomic(op)) {
		d->nseg = 1;
		d->seg[0] = (struct seg){ .off = rbelow(r, ini->len - 8 + 1), .len = 8 };
	} else if (d->len == 0) {
		d->nseg = rbelow(r, 2);
		d->seg[0] = (struct seg){ .off = rbelow(r, ini->len), .len = 0 };
	} else {
		d->nseg = 1 + rbelow(r, umin(umin(ini->max_send_sge, MAX_SEG), d->len));
		split(r, d->seg, d->nseg, rbelow(r, ini->len - d->len + 1), d->len);
	}
	d->post_nsge = d->nseg;
	if ((is_send(op) || op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM) &&
	    rone(r, 4) && d->len <= ini->max_inline) {
		d->inl = 1;
		/* ibv_post_send(3): with IBV_SEND_INLINE "the lkey won't be checked". */
		if (d->nseg && rone(r, 3)) {
			uint32_t k = rbelow(r, d->nseg);

			d->seg[k].bad_lkey = nonzero32(r);
		}
	}
	/* Refused at the post (ibv_post_send(3): EINVAL, bad_wr the WR): inline data above
	 * max_inline_data, more SGEs than max_send_sge. Valid WRITEs may come before it in
	 * the chain; they are posted and land. */
	if ((!d->inl && !is_atomic(op) && rone(r, 16) && d->len > ini->max_inline &&
	     (is_send(op) || op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM)) ||
	    (!d->inl && !is_atomic(op) && rone(r, 16) && ini->max_send_sge + 1 <= MAX_SEG + 4)) {
		if (d->len > ini->max_inline && rone(r, 2) &&
		    (is_send(op) || op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM))
			d->inl = 1;
		else if (ini->max_send_sge + 1 <= MAX_SEG + 4)
			d->post_nsge = ini->max_send_sge + 1;
		else
			d->inl = 1;
		if (d->inl && d->len <= ini->max_inline) { /* not refusable after all */
			d->inl = 0;
			d->post_nsge = ini->max_send_sge + 1;
		}
		if (d->post_nsge > MAX_SEG + 4)
			d->post_nsge = d->nseg; /* cannot build it: post it valid */
		else {
			d->post_rc = EINVAL;
			d->wc_status = -1;
			if (!ud && rw && rone(r, 2))
				d->prefix = 1 + rbelow(r, 2);
			d->fence = uc && d->prefix;
			d->lands = 0;
			return;
		}
	}

	/* At most one local fault (IBA 10.6.3: IBV_WC_LOC_PROT_ERR): a bad lkey, a segment
	 * past the MR's end into the canary, one starting 8 bytes before the MR. */
	if (!d->inl && d->len > 0 && d->nseg && rone(r, 8)) {
		uint32_t kind = rbelow(r, 3);

		local_err = true;
		if (kind == 0) {
			uint32_t k = rbelow(r, d->nseg);

			d->seg[k].bad_lkey = nonzero32(r);
		} else if (kind == 1 && d->len <= ini->len) {
			uint32_t ex = 1 + rbelow(r, umin(d->len, GUARD - 8));

			d->nseg = d->post_nsge = 1;
			d->seg[0] = (struct seg){ .off = ini->len - d->len + ex, .len = d->len };
		} else {
			d->len = umin(d->len, 16);
			if (is_atomic(op))
				d->len = 8;
			d->nseg = d->post_nsge = 1;
			d->seg[0] = (struct seg){ .before = 1, .len = d->len };
		}
	}
	if (!local_err && ((op == IBV_WR_RDMA_READ || is_atomic(op)) && !lw))
		local_err = true; /* scatter into an MR without LOCAL_WRITE */
	if (local_err && ((op == IBV_WR_RDMA_READ && !rr) || (is_atomic(op) && !ra)))
		op = d->opcode = IBV_WR_SEND; /* see above: one fault at a time */
	if (local_err && op == IBV_WR_RDMA_WRITE_WITH_IMM)
		op = d->opcode = IBV_WR_RDMA_WRITE;
	if (local_err) {
		d->wc_status = IBV_WC_LOC_PROT_ERR;
		d->i_state = (int32_t)err_state;
		d->broken = 1;
	}

	/* The remote range. */
	if (is_rdma(op) || is_atomic(op)) {
		uint32_t kind = rbelow(r, 5);

		d->roff = is_atomic(op) ? rbelow(r, (tgt->len - 8) / 8 + 1) * 8
					: rbelow(r, tgt->len - d->len + 1);
		permitted = op == IBV_WR_RDMA_READ ? rr : is_atomic(op) ? ra : rw;
		if (!local_err && op != IBV_WR_RDMA_WRITE_WITH_IMM && rone(r, 7) && d->len <= tgt->len) {
			remote_err = true;
			if (kind == 0 || kind == 1) {
				d->bad_rkey = nonzero32(r);
			} else if (kind == 2) {
				d->roff = is_atomic(op) ? (tgt->len + 7) / 8 * 8
							: tgt->len - d->len + 1 + rbelow(r, umin(d->len, GUARD - 8));
				if (is_atomic(op) && d->roff < tgt->len)
					d->roff += 8;
			} else if (kind == 3) {
				d->rbefore = 1;
			} else if (is_atomic(op) && permitted && tgt->len >= 24) {
				/* An atomic not 8-byte aligned (IBA 9.4.5): rdma-core's rxe
				 * provider refuses it at the post (EINVAL), as softverbs does;
				 * on the wire it would be an Invalid Request NAK. */
				d->roff = rbelow(r, (tgt->len - 16) / 8 + 1) * 8;
				d->roff += 1 + rbelow(r, 7);
				d->post_rc = EINVAL;
				d->wc_status = -1;
				d->reads = d->lands = 0;
				return;
			} else {
				d->bad_rkey = nonzero32(r);
			}
		}
		if (!local_err && d->wc_status == IBV_WC_SUCCESS) {
			if (remote_err || !permitted) {
				if (rc) {
					/* IBA 9.7.5.2.4: the responder's NAK; its QP to ERR with
					 * IBV_EVENT_QP_ACCESS_ERR (conformance.md). */
					d->wc_status = IBV_WC_REM_ACCESS_ERR;
					d->i_state = IBV_QPS_ERR;
					d->t_state = IBV_QPS_ERR;
					d->async_t = IBV_EVENT_QP_ACCESS_ERR;
					d->broken = 1;
				} else {
					/* UC has no NAK: the requester completes, the responder
					 * drops it and carries on. */
					d->lost = 1;
					d->fence = 1;
				}
			} else {
				d->lands = op != IBV_WR_RDMA_READ;
				d->reads = op == IBV_WR_RDMA_READ || is_atomic(op);
				d->fence = uc && op == IBV_WR_RDMA_WRITE;
			}
		}
		if (is_atomic(op)) {
			d->cmp = rnext(r);
			d->swap = rnext(r);
		}
	}

	/* The receive at the target: SEND and WRITE_WITH_IMM consume one. */
	if (is_send(op) || op == IBV_WR_RDMA_WRITE_WITH_IMM) {
		need = d->len + (ud ? GRH_LEN : 0);
		d->recv = 1;
		if (op == IBV_WR_RDMA_WRITE_WITH_IMM || (need == 0 && (rone(r, 2) || !tlw))) {
			d->rnseg = 0;
		} else {
			uint32_t rlen = need + (rone(r, 2) ? 0 : rbelow(r, 64));

			if (rlen > tgt->len)
				rlen = need;
			d->rnseg = 1 + rbelow(r, umin(umin(tgt->max_recv_sge, MAX_SEG), rlen ? rlen : 1));
			if (rlen == 0)
				d->rseg[0] = (struct seg){ .off = rbelow(r, tgt->len), .len = 0 };
			else
				split(r, d->rseg, d->rnseg, rbelow(r, tgt->len - rlen + 1), rlen);
			if (rc && !local_err && is_send(op) && d->len > 0 && (rone(r, 10) || !tlw)) {
				if (tlw && rone(r, 2)) {
					/* too small: IBV_WC_LOC_LEN_ERR at the responder,
					 * IBV_WC_REM_INV_REQ_ERR at the requester (IBA 9.7.5.2.3) */
					uint32_t small = rbelow(r, d->len);

					d->rnseg = small ? 1 : 0;
					d->rseg[0] = (struct seg){ .off = rbelow(r, tgt->len - small + 1),
								   .len = small };
					d->recv_status = IBV_WC_LOC_LEN_ERR;
					d->wc_status = IBV_WC_REM_INV_REQ_ERR;
				} else {
					/* a bad lkey, or an MR without LOCAL_WRITE: LOC_PROT_ERR at
					 * the responder, REM_OP_ERR at the requester (IBA 9.7.5.2.4) */
					if (tlw) {
						uint32_t k = rbelow(r, d->rnseg);

						d->rseg[k].bad_lkey = nonzero32(r);
					}
					d->recv_status = IBV_WC_LOC_PROT_ERR;
					d->wc_status = IBV_WC_REM_OP_ERR;
				}
				d->i_state = IBV_QPS_ERR;
				d->t_state = IBV_QPS_ERR;
				d->broken = 1;
				return;
			}
		}
		if (ud && !local_err && rone(r, 10)) {
			/* lost: a wrong Q_Key, or a QPN nobody has: nothing consumed */
			if (rone(r, 2))
				d->bad_qkey = 1 + rbelow(r, 0xffff);
			else
				d->absent = 1;
			d->absent_qpn = 0xfffff0 + rbelow(r, 8);
			d->recv = 0;
			d->lost = 1;
			d->fence = 1;
			return;
		}
		/* A UD receive always has room for the GRH, a 0-byte datagram's too. */
		if (ud && d->rnseg == 0 && !local_err) {
			d->rnseg = 1;
			d->rseg[0] = (struct seg){ .off = rbelow(r, tgt->len - need + 1), .len = need };
		}
		if (!local_err) {
			d->recv_status = IBV_WC_SUCCESS;
			d->lands = 1;
		}
	}
	/* UD to a QPN nobody has with a bad lkey: known defect 10 (IBA 10.6.3: the L_Key
	 * is checked while gathering, whether or not anyone receives). */
	if (ud && local_err && O.known && rone(r, 3)) {
		d->absent = 1;
		d->absent_qpn = 0xfffff0 + rbelow(r, 8);
		d->recv = 0;
	}
}

static struct side_conn_info {
	struct cinfo ci[2];
	bool up;
	uint64_t data_ops, local_steps, conns, errors_expected, posts_refused;
} D;

static void handle(const struct msg *m, struct msg *reply);

/* Runs @m at @who (0: here, 1: the child) and returns its answer. */
static void run(int who, struct msg *m, struct msg *reply)
{
	m->op = S_.op;
	if (who == 0) {
		memset(reply, 0, offsetof(struct msg, data));
		handle(m, reply);
		return;
	}
	msg_send(m);
	msg_recv(reply, MSG_WAIT_MS);
	if (reply->type != M_OK)
		fail("the child answered %u to %u", reply->type, m->type);
}

static struct msg M_, R_;

static void run_simple(int who, uint32_t type, uint64_t arg, uint64_t arg2)
{
	memset(&M_, 0, offsetof(struct msg, data));
	M_.type = type;
	M_.arg = arg;
	M_.arg2 = arg2;
	run(who, &M_, &R_);
}

static void run_dop_part(int who, uint32_t type, const struct dop *d, const unsigned char *data,
			 uint32_t dlen)
{
	memset(&M_, 0, offsetof(struct msg, data));
	M_.type = type;
	M_.d = *d;
	M_.dlen = dlen;
	if (dlen)
		memcpy(M_.data, data, dlen);
	run(who, &M_, &R_);
}

static void conn_both_down(int want0, int want1)
{
	run_simple(0, M_CONN_DOWN, (uint64_t)(int64_t)want0, 0);
	run_simple(1, M_CONN_DOWN, (uint64_t)(int64_t)want1, 0);
	D.up = false;
}

static void conn_both_up(struct rng *r)
{
	enum ibv_qp_type t = rtype(r);
	uint64_t s0 = rnext(r), s1 = rnext(r);

	run_simple(0, M_CONN_NEW, t, s0);
	D.ci[0] = R_.ci;
	run_simple(1, M_CONN_NEW, t, s1);
	D.ci[1] = R_.ci;
	memset(&M_, 0, offsetof(struct msg, data));
	M_.type = M_CONN_GO;
	M_.ci = D.ci[0];
	run(1, &M_, &R_);
	M_.ci = D.ci[1];
	run(0, &M_, &R_);
	D.up = true;
	D.conns++;
}

static void describe(const struct dop *d, int ini)
{
	if (!O.verbose)
		return;
	fprintf(stderr, "op %" PRIu64 ": %s %s -> %s opcode %u len %u nseg %u/%u inl %u roff %u%s%s "
		"prefix %u recv %u rnseg %u%s%s%s%s%s post %d wc %d recv %d%s%s%s\n", S_.op,
		qpt_name(D.ci[ini].type), ini ? "child" : "parent", ini ? "parent" : "child",
		d->opcode, d->len, d->nseg, d->post_nsge, d->inl, d->roff,
		d->bad_rkey ? " bad-rkey" : "", d->rbefore ? " rbefore" : "", d->prefix, d->recv,
		d->rnseg, d->bad_qkey ? " bad-qkey" : "", d->absent ? " absent" : "",
		d->ghost ? " ghost" : "", d->odp_hole ? " odp-hole" : "",
		d->bad_recv_post ? " bad-recv-post" : "", d->post_rc, d->wc_status, d->recv_status,
		d->lost ? " lost" : "", d->fence ? " fence" : "", d->broken ? " broken" : "");
	for (uint32_t k = 0; k < d->nseg; k++)
		fprintf(stderr, "    seg %u: off %u len %u%s%s\n", k, d->seg[k].off, d->seg[k].len,
			d->seg[k].before ? " before" : "", d->seg[k].bad_lkey ? " bad-lkey" : "");
}

/* One data operation: the target prepares, the initiator posts and checks, the target
 * checks; a fence SEND where UC/UD give no other proof; teardown after an error. */
static void run_dop(struct rng *r, int ini, struct dop *d)
{
	int tgt = 1 - ini;
	unsigned char old[MSG_DATA];
	uint32_t olen;

	if (rone(r, 15) && D.ci[tgt].max_recv_sge + 1 <= MAX_SEG + 4)
		d->bad_recv_post = 1;
	describe(d, ini);
	run_dop_part(tgt, M_PREP, d, NULL, 0);
	olen = R_.dlen;
	memcpy(old, R_.data, olen);
	if (d->opcode == IBV_WR_ATOMIC_CMP_AND_SWP && olen == 8 && rone(r, 2))
		d->cmp = load64(old); /* the compare matches: the swap happens */
	run_dop_part(ini, M_INIT, d, old, olen);
	run_dop_part(tgt, M_CHECK, d, NULL, 0);
	D.data_ops++;
	D.errors_expected += d->wc_status > 0 || d->recv_status > 0;
	D.posts_refused += d->post_rc != 0;
	if (d->fence && !d->broken) {
		struct dop f;
		const struct cinfo *ti = &D.ci[tgt];
		uint32_t need = 8 + (ti->type == IBV_QPT_UD ? GRH_LEN : 0);

		memset(&f, 0, sizeof(f));
		f.id = d->id | 1;
		f.opcode = IBV_WR_SEND;
		f.len = 8;
		f.nseg = f.post_nsge = 1;
		f.seg[0] = (struct seg){ .off = rbelow(r, D.ci[ini].len - 8 + 1), .len = 8 };
		f.recv = 1;
		f.rnseg = 1;
		f.rseg[0] = (struct seg){ .off = rbelow(r, ti->len - need + 1), .len = need };
		f.wc_status = IBV_WC_SUCCESS;
		f.recv_status = IBV_WC_SUCCESS;
		f.wc_alt = -1;
		f.async_t = -1;
		f.lands = 1;
		run_dop_part(tgt, M_PREP, &f, NULL, 0);
		run_dop_part(ini, M_INIT, &f, NULL, 0);
		run_dop_part(tgt, M_CHECK, &f, NULL, 0);
	}
	if (d->broken)
		conn_both_down(ini == 0 ? d->i_state : d->t_state, ini == 1 ? d->i_state : d->t_state);
}

static void handle(const struct msg *m, struct msg *reply)
{
	reply->type = M_OK;
	reply->dlen = 0;
	switch (m->type) {
	case M_LOCAL:
		local_steps(m->arg, (int)m->arg2);
		break;
	case M_CONN_NEW:
		conn_new((enum ibv_qp_type)m->arg, m->arg2, &reply->ci);
		break;
	case M_CONN_GO:
		conn_go(&m->ci);
		break;
	case M_CONN_DOWN:
		conn_down((int)(int64_t)m->arg);
		break;
	case M_PREP:
		reply->dlen = do_prep(&m->d, reply->data);
		break;
	case M_INIT:
		do_init(&m->d, m->data);
		break;
	case M_CHECK:
		do_check(&m->d);
		break;
	case M_END:
		conn_down(-1);
		pools_free();
		break;
	default:
		fail("unknown message %u", m->type);
	}
}

static void open_device(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list || n < 1)
		fail("ibv_get_device_list: no device (errno %d)", errno);
	S_.ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!S_.ctx)
		fail("ibv_open_device: errno %d", errno);
	if (ibv_query_device(S_.ctx, &S_.dev) || ibv_query_port(S_.ctx, 1, &S_.port) ||
	    ibv_query_gid(S_.ctx, 1, 0, &S_.gid))
		fail("ibv_query_device/port/gid failed");
	S_.gid_index = 0;
	S_.pd = ibv_alloc_pd(S_.ctx);
	S_.scq = ibv_create_cq(S_.ctx, 256, NULL, NULL, 0);
	S_.rcq = ibv_create_cq(S_.ctx, 256, NULL, NULL, 0);
	if (!S_.pd || !S_.scq || !S_.rcq)
		fail("the data PD/CQs: errno %d", errno);
}

static void close_device(void)
{
	expect_empty(S_.scq, "at the end, send CQ");
	expect_empty(S_.rcq, "at the end, receive CQ");
	drain_async(-1, "at the end");
	CHECK(ibv_destroy_cq(S_.scq) == 0 && ibv_destroy_cq(S_.rcq) == 0 &&
		      ibv_dealloc_pd(S_.pd) == 0 && ibv_close_device(S_.ctx) == 0,
	      "destroying the data CQs, PD, closing the device");
}

static void child_main(void)
{
	struct msg *m = malloc(sizeof(*m)), *reply = malloc(sizeof(*reply));

	if (!m || !reply)
		fail("malloc");
	open_device();
	for (;;) {
		msg_recv(m, MSG_WAIT_MS);
		S_.op = m->op;
		memset(reply, 0, offsetof(struct msg, data));
		handle(m, reply);
		msg_send(reply);
		if (m->type == M_END)
			break;
	}
	close_device();
	_exit(0);
}

/* A crash (known defect 11 is one) still names the seed and the operation. */
static void on_crash(int sig)
{
	char buf[160], num[24];
	size_t n = 0;
	const char *parts[] = { "random_verbs: FAIL seed 0x", NULL, " op ", NULL, S_.role ? " (child)" :
				" (parent)", ": killed by a signal\n" };
	uint64_t v[2] = { S_.seed, S_.op };

	for (int i = 0; i < 6; i++) {
		const char *p = parts[i];

		if (!p) {
			uint64_t x = v[i / 2];
			int len = 0;

			do {
				num[len++] = "0123456789abcdef"[i == 1 ? x % 16 : x % 10];
				x = i == 1 ? x / 16 : x / 10;
			} while (x);
			while (len && n < sizeof(buf))
				buf[n++] = num[--len];
			continue;
		}
		while (*p && n < sizeof(buf))
			buf[n++] = *p++;
	}
	if (write(2, buf, n) < 0)
		_exit(3);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void on_alarm(int sig)
{
	static const char msg[] = "random_verbs: FAIL: the run overran its time bound (hung?)\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(2);
}

static void usage(void)
{
	fprintf(stderr, "usage: random_verbs [--seed S] [--ops N] [--seconds T] [--known-defects] "
			"[--verbose]\n"
			"  --seed S         the seed (default: from the clock; printed)\n"
			"  --ops N          at most N operations (default 1000000)\n"
			"  --seconds T      at most T seconds of operations (default 10)\n"
			"  --known-defects  also the cases of softverbs defects being fixed\n"
			"  --verbose        print every data operation\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct timespec ts;
	bool seeded = false;
	long long start, end;
	struct rng r;
	pid_t child;
	int sv[2], status = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			O.seed = strtoull(argv[++i], NULL, 0);
			seeded = true;
		} else if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
			O.ops = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			O.seconds = strtod(argv[++i], NULL);
		} else if (!strcmp(argv[i], "--known-defects")) {
			O.known = true;
		} else if (!strcmp(argv[i], "--verbose")) {
			O.verbose = S_.verbose = true;
		} else {
			usage();
		}
	}
	if (!seeded) {
		uint64_t x;

		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
		O.seed = splitmix64(&x);
	}
	S_.seed = O.seed;
	printf("random_verbs: seed 0x%016" PRIx64 "%s (replay: --seed 0x%016" PRIx64 " --ops N%s)\n",
	       O.seed, seeded ? "" : " from the clock", O.seed, O.known ? " --known-defects" : "");
	fflush(stdout);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		fail("socketpair: %s", strerror(errno));
	{
		pid_t parent = getpid();

		child = child_pid = fork();
		if (child < 0)
			fail("fork: %s", strerror(errno));
		if (child == 0) {
			/* Dies with the parent, whatever ends it. */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
				_exit(1);
			close(sv[0]);
			S_.role = 1;
			S_.fd = sv[1];
			signal(SIGALRM, on_alarm);
			signal(SIGSEGV, on_crash);
			signal(SIGBUS, on_crash);
			alarm((unsigned int)O.seconds + 120);
			child_main();
		}
	}
	close(sv[1]);
	S_.fd = sv[0];
	signal(SIGALRM, on_alarm);
	signal(SIGSEGV, on_crash);
	signal(SIGBUS, on_crash);
	alarm((unsigned int)O.seconds + 120);
	open_device();
	rng_init(&r, O.seed);
	start = now_ms();
	end = start + (long long)(O.seconds * 1000);
	for (S_.op = 1; S_.op <= O.ops && now_ms() < end; S_.op++) {
		if (rbelow(&r, 10) < 3) {
			int who = (int)rbelow(&r, 2);
			uint64_t sub = rnext(&r);
			uint64_t n = 1 + rbelow(&r, 4);

			run_simple(who, M_LOCAL, sub, n);
			D.local_steps++;
			continue;
		}
		if (!D.up) {
			conn_both_up(&r);
			continue;
		}
		if (rone(&r, 60)) {
			conn_both_down(IBV_QPS_RTS, IBV_QPS_RTS);
			continue;
		}
		{
			int ini = (int)rbelow(&r, 2);
			struct dop d;

			gen_dop(&r, &D.ci[ini], &D.ci[1 - ini], &d, S_.op << 2);
			run_dop(&r, ini, &d);
		}
	}
	S_.op--;
	run_simple(0, M_END, 0, 0);
	run_simple(1, M_END, 0, 0);
	close_device();
	/* The child's exit, within a bound. */
	for (long long until = now_ms() + WAIT_MS;;) {
		pid_t w = waitpid(child, &status, WNOHANG);

		if (w == child)
			break;
		if (now_ms() > until)
			fail("the child did not exit within %d ms", WAIT_MS);
		usleep(1000);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail("the child ended with status 0x%x", status);
	printf("random_verbs: seed 0x%016" PRIx64 " ops %" PRIu64 " ok (%" PRIu64 " data ops, %" PRIu64
	       " with an expected error, %" PRIu64 " refused posts, %" PRIu64 " connections, %" PRIu64
	       " local steps, %.1f s)\n", O.seed, S_.op, D.data_ops, D.errors_expected,
	       D.posts_refused, D.conns, D.local_steps, (double)(now_ms() - start) / 1000.0);
	return 0;
}
