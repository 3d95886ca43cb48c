/*
 * Internal to librdmacm.so.1: connection identifiers, event channels and the CM thread.
 *
 * Every rdma_cm_id is the first member of a struct cma_id; every rdma_event_channel the
 * first member of a struct cma_channel. One mutex (cma_lock) guards all ids, channels
 * and their event queues: CM calls are rare and short, and one lock keeps the state
 * machine readable. Lock order: cma_lock, then anything in libibverbs.
 *
 * The connection is a TCP connection from the active id to the listener's address and
 * port. It opens with the MPA request and reply (RFC 5044 §7.1, src/wire/iwarp/iw_mpa.h)
 * carrying the user's private data followed by a softverbs trailer (struct cma_info:
 * QPN, PSN, Q_Key, RDMA depths); QPs then carry their data over the shm wire, and the
 * TCP connection stays open as the disconnect and liveness signal.
 *
 * To a peer on another host (or any peer with SOFTVERBS_CM_WIRE=iwarp) the connection
 * is iWARP, as kernel rdma_cm sets it up on an iWARP device: MPA revision 2 with the
 * RFC 6581 IRD/ORD words, the consumer's private data carried raw (no trailer), and
 * the TCP connection itself handed to the QP (softverbs_qp_adopt_stream), which then
 * speaks FPDUs on it; the id keeps a dup() of it to see the stream end (cma_conn.c).
 */
#ifndef CMA_H
#define CMA_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "util/sv_log.h"
#include "wire/iwarp/iw_xchg.h"

/* Private data limits, those of IB CM messages on a RoCE port less the rdma_cm header
 * (rdma-core: kernel cma.c / ib_cm.h). */
enum {
	CMA_PD_CONNECT = 56,  /* REQ 92 - 36 */
	CMA_PD_ACCEPT = 196,  /* REP */
	CMA_PD_REJECT = 148,  /* REJ */
	CMA_PD_UD_CONNECT = 180, /* SIDR REQ 216 - 36 */
	CMA_PD_UD_ACCEPT = 136,  /* SIDR REP */
	CMA_PD_UD_REJECT = 136,  /* SIDR REP with status REJECT */
	CMA_PD_MAX = 196,
	/* iWARP: Linux siw takes at most 256 bytes of MPA private data, the 4 bytes of
	 * RFC 6581 IRD/ORD words included (IW_MPA_PD_SIW_MAX): what we send at most.
	 * We take up to 255 (what an event's u8 length can report). */
	CMA_PD_IWARP = 252,
	CMA_PD_BUF = 256,     /* room for either */
};

/* IB CM reject reasons rdma-core reports as a REJECTED event's status, and SIDR
 * statuses it reports as a UD id's UNREACHABLE status. */
enum {
	CMA_REJ_INVALID_SERVICE_ID = 8, /* nobody listens on the port */
	CMA_REJ_CONSUMER_DEFINED = 28,  /* rdma_reject */
	CMA_SIDR_UNSUPPORTED = 1,       /* UD: nobody listens */
	CMA_SIDR_REJECT = 2,            /* UD: rdma_reject */
};

/* The private data length a receiver sees: the whole IB CM message's field, zero
 * padded after what the sender gave (rdma-core on RoCE). */
enum {
	CMA_PD_SEEN_REQ = 56, CMA_PD_SEEN_UD_REQ = 180, CMA_PD_SEEN_REP = 196,
	CMA_PD_SEEN_UD_REP = 136, CMA_PD_SEEN_REJ = 148,
};

enum cma_state {
	CMA_IDLE,
	CMA_ADDR_QUERY,
	CMA_ADDR_BOUND,     /* bound, or address resolved */
	CMA_ROUTE_RESOLVED,
	CMA_LISTEN,
	CMA_CONNECT,        /* active: TCP connect / MPA request out, waiting for the reply */
	CMA_REPLIED,        /* active: the reply is in, its event not yet read */
	CMA_REQ_RCVD,       /* passive: CONNECT_REQUEST delivered, waiting for accept/reject */
	CMA_ACCEPTED,       /* passive: reply sent, waiting for the active side's RTU */
	CMA_RESPONSE,       /* active without a QP: CONNECT_RESPONSE delivered, waiting for
			       rdma_establish */
	CMA_CONNECTED,
	CMA_DISCONNECTED,
	CMA_ERROR,
	CMA_LINGER,         /* hidden: an iWARP stream kept open a while after its id let go
			       (cma_linger), closed at the peer's end or its deadline */
};

extern const char *const cma_state_name[];

