/*
 * The shm wire's attach (a QP reaching the owner of a QP number over the abstract unix
 * socket of the number's block, src/wire/sv_qpn.h) against peers that do not speak the
 * protocol. tests/verbs/test_claims.c checks that an RC QP refuses answers of the
 * wrong shape (a segment or key table too small, a pipe or a blocking eventfd as
 * wake-up, a wrong length or magic, two descriptors) and maps nothing; here:
 *
 * - a fake peer, a forked process that binds the socket name of a block no real QP has
 *   and answers every attach request with garbage: a short answer, a wrong magic, a
 *   wrong seg_len, an error status that carries descriptors anyway, a segment that is a
 *   pipe, a socket or /dev/null, a key table that is /dev/null, no descriptor, one, six
 *   (more than the answer has room for), a segment one byte short, a wake-up that is a
 *   memfd or a socket, no answer at all, a hang-up after the request, a hang-up before
 *   reading it; nothing of the garbage is written to (the fake checks at its exit).
 *   An RC QP connected to a QP number there and a UD QP sending to one get a clean
 *   outcome each time: the RC SEND completes with IBV_WC_RETRY_EXC_ERR (the
 *   status of a QP number nobody has, tests/verbs/test_data_errors.c), the UD datagram
 *   is lost and its SEND succeeds, and the UD QP still delivers to a real QP after it;
 *   nothing crashes or hangs (a silent peer is given up on in about 2 s), and the
 *   process holds the same number of descriptors once the fake has exited
 *   (/proc/self/fd; an answer taken keeps two per peer process until then).
 * - garbage sent to our own QP's socket (a hang-up at once, a short request, a wrong
 *   magic, a goodbye, a request of the wrong QP type, a well-formed request from a QP
 *   number that is not our peer's, a QP goodbye in that QP's name, then a hang-up)
 *   leaves our RC QP and its real peer (another process) undisturbed: no async event,
 *   traffic both ways after it, and every descriptor the engine opened for those
 *   connections closed again.
 * - two known defects (below), each its own ctest entry, skipped: a well-formed request
 *   in the name of our real peer's QP, then a hang-up, kills our QP; an answer of the
 *   right shape (four descriptors, the first three well shaped) with a segment of zeros
 *   leaves an RC SEND waiting for ever. (UD takes that answer too; the datagram is
 *   lost in the fake's ring, the SEND succeeds, and no descriptor stays behind.)
 *
 * The protocol's messages are restated here (they are private to the wire), as
 * src/wire/shm/shm_conn.c speaks them; the socket names are sv_qpn_sockname()'s (svcore).
 */
#include "verbs/sv_test_peer.h"
#include "verbs/sv_test_util.h"
#include "core/sv_mr.h"
#include "wire/sv_qpn.h"
#include "wire/shm/shm_msg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the attach protocol --------------------------------------------------------------- */

#define ATTACH_MAGIC 0x53564154u /* "SVAT" */
#define BYE_MAGIC 0x53564259u    /* "SVBY" */
#define QP_BYE_MAGIC 0x53565142u /* "SVQB" */
#define ATTACH_KEEP 1u

struct attach_req {
	uint32_t magic;
	uint32_t src_qpn, dst_qpn, qp_type;
	int32_t src_pid;
	uint32_t flags;
};

struct attach_rep {
	uint32_t magic;
	int32_t status;
	int32_t pid;
	uint32_t qpn;
	uint64_t seg_len;
	uint64_t seg_addr;
	uint64_t map_len;
	uint64_t seg_off;
};

struct qp_bye {
	uint32_t magic, src_qpn, dst_qpn;
};

/* The abstract address of @qpn's block: its length for bind/connect. */
static socklen_t qpn_addr(uint32_t qpn, struct sockaddr_un *sa)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = sv_qpn_sockname(qpn, sa->sun_path + 1, (int)sizeof(sa->sun_path) - 1);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Lists the descriptors (for a message when the counts differ). */
static void fd_list(const char *when)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return;
	print_message("descriptors %s:\n", when);
	while ((e = readdir(d))) {
		char path[300], target[256];
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, target, sizeof(target) - 1);
		target[n > 0 ? n : 0] = 0;
		print_message("  %s -> %s\n", e->d_name, target);
	}
	closedir(d);
}

/* ---- the fake peer --------------------------------------------------------------------- */

