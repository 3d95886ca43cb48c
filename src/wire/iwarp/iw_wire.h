/*
 * The iWARP wire: RDMA between hosts over TCP, as RFC 5040 (RDMAP), RFC 5041 (DDP) and
 * RFC 5044 (MPA) with RFC 6581 and RFC 7306 specify it (docs/architecture.md, "The
 * iWARP wire").
 *
 * One TCP connection per connected QP. The core's segments are FPDUs one to one: the
 * requester's segment of a Send or a Write is one FPDU, each answer of the responder is
 * one (a Read Response segment) or none (iWARP has no acknowledgements).
 *
 *   iw_qp.c    the ops table's QP side: QPNs, the connection's life (dial, expect,
 *              adopt, drop), reach, arm, timers
 *   iw_tx.c    the transmit queue: the core's segments and answers as FPDUs, written
 *              to the socket with one sendmsg after the core's lock is dropped; the
 *              local acknowledgements (a message is complete once TCP has it)
 *   iw_link.c  the connection's states, and its end
 *   iw_rx.c    the receive engine: FPDUs from the socket, checked, placed through the
 *              core (payload read straight into the target memory), Terminate
 *
 * Locks (below the core's: docs/architecture.md has the order): txq_lock (a spinlock:
 * the queue's producers, the requester under sq.lock and the responder under rx_busy)
 * and tx_io (one writer to the socket at a time; never waited for: a busy writer is
 * left to write what was queued).
 */
#ifndef IW_WIRE_H
#define IW_WIRE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/sv_obj.h"
#include "core/sv_wire.h"
#include "wire/iwarp/iw_proto.h"

extern const struct sv_wire_ops sv_wire_iwarp;

enum {
	IW_TXQ = 512,       /* FPDUs queued per connection */
	IW_TX_IOVS = 2048,  /* their payload pieces */
	IW_STAGE = 4096,    /* receive staging: headers and small payloads, a recv at a time */
	IW_STAGE_CAP = 65536 + 128, /* ... and the whole of a large FPDU when the socket
				     * cannot hold it (iw_rx.c, all_in) */
	IW_RDQ = 256,       /* Read Requests and atomics outstanding, each way */
	IW_FPDU_PAYLOAD = 65472, /* the largest payload of one FPDU between softverbs hosts */
	IW_TX_STAGE = 512 * 1024, /* the FPDUs being written, copied (iw_tx.c, stage) */
	IW_TX_SMALL = 2048, /* an FPDU up to this size is copied there whatever the CRC */
	IW_TERM_MAX = IW_TERM_HDRS_MAX, /* a Terminate's payload: the offending FPDU's start */
};

/* The connection's state (iw_link_name[]). */
enum iw_link {
	IW_LINK_NONE,      /* no connection (RESET, or before RTR) */
	IW_LINK_DIALING,   /* we connected and sent the MPA request; the reply is awaited */
	IW_LINK_EXPECTING, /* the peer connects to us (the lower QPN, or the GID order) */
	IW_LINK_REDIAL,    /* the connection broke before the reply (the host's port changed
			    * hands): dial again (timers) */
	IW_LINK_UP,        /* FPDUs flow */
	IW_LINK_DOWN,      /* closed, reset or terminated: nothing more goes or comes */
};
extern const char *const iw_link_name[];

/* An FPDU without payload made ahead (iw_tx.c put_tpl): header, pad and CRC. */
struct iw_tpl {
	uint8_t head[IW_HDR_MAX];
	uint8_t tail[8];
	uint16_t hl;  /* 0: none */
	uint8_t tl;
	bool crc;     /* made for a connection with CRC on */
	uint32_t msn; /* the placement probe's: made for this MSN */
};

/* One FPDU waiting for the socket: header, payload pieces (in the iov ring), pad + CRC;
 * once staged, the whole FPDU in one piece of the transmit stage. */
