/*
 * The iWARP wire's receive engine: FPDUs from the TCP stream, split anywhere, each
 * checked before a byte of it is placed, then handed to the core (requests to the
 * responder, Read and Atomic Responses to the completer) in the core's neutral form.
 *
 * Headers and small payloads come through a staging buffer (one recv takes many small
 * FPDUs); a payload is read from the socket straight into the memory the responder (or
 * the completer) checked and chose, in the core's copy callback. An FPDU is delivered
 * only once all its bytes are in (staged, or in the socket: FIONREAD), so that the copy
 * never waits; its CRC is checked as its bytes pass.
 */
#include "wire/iwarp/iw_wire.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sock_diag.h>

#include "core/sv_engine.h"
#include "core/sv_mr.h"
#include "core/sv_path.h"
#include "util/sv_app.h"
#include "util/sv_log.h"
#include "wire/iwarp/iw_conn.h"

void iw_rx_reset(struct iw_qp *iq)
{
	iq->st_off = iq->st_len = 0;
	iq->rx_msn = 0;
	for (int i = 0; i < IW_QN_MAX; i++)
		iq->rx_ddp_msn[i] = 1;
	iq->rx_mo = 0;
	iq->rx_in_write = false;
	iq->rx_write_bytes = 0;
	iq->ird_head = iq->ird_tail = 0;
	iq->mpa_len = 0;
	iq->rx_last_op = 0;
	iq->rx_last_hdr_len = 0;
	atomic_store(&iq->eof, false);
	atomic_store(&iq->goodbye, false);
	iq->bye_placed = 0;
}

/* The FPDU being delivered: where its bytes are, and its CRC so far. */
struct iw_pl {
	struct sv_payload p; /* first: the core's view */
	struct iw_qp *iq;
	uint32_t cursor;     /* stage offset of the next unconsumed byte */
	uint32_t plen;       /* payload bytes */
	uint32_t done;       /* payload bytes consumed */
	uint32_t crc;        /* CRC on: over what was consumed, unless ... */
	bool checked;        /* ... the whole FPDU was in the stage, its CRC checked */
	bool failed;         /* the socket failed under the copy */
};

static int sock_fd(struct iw_qp *iq)
{
	return atomic_load(&iq->fd);
}

/* Reads exactly @n bytes spread over @v from the socket, which holds them already
 * (FIONREAD said so): bounded, should TCP hold back what it announced. */
static bool read_all(int fd, struct iovec *v, int n_v, size_t n)
{
	while (n > 0) {
		ssize_t r = sv_app_readv(fd, v, n_v);

		if (r == 0)
			return false;
		if (r < 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			if (errno == EINTR)
				continue;
			if ((errno != EAGAIN && errno != EWOULDBLOCK) || poll(&p, 1, 1000) <= 0)
				return false;
			continue;
		}
		n -= (size_t)r;
		while (r > 0 && n_v > 0) {
			if ((size_t)r >= v->iov_len) {
				r -= (ssize_t)v->iov_len;
				v++;
				n_v--;
			} else {
				v->iov_base = (char *)v->iov_base + r;
				v->iov_len -= (size_t)r;
				r = 0;
			}
		}
	}
	return true;
}

/* Consumes @len payload bytes into @dst (NULL: discarded), staged ones first. */
static bool take(struct iw_pl *pl, const struct iovec *dst, int n_dst, uint64_t len)
{
	struct iw_qp *iq = pl->iq;
	uint64_t staged = iq->st_len - pl->cursor, off = 0;
	unsigned char scratch[4096];
	int i = 0;
	size_t in = 0; /* bytes of dst[i] filled */

	if (staged > len)
		staged = len;
	/* From the stage. */
	while (off < staged) {
		size_t k = staged - off;

		if (dst) {
			if (dst[i].iov_len - in < k)
				k = dst[i].iov_len - in;
			sv_copy_to_app((char *)dst[i].iov_base + in, iq->stage + pl->cursor + off, k);
		}
		if (iq->crc && !pl->checked)
			pl->crc = iw_crc_update(pl->crc, iq->stage + pl->cursor + off, k);
		off += k;
		if (dst && (in += k) == dst[i].iov_len) {
			i++;
			in = 0;
		}
	}
	pl->cursor += (uint32_t)staged;
	/* The rest straight from the socket into its place. */
	while (off < len) {
		struct iovec v[SV_IOV_MAX];
		int n = 0;
		uint64_t want = 0;

		if (dst) {
			for (int j = i; j < n_dst && want < len - off && n < SV_IOV_MAX; j++) {
				size_t k = dst[j].iov_len - (j == i ? in : 0);

				if (k > len - off - want)
					k = len - off - want;
				v[n].iov_base = (char *)dst[j].iov_base + (j == i ? in : 0);
				v[n].iov_len = k;
				want += k;
				n++;
			}
		} else {
			want = len - off < sizeof(scratch) ? len - off : sizeof(scratch);
			v[0] = (struct iovec){ scratch, want };
			n = 1;
		}
		{
			struct iovec c[SV_IOV_MAX];

			memcpy(c, v, (size_t)n * sizeof(v[0]));
			if (!read_all(sock_fd(iq), c, n, want)) {
				pl->failed = true;
				return false;
			}
		}
		if (iq->crc)
			for (int j = 0; j < n; j++)
				pl->crc = iw_crc_update(pl->crc, v[j].iov_base, v[j].iov_len);
		off += want;
		if (dst) {
			/* advance i/in past want bytes */
			uint64_t w = want;

			while (w > 0) {
				size_t k = dst[i].iov_len - in;

				if (k > w)
					k = w;
				in += k;
				w -= k;
				if (in == dst[i].iov_len) {
					i++;
					in = 0;
				}
			}
		}
	}
	pl->done += (uint32_t)len;
	return true;
}

