#include "verbs/sv_test_peer.h"

#include <softverbs/softverbs.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- endpoint ------------------------------------------------------------------------ */

static void posted_forget(struct ibv_cq *cq);

void tp_ep_open(struct tp_ep *ep, size_t len, int mr_access)
{
	memset(ep, 0, sizeof(*ep));
	ep->res = tu_res_open();
	assert_non_null(ep->res);
	ep->ch = ibv_create_comp_channel(ep->res->ctx);
	assert_non_null(ep->ch);
	ep->scq = ibv_create_cq(ep->res->ctx, 4096, NULL, ep->ch, 0);
	ep->rcq = ibv_create_cq(ep->res->ctx, 4096, NULL, ep->ch, 0);
	assert_non_null(ep->scq);
	assert_non_null(ep->rcq);
	ep->buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(ep->buf != MAP_FAILED);
	ep->len = len;
	ep->mr = ibv_reg_mr(ep->res->pd, ep->buf, len, mr_access ? mr_access : TP_ACCESS_ALL);
	if (!ep->mr)
		fail_msg("ibv_reg_mr of %zu bytes, access 0x%x: errno %d", len, mr_access, errno);
}

char tp_close_why[512];

/* Appends to tp_close_why (what tp_ep_close found wrong). */
static void close_why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void close_why(const char *fmt, ...)
{
	size_t at = strlen(tp_close_why);
	va_list ap;

	if (at + 3 >= sizeof(tp_close_why))
		return;
	if (at)
		at += (size_t)snprintf(tp_close_why + at, sizeof(tp_close_why) - at, "; ");
	va_start(ap, fmt);
	vsnprintf(tp_close_why + at, sizeof(tp_close_why) - at, fmt, ap);
	va_end(ap);
}

bool tp_copy_mode_wrong(struct ibv_qp *qp, char *why, size_t len)
{
	const char *mode = getenv("SOFTVERBS_SHM_COPY");
	struct softverbs_qp_stats st;

	if (!mode || softverbs_query_qp_stats(qp, &st, sizeof(st)))
		return false;
	if (!strcmp(mode, "bounce") &&
	    (st.copy == SOFTVERBS_COPY_CMA || st.tx_cma_bytes || st.rx_cma_bytes)) {
		snprintf(why, len, "QP %u: SOFTVERBS_SHM_COPY=bounce, yet it copied %llu bytes "
			 "by process_vm_* (copy mode %u)", qp->qp_num,
			 (unsigned long long)(st.tx_cma_bytes + st.rx_cma_bytes), st.copy);
		return true;
	}
	if (!strcmp(mode, "cma") && st.copy == SOFTVERBS_COPY_BOUNCE) {
		snprintf(why, len, "QP %u: SOFTVERBS_SHM_COPY=cma, yet its copy mode is bounce",
			 qp->qp_num);
		return true;
	}
	return false;
}

int tp_ep_close(struct tp_ep *ep)
{
	char why[256];
	int rc = 0;

	tp_close_why[0] = 0;
	if (!ep->res)
		return 0;
	/* What the test left: every completion it caused, it polled. */
	if (ep->scq && tu_cq_leftover(ep->scq, why, sizeof(why))) {
		close_why("send CQ: %s", why);
		rc = -1;
	}
	if (ep->rcq && tu_cq_leftover(ep->rcq, why, sizeof(why))) {
		close_why("receive CQ: %s", why);
		rc = -1;
	}
	/* And every async event it caused, it waited for (before the QPs go: destroying an
	 * object drops the events about it). */
	if (tu_async_leftover(ep->res->ctx, why, sizeof(why))) {
		close_why("%s", why);
		rc = -1;
	}
	/* And the copy mode the run asked for is the one its QPs took. */
	for (int i = 0; i < ep->nqp; i++)
		if (ep->qp[i] && tp_copy_mode_wrong(ep->qp[i], why, sizeof(why))) {
			close_why("%s", why);
			rc = -1;
		}
	for (int i = ep->nqp - 1; i >= 0; i--)
		if (ep->qp[i] && ibv_destroy_qp(ep->qp[i])) {
			close_why("ibv_destroy_qp: errno %d", errno);
			rc = -1;
		}
	ep->nqp = 0;
	for (int i = ep->nah - 1; i >= 0; i--)
		if (ibv_destroy_ah(ep->ah[i])) {
			close_why("ibv_destroy_ah: errno %d", errno);
			rc = -1;
		}
	ep->nah = 0;
	if (ep->srq && ibv_destroy_srq(ep->srq)) {
		close_why("ibv_destroy_srq: errno %d", errno);
		rc = -1;
	}
	if (ep->mr && ibv_dereg_mr(ep->mr)) {
		close_why("ibv_dereg_mr: errno %d", errno);
		rc = -1;
	}
	if (ep->buf)
		munmap(ep->buf, ep->len);
	if (ep->scq) {
		posted_forget(ep->scq);
		if (ibv_destroy_cq(ep->scq)) {
			close_why("ibv_destroy_cq (send): errno %d", errno);
			rc = -1;
		}
	}
	if (ep->rcq) {
		posted_forget(ep->rcq);
		if (ibv_destroy_cq(ep->rcq)) {
			close_why("ibv_destroy_cq (receive): errno %d", errno);
			rc = -1;
		}
	}
	if (ep->ch && ibv_destroy_comp_channel(ep->ch)) {
		close_why("ibv_destroy_comp_channel: errno %d", errno);
		rc = -1;
	}
	if (tu_res_close(ep->res)) {
		close_why("tu_res_close failed (see above)");
		rc = -1;
	}
	if (rc)
		fprintf(stderr, "tp_ep_close (pid %d): %s\n", (int)getpid(), tp_close_why);
	memset(ep, 0, sizeof(*ep));
	return rc;
}

int tp_ep_create_qp(struct tp_ep *ep, const struct tp_qp_opts *o)
{
	struct ibv_qp_init_attr a = {
		.send_cq = ep->scq,
		.recv_cq = ep->rcq,
		.srq = o->use_srq ? ep->srq : NULL,
		.cap = { .max_send_wr = o->max_wr ? o->max_wr : 64,
			 .max_recv_wr = o->use_srq ? 0 : (o->max_wr ? o->max_wr : 64),
			 .max_send_sge = o->max_sge ? o->max_sge : 4,
			 .max_recv_sge = o->use_srq ? 0 : (o->max_sge ? o->max_sge : 4),
			 .max_inline_data = o->max_inline ? o->max_inline : 256 },
		.qp_type = (enum ibv_qp_type)o->type,
		.sq_sig_all = (int)o->sig_all,
	};
	struct ibv_qp *qp;

	assert_true(ep->nqp < TP_MAX_QPS);
	assert_true(!o->use_srq || ep->srq);
	qp = ibv_create_qp(ep->res->pd, &a);
	if (!qp)
		fail_msg("ibv_create_qp(%s): errno %d", tu_qp_type_str(a.qp_type), errno);
	ep->qp[ep->nqp] = qp;
	return ep->nqp++;
}

void tp_ep_create_srq(struct tp_ep *ep, uint32_t max_wr, uint32_t max_sge)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = max_wr, .max_sge = max_sge } };

	assert_null(ep->srq);
	ep->srq = ibv_create_srq(ep->res->pd, &a);
	if (!ep->srq)
		fail_msg("ibv_create_srq: errno %d", errno);
}

void tp_ep_info(const struct tp_ep *ep, int qp, struct tp_info *info)
{
	memset(info, 0, sizeof(*info));
	info->qpn = ep->qp[qp]->qp_num;
	info->psn = (info->qpn * 2654435761u >> 8) & 0xffffff;
	info->lid = ep->res->port.lid;
	info->gid = ep->res->gid;
	info->addr = (uintptr_t)ep->buf;
	info->len = ep->len;
	info->rkey = ep->mr ? ep->mr->rkey : 0;
}

void tp_conn(const struct tp_ep *ep, const struct tp_info *self, const struct tp_info *peer,
	     struct tu_conn *c)
{
	tu_conn_init(c, ep->res, peer->qpn);
	c->sq_psn = self->psn;
	c->rq_psn = peer->psn;
	c->ah.grh.dgid = peer->gid;
	c->ah.dlid = peer->lid;
	c->access = TP_QP_ACCESS_ALL;
	c->max_rd_atomic = 16;
	c->max_dest_rd_atomic = 16;
	c->min_rnr_timer = 1;
}

static struct ibv_ah *ep_ah(struct tp_ep *ep, const struct ibv_ah_attr *want)
{
	struct ibv_ah_attr a;

	for (int i = 0; i < ep->nah; i++) {
		const struct ibv_ah_attr *h = &ep->ah_attr[i];

		if (h->is_global == want->is_global && h->dlid == want->dlid &&
		    h->port_num == want->port_num && h->grh.sgid_index == want->grh.sgid_index &&
		    !memcmp(&h->grh.dgid, &want->grh.dgid, sizeof(h->grh.dgid)))
			return ep->ah[i];
	}
	assert_true(ep->nah < TP_MAX_AH);
	a = *want;
	ep->ah[ep->nah] = ibv_create_ah(ep->res->pd, &a);
	if (!ep->ah[ep->nah])
		fail_msg("ibv_create_ah (is_global %d, dlid %u): errno %d", a.is_global, a.dlid, errno);
	ep->ah_attr[ep->nah] = a;
	return ep->ah[ep->nah++];
}

/* ---- what was posted, to check its completion against ----------------------------- */

/*
 * Every WR posted through tp_ep_post_send/tp_ep_post_recv, per CQ it completes on, in a
 * ring (the oldest are forgotten once it is full: their completions get the checks that
 * need no WR). Threads of one test post at once: a lock.
 */
