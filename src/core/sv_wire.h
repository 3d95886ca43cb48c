/*
 * The wire interface: how the core's requester, responder and completer reach a QP's
 * peer, whatever carries the bytes (shared memory on one host, TCP between hosts).
 *
 * Down: the core describes each message with a neutral header (struct sv_hdr: what
 * RDMAP, or an IB BTH and its extension headers, would say) and its payload as an iovec,
 * and calls the QP's wire through its ops table (struct sv_wire_ops). Up: a wire hands
 * what arrives to the core through three entry points and nowhere else:
 * sv_resp_deliver() (a request, checked and placed by the responder), sv_comp_deliver()
 * (an acknowledgement, NAK, RNR NAK, read or atomic response, matched by the completer to
 * the WQE it answers), and sv_comp_peer_gone() (nothing outstanding will be answered).
 * No wire decides verbs semantics; the core never touches a socket, a ring or another
 * process's memory.
 *
 * Locks a wire runs under (the core takes them, docs/architecture.md has the order):
 * qp->rx_busy (the responder: one consumer of what arrives) and qp->sq.lock (the
 * requester). Ops marked "sq.lock" are called with the send queue's lock held and must
 * not block, sleep or make an unbounded copy.
 */
#ifndef SV_WIRE_H
#define SV_WIRE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

struct sv_qp;
struct sv_send_wqe;

/* What a message asks (requests) or answers. */
enum sv_op {
	SV_OP_SEND = 1,    /* payload into a receive WQE (with immediate: flags SV_F_IMM) */
	SV_OP_WRITE,       /* payload at raddr/rkey (SV_F_IMM on the last: consume a receive) */
	SV_OP_READ_REQ,    /* total bytes at raddr/rkey, answered by READ_RESP segments */
	SV_OP_ATOMIC,      /* 8 bytes at raddr/rkey: compare-and-swap (SV_F_CMP_SWP) or add */
	SV_OP_TERMINATE,   /* the sender found this QP's peer broke the rules (status): Error */
	SV_OP_BAD,         /* a request the wire could not decode: refused as invalid */
	SV_OP_REQ_MAX,     /* requests are below, answers above */
	SV_OP_ACK,         /* every request up to msn was executed */
	SV_OP_NAK,         /* request msn failed at the responder (status: enum ibv_wc_status) */
	SV_OP_RNR,         /* request msn waits for a receive (status: the RNR timer code) */
	SV_OP_READ_RESP,   /* a segment of READ msn's data, at offset */
	SV_OP_ATOMIC_RESP, /* the original value of atomic msn (in value); acknowledges it */
	SV_OP_SEQ_NAK,     /* (SV_WIRE_LOSSY) requests from msn on did not arrive in order:
			    * every one before was executed; send again from msn */
};

enum sv_hdr_flags {
	SV_F_FIRST = 1 << 0,     /* the message's first segment */
	SV_F_LAST = 1 << 1,      /* its last segment */
	SV_F_IMM = 1 << 2,       /* imm is valid (on the last segment) */
	SV_F_SOLICITED = 1 << 3, /* the sender asked for a solicited event */
	SV_F_GRH = 1 << 4,       /* UD: the first 40 payload bytes are a GRH */
	SV_F_CMP_SWP = 1 << 5,   /* ATOMIC: compare and swap (else fetch and add) */
	SV_F_PLACED = 1 << 6,    /* WRITE: the wire placed the data already (direct); only
				  * the immediate is left to deliver */
	SV_F_ABANDONED = 1 << 7, /* the requester gave up on this request (RNR retries ran
				  * out) before it was accepted: drop it, never execute it */
	SV_F_NO_READS = 1 << 8,  /* ACK: says nothing of READs and atomics, which their own
				  * answers complete (the wire read it before those answers were
				  * all in) */
	SV_F_KEEP = 1 << 9,      /* UC, UD SEND: the wire can keep it where it is while no
				  * receive is posted (sv_resp.c hold_unreliable) */
	SV_F_ACK_REQ = 1 << 10,  /* a request's segment within its message that the
				  * requester wants acknowledged once executed (IBA 9.7.5.1:
				  * the A bit; a message's last is acknowledged anyway) */
};

