/*
 * The shm wire's messages: what one QP writes into its peer's inbound fifo, and the
 * page each QP publishes for its peers (state, PD, access flags).
 *
 * RDMA WRITE and READ do not appear here: the requester performs them itself with
 * process_vm_writev/readv after checking the target's key table and QP page (true
 * one-sided operations: the target application does nothing; its progress thread may
 * copy part of a large one, shm_assist.h). Everything that needs the
 * target's CPU or its receive queue — SEND, WRITE with immediate (the notification),
 * atomics — is a message, and the responder answers with ACK, ATOMIC_RESP or NAK.
 */
#ifndef SHM_MSG_H
#define SHM_MSG_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/shm/shm_assist.h"
#include "wire/shm/shm_fifo.h"

enum shm_op {
	SHM_OP_SEND = 1,   /* payload in the ring (SHM_F_INLINE) or a list of sender SGEs */
	SHM_OP_WRITE_IMM,  /* the data was written; consume a receive for the immediate */
	SHM_OP_ATOMIC,     /* compare-and-swap or fetch-and-add at the responder */
	SHM_OP_ACK,        /* every request up to msn completed at the responder (sent as
			    * the page's acked word instead: shm_tx.c; still accepted) */
	SHM_OP_ATOMIC_RESP,/* the original value for request msn (acks it too) */
	SHM_OP_NAK,        /* request msn failed at the responder (status: enum ibv_wc_status) */
	SHM_OP_RNR,        /* request msn waits for a receive (not an error yet) */
	SHM_OP_WRITE,      /* bounce copy: RDMA WRITE data the responder places */
	SHM_OP_READ_REQ,   /* bounce copy: RDMA READ the responder answers with READ_RESP */
	SHM_OP_READ_RESP,  /* bounce copy: READ data for request msn at offset u.rdma.addr */
	SHM_OP_ACCESS_ERR, /* the requester found an access violation on this QP's memory */
	SHM_OP_WRITES,     /* a burst of tiny RDMA WRITEs the responder places: aux records
			    * (struct shm_write_rec) after the header; msn is the last one's */
	SHM_OP_MAX,
};

/* A WRITE this small can travel in a burst (SHM_OP_WRITES), its data in its record. */
#define SHM_TINY 16

enum shm_flags {
	SHM_F_INLINE = 1 << 0,    /* SEND: the payload follows the header in the ring */
	SHM_F_IMM = 1 << 1,       /* imm is valid */
	SHM_F_SOLICITED = 1 << 2, /* the sender asked for a solicited event */
	SHM_F_GRH = 1 << 3,       /* UD: the first 40 payload bytes are a GRH */
	SHM_F_CMP_SWP = 1 << 4,   /* ATOMIC: compare and swap (else fetch and add) */
	SHM_F_FIRST = 1 << 5,     /* the first piece of a message (SEND) */
	SHM_F_LAST = 1 << 6,      /* the last piece of a message (SEND, WRITE, READ_RESP) */
};

/* Header of every message: the 56 bytes after the slot's sequence word. */
struct shm_msg {
	uint8_t op;
	uint8_t flags;
	uint16_t nslots;   /* slots the whole message takes */
	uint32_t len;      /* bytes of this message's data (the piece, when in pieces) */
	uint32_t msn;      /* requests: message sequence number; ACK: the last one done */
	uint32_t imm;      /* immediate data, network byte order */
	uint32_t src_qpn;  /* the sending QP */
	uint32_t aux;      /* UD: Q_Key; NAK: status; SEND rendezvous: number of SGEs;
			    * pieces: the whole message's length */
	union {
		struct {
			uint64_t addr;
			uint64_t compare_add;
			uint64_t swap;
			uint32_t rkey;
		} __attribute__((packed)) atomic;
		uint64_t atomic_value; /* ATOMIC_RESP */
		struct {
			uint64_t addr; /* WRITE, READ_REQ: remote address; pieces: offset */
			uint32_t rkey;
		} __attribute__((packed)) rdma;
	} __attribute__((packed)) u; /* 28 bytes: room for what follows */
	uint32_t xrc_srqn; /* requests from an XRC initiator: the SRQ to deliver to (XRCETH) */
};

