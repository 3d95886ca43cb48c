/*
 * The shm wire's connections: a QP attaches to QP @qpn of this host over the abstract
 * socket of the QPN's block (sv_qpn.h), whose owner answers with the arena holding the
 * QP's segment, its context's key table and its engine's eventfd (SCM_RIGHTS). The
 * requester maps what it has not mapped yet (shm_proc.c) and closes the descriptors.
 *
 * One connection per pair of processes stays open, the keeper: its hang-up without a
 * goodbye means the other process died, and every QP of ours connected to one of its
 * QPs fails. The first attach between two processes asks that its connection be kept
 * (ATTACH_KEEP); later ones are closed once answered. A QP that leaves its peer says so
 * over the keeper (a QP goodbye). Every socket is watched by the progress engine
 * (sv_engine_watch_locked), and the QPN owners are kept under the engine's lock, which
 * keeps a QP alive while an attach is answered.
 */
#include "wire/shm/shm_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "core/sv_obj.h"
#include "core/sv_qp_data.h"
#include "core/sv_qp_table.h"
#include "util/sv_log.h"
#include "util/sv_shared.h"
#include "util/sv_time.h"

enum link_kind {
	LINK_LISTEN,   /* a block's socket */
	LINK_ACCEPTED, /* a connection a process opened to us, until its request is answered */
	LINK_KEEPER,   /* the connection of a process pair that stays */
};

/* A socket of the wire, watched by the engine. */
struct link {
	enum link_kind kind;
	int fd;
	bool bye;               /* the other process said goodbye before hanging up */
	pid_t pid;              /* the process at the other end, as the kernel says */
	struct shm_proc *proc;  /* KEEPER: that process (a reference) */
	uint64_t id;            /* the engine's watch */
	struct link *next;
};

#define ATTACH_MAGIC 0x53564154u /* "SVAT" */
#define BYE_MAGIC 0x53564259u    /* "SVBY": the hang-up that follows is not a death */
#define QP_BYE_MAGIC 0x53565142u /* "SVQB": a QP of the sender left one of ours */

enum { ATTACH_KEEP = 1 }; /* this connection stays: the requester's keeper */

struct attach_req {
	uint32_t magic;
	uint32_t src_qpn, dst_qpn, qp_type;
	int32_t src_pid;
	uint32_t flags; /* ATTACH_* */
};

struct attach_rep {
	uint32_t magic;
	int32_t status; /* 0 or a negative errno */
	int32_t pid;
	uint32_t qpn;
	uint64_t seg_len;  /* SHM_QP_SEG_SIZE */
	uint64_t seg_addr; /* where the segment sits in the answering process */
	uint64_t map_len;  /* the bytes of the arena (first descriptor) to map */
	uint64_t seg_off;  /* where the segment sits in the arena */
};

struct qp_bye {
	uint32_t magic;
	uint32_t src_qpn; /* the sender's QP, which left */
	uint32_t dst_qpn; /* ours, whose peer it was */
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
		shm_proc_put(l->proc);
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
	shm_proc_put(l->proc);
	free(l);
}

/* A connection that tells us when @p dies, or NULL. Engine lock held. */
static struct link *keeper_of(const struct shm_proc *p)
{
	for (struct link *l = links; l; l = l->next)
		if (l->kind == LINK_KEEPER && l->proc == p)
			return l;
	return NULL;
}