/* What each side appends to the MPA private data (all integers big endian). */
struct cma_info {
	uint32_t qpn;
	uint32_t psn;
	uint32_t qkey;
	uint8_t ird;       /* responder resources offered */
	uint8_t ord;       /* initiator depth wanted */
	uint8_t qp_type;   /* enum ibv_qp_type */
	uint8_t flags;     /* CMA_INFO_SRQ */
	uint8_t retry;
	uint8_t rnr_retry;
	uint8_t user_len;  /* private data bytes in front of this trailer */
	uint8_t version;
	uint8_t gid[16];   /* the sender's source GID */
	uint32_t magic;
};
#define CMA_INFO_MAGIC 0x53564d31u /* "SVM1" */
enum {
	CMA_INFO_SRQ = 1,
	CMA_INFO_NO_SERVICE = 2, /* in a reject: nobody listens in the requester's port space */
	CMA_INFO_VERSION = 1,
};

/* After the MPA reply, the active side says "ready to use" with these 8 bytes. */
#define CMA_RTU "SVCM-RTU"
enum { CMA_RTU_LEN = 8 };

struct cma_event {
	struct rdma_cm_event ev;
	struct cma_event *next;
	struct cma_id *owner;      /* the id whose channel it went to */
	struct cma_id *child;      /* CONNECT_REQUEST: the new id, held until the ack */
	uint8_t work;              /* enum cma_work: done when the user reads the event */
	unsigned char pdata[CMA_PD_BUF];
	union ibv_gid mgid;        /* CMA_WORK_JOIN */
};

/* What reading an event does to the id's QP. librdmacm changes a QP only inside the
 * application's calls (here: rdma_get_cm_event), never behind its back: the
 * application may have destroyed the QP itself by then. */
enum cma_work {
	CMA_WORK_NONE,
	CMA_WORK_QP_ERROR, /* REJECTED and connect failures: the QP goes to ERROR */
	CMA_WORK_REPLY,    /* the reply: QP to RTS and RTU, the event becomes ESTABLISHED
			      (or stays CONNECT_RESPONSE when the id has no QP) */
	CMA_WORK_JOIN,     /* MULTICAST_JOIN: the QP is attached to the group (mgid) */
};

struct cma_channel {
	struct rdma_event_channel ch; /* fd: an eventfd counting queued events */
	struct cma_event *head, *tail;
	int ids;                      /* ids using it */
	int readers;                  /* threads inside rdma_get_cm_event on it */
	bool dead;                    /* destroyed (kept a while: cma_core.c, channel_bury) */
	bool orphan;                  /* dead and out of the kept ones: the last reader frees */
};

struct cma_id {
	struct rdma_cm_id id;
	enum cma_state state;
	struct cma_channel *chan;
	bool sync;                 /* created without a channel: calls wait for their event */
	bool destroyed;            /* the user destroyed it; freed when no event refers to it */
	int events_out;            /* events read by the user and not yet acked */
	int fd;                    /* TCP socket: listening, connecting or connected */
	int claim_fd, claim_fd6;   /* the RDMA port held for IPv4, IPv6 (id_bind), or -1 */
	bool in_epoll;
	bool afonly, reuseaddr;
	uint8_t tos;
	uint64_t deadline_ns;      /* 0: none; otherwise the current step's timeout */
	struct ibv_sa_path_rec path;

	/* the handshake */
	struct iw_xchg_rx rx;      /* the peer's frame so far (passive side: also the RTU) */
	struct cma_info remote;    /* from the peer's request or reply */
	uint32_t psn;              /* ours */
	struct rdma_conn_param conn;  /* ours, as given to connect/accept */
	unsigned char conn_pd[CMA_PD_BUF]; /* connect's private data, kept until sent */
	bool req_sent;             /* active: the MPA request went out */
	bool retrying;             /* active: refused; connect again at deadline_ns */
	uint64_t connect_start_ns; /* active: when rdma_connect was called */
	uint8_t resp_res;          /* negotiated: this side's responder resources (RTR) */
	uint8_t init_depth;        /* negotiated: this side's initiator depth (RTS) */
	uint8_t ack_timeout;       /* RDMA_OPTION_ID_ACK_TIMEOUT, 0: the default */
	bool peer_closed;
	bool own_cq;               /* rdma_create_qp made the CQs */

