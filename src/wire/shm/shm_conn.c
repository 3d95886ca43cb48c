/*
 * The shm wire's connections: a QP attaches to QP @qpn of this host over the abstract
 * socket of the QPN's block (sv_qpn.h), whose owner answers with the QP's segment, its
 * context's key table and its engine's eventfd (SCM_RIGHTS). The attach connection
 * stays open: a hang-up without a goodbye means the peer process died. Every socket is
 * watched by the progress engine (sv_engine_watch_locked), and the QPN owners are kept
 * under the engine's lock, which keeps a QP alive while an attach is answered.
 */
#include "wire/shm/shm_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "core/sv_obj.h"
#include "core/sv_qp_data.h"
#include "core/sv_qp_table.h"
#include "wire/sv_qpn.h"
#include "util/sv_log.h"
#include "util/sv_time.h"

enum link_kind { LINK_LISTEN, LINK_ACCEPTED, LINK_CONNECTED };

/* A socket of the wire, watched by the engine. */
struct link {
	enum link_kind kind;
	int fd;
	uint32_t our_qpn, peer_qpn; /* once known */
	bool bye;                   /* the peer said goodbye before hanging up */
	pid_t pid;                  /* ACCEPTED: the process that connected (SO_PEERCRED) */
	uint64_t id;                /* the engine's watch */
	struct link *next;
};

#define ATTACH_MAGIC 0x53564154u /* "SVAT" */
#define BYE_MAGIC 0x53564259u    /* "SVBY" */

struct attach_req {
	uint32_t magic;
	uint32_t src_qpn, dst_qpn, qp_type;
	int32_t src_pid;
};

struct attach_rep {
	uint32_t magic;
	int32_t status; /* 0 or a negative errno */
	int32_t pid;
	uint32_t qpn;
	uint64_t seg_len;
	uint64_t seg_addr; /* where the segment sits in the answering process */
};

static struct link *links; /* under the engine's lock */

static void link_event(void *arg, uint32_t events);

static struct link *new_link(enum link_kind kind, int fd)
{
	struct link *l = calloc(1, sizeof(*l));

	if (l) {
		l->kind = kind;
		l->fd = fd;
	}
	return l;
}

/* Watches @l (engine lock held). On failure it is freed and its fd closed. */
static int watch(struct link *l)
{
	int err = sv_engine_watch_locked(l->fd, link_event, l, &l->id);

	if (err) {
		close(l->fd);
		free(l);
		return err;
	}
	l->next = links;
	links = l;
	return 0;
}

