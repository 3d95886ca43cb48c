/*
 * A wire for tests of the core (tests/core): in-process, no shared memory, no socket.
 * Each QP (or phantom peer) is an endpoint with an inbound queue of copied messages
 * (header and payload); the core's requester, responder and completer reach each other
 * only through struct sv_wire_ops and its up-calls.
 *
 * Knobs (tw_knobs, set by a test before it sends): the largest segment (forces SEND,
 * WRITE and READ responses into many segments), the capacity of a queue (send says
 * -EAGAIN beyond it: the core must resume), and a delay (a message is delivered only
 * after that many polls of its receiver). The wire is ORDERED (each message exactly once,
 * in order). Its reorder, drop and duplicate knobs are for tw_wire_unordered, whose caps
 * lack SV_WIRE_ORDERED but do not ask the core to retransmit (the tests that use it show
 * what then fails), and for tw_wire_lossy, whose caps say SV_WIRE_LOSSY (RoCE's): the
 * core's go-back-N, transport timer and NAKs make every message arrive once.
 *
 * A phantom is a QPN no QP owns: a QP connected to it sends into its queue, and the test
 * plays the peer by hand (tw_take what the QP sent, tw_inject what a hostile peer would
 * send back).
 */
#ifndef TEST_WIRE_H
#define TEST_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sv_wire.h"

struct tw_knobs {
	uint32_t seg_max;  /* the largest SEND, WRITE or READ_RESP segment */
	uint32_t capacity; /* messages a queue holds before send says -EAGAIN (<= TW_QMAX) */
	uint32_t delay;    /* polls of the receiver a message waits before delivery */
	/* Unordered (only with tw_unordered: the QPs then get a wire whose caps lack
	 * SV_WIRE_ORDERED): each endpoint's first message is dropped, or held until its
	 * second has gone ahead of it; or every message is carried twice. */
	bool drop_first, swap_first, dup_all;
	bool drop_all; /* every request lost (a peer gone silent) */
	bool drop_read_resp; /* each endpoint's first READ response segment lost */
};

enum { TW_QMAX = 4096, TW_OPS = 16 };

extern struct tw_knobs tw_knobs;
extern const struct sv_wire_ops tw_wire, tw_wire_unordered, tw_wire_lossy;
/* Which a QP created from now on gets (sv_wire_for_qp): tw_wire_unordered, or with
 * tw_lossy tw_wire_lossy (SV_WIRE_LOSSY: the same knobs, and a request the responder
 * holds is dropped, as a NIC drops it, for the requester to send again). */
extern bool tw_unordered, tw_lossy;

/* Defaults: seg_max 1000, capacity TW_QMAX, no delay. */
void tw_reset_knobs(void);

/* A QPN nobody owns, whose queue collects what is sent to it; state RTS. */
uint32_t tw_phantom(void);
void tw_phantom_free(uint32_t qpn);
/* Puts a message into @dest's inbound queue as a peer would (no capacity limit). */
void tw_inject(uint32_t dest, const struct sv_hdr *h, const void *payload, uint32_t len);
/* Takes the oldest message of @qpn's queue (a phantom's): its payload length, or -1 if
 * the queue is empty. */
int tw_take(uint32_t qpn, struct sv_hdr *h, void *buf, uint32_t cap);
/* Messages waiting in @qpn's queue. */
uint32_t tw_queued(uint32_t qpn);

/* Counters of endpoint @qpn: messages it sent of each op, and sends refused (-EAGAIN). */
uint64_t tw_sent(uint32_t qpn, enum sv_op op);
uint64_t tw_eagain(uint32_t qpn);
/* Messages endpoint @qpn's poll delivered to the core, and the largest segment it saw. */
uint64_t tw_delivered(uint32_t qpn);
uint32_t tw_max_len(uint32_t qpn);

#endif
