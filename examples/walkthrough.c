/* Build: cc -std=c11 -D_GNU_SOURCE -O2 -o walkthrough examples/walkthrough.c -libverbs */
/*
 * walkthrough: the seed article's code walk-through, run for real between two processes.
 *
 *   walkthrough                 server: waits for one client on TCP port 18600
 *   walkthrough 127.0.0.1       client: connects to the server
 *   walkthrough --self          forks a server and a client over loopback; exit status 0
 *                               only if both sides passed every step
 *   softverbs run ./walkthrough --self     the same, on softverbs (no RDMA NIC needed)
 *
 * Both sides open the first RDMA device, allocate a PD, create a CQ and an RC QP and
 * register one buffer (steps 1-5). They swap what the peer needs to know (QP number,
 * PSN, LID, GID, buffer address and rkey) over a plain TCP connection and move their
 * QPs through INIT, RTR and RTS (step 6). The client is the active side: it RDMA-WRITEs
 * one message (7), then a batch of N with only the last one signaled (8), RDMA-READs
 * everything back (9) and SENDs a message into a RECV the server posted first (10).
 * The server's CPU takes no part in 7-9; it only checks its memory afterwards. Both
 * sides then tear down in reverse order (11). Every step prints its elapsed time, and
 * every transfer is verified byte by byte.
 *
 * The TCP connection also sequences the two sides: nothing waits on a sleep, every wait
 * has a deadline, and a side that fails tells its peer why before it exits.
 *
 * Only <infiniband/verbs.h> from rdma-core is used: the program builds and runs
 * unchanged against softverbs or against rdma-core on a machine with an RDMA NIC.
 * Errors exit at once and leave the clean-up to process exit, as short examples do;
 * step 11 shows the clean-up in order.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, lrand48, getaddrinfo with -std=c11 */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define DEFAULT_TCP_PORT   18600
#define DEFAULT_BATCH      16
#define MAX_BATCH          4096
#define IB_PORT            1      /* the device's first port */
#define CQ_DEPTH           64     /* only signaled WRs and RECVs complete: a few at a time */
#define MSG_SIZE           4096   /* bytes per WRITE and per SEND */

#define CQ_TIMEOUT_MS      5000   /* a completion must arrive within this */
#define PEER_TIMEOUT_MS    20000  /* a message from the peer (longer than CQ_TIMEOUT_MS) */
#define ACCEPT_TIMEOUT_MS  60000  /* the server waits this long for a client */
#define CONNECT_TIMEOUT_MS 5000
#define SELF_TIMEOUT_MS    60000  /* --self: both sides must have exited by then */

/* Each transfer writes its own pattern, so stale or misplaced bytes do not pass. */
enum { TAG_WRITE = 7, TAG_BATCH = 0x80, TAG_SEND = 10 };

/* What one side tells the other in step 6. */
struct conn_info {
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	int mtu;                /* enum ibv_mtu */
	union ibv_gid gid;      /* all zero in LID mode */
	uint64_t addr;          /* the data region, target of WRITEs and source of READs */
	uint32_t rkey;
	uint32_t batch;         /* -n: both sides must lay out the same buffer */
};

struct side {
	bool server;
	int gid_index;          /* -1: LID mode, no GRH */
	uint32_t batch;

	struct ibv_context *ctx;
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;

	/*
	 * One buffer, one MR:
	 *   data      (1 + batch) * MSG_SIZE  slot 0 for step 7, slots 1..batch for step 8;
	 *                                     WRITE target and READ source on the server,
	 *                                     WRITE source on the client
	 *   readback  (1 + batch) * MSG_SIZE  where the client's READ lands (step 9)
	 *   msg       MSG_SIZE                SEND source (client), RECV target (server)
	 */
	uint8_t *buf;
	size_t buf_size;
	size_t data_size;
	uint8_t *data;
	uint8_t *readback;
	uint8_t *msg;

	struct conn_info local;
	struct conn_info remote;
};

/* Who we are, where we are, and the TCP connection: what every error message needs. */
static const char *role = "walkthrough";
static const char *peer_role = "peer";
static int oob_fd = -1;
static int cur_step;
static char cur_name[96];
static struct timespec step_t0, step_t1;
static bool step_stopped;

/* ---- time and printing ------------------------------------------------------------ */

static struct timespec now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t;
}

static long long us_between(struct timespec a, struct timespec b)
{
	return (b.tv_sec - a.tv_sec) * 1000000LL + (b.tv_nsec - a.tv_nsec) / 1000;
}

static long long ms_until(struct timespec deadline)
{
	long long us = us_between(now(), deadline);

	return us <= 0 ? 0 : (us + 999) / 1000;
}

static struct timespec deadline_in(int ms)
{
	struct timespec t = now();