/* The core's copy callback: the payload, in order, into where the core checked. */
static enum ibv_wc_status copy(const struct sv_payload *p, uint64_t off, const struct iovec *dst,
			       int n_dst, uint64_t len)
{
	struct iw_pl *pl = (struct iw_pl *)p;

	/* A peer's header may claim more than its FPDU carries: never past it. */
	if (off != pl->done || len > pl->plen - pl->done)
		return IBV_WC_LOC_LEN_ERR;
	return take(pl, dst, n_dst, len) ? IBV_WC_SUCCESS : IBV_WC_LOC_QP_OP_ERR;
}

/* Compacts the stage and reads what the socket has. >0: bytes; 0: nothing now; <0: the
 * connection ended (-errno; 0 bytes read is -ECONNRESET). */
static int refill(struct iw_qp *iq)
{
	ssize_t n;

	if (iq->st_off) {
		memmove(iq->stage, iq->stage + iq->st_off, iq->st_len - iq->st_off);
		iq->st_len -= iq->st_off;
		iq->st_off = 0;
	}
	if (iq->st_len >= IW_STAGE)
		return 0;
	n = recv(sock_fd(iq), iq->stage + iq->st_len, IW_STAGE - iq->st_len, MSG_DONTWAIT);
	if (n > 0) {
		/* Less than asked: the socket held no more (what comes meanwhile, the next
		 * poll reads). */
		iq->rx_dry = (size_t)n < IW_STAGE - iq->st_len;
		iq->st_len += (uint32_t)n;
		return (int)n;
	}
	if (n == 0)
		return -ECONNRESET; /* the end of the stream */
	if (errno == ECONNRESET)
		return -EPIPE;      /* reset: not a clean end */
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return -errno;
}

/*
 * Whether the socket, holding @q bytes, has room for @rest more of an FPDU. Its receive
 * buffer counts the kernel's overhead per packet as well as the payload (on a veth,
 * 3.5 KB of payload once filled 128 KiB of it), and TCP advertises only part of what is
 * free: the rest must fit, at the overhead per byte of what is queued now (at least 2),
 * into half the free space. Unknown: no.
 */
static bool room_for(int fd, uint64_t rest, uint32_t q)
{
	uint32_t mi[SK_MEMINFO_VARS];
	socklen_t len = sizeof(mi);
	uint64_t free_bytes, per = 2;

	if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mi, &len) < 0 ||
	    len < sizeof(uint32_t) * (SK_MEMINFO_RCVBUF + 1))
		return false;
	free_bytes = mi[SK_MEMINFO_RCVBUF] > mi[SK_MEMINFO_RMEM_ALLOC]
		     ? mi[SK_MEMINFO_RCVBUF] - mi[SK_MEMINFO_RMEM_ALLOC] : 0;
	if (q && (mi[SK_MEMINFO_RMEM_ALLOC] + q - 1) / q > per)
		per = (mi[SK_MEMINFO_RMEM_ALLOC] + q - 1) / q;
	return free_bytes / 2 >= rest * per;
}

/* Moves what the socket holds of the FPDU at st_off (@need bytes) to the stage. */
static int drain(struct iw_qp *iq, uint32_t need)
{
	uint32_t have;
	ssize_t n;

	if (iq->st_off) {
		memmove(iq->stage, iq->stage + iq->st_off, iq->st_len - iq->st_off);
		iq->st_len -= iq->st_off;
		iq->st_off = 0;
	}
	have = iq->st_len;
	if (have >= need)
		return 0;
	n = recv(sock_fd(iq), iq->stage + have, need - have, MSG_DONTWAIT);
	if (n > 0) {
		iq->st_len += (uint32_t)n;
		return 0;
	}
	if (n == 0)
		return -ECONNRESET;
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
}

/*
 * Whether the whole FPDU (@need bytes from st_off) can be read without waiting. A large
 * one is read from the socket into its place once all of it is there; should the socket
 * have no room for the rest of it, its bytes move to the stage instead, so that TCP's
 * window opens and the rest can come (waiting would wait for ever, the window closed),
 * and the FPDU is delivered from the stage. A connection found ended goes down (false).
 */
