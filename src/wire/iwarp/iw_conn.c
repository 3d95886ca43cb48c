/*
 * Verbs-only setup between hosts: the host's well-known port, the handoff of accepted
 * connections to the QPN's owner, and the MPA request/reply of this port (iw_conn.h
 * says what and why).
 */
#include "wire/iwarp/iw_conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "util/sv_log.h"
#include "util/sv_time.h"
#include "wire/iwarp/iw_mpa.h"
#include "wire/iwarp/iw_proto.h"
#include "wire/sv_qpn.h"

/* ---- the frames ------------------------------------------------------------------ */

enum {
	SVIW_VERSION = 1,
	SVIW_LEN = 16, /* our private data after the enhanced words */
	SVIW_F_EXT = 1 << 0,
	SVIW_F_CRC = 1 << 1,
};
static const char sviw_magic[4] = { 'S', 'V', 'I', 'W' };

_Static_assert(IW_CONN_PD_LEN == IW_MPA_ENH_LEN + SVIW_LEN, "the frame length the header names");

/* One frame out (iw_xchg_encode, this port's form): @p's side, then softverbs' 16 bytes. */
static int build(void *buf, size_t cap, enum iw_mpa_kind kind, bool reject,
		 const struct iw_params *p)
{
	struct iw_xchg_side me = { .rev = IW_MPA_REV2, .crc = p->crc, .ird = p->ird,
				   .ord = p->ord, .rtr = p->rtr };
	unsigned char pd[SVIW_LEN];

	memcpy(pd, sviw_magic, sizeof(sviw_magic));
	pd[4] = SVIW_VERSION;
	pd[5] = (uint8_t)((p->ext ? SVIW_F_EXT : 0) | (p->crc ? SVIW_F_CRC : 0));
	pd[6] = pd[7] = 0;
	iw_put32(pd + 8, p->src_qpn);
	iw_put32(pd + 12, p->dest_qpn);
	return iw_xchg_encode(buf, cap, kind, true, &me, reject, pd, sizeof(pd));
}

/*
 * One frame of @kind in (iw_xchg_decode, in this port's form): its length, -EAGAIN,
 * -EPROTO (not MPA as this port speaks it: not revision 2 with the words, every end of
 * this port is softverbs), -EBADMSG (MPA, but not softverbs' private data). *rejected:
 * the frame is MPA and has R, whatever follows.
 */
static int parse(const void *buf, size_t len, enum iw_mpa_kind kind, struct iw_params *got,
		 bool *rejected)
{
	struct iw_xchg_side peer;
	const unsigned char *pd;
	uint16_t pd_len;
	int n;

	*rejected = false;
	n = iw_xchg_decode(buf, len, kind, true, &peer, rejected, &pd, &pd_len);
	if (n < 0)
		return n;
	/* Later versions may append; version 1's 16 bytes stay where they are. */
	if (pd_len < SVIW_LEN || memcmp(pd, sviw_magic, sizeof(sviw_magic)) ||
	    pd[4] < SVIW_VERSION)
		return -EBADMSG;
	*got = (struct iw_params){
		.src_qpn = iw_get32(pd + 8),
		.dest_qpn = iw_get32(pd + 12),
		.ird = peer.ird,
		.ord = peer.ord,
		.crc = peer.crc,
		.ext = pd[5] & SVIW_F_EXT,
		.rtr = peer.rtr,
	};
	return n;
}

int iw_conn_build_request(void *buf, size_t cap, const struct iw_params *want)
{
	return build(buf, cap, IW_MPA_REQUEST, false, want);
}

int iw_conn_parse_request(const void *buf, size_t len, struct iw_params *got)
{
	bool rej;
	int n = parse(buf, len, IW_MPA_REQUEST, got, &rej);

	return n == -EBADMSG ? -EPROTO : n;
}

int iw_conn_take_reply(const void *buf, size_t len, struct iw_params *got)
{
	struct iw_params p;
	bool rej;
	int n = parse(buf, len, IW_MPA_REPLY, &p, &rej);

	/* RFC 5044 §7.1: R set, the connection is refused, whatever the revision and the
	 * private data. */
	if (rej)
		return -ECONNREFUSED;
	if (n == -EBADMSG)
		return -EPROTO;
	if (n < 0)
		return n;
	*got = p;
	return n;
}