#define POSTED_MAX 4096
struct posted {
	struct ibv_cq *cq; /* NULL: free */
	uint64_t wr_id;
	uint32_t qpn; /* 0: an SRQ's receive (any QP on it) */
	uint32_t qp_type;
	bool recv;
	uint32_t opcode; /* enum ibv_wr_opcode */
	uint64_t len;    /* the SGEs' total: bytes sent, read, or room to receive */
};
static struct posted posted_wr[POSTED_MAX];
static unsigned int posted_head;
static pthread_mutex_t posted_lock = PTHREAD_MUTEX_INITIALIZER;

static void posted_add(struct ibv_cq *cq, uint64_t wr_id, const struct ibv_qp *qp, bool recv,
		       uint32_t opcode, uint64_t len)
{
	pthread_mutex_lock(&posted_lock);
	posted_wr[posted_head++ % POSTED_MAX] = (struct posted){
		.cq = cq, .wr_id = wr_id, .qpn = qp ? qp->qp_num : 0,
		.qp_type = qp ? qp->qp_type : 0, .recv = recv, .opcode = opcode, .len = len,
	};
	pthread_mutex_unlock(&posted_lock);
}

/*
 * Takes the newest record of @wr_id on @cq, preferring one of QP @qpn, into *out: false if
 * there is none. The newest, not the oldest: a test that polls some completions itself
 * (ibv_poll_cq, tu_poll) or posts unsignaled WRs leaves records behind that no completion
 * takes, and a wr_id is reused far more often after its completion than while it is
 * still outstanding.
 */
static bool posted_take(struct ibv_cq *cq, uint64_t wr_id, uint32_t qpn, struct posted *out)
{
	struct posted *found = NULL;

	pthread_mutex_lock(&posted_lock);
	for (unsigned int i = posted_head; i != posted_head - POSTED_MAX; i--) {
		struct posted *r = &posted_wr[(i - 1) % POSTED_MAX];

		if (r->cq == cq && r->wr_id == wr_id) {
			if (r->qpn == qpn || !r->qpn) {
				found = r;
				break;
			}
			if (!found)
				found = r;
		}
	}
	if (found) {
		*out = *found;
		found->cq = NULL;
	}
	pthread_mutex_unlock(&posted_lock);
	return found != NULL;
}

/* Forgets every record of @cq (being destroyed: its address may come back). */
static void posted_forget(struct ibv_cq *cq)
{
	pthread_mutex_lock(&posted_lock);
	for (unsigned int i = 0; i < POSTED_MAX; i++)
		if (posted_wr[i].cq == cq)
			posted_wr[i].cq = NULL;
	pthread_mutex_unlock(&posted_lock);
}

static enum ibv_wc_opcode wc_opcode_of(uint32_t wr_opcode)
{
	switch (wr_opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_WRITE: return IBV_WC_ATOMIC_WRITE;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
	case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
	case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
	default: return IBV_WC_SEND; /* SEND, SEND_WITH_IMM, SEND_WITH_INV */
	}
}

static const char *wc_opcode_str(int op)
{
	static __thread char other[24];

	switch (op) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_BIND_MW: return "BIND_MW";
	case IBV_WC_LOCAL_INV: return "LOCAL_INV";
	case IBV_WC_ATOMIC_WRITE: return "ATOMIC_WRITE";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default:
		snprintf(other, sizeof(other), "opcode %d", op);
		return other;
	}
}

struct tp_wc_expect tp_send_expect(uint64_t wr_id, uint32_t qpn, enum ibv_wc_opcode opcode,
				   uint32_t byte_len)
{
	struct tp_wc_expect e = { .wr_id = wr_id, .status = IBV_WC_SUCCESS, .check = TP_WCE_SEND,
				  .qp_num = qpn, .opcode = opcode };

	if (opcode == IBV_WC_RDMA_READ || opcode == IBV_WC_COMP_SWAP ||
	    opcode == IBV_WC_FETCH_ADD) {
		e.check |= TP_WCE_BYTE_LEN;
		e.byte_len = opcode == IBV_WC_RDMA_READ ? byte_len : 8;
	}
	return e;
}

struct tp_wc_expect tp_recv_expect(uint64_t wr_id, const struct tp_info *to,
				   const struct tp_info *from, enum ibv_wc_opcode opcode,
				   uint32_t byte_len)
{
	return (struct tp_wc_expect){ .wr_id = wr_id, .status = IBV_WC_SUCCESS,
				      .check = TP_WCE_RECV, .qp_num = to->qpn, .opcode = opcode,
				      .byte_len = byte_len, .src_qp = from->qpn,
				      .slid = from->lid };
}

bool tp_wc_mismatch(const struct ibv_wc *wc, const struct tp_wc_expect *e, char *msg,
		    size_t len)
{
	const char *field = NULL;
	long long got = 0, want = 0;
	bool ok = wc->status == IBV_WC_SUCCESS;
	unsigned int c = e->check, flags_fixed = ~e->wc_flags_any;

#define WCE(cond, f, w)                                                                     \
	if (!field && (cond) && (long long)(wc->f) != (long long)(w)) {                     \
		field = #f;                                                                 \
		got = (long long)(wc->f);                                                   \
		want = (long long)(w);                                                      \
	}
	WCE(true, wr_id, e->wr_id);
	WCE(true, status, e->status);
	WCE(c & TP_WCE_QPN, qp_num, e->qp_num);
	WCE(true, vendor_err, 0);
	WCE(ok && (c & TP_WCE_OPCODE), opcode, e->opcode);
	WCE(ok && (c & TP_WCE_BYTE_LEN), byte_len, e->byte_len);
	if (!field && ok && !(c & TP_WCE_BYTE_LEN) && e->byte_len_max &&
	    wc->byte_len > e->byte_len_max) {
		field = "byte_len (at most the room posted)";
		got = wc->byte_len;
		want = e->byte_len_max;
	}
	if (!field && ok && (c & TP_WCE_FLAGS) &&
	    (wc->wc_flags & flags_fixed) != (e->wc_flags & flags_fixed)) {
		field = e->wc_flags_any ? "wc_flags (bits other than those the WR leaves open)" :
					 "wc_flags";
		got = wc->wc_flags & flags_fixed;
		want = e->wc_flags & flags_fixed;
	}
	WCE(ok && (c & TP_WCE_FLAGS) && (wc->wc_flags & e->wc_flags & IBV_WC_WITH_IMM), imm_data,
	    e->imm_data);
	WCE(ok && (c & TP_WCE_FLAGS) && (wc->wc_flags & e->wc_flags & IBV_WC_WITH_INV),
	    invalidated_rkey, e->imm_data);
	WCE(ok && (c & TP_WCE_SOURCE), src_qp, e->src_qp);
	WCE(ok && (c & TP_WCE_SOURCE), slid, e->slid);
	WCE(ok && (c & TP_WCE_SOURCE), sl, e->sl);
	WCE(ok && (c & TP_WCE_SOURCE), dlid_path_bits, e->dlid_path_bits);
	WCE(ok && (c & TP_WCE_PKEY), pkey_index, e->pkey_index);
#undef WCE
	if (!field)
		return false;
	snprintf(msg, len, "completion wr_id %llu (%s, %s): %s is %lld (0x%llx), expected %lld "
		 "(0x%llx)",
		 (unsigned long long)wc->wr_id, ibv_wc_status_str(wc->status),
		 ok ? wc_opcode_str(wc->opcode) : "opcode undefined", field, got,
		 (unsigned long long)got, want, (unsigned long long)want);
	return true;
}

void tp_check_wc(const struct ibv_wc *wc, const struct tp_wc_expect *e, const char *what)
{
	char m[256];

	if (tp_wc_mismatch(wc, e, m, sizeof(m)))
		fail_msg("%s: %s", what, m);
}

bool tp_posted_mismatch(struct ibv_cq *cq, const struct ibv_wc *wc, char *msg, size_t len)
{
	struct posted r;
	struct tp_wc_expect e = { .wr_id = wc->wr_id, .status = wc->status };

	if (!posted_take(cq, wc->wr_id, wc->qp_num, &r)) {
		/* Not posted through us: what holds for any completion. */
		if (wc->status == IBV_WC_SUCCESS && (wc->opcode & IBV_WC_RECV)) {
			e.check = TP_WCE_FLAGS;
			e.wc_flags_any = IBV_WC_GRH | IBV_WC_WITH_IMM | IBV_WC_WITH_INV;
			e.wc_flags = wc->wc_flags & e.wc_flags_any;
			e.imm_data = wc->imm_data;
		} else if (wc->status == IBV_WC_SUCCESS) {
			e.check = TP_WCE_FLAGS;
		}
		return tp_wc_mismatch(wc, &e, msg, len);
	}
	e.qp_num = r.qpn;
	if (!r.recv) {
		e = tp_send_expect(wc->wr_id, r.qpn, wc_opcode_of(r.opcode), (uint32_t)r.len);
		e.status = wc->status;
		return tp_wc_mismatch(wc, &e, msg, len);
	}
	/* A receive: what the WR and the QP's type fix. */
	e.check = (r.qpn ? TP_WCE_QPN : 0) | TP_WCE_FLAGS;
	e.wc_flags_any = IBV_WC_WITH_IMM | IBV_WC_WITH_INV;
	if (r.qp_type == IBV_QPT_UD)
		e.wc_flags_any |= IBV_WC_GRH;
	e.wc_flags = wc->wc_flags & e.wc_flags_any;
	e.imm_data = wc->imm_data;
	e.byte_len_max = (uint32_t)r.len;
	if (wc->status == IBV_WC_SUCCESS) {
		if (wc->opcode != IBV_WC_RECV && wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
			snprintf(msg, len, "completion wr_id %llu on a receive queue: opcode is %s, "
				 "expected RECV or RECV_RDMA_WITH_IMM",
				 (unsigned long long)wc->wr_id, wc_opcode_str(wc->opcode));
			return true;
		}
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && !(wc->wc_flags & IBV_WC_WITH_IMM)) {
			snprintf(msg, len, "completion wr_id %llu: RECV_RDMA_WITH_IMM without "
				 "IBV_WC_WITH_IMM in wc_flags 0x%x",
				 (unsigned long long)wc->wr_id, wc->wc_flags);
			return true;
		}
		/* RDMA WRITE with immediate consumes a receive but fills none of it. */
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
			e.byte_len_max = 0;
	}
	return tp_wc_mismatch(wc, &e, msg, len);
}