static bool all_in(struct iw_qp *iq, uint32_t need)
{
	uint32_t staged = iq->st_len - iq->st_off;
	int q = 0, r;

	if (staged >= need)
		return true;
	if (need <= IW_STAGE) {
		if (iq->rx_dry)
			return false;
		r = refill(iq);
		if (r < 0) {
			iw_link_down(iq, "the connection ended inside an FPDU");
			return false;
		}
		return iq->st_len - iq->st_off >= need;
	}
	if (ioctl(sock_fd(iq), FIONREAD, &q) < 0)
		return false;
	if ((uint64_t)staged + (uint64_t)q >= need)
		return true;
	if (need > IW_STAGE_CAP || room_for(sock_fd(iq), need - staged - (uint64_t)q, (uint32_t)q))
		return false;
	r = drain(iq, need);
	if (r < 0) {
		iw_link_down(iq, "the connection ended inside an FPDU");
		return false;
	}
	return iq->st_len - iq->st_off >= need;
}

/* The peer broke the protocol: Terminate (@t, about the header at st_off of @hl bytes),
 * and the QP enters Error. */
static void violation(struct iw_qp *iq, struct iw_term t, uint32_t hl)
{
	uint32_t n = hl;

	if (n > IW_TERM_MAX)
		n = IW_TERM_MAX;
	if (iq->st_len - iq->st_off < n)
		n = iq->st_len - iq->st_off;
	iw_tx_terminate(iq, &t, iq->stage + iq->st_off, n);
	iw_link_down(iq, "protocol violation by the peer");
}

/*
 * The request of ours a Terminate (staged, @ih) names by the DDP header it carries (RFC
 * 5040 §4.8), among those sent lately; NULL without one.
 */
static const struct iw_sent *term_names(struct iw_qp *iq, const struct iw_hdr *ih)
{
	const uint8_t *p = iq->stage + iq->st_off + iw_op_info[IW_OP_TERMINATE].hdr_len;
	uint32_t head = atomic_load_explicit(&iq->sent_head, memory_order_acquire);
	bool tagged;
	uint32_t key = 0, qn = 0;
	uint64_t to = 0;

	if (!ih->term_hdr_len || !ih->term_hdr_ddp || ih->payload_len < IW_HDR_TAGGED)
		return NULL;
	p += 2; /* the offending segment's ULPDU_Length */
	tagged = (p[0] & IW_DDP_T) != 0;
	if (!tagged && ih->payload_len < IW_HDR_UNTAGGED)
		return NULL;
	if (tagged) {
		key = iw_get32(p + 2);
		to = iw_get64(p + 6);
	} else {
		qn = iw_get32(p + 6);
		key = iw_get32(p + 10);
	}
	for (uint32_t i = 0; i < IW_SENT && i < head; i++) {
		const struct iw_sent *e = &iq->sent[(head - 1 - i) % IW_SENT];

		if (e->tagged != tagged || e->key != key)
			continue;
		if (tagged ? (to >= e->lo && (to < e->hi || to == e->lo)) : e->qn == qn)
			return e;
	}
	return NULL;
}

/* The core msn of the request a Terminate names; without one, the first not yet known
 * complete. */
static uint32_t culprit(struct iw_qp *iq, const struct iw_hdr *ih)
{
	const struct iw_sent *e = term_names(iq, ih);

	return e ? e->msn : iq->acked_told + 1;
}

/* The peer's goodbye names the last of our Sends it placed (iw_qp.c disconnect): its core
 * msn, or 0. */
static uint32_t bye_placed(struct iw_qp *iq, const struct iw_hdr *ih)
{
	const struct iw_sent *e = term_names(iq, ih);

	return e && !e->tagged && e->qn == IW_QN_SEND ? e->msn : 0;
}

/* The async event and the completion status a Terminate from the peer means. */
static void peer_terminated(struct iw_qp *iq, const struct iw_hdr *ih)
{
	struct sv_qp *qp = iq->qp;
	bool prot = (ih->term_layer == IW_TERM_RDMAP && ih->term_etype == IW_ETYPE_RDMAP_REMOTE_PROT) ||
		    (ih->term_layer == IW_TERM_DDP && ih->term_etype == IW_ETYPE_DDP_TAGGED);
	uint32_t status = prot ? IBV_WC_REM_ACCESS_ERR :
			  ih->term_layer == IW_TERM_DDP ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR;
	struct sv_hdr nak = { .op = SV_OP_NAK, .msn = culprit(iq, ih), .status = status,
			      .src_qpn = iw_peer(iq) };
	struct sv_hdr term = { .op = SV_OP_TERMINATE, .src_qpn = iw_peer(iq),
			       .value = prot ? IBV_EVENT_QP_ACCESS_ERR : IBV_EVENT_QP_FATAL };
	struct iw_pl none = { .p.copy = copy, .iq = iq };

	sv_dbg("iwarp qp %u: Terminate from the peer: layer %u type %u code 0x%02x", iq->qpn,
	       ih->term_layer, ih->term_etype, ih->term_ecode);
	/* The request the peer refused is the first we have not seen complete. */
	(void)sv_comp_deliver(qp, &nak, &none.p);
	(void)sv_resp_deliver(qp, &term, &none.p);
	atomic_store(&iq->term_sent, true); /* RFC 5040 §5.5: the stream is done */
	iw_link_down(iq, NULL);
}