/* Unwatches, closes and frees @l. Engine lock held. */
static void drop_link(struct link *l)
{
	for (struct link **pp = &links; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	sv_engine_unwatch_locked(l->id);
	close(l->fd);
	free(l);
}

int shm_conn_listen_locked(int listen_fd)
{
	struct link *l = new_link(LINK_LISTEN, listen_fd);

	if (!l) {
		close(listen_fd);
		return -ENOMEM;
	}
	return watch(l);
}

int shm_conn_qp_add(struct sv_qp *qp, uint32_t *qpn)
{
	static const struct sv_fork_hooks qpn_lock = {
		sv_qpn_atfork_prepare, sv_qpn_atfork_parent, sv_qpn_atfork_child,
	};
	int listen_fd, err;

	if (*qpn)
		return 0; /* a number another wire of the QP holds already (shm_qp_qp_take) */
	sv_engine_fork_hooks(&qpn_lock); /* the QPN registry's lock is taken under ours */
	sv_engine_lock();
	err = sv_qpn_alloc(qpn, qp, &listen_fd);
	if (!err && listen_fd >= 0)
		err = shm_conn_listen_locked(listen_fd);
	if (err && *qpn) {
		sv_qpn_free(*qpn);
		*qpn = 0;
	}
	sv_engine_unlock();
	return err;
}

void shm_conn_qp_remove(struct sv_qp *qp, bool keep_qpn)
{
	uint32_t qpn = qp->ibv.qp_base.qp_num;

	sv_engine_lock();
	/* Connections that peers opened to this QP: say goodbye, then hang up (a hang-up
	 * without goodbye means the process died). */
	for (struct link *l = links, *next; l; l = next) {
		next = l->next;
		if (l->kind == LINK_ACCEPTED && l->our_qpn == qpn) {
			uint32_t bye = BYE_MAGIC;

			(void)!send(l->fd, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
			drop_link(l);
		}
	}
	if (!keep_qpn)
		sv_qpn_free(qpn);
	sv_engine_unlock();
}

/* --- attach: the requester side ----------------------------------------------------------- */

static bool local_attach(const struct attach_req *req, struct attach_rep *rep, int fds[3]);

/*
 * SOFTVERBS_SHM_COPY=cma|bounce forces how payload crosses; by default each connection
 * probes whether process_vm_readv reaches the peer (different users, Yama, seccomp and
 * container profiles refuse it) and falls back to copying through the fifo.
 */
static bool copy_mode_cma(struct shm_peer *peer)
{
	const char *env = getenv("SOFTVERBS_SHM_COPY");
	uint32_t magic = 0;
	struct iovec l = { .iov_base = &magic, .iov_len = sizeof(magic) };
	struct iovec r = { .iov_base = (void *)(uintptr_t)peer->seg_addr, .iov_len = sizeof(magic) };

	if (env && !strcmp(env, "bounce"))
		return false;
	if (env && !strcmp(env, "cma"))
		return true;
	return process_vm_readv(peer->pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof(magic) &&
	       magic == SHM_QP_PAGE_MAGIC;
}

static int sock_connect_qpn(uint32_t qpn)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 2 };
	int fd, n;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = sv_qpn_sockname(qpn, sa.sun_path + 1, sizeof(sa.sun_path) - 1);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n))) {
		int err = errno == ECONNREFUSED ? -ENOENT : -errno;

		close(fd);
		return err;
	}
	return fd;
}

/*
 * Waits up to ATTACH_WAIT_MS for the answer on @fd: 0, or -EAGAIN. The progress thread
 * answers the attach requests that come to this process meanwhile: two processes whose
 * threads attach to each other at once would otherwise each wait for the other's
 * answer until the time runs out (a UD datagram between them was lost so).
 */
#define ATTACH_WAIT_MS 2000
static int await_answer(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t end = sv_now_ns() + ATTACH_WAIT_MS * 1000000ull;

	for (;;) {
		uint64_t now = sv_now_ns();
		int n;

		if (now >= end)
			return -EAGAIN;
		n = poll(&p, 1, sv_engine_on_thread() ? 1 : (int)((end - now) / 1000000 + 1));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
		if (sv_engine_on_thread())
			sv_engine_serve(0);
	}
}

static int recv_with_fds(int fd, void *buf, size_t len, int *fds, int n_fds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	int got = 0;

	if (r < 0)
		return -errno;
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < n; i++) {
				int f;

				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (got < n_fds)
					fds[got++] = f;
				else
					close(f);
			}
		}
	}
	if ((size_t)r != len || got != n_fds) {
		for (int i = 0; i < got; i++)
			close(fds[i]);
		return -EPROTO;
	}
	return 0;
}

/* A regular file (memfd) of at least @len bytes: accesses below @len cannot fault. */
static bool fd_holds(int fd, size_t len)
{
	struct stat st;

	return !fstat(fd, &st) && S_ISREG(st.st_mode) && (uint64_t)st.st_size >= len;
}

/*
 * A wake-up descriptor we may write 8 bytes to without blocking or being killed: an
 * anonymous inode (eventfd; no file type, unlike a pipe or a socket, whose closed far
 * end would raise SIGPIPE) opened non-blocking. fstat and fcntl only: a sandbox may not
 * mount /proc.
 */
