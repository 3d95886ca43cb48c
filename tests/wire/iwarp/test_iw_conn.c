/*
 * Verbs-only setup between hosts (src/wire/iwarp/iw_conn.c): the host's port, the
 * handoff to the QPN's owner, and the MPA frames of that port.
 *
 * Peers are forked processes, each with a QPN block of its own (sv_qpn_alloc) and a
 * handler that answers every connection with a reply and the 4 bytes "DATA", and tells
 * the test what it saw over a pipe. The test process itself dials (iw_conn_dial keeps no
 * state) and never starts an engine. Every test runs on a port of its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "util/sv_time.h"
#include "wire/iwarp/iw_conn.h"
#include "wire/iwarp/iw_mpa.h"
#include "wire/sv_qpn.h"

enum { WAIT_MS = 5000 };

/* ---- peers ------------------------------------------------------------------------ */

enum { REP_READY = 1, REP_CONN, REP_ENSURE, REP_FORKED };
enum { CMD_ENSURE = 1, CMD_FORK_KEEP };

struct report {
	int type;
	int result;
	pid_t pid;
	uint32_t qpn;
	bool held;
	struct iw_params p;
	int extra_len;  /* REP_CONN: bytes already in the socket after the request */
	char extra[8];
};

struct peer {
	pid_t pid;
	int cmd, rep; /* our ends: commands to it, reports from it */
	uint32_t qpn;
};

enum { MAX_PROCS = 8 };
static struct peer procs[MAX_PROCS];
static struct peer *peers[MAX_PROCS]; /* the live ones, in procs[] */
static pid_t extra_pids[MAX_PROCS];
static int keep_pipe[2] = { -1, -1 }; /* a grandchild lives until its write end closes */

/* In a peer: */
static int rep_fd = -1;