/*
 * RFC 6581 / RFC 5040 §6.5: at most IRD Read Requests and atomics outstanding (their
 * answers not yet handed to TCP). A request taken already (held, delivered again) is
 * not taken twice. False after the Terminate for one past IRD.
 */
static bool ird_admit(struct iw_qp *iq, uint32_t hl, const struct iw_rd *rd)
{
	uint32_t out = iq->ird_tail - iq->ird_head;
	bool again = out && iq->irdq[(iq->ird_tail - 1) % IW_RDQ].msn == rd->msn;

	if (again)
		return true;
	if (out + atomic_load(&iq->ird_unsent) >= iq->ird) {
		violation(iq, (struct iw_term){ IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
						IW_ECODE_RDMAP_STREAM_CATA }, hl);
		return false;
	}
	iq->irdq[iq->ird_tail % IW_RDQ] = *rd;
	iq->ird_tail++;
	return true;
}

/* The core's neutral header of a request FPDU, and the checks of its DDP queue. Returns
 * false (after a Terminate) when the FPDU breaks the protocol. */
static bool request_hdr(struct iw_qp *iq, const struct iw_hdr *ih, uint32_t hl, struct sv_hdr *h)
{
	*h = (struct sv_hdr){ .src_qpn = iw_peer(iq), .dest_qpn = iq->qpn,
			      .msn = iq->rx_msn + 1, .len = ih->payload_len };
	if (!ih->tagged) {
		/* RFC 5041 §5.4/§7: untagged: the queue's next MSN, in order (MO). */
		if (ih->msn != iq->rx_ddp_msn[ih->qn]) {
			violation(iq, (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED,
							IW_ECODE_DDP_U_INV_MSN_RANGE }, hl);
			return false;
		}
		if (ih->mo != (ih->qn == IW_QN_SEND ? iq->rx_mo : 0)) {
			violation(iq, (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED,
							IW_ECODE_DDP_U_INV_MO }, hl);
			return false;
		}
	}
	switch (ih->opcode) {
	case IW_OP_WRITE:
		h->op = SV_OP_WRITE;
		h->flags = (iq->rx_in_write ? 0 : SV_F_FIRST) | (ih->last ? SV_F_LAST : 0);
		h->rkey = ih->stag;
		h->raddr = ih->to;
		h->total = ih->payload_len; /* each FPDU is checked where it lands */
		return true;
	case IW_OP_SEND:
	case IW_OP_SEND_INV:
	case IW_OP_SEND_SE:
	case IW_OP_SEND_SE_INV:
		h->op = SV_OP_SEND;
		h->flags = (ih->mo == 0 ? SV_F_FIRST : 0) | (ih->last ? SV_F_LAST : 0);
		if (ih->opcode == IW_OP_SEND_SE || ih->opcode == IW_OP_SEND_SE_INV)
			h->flags |= SV_F_SOLICITED;
		if (ih->opcode == IW_OP_SEND_INV || ih->opcode == IW_OP_SEND_SE_INV)
			h->rkey = ih->inv_stag;
		h->offset = ih->mo;
		h->total = (uint64_t)ih->mo + ih->payload_len;
		return true;
	case IW_OP_IMM:
	case IW_OP_IMM_SE:
		/* RFC 7306 §4.3: the immediate of the Write just before (if one was), as the
		 * verbs' Write with Immediate reports it: the Write's length. */
		h->op = SV_OP_WRITE;
		h->flags = SV_F_FIRST | SV_F_LAST | SV_F_IMM | SV_F_PLACED |
			   (ih->opcode == IW_OP_IMM_SE ? SV_F_SOLICITED : 0);
		memcpy(&h->imm, &ih->imm, sizeof(h->imm));
		h->total = iq->rx_write_bytes;
		h->len = 0;
		return true;
	case IW_OP_READ_REQ:
		if (!ird_admit(iq, hl, &(struct iw_rd){ .msn = h->msn, .sink_stag = ih->sink_stag,
							.sink_to = ih->sink_to,
							.size = ih->read_size }))
			return false;
		h->op = SV_OP_READ_REQ;
		h->flags = SV_F_FIRST | SV_F_LAST;
		h->rkey = ih->src_stag;
		h->raddr = ih->src_to;
		h->total = ih->read_size;
		h->len = 0;
		return true;
	case IW_OP_ATOMIC_REQ: {
		if (!ird_admit(iq, hl, &(struct iw_rd){ .msn = h->msn,
							.req_id = ih->atomic_req_id, .size = 8 }))
			return false;
		h->op = SV_OP_ATOMIC;
		h->flags = SV_F_FIRST | SV_F_LAST;
		if (ih->atomic_op == IW_ATOMIC_CMP_SWAP) {
			h->flags |= SV_F_CMP_SWP;
			h->compare_add = ih->compare;
			h->swap = ih->add_swap;
		} else {
			h->compare_add = ih->add_swap;
		}
		h->rkey = ih->atomic_stag;
		h->raddr = ih->atomic_to;
		h->total = 8;
		h->len = 0;
		return true;
	}
	default:
		violation(iq, (struct iw_term){ IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
						IW_ECODE_RDMAP_INV_OPCODE }, hl);
		return false;
	}
}