/* One segment of a message, or an answer. */
struct sv_hdr {
	uint8_t op;        /* enum sv_op */
	uint16_t flags;    /* enum sv_hdr_flags */
	uint32_t msn;      /* requests: this segment's sequence number (0: unacknowledged);
			    * answers: the request's */
	uint32_t src_qpn;  /* the sending QP */
	uint32_t dest_qpn; /* UD: the destination QP (connected QPs: their peer) */
	uint32_t imm;      /* immediate data, network byte order */
	uint32_t len;      /* payload bytes of this segment */
	uint64_t total;    /* bytes of the whole message (READ_REQ: to read) */
	uint64_t offset;   /* this segment's offset in the message */
	uint64_t raddr;    /* WRITE, READ_REQ, ATOMIC: the message's remote address */
	uint32_t rkey;     /* ... its key; SEND_WITH_INV: the key to invalidate */
	uint32_t qkey;     /* UD */
	uint32_t status;   /* NAK: enum ibv_wc_status; RNR: timer code; TERMINATE: status */
	uint32_t xrc_srqn; /* requests from an XRC initiator: the SRQ to deliver to */
	uint64_t compare_add, swap; /* ATOMIC */
	uint64_t value;    /* ATOMIC_RESP: the original value; TERMINATE: the async event
			    * the QP raises as it enters Error (0: IBV_EVENT_QP_ACCESS_ERR;
			    * SV_TERM_QUIET: none) */
};

/* TERMINATE's value for an Error that completions alone report: the stream an iWARP QP
 * ran on was closed by its peer (an RNIC's LLP close: the QP's work is flushed, and the
 * CM, not the QP, tells the application). */
#define SV_TERM_QUIET (~(uint64_t)0)

/*
 * What arrived with a request or a read response, for the core to copy out once it has
 * checked where the bytes may go. copy() moves bytes [off, off + len) of the segment's
 * payload into @dst (exactly len bytes across the iovecs) and says whether it could
 * (IBV_WC_SUCCESS, or the status the receive or read fails with).
 */
struct sv_payload {
	enum ibv_wc_status (*copy)(const struct sv_payload *p, uint64_t off,
				   const struct iovec *dst, int n_dst, uint64_t len);
	/* a wire embeds this first in its own description of where the bytes are */
};

/* What a wire is able to do (sv_wire_ops.caps). */
enum sv_wire_caps {
	SV_WIRE_ACKED = 1 << 0,   /* requests are acknowledged by the responder */
	SV_WIRE_RNR = 1 << 1,     /* a SEND with no receive is held and RNR-NAKed (else lost
				   * or an error, per the wire's protocol) */
	SV_WIRE_ATOMICS = 1 << 2, /* ATOMIC requests */
	SV_WIRE_IMM = 1 << 3,     /* RDMA WRITE with immediate */
	SV_WIRE_DIRECT = 1 << 4,  /* the direct op can place a WRITE or READ itself */
	SV_WIRE_ORDERED = 1 << 5, /* segments arrive in order, exactly once */
	SV_WIRE_SEND_IMM = 1 << 6, /* SEND with immediate */
	SV_WIRE_LATE = 1 << 7,    /* the payload is read after send returns (when the wire
				   * writes it out): a message nobody acknowledges completes at
				   * the wire's own ACK once it left, not when handed over */
	SV_WIRE_RINGS = 1 << 8,   /* a QP armed stays armed, and the wire wakes it when work
				   * comes (sv_engine_wake_qp): the progress thread may leave it
				   * out of its passes while it is idle */
	SV_WIRE_LOSSY = 1 << 9,   /* packets may be lost, duplicated or reordered, and the
				   * wire keeps nothing for later (a request the responder
				   * holds is dropped): the core retransmits (go-back-N from
				   * the first unacknowledged msn on the transport timer, a
				   * sequence NAK, an implied NAK, after an RNR NAK's wait), and
				   * the responder NAKs a gap once and answers duplicates */
};