static void report(int type, int result, uint32_t qpn, const struct iw_params *p,
		   const char *extra, int extra_len)
{
	struct report r = { .type = type, .result = result, .pid = getpid(), .qpn = qpn };

	if (extra_len > 0) {
		r.extra_len = extra_len;
		memcpy(r.extra, extra, (size_t)extra_len);
	}
	if (type != REP_CONN) /* the handler runs with the engine's lock held */
		r.held = iw_conn_port_held();
	if (p)
		r.p = *p;
	if (write(rep_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
}

/* The wire's handler, as the lead's will be: reply (echoing C and the extensions), then
 * the first bytes of the stream. */
static void on_conn(int fd, const struct iw_params *peer)
{
	struct iw_params mine = {
		.src_qpn = peer->dest_qpn, .dest_qpn = peer->src_qpn, .ird = 11, .ord = 13,
		.crc = peer->crc, .ext = peer->ext, .rtr = peer->rtr & IW_RTR_WRITE,
	};
	char extra[8];
	ssize_t got = recv(fd, extra, sizeof(extra), MSG_DONTWAIT);
	int r = iw_conn_reply(fd, &mine, false);

	if (!r && send(fd, "DATA", 4, MSG_NOSIGNAL | MSG_DONTWAIT) != 4)
		r = -EIO;
	report(REP_CONN, r, peer->dest_qpn, peer, extra, got > 0 ? (int)got : 0);
	close(fd);
}

static void peer_main(int cmd)
{
	static int owner_tag;
	uint32_t qpn = 0;
	int lfd, r;
	char c;

	r = sv_qpn_alloc(&qpn, &owner_tag, &lfd);
	if (!r) {
		sv_engine_lock();
		r = iw_conn_open_block_locked(qpn >> SV_QPN_BLOCK_BITS);
		sv_engine_unlock();
	}
	iw_conn_set_handler(on_conn);
	if (!r)
		r = iw_conn_port_ensure();
	report(REP_READY, r, qpn, NULL, NULL, 0);
	while (read(cmd, &c, 1) == 1) {
		if (c == CMD_ENSURE) {
			report(REP_ENSURE, iw_conn_port_ensure(), qpn, NULL, NULL, 0);
		} else if (c == CMD_FORK_KEEP) {
			/* A child that lives on after us: it must not keep our port. It says
			 * when it runs (its fork handlers have run by then). */
			int up[2];
			pid_t pid;

			if (pipe(up))
				_exit(4);
			pid = fork();
			if (pid == 0) {
				struct pollfd p = { .fd = keep_pipe[0], .events = POLLIN };

				close(up[0]);
				if (write(up[1], "", 1) != 1)
					_exit(1);
				(void)poll(&p, 1, 60000);
				_exit(0);
			}
			close(up[1]);
			if (pid > 0 && read(up[0], &c, 1) != 1)
				pid = -1;
			close(up[0]);
			report(REP_FORKED, pid < 0 ? -ECHILD : pid, qpn, NULL, NULL, 0);
		}
	}
	_exit(0);
}

static void get_report(struct peer *p, int type, struct report *r)
{
	struct pollfd pf = { .fd = p->rep, .events = POLLIN };

	if (poll(&pf, 1, WAIT_MS) != 1)
		fail_msg("no report of type %d from process %d within %d ms", type, p->pid, WAIT_MS);
	assert_int_equal(read(p->rep, r, sizeof(*r)), (ssize_t)sizeof(*r));
	assert_int_equal(r->type, type);
}

/* No report within @ms: the peer did not see a connection. */
static void no_report(struct peer *p, int ms)
{
	struct pollfd pf = { .fd = p->rep, .events = POLLIN };

	assert_int_equal(poll(&pf, 1, ms), 0);
}

static struct peer *spawn(void)
{
	int cmd[2], rep[2], slot = -1;
	struct report r;
	struct peer *p;
	pid_t pid;

	for (int i = 0; i < MAX_PROCS && slot < 0; i++)
		if (!peers[i])
			slot = i;
	assert_true(slot >= 0);
	assert_int_equal(pipe(cmd), 0);
	assert_int_equal(pipe(rep), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; i < MAX_PROCS; i++)
			if (peers[i]) {
				close(peers[i]->cmd);
				close(peers[i]->rep);
			}
		close(cmd[1]);
		close(rep[0]);
		rep_fd = rep[1];
		peer_main(cmd[0]);
	}
	close(cmd[0]);
	close(rep[1]);
	p = &procs[slot];
	p->pid = pid;
	p->cmd = cmd[1];
	p->rep = rep[0];
	peers[slot] = p;
	get_report(p, REP_READY, &r);
	assert_int_equal(r.result, 0);
	p->qpn = r.qpn;
	return p;
}

static void command(struct peer *p, char c)
{
	assert_int_equal(write(p->cmd, &c, 1), 1);
}

static void kill_peer(struct peer *p)
{
	for (int i = 0; i < MAX_PROCS; i++)
		if (peers[i] == p)
			peers[i] = NULL;
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0); /* its sockets are closed once it is reaped */
	}
	close(p->cmd);
	close(p->rep);
	p->pid = 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_PROCS; i++) {
		if (peers[i])
			kill_peer(peers[i]);
		if (extra_pids[i] > 0) {
			kill(extra_pids[i], SIGKILL);
			extra_pids[i] = 0;
		}
	}
	for (int i = 0; i < 2; i++)
		if (keep_pipe[i] >= 0) {
			close(keep_pipe[i]);
			keep_pipe[i] = -1;
		}
	return 0;
}

/* A port of this test's own: free now on all addresses (the kernel's choice). */
static int setup(void **state)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t sl = sizeof(a);
	int fd = socket(AF_INET6, SOCK_STREAM, 0), zero = 0;
	char buf[16];

	(void)state;
	assert_true(fd >= 0);
	setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	close(fd);
	snprintf(buf, sizeof(buf), "%u", ntohs(a.sin6_port));
	setenv("SOFTVERBS_IWARP_PORT", buf, 1);
	setenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS", "5000", 1);
	return 0;
}

/* ---- the dialer (this process) ---------------------------------------------------- */

static const struct iw_params want_default = {
	.src_qpn = 0xabcdef, .ird = 5, .ord = 7, .crc = true, .ext = true,
};

static socklen_t addr_of(int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(iw_conn_port());
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return sizeof(*a);
	}
	struct sockaddr_in6 *a6 = (void *)ss;

	a6->sin6_family = AF_INET6;
	a6->sin6_port = htons(iw_conn_port());
	a6->sin6_addr = in6addr_loopback;
	return sizeof(*a6);
}