static bool fd_is_eventfd(int fd)
{
	struct stat st;
	int fl = fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK) && !fstat(fd, &st) && (st.st_mode & S_IFMT) == 0;
}

int shm_conn_connect(struct sv_qp *qp, uint32_t dest_qpn, struct shm_peer **out)
{
	struct attach_req req = {
		.magic = ATTACH_MAGIC,
		.src_qpn = qp->ibv.qp_base.qp_num,
		.dst_qpn = dest_qpn,
		.qp_type = qp->ibv.qp_base.qp_type,
		.src_pid = getpid(),
	};
	struct attach_rep rep;
	struct shm_peer *peer;
	int fds[3], fd, err;
	struct link *l;

	/* A QP of this very process: no socket (and no waiting for our own thread). */
	if (local_attach(&req, &rep, fds)) {
		if (rep.status)
			return rep.status;
		fd = -1;
	} else {
		fd = sock_connect_qpn(dest_qpn);
		if (fd < 0)
			return fd;
		if (send(fd, &req, sizeof(req), MSG_NOSIGNAL) != sizeof(req)) {
			err = -errno;
			goto err_close;
		}
		err = await_answer(fd);
		if (!err)
			err = recv_with_fds(fd, &rep, sizeof(rep), fds, 3);
		if (err)
			goto err_close;
	}
	if (rep.magic != ATTACH_MAGIC || rep.status) {
		err = rep.status ? rep.status : -EPROTO;
		goto err_fds;
	}
	/* The other process may be anyone's: map only what has the size we access. */
	if (rep.seg_len != SHM_QP_SEG_SIZE || !fd_holds(fds[0], SHM_QP_SEG_SIZE) ||
	    !fd_holds(fds[1], SV_MR_TABLE_BYTES) || !fd_is_eventfd(fds[2])) {
		sv_dbg("qp %u: attach answer for qp %u has the wrong shape", req.src_qpn, dest_qpn);
		err = -EPROTO;
		goto err_fds;
	}
	peer = calloc(1, sizeof(*peer));
	if (!peer) {
		err = -ENOMEM;
		goto err_fds;
	}
	peer->seg = mmap(NULL, SHM_QP_SEG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	peer->mrs = mmap(NULL, SV_MR_TABLE_BYTES, PROT_READ, MAP_SHARED | MAP_NORESERVE, fds[1], 0);
	if (peer->seg == MAP_FAILED || peer->mrs == MAP_FAILED) {
		err = -ENOMEM;
		if (peer->seg != MAP_FAILED)
			munmap(peer->seg, rep.seg_len);
		if (peer->mrs != MAP_FAILED)
			munmap((void *)peer->mrs, SV_MR_TABLE_BYTES);
		free(peer);
		goto err_fds;
	}
	close(fds[0]);
	close(fds[1]);
	peer->seg_len = rep.seg_len;
	peer->seg_addr = rep.seg_addr;
	peer->page = peer->seg;
	peer->fifo = (struct shm_fifo *)((char *)peer->seg + SHM_QP_PAGE_SIZE);
	peer->wake_fd = fds[2];
	peer->pid = rep.pid;
	peer->qpn = dest_qpn;
	peer->sock = fd;
	peer->cma = copy_mode_cma(peer);

	peer->our_qpn = req.src_qpn;
	/* From now on the connection is watched: a hang-up means the peer is gone. */
	if (fd >= 0) {
		int wfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);

		l = wfd >= 0 ? new_link(LINK_CONNECTED, wfd) : NULL;
		if (!l && wfd >= 0)
			close(wfd);
		if (l) {
			l->our_qpn = req.src_qpn;
			l->peer_qpn = dest_qpn;
			sv_engine_lock();
			if (!watch(l))
				peer->watch_id = l->id;
			sv_engine_unlock();
		}
	}
	*out = peer;
	return 0;

err_fds:
	for (int i = 0; i < 3; i++)
		close(fds[i]);
err_close:
	if (fd >= 0)
		close(fd);
	return err;
}