enum garbage {
	G_SHORT,          /* the answer 8 bytes short */
	G_MAGIC,          /* a wrong magic */
	G_SEG_LEN,        /* seg_len half the segment's size */
	G_STATUS_FDS,     /* status -ENOENT, yet three descriptors */
	G_SEG_PIPE,       /* the segment a pipe */
	G_SEG_SOCKET,     /* the segment a socket */
	G_SEG_DEVNULL,    /* the segment /dev/null */
	G_TABLE_DEVNULL,  /* the key table /dev/null */
	G_NO_FDS,         /* no descriptor */
	G_ONE_FD,         /* one descriptor */
	G_SIX_FDS,        /* six: more than the answer has room for; the first three wrong-sized */
	G_SEG_SHORT,      /* the segment's memfd one byte short */
	G_WAKE_MEMFD,     /* the wake-up a memfd */
	G_WAKE_SOCKET,    /* the wake-up a (non-blocking) socket */
	G_SILENT,         /* reads the request, never answers */
	G_HANGUP,         /* reads the request, hangs up */
	G_HANGUP_AT_ONCE, /* accepts and hangs up without reading */
	G_FOUR_GOOD,      /* four: the first three well shaped (the segment all zeros) */
	G_SEG_UNSEALED,   /* the segment's memfd not sealed against shrinking */
	G_TABLE_UNSEALED, /* nor the key table's */
	G_SEG_OFF,        /* the segment at offset 0, over the arena's header */
	G_MAP_LEN,        /* a mapped length larger than any arena */
	G_COUNT
};

static const char *const g_name[G_COUNT] = {
	"an answer 8 bytes short",
	"a wrong magic",
	"a wrong seg_len",
	"an error status with descriptors",
	"a pipe as the segment",
	"a socket as the segment",
	"/dev/null as the segment",
	"/dev/null as the key table",
	"no descriptors",
	"one descriptor",
	"six descriptors (a segment too small)",
	"a segment one byte short",
	"a memfd as the wake-up",
	"a socket as the wake-up",
	"no answer",
	"a hang-up after the request",
	"a hang-up before the request",
	"four descriptors, the first three well shaped",
	"a segment that may shrink",
	"a key table that may shrink",
	"a segment over the arena's header",
	"a mapped length larger than an arena",
};

struct fake {
	pid_t pid;
	int ctl;      /* our end: the child writes its QPN, then a byte per request */
	uint32_t qpn; /* a QP number of the block it bound */
	int asked;    /* requests it reported */
};

/* A memfd of @len bytes, sealed against shrinking and growing (as a real peer's) unless
 * @unsealed. */
static int memfd_sealed(size_t len, bool unsealed)
{
	int fd = memfd_create("fake-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, (off_t)len))
		_exit(10);
	if (!unsealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW))
		_exit(10);
	return fd;
}

static int memfd_of(size_t len)
{
	return memfd_sealed(len, false);
}

/* Descriptors the fake handed out that our library could write to if it took them:
 * they must still hold only zeros when the fake exits. */
static int kept[64], nkept;

static void keep(int fd)
{
	int d = fd >= 0 && nkept < 64 ? dup(fd) : -1;

	if (d >= 0)
		kept[nkept++] = d;
}

/* True if a regular file among the kept holds a byte that is not zero. */
static bool kept_written(void)
{
	for (int i = 0; i < nkept; i++) {
		struct stat st;
		unsigned char *p;

		if (fstat(kept[i], &st) || !S_ISREG(st.st_mode) || !st.st_size)
			continue;
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, kept[i], 0);
		if (p == MAP_FAILED)
			_exit(14);
		for (off_t k = 0; k < st.st_size; k++)
			if (p[k])
				return true;
		munmap(p, (size_t)st.st_size);
	}
	return false;
}

