/*
 * udp_rc: a connection's packets on the RoCE v2 wire (RC; UC and XRC below) — the
 * translation between the core's messages (struct sv_hdr: msn per segment) and the IBA's
 * packets (PSN per packet, IBA 9.7), both ways, and nothing else: no socket, no RDMA semantics. The core
 * retransmits, times out and NAKs (SV_WIRE_LOSSY, sv_comp.c); this numbers packets and
 * names what each answer is about.
 *
 * One packet is one segment: the core cuts messages at the path MTU (seg_max). Every
 * request takes one PSN and one msn, except a READ, which takes one msn and as many PSNs
 * as its response has packets (IBA 9.7.1). The requester keeps the READs whose
 * responses have not all come (reads[]), which is all it needs to map either way; the
 * responder keeps the last UDP_RC_HIST requests it took, and the last UDP_RC_READS
 * READs and atomics, to answer duplicates with the PSN they had.
 *
 * Flow: at most UDP_RC_WINDOW PSNs go unacknowledged (a request past it waits: the
 * wire is full, -EAGAIN); a long message asks for an acknowledgement every
 * UDP_RC_ACK_EVERY packets (SV_F_ACK_REQ: the responder's core acknowledges such a
 * segment once it executed it).
 *
 * Locks: the requester's half (next_psn, last_msn, reads) under the QP's sq.lock (the
 * core sends requests under it); everything else under rx_busy.
 */
#ifndef UDP_RC_H
#define UDP_RC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sv_wire.h"
#include "wire/roce/rv_proto.h"

enum {
	UDP_RC_READS = 128, /* SV_MAX_RD_ATOM: READs outstanding at most */
	UDP_RC_HIST = 64,   /* requests the responder remembers */
	/* PSNs in flight at most, requests and READ responses: what the receiver's socket
	 * buffer takes at once (a UDP receiver drops what overflows it, and a go-back-N
	 * sender that overruns it loses the head of its own retransmission). */
	UDP_RC_WINDOW = 512,
	UDP_RC_ACK_EVERY = 64, /* the A bit on every 64th PSN within a message too */
};

struct udp_rc_req {
	uint32_t msn, psn, npkts;
	bool done; /* reads[]: its response all came */
};

struct udp_rc {
	uint32_t mtu;                      /* the path MTU, bytes (256-4096) */
	uint8_t cls;                       /* the opcodes' transport: RV_RC (0), RV_UC
					    * (udp_rc_uc), RV_XRC (udp_rc_xrc) */
	/* requester (sq.lock) */
	uint32_t next_psn;                 /* the next new request's PSN */
	uint32_t acked_psn;                /* the last PSN an answer acknowledged */
	uint32_t last_msn;                 /* the last request msn sent */
	struct udp_rc_req reads[UDP_RC_READS]; /* outstanding READs, oldest first */
	uint32_t n_reads;
	/* completer (rx_busy): the READ response expected next */
	uint32_t rr_msn;
	uint64_t rr_off;
	bool rr_valid;
	/* responder (rx_busy) */
	uint32_t epsn;                     /* the PSN expected next */
	uint32_t emsn;                     /* ... and the msn its request is for the core */
	uint32_t ib_msn;                   /* AETH's MSN: messages taken (IBA 9.7.5.1.2) */
	struct udp_rc_req hist[UDP_RC_HIST]; /* the requests taken last, by msn % HIST */
	/* the READs and atomics taken last (IBA 9.7.5.1.1: a duplicate is answered again,
	 * as far back as max_dest_rd_atomic), oldest overwritten first */
	struct udp_rc_req rd_hist[UDP_RC_READS];
	uint32_t rd_next;
	bool wr_active, send_active;       /* a WRITE, a SEND is being taken (after FIRST) */
	uint64_t wr_va, wr_off;            /* ... the WRITE's RETH, bytes so far */
	uint32_t wr_rkey, wr_len;
	uint64_t send_off;                 /* ... the SEND's bytes so far */
	bool uc_dropping;                  /* UC: the rest of a message lost a packet */
};

/*
 * UC (IBA 9.7.5.1.x, as rxe does it): the same packets with UC's opcodes and no answers.
 * The requester numbers packets and waits for nothing (no window, no A bit); the
 * responder takes a message's first (or only) packet whatever its PSN, then its others
 * only in order: a packet lost, and the rest of its message is dropped (the core's
 * responder gives the receive the message had taken to the next one). Set before RTR.
 */
void udp_rc_uc(struct udp_rc *rc);

/*
 * XRC (IBA 9.7.5, chapter 14.2): RC's transport with XRC's opcodes, each request naming
 * the target's SRQ (XRCETH: the core's xrc_srqn, both ways); the answers are XRC's too,
 * without XRCETH. For an XRC initiator or target QP, set before RTR.
 */
void udp_rc_xrc(struct udp_rc *rc);

/* The QP reached RTR (@rq_psn: the first PSN expected) or RTS (@sq_psn: the first one
 * sent); @mtu its path MTU in bytes. */
void udp_rc_rtr(struct udp_rc *rc, uint32_t rq_psn, uint32_t mtu);
void udp_rc_rts(struct udp_rc *rc, uint32_t sq_psn);

/*
 * The packet for @h (a request under sq.lock, an answer under rx_busy), its headers in
 * @p (dest_qpn and pkey are the caller's): 0, or -EINVAL for what the IBA's RC has no
 * packet for (a Terminate: the core's other wires' notice of an error, which RoCE's
 * responder gives by NAK only). A request whose msn was sent before is a retransmission:
 * it gets the PSN it had.
 */
int udp_rc_encode(struct udp_rc *rc, const struct sv_hdr *h, struct rv_pkt *p);

enum udp_rc_rx {
	UDP_RC_DROP,     /* nothing for the core (out of its window, malformed) */
	UDP_RC_REQUEST,  /* a request for the responder (sv_resp_deliver), then udp_rc_taken */
	UDP_RC_ANSWER,   /* an answer for the completer (sv_comp_deliver) */
};

/*
 * What the RC packet @p (decoded, its ICRC good) is for the core, as @h (src_qpn: the
 * QP's peer, which RC packets do not name); the payload is @p's. An answer moves the
 * window on (requester's lock); nothing else changes: a request the responder took is
 * then told with udp_rc_taken, a READ response with udp_rc_answered.
 */
enum udp_rc_rx udp_rc_decode(struct udp_rc *rc, const struct rv_pkt *p, uint32_t peer_qpn,
			     struct sv_hdr *h);

/* Before the responder sees request @h of packet @p: an answer it gives at once names
 * its PSN (a request in order is remembered). */
void udp_rc_arrived(struct udp_rc *rc, const struct rv_pkt *p, const struct sv_hdr *h);

/* The responder consumed request @h of packet @p (SV_RX_CONSUMED): in order, the
 * expected PSN moves on. */
void udp_rc_taken(struct udp_rc *rc, const struct rv_pkt *p, const struct sv_hdr *h);

/* The completer took answer @h (a READ response segment: the next is expected). */
void udp_rc_answered(struct udp_rc *rc, const struct sv_hdr *h);

#endif