int tp_ep_post_send(struct tp_ep *ep, int qp, const struct tp_wr *w, int n, int *bad)
{
	struct ibv_send_wr *wr = calloc((size_t)n, sizeof(*wr)), *bad_wr = NULL;
	struct ibv_sge *sge = calloc((size_t)n * TP_MAX_SGE, sizeof(*sge));
	uint32_t lkey = ep->mr ? ep->mr->lkey : 0;
	int rc;

	assert_non_null(wr);
	assert_non_null(sge);
	for (int i = 0; i < n; i++) {
		assert_true(w[i].nsge <= TP_MAX_SGE);
		for (uint32_t k = 0; k < w[i].nsge; k++) {
			sge[i * TP_MAX_SGE + k].addr = (uintptr_t)(ep->buf + w[i].sge[k].off);
			sge[i * TP_MAX_SGE + k].length = w[i].sge[k].len;
			sge[i * TP_MAX_SGE + k].lkey = lkey ^ w[i].lkey_xor;
		}
		wr[i].wr_id = w[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = w[i].nsge ? &sge[i * TP_MAX_SGE] : NULL;
		wr[i].num_sge = (int)w[i].nsge;
		wr[i].opcode = (enum ibv_wr_opcode)w[i].opcode;
		wr[i].send_flags = w[i].send_flags;
		wr[i].imm_data = w[i].imm;
		wr[i].qp_type.xrc.remote_srqn = w[i].xrc_srqn;
		if (ep->qp[qp]->qp_type == IBV_QPT_UD) {
			wr[i].wr.ud.ah = ep_ah(ep, &w[i].ah);
			wr[i].wr.ud.remote_qpn = w[i].remote_qpn;
			wr[i].wr.ud.remote_qkey = w[i].remote_qkey;
		} else if (w[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   w[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			wr[i].wr.atomic.remote_addr = w[i].remote_addr;
			wr[i].wr.atomic.rkey = w[i].rkey;
			wr[i].wr.atomic.compare_add = w[i].compare_add;
			wr[i].wr.atomic.swap = w[i].swap;
		} else {
			wr[i].wr.rdma.remote_addr = w[i].remote_addr;
			wr[i].wr.rdma.rkey = w[i].rkey;
		}
	}
	rc = ibv_post_send(ep->qp[qp], wr, &bad_wr);
	if (bad)
		*bad = rc && bad_wr ? (int)(bad_wr - wr) : n;
	for (int i = 0; i < (rc && bad_wr ? (int)(bad_wr - wr) : rc ? 0 : n); i++) {
		uint64_t total = 0;

		for (uint32_t k = 0; k < w[i].nsge; k++)
			total += w[i].sge[k].len;
		/* Unsignaled WRs complete too when they fail or are flushed. */
		posted_add(ep->qp[qp]->send_cq, w[i].wr_id, ep->qp[qp], false, w[i].opcode, total);
	}
	free(sge);
	free(wr);
	return rc;
}

int tp_ep_post_recv(struct tp_ep *ep, int qp, uint64_t wr_id, const struct tp_sge *s, int nsge)
{
	struct ibv_sge sge[TP_MAX_SGE];
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = nsge }, *bad;
	int rc;

	assert_true(nsge <= TP_MAX_SGE);
	for (int k = 0; k < nsge; k++) {
		sge[k].addr = (uintptr_t)(ep->buf + s[k].off);
		sge[k].length = s[k].len;
		sge[k].lkey = ep->mr ? ep->mr->lkey : 0;
	}
	if (!nsge)
		wr.sg_list = NULL;
	rc = qp < 0 ? ibv_post_srq_recv(ep->srq, &wr, &bad) : ibv_post_recv(ep->qp[qp], &wr, &bad);
	if (!rc) {
		uint64_t room = 0;

		for (int k = 0; k < nsge; k++)
			room += s[k].len;
		posted_add(qp < 0 ? ep->rcq : ep->qp[qp]->recv_cq, wr_id, qp < 0 ? NULL : ep->qp[qp],
			   true, 0, room);
	}
	return rc;
}

/* ---- patterns and waits --------------------------------------------------------------- */

unsigned char tp_pattern(size_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)i * 0x9e3779b1u + seed * 0x85ebca77u + 0x165667b1u;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return (unsigned char)(x ^ (x >> 8) ^ (x >> 16) ^ (x >> 24));
}

void tp_fill(void *buf, size_t len, uint32_t seed, size_t start)
{
	unsigned char *b = buf;

	for (size_t i = 0; i < len; i++)
		b[i] = tp_pattern(start + i, seed);
}

long tp_mismatch(const void *buf, size_t len, uint32_t seed, size_t start)
{
	const unsigned char *b = buf;

	for (size_t i = 0; i < len; i++)
		if (b[i] != tp_pattern(start + i, seed))
			return (long)i;
	return -1;
}

void tp_assert_pattern(const void *buf, size_t len, uint32_t seed, size_t start,
		       const char *what)
{
	long at = tp_mismatch(buf, len, seed, start);

	if (at >= 0)
		fail_msg("%s: byte %ld of %zu is 0x%02x, expected 0x%02x", what, at, len,
			 ((const unsigned char *)buf)[at], tp_pattern(start + (size_t)at, seed));
}

void tp_expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status, int timeout_ms,
		  struct ibv_wc *out)
{
	struct ibv_wc wc;
	char m[256];

	memset(&wc, 0, sizeof(wc));
	if (tu_poll(cq, 1, &wc, timeout_ms) != 1)
		fail_msg("no completion within %d ms (expected wr_id %llu, %s)", timeout_ms,
			 (unsigned long long)wr_id, ibv_wc_status_str(status));
	if (wc.wr_id != wr_id || wc.status != status)
		fail_msg("completion wr_id %llu status %s (vendor_err %u), expected wr_id %llu "
			 "status %s",
			 (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.vendor_err,
			 (unsigned long long)wr_id, ibv_wc_status_str(status));
	if (tp_posted_mismatch(cq, &wc, m, sizeof(m)))
		fail_msg("%s", m);
	if (out)
		*out = wc;
}

void tp_expect_wc_full(struct ibv_cq *cq, const struct tp_wc_expect *e, int timeout_ms,
		       const char *what, struct ibv_wc *out)
{
	struct ibv_wc wc;

	tp_expect_wc(cq, e->wr_id, e->status, timeout_ms, &wc);
	tp_check_wc(&wc, e, what);
	if (out)
		*out = wc;
}

void tp_poll_exact(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms, const char *what)
{
	struct ibv_wc extra;
	char m[256];
	int got = tu_poll(cq, n, wc, timeout_ms);

	if (got != n)
		fail_msg("%s: %d of %d completions within %d ms", what, got, n, timeout_ms);
	for (int i = 0; i < n; i++)
		if (tp_posted_mismatch(cq, &wc[i], m, sizeof(m)))
			fail_msg("%s: completion %d of %d: %s", what, i + 1, n, m);
	if (ibv_poll_cq(cq, 1, &extra) != 0)
		fail_msg("%s: a completion beyond the %d expected: wr_id %llu status %s opcode %s",
			 what, n, (unsigned long long)extra.wr_id, ibv_wc_status_str(extra.status),
			 wc_opcode_str(extra.opcode));
}

void tp_expect_no_wc(struct ibv_cq *cq, int ms, const char *why)
{
	struct ibv_wc wc;

	if (tu_poll(cq, 1, &wc, ms) != 0)
		fail_msg("%s: unexpected completion wr_id %llu status %s opcode %d",
			 why, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode);
}

bool tp_wait_state(struct ibv_qp *qp, enum ibv_qp_state state, int timeout_ms)
{
	long long end = tu_now_ms() + timeout_ms;

	for (;;) {
		if (tu_query_state(qp) == state)
			return true;
		if (tu_now_ms() > end)
			return false;
		sched_yield();
	}
}

/* The next async event within @timeout_ms: 1 if it is @type (about @qp, or @srq, if not
 * NULL), 0 if none came, -1 and @msg if another came. */
static int wait_async(struct ibv_context *ctx, enum ibv_event_type type, struct ibv_qp *qp,
		      struct ibv_srq *srq, int timeout_ms, struct ibv_async_event *out,
		      char *msg, size_t len)
{
	struct ibv_async_event ev;
	char d[128];

	if (!tu_next_async(ctx, timeout_ms, &ev, d, sizeof(d)))
		return 0;
	if (ev.event_type != type || (qp && ev.element.qp != qp) ||
	    (srq && ev.element.srq != srq)) {
		snprintf(msg, len, "waiting for %s: unexpected async event %s",
			 ibv_event_type_str(type), d);
		return -1;
	}
	if (out)
		*out = ev;
	return 1;
}

bool tp_wait_async(struct ibv_context *ctx, enum ibv_event_type type, int timeout_ms,
		   struct ibv_async_event *out)
{
	char m[200];
	int r = wait_async(ctx, type, NULL, NULL, timeout_ms, out, m, sizeof(m));