struct iw_txd {
	uint8_t head[IW_HDR_UNTAGGED + 4 + IW_TERM_HDRS_MAX > IW_HDR_MAX ?
			     IW_HDR_UNTAGGED + 4 + IW_TERM_HDRS_MAX : IW_HDR_MAX];
	uint8_t tail[8];     /* pad (0-3 zero bytes) and CRC */
	uint16_t head_len;
	uint8_t tail_len;
	uint8_t flags;       /* IW_TXD_* */
	uint32_t iov_first;  /* its payload: iovs[iov_first .. + n_iov) of the ring */
	uint32_t n_iov;
	uint32_t n_slots;    /* ring slots it holds from iov_first */
	uint32_t ack_msn;    /* a request: complete (locally acknowledged) once written */
	uint32_t whole_len;  /* IW_TXD_STAGED: its bytes, header to CRC, at whole */
	uint8_t *whole;
	uint64_t stage_end;  /* IW_TXD_STAGED: tx_stage_head after its copy */
};
/* UNSEALED: CRC on, its CRC not made yet (the writer copies the payload to the transmit
 * stage and makes it over the copy: iw_tx.c, stage); STAGED: the whole FPDU is a copy in
 * the stage (whole). */
enum { IW_TXD_REQ = 1, IW_TXD_READ_DONE = 2, IW_TXD_TERM = 4, IW_TXD_UNSEALED = 8,
       IW_TXD_STAGED = 16 };

/* A Read Request (or atomic) outstanding: the requester's, or the responder's (IRD). */
struct iw_rd {
	uint32_t msn;        /* the core's msn of the request */
	uint32_t sink_stag;  /* where the responses go (requester: ours; responder: theirs) */
	uint64_t sink_to;
	uint64_t size;       /* bytes asked */
	uint64_t got;        /* requester: bytes of response received */
	uint32_t req_id;     /* an atomic's: the request's DDP MSN, which its response names */
	uint32_t confirms;   /* requester: the last Send or Write queued before it (its
			      * response proves them placed: RFC 5040 §5.5, Reads after Writes) */
};

/* A request the requester sent, for finding the one a Terminate names (RFC 5040 §4.8:
 * it carries the offending segment's DDP header). */
struct iw_sent {
	uint32_t msn;        /* the core msn of the message's first segment */
	bool tagged;
	uint8_t qn;          /* untagged: queue and DDP MSN (key) */
	uint32_t key;        /* tagged: the STag */
	uint64_t lo, hi;     /* tagged: the tagged offsets the message covers */
};
enum { IW_SENT = 1024 };

struct iw_qp {
	struct sv_qp *qp;
	uint32_t qpn;

	/* the connection: written under rx_busy and sq.lock, read under either */
	_Atomic int fd;               /* -1: none */
	_Atomic uint64_t watch;       /* the engine's one-shot watch of fd (0: none) */
	_Atomic uint32_t link;        /* enum iw_link */
	_Atomic uint32_t peer_qpn;    /* the QP at the other end (iw_peer) */
	_Atomic bool adopted;         /* the stream came set up (rdma_cm): the peer is who
				       * the QP's dest_qp_num says */
	_Atomic bool crc;             /* MPA CRC negotiated */
	_Atomic bool ext;             /* RFC 7306 negotiated */
	_Atomic uint16_t ird, ord;    /* negotiated (written under both locks, read anywhere) */
	uint64_t deadline;            /* ns: the set-up's grace ends (reach: CONNECTING before) */
	/* the dialer's: where and what it dialed, to dial again (REDIAL) */
	struct sockaddr_storage dial_to;
	socklen_t dial_len;
	struct iw_params *dial_want;  /* (iw_conn.h's; allocated with the QP) */
	_Atomic uint64_t redial_at;   /* ns */
	uint32_t redial_wait_ms;
	_Atomic int incoming;         /* an accepted connection handed to us (fd, or -1) */
	struct iw_params_in {         /* ... and what its MPA request said */
		uint32_t src_qpn;
		uint16_t ird, ord;
		bool crc, ext;
		uint8_t rtr; /* peer-to-peer asked for (refused) */
	} incoming_params;
	_Atomic bool fatal;           /* the connection broke: the QP is to enter Error */
	_Atomic bool eof;             /* the peer closed it between FPDUs (iw_link_closed) */
	_Atomic bool peer_first;      /* passive side of an MPA exchange: nothing is sent
				       * until the initiator's first FPDU came (RFC 5044
				       * §7.1; cleared by the receive, which kicks) or until
				       * peer_first_until (iw_qp.c timers) */
	uint64_t peer_first_until;
	_Atomic bool nudge_due;       /* active side: a zero-length Write at nudge_at (iw_qp.c
				       * timers), unless the peer speaks first (the receive
				       * clears it) */
	uint64_t nudge_at;
	_Atomic bool goodbye;         /* ... after saying goodbye (its QP left, not died) */
	uint32_t bye_placed;          /* ... naming our last Send it placed: its core msn
				       * (0: none named; rx_busy) */
	_Atomic bool armed;