static_assert(sizeof(struct shm_msg) == SHM_HDR_SIZE, "the header fills the first slot");

/* One WRITE of a burst (SHM_OP_WRITES): two to a slot, so a burst of 8-byte writes moves
 * half the cache lines one message per write would. */
struct shm_write_rec {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len; /* at most SHM_TINY */
	uint8_t data[SHM_TINY];
};

static_assert(sizeof(struct shm_write_rec) * 2 == SHM_SLOT_SIZE, "two records a slot");

/* A sender buffer the responder pulls from (process_vm_readv), SEND rendezvous. */
struct shm_rsge {
	uint64_t addr; /* in the sender's address space */
	uint64_t len;
};

#define SHM_QP_PAGE_MAGIC 0x53565150u /* "SVQP" */

/* The page at the start of each QP's segment, read by its peers. */
struct shm_qp_page {
	uint32_t magic;
	int32_t pid;
	_Atomic uint32_t qpn;
	uint32_t qp_type;
	_Atomic uint32_t state;  /* enum ibv_qp_state */
	_Atomic uint32_t access; /* qp_access_flags */
	_Atomic uint32_t pd;     /* PD handle: the key table's pd field */
	_Atomic uint32_t qkey;
	_Atomic uint32_t dest_qpn;
	_Atomic uint32_t min_rnr_timer; /* what an RNR NAK from this QP asks the requester to wait */
	_Atomic uint32_t pkey;   /* the P_Key its pkey_index names (0: none yet) */
	_Atomic uint32_t bad_pkey; /* senders count here what its P_Key made them drop */
	/* Written by the requester: it gave up on this msn after RNR retries (0: none). What
	 * it sent from there on was never accepted (a NIC would have NAKed it) and is dropped. */
	_Atomic uint32_t rnr_abandon;
	/* Written by the requester: a large WRITE or READ this QP's progress thread may
	 * help copy (shm_assist.h). */
	struct shm_assist assist;
	/* Written by the peer's responder: its latest acknowledgement, (its QPN << 32) | msn
	 * (0: none since RESET). An ACK is this one store rather than a message in our
	 * fifo; shm_rx_poll reads it in order with the fifo (shm_rx.c). */
	_Alignas(64) _Atomic uint64_t acked;
};

#define SHM_QP_PAGE_SIZE 4096
static_assert(sizeof(struct shm_qp_page) <= SHM_QP_PAGE_SIZE, "one page");
static_assert(offsetof(struct shm_qp_page, assist) == 64, "fixed layout (tests forge jobs)");
static_assert(offsetof(struct shm_qp_page, acked) == 640, "fixed layout (tests forge ACKs)");

/* A QP's segment: its page, then its inbound fifo. Peers map exactly this much. */
#define SHM_QP_SEG_SIZE (SHM_QP_PAGE_SIZE + SHM_FIFO_BYTES)
/* Segments lie this far apart in a process's arena (whole pages). */
#define SHM_SEG_STRIDE ((SHM_QP_SEG_SIZE + 4095) & ~(size_t)4095)

/*
 * The page at the start of an arena (one per block of 256 QP numbers), before its
 * segments: a producer that finds a QP's fifo armed (its consumer asleep) sets the QP's
 * bit (its number's last 8 bits) before it writes the owner's eventfd, so that the
 * owner's progress thread looks at the QPs rung for and not at every idle one.
 */
struct shm_arena_hdr {
	_Atomic uint64_t ring[4];
};

#define SHM_ARENA_HDR 4096 /* the first segment's offset */
static_assert(sizeof(struct shm_arena_hdr) <= SHM_ARENA_HDR, "one page");

#endif
