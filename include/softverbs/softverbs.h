/*
 * softverbs' own extensions to the verbs API, beside <infiniband/verbs.h> (as mlx5dv.h is
 * beside it for mlx5). Exported by softverbs' libibverbs.so.1 under the version node
 * SOFTVERBS_1.0; a program that uses them runs only on softverbs.
 */
#ifndef SOFTVERBS_SOFTVERBS_H
#define SOFTVERBS_SOFTVERBS_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The wire a QP's messages take. */
enum softverbs_wire {
	SOFTVERBS_WIRE_NONE = 0, /* no message sent yet */
	SOFTVERBS_WIRE_SHM = 1,  /* shared memory, same host */
	SOFTVERBS_WIRE_IWARP = 2, /* iWARP over TCP (RFC 5040/5041/5044), between hosts */
	SOFTVERBS_WIRE_ROCE = 3,  /* the IBA's RC transport over RoCE v2 (UDP 4791) */
};

/* How payload crosses to the peer's memory on the shm wire. */
enum softverbs_copy {
	SOFTVERBS_COPY_NONE = 0,   /* no message sent yet */
	SOFTVERBS_COPY_CMA = 1,    /* one copy, process_vm_readv/writev between the processes */
	SOFTVERBS_COPY_BOUNCE = 2, /* through the shared-memory fifos (two copies) */
};

/*
 * What a QP's data path did since it was created: its requester (tx_) and its responder
 * (rx_). Payload bytes count once each, by the path they took; a message counts once
 * however many pieces it travelled in. The fields are read without stopping the QP.
 */
struct softverbs_qp_stats {
	uint32_t wire;          /* enum softverbs_wire of the last message sent */
	uint32_t copy;          /* enum softverbs_copy towards the last peer sent to */
	uint64_t tx_msgs;       /* messages sent to a peer (each RDMA WRITE, READ, atomic, SEND) */
	uint64_t tx_bytes;      /* their payload (RDMA READ: the bytes asked for) */
	uint64_t tx_cma_bytes;  /* of it, copied by this process with process_vm_readv/writev */
	uint64_t tx_fifo_bytes; /* of it, through the fifos (small SENDs, bounce copy, bursts
				 * of tiny WRITEs, atomics, bounce READ answers) */
	uint64_t rx_msgs;       /* requests of a peer this QP executed */
	uint64_t rx_bytes;      /* their payload */
	uint64_t rx_cma_bytes;  /* of it, pulled from the requester with process_vm_readv
				 * (large SENDs) */
	uint64_t rx_fifo_bytes; /* of it, placed from the fifos or read into them */
	uint64_t rx_dropped;    /* UC and UD messages dropped: no receive was posted (on
				 * one host, none for 100 ms) */
	uint64_t retransmits;   /* RoCE: times the requester sent again from its first
				 * unacknowledged request (a timeout, a NAK) */
};

/*
 * Fills @stats (of @stats_size bytes: sizeof(struct softverbs_qp_stats), or a smaller
 * size from an older header) for @qp. 0, or EINVAL.
 */
int softverbs_query_qp_stats(struct ibv_qp *qp, struct softverbs_qp_stats *stats,
			     size_t stats_size);

/*
 * Creates a QP as ibv_create_qp does, on the wire @wire (SOFTVERBS_WIRE_SHM or
 * SOFTVERBS_WIRE_IWARP; NONE: the default choice, SOFTVERBS_WIRE). For a connection
 * manager that knows where the peer is before the QP exists. NULL and errno (EINVAL: a
 * wire that cannot carry the QP type, e.g. UD on iWARP).
 */
struct ibv_qp *softverbs_create_qp_on_wire(struct ibv_pd *pd, struct ibv_qp_init_attr *attr,
					   enum softverbs_wire wire);

/* A TCP stream on which the MPA exchange (RFC 5044 §7.1, RFC 6581) is done: what it
 * negotiated. */
struct softverbs_stream {
	uint32_t comp_mask; /* 0 */
	uint8_t crc;        /* MPA CRC on (the C bit both sides agreed) */
	uint8_t rfc7306;    /* the peer takes RFC 7306 atomics and immediate data */
	uint16_t ird, ord;  /* RFC 6581: the Read Requests each side takes / sends at once */
	uint8_t peer_first; /* the passive side of an MPA exchange: the QP sends nothing
			     * until the initiator's first FPDU has arrived (RFC 5044 §7.1,
			     * rdma_connect(3) "IWARP SPECIFIC"); 0: it may send at once */
};

/*
 * Gives an iWARP QP (in INIT, before RTR) the connected TCP stream @fd for its
 * connection: FPDUs flow on it from now on. The QP owns @fd (it closes it on RESET,
 * Error and destroy); a caller may keep a dup() to watch the stream's end. 0 or errno.
 */
int softverbs_qp_adopt_stream(struct ibv_qp *qp, int fd, const struct softverbs_stream *s);

/*
 * ibv_attach_mcast, with the group's members on other hosts reaching @qp through the link
 * of interface @ifindex only (its IP multicast membership joined there; 0: none, the
 * members on this host only). ibv_attach_mcast itself joins on every interface that is
 * up and takes multicast (SOFTVERBS_MCAST_IFS narrows it). What rdma_join_multicast
 * does with the interface of the id's address, as Linux's rdma_cm joins on its netdev.
 * 0 or errno as ibv_attach_mcast.
 */
int softverbs_attach_mcast_on(struct ibv_qp *qp, const union ibv_gid *gid, unsigned int ifindex);

/*
 * The IB connection manager's QP1, for a connection manager in this process (rdma_cm
 * over RoCE, issue 26): UD QP @qp (its Q_Key 0x80010000) becomes this process's QP1 (@on
 * 0: no more): the MADs to QP1 that reach the host and are this process's come to it —
 * a REQ or SIDR_REQ for a service it listens on (softverbs_cm_listen), any other CM
 * message whose remote communication ID names its block (the QPN block of @qp:
 * communication IDs are (qp_num >> 8) << 16 | n), and, where no process of the user
 * owns one, those too — and what it sends goes from QP 1. One QP a process. 0, or
 * EINVAL (not UD), ENODEV (no RoCE port), EBUSY (another QP is).
 */
int softverbs_qp_set_gsi(struct ibv_qp *qp, int on);
/* This process listens (@on) on IB CM service @service_id, or no more, through its QP1
 * @qp: 0, or EADDRINUSE (another process of the user does), ENOSPC, ENODEV. */
int softverbs_cm_listen(struct ibv_qp *qp, uint64_t service_id, int on);

#ifdef __cplusplus
}
#endif

#endif