	t.tv_sec += ms / 1000;
	t.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* The dots after a step's name, so that the times of all steps line up. */
static const char *dots(void)
{
	static const char all[] = "................................................";
	size_t len = strlen(cur_name);

	return len + 3 < sizeof(all) - 1 ? all + len : all + sizeof(all) - 4;
}

/* "server [ 3] create CQ (depth 64) ............ 12 µs  note" as one write. */
static void print_step_line(long long us, const char *note)
{
	char line[256];

	snprintf(line, sizeof(line), "%s [%2d] %s %s %8lld µs%s%s\n", role, cur_step, cur_name,
		 dots(), us, note[0] ? "  " : "", note);
	fputs(line, stdout);
}

static void step_begin(int n, const char *fmt, ...)
{
	va_list ap;

	cur_step = n;
	va_start(ap, fmt);
	vsnprintf(cur_name, sizeof(cur_name), fmt, ap);
	va_end(ap);
	step_stopped = false;
	step_t0 = now();
}

/* Restarts the clock: what came before (waiting for the peer) is not the step's work. */
static void step_restart(void)
{
	step_t0 = now();
}

/* Stops the clock: what comes after (the peer's confirmation) is not the step's work. */
static void step_stop(void)
{
	step_t1 = now();
	step_stopped = true;
}

static void step_end(const char *note)
{
	if (!step_stopped)
		step_stop();
	print_step_line(us_between(step_t0, step_t1), note);
	cur_step = 0;
}

/* An indented line under a step. */
static void detail(const char *fmt, ...)
{
	char text[224], line[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	snprintf(line, sizeof(line), "%s      %s\n", role, text);
	fputs(line, stdout);
}

/*
 * Reports a failure: the step's line marked FAILED, the reason on stderr, the reason to
 * the peer (so that it does not wait for us until its deadline), exit status 1.
 */
__attribute__((format(printf, 1, 2), noreturn))
static void die(const char *fmt, ...)
{
	char msg[320], wire[400];
	va_list ap;
	int n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	if (cur_step) {
		snprintf(wire, sizeof(wire), "%s [%2d] %s %s FAILED after %lld µs\n", role,
			 cur_step, cur_name, dots(), us_between(step_t0, now()));
		fputs(wire, stdout);
	}
	fflush(stdout);
	fprintf(stderr, "%s: error: %s\n", role, msg);

	if (oob_fd >= 0) {
		if (cur_step)
			n = snprintf(wire, sizeof(wire), "error %s failed at step %d (%s): %s\n",
				     role, cur_step, cur_name, msg);
		else
			n = snprintf(wire, sizeof(wire), "error %s failed: %s\n", role, msg);
		if (n >= (int)sizeof(wire)) {
			n = (int)sizeof(wire) - 1;
			wire[n - 1] = '\n';
		}
		/* Best effort: the peer may be gone already. */
		if (send(oob_fd, wire, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			/* nothing more to tell anyone */
		}
	}
	exit(1);
}

static const char *errno_str(int err)
{
	return err ? strerror(err) : "failed, errno not set";
}

/* For calls that return 0 or an errno value (or -1 and errno): ibv_modify_qp, … */
static void check(int rc, const char *call)
{
	if (rc)
		die("%s: %s", call, errno_str(rc > 0 ? rc : errno));
}

/* For calls that return NULL and set errno: ibv_alloc_pd, ibv_create_cq, … */
static void *check_ptr(void *p, const char *call)
{
	if (!p)
		die("%s: %s", call, errno_str(errno));
	return p;
}

static const char *gid_str(const union ibv_gid *gid, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, gid->raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

static bool gid_is_zero(const union ibv_gid *gid)
{
	static const union ibv_gid zero;

	return memcmp(gid, &zero, sizeof(zero)) == 0;
}

static int mtu_bytes(int mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

/* ---- the data patterns ------------------------------------------------------------ */

static uint8_t pattern_byte(unsigned tag, size_t i)
{
	return (uint8_t)(tag * 67u + i * 7u + (i >> 8) * 13u + 1u);
}

static void fill(uint8_t *p, size_t len, unsigned tag)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern_byte(tag, i);
}

/* Checks p[0..len) byte by byte against the pattern (or zero, tag < 0). */
static void verify(const uint8_t *p, size_t len, int tag, const char *what)
{
	for (size_t i = 0; i < len; i++) {
		uint8_t want = tag < 0 ? 0 : pattern_byte((unsigned)tag, i);

		if (p[i] != want)
			die("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, p[i], want);
	}
}

/* ---- the out-of-band TCP channel ---------------------------------------------------- */

static int tcp_listen(const char *addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, fd;

	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (addr && inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		die("bad listen address %s", addr);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		die("setsockopt(SO_REUSEADDR): %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("bind to TCP port %d: %s (choose another with -p)", port, strerror(errno));
	if (listen(fd, 1))
		die("listen: %s", strerror(errno));
	return fd;
}

static void tcp_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		die("setsockopt(TCP_NODELAY): %s", strerror(errno));
}

static int tcp_accept(int lfd, int port, int timeout_ms)
{
	struct pollfd pfd = { .fd = lfd, .events = POLLIN };
	int fd, rc;

	do
		rc = poll(&pfd, 1, timeout_ms);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		die("poll on the listening socket: %s", strerror(errno));
	if (rc == 0)
		die("no client connected to TCP port %d within %d s", port, timeout_ms / 1000);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	tcp_nodelay(fd);
	return fd;
}

static int tcp_connect(const char *host, int port, int timeout_ms)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	struct pollfd pfd;
	char service[16];
	int fd, rc, err = 0;
	socklen_t len = sizeof(err);

	snprintf(service, sizeof(service), "%d", port);
	rc = getaddrinfo(host, service, &hints, &ai);
	if (rc)
		die("cannot resolve %s: %s", host, gai_strerror(rc));
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
	err = rc ? errno : 0;
	freeaddrinfo(ai);
	if (err && err != EINPROGRESS)
		die("connect to %s:%d: %s%s", host, port, strerror(err),
		    err == ECONNREFUSED ? " (is the server running?)" : "");
	if (err) {
		pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
		do
			rc = poll(&pfd, 1, timeout_ms);
		while (rc < 0 && errno == EINTR);
		if (rc < 0)
			die("poll on the connecting socket: %s", strerror(errno));
		if (rc == 0)
			die("connect to %s:%d: no answer within %d ms", host, port, timeout_ms);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
			die("getsockopt(SO_ERROR): %s", strerror(errno));
		if (err)
			die("connect to %s:%d: %s%s", host, port, strerror(err),
			    err == ECONNREFUSED ? " (is the server running?)" : "");
	}
	/* Back to blocking: every read below is guarded by poll() with a deadline. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK))
		die("fcntl(F_SETFL): %s", strerror(errno));
	tcp_nodelay(fd);
	return fd;
}

__attribute__((format(printf, 1, 2)))
static void oob_send(const char *fmt, ...)
{
	char line[256];
	size_t off = 0, len;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	len = strlen(line);
	line[len++] = '\n';
	while (off < len) {
		ssize_t n = send(oob_fd, line + off, len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("sending to the %s over TCP: %s", peer_role, strerror(errno));
		off += (size_t)n;
	}
}

/* Receives one line (without its '\n'); the peer's "error …" becomes our failure. */
static void oob_recv(char *line, size_t size, const char *waiting_for)
{
	struct timespec deadline = deadline_in(PEER_TIMEOUT_MS);
	size_t len = 0;

	for (;;) {
		struct pollfd pfd = { .fd = oob_fd, .events = POLLIN };
		int rc = poll(&pfd, 1, (int)ms_until(deadline));
		ssize_t n;
		char c;

		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			die("poll on the TCP connection: %s", strerror(errno));
		if (rc == 0)
			die("the %s sent no %s within %d s", peer_role, waiting_for,
			    PEER_TIMEOUT_MS / 1000);
		n = recv(oob_fd, &c, 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("waiting for the %s's %s: %s", peer_role, waiting_for,
			    strerror(errno));
		if (n == 0)
			die("the %s closed the TCP connection (waiting for its %s)", peer_role,
			    waiting_for);
		if (c == '\n')
			break;
		if (len + 1 >= size)
			die("the %s sent a line too long (waiting for its %s)", peer_role,
			    waiting_for);
		line[len++] = c;
	}
	line[len] = '\0';
	if (strncmp(line, "error ", 6) == 0) {
		oob_fd = -1; /* it is gone: nothing to tell it back */
		die("the %s", line + 6);
	}
}

static void oob_expect(const char *want)
{
	char line[256];

	oob_recv(line, sizeof(line), want);
	if (strcmp(line, want) != 0)
		die("protocol: the %s sent \"%s\", expected \"%s\"", peer_role, line, want);
}

/* conn_info as one text line: no byte order or struct layout to agree on. */
static void send_conn_info(const struct conn_info *ci)
{
	char gid[33];

	for (int i = 0; i < 16; i++)
		snprintf(gid + 2 * i, 3, "%02x", ci->gid.raw[i]);
	oob_send("qp %06x psn %06x lid %04x mtu %d gid %s addr %016" PRIx64 " rkey %08x batch %u",
		 ci->qpn, ci->psn, ci->lid, ci->mtu, gid, ci->addr, ci->rkey, ci->batch);
}

static void recv_conn_info(struct conn_info *ci)
{
	char line[256], gid[33];
	unsigned lid;

	oob_recv(line, sizeof(line), "QP information");
	if (sscanf(line, "qp %x psn %x lid %x mtu %d gid %32s addr %" SCNx64 " rkey %x batch %u",
		   &ci->qpn, &ci->psn, &lid, &ci->mtu, gid, &ci->addr, &ci->rkey,
		   &ci->batch) != 8 || strlen(gid) != 32)
		die("protocol: cannot parse the %s's QP information \"%s\"", peer_role, line);
	ci->lid = (uint16_t)lid;
	for (int i = 0; i < 16; i++)
		if (sscanf(gid + 2 * i, "%2hhx", &ci->gid.raw[i]) != 1)
			die("protocol: bad GID \"%s\" from the %s", gid, peer_role);
}

static void print_conn_info(const char *who, const struct conn_info *ci)
{
	char gid[INET6_ADDRSTRLEN];

	if (gid_is_zero(&ci->gid))
		snprintf(gid, sizeof(gid), "none (LID mode)");
	else
		gid_str(&ci->gid, gid, sizeof(gid));
	detail("%-6s QPN 0x%06x PSN 0x%06x LID 0x%04x GID %s", who, ci->qpn, ci->psn, ci->lid,
	       gid);
	detail("       buffer 0x%016" PRIx64 " rkey 0x%08x", ci->addr, ci->rkey);
}

/* ---- completions ------------------------------------------------------------------ */

/*
 * Polls the CQ for one completion, busy-polling as the article does, but never past a
 * deadline. The completion must be the WR we expect, and successful.
 */
static struct ibv_wc wait_completion(struct ibv_cq *cq, uint64_t wr_id,
				     enum ibv_wc_opcode opcode, const char *what)
{
	struct timespec deadline = deadline_in(CQ_TIMEOUT_MS);
	struct ibv_wc wc;
	int n;

	for (;;) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq: failed (%d) waiting for the %s", n, what);
		if (n == 1)
			break;
		if (ms_until(deadline) == 0)
			die("no completion for the %s within %d ms (ibv_poll_cq found none)", what,
			    CQ_TIMEOUT_MS);
	}
	if (wc.status != IBV_WC_SUCCESS)
		die("the %s completed with status %s (%d), vendor error 0x%x", what,
		    ibv_wc_status_str(wc.status), wc.status, wc.vendor_err);
	if (wc.wr_id != wr_id)
		die("a completion for wr_id %" PRIu64 " arrived, expected %" PRIu64 " (the %s)",
		    (uint64_t)wc.wr_id, wr_id, what);
	if (wc.opcode != opcode)
		die("the %s completed with opcode %d, expected %d", what, wc.opcode, opcode);
	return wc;
}

/* ---- steps 1-6: the same on both sides -------------------------------------------- */

static void step1_open_device(struct side *s)
{
	struct ibv_device **list;
	char gid[INET6_ADDRSTRLEN], addr[INET6_ADDRSTRLEN + 16];
	int n = 0;

	step_begin(1, "open device (first in list)");
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list: %s (no RDMA device here? try: softverbs run walkthrough)",
		    errno_str(errno));
	if (n == 0)
		die("ibv_get_device_list: no RDMA device (try: softverbs run walkthrough)");
	s->ctx = check_ptr(ibv_open_device(list[0]), "ibv_open_device");
	snprintf(cur_name, sizeof(cur_name), "open device %s (first of %d)",
		 ibv_get_device_name(list[0]), n);
	/* The open context keeps its device: the list can go now, as in the article. */
	ibv_free_device_list(list);

	check(ibv_query_port(s->ctx, IB_PORT, &s->port), "ibv_query_port");
	if (s->port.state != IBV_PORT_ACTIVE)
		die("port %d is %s, not ACTIVE", IB_PORT, ibv_port_state_str(s->port.state));
	if (s->gid_index >= 0) {
		if (s->gid_index >= s->port.gid_tbl_len)
			die("GID index %d is out of range: port %d has %d GIDs (-g)", s->gid_index,
			    IB_PORT, s->port.gid_tbl_len);
		check(ibv_query_gid(s->ctx, IB_PORT, s->gid_index, &s->gid), "ibv_query_gid");
		if (gid_is_zero(&s->gid))
			die("GID index %d of port %d is empty (choose another with -g)",
			    s->gid_index, IB_PORT);
	} else if (s->port.lid == 0) {
		die("-g -1 asks for LID addressing, but port %d has no LID (RoCE needs a GID: "
		    "-g INDEX)", IB_PORT);
	}
	step_end("");
	if (s->gid_index >= 0)
		snprintf(addr, sizeof(addr), "GID[%d] %s", s->gid_index,
			 gid_str(&s->gid, gid, sizeof(gid)));
	else
		snprintf(addr, sizeof(addr), "no GID (LID mode)");
	detail("port %d %s, link layer %s, active MTU %d, LID 0x%04x, %s", IB_PORT,
	       ibv_port_state_str(s->port.state),
	       s->port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
	       mtu_bytes(s->port.active_mtu), s->port.lid, addr);
}

static void step2_alloc_pd(struct side *s)
{
	step_begin(2, "allocate PD");
	s->pd = check_ptr(ibv_alloc_pd(s->ctx), "ibv_alloc_pd");
	step_end("");
}

static void step3_create_cq(struct side *s)
{
	step_begin(3, "create CQ (depth %d)", CQ_DEPTH);
	s->cq = check_ptr(ibv_create_cq(s->ctx, CQ_DEPTH, NULL, NULL, 0), "ibv_create_cq");
	step_end("");
}

static void step4_create_qp(struct side *s)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = {
			/* step 8 posts the whole batch at once; +1 for good measure */
			.max_send_wr = s->batch + 1,
			.max_recv_wr = 1,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0, /* only WRs posted with IBV_SEND_SIGNALED complete */
	};

	step_begin(4, "create RC QP (%u send WRs, sq_sig_all 0)", attr.cap.max_send_wr);
	s->qp = check_ptr(ibv_create_qp(s->pd, &attr), "ibv_create_qp");
	step_end("");
	detail("QP number 0x%06x", s->qp->qp_num);
}

static void step5_register_memory(struct side *s)
{
	const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			   IBV_ACCESS_REMOTE_WRITE;
	void *p;
	int rc;

	s->data_size = (size_t)(1 + s->batch) * MSG_SIZE;
	s->buf_size = 2 * s->data_size + MSG_SIZE;
	step_begin(5, "register memory (%zu KiB, remote read/write)", s->buf_size / 1024);
	rc = posix_memalign(&p, 4096, s->buf_size);
	if (rc)
		die("posix_memalign(%zu bytes): %s", s->buf_size, strerror(rc));
	s->buf = p;
	memset(s->buf, 0, s->buf_size);
	s->data = s->buf;
	s->readback = s->buf + s->data_size;
	s->msg = s->readback + s->data_size;
	s->mr = check_ptr(ibv_reg_mr(s->pd, s->buf, s->buf_size, access), "ibv_reg_mr");
	step_end("");
	detail("addr 0x%016" PRIx64 " lkey 0x%08x rkey 0x%08x", (uint64_t)(uintptr_t)s->buf,
	       s->mr->lkey, s->mr->rkey);
}

static void qp_to_init(struct side *s)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = IB_PORT,
		/* what the peer may do to our memory through this QP */
		.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
	};

	check(ibv_modify_qp(s->qp, &attr,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "ibv_modify_qp(INIT)");
}

static void qp_to_rtr(struct side *s)
{
	const struct conn_info *r = &s->remote;
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		/* the smaller of the two ports' MTUs */
		.path_mtu = s->local.mtu < r->mtu ? (enum ibv_mtu)s->local.mtu :
						   (enum ibv_mtu)r->mtu,
		.dest_qp_num = r->qpn,
		.rq_psn = r->psn,
		.max_dest_rd_atomic = 1, /* the peer's READs we serve at a time */
		.min_rnr_timer = 12,     /* 0.64 ms */
		.ah_attr = {
			.dlid = r->lid,
			.sl = 0,
			.src_path_bits = 0,
			.port_num = IB_PORT,
		},
	};

	if (s->gid_index >= 0) {
		/* RoCE (and routed InfiniBand) address the peer by GID, in a GRH */
		attr.ah_attr.is_global = 1;
		attr.ah_attr.grh.dgid = r->gid;
		attr.ah_attr.grh.sgid_index = (uint8_t)s->gid_index;
		attr.ah_attr.grh.hop_limit = 64;
	}
	check(ibv_modify_qp(s->qp, &attr,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER),
	      "ibv_modify_qp(RTR)");
}

static void qp_to_rts(struct side *s)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,   /* 4.096 µs * 2^14 = 67 ms before a retry */
		.retry_cnt = 7,
		.rnr_retry = 7,  /* the RECV is always posted before the SEND (step 10) */
		.sq_psn = s->local.psn,
		.max_rd_atomic = 1, /* our READs outstanding at a time */
	};

