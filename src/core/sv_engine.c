#include "core/sv_engine.h"
#include "core/sv_qp_table.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/sv_obj.h"
#include "core/sv_qp_data.h"
#include "core/sv_qpn.h"
#include "util/sv_log.h"
#include "util/sv_time.h"

_Atomic uint64_t sv_engine_polls;
_Atomic uint32_t sv_engine_look = 1;
_Atomic uint32_t sv_engine_qkey_violations;
static _Atomic uint32_t bad_pkeys_gone; /* counted on QPs destroyed since */

enum link_kind { LINK_LISTEN, LINK_ACCEPTED, LINK_CONNECTED, LINK_WAKE };

/* A socket the progress thread watches. */
struct link {
	enum link_kind kind;
	int fd;
	uint32_t our_qpn, peer_qpn; /* once known */
	bool bye;                   /* the peer said goodbye before hanging up */
	uint64_t id;                /* unique: how a peer names its link */
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

static struct {
	pthread_mutex_t lock; /* guards everything below */
	pid_t pid;            /* the process this state belongs to (fork) */
	int epfd, wake_fd;
	bool started;
	uint64_t next_link_id;
	struct link *links;
	struct sv_qp **qps;
	int n_qps, cap_qps;
} eng = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *progress_main(void *arg);
static void serve_sockets(int timeout);

/* Set in the progress thread: it must keep answering attach requests while it waits
 * for an answer of its own (sv_engine_connect). */
static _Thread_local bool in_progress_thread;
static bool local_attach(const struct attach_req *req, struct attach_rep *rep, int fds[3]);

static int watch(struct link *l)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = l };

	if (epoll_ctl(eng.epfd, EPOLL_CTL_ADD, l->fd, &ev))
		return -errno;
	l->id = ++eng.next_link_id;
	l->next = eng.links;
	eng.links = l;
	return 0;
}

static struct link *new_link(enum link_kind kind, int fd)
{
	struct link *l = calloc(1, sizeof(*l));

	if (l) {
		l->kind = kind;
		l->fd = fd;
	}
	return l;
}

/* Unwatches and frees @l. Caller holds eng.lock. */
static void drop_link(struct link *l)
{
	for (struct link **pp = &eng.links; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	epoll_ctl(eng.epfd, EPOLL_CTL_DEL, l->fd, NULL);
	close(l->fd);
	free(l);
}

/*
 * fork() while another thread holds the engine's or the QPN registry's lock would
 * leave the child a lock nobody releases: take both around fork, and give the child
 * fresh ones (it starts its own engine on first use: eng.pid differs).
 */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&eng.lock);
	sv_qpn_atfork_prepare();
}

static void atfork_parent(void)
{
	sv_qpn_atfork_parent();
	pthread_mutex_unlock(&eng.lock);
}