/* The fake's answer to @req on @c. */
static void fake_answer(int c, const struct attach_req *req, enum garbage g)
{
	struct attach_rep rep = { .magic = ATTACH_MAGIC, .pid = getpid(), .qpn = req->dst_qpn,
				  .seg_len = SHM_QP_SEG_SIZE, .seg_addr = 0x7f0000000000ull,
				  .seg_off = SHM_ARENA_HDR };
	char cbuf[CMSG_SPACE(6 * sizeof(int))];
	struct iovec iov = { &rep, sizeof(rep) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[6], nfds = 3, sv[2];
	struct cmsghdr *cm;

	memset(cbuf, 0, sizeof(cbuf));
	/* An arena of one segment; or, larger than any arena, a file that holds it all (so
	 * that only the length itself is wrong). */
	rep.map_len = g == G_MAP_LEN ? SHM_ARENA_HDR + 257 * SHM_SEG_STRIDE
				     : SHM_ARENA_HDR + SHM_SEG_STRIDE;
	fds[0] = memfd_sealed(g == G_SEG_SHORT ? rep.map_len - 1 :
			      g == G_SIX_FDS   ? 4096 : rep.map_len, g == G_SEG_UNSEALED);
	fds[1] = memfd_sealed(SV_MR_TABLE_BYTES, g == G_TABLE_UNSEALED);
	fds[2] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	switch (g) {
	case G_SHORT:
		iov.iov_len = sizeof(rep) - 8;
		break;
	case G_MAGIC:
		rep.magic ^= 0x01000000u;
		break;
	case G_SEG_LEN:
		rep.seg_len = SHM_QP_SEG_SIZE / 2;
		break;
	case G_STATUS_FDS:
		rep.status = -ENOENT;
		break;
	case G_SEG_OFF:
		rep.seg_off = 0; /* over the arena's header */
		break;
	case G_SEG_PIPE:
		if (pipe2(sv, O_CLOEXEC))
			_exit(11);
		close(fds[0]);
		fds[0] = sv[0];
		close(sv[1]);
		break;
	case G_SEG_SOCKET:
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			_exit(11);
		close(fds[0]);
		fds[0] = sv[0];
		close(sv[1]);
		break;
	case G_SEG_DEVNULL:
	case G_TABLE_DEVNULL:
		close(fds[g == G_SEG_DEVNULL ? 0 : 1]);
		fds[g == G_SEG_DEVNULL ? 0 : 1] = open("/dev/null", O_RDWR | O_CLOEXEC);
		break;
	case G_NO_FDS:
		nfds = 0;
		break;
	case G_ONE_FD:
		nfds = 1;
		break;
	case G_FOUR_GOOD:
		fds[3] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		nfds = 4;
		break;
	case G_SIX_FDS:
		for (int i = 3; i < 6; i++)
			fds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		nfds = 6;
		break;
	case G_WAKE_MEMFD:
		close(fds[2]);
		fds[2] = memfd_of(4096);
		break;
	case G_WAKE_SOCKET:
		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
			_exit(11);
		close(fds[2]);
		fds[2] = sv[0];
		close(sv[1]);
		break;
	default:
		break;
	}
	for (int i = 0; i < nfds; i++)
		if (fds[i] < 0)
			_exit(12);
	if (nfds) {
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	if (sendmsg(c, &mh, MSG_NOSIGNAL) != (ssize_t)iov.iov_len)
		_exit(13);
	if (g != G_FOUR_GOOD) /* the one answer our library takes (the surplus closed) */
		keep(fds[0]);
	if (g == G_WAKE_MEMFD)
		keep(fds[2]);
	if (g == G_TABLE_UNSEALED)
		keep(fds[1]);
	for (int i = 0; i < (nfds > 3 ? nfds : 3); i++)
		close(fds[i]);
}

/* The fake peer's process: binds a free block's name, reports a QP number of it, then
 * answers every attach request as @g says until its parent closes @ctl. System calls
 * only (the parent's library state is not for the child to use). */
static void fake_main(int ctl, enum garbage g)
{
	struct sockaddr_un sa;
	int lfd = -1;
	uint32_t qpn = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Nothing of the parent's: not its library's sockets, not the agent's. */
	for (int fd = 3; fd < 1024; fd++)
		if (fd != ctl)
			close(fd);
	for (uint32_t block = SV_QPN_BLOCKS - 1000; block > 1000; block--) {
		socklen_t len;

		qpn = (block << SV_QPN_BLOCK_BITS) | 7;
		len = qpn_addr(qpn, &sa);
		lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (lfd < 0)
			_exit(2);
		if (!bind(lfd, (struct sockaddr *)&sa, len) && !listen(lfd, 16))
			break;
		close(lfd);
		lfd = -1;
	}
	if (lfd < 0 || write(ctl, &qpn, sizeof(qpn)) != sizeof(qpn))
		_exit(3);
	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN }, { .fd = ctl, .events = POLLIN } };
		struct attach_req req;
		char one = 1;
		int c;

		if (poll(p, 2, 60000) <= 0)
			_exit(4); /* nobody came or went for a minute: the parent is stuck */
		if (p[1].revents) /* the parent is done */
			_exit(kept_written() ? 20 : 0);
		c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			_exit(5);
		if (g == G_HANGUP_AT_ONCE) {
			if (write(ctl, &one, 1) != 1)
				_exit(6);
			close(c);
			continue;
		}
		p[0].fd = c;
		if (poll(p, 1, 10000) != 1 || recv(c, &req, sizeof(req), 0) != (ssize_t)sizeof(req) ||
		    req.magic != ATTACH_MAGIC || req.dst_qpn != qpn)
			_exit(7); /* not an attach request for our QP number */
		/* Reported before answering: the parent may look as soon as its attach ends. */
		if (write(ctl, &one, 1) != 1)
			_exit(6);
		if (g == G_HANGUP) {
			close(c);
			continue;
		}
		if (g != G_SILENT)
			fake_answer(c, &req, g);
		/* @c stays open (until the fake exits): the attach ends by what was answered,
		 * not by a hang-up. */
	}
}