void shm_conn_disconnect(struct shm_peer *peer)
{
	uint32_t bye = BYE_MAGIC;

	if (!peer)
		return;
	if (peer->sock < 0) {
		/* A QP of this process: tell it directly that we left. */
		struct sv_qp *qp = shm_conn_pin_qp(peer->qpn);

		if (qp) {
			shm_qp_peer_lost(qp, peer->our_qpn, false);
			sv_engine_unpin_qp(qp);
		}
	}
	/* A goodbye first: the peer then knows the hang-up is not a crash. */
	if (peer->sock >= 0)
		(void)!send(peer->sock, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
	sv_engine_lock();
	for (struct link *l = links, *next; l; l = next) {
		next = l->next;
		if (peer->watch_id && l->id == peer->watch_id) {
			/* Our own watch of this connection. */
			drop_link(l);
			break;
		}
	}
	sv_engine_unlock();
	if (peer->sock >= 0)
		close(peer->sock);
	close(peer->wake_fd);
	munmap(peer->seg, peer->seg_len);
	munmap((void *)peer->mrs, SV_MR_TABLE_BYTES);
	free(peer);
}

void shm_conn_wake(struct shm_peer *peer)
{
	uint64_t one = 1;

	(void)!write(peer->wake_fd, &one, sizeof(one));
}

/* --- attach: the responder side (progress thread) ----------------------------------------- */

static void send_with_fds(int fd, const void *buf, size_t len, const int *fds, int n_fds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 4)] = { 0 };
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (n_fds) {
		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n_fds);
	}
	(void)!sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* The answer to an attach request: status, and the QP's fds (not duplicated). Caller
 * holds the engine's lock, which keeps the QP alive. */
static void attach_answer(const struct attach_req *req, struct attach_rep *rep, int fds[3])
{
	struct sv_qp *qp = sv_qpn_owner(req->dst_qpn);

	*rep = (struct attach_rep){ .magic = ATTACH_MAGIC, .pid = getpid(), .qpn = req->dst_qpn };
	if (!qp || qp->wire != &sv_wire_shm)
		rep->status = -ENOENT; /* (a QP on another wire speaks no shm) */
	else if (sv_qp_type_peer(qp->ibv.qp_base.qp_type) != req->qp_type)
		rep->status = -EPROTOTYPE;
	if (rep->status)
		return;
	rep->seg_len = shm_qp(qp)->seg_len;
	rep->seg_addr = (uintptr_t)shm_qp(qp)->seg;
	fds[0] = shm_qp(qp)->seg_fd;
	fds[1] = to_svctx(qp->ibv.qp_base.context)->mrs->fd;
	fds[2] = sv_engine_wake_fd();
}

/* Answers an attach request on @l. Engine lock held. */
static void answer_attach(struct link *l, const struct attach_req *req)
{
	struct attach_rep rep;
	int fds[3];

	attach_answer(req, &rep, fds);
	if (rep.status) {
		send_with_fds(l->fd, &rep, sizeof(rep), NULL, 0);
		return;
	}
	l->our_qpn = req->dst_qpn;
	l->peer_qpn = req->src_qpn;
	send_with_fds(l->fd, &rep, sizeof(rep), fds, 3);
}

/* A QP of this process (not one a fork() copied from the parent), engine lock held. */
static struct sv_qp *own_qp(uint32_t qpn)
{
	struct sv_qp *qp = sv_qpn_owner(qpn);

	return qp && qp->wire == &sv_wire_shm && shm_qp(qp)->page->pid == getpid() ? qp : NULL;
}