	/* transmit (iw_tx.c) */
	sv_spinlock_t txq_lock;  /* guards tx_head and iov_head (the producers) */
	atomic_flag tx_io;            /* the writer */
	_Atomic uint32_t tx_head, tx_tail;
	_Atomic uint32_t iov_head, iov_tail;
	uint32_t tx_part;             /* bytes of the FPDU at tx_tail written (the writer's) */
	_Atomic bool tx_wants_out;    /* the socket was full: wait for EPOLLOUT */
	_Atomic uint32_t tx_acked;    /* msn of the last request the socket took */
	_Atomic uint32_t place_hi;    /* msn of the last Send or Write queued (sq.lock) */
	_Atomic uint32_t confirmed;   /* Sends and Writes up to this msn are placed at the
				       * peer (a Read Response after them came back) */
	_Atomic bool probing;         /* our zero-length Read that confirms them is out */
	_Atomic uint32_t send_hi;     /* msn of the last Send queued (sq.lock) */
	_Atomic uint32_t tx_pairing;  /* odd while a Send and its probe are queued
				       * (sq.lock): no writer sends the Send alone */
	_Atomic uint32_t probed;      /* place_hi when our last Read was queued: what its
				       * answer will confirm (sq.lock) */
	struct iw_tpl probe_tpl;      /* the next such Read, sealed after a flush (sq.lock) */
	struct iw_tpl answer_tpl;     /* the answer to the peer's (rx_busy) ... */
	uint32_t answer_stag;         /* ... to this sink */
	uint64_t answer_to;
	_Atomic bool ord_waits;       /* a Read or atomic waits for room (the ORD, rdq, atq) */
	_Atomic uint64_t hold_since;  /* answers held back since (iw_qp.c answers_wait; 0:
				       * none, 1: held, the clock not read yet) */
	bool confirm;                 /* complete Sends and Writes once placed (default), not
				       * once sent (SOFTVERBS_IWARP_COMPLETE=sent) */
	_Atomic uint32_t acked_told;  /* the last local acknowledgement delivered (rx_busy) */
	uint32_t tx_msn[IW_QN_MAX];   /* sq.lock (QN 0, 1, 3) / rx_busy (QN 4): the next DDP
				       * MSN of each untagged queue */
	_Atomic bool term_sent;       /* a Terminate went out: nothing follows it */
	_Atomic uint32_t local_nak_msn; /* a request this connection cannot carry (0: none)... */
	uint32_t local_nak_status;    /* ... fails with this status (delivered by the poll) */
	struct iw_txd txq[IW_TXQ];
	struct iovec iovs[IW_TX_IOVS];
	/* the transmit stage (IW_TX_STAGE bytes, allocated at first use), a ring of copies
	 * of FPDUs queued and not yet written, byte counts; the writer's (tx_io) */
	uint8_t *tx_stage;
	uint64_t tx_stage_head, tx_stage_tail;
	/* the requester's outstanding Reads and atomics: produced under sq.lock, consumed
	 * under rx_busy (one each) */
	_Atomic uint32_t rd_head, rd_tail, at_head, at_tail;
	struct iw_rd rdq[IW_RDQ], atq[IW_RDQ];
	/* the requests sent lately (sq.lock writes, rx_busy reads) */
	_Atomic uint32_t sent_head;
	struct iw_sent sent[IW_SENT];