	if (r < 0)
		fail_msg("%s", m);
	return r > 0;
}

bool tp_fd_ready(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

/* ---- the wire between parent and agent ----------------------------------------------- */

#define TP_MAX_CHAIN 8

struct tp_req {
	uint32_t op;
	int32_t qp;
	uint64_t a, b, c, d, e;
	int32_t n;
	struct tp_qp_opts qpo;
	struct tu_conn conn;
	struct tp_sge sge[TP_MAX_SGE];
	struct tp_wr wr[TP_MAX_CHAIN];
	uint8_t data[TP_PEEK_MAX];
};

struct tp_rep {
	uint32_t op;
	int32_t rc;
	int64_t v;
	int32_t n;
	struct tp_info info;
	struct ibv_wc wc[TP_MAX_WC];
	uint8_t data[TP_PEEK_MAX];
	char msg[200];
};

/* The agent: where parent and child meet. */
enum { TP_RC_BAD_WC = -77 }; /* a polled completion does not match its WR: rep.msg says */
static const char agent_flag[] = "--tp-agent";

static void agent_fail(struct tp_rep *rep, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void agent_fail(struct tp_rep *rep, int rc, const char *fmt, ...)
{
	va_list ap;

	rep->rc = rc;
	va_start(ap, fmt);
	vsnprintf(rep->msg, sizeof(rep->msg), fmt, ap);
	va_end(ap);
}

static bool agent_has_qp(const struct tp_ep *ep, int qp, struct tp_rep *rep)
{
	if (qp < 0 || qp >= ep->nqp || !ep->qp[qp]) {
		agent_fail(rep, -1, "no QP %d", qp);
		return false;
	}
	return true;
}

/*
 * The wire layout the rogue agent writes into (src/wire/shm/shm_msg.h, shm_fifo.h): a
 * segment is a 4096-byte page (magic, pid, QP number first; at 640 the word a peer's
 * ACK is written to) and then the fifo: tail,
 * head, armed and size on cache lines of their own, then 2048 slots of 64 bytes, each a
 * sequence word and a message header whose first bytes are op, flags and a 16-bit slot
 * count. A process's segments lie in arenas, one per block of 256 QP numbers, each
 * at its number's place after the arena's header page: (qpn % 256) strides of the
 * segment's size rounded up to pages.
 */
enum {
	SEG_MAGIC = 0x53565150, SEG_PAGE = 4096, PAGE_ACKED = 640, FIFO_HEAD = 64, FIFO_SIZE = 132,
	FIFO_SLOTS = 192, SLOT = 64, N_SLOTS = 2048,
	SEG_STRIDE = (SEG_PAGE + FIFO_SLOTS + N_SLOTS * SLOT + 4095) / 4096 * 4096,
	ARENA_SEGS = 256, ARENA_HDR = 4096,
};

static bool safe_read(void *dst, const void *src, size_t len)
{
	struct iovec l = { dst, len }, r = { (void *)src, len };

	return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)len;
}

unsigned char *tp_find_segment(uint32_t qpn, pid_t owner)
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned char *found = NULL;
	char line[512];

	if (!f)
		return NULL;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		uint32_t w[3];

		if (!strstr(line, "softverbs-qps") || sscanf(line, "%lx-%lx", &lo, &hi) != 2 ||
		    hi - lo < ARENA_HDR + (unsigned long)ARENA_SEGS * SEG_STRIDE ||
		    !strstr(line, "rw"))
			continue;
		lo += ARENA_HDR + (unsigned long)(qpn % ARENA_SEGS) * SEG_STRIDE;
		/* The agent's progress thread may be unmapping a segment whose QP went away:
		 * read with process_vm_readv, which fails where a plain read would fault. */
		if (!safe_read(w, (void *)lo, sizeof(w)))
			continue;
		if (w[0] == SEG_MAGIC && (pid_t)w[1] == owner && w[2] == qpn)
			found = (unsigned char *)lo;
	}
	fclose(f);
	return found;
}

/* The segment of the parent's QP @qpn, as we map it. */
static unsigned char *find_segment(uint32_t qpn)
{
	return tp_find_segment(qpn, getppid());
}

static bool safe_write(void *dst, const void *src, size_t len)
{
	struct iovec l = { (void *)src, len }, r = { dst, len };

	return process_vm_writev(getpid(), &l, 1, &r, 1, 0) == (ssize_t)len;
}

/* Every access goes through safe_read/safe_write: once the parent's QP fails, our
 * progress thread unmaps its segment, maybe in the middle of this. */
static int agent_scribble(uint32_t qpn, int how, uint32_t rounds, uint32_t seed)
{
	unsigned char *fifo, *seg = find_segment(qpn);
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1, head;

	if (!seg)
		return -1;
	if (how == TP_SCRIBBLE_ACK) {
		uint64_t acked = (uint64_t)seed << 32 | rounds;

		(void)safe_write(seg + PAGE_ACKED, &acked, sizeof(acked));
		return 0;
	}
	fifo = seg + SEG_PAGE;
	if (!safe_read(&head, fifo + FIFO_HEAD, sizeof(head)))
		return 0;
	if (how == TP_SCRIBBLE_EMPTY || rounds > N_SLOTS - 1)
		rounds = how == TP_SCRIBBLE_EMPTY ? 1 : N_SLOTS - 1; /* one lap, no overwriting */
	for (uint32_t i = 0; i < rounds; i++) {
		unsigned char *slot = fifo + FIFO_SLOTS + (head + i) % N_SLOTS * SLOT;
		unsigned char hdr[SLOT - 8] = { 1 }; /* EMPTY: a SEND of 0 slots */
		uint64_t seq = head + i + 1;

		if (how == TP_SCRIBBLE_GARBAGE) {
			for (size_t k = 0; k < sizeof(hdr); k++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				hdr[k] = (unsigned char)x;
			}
			/* Mostly a real opcode and a plausible slot count, so that the
			 * garbage gets past the first check into every handler. */
			if (x % 8) {
				uint16_t n = (uint16_t)(1 + (x >> 8) % 4);

				hdr[0] = (unsigned char)(1 + (x >> 16) % 12);
				memcpy(hdr + 2, &n, sizeof(n));
			}
			/* The ring's own fields: its size, and now and then its tail. */
			if (i % 64 == 63 && (!safe_write(fifo + FIFO_SIZE, &x, 4) ||
					     (i % 256 == 255 && !safe_write(fifo, &x, 8))))
				return 0;
		}
		/* The header, then its sequence word (a separate call: written after it). */
		if (!safe_write(slot + 8, hdr, sizeof(hdr)) || !safe_write(slot, &seq, sizeof(seq)))
			return 0;
	}
	return 0;
}

/*
 * The copy-assist job on a QP's page (src/wire/shm/shm_assist.h, pinned there by static
 * asserts): at byte 64 of the page, the words claim, done, failed, addr, op, len, then
 * the SGEs (address; length << 32 | lkey). A chunk is 64 KiB.
 */
enum {
	AS_AT = 64, AS_CLAIM = 0, AS_DONE = 8, AS_FAILED = 16, AS_ADDR = 24, AS_OP = 32,
	AS_LEN = 40, AS_SGE = 48, AS_WRITE = 0x100, AS_CHUNK = 65536,
};

static int agent_sock = -1;

static void agent_watch_last(struct tp_ep *ep, const struct tp_req *q, struct tp_rep *rep)
{
	const volatile unsigned char *last = ep->buf + q->a + q->b - 1;
	unsigned char want = tp_pattern(q->b - 1, (uint32_t)q->c);
	long long end = tu_now_ms() + (long long)q->d;
	struct tp_rep watching = { .op = q->op };

	if (!q->b || q->a + q->b > ep->len) {
		agent_fail(rep, -1, "watch: [%llu, +%llu) is not in the buffer",
			   (unsigned long long)q->a, (unsigned long long)q->b);
		return;
	}
	/* The first answer: watching now. */
	if (write(agent_sock, &watching, sizeof(watching)) != (ssize_t)sizeof(watching))
		fail_msg("agent: answer lost (errno %d)", errno);
	while (*last != want) {
		if (tu_now_ms() > end) {
			agent_fail(rep, -1, "watch: the last byte did not come in %llu ms",
				   (unsigned long long)q->d);
			return;
		}
	}
	atomic_thread_fence(memory_order_acquire);
	rep->v = tp_mismatch(ep->buf + q->a, q->b - 1, (uint32_t)q->c, 0);
}

static bool forge_word(unsigned char *job, int at, uint64_t v)
{
	return safe_write(job + at, &v, sizeof(v));
}

static uint64_t forge_read(unsigned char *job, int at)
{
	uint64_t v = 0;

	return safe_read(&v, job + at, sizeof(v)) ? v : 0;
}

/* Waits until nothing of the job is left to take and the helper counted @n chunks. */
static bool forge_wait(unsigned char *job, uint64_t n, long long end)
{
	for (;;) {
		uint64_t c = forge_read(job, AS_CLAIM), d = forge_read(job, AS_DONE);

		if ((c >> 16 & 0xffff) >= (c & 0xffff) && (d & 0xffffffff) >= n)
			return true;
		if (tu_now_ms() > end)
			return false;
		sched_yield();
	}
}