/* After a request FPDU was consumed: the DDP queues move on. */
static void request_done(struct iw_qp *iq, const struct iw_hdr *ih)
{
	iq->rx_msn++;
	if (ih->opcode == IW_OP_WRITE) {
		if (!iq->rx_in_write)
			iq->rx_write_bytes = 0;
		iq->rx_write_bytes += ih->payload_len;
		iq->rx_in_write = !ih->last;
		return;
	}
	if (!ih->tagged) {
		if (ih->qn == IW_QN_SEND) {
			iq->rx_mo = ih->last ? 0 : iq->rx_mo + ih->payload_len;
		}
		if (ih->last)
			iq->rx_ddp_msn[ih->qn]++;
	}
	if (ih->opcode != IW_OP_IMM && ih->opcode != IW_OP_IMM_SE)
		iq->rx_write_bytes = 0;
}

/* A Read or Atomic Response for the requester: it must answer what we asked, exactly
 * where we asked it (RFC 5040 §4.5). */
static bool answer_hdr(struct iw_qp *iq, const struct iw_hdr *ih, uint32_t hl, struct sv_hdr *h)
{
	_Atomic uint32_t *head = ih->opcode == IW_OP_READ_RESP ? &iq->rd_head : &iq->at_head;
	_Atomic uint32_t *tail = ih->opcode == IW_OP_READ_RESP ? &iq->rd_tail : &iq->at_tail;
	struct iw_rd *q = ih->opcode == IW_OP_READ_RESP ? iq->rdq : iq->atq, *rd;
	uint32_t t = atomic_load_explicit(tail, memory_order_relaxed);

	if (t == atomic_load_explicit(head, memory_order_acquire)) {
		violation(iq, (struct iw_term){ IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
						IW_ECODE_RDMAP_INV_OPCODE }, hl);
		return false;
	}
	rd = &q[t % IW_RDQ];
	*h = (struct sv_hdr){ .src_qpn = iw_peer(iq), .msn = rd->msn, .len = ih->payload_len };
	if (ih->opcode == IW_OP_ATOMIC_RESP) {
		/* RFC 7306: it names the request it answers; responses come in order. */
		if (ih->atomic_req_id != rd->req_id || ih->msn != iq->rx_ddp_msn[IW_QN_ATOMIC_RESP]) {
			violation(iq, (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED,
							IW_ECODE_DDP_U_INV_MSN_RANGE }, hl);
			return false;
		}
		h->op = SV_OP_ATOMIC_RESP;
		h->flags = SV_F_FIRST | SV_F_LAST;
		h->value = ih->orig_value;
		return true;
	}
	if (ih->stag != rd->sink_stag) {
		violation(iq, (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_TAGGED,
						IW_ECODE_DDP_T_INV_STAG }, hl);
		return false;
	}
	if (!rd->size && ih->last && ih->to == rd->sink_to) {
		/* Linux siw (6.1, siw_activate_tx) answers a zero-length Read that waited
		 * behind other transmit work with the length and source of the WQE it sent
		 * before (it leaves sge[0] as it was): one last segment, at the sink's offset.
		 * A zero-length Read places nothing: its payload is skipped (finish). Our sink
		 * STags name no memory (iw_tx.c SINK_STAG), so nothing else could take it. */
		h->len = 0;
		h->op = SV_OP_READ_RESP;
		h->flags = SV_F_FIRST | SV_F_LAST;
		h->total = 0;
		return true;
	}
	if (ih->to != rd->sink_to + rd->got || rd->got + ih->payload_len > rd->size ||
	    ih->last != (rd->got + ih->payload_len == rd->size)) {
		violation(iq, (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_TAGGED,
						IW_ECODE_DDP_T_BASE_BOUNDS }, hl);
		return false;
	}
	h->op = SV_OP_READ_RESP;
	h->flags = (rd->got ? 0 : SV_F_FIRST) | (ih->last ? SV_F_LAST : 0);
	h->offset = rd->got;
	h->total = rd->size;
	return true;
}

static void answer_done(struct iw_qp *iq, const struct iw_hdr *ih)
{
	_Atomic uint32_t *tail = ih->opcode == IW_OP_READ_RESP ? &iq->rd_tail : &iq->at_tail;
	struct iw_rd *q = ih->opcode == IW_OP_READ_RESP ? iq->rdq : iq->atq, *rd;
	uint32_t t = atomic_load_explicit(tail, memory_order_relaxed);

	if (ih->opcode == IW_OP_ATOMIC_RESP)
		iq->rx_ddp_msn[IW_QN_ATOMIC_RESP]++;
	rd = &q[t % IW_RDQ];
	rd->got += ih->payload_len;
	if (!ih->last)
		return;
	/* RFC 5040 §5.5: a Read is answered after the Writes before it are placed. */
	if (ih->opcode == IW_OP_READ_RESP &&
	    sv_msn_le(atomic_load(&iq->confirmed), rd->confirms))
		atomic_store(&iq->confirmed, rd->confirms);
	if (!rd->msn)
		atomic_store(&iq->probing, false);
	atomic_store_explicit(tail, t + 1, memory_order_release);
	/* A Read or atomic that waited for the ORD (iw_tx.c wait_for_room) may go now. Only
	 * then: a kick makes the next poll transmit, which sends what answers_wait (iw_qp.c)
	 * kept for the application's next post (the answer to the peer's probe). */
	if (atomic_exchange(&iq->ord_waits, false))
		sv_set_hint(iq->qp->tx_kick, true);
}