	/* receive (iw_rx.c), under rx_busy */
	uint8_t stage[IW_STAGE_CAP + 8];
	uint32_t st_off, st_len;      /* staged bytes [st_off, st_len) */
	bool rx_dry;                  /* this poll's last read found the socket emptied:
				 * the next read waits for the next poll */
	uint32_t rx_msn;              /* the core msn given to the last request delivered */
	uint32_t rx_ddp_msn[IW_QN_MAX]; /* the next DDP MSN expected on each queue */
	uint32_t rx_mo;               /* the next message offset expected on queue 0 */
	bool rx_in_write;             /* a tagged Write message is under way */
	uint64_t rx_write_bytes;      /* ... its bytes so far (an Immediate Data after it
				       * reports them) */
	uint32_t ird_head, ird_tail;  /* the peer's Read Requests we answer (IRD) */
	struct iw_rd irdq[IW_RDQ];
	_Atomic uint32_t ird_unsent;  /* Read Responses queued, not yet written */
	uint8_t rx_last_op;           /* the last request delivered: its opcode and header, */
	uint8_t rx_last_hdr[IW_TERM_MAX]; /* for the Terminate that refuses it (from its
					   * ULPDU_Length) */
	uint32_t rx_last_hdr_len;
	uint8_t mpa[20 + 512];        /* DIALING: the MPA reply so far */
	uint32_t mpa_len;
};

static inline struct iw_qp *iw_of(struct sv_qp *qp)
{
	return qp->wire_qp;
}

/* The QPN our answers and the peer's requests carry for the core's checks. */
static inline uint32_t iw_peer(const struct iw_qp *iq)
{
	return iq->adopted ? atomic_load_explicit(&iq->qp->pub.dest_qpn, memory_order_relaxed)
			   : iq->peer_qpn;
}

/*
 * rdma_cm hands a stream over in INIT and moves the QP on to RTS at once: an end of the
 * stream seen in between waits for RTS (iw_link_closed), when its connection was
 * established as the peer saw it. Until then there is nothing to do: no work, no watch;
 * the state's change kicks the engine (publish).
 */
static inline bool iw_end_waits(struct iw_qp *iq)
{
	uint32_t st = atomic_load(&iq->qp->pub.state);

	return atomic_load(&iq->eof) && iq->adopted &&
	       (st == IBV_QPS_INIT || st == IBV_QPS_RTR);
}

/* iw_tx.c */
void iw_tx_init(struct iw_qp *iq);
void iw_tx_reset(struct iw_qp *iq);
/* The wire's send op (sq.lock or rx_busy). */
int iw_tx_send(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov, int n_iov);
/* Queues a Terminate for @t (the offending header @bad, @bad_len bytes; may be NULL). */
void iw_tx_terminate(struct iw_qp *iq, const struct iw_term *t, const void *bad, size_t bad_len);
/* Writes what is queued, as far as the socket takes it. No lock needed (tx_io). Returns
 * bytes written, 0, or -errno when the connection broke. */
int iw_tx_flush(struct iw_qp *iq);
bool iw_tx_pending(const struct iw_qp *iq);
/* No lock: writes what is queued (for at most @wait_ms), then takes the socket away from
 * the writers (returned, or -1): nothing writes to it afterwards. */
int iw_tx_take_fd(struct iw_qp *iq, int wait_ms);
/* rx_busy: the msn up to which requests are complete (local acknowledgement), never past
 * a Read or atomic that waits for its response, nor past a WRITE not yet known placed.
 * 0: nothing new. (A writer's look without rx_busy, iw_qp.c ack_due, may see one that
 * a poll is delivering at that moment: it only wakes the progress thread.) */