static void agent_forge_assist(struct tp_ep *ep, const struct tp_req *q, struct tp_rep *rep)
{
	unsigned char *seg = find_segment((uint32_t)q->qp), *job;
	int how = (int)q->a;
	uint64_t addr = q->b, rkey = q->c, len = q->d, x = len * 0x9e3779b97f4a7c15ull + 1;
	long long end = tu_now_ms() + (long long)q->e;

	if (!seg) {
		agent_fail(rep, -1, "forge: no segment of QP %d is mapped", q->qp);
		return;
	}
	job = seg + AS_AT;
	for (uint64_t round = 0; round < (how == TP_FORGE_GARBAGE ? len : 1); round++) {
		uint64_t id = (forge_read(job, AS_CLAIM) >> 32) + 1, n, sge_len = len;
		uint32_t lkey = ep->mr ? ep->mr->lkey : 0;
		uint64_t w[6 + 8];

		n = (len + AS_CHUNK - 1) / AS_CHUNK;
		if (how == TP_FORGE_BAD_LKEY)
			lkey ^= 0x80; /* another tag: no such key */
		if (how == TP_FORGE_NO_LENGTH)
			sge_len = len / 2;
		w[0] = id << 32;
		w[1] = 0;
		w[2] = addr;
		w[3] = rkey << 32 | AS_WRITE | 1;
		w[4] = len;
		w[5] = (uint64_t)(uintptr_t)ep->buf;
		w[6] = sge_len << 32 | lkey;
		if (how == TP_FORGE_GARBAGE) {
			/* Now plausible, now not: every word from a xorshift of the round. */
			for (int k = 0; k < 14; k++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				w[k] = x;
			}
			if (x % 2) {
				w[2] = addr + (x >> 8) % (1u << 20);
				w[3] = (x % 4 ? rkey : w[3] >> 32) << 32 | (w[3] & 0x1ff);
				w[4] = (x >> 16) % (4u << 20);
				w[5] = (uint64_t)(uintptr_t)ep->buf + (x >> 24) % 4096;
				w[6] = (x >> 32) % (4u << 20) << 32 | (x % 3 ? lkey : (uint32_t)x);
			}
			n = (x >> 40) % 70;
		}
		for (int k = 0; k < 5; k++)
			if (!forge_word(job, AS_DONE + 8 * k, w[k]))
				return;
		for (int k = 0; k < (how == TP_FORGE_GARBAGE ? 8 : 2); k++)
			if (!forge_word(job, AS_SGE + 8 * k, w[5 + k]))
				return;
		/* The claim word last: the job is posted. Garbage: any front and back. */
		if (!forge_word(job, AS_CLAIM, how == TP_FORGE_GARBAGE ?
					 (x & 0xffffffff00000000ull) | (x >> 8 & 0xff) << 16 | n :
					 id << 32 | n))
			return;
		if (how == TP_FORGE_GARBAGE) {
			/* Taken or not, go on (the parent's thread looks every millisecond). */
			(void)forge_wait(job, 0, tu_now_ms() + 20);
			continue;
		}
		if (!forge_wait(job, n, end)) {
			rep->v = -1;
			return;
		}
		rep->v = forge_read(job, AS_FAILED) == id;
	}
}

/*
 * Plays the helper of our own QP @q->qp: takes the last chunk of the next job a
 * requester posts on its page, holds it @q->d ms while watching that the last byte of
 * [@q->a, +@q->b) does not change, then reports the chunk failed and counts it.
 */
static void agent_hold_chunk(struct tp_ep *ep, const struct tp_req *q, struct tp_rep *rep)
{
	const volatile unsigned char *last = ep->buf + q->a + q->b - 1;
	unsigned char before;
	unsigned char *seg = tp_find_segment(ep->qp[q->qp]->qp_num, getpid());
	_Atomic uint64_t *claim, *done, *failed;
	struct tp_rep watching = { .op = q->op };
	long long end = tu_now_ms() + (long long)q->e;
	uint64_t c, old, job;

	if (!seg) {
		agent_fail(rep, -1, "hold: our QP's segment is not mapped");
		return;
	}
	claim = (_Atomic uint64_t *)(seg + AS_AT + AS_CLAIM);
	done = (_Atomic uint64_t *)(seg + AS_AT + AS_DONE);
	failed = (_Atomic uint64_t *)(seg + AS_AT + AS_FAILED);
	old = atomic_load(claim) >> 32;
	if (write(agent_sock, &watching, sizeof(watching)) != (ssize_t)sizeof(watching))
		fail_msg("agent: answer lost (errno %d)", errno);
	for (;;) {
		c = atomic_load(claim);
		if (c >> 32 != old && (c >> 16 & 0xffff) < (c & 0xffff) &&
		    atomic_compare_exchange_strong(claim, &c, c - 1))
			break;
		if (tu_now_ms() > end) {
			agent_fail(rep, -1, "hold: no job came in %llu ms", (unsigned long long)q->e);
			return;
		}
	}
	job = c >> 32;
	before = *last; /* the job's tail comes after our chunk */
	rep->n = (int32_t)(c & 0xffff) - 1; /* the chunk held */
	for (end = tu_now_ms() + (long long)q->d; tu_now_ms() < end;)
		if (*last != before)
			rep->v = 1; /* the last byte landed while a chunk was out */
	atomic_store(failed, job);
	c = atomic_load(done);
	while (c >> 32 == job && !atomic_compare_exchange_weak(done, &c, c + 1))
		;
}