/* Whether a QP's peer can take a message now (sv_wire_ops.reach). */
enum sv_reach {
	SV_REACH_READY,       /* send */
	SV_REACH_WAIT,        /* not yet (the peer has not reached RTR, or is full): later;
			       * the transport retry timer runs */
	SV_REACH_CONNECTING,  /* the connection to the peer is being set up: later, the
			       * timer not yet running (the wire bounds the set-up) */
	SV_REACH_NO_PEER,     /* not attached: the core attaches (connect) with no lock held */
	SV_REACH_UNREACHABLE, /* an attach to it just failed: the message is lost */
	SV_REACH_PARTITION,   /* its P_Key does not match ours: dropped, and counted */
};

/* What a direct placement did (sv_wire_ops.direct). */
enum sv_direct {
	SV_DIRECT_DONE,    /* placed (or failed: *status says) */
	SV_DIRECT_PENDING, /* under way: call again with the same WQE later */
	SV_DIRECT_NO,      /* not possible on this connection: send it as messages */
};

/* One WRITE of a batch the core offers (sv_wire_ops.write_batch). */
struct sv_batch_item {
	struct sv_send_wqe *w; /* the core's: not to be read by the wire */
	uint64_t raddr;
	uint32_t rkey;
	struct iovec iov[4];   /* its local data, checked by the core */
	int n_iov;
	uint64_t len;          /* > 0 */
};

enum { SV_BATCH_MAX = 64 };

struct sv_wire_ops {
	const char *name;
	uint32_t caps;    /* enum sv_wire_caps */
	/* Optional, sq.lock: what the QP's connection carries, when it is less than caps
	 * (negotiated with the peer); the core fails a WR it cannot carry with
	 * IBV_WC_LOC_QP_OP_ERR. */
	uint32_t (*conn_caps)(struct sv_qp *qp);
	uint32_t seg_min; /* a message of at most this many bytes is always one segment
			   * (seg_max is not asked) */

	/* The QP's wire state, and its number: a QPN unique where the wire's peers look
	 * for it. qp_fini undoes it (peers learn that the QP left). */
	int (*qp_init)(struct sv_qp *qp, uint32_t *qpn);
	void (*qp_fini)(struct sv_qp *qp);
	/* Optional: the QP moves to this wire (qp_take, with the number another wire gave it)
	 * or away from it (qp_leave: as qp_fini, the number kept) before RTR, when where its
	 * peer is decides the wire (sv_qp_rewire). No lock; nothing else uses the QP. */
	int (*qp_take)(struct sv_qp *qp, uint32_t qpn);
	void (*qp_leave)(struct sv_qp *qp);
	/* Attributes a peer may look at changed (state, access flags, Q_Key, P_Key, RNR
	 * timer): qp->pub holds them. */
	void (*publish)(struct sv_qp *qp);

	/* Attaches to QP @qpn (blocks): with no data-path lock held (at RTR, ibv_modify_qp
	 * holds qp->lock); *conn for attach. */
	int (*connect)(struct sv_qp *qp, uint32_t qpn, void **conn);
	/* Under rx_busy and sq.lock: makes @conn (of connect, or NULL after error @err) the
	 * QP's peer (RC, UC, XRC) or one of its destinations (UD). Returns a conn to let go
	 * of (one it did not keep, or one it replaced), for release once the locks are
	 * dropped, or NULL. */
	void *(*attach)(struct sv_qp *qp, uint32_t qpn, void *conn, int err);
	/* No lock: lets go of a conn that connect made or attach returned. */
	void (*release)(struct sv_qp *qp, void *conn);
	/* Lets go of every peer (RESET, ERR, destroy): they learn that we left. No lock. */
	void (*disconnect)(struct sv_qp *qp);
	/* RESET: forgets what arrived and was not delivered. Under rx_busy. */
	void (*discard)(struct sv_qp *qp);