	/* iWARP (the peer on another host, or SOFTVERBS_CM_WIRE=iwarp) */
	bool iwarp;                /* this connection is iWARP: rdma_create_qp puts the QP on
				      the iWARP wire, MPA carries the private data raw */
	struct iw_xchg_side mpa_peer; /* passive: the request, which the reply answers;
				      active: ours, then the reply. Its C bit is what runs
				      (passive: the request's, which the reply echoes) */
	bool rfc7306;              /* both ends take RFC 7306 (SOFTVERBS_CM_RFC7306=1) */
	bool adopted;              /* the QP owns the stream; fd is our dup, watched for its
				      end only (never read: the QP's wire reads it) */

	/* listener */
	int backlog;
	struct cma_id *pending;    /* accepted TCP connections whose request is not in yet */
	struct cma_id *parent;     /* for those: the listener */
	struct cma_id *next_pending;
	struct ibv_pd *ep_pd;      /* rdma_create_ep: what rdma_get_request creates the QP with */
	struct ibv_qp_init_attr *ep_qp_attr;

	struct cma_mc *mcs;        /* multicast groups joined */

	struct cma_id *next;       /* all ids */
};

/* A multicast group an id joined (rdma_join_multicast). */
struct cma_mc {
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	void *context;
	bool sendonly;             /* RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: no attach */
	bool attached;             /* the id's QP is attached to the group */
	struct cma_mc *next;
};

static inline struct cma_id *to_cma_id(struct rdma_cm_id *id)
{
	return (struct cma_id *)id;
}

/* -1 with errno set: how every rdma_* call reports a failure. */
static inline int fail(int err)
{
	errno = err;
	return -1;
}

/*
 * The files, from the bottom up; each calls only files listed before it (no circle):
 *   cma_addr.c    addresses and sockets (pure functions)
 *   cma_core.c    the lock, the ids, the device, channels and their event queues, the CM
 *                 thread (epoll, deadlines, graveyard) run with the handlers it is given
 *   cma_qp.c      the id's QP: its moves, its multicast attachments, QP and SRQ calls
 *   cma_event.c   reading events (and the work reading does), acks, synchronous waits
 *   cma_setup.c   what the connection protocols share: their events, a pending
 *                 connection becoming an id, a failed connect, the frame read
 *   cma_local.c   the same-host protocol (struct cma_proto): softverbs' handshake
 *   cma_iwarp.c   the iWARP protocol: the MPA exchange of src/wire/iwarp/iw_xchg.h
 *   cma_conn.c    the connection: its TCP transport, the CM thread's handlers, connect /
 *                 accept / reject / disconnect, each through the id's protocol
 *   cma_misc.c    multicast join and leave, ECE, rsockets
 *   cma_id.c      the id calls: channels, create / destroy, bind, resolve, listen, options
 *   cma_ep.c      rdma_create_ep, rdma_destroy_ep, rdma_get_request
 *   cma_addrinfo.c  rdma_getaddrinfo (the device only)
 */

extern pthread_mutex_t cma_lock;

/* cma_addr.c */
int cma_sockaddr_len(const struct sockaddr *sa);
bool cma_addr_is_local(const struct sockaddr *sa);
bool cma_addr_is_multicast(const struct sockaddr *sa);
bool cma_addr_is_loopback(const struct sockaddr *sa);
/* The index of the interface holding address @sa; 0 if none does. */
unsigned int cma_addr_ifindex(const struct sockaddr *sa);
/* Does binding to a loopback address tie an id to the device? Yes unless
 * SOFTVERBS_LOOPBACK=0. */
bool cma_loopback_is_device(void);
void cma_gid_from_addr(union ibv_gid *gid, const struct sockaddr *sa);
uint16_t cma_port_of(const struct sockaddr *sa);
int cma_bound_socket(const struct cma_id *id, const struct sockaddr *addr);
int cma_send_all(int fd, const void *buf, size_t len);
int cma_route_source(const struct sockaddr *dst, struct sockaddr_storage *src);
bool cma_iwarp_forced(void);
bool cma_rfc7306_wanted(void);
bool cma_mpa_crc_wanted(void);

/* cma_core.c */
struct ibv_context *cma_device(void);
struct ibv_pd *cma_default_pd(struct ibv_context *ctx);
struct cma_id *cma_id_new(struct cma_channel *chan, void *context, enum rdma_port_space ps);
void cma_id_free_locked(struct cma_id *id);
void cma_id_release(struct cma_id *id);
void cma_id_fill_route(struct cma_id *id);
struct cma_channel *cma_channel_new(void);
void cma_channel_free(struct cma_channel *c);
void cma_channel_unlink(struct cma_channel *c, struct cma_event *e);
struct cma_event *cma_event_new(struct cma_id *id, enum rdma_cm_event_type type, int status);
void cma_event_post(struct cma_event *e);

