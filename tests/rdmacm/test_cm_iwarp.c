/*
 * rdma_cm over iWARP (the path to another host), on loopback with SOFTVERBS_CM_WIRE=iwarp
 * (set by main: this program always takes that path). What kernel rdma_cm on an iWARP
 * device and Linux siw put on the wire and report (RFC 5044 §7.1, RFC 6581):
 * - the request: "MPA ID Req Frame", revision 2, the enhanced flag, C set (clear with
 *   SOFTVERBS_IWARP_CRC=0), never M or R; the private data = the IRD word
 *   (responder_resources), the ORD word (initiator_depth), then the user's bytes raw;
 * - a siw-like reply (C echoed, IRD/ORD words, raw PD) gives ESTABLISHED with the private
 *   data at its own length and the depths from the reply's words; the QP is in RTS; a
 *   reply with R gives REJECTED -ECONNREFUSED with the PD raw; the stream's end after
 *   ESTABLISHED is DISCONNECTED;
 * - a listener takes a siw-like request (revision 2, C clear): CONNECT_REQUEST with the PD
 *   raw, responder_resources = the peer's ORD, initiator_depth = its IRD; rdma_accept's
 *   reply echoes C, carries the accept's depths (ORD capped by the peer's IRD) and its PD
 *   raw, and the passive side is ESTABLISHED; rdma_reject's reply has R and its PD;
 * - private data: 252 bytes each way, 253 is EINVAL; a peer's 255 bytes all arrive;
 * - a connected pair moves data (SEND, RDMA WRITE, RDMA READ) byte for byte over the
 *   iWARP wire (softverbs_query_qp_stats says so); rdma_disconnect gives DISCONNECTED on
 *   both sides and the passive QP is in ERROR once its event is read;
 * - the end of the stream waits for the peer's, 50 ms at most (Linux siw's late Send
 *   completion), after rdma_disconnect and after a connected id is destroyed.
 * The plain TCP peers here are the test's own sockets on loopback.
 */
#include "rdmacm/cm_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <softverbs/softverbs.h>

static const char req_key[] = "MPA ID Req Frame";
static const char rep_key[] = "MPA ID Rep Frame";

/* --- plain TCP on loopback ------------------------------------------------------------- */

static int tcp_listener(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static int tcp_connect(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		fail_msg("connect to the listener on port %u: %s", port, strerror(errno));
	return fd;
}

static int accept_within(int lfd, const char *what)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	int fd;

	if (poll(&p, 1, CT_WAIT_MS) != 1)
		fail_msg("%s: no TCP connection within %d ms", what, CT_WAIT_MS);
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	return fd;
}

/* Reads one MPA frame (header, then PD_Length bytes) within CT_WAIT_MS: its length. */
static size_t read_frame(int fd, unsigned char *buf, size_t cap, const char *what)
{
	size_t got = 0, want = 20;

	while (got < want) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, CT_WAIT_MS) != 1)
			fail_msg("%s: %zu of %zu bytes of an MPA frame within %d ms", what, got, want,
				 CT_WAIT_MS);
		r = recv(fd, buf + got, want - got, 0);
		if (r <= 0)
			fail_msg("%s: the stream ended after %zu bytes of an MPA frame", what, got);
		got += (size_t)r;
		if (got == 20)
			want = 20 + (size_t)(buf[18] << 8 | buf[19]);
		if (want > cap)
			fail_msg("%s: PD_Length %zu is beyond the test's buffer", what, want - 20);
	}
	return got;
}

/* A revision 2 enhanced frame as siw sends it: key, flags (| enhanced), IRD/ORD, @pd. */
static size_t siw_frame(unsigned char *b, const char *key, uint8_t flags, uint16_t ird,
			uint16_t ord, const void *pd, size_t pd_len)
{
	memcpy(b, key, 16);
	b[16] = (unsigned char)(flags | 0x10);
	b[17] = 2;
	b[18] = (unsigned char)((pd_len + 4) >> 8);
	b[19] = (unsigned char)(pd_len + 4);
	b[20] = (unsigned char)(ird >> 8);
	b[21] = (unsigned char)ird;
	b[22] = (unsigned char)(ord >> 8);
	b[23] = (unsigned char)ord;
	memcpy(b + 24, pd, pd_len);
	return 24 + pd_len;
}