static int dial(int family, uint32_t dest, struct iw_params *want)
{
	struct sockaddr_storage ss;
	socklen_t sl = addr_of(family, &ss);
	int fd;

	want->dest_qpn = dest;
	fd = iw_conn_dial((struct sockaddr *)&ss, sl, want, WAIT_MS);
	if (fd < 0)
		fail_msg("iw_conn_dial to QPN %#x: %s", dest, strerror(-fd));
	return fd;
}

/* A raw TCP connection to the port (blocking). */
static int raw_connect(void)
{
	struct sockaddr_storage ss;
	socklen_t sl = addr_of(AF_INET, &ss);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&ss, sl), 0);
	return fd;
}

/* Reads until the reply parses (or is refused): take_reply's verdict; @buf/@len keep
 * what came, the bytes after the reply included. */
static int read_reply(int fd, unsigned char *buf, size_t cap, size_t *len, struct iw_params *got)
{
	uint64_t deadline = sv_now_ns() + WAIT_MS * 1000000ull;
	int n;

	*len = 0;
	while ((n = iw_conn_take_reply(buf, *len, got)) == -EAGAIN) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (sv_now_ns() >= deadline)
			fail_msg("no MPA reply within %d ms (%zu bytes)", WAIT_MS, *len);
		(void)poll(&p, 1, 100);
		r = recv(fd, buf + *len, cap - *len, MSG_DONTWAIT);
		if (r == 0)
			fail_msg("connection closed after %zu bytes, before the reply", *len);
		if (r > 0)
			*len += (size_t)r;
	}
	return n;
}

/* Reads until @len reaches @want bytes; false if the stream ends first. */
static bool read_more(int fd, unsigned char *buf, size_t *len, size_t want)
{
	while (*len < want) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, WAIT_MS) != 1)
			fail_msg("no bytes within %d ms", WAIT_MS);
		r = recv(fd, buf + *len, want - *len, 0);
		if (r <= 0)
			return false;
		*len += (size_t)r;
	}
	return true;
}

/* The peer closes the connection within @ms (EOF or reset, no byte first). */
static void expect_closed(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, ms) != 1)
		fail_msg("the connection stays open past %d ms", ms);
	assert_true(recv(fd, &c, 1, MSG_DONTWAIT) <= 0);
}

/* A full exchange with QPN @dest, owned by @owner: the handler runs there with what we
 * asked, the reply carries its answer, and the stream's first bytes follow the reply. */
static void exchange(int family, struct peer *owner, struct iw_params want)
{
	unsigned char buf[256];
	struct iw_params got;
	struct report r;
	size_t len;
	int fd = dial(family, owner->qpn, &want), n;

	n = read_reply(fd, buf, sizeof(buf), &len, &got);
	assert_int_equal(n, IW_CONN_FRAME_LEN);
	assert_int_equal(got.src_qpn, owner->qpn);
	assert_int_equal(got.dest_qpn, want.src_qpn);
	assert_int_equal(got.ird, 11);
	assert_int_equal(got.ord, 13);
	assert_int_equal(got.crc, want.crc); /* RFC 5044 §7.1: the reply echoes C */
	assert_int_equal(got.ext, want.ext);
	assert_true(read_more(fd, buf, &len, (size_t)n + 4));
	assert_memory_equal(buf + n, "DATA", 4);
	close(fd);
	get_report(owner, REP_CONN, &r);
	assert_int_equal(r.pid, owner->pid);
	assert_int_equal(r.result, 0);
	assert_int_equal(r.p.src_qpn, want.src_qpn);
	assert_int_equal(r.p.dest_qpn, owner->qpn);
	assert_int_equal(r.p.ird, want.ird);
	assert_int_equal(r.p.ord, want.ord);
	assert_int_equal(r.p.crc, want.crc);
	assert_int_equal(r.p.ext, want.ext);
}

/* Dials QPN @dest and expects a reject. */
static void expect_reject(uint32_t dest)
{
	unsigned char buf[256];
	struct iw_params want = want_default, got;
	size_t len;
	int fd = dial(AF_INET, dest, &want);

	assert_int_equal(read_reply(fd, buf, sizeof(buf), &len, &got), -ECONNREFUSED);
	close(fd);
}

/* A QPN block nobody on this host owns (neither its QPN name nor its handoff name is
 * bound). */