static void agent_faa_burst(struct tp_ep *ep, const struct tp_req *q, struct tp_rep *rep)
{
	uint32_t n = (uint32_t)q->n, window = (uint32_t)q->e, posted = 0, done = 0;
	uint64_t *val = (uint64_t *)ep->buf;
	long long end = tu_now_ms() + 15000;
	long bad = 0;

	if ((uint64_t)n * 8 > ep->len || !window) {
		agent_fail(rep, -1, "burst of %u does not fit", n);
		return;
	}
	while (done < n) {
		struct ibv_wc wc[16];
		int got;

		while (posted < n && posted - done < window) {
			struct tp_wr w = {
				.wr_id = posted,
				.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				.send_flags = IBV_SEND_SIGNALED,
				.nsge = 1,
				.sge = { { .off = posted * 8, .len = 8 } },
				.remote_addr = q->c,
				.rkey = (uint32_t)q->d,
				.compare_add = q->b,
			};
			int rc = tp_ep_post_send(ep, q->qp, &w, 1, NULL);

			if (rc) {
				agent_fail(rep, -1, "post of atomic %u: %d", posted, rc);
				return;
			}
			posted++;
		}
		got = ibv_poll_cq(ep->scq, 16, wc);
		for (int i = 0; i < got; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != done) {
				agent_fail(rep, -1, "atomic %u: wr_id %llu status %s", done,
					   (unsigned long long)wc[i].wr_id,
					   ibv_wc_status_str(wc[i].status));
				return;
			}
			done++;
		}
		if (got < 0 || tu_now_ms() > end) {
			agent_fail(rep, -1, "burst: %u of %u atomics completed in 15 s", done, n);
			return;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		if (((val[i] >> q->a) & 0xffffffffu) != i)
			bad++;
	rep->v = bad;
}

static void agent_do(struct tp_ep *ep, const struct tp_req *q, struct tp_rep *rep)
{
	struct ibv_srq_attr sa;
	int qp = q->qp;

	switch (q->op) {
	case TP_OPEN:
		tp_ep_open(ep, q->a, (int)q->b);
		break;
	case TP_CREATE_QP:
		rep->v = tp_ep_create_qp(ep, &q->qpo);
		break;
	case TP_CREATE_SRQ:
		tp_ep_create_srq(ep, (uint32_t)q->a, (uint32_t)q->b);
		break;
	case TP_INFO:
		if (agent_has_qp(ep, qp, rep))
			tp_ep_info(ep, qp, &rep->info);
		break;
	case TP_CONNECT:
		if (agent_has_qp(ep, qp, rep))
			rep->rc = tu_qp_connect(ep->qp[qp], &q->conn, IBV_QPS_RTS);
		break;
	case TP_POST_SEND:
		if (agent_has_qp(ep, qp, rep))
			rep->rc = tp_ep_post_send(ep, qp, q->wr, q->n, &rep->n);
		break;
	case TP_POST_RECV:
		if (qp < 0 || agent_has_qp(ep, qp, rep))
			rep->rc = tp_ep_post_recv(ep, qp, q->a, q->sge, q->n);
		break;
	case TP_POLL:
		rep->n = tu_poll(q->a ? ep->scq : ep->rcq, q->n, rep->wc, (int)q->b);
		/* Each against the WR it completes: the parent fails the test on a mismatch. */
		for (int i = 0; i < rep->n; i++)
			if (tp_posted_mismatch(q->a ? ep->scq : ep->rcq, &rep->wc[i], rep->msg,
					       sizeof(rep->msg))) {
				rep->rc = TP_RC_BAD_WC;
				break;
			}
		break;
	case TP_FILL:
		tp_fill(ep->buf + q->a, q->b, (uint32_t)q->c, q->d);
		break;
	case TP_CHECK:
		rep->v = tp_mismatch(ep->buf + q->a, q->b, (uint32_t)q->c, q->d);
		if (rep->v >= 0) {
			rep->data[0] = ep->buf[q->a + (uint64_t)rep->v];
			rep->data[1] = tp_pattern(q->d + (size_t)rep->v, (uint32_t)q->c);
		}
		break;
	case TP_PEEK:
		memcpy(rep->data, ep->buf + q->a, q->b);
		break;
	case TP_POKE:
		memcpy(ep->buf + q->a, q->data, q->b);
		break;
	case TP_STATE:
		if (agent_has_qp(ep, qp, rep))
			rep->v = tu_query_state(ep->qp[qp]);
		break;
	case TP_WAIT_STATE:
		if (agent_has_qp(ep, qp, rep))
			rep->v = tp_wait_state(ep->qp[qp], (enum ibv_qp_state)q->a, (int)q->b);
		break;
	case TP_WAIT_ASYNC: {
		int r;

		if (qp >= 0 && !agent_has_qp(ep, qp, rep))
			break;
		r = wait_async(ep->res->ctx, (enum ibv_event_type)q->a, qp < 0 ? NULL : ep->qp[qp],
			       qp < 0 ? ep->srq : NULL, (int)q->b, NULL, rep->msg, sizeof(rep->msg));
		rep->v = r > 0;
		if (r < 0)
			rep->rc = -1;
		break;
	}
	case TP_ASYNC_PENDING:
		rep->v = tp_fd_ready(ep->res->ctx->async_fd);
		break;
	case TP_ARM_CQ:
		rep->rc = ibv_req_notify_cq(ep->rcq, (int)q->a);
		break;
	case TP_WAIT_CQ_EVENT: {
		struct pollfd pfd = { .fd = ep->ch->fd, .events = POLLIN };
		struct ibv_cq *cq;
		void *cq_ctx;

		rep->v = poll(&pfd, 1, (int)q->b) == 1 && !ibv_get_cq_event(ep->ch, &cq, &cq_ctx);
		if (rep->v)
			ibv_ack_cq_events(cq, 1);
		break;
	}
	case TP_CQ_EVENT_PENDING:
		rep->v = tp_fd_ready(ep->ch->fd);
		break;
	case TP_ARM_SRQ:
		sa = (struct ibv_srq_attr){ .srq_limit = (uint32_t)q->a };
		rep->rc = ibv_modify_srq(ep->srq, &sa, IBV_SRQ_LIMIT);
		break;
	case TP_SRQ_LIMIT:
		memset(&sa, 0, sizeof(sa));
		rep->rc = ibv_query_srq(ep->srq, &sa);
		rep->v = sa.srq_limit;
		break;
	case TP_SCRIBBLE:
		rep->rc = agent_scribble((uint32_t)q->qp, (int)(q->a & 0xff), (uint32_t)(q->a >> 8),
					 (uint32_t)q->b);
		break;
	case TP_WATCH_LAST:
		agent_watch_last(ep, q, rep);
		break;
	case TP_FORGE_ASSIST:
		agent_forge_assist(ep, q, rep);
		break;
	case TP_HOLD_CHUNK:
		if (agent_has_qp(ep, qp, rep))
			agent_hold_chunk(ep, q, rep);
		break;
	case TP_DEREG_MR:
		rep->rc = ibv_dereg_mr(ep->mr);
		if (!rep->rc)
			ep->mr = NULL;
		if (!rep->rc && q->a) {
			munmap(ep->buf, ep->len);
			ep->buf = NULL;
		}
		break;
	case TP_DESTROY_QP:
		if (agent_has_qp(ep, qp, rep)) {
			rep->rc = ibv_destroy_qp(ep->qp[qp]);
			if (!rep->rc)
				ep->qp[qp] = NULL;
		}
		break;
	case TP_LEAVE_ON_RECV:
		if (agent_has_qp(ep, qp, rep)) {
			struct ibv_wc wc;

			rep->rc = tu_poll(ep->rcq, 1, &wc, (int)q->a) == 1 ? 0 : -1;
			if (!rep->rc) {
				rep->v = wc.status;
				rep->rc = ibv_destroy_qp(ep->qp[qp]);
			}
			if (!rep->rc)
				ep->qp[qp] = NULL;
		}
		break;
	case TP_MODIFY_STATE:
		if (agent_has_qp(ep, qp, rep)) {
			struct ibv_qp_attr a = { .qp_state = (enum ibv_qp_state)q->a };

			rep->rc = ibv_modify_qp(ep->qp[qp], &a, IBV_QP_STATE);
		}
		break;
	case TP_FAA_BURST:
		if (agent_has_qp(ep, qp, rep))
			agent_faa_burst(ep, q, rep);
		break;
	case TP_EXIT:
		rep->rc = tp_ep_close(ep);
		if (rep->rc)
			snprintf(rep->msg, sizeof(rep->msg), "closing its endpoint: %.170s",
				 tp_close_why);
		break;
	default:
		agent_fail(rep, -1, "unknown request %u", q->op);
	}
}

static void agent_run(void **state)
{
	struct tp_ep ep;
	struct tp_req *q = calloc(1, sizeof(*q));
	struct tp_rep *rep = calloc(1, sizeof(*rep));
	/* Bounded even when the parent stops asking: it may be stuck in the library. */
	struct timeval tv = { .tv_sec = 60 };

	(void)state;
	assert_non_null(q);
	assert_non_null(rep);
	memset(&ep, 0, sizeof(ep));
	setsockopt(agent_sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		/* Blocked here between requests: nothing of the library runs on this thread. */
		ssize_t r = read(agent_sock, q, sizeof(*q));

		if (r != (ssize_t)sizeof(*q)) {
			tp_ep_close(&ep);
			fail_msg("agent: the parent went away (read %zd, errno %d)", r, errno);
		}
		memset(rep, 0, sizeof(*rep));
		rep->op = q->op;
		agent_do(&ep, q, rep);
		if (write(agent_sock, rep, sizeof(*rep)) != (ssize_t)sizeof(*rep))
			fail_msg("agent: answer lost (errno %d)", errno);
		if (q->op == TP_EXIT)
			break;
	}
	free(q);
	free(rep);
}

void tp_main(int argc, char **argv)
{
	const struct CMUnitTest agent[] = { cmocka_unit_test(agent_run) };

	if (argc != 3 || strcmp(argv[1], agent_flag)) {
		/* Not an agent. SV_TEST_FILTER=pattern runs only the tests it matches. */
		if (getenv("SV_TEST_FILTER"))
			cmocka_set_test_filter(getenv("SV_TEST_FILTER"));
		return;
	}
	agent_sock = atoi(argv[2]);
	/* SV_TEST_AGENT_UID: the agent runs as that user (the parent is root), as a peer of
	 * another user would. Changing credentials clears the parent-death signal. */
	if (getenv("SV_TEST_AGENT_UID")) {
		uid_t u = (uid_t)atoi(getenv("SV_TEST_AGENT_UID"));

		if (setgroups(0, NULL) || setgid(u) || setuid(u)) {
			perror("tp-agent: dropping to SV_TEST_AGENT_UID");
			exit(1);
		}
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	}
	exit(cmocka_run_group_tests_name("tp-agent", agent, NULL, NULL) ? 1 : 0);
}

/* ---- the parent's side ---------------------------------------------------------------- */

static bool reap(struct tp_peer *p, int ms);

bool tp_fresh(const char *test_name, int timeout_ms)
{
	extern char **environ;
	const char *fresh = getenv("SV_TEST_FRESH");
	char filter[160], mark[160], ran[48], **env, byte;
	struct tp_peer p = { .sock = -1, .pidfd = -1 };
	size_t n = 0;
	int pfd[2];
	ssize_t r;

	if (fresh && !strcmp(fresh, test_name)) {
		/* Tell the parent the filter found this test. */
		const char *fd = getenv("SV_TEST_FRESH_FD");

		if (fd && write(atoi(fd), "r", 1) != 1)
			fail_msg("tp_fresh: telling the parent the test ran: errno %d", errno);
		return true;
	}
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	snprintf(filter, sizeof(filter), "SV_TEST_FILTER=%s", test_name);
	snprintf(mark, sizeof(mark), "SV_TEST_FRESH=%s", test_name);
	snprintf(ran, sizeof(ran), "SV_TEST_FRESH_FD=%d", pfd[1]);
	while (environ[n])
		n++;
	env = calloc(n + 4, sizeof(*env));
	assert_non_null(env);
	for (size_t i = 0, k = 0; i < n; i++)
		if (strncmp(environ[i], "SV_TEST_FILTER=", 15) &&
		    strncmp(environ[i], "SV_TEST_FRESH=", 14) &&
		    strncmp(environ[i], "SV_TEST_FRESH_FD=", 17))
			env[k++] = environ[i];
	for (n = 0; env[n]; n++)
		;
	env[n] = filter;
	env[n + 1] = mark;
	env[n + 2] = ran;
	fflush(NULL);
	p.pid = fork();
	assert_true(p.pid >= 0);
	if (p.pid == 0) {
		char *argv[] = { "tp-fresh", NULL };

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fcntl(pfd[1], F_SETFD, 0);
		execve("/proc/self/exe", argv, env);
		_exit(98);
	}
	close(pfd[1]);
	free(env);
	p.pidfd = (int)syscall(SYS_pidfd_open, p.pid, 0);
	assert_true(p.pidfd >= 0);
	if (!reap(&p, timeout_ms)) {
		kill(p.pid, SIGKILL);
		reap(&p, TP_WAIT_MS);
		close(p.pidfd);
		close(pfd[0]);
		fail_msg("the fresh run of %s did not end within %d ms (killed)", test_name,
			 timeout_ms);
	}
	close(p.pidfd);
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	r = read(pfd[0], &byte, 1);
	close(pfd[0]);
	if (p.status)
		fail_msg("the fresh run of %s failed (%s; its output is above)", test_name,
			 tp_status_str(&p));
	if (r != 1)
		fail_msg("the fresh run of %s ran no test: SV_TEST_FILTER=%s selected nothing, or "
			 "the test does not call tp_fresh with its own name", test_name, test_name);
	return false;
}

void tp_start(struct tp_peer *p)
{
	tp_spawn(p, "tp-agent", agent_flag);
}

void tp_spawn(struct tp_peer *p, const char *argv0, const char *flag)
{
	int sv[2];
	pid_t parent = getpid();

	memset(p, 0, sizeof(*p));
	p->sock = p->pidfd = -1;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	fflush(NULL);
	p->pid = fork();
	assert_true(p->pid >= 0);
	if (p->pid == 0) {
		char fd[16];

		/* Fresh process: nothing of the parent's library or cmocka state survives. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(99);
		snprintf(fd, sizeof(fd), "%d", sv[1]);
		fcntl(sv[1], F_SETFD, 0);
		execl("/proc/self/exe", argv0, flag, fd, (char *)NULL);
		_exit(98);
	}
	close(sv[1]);
	p->sock = sv[0];
	p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	assert_true(p->pidfd >= 0);
}

/* Waits up to @ms for the agent to exit; records its status. True if it did. */
static bool reap(struct tp_peer *p, int ms)
{
	struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };
	int st;

	if (!p->pid)
		return true;
	if (poll(&pfd, 1, ms) != 1)
		return false;
	if (waitpid(p->pid, &st, 0) != p->pid)
		return false;
	p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	p->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
	p->pid = 0;
	return true;
}

const char *tp_status_str(const struct tp_peer *p)
{
	static char s[64];

	if (p->signal)
		snprintf(s, sizeof(s), "was killed by signal %d (%s)", p->signal,
			 strsignal(p->signal));
	else
		snprintf(s, sizeof(s), "exited with status %d", p->status);
	return s;
}

void tp_kill(struct tp_peer *p)
{
	assert_true(p->pid > 0);
	assert_int_equal(kill(p->pid, SIGKILL), 0);
	assert_true(reap(p, TP_WAIT_MS));
	p->status = p->signal = 0; /* killed on purpose: not a failure of the agent */
}

int tp_cleanup(struct tp_peer *p)
{
	int rc = 0;

	if (p->pid > 0 && !reap(p, 0)) {
		fprintf(stderr, "tp_cleanup: agent %d still running (never stopped): killed\n",
			(int)p->pid);
		kill(p->pid, SIGKILL);
		reap(p, TP_WAIT_MS);
		rc = -1;
	} else if (p->status) {
		fprintf(stderr, "tp_cleanup: the agent %s\n", tp_status_str(p));
		rc = -1;
	}
	if (p->sock >= 0)
		close(p->sock);
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->sock = p->pidfd = -1;
	return rc;
}

static void send_req(struct tp_peer *p, const struct tp_req *q)
{
	if (send(p->sock, q, sizeof(*q), MSG_NOSIGNAL) != (ssize_t)sizeof(*q))
		fail_msg("request %u to the agent: errno %d (agent gone?)", q->op, errno);
}

static void recv_rep(struct tp_peer *p, uint32_t op, struct tp_rep *rep, int timeout_ms)
{
	struct pollfd pfd = { .fd = p->sock, .events = POLLIN };
	ssize_t r;

	if (poll(&pfd, 1, timeout_ms) != 1)
		fail_msg("the agent did not answer request %u within %d ms", op, timeout_ms);
	r = recv(p->sock, rep, sizeof(*rep), 0);
	if (r != (ssize_t)sizeof(*rep)) {
		reap(p, 1000);
		fail_msg("request %u: the agent hung up (exit status %d; see its output above)",
			 op, p->pid ? -1 : p->status);
	}
	if (rep->op != op)
		fail_msg("the agent answered request %u to request %u", rep->op, op);
}

/* One request and its answer; @extra_ms: how long the agent itself may wait. */
static int call(struct tp_peer *p, struct tp_req *q, struct tp_rep *rep, int extra_ms)
{
	send_req(p, q);
	recv_rep(p, q->op, rep, TP_WAIT_MS + extra_ms);
	if (rep->msg[0])
		print_message("agent: %s\n", rep->msg);
	return rep->rc;
}

/* Scratch for the helpers below: each test is one thread. */
static struct tp_req *new_req(uint32_t op, int qp)
{
	static struct tp_req q;

	memset(&q, 0, sizeof(q));
	q.op = op;
	q.qp = qp;
	return &q;
}

static struct tp_rep rep_buf;

static int simple(struct tp_peer *p, uint32_t op, int qp, uint64_t a, uint64_t b)
{
	struct tp_req *q = new_req(op, qp);

	q->a = a;
	q->b = b;
	return call(p, q, &rep_buf, 0);
}

void tp_open(struct tp_peer *p, size_t len, int mr_access)
{
	assert_int_equal(simple(p, TP_OPEN, 0, len, (uint64_t)mr_access), 0);
}

int tp_create_qp(struct tp_peer *p, const struct tp_qp_opts *o)
{
	struct tp_req *q = new_req(TP_CREATE_QP, 0);

	q->qpo = *o;
	assert_int_equal(call(p, q, &rep_buf, 0), 0);
	return (int)rep_buf.v;
}

void tp_create_srq(struct tp_peer *p, uint32_t max_wr, uint32_t max_sge)
{
	assert_int_equal(simple(p, TP_CREATE_SRQ, 0, max_wr, max_sge), 0);
}

void tp_info(struct tp_peer *p, int qp, struct tp_info *info)
{
	assert_int_equal(simple(p, TP_INFO, qp, 0, 0), 0);
	*info = rep_buf.info;
}

int tp_connect(struct tp_peer *p, int qp, const struct tu_conn *c)
{
	struct tp_req *q = new_req(TP_CONNECT, qp);

	q->conn = *c;
	return call(p, q, &rep_buf, 0);
}

int tp_post_send(struct tp_peer *p, int qp, const struct tp_wr *wr, int n, int *bad)
{
	struct tp_req *q = new_req(TP_POST_SEND, qp);
	int rc;

	assert_true(n <= TP_MAX_CHAIN);
	memcpy(q->wr, wr, (size_t)n * sizeof(*wr));
	q->n = n;
	rc = call(p, q, &rep_buf, 0);
	if (bad)
		*bad = rep_buf.n;
	return rc;
}

int tp_post_recv(struct tp_peer *p, int qp, uint64_t wr_id, const struct tp_sge *sge, int nsge)
{
	struct tp_req *q = new_req(TP_POST_RECV, qp);

	assert_true(nsge <= TP_MAX_SGE);
	q->a = wr_id;
	if (nsge)
		memcpy(q->sge, sge, (size_t)nsge * sizeof(*sge));
	q->n = nsge;
	return call(p, q, &rep_buf, 0);
}

int tp_poll(struct tp_peer *p, bool send, int n, int timeout_ms, struct ibv_wc *wc)
{
	struct tp_req *q = new_req(TP_POLL, 0);

	assert_true(n <= TP_MAX_WC);
	q->a = send;
	q->b = (uint64_t)timeout_ms;
	q->n = n;
	if (call(p, q, &rep_buf, timeout_ms) == TP_RC_BAD_WC)
		fail_msg("peer's %s queue: %s", send ? "send" : "receive", rep_buf.msg);
	memcpy(wc, rep_buf.wc, (size_t)rep_buf.n * sizeof(*wc));
	return rep_buf.n;
}

void tp_expect_peer_wc(struct tp_peer *p, bool send, uint64_t wr_id, enum ibv_wc_status status,
		       struct ibv_wc *out)
{
	struct ibv_wc wc;

	if (tp_poll(p, send, 1, TP_WAIT_MS, &wc) != 1)
		fail_msg("peer: no %s completion within %d ms (expected wr_id %llu, %s)",
			 send ? "send" : "receive", TP_WAIT_MS, (unsigned long long)wr_id,
			 ibv_wc_status_str(status));
	if (wc.wr_id != wr_id || wc.status != status)
		fail_msg("peer: %s completion wr_id %llu status %s, expected wr_id %llu status %s",
			 send ? "send" : "receive", (unsigned long long)wc.wr_id,
			 ibv_wc_status_str(wc.status), (unsigned long long)wr_id,
			 ibv_wc_status_str(status));
	if (out)
		*out = wc;
}

void tp_fill_peer(struct tp_peer *p, uint64_t off, uint64_t len, uint32_t seed, uint64_t start)
{
	struct tp_req *q = new_req(TP_FILL, 0);

	q->a = off;
	q->b = len;
	q->c = seed;
	q->d = start;
	assert_int_equal(call(p, q, &rep_buf, 0), 0);
}

void tp_check_peer(struct tp_peer *p, uint64_t off, uint64_t len, uint32_t seed, uint64_t start,
		   const char *what)
{
	struct tp_req *q = new_req(TP_CHECK, 0);

	q->a = off;
	q->b = len;
	q->c = seed;
	q->d = start;
	assert_int_equal(call(p, q, &rep_buf, 0), 0);
	if (rep_buf.v >= 0)
		fail_msg("%s: peer's byte %lld of %llu is 0x%02x, expected 0x%02x", what,
			 (long long)rep_buf.v, (unsigned long long)len, rep_buf.data[0],
			 rep_buf.data[1]);
}

void tp_peek(struct tp_peer *p, uint64_t off, void *out, uint32_t len)
{
	assert_true(len <= TP_PEEK_MAX);
	assert_int_equal(simple(p, TP_PEEK, 0, off, len), 0);
	memcpy(out, rep_buf.data, len);
}

void tp_poke(struct tp_peer *p, uint64_t off, const void *in, uint32_t len)
{
	struct tp_req *q = new_req(TP_POKE, 0);

	assert_true(len <= TP_PEEK_MAX);
	q->a = off;
	q->b = len;
	memcpy(q->data, in, len);
	assert_int_equal(call(p, q, &rep_buf, 0), 0);
}

enum ibv_qp_state tp_state(struct tp_peer *p, int qp)
{
	assert_int_equal(simple(p, TP_STATE, qp, 0, 0), 0);
	return (enum ibv_qp_state)rep_buf.v;
}

bool tp_wait_peer_state(struct tp_peer *p, int qp, enum ibv_qp_state state, int timeout_ms)
{
	struct tp_req *q = new_req(TP_WAIT_STATE, qp);

	q->a = state;
	q->b = (uint64_t)timeout_ms;
	assert_int_equal(call(p, q, &rep_buf, timeout_ms), 0);
	return rep_buf.v != 0;
}

bool tp_wait_peer_async(struct tp_peer *p, enum ibv_event_type type, int qp, int timeout_ms)
{
	struct tp_req *q = new_req(TP_WAIT_ASYNC, qp);

	q->a = type;
	q->b = (uint64_t)timeout_ms;
	if (call(p, q, &rep_buf, timeout_ms))
		fail_msg("peer: %s", rep_buf.msg);
	return rep_buf.v != 0;
}

bool tp_peer_async_pending(struct tp_peer *p)
{
	assert_int_equal(simple(p, TP_ASYNC_PENDING, 0, 0, 0), 0);
	return rep_buf.v != 0;
}

int tp_arm_recv_cq(struct tp_peer *p, bool solicited_only)
{
	return simple(p, TP_ARM_CQ, 0, solicited_only, 0);
}

bool tp_wait_cq_event(struct tp_peer *p, int timeout_ms)
{
	struct tp_req *q = new_req(TP_WAIT_CQ_EVENT, 0);

	q->b = (uint64_t)timeout_ms;
	assert_int_equal(call(p, q, &rep_buf, timeout_ms), 0);
	return rep_buf.v != 0;
}

bool tp_cq_event_pending(struct tp_peer *p)
{
	assert_int_equal(simple(p, TP_CQ_EVENT_PENDING, 0, 0, 0), 0);
	return rep_buf.v != 0;
}

int tp_arm_srq(struct tp_peer *p, uint32_t limit)
{
	return simple(p, TP_ARM_SRQ, 0, limit, 0);
}

uint32_t tp_srq_limit(struct tp_peer *p)
{
	assert_int_equal(simple(p, TP_SRQ_LIMIT, 0, 0, 0), 0);
	return (uint32_t)rep_buf.v;
}

int tp_dereg_mr(struct tp_peer *p, bool unmap)
{
	return simple(p, TP_DEREG_MR, 0, unmap, 0);
}

int tp_scribble(struct tp_peer *p, uint32_t qpn, int how, uint32_t rounds, uint32_t seed)
{
	return simple(p, TP_SCRIBBLE, (int)qpn, (uint64_t)how | (uint64_t)rounds << 8, seed);
}

void tp_watch_last_start(struct tp_peer *p, uint64_t off, uint64_t len, uint32_t seed,
			 int timeout_ms)
{
	struct tp_req *q = new_req(TP_WATCH_LAST, 0);

	q->a = off;
	q->b = len;
	q->c = seed;
	q->d = (uint64_t)timeout_ms;
	send_req(p, q);
	recv_rep(p, TP_WATCH_LAST, &rep_buf, TP_WAIT_MS); /* watching */
	if (rep_buf.msg[0])
		fail_msg("agent: %s", rep_buf.msg);
}

long tp_watch_last_result(struct tp_peer *p)
{
	/* The agent's own bound comes first: it answers then. */
	recv_rep(p, TP_WATCH_LAST, &rep_buf, TP_WAIT_MS + 60000);
	if (rep_buf.msg[0])
		fail_msg("agent: %s", rep_buf.msg);
	return (long)rep_buf.v;
}

void tp_forge_assist_start(struct tp_peer *p, uint32_t qpn, int how, uint64_t addr,
			   uint32_t rkey, uint64_t len, int timeout_ms)
{
	struct tp_req *q = new_req(TP_FORGE_ASSIST, (int)qpn);

	q->a = (uint64_t)how;
	q->b = addr;
	q->c = rkey;
	q->d = len;
	q->e = (uint64_t)timeout_ms;
	send_req(p, q);
}

int tp_forge_assist_result(struct tp_peer *p, int timeout_ms)
{
	recv_rep(p, TP_FORGE_ASSIST, &rep_buf, timeout_ms);
	if (rep_buf.msg[0])
		fail_msg("agent: %s", rep_buf.msg);
	return (int)rep_buf.v;
}

void tp_hold_chunk_start(struct tp_peer *p, int qp, uint64_t off, uint64_t len, int hold_ms,
			 int timeout_ms)
{
	struct tp_req *q = new_req(TP_HOLD_CHUNK, qp);

	q->a = off;
	q->b = len;
	q->d = (uint64_t)hold_ms;
	q->e = (uint64_t)timeout_ms;
	send_req(p, q);
	recv_rep(p, TP_HOLD_CHUNK, &rep_buf, TP_WAIT_MS); /* watching */
	if (rep_buf.msg[0])
		fail_msg("agent: %s", rep_buf.msg);
}

int tp_hold_chunk_result(struct tp_peer *p, int *chunk)
{
	recv_rep(p, TP_HOLD_CHUNK, &rep_buf, TP_WAIT_MS + 60000);
	if (rep_buf.msg[0])
		fail_msg("agent: %s", rep_buf.msg);
	*chunk = rep_buf.n;
	return (int)rep_buf.v;
}

int tp_destroy_qp(struct tp_peer *p, int qp)
{
	return simple(p, TP_DESTROY_QP, qp, 0, 0);
}

int tp_leave_on_recv(struct tp_peer *p, int qp, int timeout_ms)
{
	struct tp_req *q = new_req(TP_LEAVE_ON_RECV, qp);

	q->a = (uint64_t)timeout_ms;
	send_req(p, q);
	recv_rep(p, TP_LEAVE_ON_RECV, &rep_buf, timeout_ms + TP_WAIT_MS);
	if (rep_buf.msg[0])
		print_message("agent: %s\n", rep_buf.msg);
	return rep_buf.rc ? -1 : (int)rep_buf.v;
}

int tp_modify_state(struct tp_peer *p, int qp, enum ibv_qp_state state)
{
	return simple(p, TP_MODIFY_STATE, qp, state, 0);
}

void tp_faa_burst_start(struct tp_peer *p, int qp, uint32_t n, uint64_t add, uint64_t raddr,
			uint32_t rkey, uint32_t window, uint32_t shift)
{
	struct tp_req *q = new_req(TP_FAA_BURST, qp);

	q->n = (int32_t)n;
	q->a = shift;
	q->b = add;
	q->c = raddr;
	q->d = rkey;
	q->e = window;
	send_req(p, q);
}

long tp_faa_burst_result(struct tp_peer *p, int timeout_ms)
{
	recv_rep(p, TP_FAA_BURST, &rep_buf, timeout_ms);
	if (rep_buf.msg[0])
		print_message("agent: %s\n", rep_buf.msg);
	return rep_buf.rc ? -1 : (long)rep_buf.v;
}

long tp_faa_burst(struct tp_peer *p, int qp, uint32_t n, uint64_t add, uint64_t raddr,
		  uint32_t rkey, uint32_t window, uint32_t shift)
{
	tp_faa_burst_start(p, qp, n, add, raddr, rkey, window, shift);
	return tp_faa_burst_result(p, 20000);
}

static uint32_t async_op;

void tp_request_async(struct tp_peer *p, uint32_t op, int qp, uint64_t a)
{
	struct tp_req *q = new_req(op, qp);

	q->a = a;
	async_op = op;
	send_req(p, q);
}

bool tp_answer_ready(struct tp_peer *p)
{
	return tp_fd_ready(p->sock);
}

int tp_answer(struct tp_peer *p, int timeout_ms)
{
	recv_rep(p, async_op, &rep_buf, timeout_ms);
	if (rep_buf.msg[0])
		print_message("agent: %s\n", rep_buf.msg);
	return rep_buf.rc;
}

void tp_stop(struct tp_peer *p)
{
	int rc;

	assert_true(p->pid > 0);
	rc = simple(p, TP_EXIT, 0, 0, 0);
	if (!reap(p, TP_WAIT_MS))
		fail_msg("the agent did not exit within %d ms", TP_WAIT_MS);
	if (rc)
		fail_msg("the agent could not clean up: %s", rep_buf.msg);
	if (p->status)
		fail_msg("the agent %s", tp_status_str(p));
}

/* ---- pairs ------------------------------------------------------------------------------ */

void tp_pair_open(struct tp_pair *x, size_t len, const struct tp_qp_opts *lo,
		  const struct tp_qp_opts *po)
{
	tp_start(&x->peer);
	tp_open(&x->peer, len, 0);
	x->pq = tp_create_qp(&x->peer, po ? po : lo);
	tp_info(&x->peer, x->pq, &x->pi);
	tp_ep_open(&x->ep, len, 0);
	x->lq = tp_ep_create_qp(&x->ep, lo);
	tp_ep_info(&x->ep, x->lq, &x->li);
	tp_conn(&x->ep, &x->li, &x->pi, &x->lc);
	tp_conn(&x->ep, &x->pi, &x->li, &x->pc);
}

void tp_pair_connect(struct tp_pair *x)
{
	int rc = tp_connect(&x->peer, x->pq, &x->pc);

	if (rc)
		fail_msg("agent's QP to RTS: %d", rc);
	rc = tu_qp_connect(x->ep.qp[x->lq], &x->lc, IBV_QPS_RTS);
	if (rc)
		fail_msg("our QP to RTS: %d", rc);
}

void tp_pair_stop(struct tp_pair *x)
{
	tp_stop(&x->peer);
	if (tp_ep_close(&x->ep))
		fail_msg("closing our endpoint: %s", tp_close_why);
}

int tp_pair_setup(void **state)
{
	struct tp_pair *x = calloc(1, sizeof(*x));

	if (!x)
		return -1;
	x->peer.sock = x->peer.pidfd = -1;
	*state = x;
	return 0;
}

int tp_pair_teardown(void **state)
{
	struct tp_pair *x = *state;
	int rc;

	if (!x)
		return 0;
	/* An agent still running (the test did not stop it), or that exited with a status
	 * other than 0 or by a signal, fails the test (tp_cleanup says which). */
	rc = tp_cleanup(&x->peer);
	if (tp_ep_close(&x->ep))
		rc = -1;
	free(x);
	*state = NULL;
	return rc;
}

struct tp_wr tp_wr1(uint64_t id, enum ibv_wr_opcode op, uint32_t off, uint32_t len)
{
	struct tp_wr w;

	memset(&w, 0, sizeof(w));
	w.wr_id = id;
	w.opcode = op;
	w.send_flags = IBV_SEND_SIGNALED;
	w.nsge = len ? 1 : 0;
	w.sge[0].off = off;
	w.sge[0].len = len;
	return w;
}

void tp_expect_eq(long long got, long long want, const char *field, const char *what)
{
	if (got != want)
		fail_msg("%s: %s is %lld (0x%llx), expected %lld (0x%llx)", what, field, got,
			 (unsigned long long)got, want, (unsigned long long)want);
}