static void fake_start(struct fake *f, enum garbage g)
{
	int sv[2];
	struct pollfd p;

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	f->asked = 0;
	f->pid = fork();
	assert_true(f->pid >= 0);
	if (f->pid == 0) {
		close(sv[0]);
		fake_main(sv[1], g);
		_exit(1);
	}
	close(sv[1]);
	f->ctl = sv[0];
	p = (struct pollfd){ .fd = f->ctl, .events = POLLIN };
	if (poll(&p, 1, TP_WAIT_MS) != 1 || read(f->ctl, &f->qpn, sizeof(f->qpn)) != sizeof(f->qpn))
		fail_msg("the fake peer did not bind a QP-number block within %d ms", TP_WAIT_MS);
}

/* The requests the fake reported so far. */
static int fake_asked(struct fake *f)
{
	char b;

	while (recv(f->ctl, &b, 1, MSG_DONTWAIT) == 1)
		f->asked++;
	return f->asked;
}

/* Ends the fake: 0 if it exited by itself with 0 when told, else its status (-1: it did
 * not exit within TP_WAIT_MS and was killed). */
static int fake_stop(struct fake *f)
{
	int status = 0, rc = 0, pfd;
	struct pollfd p;

	if (f->pid <= 0)
		return 0;
	pfd = (int)syscall(SYS_pidfd_open, f->pid, 0);
	close(f->ctl);
	f->ctl = -1;
	p = (struct pollfd){ .fd = pfd, .events = POLLIN };
	if (pfd < 0 || poll(&p, 1, TP_WAIT_MS) != 1) {
		kill(f->pid, SIGKILL);
		rc = -1;
	}
	waitpid(f->pid, &status, 0);
	if (pfd >= 0)
		close(pfd);
	f->pid = 0;
	if (!rc && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	return rc;
}

/* ---- our side -------------------------------------------------------------------------- */

struct fx {
	struct tu_res *res;
	struct ibv_mr *mr;
	unsigned char buf[8192];
	struct ibv_qp *rx;  /* a real UD QP of ours, receiving at buf + 4096 */
	struct ibv_ah *ah;  /* to our own GID */
	struct fake fake;   /* the current case's (teardown ends it) */
};

#define QKEY 0x11111111u

static struct ibv_qp *new_qp(struct fx *x, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr a = { .qp_type = type, .send_cq = x->res->cq,
				      .recv_cq = x->res->cq,
				      .cap = { .max_send_wr = 8, .max_recv_wr = 8,
					       .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(x->res->pd, &a);

	if (!qp)
		fail_msg("ibv_create_qp(%s): errno %d", tu_qp_type_str(type), errno);
	return qp;
}

static void post_recv(struct fx *x, struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)x->buf + 4096, 4096, x->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_recv(qp, &wr, &bad), 0);
}

static void post_send(struct fx *x, struct ibv_qp *qp, uint64_t id, uint32_t remote_qpn)
{
	struct ibv_sge sge = { (uintptr_t)x->buf, 64, x->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	if (qp->qp_type == IBV_QPT_UD) {
		wr.wr.ud.ah = x->ah;
		wr.wr.ud.remote_qpn = remote_qpn;
		wr.wr.ud.remote_qkey = QKEY;
	}
	assert_int_equal(ibv_post_send(qp, &wr, &bad), 0);
}

/* The next completion, which must be @id's with @status, within @ms. */
static void expect_wc(struct fx *x, uint64_t id, enum ibv_wc_status status, int ms,
		      const char *what)
{
	struct ibv_wc wc;

	if (tu_poll(x->res->cq, 1, &wc, ms) != 1)
		fail_msg("%s: no completion of WR %llu within %d ms", what, (unsigned long long)id, ms);
	if (wc.wr_id != id || wc.status != status)
		fail_msg("%s: WR %llu completed with %s, want WR %llu with %s", what,
			 (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			 (unsigned long long)id, ibv_wc_status_str(status));
}

static int fx_setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	struct ibv_ah_attr ah;
	struct tu_conn c;

	if (!x || !(x->res = tu_res_open()))
		return -1;
	x->mr = ibv_reg_mr(x->res->pd, x->buf, sizeof(x->buf), IBV_ACCESS_LOCAL_WRITE);
	tu_fill_ah(x->res, &ah);
	x->ah = ibv_create_ah(x->res->pd, &ah);
	if (!x->mr || !x->ah)
		return -1;
	x->rx = new_qp(x, IBV_QPT_UD);
	tu_conn_init(&c, x->res, 0);
	c.qkey = QKEY;
	if (tu_qp_connect(x->rx, &c, IBV_QPS_RTS))
		return -1;
	x->fake.ctl = -1;
	*state = x;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *x = *state;
	struct ibv_wc wc;
	int rc = 0;

	fake_stop(&x->fake);
	while (tu_poll(x->res->cq, 1, &wc, 0) == 1)
		;
	if (ibv_destroy_qp(x->rx) || ibv_destroy_ah(x->ah) || ibv_dereg_mr(x->mr))
		rc = -1;
	if (tu_res_close(x->res))
		rc = -1;
	free(x);
	return rc;
}

/*
 * One QP of @type meets a fake peer answering with @g: the clean outcome, and, if
 * @check_fds, the same descriptors afterwards as before. Returns the milliseconds the
 * attach took (RC: the move to RTR; UD: the SEND's completion).
 */
static long long meet_fake(struct fx *x, enum ibv_qp_type type, enum garbage g, bool check_fds)
{
	const char *what = g_name[g];
	char msg[160];
	long long t0, took;
	struct ibv_qp *qp;
	struct tu_conn c;
	int n0, n1, rc;

	snprintf(msg, sizeof(msg), "%s: %s", tu_qp_type_str(type), what);
	fake_stop(&x->fake); /* a failed case's */
	fake_start(&x->fake, g);
	n0 = tu_fd_count();
	qp = new_qp(x, type);
	tu_conn_init(&c, x->res, x->fake.qpn);
	c.qkey = QKEY;
	c.timeout = 8; /* ~1 ms: a lost peer shows at once */
	c.retry_cnt = 1;
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_INIT), 0);
	t0 = tu_now_ms();
	/* RC attaches on the way to RTR. */
	assert_int_equal(tu_qp_to_rtr(qp, &c), 0);
	took = tu_now_ms() - t0;
	assert_int_equal(tu_qp_to_rts(qp, &c), 0);
	if (type == IBV_QPT_RC) {
		post_send(x, qp, 1, 0);
		expect_wc(x, 1, IBV_WC_RETRY_EXC_ERR, 20000, msg);
		if (!tp_wait_state(qp, IBV_QPS_ERR, TP_WAIT_MS))
			fail_msg("%s: the QP is not in ERR after RETRY_EXC_ERR", msg);
	} else {
		/* The datagram is lost; the SEND succeeds. */
		post_send(x, qp, 1, x->fake.qpn);
		expect_wc(x, 1, IBV_WC_SUCCESS, 20000, msg);
		took = tu_now_ms() - t0;
		/* The QP still works: a datagram to a real QP arrives. */
		post_recv(x, x->rx, 3);
		post_send(x, qp, 2, x->rx->qp_num);
		{
			struct ibv_wc wc[2];
			int got = tu_poll(x->res->cq, 2, wc, TP_WAIT_MS);
			bool sent = false, recvd = false;

			for (int i = 0; i < got; i++) {
				if (wc[i].status != IBV_WC_SUCCESS)
					fail_msg("%s: then a datagram to a real QP: WR %llu %s", msg,
						 (unsigned long long)wc[i].wr_id,
						 ibv_wc_status_str(wc[i].status));
				sent |= wc[i].wr_id == 2;
				recvd |= wc[i].wr_id == 3;
			}
			if (!sent || !recvd)
				fail_msg("%s: then a datagram to a real QP: %s missing", msg,
					 sent ? "the receive" : "the send");
		}
		tp_expect_eq(tu_query_state(qp), IBV_QPS_RTS, "UD state", msg);
	}
	if (fake_asked(&x->fake) < 1)
		fail_msg("%s: the fake peer was never asked (the QP attached elsewhere?)", msg);
	rc = ibv_destroy_qp(qp);
	if (rc)
		fail_msg("%s: ibv_destroy_qp returned %d", msg, rc);
	/* An answer taken leaves the connection to the fake's process and its wake-up
	 * (2, per process: test_many_qps.c) until the fake exits; one refused, nothing. */
	n1 = tu_fd_count();
	if (check_fds && n1 > n0 + (g == G_FOUR_GOOD ? 2 : 0)) {
		fd_list("after");
		fail_msg("%s: %d descriptors before, %d after (a leak)", msg, n0, n1);
	}
	rc = fake_stop(&x->fake);
	if (rc)
		fail_msg("%s: the fake peer ended with %d (%s)", msg, rc,
			 rc == 20 ? "its garbage was mapped and written to" :
			 rc == 7 ? "it was sent something not an attach request" : "see fake_main");
	/* Once it is gone (the engine sees the hang-up on its thread), nothing is left
	 * (n0 counted the control socket to the fake, which fake_stop closed). */
	for (long long end = tu_now_ms() + TP_WAIT_MS; check_fds && tu_fd_count() != n0 - 1;) {
		if (tu_now_ms() > end) {
			fd_list("after the fake exited");
			fail_msg("%s: %d descriptors before, %d after the fake exited (a leak)", msg,
				 n0 - 1, tu_fd_count());
		}
		poll(NULL, 0, 1);
	}
	return took;
}