static uint32_t free_block(void)
{
	for (uint32_t b = SV_QPN_BLOCKS - 2; b > 1; b--) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int f1 = socket(AF_UNIX, SOCK_SEQPACKET, 0), f2 = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "softverbs/qpn/%u", b);
		bool ok = !bind(f1, (struct sockaddr *)&sa,
				(socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));

		n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "softverbs/iw/%u", b);
		ok = ok && !bind(f2, (struct sockaddr *)&sa,
				 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
		close(f1);
		close(f2);
		if (ok)
			return b;
	}
	fail_msg("no free QPN block");
	return 0;
}

/* ---- the frames ------------------------------------------------------------------- */

/* The frames as this port sends them: byte for byte what every softverbs so far sends
 * (revision 2, the RFC 6581 words without the enhanced flag, our 16 bytes); request and
 * reply round-trip every field; a reply trickling in asks for more at every split; a
 * reject, a wrong key, a wrong revision, foreign private data, markers and the enhanced
 * flag are each told apart. */
static void test_frames(void **state)
{
	static const unsigned char req_bytes[IW_CONN_FRAME_LEN] = {
		'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e',
		0x40, 0x02, 0x00, 0x14,       /* C, revision 2, 20 bytes of PD */
		0x80, 0x05, 0xc0, 0x07,       /* IRD: peer-to-peer, 5; ORD: Write and Read RTR, 7 */
		'S', 'V', 'I', 'W', 0x01, 0x03, 0x00, 0x00, /* version 1, ext | CRC */
		0x00, 0xab, 0xcd, 0xef, 0x00, 0x00, 0x42, 0x42,
	};
	static const unsigned char rep_bytes[IW_CONN_FRAME_LEN] = {
		'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e',
		0x40, 0x02, 0x00, 0x14,       /* C, revision 2, 20 bytes of PD */
		0x3f, 0xff, 0x80, 0x03,       /* IRD capped at 14 bits (no p2p in a reply); Write */
		'S', 'V', 'I', 'W', 0x01, 0x02, 0x00, 0x00, /* version 1, CRC */
		0x00, 0x00, 0x01, 0x23, 0x00, 0xab, 0xcd, 0xef,
	};
	struct iw_params want = want_default, got, mine = { .src_qpn = 0x123, .dest_qpn = 0xabcdef,
		.ird = 0x7fff, .ord = 3, .crc = true, .ext = false, .rtr = IW_RTR_WRITE };
	unsigned char req[IW_MPA_FRAME_MAX], rep[IW_MPA_FRAME_MAX], bad[IW_MPA_FRAME_MAX];
	struct iw_mpa_params other;
	int n, m, sp[2];

	(void)state;
	want.dest_qpn = 0x4242;
	want.rtr = IW_RTR_WRITE | IW_RTR_READ;
	n = iw_conn_build_request(req, sizeof(req), &want);
	assert_int_equal(n, IW_CONN_FRAME_LEN);
	assert_memory_equal(req, req_bytes, sizeof(req_bytes));
	assert_memory_equal(req, "MPA ID Req Frame", 16);
	assert_int_equal(req[16], IW_MPA_FLAG_CRC); /* C asked for, never M */
	assert_int_equal(req[17], 2);               /* RFC 6581: revision 2 */
	assert_int_equal(req[20] >> 7, 1);          /* peer-to-peer: RTR kinds offered */
	for (int k = 0; k < n; k++)
		assert_int_equal(iw_conn_parse_request(req, (size_t)k, &got), -EAGAIN);
	assert_int_equal(iw_conn_parse_request(req, (size_t)n, &got), n);
	assert_int_equal(got.src_qpn, want.src_qpn);
	assert_int_equal(got.dest_qpn, want.dest_qpn);
	assert_int_equal(got.ird, 5);
	assert_int_equal(got.ord, 7);
	assert_true(got.crc && got.ext);
	assert_int_equal(got.rtr, IW_RTR_WRITE | IW_RTR_READ);
	/* A request given as a reply: the key is wrong. */
	assert_int_equal(iw_conn_take_reply(req, (size_t)n, &got), -EPROTO);

	/* The reply as the passive side sends it. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	assert_int_equal(iw_conn_reply(sp[0], &mine, false), 0);
	assert_int_equal(recv(sp[1], rep, sizeof(rep), 0), IW_CONN_FRAME_LEN);
	m = IW_CONN_FRAME_LEN;
	assert_memory_equal(rep, rep_bytes, sizeof(rep_bytes));
	assert_int_equal(rep[16], IW_MPA_FLAG_CRC);
	for (int k = 0; k < m; k++)
		assert_int_equal(iw_conn_take_reply(rep, (size_t)k, &got), -EAGAIN);
	assert_int_equal(iw_conn_take_reply(rep, (size_t)m, &got), m);
	assert_int_equal(got.src_qpn, 0x123);
	assert_int_equal(got.dest_qpn, 0xabcdef);
	assert_int_equal(got.ird, 0x3fff); /* RFC 6581: 14 bits, capped */
	assert_int_equal(got.ord, 3);
	assert_true(got.crc && !got.ext);
	assert_int_equal(got.rtr, IW_RTR_WRITE);
	/* Bytes after the reply are not the reply's. */
	memcpy(bad, rep, (size_t)m);
	memset(bad + m, 0xee, 8);
	assert_int_equal(iw_conn_take_reply(bad, (size_t)m + 8, &got), m);

	/* Each byte of the key wrong: -EPROTO as soon as it is in. */
	for (int k = 0; k < 16; k++) {
		memcpy(bad, rep, (size_t)m);
		bad[k] ^= 0x20;
		assert_int_equal(iw_conn_take_reply(bad, (size_t)k + 1, &got), -EPROTO);
		assert_int_equal(iw_conn_take_reply(bad, (size_t)m, &got), -EPROTO);
	}
	/* Revision 1 (no enhanced words), foreign private data, markers, the enhanced flag
	 * (RFC 6581 as siw frames it; never on this port): -EPROTO. */
	memcpy(bad, rep, (size_t)m);
	bad[17] = 1;
	assert_int_equal(iw_conn_take_reply(bad, (size_t)m, &got), -EPROTO);
	memcpy(bad, rep, (size_t)m);
	bad[24] = 'X';
	assert_int_equal(iw_conn_take_reply(bad, (size_t)m, &got), -EPROTO);
	memcpy(bad, rep, (size_t)m);
	bad[16] |= IW_MPA_FLAG_MARKERS;
	assert_int_equal(iw_conn_take_reply(bad, (size_t)m, &got), -EPROTO);
	memcpy(bad, rep, (size_t)m);
	bad[16] |= IW_MPA_FLAG_ENHANCED;
	assert_int_equal(iw_conn_take_reply(bad, (size_t)m, &got), -EPROTO);
	other = (struct iw_mpa_params){ .rev = IW_MPA_REV2 }; /* 4 bytes of PD, none ours */
	n = iw_mpa_encode(bad, sizeof(bad), IW_MPA_REPLY, &other, "abcd", 4);
	assert_int_equal(iw_conn_take_reply(bad, (size_t)n, &got), -EPROTO);

	/* A reject: -ECONNREFUSED, with our private data or without. */
	assert_int_equal(iw_conn_reply(sp[0], &mine, true), 0);
	assert_int_equal(recv(sp[1], rep, sizeof(rep), 0), IW_CONN_FRAME_LEN);
	assert_int_equal(rep[16], IW_MPA_FLAG_CRC | IW_MPA_FLAG_REJECT);
	assert_memory_equal(rep + 17, rep_bytes + 17, IW_CONN_FRAME_LEN - 17);
	assert_int_equal(iw_conn_take_reply(rep, (size_t)m, &got), -ECONNREFUSED);
	other = (struct iw_mpa_params){ .rev = IW_MPA_REV2, .flags = IW_MPA_FLAG_REJECT };
	n = iw_mpa_encode(bad, sizeof(bad), IW_MPA_REPLY, &other, "abcd", 4);
	assert_int_equal(iw_conn_take_reply(bad, (size_t)n, &got), -ECONNREFUSED);
	other = (struct iw_mpa_params){ .rev = IW_MPA_REV, .flags = IW_MPA_FLAG_REJECT };
	n = iw_mpa_encode(bad, sizeof(bad), IW_MPA_REPLY, &other, NULL, 0);
	assert_int_equal(iw_conn_take_reply(bad, (size_t)n - 1, &got), -EAGAIN);
	assert_int_equal(iw_conn_take_reply(bad, (size_t)n, &got), -ECONNREFUSED); /* rev 1 */
	close(sp[0]);
	close(sp[1]);
}