	/* sq.lock (or rx_busy; or qp->lock at RTR, before any transmit): whether the peer
	 * (UD: @dest_qpn) can take a message. */
	enum sv_reach (*reach)(struct sv_qp *qp, uint32_t dest_qpn);
	/* sq.lock: the core dropped a message because reach said PARTITION (the peer's
	 * port counts it, bad_pkey_cntr). */
	void (*dropped)(struct sv_qp *qp, uint32_t dest_qpn);
	/* sq.lock (or rx_busy, for answers): the largest segment a message of @h may use;
	 * the core cuts a longer one, each segment with its own msn. */
	uint64_t (*seg_max)(struct sv_qp *qp, const struct sv_hdr *h);
	/* sq.lock or rx_busy: transmits one segment or answer, its payload @iov (len
	 * bytes). 0, or -EAGAIN when the wire is full (nothing was sent: retry later). */
	int (*send)(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov, int n_iov);
	/* Optional: places an RDMA WRITE or READ (@w, a copy of the WQE; its local data @iov)
	 * without the responder's CPU, after the checks the responder published. Called
	 * WITHOUT sq.lock, the transmit claimed (qp->tx_claimed: nobody else transmits, and
	 * the QP's peer stays; sv_qp_sq_lock_unclaimed), so that the copy, however large,
	 * holds no lock. @may_place: no WRITE sent as messages waits for its
	 * acknowledgement (else PENDING: the direct copy could overtake it). */
	enum sv_direct (*direct)(struct sv_qp *qp, struct sv_send_wqe *w, const struct iovec *iov,
				 int n_iov, uint64_t total, bool may_place,
				 enum ibv_wc_status *status);
	/* Optional, sq.lock: gives up a direct placement left PENDING (flush, reset). */
	void (*direct_abandon)(struct sv_qp *qp);
	/* Optional, sq.lock: whether a run of plain RDMA WRITEs whose first carries
	 * @first_len bytes could go as a batch (write_batch) now. Cheap: asked first. */
	bool (*batch_ready)(struct sv_qp *qp, uint64_t first_len);
	/* Optional: carries a run of plain RDMA WRITEs at once, called like direct (no
	 * lock, the transmit claimed). Returns how many of the first it took (0: none, the
	 * core sends them one by one); *acked: they wait for the responder's
	 * acknowledgement (msn first_msn + i), else they are placed. @may_place: no earlier
	 * WRITE waits for its acknowledgement. */
	uint32_t (*write_batch)(struct sv_qp *qp, struct sv_batch_item *items, uint32_t n,
				uint32_t first_msn, bool may_place, bool *acked);
	/* Tells the responder that the requester gave up on @msn (RNR retries ran out). */
	void (*abandon)(struct sv_qp *qp, uint32_t msn);

	/* Optional, no lock held: after the core transmitted under sq.lock, the system
	 * calls the wire put off until the lock was dropped (waking a sleeping peer). */
	void (*flush)(struct sv_qp *qp);
	/* Optional, sq.lock: the end of a transmit (sv_qp_tx_locked): the packets the wire
	 * held back to send in one system call go now (they point at WQEs' data, which
	 * stays the application's until they complete). */
	void (*tx_flush)(struct sv_qp *qp);

	/* Moves what arrived into the core (sv_resp_deliver, sv_comp_deliver), at most a
	 * budget's worth; takes rx_busy itself (returns 0 if another thread holds it). */
	int (*poll)(struct sv_qp *qp);
	/* The progress thread is about to sleep: true if nothing is waiting and the wire
	 * will wake it (@assist: help with a peer's copy counts as work). */
	bool (*arm)(struct sv_qp *qp, bool assist);
	void (*disarm)(struct sv_qp *qp);
	/* Optional, the progress thread: the application polls this QP and moves it itself;
	 * stop watching what its polls read until the next arm (sv_engine_park). */
	void (*park)(struct sv_qp *qp);
	/* Optional, a far wire's: @qp (UD) is the process's QP1 for the IB CM, or (@on
	 * false) no more: 0, -EBUSY (another QP is), -ENODEV (no port). */
	int (*gsi)(struct sv_qp *qp, bool on);
	/* ... and its process listens on IB CM service @service_id (or no more): 0,
	 * -EADDRINUSE (another process does), -ENOSPC. */
	int (*cm_listen)(struct sv_qp *qp, uint64_t service_id, bool on);
	/* Optional, any thread: a descriptor of the QP's own that turns readable when the
	 * peer's data comes (a socket), for a thread about to sleep on a completion channel
	 * to wait on as well (then moving the QP itself); -1 if none now. Only a number:
	 * the wire may close it meanwhile (the waiter then wakes for its channel alone). */
	int (*wait_fd)(struct sv_qp *qp);
	/* Optional: work the wire does for its peers on the progress thread (copy assist).
	 * Returns how much was done. */
	int (*assist)(struct sv_qp *qp);
	/* Optional: the peer, if it is a QP of this process that a poller waiting for our
	 * answers should move too (NULL: none). No lock held. */
	struct sv_qp *(*local_peer)(struct sv_qp *qp); /* pinned: sv_engine_unpin_qp */
	/* Work that waits for time or for the wire (a peer that left, to drain). */
	bool (*needs_timer)(struct sv_qp *qp);
	int (*timers)(struct sv_qp *qp);
	/* Packets peers dropped for a P_Key that did not match this QP's (the port's
	 * bad_pkey_cntr sums them). */
	uint32_t (*bad_pkeys)(struct sv_qp *qp);