int iw_conn_reply(int fd, const struct iw_params *mine, bool reject)
{
	static const struct iw_params none;
	unsigned char buf[IW_MPA_FRAME_MAX];
	int n = build(buf, sizeof(buf), IW_MPA_REPLY, reject, mine ? mine : &none);

	return n < 0 ? n : iw_xchg_send(fd, buf, (size_t)n);
}

/* ---- environment ----------------------------------------------------------------- */

static long env_long(const char *name, long def, long min, long max)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || *end || v < min || v > max) {
		sv_warn("%s=%s: not a number in [%ld, %ld], using %ld\n", name, s, min, max, def);
		return def;
	}
	return v;
}

uint16_t iw_conn_port(void)
{
	return (uint16_t)env_long("SOFTVERBS_IWARP_PORT", IW_PORT_DEFAULT, 1, 65535);
}

enum { BUF_DEFAULT = 4 << 20 };

static long sysctl_long(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = 0;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/*
 * Socket buffers: the seed's §5.3 tuning raises the kernel's caps so that large
 * transfers have room. A fixed SO_SNDBUF/SO_RCVBUF turns the kernel's autotuning off, so
 * the default 4 MiB is set only where the cap allows it whole: clamped below it a fixed
 * buffer would be smaller than what autotuning grows to.
 */
static void set_buffers(int fd)
{
	static const struct {
		const char *env, *cap;
		int opt;
	} b[2] = {
		{ "SOFTVERBS_IWARP_SNDBUF", "/proc/sys/net/core/wmem_max", SO_SNDBUF },
		{ "SOFTVERBS_IWARP_RCVBUF", "/proc/sys/net/core/rmem_max", SO_RCVBUF },
	};
	static _Atomic long cap[2] = { -1, -1 };

	for (int i = 0; i < 2; i++) {
		long v = env_long(b[i].env, -1, 0, 1l << 30);
		int n;

		if (v < 0) {
			long c = atomic_load_explicit(&cap[i], memory_order_relaxed);

			if (c < 0) {
				c = sysctl_long(b[i].cap);
				atomic_store_explicit(&cap[i], c, memory_order_relaxed);
			}
			v = c >= BUF_DEFAULT ? BUF_DEFAULT : 0;
		}
		n = (int)v;
		if (n && setsockopt(fd, SOL_SOCKET, b[i].opt, &n, sizeof(n)))
			sv_dbg("iw_conn: %s %d: %s\n", b[i].env, n, strerror(errno));
	}
}

static void set_nodelay(int fd)
{
	int one = 1;

	/* siw sets TCP_NODELAY: FPDUs go out as they are made. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- active side ----------------------------------------------------------------- */

static int wait_fd(int fd, short what, uint64_t deadline)
{
	for (;;) {
		uint64_t now = sv_now_ns();
		struct pollfd p = { .fd = fd, .events = what };
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

int iw_conn_dial(const struct sockaddr *to, socklen_t to_len, const struct iw_params *want,
		 int timeout_ms)
{
	unsigned char req[IW_MPA_FRAME_MAX];
	uint64_t deadline = sv_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
	size_t off = 0;
	int fd, n, err = 0, soerr = 0;
	socklen_t sl = sizeof(soerr);

	n = iw_conn_build_request(req, sizeof(req), want);
	if (n < 0)
		return n;
	fd = socket(to->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	set_nodelay(fd);
	set_buffers(fd); /* before connect: the window scale is chosen in the SYN */
	if (connect(fd, to, to_len)) {
		if (errno != EINPROGRESS) {
			err = -errno;
			goto err_close;
		}
		err = wait_fd(fd, POLLOUT, deadline);
		if (err)
			goto err_close;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl))
			soerr = errno;
		if (soerr) {
			err = -soerr;
			goto err_close;
		}
	}
	/* 40 bytes into a fresh socket's buffer: one send, short of a broken peer. */
	if (deadline < sv_now_ns() + 1000000000ull)
		deadline = sv_now_ns() + 1000000000ull;
	while (off < (size_t)n) {
		ssize_t r = send(fd, req + off, (size_t)n - off, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (r > 0) {
			off += (size_t)r;
			continue;
		}
		if (r < 0 && errno != EAGAIN && errno != EINTR) {
			err = -errno;
			goto err_close;
		}
		err = wait_fd(fd, POLLOUT, deadline);
		if (err)
			goto err_close;
	}
	return fd;

err_close:
	close(fd);
	return err;
}

/* The last answers of iw_conn_answers, by address (oldest replaced). */
enum { PROBES = 16 };
#define PROBE_AGAIN_NS 20000000ull /* a refused probe looks again after this long */
static struct probe {
	union ibv_gid gid;
	uint64_t at; /* sv_now_ns; 0: empty */
	bool yes;
} probes[PROBES];
static pthread_mutex_t probes_lock = PTHREAD_MUTEX_INITIALIZER;

bool iw_conn_answers(const union ibv_gid *gid, const union ibv_gid *sgid, int timeout_ms)
{
	struct sockaddr_storage ss;
	struct probe *slot = &probes[0];
	uint64_t now = sv_now_ns(), deadline = now + (uint64_t)timeout_ms * 1000000ull;
	socklen_t len;
	bool yes = false;
	int fd, soerr = 0;
	socklen_t sl = sizeof(soerr);

	pthread_mutex_lock(&probes_lock);
	for (int i = 0; i < PROBES; i++) {
		struct probe *p = &probes[i];

		if (p->at && !memcmp(&p->gid, gid, sizeof(*gid)) && now - p->at < IW_PROBE_TTL_NS) {
			yes = p->yes;
			pthread_mutex_unlock(&probes_lock);
			return yes;
		}
		if (p->at < slot->at)
			slot = p;
	}
	pthread_mutex_unlock(&probes_lock);
	if (iw_conn_gid_addr(gid, sgid, &ss, &len))
		return false;
	for (;;) {
		bool refused;

		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return false;
		soerr = 0;
		if (!connect(fd, (struct sockaddr *)&ss, len))
			yes = true;
		else if (errno == ECONNREFUSED)
			soerr = ECONNREFUSED;
		else if (errno == EINPROGRESS && !wait_fd(fd, POLLOUT, deadline) &&
			 !getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) && !soerr)
			yes = true;
		close(fd);
		/* Refused: nobody listens there now. A softverbs host's port changes hands
		 * when the process that held it leaves, and the next takes it over in a
		 * moment (a busy machine: longer): look again, until the time is up, before
		 * taking it for a host without softverbs, which both ends would not agree on
		 * (one end on iWARP, the other on RoCE). */
		refused = soerr == ECONNREFUSED;
		if (yes || !refused || sv_now_ns() + PROBE_AGAIN_NS >= deadline)
			break;
		(void)poll(NULL, 0, (int)(PROBE_AGAIN_NS / 1000000));
	}
	pthread_mutex_lock(&probes_lock);
	*slot = (struct probe){ .gid = *gid, .at = sv_now_ns(), .yes = yes };
	pthread_mutex_unlock(&probes_lock);
	return yes;
}

int iw_conn_gid_addr(const union ibv_gid *gid, const union ibv_gid *sgid,
		     struct sockaddr_storage *out, socklen_t *len)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	uint16_t port = htons(iw_conn_port());

	memset(out, 0, sizeof(*out));
	if (!memcmp(gid->raw, v4mapped, sizeof(v4mapped))) {
		struct sockaddr_in *sin = (struct sockaddr_in *)out;

		sin->sin_family = AF_INET;
		sin->sin_port = port;
		memcpy(&sin->sin_addr, gid->raw + 12, 4);
		*len = sizeof(*sin);
		return 0;
	}
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;

	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = port;
	memcpy(&sin6->sin6_addr, gid->raw, 16);
	*len = sizeof(*sin6);
	if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) {
		struct ifaddrs *ifs, *i;

		/* A link-local address means something on one link only: the one our
		 * source GID is on. */
		if (!sgid || getifaddrs(&ifs))
			return -ENODEV;
		for (i = ifs; i; i = i->ifa_next) {
			const struct sockaddr_in6 *a = (const void *)i->ifa_addr;

			if (a && a->sin6_family == AF_INET6 &&
			    !memcmp(&a->sin6_addr, sgid->raw, 16)) {
				sin6->sin6_scope_id = if_nametoindex(i->ifa_name);
				break;
			}
		}
		freeifaddrs(ifs);
		if (!sin6->sin6_scope_id)
			return -ENODEV;
	}
	return 0;
}

/* ---- the host's port and the handoff --------------------------------------------- */

/* An accepted connection whose request is still coming in. */
struct pend {
	enum { PEND_TCP, PEND_HANDOFF } kind; /* from the network / from the port's holder */
	int fd;
	uint64_t id;       /* the engine's watch */
	uint64_t deadline; /* sv_now_ns(): closed if not complete by then */
	struct iw_xchg_rx rx; /* the request so far (a handoff's: the whole message) */
	struct pend *next;
};

/* A socket watched for us alone: a block's handoff listener, a monitor connection. */
struct sock {
	uint32_t block;
	int fd;
	uint64_t id;
	struct sock *next;
};

/* Everything under the engine's lock (handler: atomic, set from anywhere). */
static struct {
	uint16_t port;     /* the port the fields below are about */
	bool wanted;       /* iw_conn_port_ensure was called: keep someone holding it */
	int claim_fd;      /* holder: "softverbs/iw/port/<port>", listening */
	int tcp_fd;        /* holder: the TCP port, listening */
	int mon_fd;        /* not holder: connected to the holder's claim socket */
	int timer_fd;      /* timerfd: pends' deadlines, port retries */
	uint64_t claim_id, tcp_id, mon_id, timer_id;
	uint64_t retry_at; /* sv_now_ns() of the next ensure_locked, 0: none */
	uint64_t bind_backoff; /* ns before the next try at a TCP port someone else has */
	bool tcp_paused;   /* out of descriptors: the listener unwatched until the timer */
	int n_pends;
	struct pend *pends;
	struct sock *blocks; /* our handoff listeners */
	struct sock *mons;   /* holder: the monitors' connections */
} cs = { .claim_fd = -1, .tcp_fd = -1, .mon_fd = -1, .timer_fd = -1 };

static _Atomic(iw_conn_handler) handler;

void iw_conn_set_handler(iw_conn_handler fn)
{
	atomic_store(&handler, fn);
}

/* fork: the child holds nothing of the parent's (a child that lived on with a copy of the
 * listener would keep the port from the next holder). No lock of our own: the engine's
 * covers us; the hooks exist for the child's clean-up. Never unwatch in the child: the
 * epoll instance is the parent's too. */
static unsigned forks; /* counted under the engine's lock (its prepare hook takes it) */

/* Not empty: sv_engine_fork_hooks tells hook sets apart by their prepare function, which
 * must not be folded with another wire's empty one. */
static void fork_prepare(void)
{
	forks++;
}

static void fork_parent(void)
{
}

static void close_socks(struct sock **list)
{
	while (*list) {
		struct sock *s = *list;

		*list = s->next;
		close(s->fd);
		free(s);
	}
}

static void fork_child(void)
{
	int *fds[] = { &cs.claim_fd, &cs.tcp_fd, &cs.mon_fd, &cs.timer_fd };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
	while (cs.pends) {
		struct pend *p = cs.pends;

		cs.pends = p->next;
		close(p->fd);
		free(p);
	}
	close_socks(&cs.blocks);
	close_socks(&cs.mons);
	cs.wanted = false;
	cs.retry_at = 0;
	cs.bind_backoff = 0;
	cs.tcp_paused = false;
	cs.n_pends = 0;
	cs.port = 0;
}

static void init_locked(void)
{
	static const struct sv_fork_hooks hooks = { fork_prepare, fork_parent, fork_child };
	static const struct sv_fork_hooks qpn_hooks = {
		sv_qpn_atfork_prepare, sv_qpn_atfork_parent, sv_qpn_atfork_child,
	};
	static bool done; /* under the engine's lock */

	if (done)
		return;
	done = true;
	sv_engine_fork_hooks(&hooks);
	sv_engine_fork_hooks(&qpn_hooks); /* sv_qpn_owner's lock is taken under the engine's */
}

static int abstract_addr(struct sockaddr_un *sa, const char *fmt, unsigned v)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	/* Abstract namespace: sun_path starts with a NUL byte; gone with the socket. */
	n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, fmt, v);
	return (int)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int unix_listen(const char *fmt, unsigned v)
{
	struct sockaddr_un sa;
	socklen_t sl = (socklen_t)abstract_addr(&sa, fmt, v);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sl) || listen(fd, 64)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static int unix_connect(const char *fmt, unsigned v)
{
	struct sockaddr_un sa;
	socklen_t sl = (socklen_t)abstract_addr(&sa, fmt, v);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sl)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