/* GIDs to socket addresses: IPv4-mapped to AF_INET, others AF_INET6, the port from the
 * environment; a link-local GID takes the scope of the interface with the source GID,
 * and fails when no interface has it. */
static void test_gid_addr(void **state)
{
	union ibv_gid gid = { 0 }, sgid = { 0 };
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (void *)&ss;
	struct sockaddr_in6 *sin6 = (void *)&ss;
	socklen_t len;

	(void)state;
	setenv("SOFTVERBS_IWARP_PORT", "4791", 1);
	gid.raw[10] = gid.raw[11] = 0xff;
	gid.raw[12] = 10, gid.raw[13] = 77, gid.raw[14] = 0, gid.raw[15] = 2;
	assert_int_equal(iw_conn_gid_addr(&gid, NULL, &ss, &len), 0);
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(len, sizeof(*sin));
	assert_int_equal(ntohs(sin->sin_port), 4791);
	assert_int_equal(ntohl(sin->sin_addr.s_addr), 0x0a4d0002);

	memcpy(gid.raw, &in6addr_loopback, 16);
	assert_int_equal(iw_conn_gid_addr(&gid, NULL, &ss, &len), 0);
	assert_int_equal(sin6->sin6_family, AF_INET6);
	assert_int_equal(len, sizeof(*sin6));
	assert_memory_equal(&sin6->sin6_addr, &in6addr_loopback, 16);
	assert_int_equal(sin6->sin6_scope_id, 0);

	memset(gid.raw, 0, 16);
	gid.raw[0] = 0xfe, gid.raw[1] = 0x80, gid.raw[15] = 9;
	sgid = gid;
	sgid.raw[8] = 0x5a; /* fe80::5a00:0:0:9 is on no interface here */
	assert_int_equal(iw_conn_gid_addr(&gid, &sgid, &ss, &len), -ENODEV);
	assert_int_equal(iw_conn_gid_addr(&gid, NULL, &ss, &len), -ENODEV);
	unsetenv("SOFTVERBS_IWARP_PORT");
	assert_int_equal(iw_conn_port(), IW_PORT_DEFAULT);
}