	/* Optional: UD multicast. Membership of group @mgid (attach twice: 0; detach what is
	 * not attached: -EINVAL), how many groups a QP is in, and the QPNs of a group's
	 * members (at most @max; -errno). members may block: no lock is held. A wire
	 * between hosts joins the group on the link of interface @ifindex (SV_MCAST_IF_ALL:
	 * of every interface; 0: none, the members on this host only); others ignore it. */
	int (*mcast_attach)(struct sv_qp *qp, const union ibv_gid *mgid, int ifindex);
	int (*mcast_detach)(struct sv_qp *qp, const union ibv_gid *mgid);
	int (*mcast_count)(struct sv_qp *qp);
	int (*mcast_members)(struct sv_qp *qp, const union ibv_gid *mgid, uint32_t *qpns, int max);
};

/* --- up: what a wire calls in the core ---------------------------------------------------- */

enum sv_rx { SV_RX_CONSUMED, SV_RX_HOLD }; /* HOLD: keep it, deliver it again later */

/* Under rx_busy: a request (op < SV_OP_REQ_MAX) for the responder. */
enum sv_rx sv_resp_deliver(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p);
/* The responder's checks of a remote access to our memory (key, PD, access flags,
 * bounds, the QP's access flags; with @pages, that the pages are there): true and *va
 * if @need (IBV_ACCESS_REMOTE_*) may touch [addr, addr + len). What a wire places for a
 * peer on its own (copy assist) passes here first (without @pages when the kernel
 * copies: it refuses what is not mapped). Under rx_busy. */
bool sv_resp_access(struct sv_qp *qp, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
		    bool pages, uint64_t *va);
/* Under rx_busy: whether the responder would execute a request now, with nothing of its
 * own to do first (the QP past INIT and not failing, attached, no answer pending). A wire
 * that answers a request without the core (iWARP's zero-length Read: no memory is
 * read, no key checked) asks first. */
bool sv_resp_ready(struct sv_qp *qp);
/* Under rx_busy, at the end of a poll: acknowledgements and answers still owed go out. */
void sv_resp_flush(struct sv_qp *qp);
/* (sv_resp_owes(), in sv_obj.h: whether the responder still owes an answer, for a poll
 * that found nothing to skip sv_resp_flush.) */

/* Under rx_busy: an answer for the completer. HOLD while a claimed copy has the send
 * queue (what it answers may not be marked sent yet): deliver it again later. */
enum sv_rx sv_comp_deliver(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p);
/* Under rx_busy and sq.lock: the peer is gone; nothing outstanding will be answered. */
void sv_comp_peer_gone(struct sv_qp *qp);

/* Whether completions the application has not taken wait in @qp's send or receive CQ:
 * it has yet to act on what came, and what it posts next may carry what the wire
 * holds back meanwhile (sv_cq.c). */
bool sv_cq_waiting_for(struct sv_qp *qp);

/* What the two ends of a stream-carried connection agreed before it reached the wire
 * (rdma_cm's MPA exchange; sv_wire_adopt_stream): MPA CRC, RFC 7306, RFC 6581's IRD and
 * ORD, and whether this end is the passive one, which sends nothing before the
 * initiator's first FPDU (RFC 5044 §7.1). */
struct sv_stream {
	bool crc, ext;
	uint16_t ird, ord;
	bool peer_first;
};

#endif