#define CLAIM_NAME "softverbs/iw/port/%u"
#define BLOCK_NAME "softverbs/iw/%u"

/* The other end of a local socket may hand us (or be handed) a TCP connection: the same
 * user, or root. */
static bool peer_trusted(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len))
		return false;
	return cred.uid == geteuid() || cred.uid == 0;
}

/* -- timers: one timerfd, armed for the earliest deadline -- */

static void rearm_locked(void)
{
	uint64_t at = cs.retry_at;
	struct itimerspec its = { 0 };

	for (struct pend *p = cs.pends; p; p = p->next)
		if (!at || p->deadline < at)
			at = p->deadline;
	if (cs.timer_fd < 0)
		return;
	if (at) {
		its.it_value.tv_sec = (time_t)(at / 1000000000ull);
		its.it_value.tv_nsec = (long)(at % 1000000000ull);
		if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
			its.it_value.tv_nsec = 1;
	}
	(void)timerfd_settime(cs.timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void drop_pend(struct pend *p, bool close_fd);
static int ensure_locked(void);
static void retry_in_locked(uint64_t ns);
static void tcp_accept(void *arg, uint32_t events);

static void timer_event(void *arg, uint32_t events)
{
	uint64_t now = sv_now_ns(), n;
	struct pend *p, *next;

	(void)arg;
	(void)events;
	(void)!read(cs.timer_fd, &n, sizeof(n));
	for (p = cs.pends; p; p = next) {
		next = p->next;
		if (p->deadline <= now) {
			sv_dbg("iw_conn: no MPA request %s in time: closed\n",
			       p->kind == PEND_TCP ? "from the network" : "from the holder");
			drop_pend(p, true);
		}
	}
	if (cs.retry_at && cs.retry_at <= now) {
		cs.retry_at = 0;
		if (cs.tcp_paused && cs.tcp_fd >= 0 &&
		    !sv_engine_watch_locked(cs.tcp_fd, tcp_accept, NULL, &cs.tcp_id))
			cs.tcp_paused = false;
		else if (cs.tcp_paused)
			retry_in_locked(100000000ull);
		if (cs.wanted)
			(void)ensure_locked();
	}
	rearm_locked();
}

static int timer_locked(void)
{
	int fd, err;

	if (cs.timer_fd >= 0)
		return 0;
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = sv_engine_watch_locked(fd, timer_event, NULL, &cs.timer_id);
	if (err) {
		close(fd);
		return err;
	}
	cs.timer_fd = fd;
	return 0;
}

static void retry_in_locked(uint64_t ns)
{
	uint64_t at = sv_now_ns() + ns;

	if (timer_locked())
		return;
	if (!cs.retry_at || at < cs.retry_at)
		cs.retry_at = at;
	rearm_locked();
}

/* -- connections coming in -- */

static void pend_event(void *arg, uint32_t events);

static void drop_pend(struct pend *p, bool close_fd)
{
	for (struct pend **pp = &cs.pends; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	sv_engine_unwatch_locked(p->id);
	if (close_fd)
		close(p->fd);
	free(p);
	cs.n_pends--;
}

static void add_pend(int kind, int fd)
{
	struct pend *p = calloc(1, sizeof(*p));

	if (!p || timer_locked() || sv_engine_watch_locked(fd, pend_event, p, &p->id)) {
		free(p);
		close(fd);
		return;
	}
	p->kind = kind;
	p->fd = fd;
	p->deadline = sv_now_ns() + iw_xchg_request_wait_ns();
	p->next = cs.pends;
	cs.pends = p;
	cs.n_pends++;
	rearm_locked();
}

/* Refuses the request on @fd (RFC 5044 §7.1: a reply with R) and closes it. */
static void reject(int fd, const struct iw_params *req)
{
	struct iw_params r = { 0 };

	if (req) {
		r.src_qpn = req->dest_qpn;
		r.dest_qpn = req->src_qpn;
		r.crc = req->crc;
	}
	(void)iw_conn_reply(fd, &r, true);
	close(fd);
}

static struct sock *find_block(uint32_t block)
{
	for (struct sock *s = cs.blocks; s; s = s->next)
		if (s->block == block)
			return s;
	return NULL;
}

/* A request for one of our QPNs: to the wire's handler, which owns @fd from now on. */
static void deliver(int fd, const struct iw_params *req)
{
	iw_conn_handler fn = atomic_load(&handler);

	if (!fn || !sv_qpn_owner(req->dest_qpn)) {
		sv_dbg("iw_conn: QPN %#x: no such QP here, rejected\n", req->dest_qpn);
		reject(fd, req);
		return;
	}
	fn(fd, req);
}

/* Sends @fd and the request's bytes to the owner of @block's handoff socket. */
static int hand_off(uint32_t block, int fd, const void *req, size_t len)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)req, .iov_len = len };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	int s = unix_connect(BLOCK_NAME, block), err = 0;

	if (s < 0)
		return s;
	if (!peer_trusted(s)) {
		close(s);
		return -EPERM;
	}
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	/* A fresh connection's queue takes one small message: no wait. */
	ssize_t r = sendmsg(s, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (r != (ssize_t)len)
		err = r < 0 ? -errno : -EIO;
	close(s);
	return err;
}

/* A complete request on @fd, from the network: to its QPN's owner. */
static void route(int fd, const struct iw_params *req, const void *raw, size_t len)
{
	uint32_t block = req->dest_qpn >> SV_QPN_BLOCK_BITS;
	int err;

	if (sv_qpn_owner(req->dest_qpn) || find_block(block)) {
		deliver(fd, req);
		return;
	}
	err = hand_off(block, fd, raw, len);
	if (err) {
		sv_dbg("iw_conn: QPN %#x: no owner on this host (%s), rejected\n", req->dest_qpn,
		       strerror(-err));
		reject(fd, req);
		return;
	}
	close(fd); /* the owner has its own descriptor of the connection now */
}

static void tcp_request(struct pend *p, uint32_t events)
{
	struct iw_params req;
	bool rej;
	int n = iw_xchg_read(&p->rx, p->fd, IW_MPA_REQUEST, true);

	if (n == 0 && !(events & (EPOLLHUP | EPOLLERR)))
		return;
	if (n == 0 || (n < 0 && n != -EPROTO)) {
		drop_pend(p, true); /* closed, reset, or hung up half-way */
		return;
	}
	if (n > 0)
		n = parse(p->rx.buf, p->rx.len, IW_MPA_REQUEST, &req, &rej);
	if (n == -EBADMSG) {
		/* MPA, but not from softverbs (this port speaks only to softverbs). */
		int fd = p->fd;

		drop_pend(p, false);
		reject(fd, NULL);
		return;
	}
	if (n < 0) {
		sv_dbg("iw_conn: not an MPA request: closed\n");
		drop_pend(p, true);
		return;
	}
	int fd = p->fd;
	unsigned char raw[IW_MPA_FRAME_MAX];
	size_t len = (size_t)n;

	memcpy(raw, p->rx.buf, len);
	drop_pend(p, false); /* unwatched before the handler watches the fd itself */
	route(fd, &req, raw, len);
}

static void handoff_request(struct pend *p)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = p->rx.buf, .iov_len = sizeof(p->rx.buf) };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	struct iw_params req;
	ssize_t r = recvmsg(p->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int fd = -1, type = 0, n;
	socklen_t tl = sizeof(type);
	bool rej;

	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); r >= 0 && c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int got;

			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fd < 0)
				fd = got;
			else
				close(got); /* one connection per message */
		}
	}
	n = r > 0 ? parse(p->rx.buf, (size_t)r, IW_MPA_REQUEST, &req, &rej) : -EPROTO;
	drop_pend(p, true); /* one message per handoff connection */
	if (fd < 0)
		return;
	if (n != r || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_STREAM) {
		close(fd);
		return;
	}
	(void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	deliver(fd, &req);
}