/* Everything the engine opens once (its thread, the QP-number block's socket) is
 * opened by a first round; the rounds after must leave the count as they found it. */
static void warm_up(struct fx *x)
{
	static bool done;

	if (done)
		return;
	meet_fake(x, IBV_QPT_RC, G_MAGIC, false);
	meet_fake(x, IBV_QPT_UD, G_MAGIC, false);
	done = true;
}

static void test_rc_refuses_garbage_answers_cleanly(void **state)
{
	struct fx *x = *state;

	warm_up(x);
	/* Four descriptors the first three of which are well shaped are taken (the fourth
	 * closed): an RC QP then runs out of retries (test_rc_to_an_empty_page_runs_out_of_retries). */
	for (enum garbage g = 0; g < G_COUNT; g++)
		if (g != G_SILENT && g != G_FOUR_GOOD)
			meet_fake(x, IBV_QPT_RC, g, true);
}

static void test_ud_loses_datagrams_to_garbage_peers_cleanly(void **state)
{
	struct fx *x = *state;

	warm_up(x);
	for (enum garbage g = 0; g < G_COUNT; g++)
		if (g != G_SILENT)
			meet_fake(x, IBV_QPT_UD, g, true);
}

/*
 * An answer of the right shape whose segment is all zeros (no page magic, the QP state
 * RESET) is taken, and the peer never takes requests: the RC SEND completes with
 * RETRY_EXC_ERR after timeout x retry_cnt (here ~1 ms x 2), as on a NIC (it once waited
 * for ever).
 */