/* ---- the port and the handoff ----------------------------------------------------- */

/* The first process holds the port, the second does not; a dial for the second's QPN
 * reaches its handler through the holder (SCM_RIGHTS), over IPv4 and IPv6 alike; a dial
 * for the holder's own QPN reaches its own handler. */
static void test_handoff_to_owner(void **state)
{
	struct peer *a, *b;
	struct iw_params plain = want_default;
	struct report r;

	(void)state;
	a = spawn();
	b = spawn();
	command(a, CMD_ENSURE);
	get_report(a, REP_ENSURE, &r);
	assert_true(r.held);
	command(b, CMD_ENSURE);
	get_report(b, REP_ENSURE, &r);
	assert_int_equal(r.result, 0);
	assert_false(r.held);
	assert_int_not_equal(a->qpn >> SV_QPN_BLOCK_BITS, b->qpn >> SV_QPN_BLOCK_BITS);

	exchange(AF_INET, b, want_default);
	exchange(AF_INET6, b, want_default);
	plain.crc = plain.ext = false;
	exchange(AF_INET, b, plain);
	exchange(AF_INET6, a, want_default);
	exchange(AF_INET, a, plain);
	no_report(a, 0);
	no_report(b, 0);
}

/* A QPN nobody owns gets a reject: a block with no owner on the host (the holder
 * answers), a free QPN of the holder's block, a free QPN of another process's block (its
 * owner answers). No handler runs. */
static void test_no_owner_rejected(void **state)
{
	struct peer *a, *b;

	(void)state;
	a = spawn();
	b = spawn();
	expect_reject(free_block() << SV_QPN_BLOCK_BITS | 7);
	expect_reject(a->qpn + 1);
	expect_reject(b->qpn + 1);
	expect_reject(0); /* QP0: never a QP of ours */
	no_report(a, 0);
	no_report(b, 0);
	exchange(AF_INET, b, want_default); /* and the port still serves */
}