/*
 * The placement probes (iw_tx_probe), the peer's and the answers to ours, without the
 * core: a zero-length Read reads no memory and checks no key, so its answer is the
 * wire's to give, once nothing is owed before it (a Read or atomic of the peer's still
 * unanswered: responses go in order, RFC 5040 §5.5) and the responder would execute a
 * request now (sv_resp_ready). Each went through the core's responder and completer,
 * and the answer back through the core's transmit: a third of the cost of a ping-pong's
 * message (two FPDUs more each way, the probe and its answer). @ih is decoded, its
 * FPDU (@need bytes) whole in the stage and its CRC checked. Returns 1 when it took the
 * FPDU, 0 when the general path is to (anything else, or a Read Request the general
 * path will refuse), -EAGAIN when the answer finds no room (the next poll).
 */
static int probe_fast(struct iw_qp *iq, const struct iw_hdr *ih, uint32_t need)
{
	if (ih->opcode == IW_OP_READ_RESP) {
		uint32_t t = atomic_load_explicit(&iq->rd_tail, memory_order_relaxed);
		const struct iw_rd *rd = &iq->rdq[t % IW_RDQ];

		/* Ours (msn 0), exactly where it asked. */
		if (t == atomic_load_explicit(&iq->rd_head, memory_order_acquire) || rd->msn ||
		    rd->size || ih->payload_len || !ih->last || ih->stag != rd->sink_stag ||
		    ih->to != rd->sink_to)
			return 0;
		answer_done(iq, ih);
	} else if (ih->opcode == IW_OP_READ_REQ) {
		if (ih->read_size || ih->msn != iq->rx_ddp_msn[IW_QN_READ_REQ] ||
		    iq->ird_head != iq->ird_tail || atomic_load(&iq->ird_unsent) >= iq->ird ||
		    !sv_resp_ready(iq->qp))
			return 0;
		if (iw_tx_answer_empty_read(iq, ih->sink_stag, ih->sink_to))
			return -EAGAIN;
		iq->rx_ddp_msn[IW_QN_READ_REQ]++; /* as request_done; no core msn taken */
		iq->rx_write_bytes = 0;
	} else {
		return 0;
	}
	iq->st_off += need;
	if (iq->st_off == iq->st_len)
		iq->st_off = iq->st_len = 0;
	return 1;
}

/* The rest of the FPDU after the core took what it wanted: payload it did not take,
 * pad, and CRC (checked when negotiated: RFC 5044 §6). */
static bool finish(struct iw_pl *pl, const struct iw_hdr *ih)
{
	struct iw_qp *iq = pl->iq;
	uint32_t pad = iw_pad(ih->ulpdu_len);
	unsigned char tail[8];
	struct iovec v = { tail, pad + IW_CRC_BYTES };
	uint32_t got, want;

	if (pl->done < pl->plen && !take(pl, NULL, 0, pl->plen - pl->done))
		return false;
	/* pad and CRC: staged, or from the socket */
	got = iq->st_len - pl->cursor;
	if (got > pad + IW_CRC_BYTES)
		got = pad + IW_CRC_BYTES;
	memcpy(tail, iq->stage + pl->cursor, got);
	pl->cursor += got;
	if (got < pad + IW_CRC_BYTES) {
		v.iov_base = tail + got;
		v.iov_len = pad + IW_CRC_BYTES - got;
		if (!read_all(sock_fd(iq), &v, 1, v.iov_len)) {
			pl->failed = true;
			return false;
		}
	}
	iq->st_off = pl->cursor;
	if (iq->st_off == iq->st_len)
		iq->st_off = iq->st_len = 0;
	if (!iq->crc || pl->checked)
		return true;
	want = iw_crc_final(iw_crc_update(pl->crc, tail, pad));
	got = iw_crc_get(tail + pad);
	if (got != want) {
		struct iw_term t = { IW_TERM_LLP, IW_ETYPE_MPA, IW_ECODE_MPA_CRC };

		sv_dbg("iwarp qp %u: bad CRC (0x%08x, should be 0x%08x)", iq->qpn, got, want);
		iw_tx_terminate(iq, &t, NULL, 0);
		iw_link_down(iq, "bad CRC");
		return false;
	}
	return true;
}

/* The CRC the FPDU at @f (@need bytes, its own CRC last) should carry (RFC 5044 §6). */
static uint32_t fpdu_crc(const uint8_t *f, uint32_t need)
{
	return iw_crc_final(iw_crc_update(iw_crc_init(), f, need - IW_CRC_BYTES));
}

int iw_rx_ack_sends(struct iw_qp *iq)
{
	uint32_t upto = iw_tx_ackable(iq);
	struct sv_hdr ack = { .op = SV_OP_ACK, .msn = upto };

	if (!upto)
		return 0;
	/* (Read only now: the QP's attributes are set before there is anything to ack.) */
	ack.src_qpn = iq->qp->attr.dest_qp_num;
	if (sv_comp_deliver(iq->qp, &ack, NULL) != SV_RX_CONSUMED)
		return 0;
	iq->acked_told = upto;
	return 1;
}