	check(ibv_modify_qp(s->qp, &attr,
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "ibv_modify_qp(RTS)");
}

static void step6_connect(struct side *s)
{
	const char *mode = s->gid_index >= 0 ? "GID" : "LID";

	step_begin(6, "exchange over TCP, connect (INIT, RTR, RTS)");
	s->local = (struct conn_info){
		.qpn = s->qp->qp_num,
		.psn = (uint32_t)lrand48() & 0xffffff,
		.lid = s->port.lid,
		.mtu = s->port.active_mtu,
		.gid = s->gid,
		.addr = (uint64_t)(uintptr_t)s->data,
		.rkey = s->mr->rkey,
		.batch = s->batch,
	};
	/* Both send first, then read: the lines are far smaller than a socket buffer. */
	send_conn_info(&s->local);
	recv_conn_info(&s->remote);
	if (s->remote.batch != s->batch)
		die("the %s runs with -n %u, this %s with -n %u: use the same -n on both",
		    peer_role, s->remote.batch, role, s->batch);
	if (!mtu_bytes(s->remote.mtu))
		die("protocol: the %s sent MTU %d", peer_role, s->remote.mtu);
	if (s->gid_index >= 0 && gid_is_zero(&s->remote.gid))
		die("the %s uses LID mode (-g -1) and sent no GID: use the same mode on both",
		    peer_role);
	if (s->gid_index < 0 && s->remote.lid == 0)
		die("the %s's port has no LID: LID mode (-g -1) cannot reach it", peer_role);

	qp_to_init(s);
	qp_to_rtr(s);
	qp_to_rts(s);
	/*
	 * Both QPs must be at least in RTR before the client's first WRITE, or the server's
	 * QP would drop it: wait until the peer says it is in RTS too.
	 */
	oob_send("rts");
	oob_expect("rts");
	step_end("");
	print_conn_info("local", &s->local);
	print_conn_info("remote", &s->remote);
	detail("%s addressing, path MTU %d", mode,
	       mtu_bytes(s->local.mtu < s->remote.mtu ? s->local.mtu : s->remote.mtu));
}

/* ---- step 11: the same on both sides ---------------------------------------------- */

static void step11_clean_up(struct side *s)
{
	step_begin(11, "clean up (MR, QP, CQ, PD, device)");
	/* reverse order of creation */
	check(ibv_dereg_mr(s->mr), "ibv_dereg_mr");
	free(s->buf);
	check(ibv_destroy_qp(s->qp), "ibv_destroy_qp");
	check(ibv_destroy_cq(s->cq), "ibv_destroy_cq");
	check(ibv_dealloc_pd(s->pd), "ibv_dealloc_pd");
	check(ibv_close_device(s->ctx), "ibv_close_device");
	step_end("");
}

/* ---- steps 7-10: the client acts ---------------------------------------------------- */

static void post_send_1(struct side *s, enum ibv_wr_opcode opcode, uint64_t wr_id,
			void *local, size_t len, uint64_t remote_addr, const char *what)
{
	struct ibv_sge sge = {
		.addr = (uint64_t)(uintptr_t)local,
		.length = (uint32_t)len,
		.lkey = s->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad_wr = NULL;
	int rc;

	if (opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_READ) {
		wr.wr.rdma.remote_addr = remote_addr;
		wr.wr.rdma.rkey = s->remote.rkey;
	}
	rc = ibv_post_send(s->qp, &wr, &bad_wr);
	if (rc)
		die("ibv_post_send (%s): %s", what, errno_str(rc > 0 ? rc : errno));
}

static void client_step7_write(struct side *s)
{
	step_begin(7, "RDMA WRITE %d bytes, signaled", MSG_SIZE);
	fill(s->data, MSG_SIZE, TAG_WRITE);
	post_send_1(s, IBV_WR_RDMA_WRITE, 7, s->data, MSG_SIZE, s->remote.addr, "RDMA WRITE");
	wait_completion(s->cq, 7, IBV_WC_RDMA_WRITE, "RDMA WRITE");
	step_stop();
	/* The completion says the data is in the server's memory: let it look. */
	oob_send("write-done");
	oob_expect("write-verified");
	step_end("verified by the server");
}

static void client_step8_batch(struct side *s)
{
	uint32_t n = s->batch;
	struct ibv_send_wr *wrs = calloc(n, sizeof(*wrs)), *bad_wr = NULL;
	struct ibv_sge *sges = calloc(n, sizeof(*sges));
	struct ibv_wc extra;
	int rc;

	step_begin(8, "%u RDMA WRITEs, only the last signaled", n);
	if (!wrs || !sges)
		die("calloc: %s", strerror(errno));
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *slot = s->data + (size_t)(1 + i) * MSG_SIZE;

		fill(slot, MSG_SIZE, TAG_BATCH + i);
		sges[i] = (struct ibv_sge){
			.addr = (uint64_t)(uintptr_t)slot,
			.length = MSG_SIZE,
			.lkey = s->mr->lkey,
		};
		wrs[i] = (struct ibv_send_wr){
			.wr_id = 800 + i,
			.next = i + 1 < n ? &wrs[i + 1] : NULL,
			.sg_list = &sges[i],
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = 0,
		};
		wrs[i].wr.rdma.remote_addr = s->remote.addr + (uint64_t)(1 + i) * MSG_SIZE;
		wrs[i].wr.rdma.rkey = s->remote.rkey;
	}
	/* Only the last one asks for a completion; RC completes in order, so it covers all. */
	wrs[n - 1].send_flags |= IBV_SEND_SIGNALED;
	rc = ibv_post_send(s->qp, &wrs[0], &bad_wr);
	if (rc)
		die("ibv_post_send (the batch, failed at WR %td of %u): %s",
		    bad_wr ? bad_wr - wrs : -1, n, errno_str(rc > 0 ? rc : errno));
	wait_completion(s->cq, 800 + n - 1, IBV_WC_RDMA_WRITE, "last RDMA WRITE of the batch");
	step_stop();
	rc = ibv_poll_cq(s->cq, 1, &extra);
	if (rc < 0)
		die("ibv_poll_cq: failed (%d)", rc);
	if (rc > 0)
		die("an unsignaled WRITE completed (wr_id %" PRIu64 ", status %s)",
		    (uint64_t)extra.wr_id, ibv_wc_status_str(extra.status));
	free(sges);
	free(wrs);
	oob_send("batch-done");
	oob_expect("batch-verified");
	step_end("1 completion, verified by the server");
}

static void client_step9_read(struct side *s)
{
	step_begin(9, "RDMA READ %zu bytes back, signaled", s->data_size);
	post_send_1(s, IBV_WR_RDMA_READ, 9, s->readback, s->data_size, s->remote.addr,
		    "RDMA READ");
	wait_completion(s->cq, 9, IBV_WC_RDMA_READ, "RDMA READ");
	/* What came back must be what steps 7 and 8 wrote. */
	for (size_t i = 0; i < s->data_size; i++)
		if (s->readback[i] != s->data[i])
			die("RDMA READ: byte %zu is 0x%02x, the server should hold 0x%02x", i,
			    s->readback[i], s->data[i]);
	step_end("verified");
	oob_send("read-verified");
}

static void client_step10_send(struct side *s)
{
	step_begin(10, "SEND %d bytes into the server's RECV", MSG_SIZE);
	fill(s->msg, MSG_SIZE, TAG_SEND);
	/* A SEND with no RECV waiting would be refused (RNR): wait for the server's word. */
	oob_expect("recv-posted");
	step_restart();
	post_send_1(s, IBV_WR_SEND, 10, s->msg, MSG_SIZE, 0, "SEND");
	wait_completion(s->cq, 10, IBV_WC_SEND, "SEND");
	step_stop();
	oob_expect("send-verified");
	step_end("verified by the server");
}

static void run_client(struct side *s)
{
	step1_open_device(s);
	step2_alloc_pd(s);
	step3_create_cq(s);
	step4_create_qp(s);
	step5_register_memory(s);
	step6_connect(s);
	client_step7_write(s);
	client_step8_batch(s);
	client_step9_read(s);
	client_step10_send(s);
	oob_send("done"); /* the server may now take its memory away */
	step11_clean_up(s);
}

/* ---- steps 7-10: the server checks ------------------------------------------------ */

static void server_step7_write(struct side *s)
{
	step_begin(7, "RDMA WRITE by the client: check the bytes");
	oob_expect("write-done");
	step_restart();
	verify(s->data, MSG_SIZE, TAG_WRITE, "RDMA WRITE");
	verify(s->data + MSG_SIZE, s->data_size - MSG_SIZE, -1, "beyond the RDMA WRITE");
	oob_send("write-verified");
	step_end("verified");
}

static void server_step8_batch(struct side *s)
{
	char what[64];

	step_begin(8, "%u RDMA WRITEs by the client: check", s->batch);
	oob_expect("batch-done");
	step_restart();
	verify(s->data, MSG_SIZE, TAG_WRITE, "slot 0 after the batch");
	for (uint32_t i = 0; i < s->batch; i++) {
		snprintf(what, sizeof(what), "RDMA WRITE %u of the batch", i + 1);
		verify(s->data + (size_t)(1 + i) * MSG_SIZE, MSG_SIZE, (int)(TAG_BATCH + i), what);
	}
	oob_send("batch-verified");
	step_end("verified");
}

static void server_step9_read(struct side *s)
{
	(void)s;
	step_begin(9, "RDMA READ by the client (nothing to do here)");
	oob_expect("read-verified");
	step_end("verified by the client");
}

static void server_step10_recv(struct side *s)
{
	struct ibv_sge sge = {
		.addr = (uint64_t)(uintptr_t)s->msg,
		.length = MSG_SIZE,
		.lkey = s->mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = 10, .sg_list = &sge, .num_sge = 1 }, *bad_wr = NULL;
	struct ibv_wc wc;
	int rc;

	step_begin(10, "post RECV, receive the client's SEND");
	rc = ibv_post_recv(s->qp, &wr, &bad_wr);
	if (rc)
		die("ibv_post_recv: %s", errno_str(rc > 0 ? rc : errno));
	oob_send("recv-posted");
	wc = wait_completion(s->cq, 10, IBV_WC_RECV, "RECV");
	if (wc.byte_len != MSG_SIZE)
		die("the RECV completed with %u bytes, expected %d", wc.byte_len, MSG_SIZE);
	verify(s->msg, MSG_SIZE, TAG_SEND, "SEND");
	step_stop();
	oob_send("send-verified");
	step_end("verified");
}

static void run_server(struct side *s)
{
	step1_open_device(s);
	step2_alloc_pd(s);
	step3_create_cq(s);
	step4_create_qp(s);
	step5_register_memory(s);
	step6_connect(s);
	server_step7_write(s);
	server_step8_batch(s);
	server_step9_read(s);
	server_step10_recv(s);
	oob_expect("done"); /* the client no longer touches our memory */
	step11_clean_up(s);
}

/* ---- the processes ------------------------------------------------------------------ */

/* One side, in this process: its own TCP end, then the eleven steps. */
static int run_side(struct side *s, int listen_fd, const char *host, int port, int accept_ms)
{
	srand48((long)getpid() ^ (long)now().tv_nsec);
	if (s->server) {
		role = "server";
		peer_role = "client";
		oob_fd = tcp_accept(listen_fd, port, accept_ms);
		close(listen_fd);
		printf("server: a client connected to TCP port %d\n", port);
		run_server(s);
	} else {
		role = "client";
		peer_role = "server";
		oob_fd = tcp_connect(host, port, CONNECT_TIMEOUT_MS);
		printf("client: connected to %s:%d over TCP\n", host, port);
		run_client(s);
	}
	close(oob_fd);
	oob_fd = -1;
	printf("%s: all 11 steps passed\n", role);
	return 0;
}

/* The child runs one side and exits; the parent gets its pid, or -1 and errno. */
static pid_t fork_side(struct side *s, int listen_fd, int port)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (!s->server)
			close(listen_fd);
		exit(run_side(s, listen_fd, "127.0.0.1", port, PEER_TIMEOUT_MS));
	}
	return pid;
}