/* Not an MPA request: the connection is closed at once (well before the request's
 * deadline), and the holder keeps serving; an MPA request whose private data is not
 * softverbs' is rejected. */
static void test_garbage_closed(void **state)
{
	static const char *garbage[] = { "GET / HTTP/1.0\r\n\r\n", "MPA ID Req FrXme", "\0\0\0\0" };
	unsigned char buf[256];
	struct iw_mpa_params other;
	struct iw_params got;
	struct peer *a, *b;
	size_t len;
	int fd, n;

	(void)state;
	setenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS", "30000", 1);
	a = spawn();
	b = spawn();
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		fd = raw_connect();
		assert_true(send(fd, garbage[i], strlen(garbage[i]) + 1, 0) > 0);
		expect_closed(fd, 3000);
		close(fd);
	}
	/* MPA with a reserved bit set, and MPA from somebody else (revision 1, no words). */
	fd = raw_connect();
	n = iw_conn_build_request(buf, sizeof(buf), &want_default);
	buf[16] |= 0x01;
	assert_int_equal(send(fd, buf, (size_t)n, 0), n);
	expect_closed(fd, 3000);
	close(fd);
	fd = raw_connect();
	other = (struct iw_mpa_params){ .rev = IW_MPA_REV2 };
	/* revision 2 but private data too short for the words + ours */
	n = iw_mpa_encode(buf, sizeof(buf), IW_MPA_REQUEST, &other, "hello", 5);
	assert_int_equal(send(fd, buf, (size_t)n, 0), n);
	assert_int_equal(read_reply(fd, buf, sizeof(buf), &len, &got), -ECONNREFUSED);
	close(fd);
	no_report(a, 0);
	no_report(b, 0);
	exchange(AF_INET, b, want_default);
	exchange(AF_INET, a, want_default);
}

/* A connection that sends nothing, or half a request, is closed once the request's
 * deadline passes (SOFTVERBS_IWARP_MPA_TIMEOUT_MS; 5 s by default, as siw), not
 * before; the holder keeps serving. */
static void test_silent_closed(void **state)
{
	struct peer *a, *b;
	unsigned char req[IW_MPA_FRAME_MAX];
	uint64_t t0, ms;
	int fd1, fd2, n;

	(void)state;
	setenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS", "400", 1);
	a = spawn();
	b = spawn();
	n = iw_conn_build_request(req, sizeof(req), &want_default);
	t0 = sv_now_ns();
	fd1 = raw_connect();
	fd2 = raw_connect();
	assert_int_equal(send(fd2, req, (size_t)n / 2, 0), n / 2);
	expect_closed(fd1, 4000);
	ms = (sv_now_ns() - t0) / 1000000;
	assert_true(ms >= 350);
	expect_closed(fd2, 4000);
	close(fd1);
	close(fd2);
	no_report(a, 0);
	no_report(b, 0);
	exchange(AF_INET, b, want_default);
}

/* The request trickling in, split at every byte: the holder neither answers nor closes
 * on a part, the whole reaches the owner (the holder's own QP and another process's, in
 * turn), and the bytes behind it stay in the socket for the owner. */
static void test_split_points(void **state)
{
	struct peer *a, *b;
	struct iw_params want = want_default, got;
	unsigned char req[IW_MPA_FRAME_MAX], buf[256];
	struct report r;
	size_t len;
	int n;

	(void)state;
	a = spawn();
	b = spawn();
	for (int k = 1; k < IW_CONN_FRAME_LEN; k++) {
		struct peer *owner = k % 2 ? b : a;
		struct pollfd p;
		int fd = raw_connect();

		want.dest_qpn = owner->qpn;
		want.src_qpn = 0x1000 + (uint32_t)k;
		n = iw_conn_build_request(req, sizeof(req), &want);
		assert_int_equal(send(fd, req, (size_t)k, 0), k);
		/* Nothing comes back for a part of a request (no reply, no close). */
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		assert_int_equal(poll(&p, 1, 10), 0);
		/* The rest, and 4 bytes past the request in the same segment: the holder
		 * reads no further than the request, they are the owner's. */
		memcpy(req + n, "XTRA", 4);
		assert_int_equal(send(fd, req + k, (size_t)(n - k) + 4, 0), n - k + 4);
		assert_int_equal(read_reply(fd, buf, sizeof(buf), &len, &got), IW_CONN_FRAME_LEN);
		assert_int_equal(got.src_qpn, owner->qpn);
		assert_int_equal(got.dest_qpn, want.src_qpn);
		close(fd);
		get_report(owner, REP_CONN, &r);
		assert_int_equal(r.p.src_qpn, want.src_qpn);
		assert_int_equal(r.extra_len, 4);
		assert_memory_equal(r.extra, "XTRA", 4);
	}
}