/* Attach to a QP of this process without a socket: true if it is ours. */
static bool local_attach(const struct attach_req *req, struct attach_rep *rep, int fds[3])
{
	bool local;

	sv_engine_lock();
	local = own_qp(req->dst_qpn) != NULL;
	if (local) {
		attach_answer(req, rep, fds);
		if (!rep->status) {
			for (int i = 0; i < 3; i++)
				fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		}
	}
	sv_engine_unlock();
	return local;
}

struct sv_qp *shm_conn_pin_qp(uint32_t qpn)
{
	struct sv_qp *qp;

	sv_engine_lock();
	qp = own_qp(qpn);
	if (qp)
		sv_engine_pin_locked(qp);
	sv_engine_unlock();
	return qp;
}

/* A socket of the wire has something: engine lock held (dropped to tell a QP). */
static void link_event(void *arg, uint32_t events)
{
	struct link *l = arg;

	if (l->kind == LINK_LISTEN) {
		int fd;

		while ((fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
			struct link *a = new_link(LINK_ACCEPTED, fd);
			struct ucred cred;
			socklen_t len = sizeof(cred);

			if (!a) {
				close(fd);
				continue;
			}
			/* Who connected, as the kernel says: a request names any QP it likes. */
			if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len))
				a->pid = cred.pid;
			(void)watch(a);
		}
		return;
	}
	if (events & EPOLLIN) {
		union {
			struct attach_req req;
			uint32_t magic;
		} m;
		ssize_t r = recv(l->fd, &m, sizeof(m), MSG_DONTWAIT);

		if (r == (ssize_t)sizeof(m.req) && m.magic == ATTACH_MAGIC &&
		    l->kind == LINK_ACCEPTED) {
			answer_attach(l, &m.req);
			return;
		}
		if (r >= (ssize_t)sizeof(uint32_t) && m.magic == BYE_MAGIC) {
			l->bye = true;
			return;
		}
		if (r < 0 && errno == EAGAIN)
			return;
		/* r == 0 (hang-up) or garbage: the connection is over. */
		events |= EPOLLHUP;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		uint32_t our = l->our_qpn, peer = l->peer_qpn;
		bool fatal = !l->bye;

		pid_t from = l->kind == LINK_ACCEPTED ? l->pid : 0;

		drop_link(l);
		if (our) {
			struct sv_qp *qp = own_qp(our);

			/* A connection a peer opened to us speaks for our QP's peer only if it
			 * came from that peer's process: anyone may attach in its name. */
			if (qp && from && from != atomic_load(&shm_qp(qp)->peer_pid))
				qp = NULL;
			if (qp) {
				sv_engine_pin_locked(qp);
				sv_engine_unlock();
				shm_qp_peer_lost(qp, peer, fatal);
				sv_engine_unpin_qp(qp);
				sv_engine_lock();
			}
		}
	}
}

/* --- the peer connection ended ------------------------------------------------------------ */

void shm_qp_peer_lost(struct sv_qp *qp, uint32_t peer_qpn, bool fatal)
{
	uint32_t st = atomic_load(&qp->pub.state);

	/* Read from the published attributes, without the QP's lock: the engine never waits
	 * for it. The QP may have moved on to another peer meanwhile. */
	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD || atomic_load(&qp->pub.dest_qpn) != peer_qpn ||
	    (st != IBV_QPS_RTR && st != IBV_QPS_RTS && st != IBV_QPS_SQD))
		return;
	sv_dbg("qp %u: peer qp %u %s", qp->ibv.qp_base.qp_num, peer_qpn,
	       fatal ? "died" : "went away");
	if (fatal) {
		/* A dead peer is fatal: async QP_FATAL, everything outstanding flushed. */
		sv_qp_fail(qp, SV_ERR_EVENT(IBV_EVENT_QP_FATAL));
		return;
	}
	/* A peer that left (destroyed or reset its QP) does not touch our QP, as on a NIC:
	 * once what it sent before leaving is handled, work waiting for it fails as if the
	 * retries ran out (timers). */
	atomic_store(&shm_qp(qp)->peer_left, true);
}