static const char *exit_str(int status, char *buf, size_t len)
{
	if (status == -1)
		snprintf(buf, len, "status unknown");
	else if (WIFEXITED(status))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "status 0x%x", status);
	return buf;
}

/*
 * --self: the server listens before anything forks, so the client's connect cannot
 * come too early; then each side runs in a child, and this process waits for both,
 * but not forever.
 */
static int run_self(struct side *proto, int port)
{
	struct side server = *proto, client = *proto;
	struct timespec deadline = deadline_in(SELF_TIMEOUT_MS);
	pid_t pids[2];
	int status[2] = { -1, -1 };
	int left = 2, listen_fd;
	char b0[48], b1[48];
	sigset_t chld;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL); /* SIGCHLD stays pending for sigtimedwait */

	role = "self";
	listen_fd = tcp_listen("127.0.0.1", port);
	server.server = true;
	client.server = false;
	pids[0] = fork_side(&server, listen_fd, port);
	if (pids[0] < 0)
		die("fork: %s", strerror(errno));
	pids[1] = fork_side(&client, listen_fd, port);
	if (pids[1] < 0) {
		int err = errno;

		kill(pids[0], SIGKILL);
		waitpid(pids[0], NULL, 0);
		die("fork: %s", strerror(err));
	}
	close(listen_fd);

	while (left) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);

		if (pid > 0) {
			for (int i = 0; i < 2; i++)
				if (pid == pids[i]) {
					status[i] = st;
					left--;
				}
			continue;
		}
		if (pid < 0 && errno != EINTR)
			die("waitpid: %s", strerror(errno));
		if (pid == 0) {
			long long ms = ms_until(deadline);
			struct timespec ts = { .tv_sec = ms / 1000,
					       .tv_nsec = (long)(ms % 1000) * 1000000L };

			if (ms == 0 || (sigtimedwait(&chld, NULL, &ts) < 0 && errno == EAGAIN)) {
				fprintf(stderr, "self: error: the sides did not finish within %d s; "
					"killing them\n", SELF_TIMEOUT_MS / 1000);
				for (int i = 0; i < 2; i++)
					if (status[i] == -1)
						kill(pids[i], SIGKILL);
				for (int i = 0; i < 2; i++)
					if (status[i] == -1 && waitpid(pids[i], &status[i], 0) < 0)
						status[i] = -1;
				left = 0;
			}
		}
	}
	fflush(stdout);
	if (status[0] == 0 && status[1] == 0) {
		printf("self: server and client both passed\n");
		return 0;
	}
	printf("self: FAILED: server %s, client %s\n", exit_str(status[0], b0, sizeof(b0)),
	       exit_str(status[1], b1, sizeof(b1)));
	return 1;
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
"usage: %s [OPTIONS]               server: wait for one client\n"
"       %s [OPTIONS] SERVER        client: connect to the server (IPv4 address or name)\n"
"       %s [OPTIONS] --self        both, forked, over loopback; exit 0 iff both pass\n"
"\n"
"The seed article's verbs walk-through between two processes, each step timed:\n"
"  1 open the first device   2 allocate a PD   3 create a CQ   4 create an RC QP\n"
"  5 register memory   6 exchange QPN/PSN/LID/GID/rkey/address over TCP, connect\n"
"  7 RDMA WRITE   8 N WRITEs, only the last signaled   9 RDMA READ back\n"
"  10 SEND into a pre-posted RECV   11 clean up\n"
"Data is checked byte by byte after WRITE, READ and SEND. Uses port %d of the first\n"
"device. The server listens on every IPv4 address. Both sides must be given the\n"
"same -n, and both a GID index or both -g -1.\n"
"\n"
"options:\n"
"  -p PORT    TCP port of the out-of-band exchange (default %d)\n"
"  -g INDEX   GID index to address the peer by (default 0; RoCE needs a GID;\n"
"             ibv_devinfo -v lists them);\n"
"             -1: LID addressing, no GRH (InfiniBand only)\n"
"  -n N       number of WRITEs in step 8 (default %d, at most %d)\n"
"  --self     run the server and a client in two processes (TCP on 127.0.0.1)\n"
"  -h, --help this text\n"
"\n"
"On a machine without an RDMA NIC: softverbs run %s --self\n",
		prog, prog, prog, IB_PORT, DEFAULT_TCP_PORT, DEFAULT_BATCH, MAX_BATCH, prog);
}