static void atfork_child(void)
{
	sv_qpn_atfork_child();
	sv_mr_place_after_fork();
	pthread_mutex_init(&eng.lock, NULL);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Starts the engine of this process. Caller holds eng.lock. */
static int engine_start(void)
{
	pthread_t thread;
	struct link *wake;

	pthread_once(&atfork_once, atfork_register);
	if (eng.started && eng.pid == getpid())
		return 0;
	/* A forked child inherits a copy without the thread: start afresh. */
	eng.links = NULL;
	eng.n_qps = 0;
	eng.epfd = epoll_create1(EPOLL_CLOEXEC);
	eng.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (eng.epfd < 0 || eng.wake_fd < 0)
		return -errno;
	wake = new_link(LINK_WAKE, eng.wake_fd);
	if (!wake || watch(wake))
		return -ENOMEM;
	if (pthread_create(&thread, NULL, progress_main, NULL))
		return -EAGAIN;
	pthread_detach(thread);
	eng.pid = getpid();
	eng.started = true;
	return 0;
}

int sv_engine_add_qp(struct sv_qp *qp, uint32_t *qpn)
{
	int listen_fd, err;

	pthread_mutex_lock(&eng.lock);
	err = engine_start();
	if (!err)
		err = sv_qpn_alloc(qpn, qp, &listen_fd);
	if (!err && listen_fd >= 0) {
		struct link *l = new_link(LINK_LISTEN, listen_fd);

		err = l ? watch(l) : -ENOMEM;
	}
	if (!err && eng.n_qps == eng.cap_qps) {
		int cap = eng.cap_qps ? 2 * eng.cap_qps : 16;
		struct sv_qp **q = realloc(eng.qps, (size_t)cap * sizeof(*q));

		if (q) {
			eng.qps = q;
			eng.cap_qps = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		eng.qps[eng.n_qps++] = qp;
	else if (*qpn)
		sv_qpn_free(*qpn);
	pthread_mutex_unlock(&eng.lock);
	return err;
}

uint32_t sv_engine_bad_pkeys(void)
{
	uint32_t n = atomic_load(&bad_pkeys_gone);

	pthread_mutex_lock(&eng.lock);
	for (int i = 0; i < eng.n_qps; i++)
		n += atomic_load_explicit(&eng.qps[i]->page->bad_pkey, memory_order_relaxed);
	pthread_mutex_unlock(&eng.lock);
	return n;
}

void sv_engine_remove_qp(struct sv_qp *qp)
{
	uint32_t qpn = qp->ibv.qp_base.qp_num;

	pthread_mutex_lock(&eng.lock);
	atomic_fetch_add(&bad_pkeys_gone, atomic_load(&qp->page->bad_pkey));
	for (int i = 0; i < eng.n_qps; i++) {
		if (eng.qps[i] == qp) {
			eng.qps[i] = eng.qps[--eng.n_qps];
			break;
		}
	}
	/* Connections that peers opened to this QP: say goodbye, then hang up (a hang-up
	 * without goodbye means the process died). */
	for (struct link *l = eng.links, *next; l; l = next) {
		next = l->next;
		if (l->kind == LINK_ACCEPTED && l->our_qpn == qpn) {
			uint32_t bye = BYE_MAGIC;

			(void)!send(l->fd, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
			drop_link(l);
		}
	}
	sv_qpn_free(qpn);
	pthread_mutex_unlock(&eng.lock);
	/* The progress thread may still hold a reference taken before we unlinked it. */
	while (atomic_load(&qp->eng_ref))
		sched_yield();
}

/* --- attach: the requester side ----------------------------------------------------------- */

/*
 * SOFTVERBS_SHM_COPY=cma|bounce forces how payload crosses; by default each connection
 * probes whether process_vm_readv reaches the peer (different users, Yama, seccomp and
 * container profiles refuse it) and falls back to copying through the fifo.
 */
static bool copy_mode_cma(struct sv_peer *peer)
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
		n = poll(&p, 1, in_progress_thread ? 1 : (int)((end - now) / 1000000 + 1));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
		if (in_progress_thread)
			serve_sockets(0);
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

int sv_engine_connect(struct sv_qp *qp, uint32_t dest_qpn, struct sv_peer **out)
{
	struct attach_req req = {
		.magic = ATTACH_MAGIC,
		.src_qpn = qp->ibv.qp_base.qp_num,
		.dst_qpn = dest_qpn,
		.qp_type = qp->ibv.qp_base.qp_type,
		.src_pid = getpid(),
	};
	struct attach_rep rep;
	struct sv_peer *peer;
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
	l = fd >= 0 ? new_link(LINK_CONNECTED, dup(fd)) : NULL;
	if (l) {
		l->our_qpn = req.src_qpn;
		l->peer_qpn = dest_qpn;
		pthread_mutex_lock(&eng.lock);
		if (watch(l)) {
			close(l->fd);
			free(l);
		} else {
			peer->link_id = l->id;
		}
		pthread_mutex_unlock(&eng.lock);
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

void sv_engine_disconnect(struct sv_peer *peer)
{
	uint32_t bye = BYE_MAGIC;

	if (!peer)
		return;
	if (peer->sock < 0) {
		/* A QP of this process: tell it directly that we left. */
		struct sv_qp *qp = sv_engine_pin_qp(peer->qpn);

		if (qp) {
			sv_qp_peer_lost(qp, peer->our_qpn, false);
			atomic_fetch_sub(&qp->eng_ref, 1);
		}
	}
	/* A goodbye first: the peer then knows the hang-up is not a crash. */
	if (peer->sock >= 0)
		(void)!send(peer->sock, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
	pthread_mutex_lock(&eng.lock);
	for (struct link *l = eng.links, *next; l; l = next) {
		next = l->next;
		if (l->id == peer->link_id) {
			/* Our own watch of this connection. */
			drop_link(l);
			break;
		}
	}
	pthread_mutex_unlock(&eng.lock);
	if (peer->sock >= 0)
		close(peer->sock);
	close(peer->wake_fd);
	munmap(peer->seg, peer->seg_len);
	munmap((void *)peer->mrs, SV_MR_TABLE_BYTES);
	free(peer);
}

void sv_engine_wake_peer(struct sv_peer *peer)
{
	uint64_t one = 1;

	(void)!write(peer->wake_fd, &one, sizeof(one));
}

void sv_engine_kick(void)
{
	uint64_t one = 1;

	if (eng.started)
		(void)!write(eng.wake_fd, &one, sizeof(one));
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
 * holds eng.lock, which keeps the QP alive. */
static void attach_answer(const struct attach_req *req, struct attach_rep *rep, int fds[3])
{
	struct sv_qp *qp = sv_qpn_owner(req->dst_qpn);

	*rep = (struct attach_rep){ .magic = ATTACH_MAGIC, .pid = getpid(), .qpn = req->dst_qpn };
	if (!qp)
		rep->status = -ENOENT;
	else if (sv_qp_type_peer(qp->ibv.qp_base.qp_type) != req->qp_type)
		rep->status = -EPROTOTYPE;
	if (rep->status)
		return;
	rep->seg_len = qp->seg_len;
	rep->seg_addr = (uintptr_t)qp->seg;
	fds[0] = qp->seg_fd;
	fds[1] = to_svctx(qp->ibv.qp_base.context)->mrs->fd;
	fds[2] = eng.wake_fd;
}

/* Answers an attach request on @l. Caller holds eng.lock. */
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

/* Attach to a QP of this process without a socket: true if it is ours. */
static bool local_attach(const struct attach_req *req, struct attach_rep *rep, int fds[3])
{
	bool local;

	pthread_mutex_lock(&eng.lock);
	local = eng.started && eng.pid == getpid() && sv_qpn_owner(req->dst_qpn);
	if (local) {
		attach_answer(req, rep, fds);
		if (!rep->status) {
			for (int i = 0; i < 3; i++)
				fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		}
	}
	pthread_mutex_unlock(&eng.lock);
	return local;
}

struct sv_qp *sv_engine_pin_qp(uint32_t qpn)
{
	struct sv_qp *qp;

	pthread_mutex_lock(&eng.lock);
	qp = sv_qpn_owner(qpn);
	if (qp)
		atomic_fetch_add(&qp->eng_ref, 1);
	pthread_mutex_unlock(&eng.lock);
	return qp;
}

void sv_engine_unpin_qp(struct sv_qp *qp)
{
	atomic_fetch_sub_explicit(&qp->eng_ref, 1, memory_order_release);
}

static void handle_link(struct link *l, uint32_t events)
{
	if (l->kind == LINK_WAKE) {
		uint64_t v;

		(void)!read(l->fd, &v, sizeof(v));
		return;
	}
	if (l->kind == LINK_LISTEN) {
		int fd;

		while ((fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
			struct link *a = new_link(LINK_ACCEPTED, fd);

			if (!a || watch(a)) {
				close(fd);
				free(a);
			}
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

		drop_link(l);
		if (our) {
			struct sv_qp *qp;

			pthread_mutex_unlock(&eng.lock);
			qp = sv_engine_pin_qp(our);
			if (qp) {
				sv_qp_peer_lost(qp, peer, fatal);
				atomic_fetch_sub(&qp->eng_ref, 1);
			}
			pthread_mutex_lock(&eng.lock);
		}
	}
}

/* --- the progress thread ------------------------------------------------------------------- */

enum { MAX_PINNED = 256 };

/* Pins up to MAX_PINNED QPs from @start; returns how many. */
static int pin_some(struct sv_qp **out, int start, int *total)
{
	int n = 0;

	pthread_mutex_lock(&eng.lock);
	*total = eng.n_qps;
	for (int i = start; i < eng.n_qps && n < MAX_PINNED; i++) {
		out[n] = eng.qps[i];
		atomic_fetch_add(&out[n]->eng_ref, 1);
		n++;
	}
	pthread_mutex_unlock(&eng.lock);
	return n;
}

enum pass { PASS_WORK, PASS_WORK_UNPOLLED, PASS_ARM, PASS_ARM_UNPOLLED, PASS_DISARM };

/*
 * Whether a poller moved @qp since the look before @look, and can be left to do so: not
 * if the QP has lately placed one-sided operations of its peer (a WRITE through the
 * fifo, a READ or an atomic answered here), which the application does not wait for —
 * it may be spinning on the very memory they write. A relaxed read is enough: a stale
 * one arms a QP needlessly, or leaves it for the next look, 1 ms on.
 */
static bool polled_since(struct sv_qp *qp, uint32_t look)
{
	return look - atomic_load_explicit(&qp->polled_look, memory_order_relaxed) <= 1 &&
	       look - atomic_load_explicit(&qp->placed_look, memory_order_relaxed) > 2;
}

/* One pass over every QP. WORK: how much was done; ARM: 0 if a fifo had work; the
 * _UNPOLLED variants: the same for the QPs no poller moved since the previous look. */
static int pass_all(enum pass what, bool *timed)
{
	uint32_t look = atomic_load_explicit(&sv_engine_look, memory_order_relaxed);
	struct sv_qp *qps[MAX_PINNED];
	int total, start = 0, result = what == PASS_ARM || what == PASS_ARM_UNPOLLED ? 1 : 0;

	*timed = false;
	do {
		int n = pin_some(qps, start, &total);

		for (int i = 0; i < n; i++) {
			struct sv_qp *qp = qps[i];

			switch (what) {
			case PASS_WORK:
				result += sv_qp_progress(qp) + sv_qp_assist(qp);
				break;
			case PASS_WORK_UNPOLLED:
				/* No copy assist: the application spins on this CPU. */
				if (!polled_since(qp, look))
					result += sv_qp_progress(qp);
				break;
			case PASS_ARM:
				if (!sv_qp_arm(qp, true))
					result = 0;
				break;
			case PASS_ARM_UNPOLLED:
				if (!polled_since(qp, look) && !sv_qp_arm(qp, false))
					result = 0;
				break;
			case PASS_DISARM:
				sv_qp_disarm(qp);
				break;
			}
			if (sv_qp_needs_timer(qp))
				*timed = true;
			atomic_fetch_sub(&qp->eng_ref, 1);
		}
		start += n;
	} while (start < total);
	return result;
}

/*
 * The thread adapts to the application. Armed, it sleeps until a producer signals (a
 * system call on the producer's side, then a wake-up here): right for an application
 * that waits on a completion channel or does not call in at all. An application that
 * busy-polls its CQs moves the work itself; there the thread stops arming the QPs those
 * polls move (so their producers make no system call), arms only the others (a QP on a
 * CQ nobody polls, one that places its peer's one-sided operations), and looks every
 * millisecond. Busy polling shows as many polls per wake-up (sv_engine_polls); an
 * application that waits on a channel polls a few times per event. Only when not busy
 * does the thread help peers copy (copy assist): busy, the CPU is the application's.
 */
enum { BUSY_POLLS = 64 }; /* polls per BUSY_WINDOW_NS that mean "the application spins" */
#define BUSY_WINDOW_NS 1000000ull
#define SOCKETS_NS 100000ull /* while busy, look at the sockets this often */

/* Waits up to @timeout ms (0: just looks) for socket and wake-up events, handles them. */
static void serve_sockets(int timeout)
{
	struct epoll_event evs[16];
	int n = epoll_wait(eng.epfd, evs, 16, timeout);

	pthread_mutex_lock(&eng.lock);
	for (int i = 0; i < n; i++) {
		struct link *l = evs[i].data.ptr;
		bool live = false;

		/* An earlier event of this batch may have dropped it. */
		for (struct link *x = eng.links; x && !live; x = x->next)
			live = x == l;
		if (live)
			handle_link(l, evs[i].events);
	}
	pthread_mutex_unlock(&eng.lock);
}
#define SPIN_NS 50000ull  /* how long after its last work the thread keeps looking */


static void *progress_main(void *arg)
{
	uint64_t seen = 0, seen_at = 0, last_work = 0, last_sockets = 0;
	bool busy = false;

	(void)arg;
	in_progress_thread = true;
	for (;;) {
		bool timed;
		uint64_t polls, now;
		int timeout;

		/* While the application busy-polls, its polls move the QPs they reach: this
		 * thread leaves those alone. Chasing the same stream, it would take the CPU
		 * the application needs (one CPU for both: a quarter of the message rate) and
		 * hold the locks its posts wait for. */
		if (pass_all(busy ? PASS_WORK_UNPOLLED : PASS_WORK, &timed)) {
			last_work = sv_now_ns();
			/* Peers attaching and hanging up are answered promptly. */
			if (last_work - last_sockets > SOCKETS_NS) {
				last_sockets = last_work;
				serve_sockets(0);
			}
			continue;
		}
		/* Busy polling is judged over a millisecond at least, not between two looks. */
		now = sv_now_ns();
		if (now - seen_at >= BUSY_WINDOW_NS) {
			polls = atomic_load_explicit(&sv_engine_polls, memory_order_relaxed);
			busy = polls - seen > BUSY_POLLS;
			seen = polls;
			seen_at = now;
		}
		/* Traffic the application does not poll for (one-sided, or it waits on a
		 * channel) comes in bursts: look again for a moment before sleeping, yielding the
		 * core to anyone who wants it. */
		if (!busy && now - last_work < SPIN_NS) {
			sched_yield();
			continue;
		}
		/* Busy: the QPs the application's polls move are left to it; those it does not
		 * poll (another CQ, one-sided placement) still wake this thread. */
		atomic_fetch_add_explicit(&sv_engine_look, 1, memory_order_relaxed);
		if (!pass_all(busy ? PASS_ARM_UNPOLLED : PASS_ARM, &timed)) {
			pass_all(PASS_DISARM, &timed);
			continue;
		}
		timeout = busy || timed ? 1 : -1;
		serve_sockets(timeout);
		pass_all(PASS_DISARM, &timed);
		last_sockets = sv_now_ns();
	}
	return NULL;
}