static void pend_event(void *arg, uint32_t events)
{
	struct pend *p = arg;

	if (p->kind == PEND_TCP)
		tcp_request(p, events);
	else
		handoff_request(p);
}

/* -- listeners -- */

enum { MAX_PENDS = 256 }; /* requests being read at once: a flood costs no more */

static void tcp_accept(void *arg, uint32_t events)
{
	(void)arg;
	(void)events;
	for (;;) {
		int fd = accept4(cs.tcp_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			/* Out of descriptors (EMFILE, ENFILE, ENOBUFS): the listener would stay
			 * readable and spin the progress thread. Look again in a while. */
			sv_warn("iw_conn: accept on port %u: %s; paused\n", cs.port, strerror(errno));
			sv_engine_unwatch_locked(cs.tcp_id);
			cs.tcp_paused = true;
			retry_in_locked(100000000ull);
			return;
		}
		if (cs.n_pends >= MAX_PENDS) {
			sv_dbg("iw_conn: %d requests pending: connection closed\n", cs.n_pends);
			close(fd);
			continue;
		}
		set_nodelay(fd);
		add_pend(PEND_TCP, fd);
	}
}

static void block_accept(void *arg, uint32_t events)
{
	struct sock *b = arg;
	int fd;

	(void)events;
	while ((fd = accept4(b->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		if (!peer_trusted(fd)) {
			sv_warn("iw_conn: a connection handed over by another user: refused\n");
			close(fd);
			continue;
		}
		add_pend(PEND_HANDOFF, fd);
	}
}

static void drop_sock(struct sock **list, struct sock *s)
{
	for (struct sock **pp = list; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	sv_engine_unwatch_locked(s->id);
	close(s->fd);
	free(s);
}

static void mon_gone(void *arg, uint32_t events)
{
	(void)events;
	drop_sock(&cs.mons, arg); /* the watcher exited (it sends nothing) */
}

static void claim_accept(void *arg, uint32_t events)
{
	int fd;

	(void)arg;
	(void)events;
	while ((fd = accept4(cs.claim_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct sock *s = calloc(1, sizeof(*s));

		if (!s || sv_engine_watch_locked(fd, mon_gone, s, &s->id)) {
			free(s);
			close(fd);
			continue;
		}
		s->fd = fd;
		s->next = cs.mons;
		cs.mons = s;
	}
}

static void unwatch_close(int *fd, uint64_t id)
{
	if (*fd < 0)
		return;
	sv_engine_unwatch_locked(id);
	close(*fd);
	*fd = -1;
}

static void holder_gone(void *arg, uint32_t events)
{
	(void)arg;
	(void)events;
	/* The holder's end only ever hangs up: it exited (or let go of the port). */
	unwatch_close(&cs.mon_fd, cs.mon_id);
	sv_info("iw_conn: the holder of port %u is gone: taking over\n", cs.port);
	(void)ensure_locked();
}

/* TCP listener on all addresses: IPv6 dual-stack, else IPv4. */
static int tcp_listen(uint16_t port)
{
	int fams[2] = { AF_INET6, AF_INET }, err = -EAFNOSUPPORT;

	for (int i = 0; i < 2; i++) {
		struct sockaddr_storage ss = { 0 };
		socklen_t sl;
		int one = 1, zero = 0;
		int fd = socket(fams[i], SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (fams[i] == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

			a->sin6_family = AF_INET6;
			a->sin6_port = htons(port);
			a->sin6_addr = in6addr_any;
			sl = sizeof(*a);
			(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		} else {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;

			a->sin_family = AF_INET;
			a->sin_port = htons(port);
			a->sin_addr.s_addr = htonl(INADDR_ANY);
			sl = sizeof(*a);
		}
		/* Connections of an earlier holder in TIME_WAIT do not keep the port. */
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		set_nodelay(fd);  /* accepted sockets inherit it */
		set_buffers(fd);  /* and these, before the SYN-ACK chooses the window scale */
		if (!bind(fd, (struct sockaddr *)&ss, sl) && !listen(fd, 128))
			return fd;
		err = -errno;
		close(fd);
		/* No IPv6 on this host (disabled, or no such address family): IPv4. */
		if (err != -EAFNOSUPPORT && err != -EADDRNOTAVAIL)
			return err;
	}
	return err;
}

static int tcp_bind_locked(void)
{
	int fd = tcp_listen(cs.port), err;

	if (fd >= 0) {
		err = sv_engine_watch_locked(fd, tcp_accept, NULL, &cs.tcp_id);
		if (err)
			close(fd);
		fd = err ? err : fd;
	}
	if (fd < 0) {
		/* A program that is not softverbs, or a holder still closing: again soon,
		 * then less and less often (200 ms doubling to 5 s). */
		cs.bind_backoff = cs.bind_backoff ? cs.bind_backoff * 2 : 200000000ull;
		if (cs.bind_backoff > 5000000000ull)
			cs.bind_backoff = 5000000000ull;
		retry_in_locked(cs.bind_backoff);
		return fd;
	}
	cs.bind_backoff = 0;
	cs.tcp_paused = false;
	cs.tcp_fd = fd;
	sv_info("iw_conn: this process answers on TCP port %u\n", cs.port);
	return 0;
}

static void drop_port_locked(void)
{
	unwatch_close(&cs.tcp_fd, cs.tcp_id);
	unwatch_close(&cs.claim_fd, cs.claim_id);
	unwatch_close(&cs.mon_fd, cs.mon_id);
	while (cs.mons)
		drop_sock(&cs.mons, cs.mons);
	cs.retry_at = 0;
	cs.bind_backoff = 0;
	cs.tcp_paused = false;
}

static int ensure_locked(void)
{
	uint16_t port = iw_conn_port();
	int fd, err;

	init_locked();
	if (port != cs.port) {
		drop_port_locked();
		cs.port = port;
	}
	cs.wanted = true;
	if (cs.claim_fd >= 0)
		return cs.tcp_fd >= 0 ? 0 : tcp_bind_locked();
	if (cs.mon_fd >= 0) {
		char c;

		/* One look (the holder never sends): has it gone, and the progress thread
		 * not yet heard? Then take over now. */
		if (recv(cs.mon_fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) < 0 && errno == EAGAIN)
			return 0;
		unwatch_close(&cs.mon_fd, cs.mon_id);
	}
	/* The claim: binding the abstract name is atomic, and it vanishes with us. */
	fd = unix_listen(CLAIM_NAME, port);
	if (fd >= 0) {
		err = sv_engine_watch_locked(fd, claim_accept, NULL, &cs.claim_id);
		if (err) {
			close(fd);
			return err;
		}
		cs.claim_fd = fd;
		return tcp_bind_locked();
	}
	if (fd != -EADDRINUSE)
		return fd;
	/* Someone holds it: watch them, to take over when they go. */
	fd = unix_connect(CLAIM_NAME, port);
	if (fd >= 0) {
		err = sv_engine_watch_locked(fd, holder_gone, NULL, &cs.mon_id);
		if (err) {
			close(fd);
			return err;
		}
		cs.mon_fd = fd;
		return 0;
	}
	/* The name is bound but not listening yet (a holder starting), or its queue is
	 * full: look again in a moment. */
	retry_in_locked(20000000ull);
	return -EAGAIN;
}

int iw_conn_port_ensure(void)
{
	int err;

	sv_engine_lock();
	err = ensure_locked();
	sv_engine_unlock();
	return err;
}

bool iw_conn_port_held(void)
{
	bool held;

	sv_engine_lock();
	held = cs.claim_fd >= 0 && cs.tcp_fd >= 0 && cs.port == iw_conn_port();
	sv_engine_unlock();
	return held;
}

int iw_conn_open_block_locked(uint32_t block)
{
	struct sock *s;
	int fd, err;

	init_locked();
	if (find_block(block))
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	fd = unix_listen(BLOCK_NAME, block);
	if (fd < 0) {
		free(s);
		return fd;
	}
	s->block = block;
	s->fd = fd;
	err = sv_engine_watch_locked(fd, block_accept, s, &s->id);
	if (err) {
		close(fd);
		free(s);
		return err;
	}
	s->next = cs.blocks;
	cs.blocks = s;
	return 0;
}

void iw_conn_close_block_locked(uint32_t block)
{
	struct sock *s = find_block(block);

	if (s)
		drop_sock(&cs.blocks, s);
}