static void test_rc_to_an_empty_page_runs_out_of_retries(void **state)
{
	struct fx *x = *state;

	warm_up(x);
	meet_fake(x, IBV_QPT_RC, G_FOUR_GOOD, true);
}

/* A peer that never answers is given up on after about 2 s (ATTACH_WAIT_MS), not at
 * once (it was waited for) and not much later. */
static void test_silent_peer_is_given_up_on(void **state)
{
	struct fx *x = *state;

	warm_up(x);
	for (int k = 0; k < 2; k++) {
		enum ibv_qp_type type = k ? IBV_QPT_UD : IBV_QPT_RC;
		long long took = meet_fake(x, type, G_SILENT, true);

		print_message("%s: a silent peer was given up on after %lld ms\n",
			      tu_qp_type_str(type), took);
		if (took < 1500 || took > 12000)
			fail_msg("%s: a silent peer was given up on after %lld ms, want about 2000",
				 tu_qp_type_str(type), took);
	}
}

/* ---- garbage sent to our QP's socket ---------------------------------------------------- */

enum knock {
	K_HANGUP,     /* connect, hang up */
	K_SHORT,      /* 3 bytes */
	K_MAGIC,      /* a request's size, a wrong magic */
	K_ONE_SHORT,  /* the right magic, one byte short */
	K_BYE,        /* a goodbye on a connection that never attached */
	K_WRONG_TYPE, /* a well-formed request for our QP as a UD peer */
	K_STRANGER,   /* a well-formed request from a QP number that is not our peer's */
	K_QP_BYE,     /* ... kept, then a QP goodbye in that QP's name, then a hang-up */
	K_COUNT
};

static const char *const k_name[K_COUNT] = {
	"a hang-up at once", "3 bytes", "a wrong magic", "a request one byte short",
	"a goodbye", "a request of the wrong QP type", "a request from a stranger QP",
	"a QP goodbye in a QP's name",
};