/*
 * The peer's placement probe right behind a Send in the stage: its FPDU's length when
 * whole and its CRC right, decoded into @ih, else 0. Its answer goes before the Send's
 * receive completes (rx_one), so that a reply the application posts at once follows
 * it on the wire: on a thread that polls while another runs this pass, the reply could
 * otherwise overtake the answer, and the peer see its Send complete after our reply.
 */
static uint32_t probe_behind(struct iw_qp *iq, uint32_t off, struct iw_hdr *ih)
{
	struct iw_term term;
	uint32_t avail = iq->st_len - off, need;
	int hl = iw_hdr_decode(iq->stage + off, avail, iq->ext, ih, &term);

	if (hl <= 0 || ih->opcode != IW_OP_READ_REQ || ih->read_size)
		return 0;
	need = iw_fpdu_len(ih->ulpdu_len);
	if (need > avail)
		return 0;
	if (iq->crc && iw_crc_get(iq->stage + off + need - IW_CRC_BYTES) !=
			       fpdu_crc(iq->stage + off, need))
		return 0; /* the general path refuses it */
	return need;
}

/* One FPDU: 1 delivered, 0 nothing to do now (or held), -1 the connection went down.
 * *placing: whether this poll holds the place lock (sv_mr_place_begin), which is taken
 * before the first delivery: a poll that finds nothing takes no lock. */