/* The holder dies (SIGKILL, a child of it still alive): the next
 * iw_conn_port_ensure in another process holds the port, dials reach it, the dead
 * process's QPNs are rejected, and a process started later hands off to the new holder.
 * Nothing of the dead one is left to clean. */
static void test_holder_exits_takeover(void **state)
{
	struct peer *a, *b, *c;
	struct report r;
	uint32_t dead_qpn;

	(void)state;
	assert_int_equal(pipe(keep_pipe), 0);
	a = spawn();
	b = spawn();
	exchange(AF_INET, b, want_default);
	command(a, CMD_FORK_KEEP);
	get_report(a, REP_FORKED, &r);
	assert_true(r.result > 0);
	extra_pids[0] = r.result;
	dead_qpn = a->qpn;
	kill_peer(a);

	command(b, CMD_ENSURE);
	get_report(b, REP_ENSURE, &r);
	assert_int_equal(r.result, 0);
	assert_true(r.held);
	exchange(AF_INET, b, want_default);
	exchange(AF_INET6, b, want_default);
	expect_reject(dead_qpn);

	c = spawn();
	command(c, CMD_ENSURE);
	get_report(c, REP_ENSURE, &r);
	assert_false(r.held);
	exchange(AF_INET, c, want_default);
}

/* The handoff socket itself: a connection handed over by a process of the same user
 * reaches the handler (here a socketpair stands for the TCP connection); one handed over
 * by another user is refused, its descriptor closed unanswered (root only: the test
 * drops to nobody for that). */
static void test_handoff_credentials(void **state)
{
	struct peer *b;
	struct report r;
	unsigned char req[IW_MPA_FRAME_MAX], buf[256];
	struct iw_params want = want_default, got;
	int n;

	(void)state;
	b = spawn();
	want.dest_qpn = b->qpn;
	n = iw_conn_build_request(req, sizeof(req), &want);
	for (int other_user = 0; other_user < 2; other_user++) {
		int sp[2], st;
		pid_t pid;

		if (other_user && geteuid() != 0) {
			printf("# skipped: another user's handoff needs root to become nobody\n");
			break;
		}
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			union {
				char b[CMSG_SPACE(sizeof(int))];
				struct cmsghdr a;
			} ctl;
			struct iovec iov = { .iov_base = req, .iov_len = (size_t)n };
			struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
					      .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
			struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			int s, len;

			if (other_user && setuid(65534))
				_exit(2);
			len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "softverbs/iw/%u",
				       b->qpn >> SV_QPN_BLOCK_BITS);
			s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
			if (connect(s, (struct sockaddr *)&sa,
				    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)))
				_exit(3);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &sp[0], sizeof(int));
			/* Refused: the owner may close before or after our message went. */
			_exit(sendmsg(s, &msg, MSG_NOSIGNAL) == n || other_user ? 0 : 4);
		}
		close(sp[0]);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		if (!other_user) {
			size_t len;

			assert_int_equal(read_reply(sp[1], buf, sizeof(buf), &len, &got),
					 IW_CONN_FRAME_LEN);
			assert_int_equal(got.src_qpn, b->qpn);
			get_report(b, REP_CONN, &r);
			assert_int_equal(r.p.src_qpn, want.src_qpn);
		} else {
			expect_closed(sp[1], 3000);
			no_report(b, 0);
		}
		close(sp[1]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frames),
		cmocka_unit_test(test_gid_addr),
		cmocka_unit_test_setup_teardown(test_handoff_to_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_owner_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_silent_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split_points, setup, teardown),
		cmocka_unit_test_setup_teardown(test_holder_exits_takeover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handoff_credentials, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