static long parse_num(const char *arg, long min, long max, const char *what, const char *prog)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 0);
	if (errno || end == arg || *end || v < min || v > max) {
		fprintf(stderr, "%s: %s must be a number in [%ld, %ld], not \"%s\"\n", prog, what,
			min, max, arg);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "self", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct side s = { .gid_index = 0, .batch = DEFAULT_BATCH };
	const char *prog = argv[0];
	int port = DEFAULT_TCP_PORT;
	bool self = false;
	int opt;

	/* Whole lines, even into a pipe: the two sides of --self share stdout. */
	setvbuf(stdout, NULL, _IOLBF, 0);

	while ((opt = getopt_long(argc, argv, "p:g:n:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'p': port = (int)parse_num(optarg, 1, 65535, "-p PORT", prog); break;
		case 'g': s.gid_index = (int)parse_num(optarg, -1, 255, "-g INDEX", prog); break;
		case 'n': s.batch = (uint32_t)parse_num(optarg, 1, MAX_BATCH, "-n N", prog); break;
		case 'S': self = true; break;
		case 'h': usage(stdout, prog); return 0;
		default: usage(stderr, prog); return 2;
		}
	}
	if (argc - optind > 1 || (self && argc - optind == 1)) {
		usage(stderr, prog);
		return 2;
	}
	if (self)
		return run_self(&s, port);
	if (argc - optind == 1) {
		s.server = false;
		return run_side(&s, -1, argv[optind], port, 0);
	}
	s.server = true;
	role = "server";
	printf("server: waiting for a client on TCP port %d (%d s)\n", port,
	       ACCEPT_TIMEOUT_MS / 1000);
	return run_side(&s, tcp_listen(NULL, port), NULL, port, ACCEPT_TIMEOUT_MS);
}
