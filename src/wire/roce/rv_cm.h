/*
 * The InfiniBand connection manager's messages, byte for byte: the MAD common header
 * (IBA 13.4.3) and the CM messages of IBA chapter 12 (REQ, MRA, REJ, REP, RTU, DREQ,
 * DREP, SIDR_REQ, SIDR_REP), as Linux's ib_cm sends them on a RoCE port: a 256-byte MAD
 * in a UD SEND to QP1 (Q_Key 0x80010000), with rdma_cm's header (addresses and ports)
 * at the front of the private data of a REQ or SIDR_REQ and the service ID made of the
 * port space and port. Only the layouts live here; who sends what, and when, does not.
 */
#ifndef RV_CM_H
#define RV_CM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	RV_MAD_LEN = 256,        /* every MAD (IBA 13.4.2) */
	RV_MAD_HDR = 24,         /* the common header; the CM message follows */
	RV_MAD_BASE_VERSION = 1,
	RV_MAD_CLASS_CM = 0x07,  /* Communication Management */
	RV_MAD_CM_VERSION = 2,   /* its class version */
	RV_MAD_METHOD_SEND = 0x03,
	RV_QP1_QKEY = 0x80010000,
	RV_CM_ARI_MAX = 72,      /* a REJ's (or SIDR_REP's) additional information */
	RV_CM_PRIVATE_MAX = 224, /* the longest private data (RTU, DREP) */
};

/* The CM's attribute IDs (IBA 16.7.3). */
enum rv_cm_attr {
	RV_CM_REQ = 0x0010,
	RV_CM_MRA = 0x0011,
	RV_CM_REJ = 0x0012,
	RV_CM_REP = 0x0013,
	RV_CM_RTU = 0x0014,
	RV_CM_DREQ = 0x0015,
	RV_CM_DREP = 0x0016,
	RV_CM_SIDR_REQ = 0x0017,
	RV_CM_SIDR_REP = 0x0018,
};

/* A REQ's path (IBA 12.6.5, primary or alternate). */
struct rv_cm_path {
	uint16_t local_lid, remote_lid;
	uint8_t local_gid[16], remote_gid[16];
	uint32_t flow_label;       /* 20 bits */
	uint8_t packet_rate;       /* 6 bits */
	uint8_t traffic_class, hop_limit;
	uint8_t sl;                /* 4 bits */
	bool subnet_local;
	uint8_t local_ack_timeout; /* 5 bits */
};

/*
 * One CM message, decoded. Which fields mean something depends on the attribute: the
 * comments say where each goes (IBA tables 106-120). Values wider than their field are
 * cut to it when encoded.
 */
struct rv_cm_msg {
	uint16_t attr;            /* enum rv_cm_attr */
	uint64_t tid;             /* the MAD's transaction ID */
	uint16_t status;          /* the MAD's status (0 in a CM message) */
	uint32_t local_id;        /* local communication ID; a SIDR message's request ID */
	uint32_t remote_id;       /* all but REQ and SIDR */
	uint64_t service_id;      /* REQ, SIDR_REQ, SIDR_REP */
	uint64_t local_ca_guid;   /* REQ, REP */
	uint32_t qkey;            /* REQ, REP, SIDR_REP */
	uint32_t qpn;             /* REQ, REP (local), DREQ (remote), SIDR_REP: 24 bits */
	uint32_t starting_psn;    /* REQ, REP: 24 bits */
	uint8_t responder_resources, initiator_depth; /* REQ, REP */
	uint8_t remote_cm_timeout, local_cm_timeout;  /* REQ: 5 bits each */
	uint8_t transport;        /* REQ: 0 RC, 1 UC, 3 XRC (2 bits) */
	bool eefc;                /* REQ, REP: end-to-end flow control */
	uint8_t retry_count;      /* REQ: 3 bits */
	uint8_t rnr_retry_count;  /* REQ, REP: 3 bits */
	uint8_t max_cm_retries;   /* REQ: 4 bits */
	bool srq;                 /* REQ, REP */
	uint8_t mtu;              /* REQ: the path MTU (enum ibv_mtu: 1..5), 4 bits */
	uint16_t pkey;            /* REQ, SIDR_REQ */
	struct rv_cm_path primary, alternate; /* REQ */
	uint8_t target_ack_delay; /* REP: 5 bits */
	uint8_t failover;         /* REP: 2 bits */
	uint8_t msg;              /* MRA: what is MRAed; REJ: what is rejected (2 bits):
				   * 0 REQ, 1 REP, 2 other (LAP) */
	uint8_t service_timeout;  /* MRA: 5 bits */
	uint16_t reason;          /* REJ: the reason (IBA table 109) */
	uint8_t sidr_status;      /* SIDR_REP (IBA table 121) */
	uint8_t ari_len;          /* REJ (7 bits), SIDR_REP: bytes of ari */
	uint8_t ari[RV_CM_ARI_MAX];
	uint8_t private_len;      /* bytes of private_data; decoded: the field's whole size */
	uint8_t private_data[RV_CM_PRIVATE_MAX];
};

/* How many bytes of private data a message of @attr carries (0: not a CM message). */
size_t rv_cm_private_max(uint16_t attr);

/* Writes @m as a MAD into @out (RV_MAD_LEN bytes, reserved bytes zero). 0, or -EINVAL:
 * an attribute that is not a CM message, private data or ARI longer than its field. */
int rv_cm_encode(const struct rv_cm_msg *m, uint8_t out[RV_MAD_LEN]);

/* Reads a MAD of @len bytes. 0, or -EBADMSG (shorter than a MAD), -EPROTO (not a CM MAD
 * of base version 1, class version 2), -EOPNOTSUPP (a method other than Send, an
 * attribute this file does not know: LAP, APR, ClassPortInfo). */
int rv_cm_decode(const uint8_t *buf, size_t len, struct rv_cm_msg *m);

/*
 * rdma_cm's header at the front of a REQ's or SIDR_REQ's private data (Linux's cma_hdr):
 * version 0, the IP version in the high nibble, the source port, the source and
 * destination addresses (IPv4 in the last 4 of 16 bytes, the rest zero).
 */
enum { RV_CMA_HDR = 36 };
struct rv_cma_hdr {
	uint8_t ip_version;     /* 4 or 6 */
	uint16_t port;          /* the source port */
	uint8_t src[16], dst[16]; /* IPv6, or IPv4 in the last 4 bytes */
};
void rv_cma_hdr_put(const struct rv_cma_hdr *h, uint8_t out[RV_CMA_HDR]);
/* 0, or -EPROTO (another cma version, an IP version not 4 or 6), -EBADMSG (short). */
int rv_cma_hdr_get(const uint8_t *buf, size_t len, struct rv_cma_hdr *h);

/* rdma_cm's service ID of @port in port space @ps (RDMA_PS_TCP 0x0106, RDMA_PS_UDP 0x0111,
 * RDMA_PS_IPOIB 0x0002): 0x0000000001060000 | port for TCP. */
static inline uint64_t rv_cma_service_id(uint16_t ps, uint16_t port)
{
	return (uint64_t)ps << 16 | port;
}

#endif