/* Connects to @qpn's socket as a peer would, sends what @k says, reads an answer if one
 * comes (closing the descriptors it carries), hangs up. Returns the answer's status, or
 * 1 if none came. */
static int knock(uint32_t qpn, uint32_t stranger, enum knock k)
{
	struct attach_req req = { .magic = ATTACH_MAGIC, .src_qpn = stranger, .dst_qpn = qpn,
				  .qp_type = IBV_QPT_RC, .src_pid = getpid() };
	struct sockaddr_un sa;
	socklen_t len = qpn_addr(qpn, &sa);
	size_t n = sizeof(req);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), status = 1;

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&sa, len))
		fail_msg("connect to our QP %u's socket: errno %d", qpn, errno);
	switch (k) {
	case K_HANGUP:
		n = 0;
		break;
	case K_SHORT:
		n = 3;
		break;
	case K_MAGIC:
		req.magic = ~ATTACH_MAGIC;
		break;
	case K_ONE_SHORT:
		n = sizeof(req) - 1;
		break;
	case K_BYE:
		req.magic = BYE_MAGIC;
		break;
	case K_WRONG_TYPE:
		req.qp_type = IBV_QPT_UD;
		break;
	case K_STRANGER:
	case K_QP_BYE:
		req.flags = ATTACH_KEEP; /* the hang-up then says that we died */
		break;
	default:
		break;
	}
	if (n)
		assert_int_equal(send(fd, &req, n, MSG_NOSIGNAL), (ssize_t)n);
	if (k == K_WRONG_TYPE || k == K_STRANGER || k == K_QP_BYE) {
		struct attach_rep rep;
		char cbuf[CMSG_SPACE(4 * sizeof(int))];
		struct iovec iov = { &rep, sizeof(rep) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, TP_WAIT_MS) != 1 || recvmsg(fd, &mh, MSG_CMSG_CLOEXEC) != sizeof(rep))
			fail_msg("%s: no answer from our QP %u within %d ms", k_name[k], qpn,
				 TP_WAIT_MS);
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			for (size_t i = 0; c->cmsg_type == SCM_RIGHTS &&
					   i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int f;

				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				close(f);
			}
		assert_int_equal(rep.magic, ATTACH_MAGIC);
		status = rep.status;
	}
	if (k == K_QP_BYE) {
		struct qp_bye bye = { QP_BYE_MAGIC, stranger, qpn };

		assert_int_equal(send(fd, &bye, sizeof(bye), MSG_NOSIGNAL), (ssize_t)sizeof(bye));
	}
	close(fd);
	return status;
}

/* Waits (bounded) until this process holds @n descriptors again: the engine drops a
 * connection when it sees the hang-up, on its own thread. */
static void expect_fds_back(int n, const char *what)
{
	long long end = tu_now_ms() + TP_WAIT_MS;

	while (tu_fd_count() != n) {
		if (tu_now_ms() > end) {
			fd_list("now");
			fail_msg("%s: %d descriptors %d ms later, %d before (%s)", what, tu_fd_count(),
				 TP_WAIT_MS, n, tu_fd_count() > n ? "a leak" : "something was closed");
		}
		poll(NULL, 0, 1);
	}
}

/* A WRITE from us to the agent and a SEND from the agent to us, both intact. */
static void traffic_both_ways(struct tp_pair *x, uint32_t seed, const char *what)
{
	struct tp_wr w = tp_wr1(seed, IBV_WR_RDMA_WRITE, 0, 4096);

	w.remote_addr = x->pi.addr + 4096;
	w.rkey = x->pi.rkey;
	tp_fill(x->ep.buf, 4096, seed, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, seed, IBV_WC_SUCCESS, TP_WAIT_MS, NULL);
	tp_check_peer(&x->peer, 4096, 4096, seed, 0, what);

	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, seed + 1, &(struct tp_sge){ 8192, 1000 }, 1),
			 0);
	tp_fill_peer(&x->peer, 0, 1000, seed + 1, 0);
	w = tp_wr1(seed + 2, IBV_WR_SEND, 0, 1000);
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, seed + 2, IBV_WC_SUCCESS, NULL);
	tp_expect_wc(x->ep.rcq, seed + 1, IBV_WC_SUCCESS, TP_WAIT_MS, NULL);
	tp_assert_pattern(x->ep.buf + 8192, 1000, seed + 1, 0, what);
}