static int rx_one(struct iw_qp *iq, bool *placing)
{
	struct sv_qp *qp = iq->qp;
	struct iw_hdr ih;
	struct iw_term term;
	struct sv_hdr h;
	uint32_t need;
	int hl, r;
	enum sv_rx res;
	bool checked;

	for (;;) {
		hl = iw_hdr_decode(iq->stage + iq->st_off, iq->st_len - iq->st_off, iq->ext, &ih,
				   &term);
		if (hl != -EAGAIN)
			break;
		/* A ping-pong's message is one read: a second read would only find the socket
		 * empty, on the latency path. */
		if (iq->rx_dry)
			return 0;
		r = refill(iq);
		if (r == -ECONNRESET && iq->st_len == iq->st_off) {
			/* At an FPDU's boundary: the peer left (iw_link_closed, once what was
			 * written is acknowledged). */
			atomic_store(&iq->eof, true);
			return -1;
		}
		if (r < 0) {
			iw_link_down(iq, r == -ECONNRESET ? "the peer closed inside an FPDU"
							   : "the connection failed");
			return -1;
		}
		if (r == 0)
			return 0;
	}
	if (hl < 0) {
		/* The decoder refuses as soon as it knows (4 bytes may do): the Terminate
		 * copies the offending header as far as it came (violation clips it). */
		violation(iq, term, IW_TERM_MAX);
		return -1;
	}
	need = iw_fpdu_len(ih.ulpdu_len); /* header and payload, pad, CRC */
	if (!all_in(iq, need))
		return 0;
	/* RFC 5044 §6: an FPDU whose CRC is wrong reaches neither DDP nor the consumer. One
	 * that is all in the stage is checked before it is delivered (else a Send would
	 * complete first); a larger one, placed from the socket, as its bytes pass
	 * (finish). */
	checked = iq->crc && iq->st_len - iq->st_off >= need;
	if (checked) {
		const uint8_t *f = iq->stage + iq->st_off;
		uint32_t want = fpdu_crc(f, need);

		if (iw_crc_get(f + need - IW_CRC_BYTES) != want) {
			struct iw_term t = { IW_TERM_LLP, IW_ETYPE_MPA, IW_ECODE_MPA_CRC };

			sv_dbg("iwarp qp %u: bad CRC (0x%08x, should be 0x%08x)", iq->qpn,
			       iw_crc_get(f + need - IW_CRC_BYTES), want);
			iw_tx_terminate(iq, &t, NULL, 0);
			iw_link_down(iq, "bad CRC");
			return -1;
		}
	}
	if (ih.opcode == IW_OP_TERMINATE) {
		if (ih.term_layer == IW_TERM_LLP && ih.term_etype == IW_ETYPE_MPA &&
		    ih.term_ecode == IW_ECODE_MPA_CLOSED) {
			/* The peer's goodbye: its QP left (iw_link_closed). */
			iq->bye_placed = bye_placed(iq, &ih);
			atomic_store(&iq->goodbye, true);
			atomic_store(&iq->eof, true);
			iq->st_off = iq->st_len = 0;
			return -1;
		}
		peer_terminated(iq, &ih);
		return -1;
	}
	if ((ih.opcode == IW_OP_READ_REQ || ih.opcode == IW_OP_READ_RESP) &&
	    iq->st_len - iq->st_off >= need) {
		r = probe_fast(iq, &ih, need);
		if (r)
			return r > 0 ? 1 : 0;
	}
	if (!*placing) {
		sv_mr_place_begin(); /* a deregistration waits for what we place */
		*placing = true;
	}
	{
		struct iw_pl pl = { .p.copy = copy, .iq = iq, .cursor = iq->st_off + (uint32_t)hl,
				    .plen = ih.payload_len, .checked = checked };
		bool request = ih.opcode != IW_OP_READ_RESP && ih.opcode != IW_OP_ATOMIC_RESP;

		if (iq->crc && !checked)
			pl.crc = iw_crc_update(iw_crc_init(), iq->stage + iq->st_off, (size_t)hl);
		struct iw_hdr probe;
		uint32_t probe_need;
		bool defer_last;

		if (request ? !request_hdr(iq, &ih, (uint32_t)hl, &h)
			    : !answer_hdr(iq, &ih, (uint32_t)hl, &h))
			return -1;
		/* A large FPDU that ends a Send or a Read Response is placed from the socket
		 * before its CRC is read: what it ends (the receive's or the READ's completion)
		 * comes after the CRC, as a segment of its own, empty (RFC 5044 §6). */
		defer_last = iq->crc && (h.flags & SV_F_LAST) && iq->st_len - iq->st_off < need &&
			     (h.op == SV_OP_SEND || h.op == SV_OP_READ_RESP);
		/* A Send with the peer's probe behind it: placed, then the probe answered,
		 * then the receive completed (probe_behind). */
		probe_need = h.op == SV_OP_SEND && (h.flags & SV_F_LAST) && checked
				     ? probe_behind(iq, iq->st_off + need, &probe)
				     : 0;
		defer_last |= probe_need > 0;
		if (defer_last)
			h.flags &= (uint16_t)~SV_F_LAST;
		if (request) {
			/* What the peer confirmed before this request completes first: the
			 * answer to our probe came ahead of it, as an ACK would (iw_wire.h). */
			(void)iw_rx_ack_sends(iq);
			iq->rx_last_op = ih.opcode;
			iq->rx_last_hdr_len = (uint32_t)hl < IW_TERM_MAX ? (uint32_t)hl
									 : IW_TERM_MAX;
			memcpy(iq->rx_last_hdr, iq->stage + iq->st_off, iq->rx_last_hdr_len);
			res = sv_resp_deliver(qp, &h, &pl.p);
		} else if (h.msn) {
			res = sv_comp_deliver(qp, &h, &pl.p);
		} else {
			res = SV_RX_CONSUMED; /* our own probe's answer (iw_tx_probe) */
		}
		if (res == SV_RX_HOLD) {
			if (!pl.done)
				return 0; /* delivered again at the next poll */
			sv_err("iwarp qp %u: a held FPDU was partly consumed", iq->qpn);
		}
		if (!finish(&pl, &ih)) {
			if (pl.failed)
				iw_link_down(iq, "the connection failed");
			return -1;
		}
		if (probe_need && probe_fast(iq, &probe, probe_need) < 0)
			sv_dbg("iwarp qp %u: no room to answer a probe now", iq->qpn);
		if (defer_last && atomic_load(&iq->link) == IW_LINK_UP) {
			struct iw_pl none = { .p.copy = copy, .iq = iq };

			h.flags = (uint16_t)((h.flags & ~SV_F_FIRST) | SV_F_LAST);
			h.offset += h.len;
			h.len = 0;
			if (request) {
				h.msn++;
				(void)sv_resp_deliver(qp, &h, &none.p);
				iq->rx_msn++; /* the empty segment's msn */
			} else if (h.msn) {
				(void)sv_comp_deliver(qp, &h, &none.p);
			}
		}
		if (request)
			request_done(iq, &ih);
		else
			answer_done(iq, &ih);
	}
	return 1;
}

int iw_rx_poll(struct iw_qp *iq, int budget)
{
	bool placing = false;
	int n = 0;

	iq->rx_dry = false;
	while (n < budget && atomic_load(&iq->link) == IW_LINK_UP && !atomic_load(&iq->eof)) {
		int r = rx_one(iq, &placing);

		if (r <= 0)
			break;
		n++;
	}
	if (placing)
		sv_mr_place_end();
	if (n && atomic_load_explicit(&iq->nudge_due, memory_order_relaxed))
		atomic_store_explicit(&iq->nudge_due, false, memory_order_relaxed); /* it spoke */
	if (n && atomic_load_explicit(&iq->peer_first, memory_order_relaxed)) {
		/* The initiator's first FPDU came: what this passive side queued may go. */
		atomic_store_explicit(&iq->peer_first, false, memory_order_release);
		sv_set_hint(iq->qp->tx_kick, true);
		sv_engine_kick();
	}
	return n;
}

int iw_rx_reply(struct iw_qp *iq, struct iw_params *got)
{
	for (;;) {
		int n = iw_conn_take_reply(iq->stage + iq->st_off, iq->st_len - iq->st_off, got);

		if (n > 0) {
			iq->st_off += (uint32_t)n; /* what follows is the peer's first FPDU */
			if (iq->st_off == iq->st_len)
				iq->st_off = iq->st_len = 0;
			return 1;
		}
		if (n != -EAGAIN)
			return n;
		n = refill(iq);
		if (n <= 0)
			return n;
	}
}