/* What the CM thread does, under cma_lock: input (or hang-up) on an id's socket, and an
 * id's deadline passed. */
struct cma_handlers {
	void (*input)(struct cma_id *id, uint32_t events);
	void (*timeout)(struct cma_id *id);
};
int cma_thread_start(const struct cma_handlers *handlers);
void cma_watch(struct cma_id *id, uint32_t events);
void cma_unwatch(struct cma_id *id);
void cma_kick(void);
void cma_close_fd(struct cma_id *id);
void cma_linger(struct cma_id *id);
void cma_graveyard(struct cma_id *id);

/* cma_qp.c */
int cma_qp_init(struct cma_id *id, struct ibv_qp *qp);
int cma_qp_to_rts(struct cma_id *id);
int cma_qp_adopt(struct cma_id *id);
void cma_qp_to_error(struct cma_id *id);
int cma_mc_attach(struct cma_id *id, const union ibv_gid *mgid);
void cma_fill_info(struct cma_id *id, struct cma_info *info, uint8_t user_len);
int cma_sgid_index(struct cma_id *id);

/* cma_event.c */
void cma_event_ack_locked(struct cma_event *e);
int cma_wait_event(struct cma_id *id);
int cma_send_rtu(struct cma_id *id);

/* cma_setup.c */
struct cma_event *cma_post(struct cma_id *id, enum rdma_cm_event_type type, int status);
void cma_copy_pdata(struct cma_event *e, const unsigned char *pd, int len, int seen);
void cma_fill_conn_param(struct cma_id *id, struct rdma_conn_param *p);
void cma_fill_ud_param(struct cma_id *id, struct rdma_ud_param *p);
void cma_established(struct cma_id *id);
void cma_pending_drop(struct cma_id *p, const char *why);
struct cma_id *cma_pending_to_id(struct cma_id *p);
void cma_active_fail(struct cma_id *id, enum rdma_cm_event_type type, int status);
int cma_read_frame(struct cma_id *id, enum iw_mpa_kind kind);
bool cma_more_queued(struct cma_id *id);
uint32_t cma_random_psn(const struct cma_id *id);

#define CMA_REPLY_WAIT_NS 30000000000ull /* the listener's application has this long */
#define CMA_TIMEWAIT_NS 10000000ull      /* DISCONNECTED to TIMEWAIT_EXIT (cma_conn.c) */
#define CMA_LINGER_NS 50000000ull        /* an iWARP stream's end waits this long at most */

/*
 * A connection protocol: the part of connection set-up that depends on what the
 * connection speaks, behind which rdma_cm's calls and the CM thread (cma_conn.c) run it.
 * Two today, both over the TCP connection cma_conn.c opens, watches and times:
 * softverbs' same-host handshake (cma_proto_local, cma_local.c) and iWARP's MPA exchange
 * (cma_proto_iwarp, cma_iwarp.c). An id's is iWARP's when id->iwarp. IB CM over RoCE is
 * meant to be a third: the same calls, with its own transport (MADs on the RoCE wire)
 * where cma_conn.c has TCP. All calls under cma_lock.
 */
enum cma_pd_call { CMA_PD_CALL_CONNECT, CMA_PD_CALL_ACCEPT, CMA_PD_CALL_REJECT };
struct cma_proto {
	const char *name;
	/* The private data the call takes at most (more: EINVAL). */
	uint8_t (*pd_max)(const struct cma_id *id, enum cma_pd_call call);
	/* Active, the connection up: the request goes (id->conn holds the parameters and
	 * the private data). 0 or -errno. */
	int (*request)(struct cma_id *id);
	/* Active: the reply is whole in id->rx: the events it makes. */
	void (*reply)(struct cma_id *id);
	/* Active: nobody listens (the connection refused, past its grace). */
	void (*refused)(struct cma_id *id);
	/* Passive: a request is whole in @p->rx. Takes it (an id and CONNECT_REQUEST, or a
	 * refusal) and says true, or false when it is not this protocol's. */
	bool (*take_request)(struct cma_id *p);
	/* rdma_accept, its parameters checked (id->conn): 0 or an errno. */
	int (*accept)(struct cma_id *id, const struct rdma_conn_param *param);
	/* Refuses the request in front of @id with @pd, and lets the connection go. */
	void (*refuse)(struct cma_id *id, const void *pd, uint8_t len);
};
extern const struct cma_proto cma_proto_local, cma_proto_iwarp;

/* cma_conn.c: the connection */
int cma_conn_start(void);
void cma_refuse_unanswered(struct cma_id *id);

/* cma_misc.c */
void cma_mc_leave_all(struct cma_id *id);

#endif