static void send_all(int fd, const void *b, size_t len)
{
	assert_int_equal(send(fd, b, len, MSG_NOSIGNAL), (ssize_t)len);
}

static uint16_t word(const unsigned char *b)
{
	return (uint16_t)(b[0] << 8 | b[1]);
}

/* A QP's state. */
static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

/* --- the active side against a plain TCP server ---------------------------------------- */

struct active {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	int lfd, fd;
};

/* An id connected (rdma_connect with @pd, depths 3 and 2) towards the test's TCP listener;
 * the request is read into @req. */
static size_t active_start(struct active *a, const void *pd, uint8_t pd_len, unsigned char *req,
			   size_t cap)
{
	struct rdma_conn_param cp = { .responder_resources = 3, .initiator_depth = 2,
				      .retry_count = 7, .rnr_retry_count = 7,
				      .private_data = pd, .private_data_len = pd_len };
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct sockaddr_storage dst;
	uint16_t port;

	a->lfd = tcp_listener(&port);
	a->ch = rdma_create_event_channel();
	assert_non_null(a->ch);
	assert_int_equal(rdma_create_id(a->ch, &a->id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(a->id, NULL, ct_loopback(&dst, AF_INET, port), 2000), 0);
	ct_expect_event(a->ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	assert_int_equal(rdma_resolve_route(a->id, 2000), 0);
	ct_expect_event(a->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	assert_int_equal(rdma_create_qp(a->id, NULL, &qa), 0);
	assert_int_equal(rdma_connect(a->id, &cp), 0);
	a->fd = accept_within(a->lfd, "rdma_connect");
	return read_frame(a->fd, req, cap, "the request");
}

static void active_end(struct active *a)
{
	if (a->id && a->id->qp)
		rdma_destroy_qp(a->id);
	if (a->id)
		assert_int_equal(rdma_destroy_id(a->id), 0);
	if (a->ch)
		rdma_destroy_event_channel(a->ch);
	close(a->fd);
	close(a->lfd);
}

/* The request is siw's kind; a siw-like reply makes the connection, its end disconnects. */
static void test_request_frame_and_siw_reply(void **state)
{
	static const char pd[] = "hello iwarp";
	unsigned char req[600], rep[64];
	struct rdma_cm_event *ev;
	struct active a = { 0 };
	size_t len;

	(void)state;
	unsetenv("SOFTVERBS_IWARP_CRC");
	len = active_start(&a, pd, sizeof(pd), req, sizeof(req));
	assert_memory_equal(req, req_key, 16);
	assert_int_equal(req[16], 0x50); /* C and enhanced; no M, no R, reserved zero */
	assert_int_equal(req[17], 2);
	assert_int_equal(word(req + 18), 4 + sizeof(pd));
	assert_int_equal(len, 20 + 4 + sizeof(pd));
	assert_int_equal(word(req + 20), 3); /* IRD = responder_resources, no P2P bits */
	assert_int_equal(word(req + 22), 2); /* ORD = initiator_depth */
	assert_memory_equal(req + 24, pd, sizeof(pd)); /* raw: no trailer after it */

	/* The reply: C echoed, IRD 1 (so our ORD becomes 1), ORD 5, 4 bytes of PD. */
	send_all(a.fd, rep, siw_frame(rep, rep_key, 0x40, 1, 5, "siw!", 4));
	ev = ct_wait_event(a.ch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	assert_int_equal(ev->status, 0);
	assert_int_equal(ev->param.conn.private_data_len, 4);
	assert_memory_equal(ev->param.conn.private_data, "siw!", 4);
	assert_int_equal(ev->param.conn.initiator_depth, 1);    /* the peer's IRD */
	assert_int_equal(ev->param.conn.responder_resources, 5); /* the peer's ORD */
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(qp_state(a.id->qp), IBV_QPS_RTS);

	/* The peer goes: DISCONNECTED; reading it moves the QP to ERROR. */
	close(a.fd);
	a.fd = -1;
	ct_expect_event(a.ch, RDMA_CM_EVENT_DISCONNECTED, 0);
	assert_int_equal(qp_state(a.id->qp), IBV_QPS_ERR);
	active_end(&a);
}

/* SOFTVERBS_IWARP_CRC=0: the request does not ask for CRC. */
static void test_request_without_crc(void **state)
{
	unsigned char req[600];
	struct active a = { 0 };

	(void)state;
	setenv("SOFTVERBS_IWARP_CRC", "0", 1);
	active_start(&a, NULL, 0, req, sizeof(req));
	unsetenv("SOFTVERBS_IWARP_CRC");
	assert_int_equal(req[16], 0x10); /* enhanced only */
	assert_int_equal(word(req + 18), 4);
	active_end(&a);
}

/* A reply with R: REJECTED, -ECONNREFUSED, the private data raw; the QP is in ERROR. */
static void test_reply_with_reject_bit(void **state)
{
	unsigned char req[600], rep[64];
	struct rdma_cm_event *ev;
	struct active a = { 0 };

	(void)state;
	active_start(&a, "x", 1, req, sizeof(req));
	send_all(a.fd, rep, siw_frame(rep, rep_key, 0x40 | 0x20, 0, 0, "nope!", 5));
	ev = ct_wait_event(a.ch, RDMA_CM_EVENT_REJECTED, CT_WAIT_MS);
	assert_int_equal(ev->status, -ECONNREFUSED);
	assert_int_equal(ev->param.conn.private_data_len, 5);
	assert_memory_equal(ev->param.conn.private_data, "nope!", 5);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(qp_state(a.id->qp), IBV_QPS_ERR);
	active_end(&a);
}

/* --- the passive side against a plain TCP client --------------------------------------- */

struct passive {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *l, *id;
	int fd;
};

/* A listener, and a siw-like request (C as @crc, IRD 5, ORD 6, PD "hello") to it:
 * checks the CONNECT_REQUEST and gives its id a QP. */
static void passive_start(struct passive *p, bool crc)
{
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	unsigned char req[64];

	p->ch = rdma_create_event_channel();
	assert_non_null(p->ch);
	assert_int_equal(rdma_create_id(p->ch, &p->l, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(p->l, ct_loopback(&ss, AF_INET, 0)), 0);
	assert_int_equal(rdma_listen(p->l, 4), 0);
	p->fd = tcp_connect(ntohs(rdma_get_src_port(p->l)));
	send_all(p->fd, req, siw_frame(req, req_key, crc ? 0x40 : 0, 5, 6, "hello", 5));
	ev = ct_wait_event(p->ch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->id = ev->id;
	assert_int_equal(ev->param.conn.private_data_len, 5);
	assert_memory_equal(ev->param.conn.private_data, "hello", 5);
	assert_int_equal(ev->param.conn.responder_resources, 6); /* the peer's ORD */
	assert_int_equal(ev->param.conn.initiator_depth, 5);     /* the peer's IRD */
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_create_qp(p->id, NULL, &qa), 0);
}

static void passive_end(struct passive *p)
{
	if (p->id && p->id->qp)
		rdma_destroy_qp(p->id);
	if (p->id)
		assert_int_equal(rdma_destroy_id(p->id), 0);
	assert_int_equal(rdma_destroy_id(p->l), 0);
	rdma_destroy_event_channel(p->ch);
	close(p->fd);
}

/* rdma_accept's reply: C echoed (both ways), the accept's depths, its PD raw. */
static void test_accept_reply_frame(void **state)
{
	(void)state;
	for (int crc = 0; crc <= 1; crc++) {
		struct rdma_conn_param cp = { .responder_resources = 4, .initiator_depth = 7,
					      .private_data = "ok", .private_data_len = 2 };
		struct passive p = { 0 };
		unsigned char rep[600];
		size_t len;

		passive_start(&p, crc);
		assert_int_equal(rdma_accept(p.id, &cp), 0);
		ct_expect_event(p.ch, RDMA_CM_EVENT_ESTABLISHED, 0);
		assert_int_equal(qp_state(p.id->qp), IBV_QPS_RTS);
		len = read_frame(p.fd, rep, sizeof(rep), "rdma_accept's reply");
		assert_memory_equal(rep, rep_key, 16);
		assert_int_equal(rep[16], crc ? 0x50 : 0x10); /* C echoed, enhanced */
		assert_int_equal(rep[17], 2);
		assert_int_equal(len, 20 + 4 + 2);
		assert_int_equal(word(rep + 20), 4); /* IRD: responder_resources */
		assert_int_equal(word(rep + 22), 5); /* ORD: 7, capped by the peer's IRD 5 */
		assert_memory_equal(rep + 24, "ok", 2);
		/* The peer's end: DISCONNECTED. */
		close(p.fd);
		p.fd = -1;
		ct_expect_event(p.ch, RDMA_CM_EVENT_DISCONNECTED, 0);
		passive_end(&p);
	}
}

/* Milliseconds from @t0 (CLOCK_MONOTONIC) until @fd's stream ends (EOF or reset), reading
 * and dropping what comes before; -1 when it has not ended within CT_WAIT_MS. */
static long ms_until_end(int fd, const struct timespec *t0)
{
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		struct timespec now;
		unsigned char buf[256];
		long ms;

		clock_gettime(CLOCK_MONOTONIC, &now);
		ms = (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
		if (ms > CT_WAIT_MS || poll(&pf, 1, (int)(CT_WAIT_MS - ms)) <= 0)
			return -1;
		if (read(fd, buf, sizeof(buf)) <= 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
		}
	}
}

/*
 * The end of an iWARP stream waits for the peer, 50 ms at most: Linux siw fails a Send
 * whose bytes have left but that it has not completed yet when the end arrives
 * (IB_WC_LOC_QP_OP_ERR), and a server that answers and disconnects at once hit that
 * (perftest's siw client: "Failed to close connection", 4 runs of 10). After
 * rdma_disconnect, and after rdma_destroy_qp and rdma_destroy_id of a connected id, the
 * peer sees the end no sooner than 40 ms later, and sees it.
 */
static void test_end_waits_for_the_peer(void **state)
{
	(void)state;
	for (int how = 0; how < 2; how++) {
		struct passive p = { 0 };
		unsigned char rep[600];
		struct timespec t0;
		long ms;

		passive_start(&p, false);
		assert_int_equal(rdma_accept(p.id, NULL), 0);
		ct_expect_event(p.ch, RDMA_CM_EVENT_ESTABLISHED, 0);
		(void)read_frame(p.fd, rep, sizeof(rep), "rdma_accept's reply");
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (how == 0) {
			assert_int_equal(rdma_disconnect(p.id), 0);
			ct_expect_event(p.ch, RDMA_CM_EVENT_DISCONNECTED, 0);
		} else {
			rdma_destroy_qp(p.id);
			assert_int_equal(rdma_destroy_id(p.id), 0);
			p.id = NULL;
		}
		ms = ms_until_end(p.fd, &t0);
		if (ms < 0)
			fail_msg("%s: the stream never ended", how ? "rdma_destroy_id" : "rdma_disconnect");
		if (ms < 40)
			fail_msg("%s: the stream ended after %ld ms, not waiting for the peer",
				 how ? "rdma_destroy_id" : "rdma_disconnect", ms);
		passive_end(&p);
	}
}

/* rdma_reject's reply: R, C echoed, the user's PD raw after the enhanced words; then the
 * connection ends. */
static void test_reject_reply_frame(void **state)
{
	struct passive p = { 0 };
	unsigned char rep[600], c;
	struct pollfd pf;
	size_t len;

	(void)state;
	passive_start(&p, true);
	assert_int_equal(rdma_reject(p.id, "go away", 7), 0);
	len = read_frame(p.fd, rep, sizeof(rep), "rdma_reject's reply");
	assert_memory_equal(rep, rep_key, 16);
	assert_int_equal(rep[16], 0x40 | 0x20 | 0x10);
	assert_int_equal(len, 20 + 4 + 7);
	assert_memory_equal(rep + 24, "go away", 7);
	pf = (struct pollfd){ .fd = p.fd, .events = POLLIN };
	assert_int_equal(poll(&pf, 1, CT_WAIT_MS), 1);
	assert_int_equal(recv(p.fd, &c, 1, 0), 0); /* the end of the stream */
	passive_end(&p);
}

/* A peer's request with 255 bytes of private data (more than we send, what an event
 * can report) is a CONNECT_REQUEST with all of them. */
static void test_listener_takes_255(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	unsigned char pd[255], req[300];
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	int fd;

	(void)state;
	for (size_t i = 0; i < sizeof(pd); i++)
		pd[i] = (unsigned char)(i ^ 0xa5);
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(l, ct_loopback(&ss, AF_INET, 0)), 0);
	assert_int_equal(rdma_listen(l, 4), 0);
	fd = tcp_connect(ntohs(rdma_get_src_port(l)));
	send_all(fd, req, siw_frame(req, req_key, 0x40, 1, 1, pd, sizeof(pd)));
	ev = ct_wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	assert_int_equal(ev->param.conn.private_data_len, 255);
	assert_memory_equal(ev->param.conn.private_data, pd, 255);
	id = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_destroy_id(id), 0); /* rejects it */
	assert_int_equal(rdma_destroy_id(l), 0);
	rdma_destroy_event_channel(ch);
	close(fd);
}

/* --- both sides softverbs ---------------------------------------------------------------- */

/* Private data: 252 bytes each way arrive whole at their own length; 253 is EINVAL. */
static void test_private_data_252(void **state)
{
	struct ct_pair pr;
	unsigned char big[253];
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7,
				      .private_data = big, .private_data_len = 253 };
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct rdma_cm_event *ev;

	(void)state;
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 7 + 1);
	ct_pair_listen(&pr, AF_INET, RDMA_PS_TCP);
	ct_client_connect(&pr, NULL); /* a connection to reject: its request is the test's */
	ev = ct_wait_event(pr.lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	pr.server = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	errno = 0;
	assert_int_equal(rdma_reject(pr.server, big, 253), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(rdma_reject(pr.server, big, 252), 0);
	ev = ct_wait_event(pr.cch, RDMA_CM_EVENT_REJECTED, CT_WAIT_MS);
	assert_int_equal(ev->status, -ECONNREFUSED);
	assert_int_equal(ev->param.conn.private_data_len, 252);
	assert_memory_equal(ev->param.conn.private_data, big, 252);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_destroy_id(pr.server), 0);
	pr.server = NULL;
	rdma_destroy_qp(pr.client);
	assert_int_equal(rdma_destroy_id(pr.client), 0);
	pr.client = NULL;

	/* connect and accept with 252; 253 refused by both. */
	cp.private_data_len = 253;
	assert_int_equal(rdma_create_id(pr.cch, &pr.client, &pr, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(pr.client, NULL, (struct sockaddr *)&pr.addr, 2000), 0);
	ct_expect_event(pr.cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	assert_int_equal(rdma_resolve_route(pr.client, 2000), 0);
	ct_expect_event(pr.cch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	assert_int_equal(rdma_create_qp(pr.client, NULL, &qa), 0);
	errno = 0;
	assert_int_equal(rdma_connect(pr.client, &cp), -1);
	assert_int_equal(errno, EINVAL);
	cp.private_data_len = 252;
	assert_int_equal(rdma_connect(pr.client, &cp), 0);
	ev = ct_wait_event(pr.lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	pr.server = ev->id;
	assert_int_equal(ev->param.conn.private_data_len, 252);
	assert_memory_equal(ev->param.conn.private_data, big, 252);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	qa = ct_qp_attr(IBV_QPT_RC);
	assert_int_equal(rdma_create_qp(pr.server, NULL, &qa), 0);
	cp.private_data_len = 253;
	errno = 0;
	assert_int_equal(rdma_accept(pr.server, &cp), -1);
	assert_int_equal(errno, EINVAL);
	ev = ct_wait_event(pr.cch, RDMA_CM_EVENT_REJECTED, CT_WAIT_MS);
	assert_int_equal(ev->status, -ECONNREFUSED); /* the failed accept rejected it */
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_pair_close(&pr);
}

/* Data both ways over the iWARP wire, then rdma_disconnect. */
static void test_data_and_disconnect(void **state)
{
	enum { N = 4096 };
	struct ct_pair pr;
	struct softverbs_qp_stats st;
	unsigned char *cbuf = calloc(1, 3 * N), *sbuf = calloc(1, 3 * N);
	struct ibv_mr *cmr, *smr;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rwr, *rbad;
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

	(void)state;
	assert_non_null(cbuf);
	assert_non_null(sbuf);
	ct_pair_open(&pr, AF_INET);
	cmr = ibv_reg_mr(pr.client->pd, cbuf, 3 * N, acc);
	smr = ibv_reg_mr(pr.server->pd, sbuf, 3 * N, acc);
	assert_non_null(cmr);
	assert_non_null(smr);
	for (int i = 0; i < N; i++) {
		cbuf[i] = (unsigned char)(i * 13 + 5);       /* the SEND */
		cbuf[N + i] = (unsigned char)(i * 31 + 7);   /* the WRITE */
		sbuf[2 * N + i] = (unsigned char)(i * 3 + 1); /* what the READ fetches */
	}

	/* SEND client -> server. */
	sge = (struct ibv_sge){ .addr = (uintptr_t)sbuf, .length = N, .lkey = smr->lkey };
	rwr = (struct ibv_recv_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	assert_int_equal(ibv_post_recv(pr.server->qp, &rwr, &rbad), 0);
	sge = (struct ibv_sge){ .addr = (uintptr_t)cbuf, .length = N, .lkey = cmr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	assert_int_equal(ibv_post_send(pr.client->qp, &wr, &bad), 0);
	ct_expect_wc(pr.client->send_cq, 2, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	ct_expect_wc(pr.server->recv_cq, 1, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	assert_memory_equal(sbuf, cbuf, N);

	/* RDMA WRITE client -> server, then RDMA READ server -> client's buffer. */
	sge = (struct ibv_sge){ .addr = (uintptr_t)cbuf + N, .length = N, .lkey = cmr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 3, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)sbuf + N;
	wr.wr.rdma.rkey = smr->rkey;
	assert_int_equal(ibv_post_send(pr.client->qp, &wr, &bad), 0);
	ct_expect_wc(pr.client->send_cq, 3, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	sge = (struct ibv_sge){ .addr = (uintptr_t)cbuf + 2 * N, .length = N, .lkey = cmr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 4, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)sbuf + 2 * N;
	wr.wr.rdma.rkey = smr->rkey;
	assert_int_equal(ibv_post_send(pr.client->qp, &wr, &bad), 0);
	ct_expect_wc(pr.client->send_cq, 4, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	assert_memory_equal(sbuf + N, cbuf + N, N);
	assert_memory_equal(cbuf + 2 * N, sbuf + 2 * N, N);

	assert_int_equal(softverbs_query_qp_stats(pr.client->qp, &st, sizeof(st)), 0);
	assert_int_equal(st.wire, SOFTVERBS_WIRE_IWARP);
	assert_int_equal(softverbs_query_qp_stats(pr.server->qp, &st, sizeof(st)), 0);
	assert_int_equal(st.wire, SOFTVERBS_WIRE_IWARP);

	/* rdma_disconnect: DISCONNECTED on both sides; the server's QP in ERROR once read. */
	assert_int_equal(rdma_disconnect(pr.client), 0);
	ct_expect_event(pr.cch, RDMA_CM_EVENT_DISCONNECTED, 0);
	assert_int_equal(qp_state(pr.client->qp), IBV_QPS_ERR);
	ct_expect_event(pr.lch, RDMA_CM_EVENT_DISCONNECTED, 0);
	assert_int_equal(qp_state(pr.server->qp), IBV_QPS_ERR);
	assert_int_equal(rdma_disconnect(pr.server), 0); /* after DISCONNECTED: 0 */

	assert_int_equal(ibv_dereg_mr(cmr), 0);
	assert_int_equal(ibv_dereg_mr(smr), 0);
	ct_pair_close(&pr);
	free(cbuf);
	free(sbuf);
}

/* Nobody listens: REJECTED -ECONNREFUSED (after the library's quarter second of retries). */
static void test_no_listener(void **state)
{
	struct ct_pair pr;

	(void)state;
	ct_pair_channels(&pr, AF_INET, RDMA_PS_TCP);
	ct_loopback(&pr.addr, AF_INET, ct_free_port(AF_INET));
	ct_client_connect(&pr, NULL);
	ct_expect_event(pr.cch, RDMA_CM_EVENT_REJECTED, -ECONNREFUSED);
	ct_pair_close(&pr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_frame_and_siw_reply),
		cmocka_unit_test(test_request_without_crc),
		cmocka_unit_test(test_reply_with_reject_bit),
		cmocka_unit_test(test_accept_reply_frame),
		cmocka_unit_test(test_reject_reply_frame),
		cmocka_unit_test(test_listener_takes_255),
		cmocka_unit_test(test_private_data_252),
		cmocka_unit_test(test_data_and_disconnect),
		cmocka_unit_test(test_end_waits_for_the_peer),
		cmocka_unit_test(test_no_listener),
	};

	/* Every connection here takes the path to another host. */
	setenv("SOFTVERBS_CM_WIRE", "iwarp", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