/* A warning that names the limit the process ran into. */
__attribute__((format(printf, 1, 2))) static void no_descriptor(const char *fmt, ...)
{
	struct rlimit rl = { 0 };
	char what[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	getrlimit(RLIMIT_NOFILE, &rl);
	sv_warn("%s (RLIMIT_NOFILE %llu: ulimit -n)", what, (unsigned long long)rl.rlim_cur);
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

/* fork(): the links are under the engine's lock, which the engine takes around it. */
static void links_atfork_prepare(void)
{
}

static void links_atfork_parent(void)
{
}

/* The child shares the parent's connections: it must not speak on them (a goodbye in
 * the parent's name) nor hold them. The blocks' sockets are sv_qpn's to close. */
static void links_atfork_child(void)
{
	for (struct link *l = links, *next; l; l = next) {
		next = l->next;
		if (l->kind != LINK_LISTEN)
			close(l->fd);
		free(l);
	}
	links = NULL;
	shm_arena_atfork_child();
}

int shm_conn_qp_add(struct sv_qp *qp, uint32_t *qpn)
{
	static const struct sv_fork_hooks qpn_lock = {
		sv_qpn_atfork_prepare, sv_qpn_atfork_parent, sv_qpn_atfork_child,
	};
	static const struct sv_fork_hooks links_hooks = {
		links_atfork_prepare, links_atfork_parent, links_atfork_child,
	};
	struct shm_qp *s = shm_qp(qp);
	int listen_fd, err = 0;
	bool fresh = !*qpn;

	sv_engine_fork_hooks(&qpn_lock); /* the QPN registry's lock is taken under ours */
	sv_engine_fork_hooks(&links_hooks);
	sv_engine_rings(shm_arena_rings);
	sv_engine_lock();
	/* (*qpn: a number another wire of the QP holds already, shm_qp_qp_take) */
	if (fresh) {
		err = sv_qpn_alloc(qpn, qp, &listen_fd);
		if (!err && listen_fd >= 0)
			err = shm_conn_listen_locked(listen_fd);
	}
	if (!err)
		err = shm_arena_seg(*qpn, &s->seg);
	if (err == -EMFILE || err == -ENFILE)
		no_descriptor("qp: no descriptor for a new block of %u QPs (each takes 2)",
			      SV_QPN_BLOCK);
	if (err) {
		if (fresh && *qpn)
			sv_qpn_free(*qpn);
		if (fresh)
			*qpn = 0;
		s->seg = NULL;
	} else {
		/* Answers wait for the page's qpn, stored last (attach_answer). */
		s->page = s->seg;
		s->rx = (struct shm_fifo *)((char *)s->seg + SHM_QP_PAGE_SIZE);
	}
	sv_engine_unlock();
	return err;
}

void shm_conn_qp_remove(struct sv_qp *qp, bool keep_qpn)
{
	sv_engine_lock();
	/* No attach is answered from now on (attach_answer). */
	atomic_store(&shm_qp(qp)->page->qpn, 0);
	if (!keep_qpn)
		sv_qpn_free(qp->ibv.qp_base.qp_num);
	sv_engine_unlock();
}

void shm_conn_qp_release(struct sv_qp *qp)
{
	sv_engine_lock();
	shm_arena_release(qp->ibv.qp_base.qp_num, shm_qp(qp)->seg);
	sv_engine_unlock();
}

/* --- attach: the requester side ----------------------------------------------------------- */

static struct sv_qp *own_qp(uint32_t qpn);
static void attach_answer(const struct attach_req *req, struct attach_rep *rep, int fds[3]);

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
	return process_vm_readv(peer->proc->pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof(magic) &&
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

/* The process at the other end of @fd, as the kernel says (a request or an answer may
 * name any process it likes): its pid, or 0. */
static pid_t peer_pid(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ? 0 : cred.pid;
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

/* The other process may be anyone's: we map only what has the size we access, sealed
 * so that it cannot shrink under us. */
static bool answer_has_shape(const struct attach_rep *rep, const int fds[3])
{
	return rep->seg_len == SHM_QP_SEG_SIZE && rep->map_len <= SHM_ARENA_BYTES &&
	       rep->map_len % 4096 == 0 && rep->seg_off % 4096 == 0 &&
	       rep->seg_off >= SHM_ARENA_HDR &&
	       rep->seg_off <= rep->map_len - SHM_QP_SEG_SIZE && rep->map_len >= SHM_QP_SEG_SIZE &&
	       sv_shared_holds(fds[0], rep->map_len) &&
	       sv_shared_holds(fds[1], SV_MR_TABLE_BYTES) && fd_is_eventfd(fds[2]);
}

/* Attach to a QP of this process: no socket, nothing mapped. NULL if it is not ours. */
static struct shm_peer *local_attach(const struct attach_req *req, int *err)
{
	struct shm_peer *peer = NULL;
	struct attach_rep rep;
	struct sv_qp *qp;
	int fds[3];

	*err = 0;
	sv_engine_lock();
	qp = own_qp(req->dst_qpn);
	if (qp) {
		attach_answer(req, &rep, fds);
		*err = rep.status;
		if (!rep.status) {
			peer = calloc(1, sizeof(*peer));
			*err = peer ? 0 : -ENOMEM;
		}
		if (peer) {
			peer->local = true;
			peer->proc = shm_proc_self();
			peer->qpn = req->dst_qpn;
			peer->our_qpn = req->src_qpn;
			peer->ring = (struct shm_arena_hdr *)((char *)shm_qp(qp)->seg - rep.seg_off);
			peer->page = shm_qp(qp)->page;
			peer->fifo = shm_qp(qp)->rx;
			peer->mrs = to_svctx(qp->ibv.qp_base.context)->mrs->slots;
			peer->seg_addr = rep.seg_addr;
		}
	}
	sv_engine_unlock();
	return qp ? peer : NULL;
}

/* A peer from an answer of the right shape: what it names mapped (or a mapping of the
 * same file shared), its process found or made; NULL on failure. Engine lock held. */
static struct shm_peer *peer_from_answer(const struct attach_rep *rep, int fds[3], pid_t pid)
{
	struct shm_peer *peer = calloc(1, sizeof(*peer));
	const void *mrs;

	if (!peer)
		return NULL;
	peer->proc = shm_proc_get(pid);
	if (!peer->proc)
		goto err_free;
	peer->map = shm_map_get(fds[0], rep->map_len, PROT_READ | PROT_WRITE);
	if (!peer->map)
		goto err_proc;
	mrs = shm_map_get(fds[1], SV_MR_TABLE_BYTES, PROT_READ);
	if (!mrs)
		goto err_map;
	peer->mrs = mrs;
	if (peer->proc->wake_fd < 0) {
		peer->proc->wake_fd = fds[2]; /* the process's; later answers' copies close */
		fds[2] = -1;
	}
	peer->ring = peer->map;
	peer->page = (struct shm_qp_page *)((char *)peer->map + rep->seg_off);
	peer->fifo = (struct shm_fifo *)((char *)peer->page + SHM_QP_PAGE_SIZE);
	peer->proc_next = peer->proc->peers;
	peer->proc->peers = peer;
	return peer;
err_map:
	shm_map_put(peer->map);
err_proc:
	shm_proc_put(peer->proc);
err_free:
	free(peer);
	return NULL;
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
	struct shm_peer *peer = NULL;
	int fds[3] = { -1, -1, -1 }, fd, err;
	struct shm_proc *known;
	bool keep;
	pid_t pid;

	peer = local_attach(&req, &err);
	if (peer || err)
		goto done;
	fd = sock_connect_qpn(dest_qpn);
	if (fd == -EMFILE || fd == -ENFILE)
		no_descriptor("qp %u: no descriptor to reach qp %u: it is tried again when the "
			      "QP sends", req.src_qpn, dest_qpn);
	if (fd < 0)
		return fd;
	/* The first connection to a process stays, as the keeper. */
	pid = peer_pid(fd);
	sv_engine_lock();
	known = pid ? shm_proc_find(pid) : NULL;
	keep = !known || !keeper_of(known);
	sv_engine_unlock();
	req.flags = keep ? ATTACH_KEEP : 0;
	if (!pid) {
		err = -EPROTO;
		goto err_close;
	}
	if (send(fd, &req, sizeof(req), MSG_NOSIGNAL) != sizeof(req)) {
		err = -errno;
		goto err_close;
	}
	err = await_answer(fd);
	if (!err)
		err = recv_with_fds(fd, &rep, sizeof(rep), fds, 3);
	if (err)
		goto err_close;
	if (rep.magic != ATTACH_MAGIC || rep.status) {
		err = rep.status ? rep.status : -EPROTO;
		goto err_fds;
	}
	if (!answer_has_shape(&rep, fds)) {
		sv_dbg("qp %u: attach answer for qp %u has the wrong shape", req.src_qpn, dest_qpn);
		err = -EPROTO;
		goto err_fds;
	}
	sv_engine_lock();
	peer = peer_from_answer(&rep, fds, pid);
	if (peer) {
		/* Before the lock goes: a death of its process reads them (proc_died). */
		peer->qpn = dest_qpn;
		peer->our_qpn = req.src_qpn;
	}
	if (peer && keep) {
		struct link *l = new_link(LINK_KEEPER, fd);

		if (l) {
			l->pid = pid;
			l->proc = peer->proc;
			peer->proc->refs++;
			if (!watch(l))
				fd = -1;
		}
	}
	sv_engine_unlock();
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (fd >= 0) {
		/* Not kept: if the other side keeps it, the hang-up is not our death. */
		uint32_t bye = BYE_MAGIC;

		if (keep)
			(void)!send(fd, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
		close(fd);
	}
	if (!peer)
		return -ENOMEM;
	peer->seg_addr = rep.seg_addr;
done:
	if (!peer)
		return err;
	peer->cma = copy_mode_cma(peer);
	*out = peer;
	return 0;

err_fds:
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	if (keep && !rep.status && rep.magic == ATTACH_MAGIC) {
		/* Kept on the other side: the hang-up is not our death. */
		uint32_t bye = BYE_MAGIC;

		(void)!send(fd, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
err_close:
	close(fd);
	return err;
}

void shm_conn_disconnect(struct shm_peer *peer)
{
	struct qp_bye bye = { QP_BYE_MAGIC, 0, 0 };
	struct link *l;

	if (!peer)
		return;
	if (peer->local) {
		/* A QP of this process: tell it directly that we left. */
		struct sv_qp *qp = shm_conn_pin_qp(peer->qpn);

		if (qp) {
			shm_qp_peer_lost(qp, peer->our_qpn, false);
			sv_engine_unpin_qp(qp);
		}
		free(peer);
		return;
	}
	bye.src_qpn = peer->our_qpn;
	bye.dst_qpn = peer->qpn;
	sv_engine_lock();
	/* Over the keeper: the peer then knows that we left, and did not die. */
	l = keeper_of(peer->proc);
	if (l)
		(void)!send(l->fd, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
	for (struct shm_peer **pp = &peer->proc->peers; *pp; pp = &(*pp)->proc_next) {
		if (*pp == peer) {
			*pp = peer->proc_next;
			break;
		}
	}
	shm_map_put(peer->map);
	shm_map_put(peer->mrs);
	shm_proc_put(peer->proc);
	sv_engine_unlock();
	free(peer);
}

void shm_conn_wake(struct shm_peer *peer)
{
	uint32_t i = peer->qpn & (SV_QPN_BLOCK - 1);
	uint64_t one = 1;

	/* Release: the owner's look after it takes the bit sees what we published. */
	atomic_fetch_or_explicit(&peer->ring->ring[i / 64], 1ull << (i % 64),
				 memory_order_release);
	(void)!write(peer->proc->wake_fd, &one, sizeof(one));
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
	/* A QP on another wire speaks no shm; one being made or destroyed has no page yet
	 * or any more (its qpn is stored last and cleared first). */
	if (!qp || qp->wire != &sv_wire_shm || !shm_qp(qp)->page ||
	    atomic_load_explicit(&shm_qp(qp)->page->qpn, memory_order_acquire) != req->dst_qpn)
		rep->status = -ENOENT;
	else if (sv_qp_type_peer(qp->ibv.qp_base.qp_type) != req->qp_type)
		rep->status = -EPROTOTYPE;
	else if (!shm_arena_locate(req->dst_qpn, &fds[0], &rep->seg_off))
		rep->status = -ENOENT;
	if (rep->status)
		return;
	rep->seg_len = SHM_QP_SEG_SIZE;
	rep->seg_addr = (uintptr_t)shm_qp(qp)->seg;
	rep->map_len = SHM_ARENA_BYTES;
	fds[1] = to_svctx(qp->ibv.qp_base.context)->mrs->fd;
	fds[2] = sv_engine_wake_fd();
}

/* Answers an attach request on @l: the link stays, as the keeper, if the requester asked
 * so; else it goes. Engine lock held. */
static void answer_attach(struct link *l, const struct attach_req *req)
{
	uint32_t bye = BYE_MAGIC;
	struct attach_rep rep;
	int fds[3];

	attach_answer(req, &rep, fds);
	if (rep.status) {
		send_with_fds(l->fd, &rep, sizeof(rep), NULL, 0);
		drop_link(l);
		return;
	}
	send_with_fds(l->fd, &rep, sizeof(rep), fds, 3);
	if (req->flags & ATTACH_KEEP) {
		l->proc = l->pid ? shm_proc_get(l->pid) : NULL;
		if (l->proc) {
			l->kind = LINK_KEEPER;
			return;
		}
		/* Not kept after all: our hang-up is not a death. */
		(void)!send(l->fd, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	drop_link(l);
}

/* A QP of this process (not one a fork() copied from the parent), engine lock held. */
static struct sv_qp *own_qp(uint32_t qpn)
{
	struct sv_qp *qp = sv_qpn_owner(qpn);

	return qp && qp->wire == &sv_wire_shm && shm_qp(qp)->page &&
			       shm_qp(qp)->page->pid == getpid() ? qp : NULL;
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

/* Tells our QP @ours that its peer @theirs, in the process at the other end of @l, left
 * or died. Engine lock held (dropped meanwhile: @l may be gone after). */
static void tell_qp(const struct link *l, uint32_t ours, uint32_t theirs, bool fatal)
{
	struct sv_qp *qp = own_qp(ours);

	/* Only the process the QP's peer is in speaks for it: anyone may connect. */
	if (!qp || atomic_load(&shm_qp(qp)->peer_pid) != l->pid)
		return;
	sv_engine_pin_locked(qp);
	sv_engine_unlock();
	shm_qp_peer_lost(qp, theirs, fatal);
	sv_engine_unpin_qp(qp);
	sv_engine_lock();
}

/* The process at the other end of the keeper @l died: every QP of ours connected to one
 * of its QPs fails. Engine lock held; @l is dropped. */
static void proc_died(struct link *l)
{
	struct shm_proc *p = l->proc;
	struct { uint32_t ours, theirs; } *lost = NULL;
	struct link dead = *l;
	int n = 0, cap = 0;

	atomic_store(&p->dead, true);
	for (struct shm_peer *peer = p->peers; peer; peer = peer->proc_next)
		cap++;
	if (cap)
		lost = calloc((size_t)cap, sizeof(*lost));
	for (struct shm_peer *peer = p->peers; lost && peer; peer = peer->proc_next) {
		lost[n].ours = peer->our_qpn;
		lost[n++].theirs = peer->qpn;
	}
	drop_link(l);
	for (int i = 0; i < n; i++)
		tell_qp(&dead, lost[i].ours, lost[i].theirs, true);
	free(lost);
}

/* A socket of the wire has something: engine lock held (dropped to tell a QP). */
static void link_event(void *arg, uint32_t events)
{
	struct link *l = arg;

	if (l->kind == LINK_LISTEN) {
		int fd;

		while ((fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
			struct link *a = new_link(LINK_ACCEPTED, fd);

			if (!a) {
				close(fd);
				continue;
			}
			a->pid = peer_pid(fd);
			(void)watch(a);
		}
		return;
	}
	if (events & EPOLLIN) {
		union {
			struct attach_req req;
			struct qp_bye qp_bye;
			uint32_t magic;
		} m;
		ssize_t r = recv(l->fd, &m, sizeof(m), MSG_DONTWAIT);

		if (r == (ssize_t)sizeof(m.req) && m.magic == ATTACH_MAGIC &&
		    l->kind == LINK_ACCEPTED) {
			answer_attach(l, &m.req);
			return;
		}
		if (r == (ssize_t)sizeof(m.qp_bye) && m.magic == QP_BYE_MAGIC &&
		    l->kind == LINK_KEEPER) {
			struct link from = *l;

			tell_qp(&from, m.qp_bye.dst_qpn, m.qp_bye.src_qpn, false);
			return;
		}
		if (r == (ssize_t)sizeof(uint32_t) && m.magic == BYE_MAGIC) {
			l->bye = true;
			return;
		}
		if (r < 0 && errno == EAGAIN)
			return;
		/* r == 0 (hang-up) or garbage: the connection is over. */
		events |= EPOLLHUP;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		if (l->kind == LINK_KEEPER && !l->bye)
			proc_died(l);
		else
			drop_link(l);
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
	/* A peer that said goodbye before its process ended did not die. */
	if (fatal && atomic_load(&shm_qp(qp)->peer_left))
		return;
	sv_dbg("qp %u: peer qp %u %s", qp->ibv.qp_base.qp_num, peer_qpn,
	       fatal ? "died" : "went away");
	if (fatal) {
		/* A dead peer is fatal: async QP_FATAL, everything outstanding flushed. */
		sv_qp_fail(qp, SV_ERR_EVENT(IBV_EVENT_QP_FATAL));
	} else {
		/* A peer that left (destroyed or reset its QP) does not touch our QP, as on a
		 * NIC: once what it sent before leaving is handled, work waiting for it fails as
		 * if the retries ran out (timers). */
		atomic_store(&shm_qp(qp)->peer_left, true);
	}
	/* Either way the progress thread has work with the QP, idle until now. */
	sv_engine_wake_qp(qp);
}