static void test_garbage_knocking_at_our_socket_changes_nothing(void **state)
{
	static const struct tp_qp_opts rc = { .type = IBV_QPT_RC };
	struct tp_pair *x = *state;
	uint32_t qpn, stranger;
	char why[200];
	int n0;

	tp_pair_open(x, 3 * 4096, &rc, NULL);
	tp_pair_connect(x);
	qpn = x->li.qpn;
	/* A QP number of the agent's block that is not its QP's. */
	stranger = x->pi.qpn ^ 0x80;
	traffic_both_ways(x, 10, "before any garbage");
	n0 = tu_fd_count();
	for (int round = 0; round < 3; round++) {
		for (enum knock k = 0; k < K_COUNT; k++) {
			char what[120];
			int st = knock(qpn, stranger, k);

			snprintf(what, sizeof(what), "after %s (round %d)", k_name[k], round);
			if (k == K_WRONG_TYPE && st != -EPROTOTYPE)
				fail_msg("%s: the answer's status is %d, want -EPROTOTYPE", what, st);
			if ((k == K_STRANGER || k == K_QP_BYE) && st != 0)
				fail_msg("%s: the answer's status is %d, want 0", what, st);
			expect_fds_back(n0, what);
			if (tu_async_leftover(x->ep.res->ctx, why, sizeof(why)))
				fail_msg("%s: %s", what, why);
			tp_expect_eq(tu_query_state(x->ep.qp[x->lq]), IBV_QPS_RTS, "our QP's state",
				     what);
		}
		traffic_both_ways(x, 100 + 10 * (uint32_t)round, "after the garbage");
	}
	if (tu_async_leftover(x->ep.res->ctx, why, sizeof(why)))
		fail_msg("after the traffic: %s", why);
	tp_expect_eq(tp_state(&x->peer, x->pq), IBV_QPS_RTS, "the agent's QP's state",
		     "after the garbage");
	tp_pair_stop(x);
}

/*
 * A request, and a QP goodbye, name any QP number their writer likes; a hang-up without
 * a goodbye on the connection kept with our QP's peer's process is that peer's death.
 * A connection from another process (SO_PEERCRED) speaks for nobody: our QP must not
 * notice it (it once went to ERR with IBV_EVENT_QP_FATAL and dropped its peer).
 */
/* A well-formed request in the name of our real peer's QP (its QP number as the source),
 * asking to be kept, then a hang-up without a goodbye, as the real peer's death would
 * look; then the same with a QP goodbye in the peer QP's name before the hang-up. */
static void test_impostor_of_our_peer_hanging_up_changes_nothing(void **state)
{
	static const struct tp_qp_opts rc = { .type = IBV_QPT_RC };
	struct tp_pair *x = *state;
	char why[200];
	int n0;

	tp_pair_open(x, 3 * 4096, &rc, NULL);
	tp_pair_connect(x);
	traffic_both_ways(x, 10, "before the impostor");
	n0 = tu_fd_count();
	assert_int_equal(knock(x->li.qpn, x->pi.qpn, K_STRANGER), 0);
	/* Then a goodbye in its name, over a connection of ours that was kept. */
	assert_int_equal(knock(x->li.qpn, x->pi.qpn, K_QP_BYE), 0);
	{
		struct ibv_async_event ev;

		/* The hang-up is seen on the engine's thread: a bounded wait for what must not
		 * come. */
		if (tu_next_async(x->ep.res->ctx, 1000, &ev, why, sizeof(why)))
			fail_msg("an impostor of our peer's QP %u hung up: %s", x->pi.qpn, why);
	}
	expect_fds_back(n0, "after the impostor hung up");
	traffic_both_ways(x, 20, "after the impostor");
	tp_pair_stop(x);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rc_refuses_garbage_answers_cleanly),
		cmocka_unit_test(test_ud_loses_datagrams_to_garbage_peers_cleanly),
		cmocka_unit_test(test_silent_peer_is_given_up_on),
		cmocka_unit_test(test_rc_to_an_empty_page_runs_out_of_retries),
	};
	const struct CMUnitTest knocks[] = {
		cmocka_unit_test_setup_teardown(test_garbage_knocking_at_our_socket_changes_nothing,
						tp_pair_setup, tp_pair_teardown),
		cmocka_unit_test_setup_teardown(test_impostor_of_our_peer_hanging_up_changes_nothing,
						tp_pair_setup, tp_pair_teardown),
	};
	int failed;

	tp_main(argc, argv);
	failed = cmocka_run_group_tests_name("fake peers", tests, fx_setup, fx_teardown);
	failed += cmocka_run_group_tests_name("garbage at our socket", knocks, NULL, NULL);
	return failed;
}