uint32_t iw_tx_ackable(struct iw_qp *iq);
/* rx_busy: as iw_tx_ackable, without waiting for placement: what TCP took. */
uint32_t iw_tx_written(struct iw_qp *iq);
/* The same for what the peer says it placed, up to @upto. */
uint32_t iw_tx_placed(struct iw_qp *iq, uint32_t upto);
/* sq.lock: WRITEs wait to be known placed and no Read is out that will tell: queues a
 * zero-length Read Request (answered after them, RFC 5040 §5.5) within the ORD. */
void iw_tx_probe(struct iw_qp *iq);
/* Whether iw_tx_probe would ask (Sends or Writes wait to be known placed, and no probe
 * out asks for them already). */
bool iw_tx_probe_wanted(struct iw_qp *iq);
/* Queues a zero-length RDMA Write (STag 0, offset 0): nothing placed, nothing completed
 * at either end (iw_qp.c's nudge). sq.lock held. 0 or -EAGAIN (no room). */
int iw_tx_nudge(struct iw_qp *iq);
/* sq.lock, after a flush on a connection that probes (ORD, Sends complete once placed):
 * the next probe's FPDU made ahead, off the latency path. */
void iw_tx_probe_ahead(struct iw_qp *iq);
/* Under rx_busy: the answer to a zero-length Read Request the receive engine took itself
 * (iw_rx.c probe_fast), to (@sink_stag, @sink_to); -EAGAIN when the queue is full. */
int iw_tx_answer_empty_read(struct iw_qp *iq, uint32_t sink_stag, uint64_t sink_to);

/* iw_rx.c */
void iw_rx_reset(struct iw_qp *iq);
struct iw_params;
/* rx_busy, DIALING: reads the peer's MPA reply. 1 (*got filled; what follows it is
 * staged as FPDUs), 0 (not all in yet), -ECONNREFUSED (rejected), -EPROTO, or the
 * connection's end (-errno). */
int iw_rx_reply(struct iw_qp *iq, struct iw_params *got);
/* rx_busy: moves what arrived into the core (budget FPDUs), holding the place lock
 * (sv_mr_place_begin) from its first delivery on. Returns how many. */
int iw_rx_poll(struct iw_qp *iq, int budget);
/* rx_busy: completes the sends iw_tx_ackable says are complete (1 if it did). Run before
 * each request of the peer's is delivered, so that a send completes before the receive
 * of a reply the peer sent after it confirmed the send, as where an ACK goes ahead of
 * the reply on the wire. */
int iw_rx_ack_sends(struct iw_qp *iq);

/* iw_qp.c: a QP of another wire may move to iWARP (at RTR): peers on other hosts can be
 * handed over to its number from now on. */
void iw_wire_prepare_qpn(uint32_t qpn);
/* iw_qp.c: an iWARP QP in INIT takes a connected stream whose MPA exchange is done. */
int iw_qp_adopt(struct sv_qp *qp, int fd, const struct sv_stream *s);

/* iw_link.c: the connection broke (@why for the log, NULL: the peer said why): nothing
 * more goes or comes, and the QP enters Error with IBV_EVENT_QP_FATAL. Under rx_busy. */
void iw_link_down(struct iw_qp *iq, const char *why);
/* The peer closed the connection between two FPDUs. After its goodbye (@goodbye: it
 * destroyed or reset its QP), or on a stream of rdma_cm's with nothing of ours
 * outstanding, as a peer that left on one host: what waits for an answer fails
 * (RETRY_EXC_ERR), later requests are lost, the QP stays in its state. Else its process
 * died or broke off: as iw_link_down. On an rdma_cm stream what waits in our queue is
 * written first; false while some of it cannot go yet (call again at the next poll).
 * rx_busy. */
bool iw_link_closed(struct iw_qp *iq, bool goodbye);

#endif
