/*
 * librdmacm under bad input: refused and unreachable peers, peers that die in the middle
 * of the handshake or after it, arguments out of range or in the wrong state, bytes that
 * are not a connection request, and a listener that serves 1,000 connections in a row.
 *
 * Reference: rdma-core 44 on a RoCE port (librdmacm/cma.c, kernel cma.c / cm.c).
 * - Nobody listens: RC gets RDMA_CM_EVENT_REJECTED status 8 (IB_CM_REJ_INVALID_SERVICE_ID),
 *   UD RDMA_CM_EVENT_UNREACHABLE status 1 (IB_SIDR_UNSUPPORTED); a synchronous id's
 *   rdma_connect fails with ECONNREFUSED. librdmacm moves the QP of a rejected id to ERR.
 * - A UD id (RDMA_PS_UDP) towards an address that is not on this host:
 *   RDMA_CM_EVENT_ADDR_ERROR, status -EOPNOTSUPP (iWARP has no datagrams; nothing is sent
 *   off the host); the id can resolve again. (RC ids resolve such addresses: iWARP.)
 * - Private data longer than the IB CM message holds (connect 56 RC / 180 UD, accept 196 /
 *   136, reject 148 / 136) or a NULL pointer with a length: -1 / EINVAL. A failed accept
 *   rejects the request (REJ 28, SIDR REJECT 2). NULL ids, events and channels: -1 / EINVAL,
 *   void calls return. Calls in the wrong state: EINVAL.
 * - A peer that dies: the survivor's handshake ends in RDMA_CM_EVENT_CONNECT_ERROR (or, if it
 *   had already completed, ESTABLISHED then DISCONNECTED); a connection that was up ends
 *   in DISCONNECTED, and after rdma_disconnect the QP's posted receives complete with
 *   IBV_WC_WR_FLUSH_ERR.
 * - The listener (softverbs: a TCP socket expecting an MPA request, RFC 5044 §7.1) drops
 *   connections that send anything else, connections silent for 5 s, and keeps at most 256
 *   silent ones; it serves real connections after each. A genuine request replayed by a
 *   plain TCP peer that then sends a wrong RTU, or none, ends in CONNECT_ERROR.
 * - The active side against a TCP server that is not softverbs: an MPA reject is REJECTED
 *   28, anything else CONNECT_ERROR / UNREACHABLE at once; the QP is in ERR.
 * - rdma_get_cm_event on a channel destroyed just before (rping's CM thread at exit): -1 /
 *   EBADF, no read of freed memory.
 * - Destroying an id drops its unread events (nothing left to poll); destroying a listener
 *   rejects its unread requests, closes its waiting connections and leaves its established
 *   ones alone. 32 connections at once, 1,000 in a row: no fd or memory growth.
 *
 * Two-process tests run this program afresh as the other side (fork + exec of
 * /proc/self/exe with CHILD_FLAG): no library state is shared. The child dies with us
 * (PR_SET_PDEATHSIG) and the teardown kills and reaps it if a test stopped early.
 */
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <infiniband/verbs.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_FLAG "--cm-robust-child"
#define WAIT_MS 5000        /* every wait for an event, a message or a completion */
#define PROMPT_MS 4000      /* a listener drops a connection that sent garbage this soon
			     * (at once: 4 s is what a loaded machine keeps, and still
			     * before the 5 s a silent one is given) */
#define SILENT_MIN_MS 4000  /* ... and one that sent nothing (or too little) not before */
#define SILENT_MAX_MS 10000 /* ... nor after (the library's limit is 5 s) */
#define MAX_PENDING 256     /* silent connections a listener keeps */
#define FLOOD 300           /* silent connections made */
#define CYCLES 1000
#define WARMUP 20
#define NRECV 4             /* receives posted before a peer dies */
#define BURST 32            /* connections made at once */

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RB_HAS_ASAN 1
#endif
#endif
#ifndef RB_HAS_ASAN
#define RB_HAS_ASAN 0
#endif
#if defined(__SANITIZE_ADDRESS__) || RB_HAS_ASAN
#define RB_ASAN 1
#else
#define RB_ASAN 0
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#endif
#if RB_ASAN || defined(__SANITIZE_THREAD__)
#define RB_SANITIZER_MALLOC 1
/* The sanitizer allocator's count of live bytes (the runtime exports it; gcc installs
 * no <sanitizer/allocator_interface.h> to declare it). */
size_t __sanitizer_get_current_allocated_bytes(void);
#else
#define RB_SANITIZER_MALLOC 0
#endif

/* Bytes the application has malloc'd and not freed: ASan's and TSan's allocators count
 * them themselves (glibc's mallinfo2 reads 0 there); elsewhere glibc's count. */
static size_t malloc_in_use(void)
{
#if RB_SANITIZER_MALLOC
	return __sanitizer_get_current_allocated_bytes();
#else
	return mallinfo2().uordblks;
#endif
}

/* ---- small things ------------------------------------------------------------------- */

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -1 with errno @err, or the test fails naming the call and what it did. */
#define EXPECT_ERRNO(call, err)                                                               \
	do {                                                                                  \
		int rb_ret_, rb_err_;                                                         \
		errno = 0;                                                                    \
		rb_ret_ = (call);                                                             \
		rb_err_ = errno;                                                              \
		if (rb_ret_ != -1 || rb_err_ != (err))                                        \
			fail_msg("%s: returned %d, errno %d (%s); expected -1 with %s", #call, \
				 rb_ret_, rb_err_, strerror(rb_err_), #err);                   \
	} while (0)

#define EXPECT_OK(call)                                                                       \
	do {                                                                                  \
		if ((call) != 0)                                                              \
			fail_msg("%s failed: errno %d (%s)", #call, errno, strerror(errno));   \
	} while (0)

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static void fill(unsigned char *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed + i * 7 + 1);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own */
}

static long vm_rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* ---- the fixture: what a test holds, released by the teardown however it ended ------- */

#define MAX_KIDS 4
#define MAX_FDS (FLOOD + 16)

struct kid {
	pid_t pid;
	int ctl; /* our end of the control socketpair */
};

struct fx {
	struct rdma_event_channel *lch, *cch; /* listener side, connecting side */
	struct rdma_cm_id *listen, *client, *server;
	uint16_t port; /* the listener's */
	struct kid kids[MAX_KIDS];
	int fds[MAX_FDS]; /* raw TCP clients */
	struct rdma_cm_id *many[2 * BURST]; /* test_burst_of_connects */
};

static struct fx *fx;

static int setup(void **state)
{
	fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	for (int i = 0; i < MAX_KIDS; i++)
		fx->kids[i].ctl = -1;
	for (int i = 0; i < MAX_FDS; i++)
		fx->fds[i] = -1;
	*state = fx;
	return 0;
}

static void destroy_id(struct rdma_cm_id **id)
{
	if (!*id)
		return;
	if ((*id)->qp)
		rdma_destroy_qp(*id);
	rdma_destroy_id(*id);
	*id = NULL;
}

static void kid_kill(struct kid *k)
{
	if (k->pid > 0) {
		kill(k->pid, SIGKILL);
		while (waitpid(k->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	k->pid = 0;
	if (k->ctl >= 0)
		close(k->ctl);
	k->ctl = -1;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_KIDS; i++)
		kid_kill(&fx->kids[i]);
	for (int i = 0; i < MAX_FDS; i++)
		if (fx->fds[i] >= 0)
			close(fx->fds[i]);
	for (size_t i = 0; i < ARRAY_LEN(fx->many); i++)
		destroy_id(&fx->many[i]);
	destroy_id(&fx->client);
	destroy_id(&fx->server);
	destroy_id(&fx->listen);
	if (fx->cch)
		rdma_destroy_event_channel(fx->cch);
	if (fx->lch)
		rdma_destroy_event_channel(fx->lch);
	free(fx);
	fx = NULL;
	return 0;
}

/* ---- events ------------------------------------------------------------------------- */

static struct rdma_event_channel *channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (!ch)
		fail_msg("rdma_create_event_channel: %s", strerror(errno));
	/* Waits poll the fd; reads never block past their bound. */
	assert_int_equal(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
	return ch;
}

/* The next event on @ch within @ms, or NULL. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms)
{
	long long end = now_ms() + ms;
	struct rdma_cm_event *ev;

	for (;;) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		long long left = end - now_ms();
		int n;

		n = poll(&p, 1, left > 0 ? (int)left : 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0) {
			if (!rdma_get_cm_event(ch, &ev))
				return ev;
			if (errno != EAGAIN)
				fail_msg("rdma_get_cm_event: %s", strerror(errno));
		}
		if (left <= 0)
			return NULL;
	}
}

/* True if an event is queued on @ch now (nothing is read). */
static bool event_pending(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, 0) > 0;
}

/* The next event on @ch, which must be @type with @status (and for @id, if not NULL). The
 * caller acks it. */
static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type type, int status,
					  const struct rdma_cm_id *id, const char *what)
{
	struct rdma_cm_event *ev = next_event(ch, WAIT_MS);

	if (!ev)
		fail_msg("%s: no event within %d ms (expected %s, status %d)", what, WAIT_MS,
			 rdma_event_str(type), status);
	if (ev->event != type || ev->status != status || (id && ev->id != id)) {
		enum rdma_cm_event_type got = ev->event;
		int got_status = ev->status;
		bool other = id && ev->id != id;

		rdma_ack_cm_event(ev); /* the teardown can free its id */
		if (other)
			fail_msg("%s: %s status %d for another id", what, rdma_event_str(got),
				 got_status);
		fail_msg("%s: got %s status %d, expected %s status %d", what, rdma_event_str(got),
			 got_status, rdma_event_str(type), status);
	}
	return ev;
}

static void expect_ack(struct rdma_event_channel *ch, enum rdma_cm_event_type type, int status,
		       const struct rdma_cm_id *id, const char *what)
{
	assert_int_equal(rdma_ack_cm_event(expect_event(ch, type, status, id, what)), 0);
}

/* tests/rdmacm/cm_test_util.c: SOFTVERBS_CM_WIRE=iwarp (the *_iwarp ctest entries). */
bool ct_cm_iwarp(void);

/* A REJECTED status: the IB CM reason on one host's shm handshake, -ECONNREFUSED on
 * iWARP (kernel rdma_cm's for an MPA reject or a refused TCP connect). */
static int rej(int ib_reason)
{
	return ct_cm_iwarp() ? -ECONNREFUSED : ib_reason;
}

static void skip_on_iwarp(const char *why)
{
	if (ct_cm_iwarp()) {
		print_message("    IB CM / shm handshake behaviour; on iWARP %s: skipped\n", why);
		skip();
	}
}

static void expect_pd(const struct rdma_cm_event *ev, bool ud, const unsigned char *want,
		      uint8_t sent, uint8_t seen, const char *what)
{
	const unsigned char *pd = ud ? ev->param.ud.private_data : ev->param.conn.private_data;
	uint8_t len = ud ? ev->param.ud.private_data_len : ev->param.conn.private_data_len;

	if (!ud && ct_cm_iwarp())
		seen = sent; /* iWARP: the private data raw, its own length */
	if (len != seen)
		fail_msg("%s: %s carries %u bytes of private data, expected %u", what,
			 rdma_event_str(ev->event), len, seen);
	if (sent && !pd)
		fail_msg("%s: %s has no private data pointer", what, rdma_event_str(ev->event));
	if (sent && memcmp(pd, want, sent))
		fail_msg("%s: %s: the private data is not what the peer sent", what,
			 rdma_event_str(ev->event));
}

/* ---- ids and connections in this process -------------------------------------------- */

static void create_qp(struct rdma_cm_id *id, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_type = type;
	a.cap.max_send_wr = 8;
	a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = 64;
	if (rdma_create_qp(id, NULL, &a))
		fail_msg("rdma_create_qp: %s", strerror(errno));
}

/* fx->lch and fx->listen: bound to 127.0.0.1, port picked (fx->port). */
static void listen_on(enum rdma_port_space ps, int backlog)
{
	struct sockaddr_in a = loopback(0);

	fx->lch = channel();
	EXPECT_OK(rdma_create_id(fx->lch, &fx->listen, NULL, ps));
	EXPECT_OK(rdma_bind_addr(fx->listen, (struct sockaddr *)&a));
	EXPECT_OK(rdma_listen(fx->listen, backlog));
	fx->port = ntohs(rdma_get_src_port(fx->listen));
	assert_true(fx->port != 0);
}

/* An id on @ch with address and route resolved towards 127.0.0.1:@port. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, enum rdma_port_space ps,
				   uint16_t port)
{
	struct sockaddr_in a = loopback(port);
	struct rdma_cm_id *id;

	EXPECT_OK(rdma_create_id(ch, &id, NULL, ps));
	EXPECT_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, id, "rdma_resolve_addr 127.0.0.1");
	EXPECT_OK(rdma_resolve_route(id, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, id, "rdma_resolve_route");
	return id;
}

/* fx->client, resolved towards the listener, with a QP; connects with @pd. */
static void client_connect(enum rdma_port_space ps, const void *pd, uint8_t len)
{
	struct rdma_conn_param p;

	memset(&p, 0, sizeof(p));
	p.private_data = pd;
	p.private_data_len = len;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	if (!fx->cch)
		fx->cch = channel();
	fx->client = resolved(fx->cch, ps, fx->port);
	create_qp(fx->client, ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
	EXPECT_OK(rdma_connect(fx->client, &p));
}

/* The connect request on the listener becomes fx->server (its private data checked
 * against @pd / @len if @len). */
static void take_request(const void *pd, uint8_t len, const char *what)
{
	struct rdma_cm_event *ev = expect_event(fx->lch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, NULL,
						what);
	bool ud = fx->listen->qp_type == IBV_QPT_UD;

	if (ev->listen_id != fx->listen)
		fail_msg("%s: CONNECT_REQUEST with listen_id %p, expected %p", what,
			 (void *)ev->listen_id, (void *)fx->listen);
	if (len)
		expect_pd(ev, ud, pd, len, ud ? 180 : 56, what);
	fx->server = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
}

/* A whole RC connection over the fixture's listener: ESTABLISHED on both sides. */
static void connect_rc(const char *what)
{
	static const unsigned char tag[] = "robust";

	client_connect(RDMA_PS_TCP, tag, sizeof(tag));
	take_request(tag, sizeof(tag), what);
	create_qp(fx->server, IBV_QPT_RC);
	EXPECT_OK(rdma_accept(fx->server, NULL));
	expect_ack(fx->cch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->client, what);
	expect_ack(fx->lch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->server, what);
}

/* @first disconnects, each side gets one DISCONNECTED, the other's rdma_disconnect is
 * harmless; both ids are destroyed. */
static void disconnect_rc(bool client_first, const char *what)
{
	struct rdma_cm_id *a = client_first ? fx->client : fx->server;
	struct rdma_cm_id *b = client_first ? fx->server : fx->client;
	struct rdma_event_channel *ach = client_first ? fx->cch : fx->lch;
	struct rdma_event_channel *bch = client_first ? fx->lch : fx->cch;

	EXPECT_OK(rdma_disconnect(a));
	expect_ack(ach, RDMA_CM_EVENT_DISCONNECTED, 0, a, what);
	expect_ack(bch, RDMA_CM_EVENT_DISCONNECTED, 0, b, what);
	EXPECT_OK(rdma_disconnect(b));
	destroy_id(&fx->client);
	destroy_id(&fx->server);
}

/* The listener still serves: a real connection, up on both sides, and down again. */
static void still_serving(const char *after)
{
	char what[160];

	snprintf(what, sizeof(what), "a real connection after %s", after);
	if (event_pending(fx->lch)) {
		struct rdma_cm_event *ev = next_event(fx->lch, 0);

		fail_msg("%s: the listener has an event it should not have: %s status %d", after,
			 ev ? rdma_event_str(ev->event) : "(none)", ev ? ev->status : 0);
	}
	connect_rc(what);
	disconnect_rc(true, what);
}

/* ---- raw TCP clients ----------------------------------------------------------------- */

static int keep_fd(int fd)
{
	for (int i = 0; i < MAX_FDS; i++) {
		if (fx->fds[i] < 0) {
			fx->fds[i] = fd;
			return fd;
		}
	}
	fail_msg("too many raw sockets");
	return -1;
}

static void close_fd(int fd, bool reset)
{
	for (int i = 0; i < MAX_FDS; i++)
		if (fx->fds[i] == fd)
			fx->fds[i] = -1;
	if (reset) {
		/* An abortive close: RST rather than FIN. */
		struct linger l = { .l_onoff = 1, .l_linger = 0 };

		setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	}
	close(fd);
}

/* A TCP connection to 127.0.0.1:@port, connected. */
static int tcp_to(uint16_t port)
{
	struct sockaddr_in a = loopback(port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	keep_fd(fd);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		fail_msg("TCP connect to 127.0.0.1:%u: %s", port, strerror(errno));
	return fd;
}

static void send_bytes(int fd, const void *buf, size_t len, const char *what)
{
	ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

	if (n != (ssize_t)len)
		fail_msg("%s: sending %zu bytes: %zd (%s)", what, len, n, strerror(errno));
}

/*
 * Waits up to @ms for the listener to close @fd's connection: recv() sees the end of the
 * stream or ECONNRESET. Whatever came before is stored in @got (up to @cap bytes, *got_len).
 * Returns the milliseconds it took.
 */
static long long expect_closed(int fd, int ms, unsigned char *got, size_t cap, size_t *got_len,
			       const char *what)
{
	long long start = now_ms(), end = start + ms;
	unsigned char buf[4096];
	size_t have = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = end - now_ms();
		ssize_t n;

		if (poll(&p, 1, left > 0 ? (int)left : 0) == 0)
			fail_msg("%s: the listener kept the connection open for %d ms", what, ms);
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			break;
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			fail_msg("%s: recv: %s", what, strerror(errno));
		if (got && have < cap) {
			size_t k = (size_t)n < cap - have ? (size_t)n : cap - have;

			memcpy(got + have, buf, k);
			have += k;
		}
	}
	if (got_len)
		*got_len = have;
	return now_ms() - start;
}

/* A port on 127.0.0.1 where nobody listens: a TCP socket bound to it, not listening (the
 * port stays taken, so no one else can start listening there during the test). */
static uint16_t dead_port(void)
{
	struct sockaddr_in a = loopback(0);
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	keep_fd(fd);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	return ntohs(a.sin_port);
}

/* An MPA frame header (RFC 5044 §7.1) with @key, then @pd_len claimed. */
static size_t mpa_header(unsigned char *buf, const char *key, uint8_t flags, uint8_t rev,
			 uint16_t pd_len)
{
	memcpy(buf, key, 16);
	buf[16] = flags;
	buf[17] = rev;
	buf[18] = (unsigned char)(pd_len >> 8);
	buf[19] = (unsigned char)pd_len;
	return 20;
}

static const char mpa_req_key[] = "MPA ID Req Frame";
static const char mpa_rep_key[] = "MPA ID Rep Frame";

/* ---- the other process --------------------------------------------------------------- */

/*
 * The child runs one side with rdma_cm and tells us over a SOCK_SEQPACKET socket what it
 * did: 'P' <port> (passive: listening), 'C' (active: rdma_connect returned), 'R' (got a
 * CONNECT_REQUEST), 'A' <ret> (rdma_accept returned), 'E' (ESTABLISHED), 'X' <event>
 * (any other event). We send 'A' to make a passive child accept.
 */
struct msg {
	char what;
	int32_t val;
};

static void child_say(int ctl, char what, int32_t val)
{
	struct msg m = { .what = what, .val = val };

	if (send(ctl, &m, sizeof(m), MSG_NOSIGNAL) != (ssize_t)sizeof(m))
		_exit(3);
}

__attribute__((noreturn)) static void child_die(const char *what)
{
	fprintf(stderr, "cm-robust child: %s: %s\n", what, strerror(errno));
	_exit(2);
}

static struct rdma_cm_event *child_event(struct rdma_event_channel *ch,
					 enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;

	if (poll(&p, 1, WAIT_MS) != 1 || rdma_get_cm_event(ch, &ev))
		child_die("no rdma_cm event");
	if (ev->event != want || ev->status) {
		fprintf(stderr, "cm-robust child: %s status %d, expected %s\n",
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		_exit(2);
	}
	return ev;
}

static int child_main(char **argv)
{
	static const char tag[] = "child";
	int ctl = atoi(argv[3]);
	bool active = !strcmp(argv[2], "active");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *req = NULL;
	struct sockaddr_in a = loopback(active ? (uint16_t)atoi(argv[4]) : 0);
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		child_die("rdma_create_id");
	if (active) {
		struct rdma_conn_param p;

		memset(&p, 0, sizeof(p));
		p.private_data = tag;
		p.private_data_len = sizeof(tag);
		p.responder_resources = p.initiator_depth = 1;
		p.retry_count = p.rnr_retry_count = 7;
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000))
			child_die("rdma_resolve_addr");
		rdma_ack_cm_event(child_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(id, 2000))
			child_die("rdma_resolve_route");
		rdma_ack_cm_event(child_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		if (rdma_create_qp(id, NULL, &qa) || rdma_connect(id, &p))
			child_die("rdma_connect");
		child_say(ctl, 'C', 0);
	} else {
		if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 8))
			child_die("rdma_listen");
		child_say(ctl, 'P', ntohs(rdma_get_src_port(id)));
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = ctl, .events = POLLIN }, { .fd = ch->fd, .events = POLLIN } };
		struct rdma_cm_event *ev;
		struct msg m;

		if (poll(p, 2, -1) < 0)
			continue;
		if (p[0].revents) {
			if (recv(ctl, &m, sizeof(m), 0) != (ssize_t)sizeof(m))
				_exit(0); /* the test is over */
			if (m.what == 'A' && req) {
				int r = rdma_create_qp(req, NULL, &qa);

				if (!r)
					r = rdma_accept(req, NULL);
				child_say(ctl, 'A', r ? errno : 0);
			}
		}
		if (p[1].revents && !rdma_get_cm_event(ch, &ev)) {
			if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
				req = ev->id;
				child_say(ctl, 'R', 0);
			} else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
				child_say(ctl, 'E', 0);
			} else {
				child_say(ctl, 'X', ev->event);
			}
			rdma_ack_cm_event(ev);
		}
	}
}

/* Starts a child playing @role ("active": connects to 127.0.0.1:@port; "passive": listens). */
static struct kid *spawn(const char *role, uint16_t port)
{
	struct kid *k = NULL;
	int sv[2];
	pid_t parent = getpid();

	for (int i = 0; i < MAX_KIDS && !k; i++)
		if (fx->kids[i].pid == 0)
			k = &fx->kids[i];
	assert_non_null(k);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	fflush(NULL);
	k->pid = fork();
	assert_true(k->pid >= 0);
	if (k->pid == 0) {
		char fd[16], p[16];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(99);
		snprintf(fd, sizeof(fd), "%d", sv[1]);
		snprintf(p, sizeof(p), "%u", port);
		fcntl(sv[1], F_SETFD, 0);
		execl("/proc/self/exe", "cm-robust-child", CHILD_FLAG, role, fd, p, (char *)NULL);
		_exit(98);
	}
	close(sv[1]);
	k->ctl = sv[0];
	return k;
}

/* The child's next message, which must be @what; returns its value. */
static int32_t kid_expect(struct kid *k, char what, const char *why)
{
	struct pollfd p = { .fd = k->ctl, .events = POLLIN };
	struct msg m;
	ssize_t n;
	int st = 0;

	if (poll(&p, 1, WAIT_MS) != 1)
		fail_msg("%s: the child said nothing within %d ms (expected '%c')", why, WAIT_MS,
			 what);
	n = recv(k->ctl, &m, sizeof(m), 0);
	if (n != (ssize_t)sizeof(m)) {
		waitpid(k->pid, &st, 0);
		k->pid = 0;
		fail_msg("%s: the child exited (status 0x%x) instead of saying '%c'", why, st, what);
	}
	if (m.what != what)
		fail_msg("%s: the child said '%c' (%d), expected '%c'", why, m.what, m.val, what);
	return m.val;
}

static void kid_say(struct kid *k, char what)
{
	struct msg m = { .what = what };

	assert_int_equal(send(k->ctl, &m, sizeof(m), MSG_NOSIGNAL), (ssize_t)sizeof(m));
}

/* ---- 1. nobody listens --------------------------------------------------------------- */

static void test_connect_no_listener_rc_rejected(void **state)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *sid;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	long long t0;

	(void)state;
	fx->port = dead_port();
	t0 = now_ms();
	client_connect(RDMA_PS_TCP, NULL, 0);
	ev = expect_event(fx->cch, RDMA_CM_EVENT_REJECTED, rej(8), fx->client,
			  "RC connect to a port nobody listens on");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	/* docs/conformance.md: a refused connect is retried for 250 ms first (a listener
	 * may be a moment away); 10 s is a bound a loaded machine keeps. */
	if (now_ms() - t0 < 250 || now_ms() - t0 > 10000)
		fail_msg("the refusal took %lld ms (want 250 ms of retries, at most 10 s)",
			 now_ms() - t0);
	/* librdmacm moves the QP of a rejected connection to ERR. */
	assert_int_equal(ibv_query_qp(fx->client->qp, &qa, IBV_QP_STATE, &qia), 0);
	assert_int_equal(qa.qp_state, IBV_QPS_ERR);
	destroy_id(&fx->client);

	/* A synchronous id: rdma_connect itself fails, ECONNREFUSED; its event is kept. */
	{
		struct sockaddr_in a = loopback(fx->port);

		EXPECT_OK(rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP));
		fx->client = sid;
		EXPECT_OK(rdma_resolve_addr(sid, NULL, (struct sockaddr *)&a, 2000));
		EXPECT_OK(rdma_resolve_route(sid, 2000));
		create_qp(sid, IBV_QPT_RC);
		EXPECT_ERRNO(rdma_connect(sid, NULL), ECONNREFUSED);
		assert_non_null(sid->event);
		assert_int_equal(sid->event->event, RDMA_CM_EVENT_REJECTED);
		assert_int_equal(sid->event->status, rej(8));
		destroy_id(&fx->client);
	}
}

static void test_connect_no_listener_ud_unreachable(void **state)
{
	(void)state;
	fx->port = dead_port();
	client_connect(RDMA_PS_UDP, NULL, 0);
	expect_ack(fx->cch, RDMA_CM_EVENT_UNREACHABLE, 1, fx->client,
		   "UD connect to a port nobody listens on");
}

/* ---- 2. addresses that are not on this host ------------------------------------------ */

/* The route lookup's error for @dst (0: there is a route), as rdma_resolve_addr takes
 * it: a UDP socket's connect, which sends nothing. */
static int route_error(const struct sockaddr *dst, socklen_t len)
{
	int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), err = 0;

	assert_true(fd >= 0);
	if (connect(fd, dst, len))
		err = errno;
	close(fd);
	return err;
}

/*
 * A UD id towards addresses that are not this host's (the documentation prefixes)
 * resolves them as an RC id does: from the source the route gives, or ADDR_ERROR with
 * the route lookup's error where there is no route. Nothing is sent to them: where they
 * resolve, the test goes no further than the event.
 */
static void test_resolve_addr_off_host(void **state)
{
	static const char *const v4[] = { "192.0.2.123", "198.51.100.1", "203.0.113.7" };
	struct sockaddr_in6 a6;
	struct sockaddr_in a;
	struct rdma_cm_id *id;
	int err;

	(void)state;
	fx->cch = channel();
	for (size_t i = 0; i < ARRAY_LEN(v4); i++) {
		char what[80];

		snprintf(what, sizeof(what), "rdma_resolve_addr %s", v4[i]);
		a = loopback(7471);
		inet_pton(AF_INET, v4[i], &a.sin_addr);
		err = route_error((struct sockaddr *)&a, sizeof(a));
		EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_UDP));
		EXPECT_OK(rdma_resolve_addr(fx->client, NULL, (struct sockaddr *)&a, 500));
		if (err) {
			expect_ack(fx->cch, RDMA_CM_EVENT_ADDR_ERROR, -err, fx->client, what);
			/* No address: no route, no connection. */
			EXPECT_ERRNO(rdma_resolve_route(fx->client, 500), EINVAL);
			EXPECT_ERRNO(rdma_connect(fx->client, NULL), EINVAL);
			/* The id can try again. */
			a = loopback(7471);
			EXPECT_OK(rdma_resolve_addr(fx->client, NULL, (struct sockaddr *)&a, 500));
			expect_ack(fx->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, fx->client,
				   "rdma_resolve_addr 127.0.0.1 after an ADDR_ERROR");
		} else {
			expect_ack(fx->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, fx->client, what);
		}
		destroy_id(&fx->client);
	}

	memset(&a6, 0, sizeof(a6));
	a6.sin6_family = AF_INET6;
	a6.sin6_port = htons(7471);
	inet_pton(AF_INET6, "2001:db8::1", &a6.sin6_addr);
	err = route_error((struct sockaddr *)&a6, sizeof(a6));
	EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_UDP));
	EXPECT_OK(rdma_resolve_addr(fx->client, NULL, (struct sockaddr *)&a6, 500));
	expect_ack(fx->cch, err ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED, -err,
		   fx->client, "rdma_resolve_addr 2001:db8::1");
	destroy_id(&fx->client);

	/* A synchronous id: the call fails with the status as errno (or resolves). */
	a = loopback(7471);
	inet_pton(AF_INET, "192.0.2.123", &a.sin_addr);
	err = route_error((struct sockaddr *)&a, sizeof(a));
	EXPECT_OK(rdma_create_id(NULL, &id, NULL, RDMA_PS_UDP));
	fx->client = id;
	if (err)
		EXPECT_ERRNO(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 500), err);
	else
		EXPECT_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 500));
	destroy_id(&fx->client);

	/* Binding to an address this host does not have. */
	EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_UDP));
	EXPECT_ERRNO(rdma_bind_addr(fx->client, (struct sockaddr *)&a), EADDRNOTAVAIL);
	destroy_id(&fx->client);
}

/* ---- 3. peers that go away in the middle --------------------------------------------- */

/* (a) A plain TCP client sends part of an MPA request and goes. */
static void test_half_request_then_close(void **state)
{
	unsigned char buf[128];
	size_t n;
	int fd;

	(void)state;
	listen_on(RDMA_PS_TCP, 16);

	/* Part of the key, then the end of the stream (half close: we see the listener's
	 * answer to it, its own close). */
	fd = tcp_to(fx->port);
	send_bytes(fd, mpa_req_key, 10, "10 bytes of the key");
	shutdown(fd, SHUT_WR);
	expect_closed(fd, PROMPT_MS, NULL, 0, NULL, "10 bytes of the key, then FIN");
	close_fd(fd, false);
	still_serving("10 bytes of an MPA key and FIN");

	/* A header promising 100 bytes of private data, 30 of them, then the end. */
	fd = tcp_to(fx->port);
	n = mpa_header(buf, mpa_req_key, 0, 1, 100);
	memset(buf + n, 0xab, 30);
	send_bytes(fd, buf, n + 30, "a header and 30 of 100 bytes");
	shutdown(fd, SHUT_WR);
	expect_closed(fd, PROMPT_MS, NULL, 0, NULL, "an MPA request cut short, then FIN");
	close_fd(fd, false);
	still_serving("an MPA request cut short and FIN");

	/* The same, ended by a reset. */
	fd = tcp_to(fx->port);
	send_bytes(fd, buf, n + 30, "a header and 30 of 100 bytes");
	close_fd(fd, true);
	still_serving("an MPA request cut short and RST");
}

/* The next event on @ch, for @id: CONNECT_ERROR with a negative status (or, if
 * @rejected_ok, REJECTED with status 28). The caller acks it. */
static struct rdma_cm_event *expect_error_event(struct rdma_event_channel *ch,
						 const struct rdma_cm_id *id, bool rejected_ok,
						 const char *what)
{
	struct rdma_cm_event *ev = next_event(ch, WAIT_MS);

	if (!ev)
		fail_msg("%s: no event within %d ms", what, WAIT_MS);
	if (ev->id != id)
		fail_msg("%s: %s for another id", what, rdma_event_str(ev->event));
	if (ev->event == RDMA_CM_EVENT_CONNECT_ERROR && ev->status < 0)
		return ev;
	if (rejected_ok && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 28)
		return ev;
	fail_msg("%s: got %s status %d, expected RDMA_CM_EVENT_CONNECT_ERROR with a negative "
		 "status%s", what, rdma_event_str(ev->event), ev->status,
		 rejected_ok ? " or RDMA_CM_EVENT_REJECTED status 28" : "");
	return NULL;
}

/* (b) The active side dies after its request went out, before the listener answers. */
static void test_active_killed_before_accept(void **state)
{
	static const char tag[] = "child";
	struct rdma_cm_event *ev;

	(void)state;
	listen_on(RDMA_PS_TCP, 16);

	for (int round = 0; round < 2; round++) {
		const char *what = round ? "reject after the active side died" :
					   "accept after the active side died";
		struct kid *k = spawn("active", fx->port);

		kid_expect(k, 'C', "the child's rdma_connect");
		take_request(tag, sizeof(tag), "the child's request");
		kid_kill(k);
		if (round == 0) {
			create_qp(fx->server, IBV_QPT_RC);
			/* Either the call sees the peer is gone, or the reply goes nowhere:
			 * the handshake ends in CONNECT_ERROR. */
			EXPECT_OK(rdma_accept(fx->server, NULL));
			ev = expect_error_event(fx->lch, fx->server, false, what);
			assert_int_equal(rdma_ack_cm_event(ev), 0);
		} else {
			EXPECT_OK(rdma_reject(fx->server, "no", 3));
		}
		destroy_id(&fx->server);
		still_serving(what);
	}
}

/* The passive side dies holding our request, unanswered. rdma-core: the kernel destroys
 * the dead process's ids, which rejects the request (REJECTED 28); softverbs' listener
 * cannot say anything once killed, so the broken connection (CONNECT_ERROR) is as good. */
static void test_passive_killed_holding_request(void **state)
{
	struct kid *k;

	(void)state;
	k = spawn("passive", 0);
	fx->port = (uint16_t)kid_expect(k, 'P', "the child's rdma_listen");
	client_connect(RDMA_PS_TCP, NULL, 0);
	kid_expect(k, 'R', "the child's CONNECT_REQUEST");
	kid_kill(k);
	assert_int_equal(rdma_ack_cm_event(expect_error_event(
				 fx->cch, fx->client, true, "the passive side killed before accepting")),
			 0);
}

/* (c) The passive side dies after rdma_accept, before we read our reply's event: our
 * handshake fails (CONNECT_ERROR), or, if it completed, the connection ends at once. */
static void test_passive_killed_after_accept(void **state)
{
	const char *what = "the passive side killed after accepting";
	struct rdma_cm_event *ev;
	struct kid *k;

	(void)state;
	k = spawn("passive", 0);
	fx->port = (uint16_t)kid_expect(k, 'P', "the child's rdma_listen");
	client_connect(RDMA_PS_TCP, NULL, 0);
	kid_expect(k, 'R', "the child's CONNECT_REQUEST");
	kid_say(k, 'A');
	assert_int_equal(kid_expect(k, 'A', "the child's rdma_accept"), 0);
	kid_kill(k);
	ev = next_event(fx->cch, WAIT_MS);
	if (!ev)
		fail_msg("%s: no event within %d ms", what, WAIT_MS);
	if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
		assert_int_equal(rdma_ack_cm_event(ev), 0);
		expect_ack(fx->cch, RDMA_CM_EVENT_DISCONNECTED, 0, fx->client, what);
		EXPECT_OK(rdma_disconnect(fx->client));
	} else if (ev->event != RDMA_CM_EVENT_CONNECT_ERROR || ev->status >= 0) {
		fail_msg("%s: got %s status %d, expected CONNECT_ERROR (negative status) or "
			 "ESTABLISHED then DISCONNECTED", what, rdma_event_str(ev->event), ev->status);
	} else {
		assert_int_equal(rdma_ack_cm_event(ev), 0);
	}
	destroy_id(&fx->client);
}

static void post_recvs(struct rdma_cm_id *id, struct ibv_mr *mr, char *buf)
{
	for (int i = 0; i < NRECV; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(buf + 64 * i), .length = 64,
				       .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + (uint64_t)i, .sg_list = &sge, .num_sge = 1 },
				   *bad;

		assert_int_equal(ibv_post_recv(id->qp, &wr, &bad), 0);
	}
}

/* After the peer died: DISCONNECTED, then rdma_disconnect flushes what is posted. */
static void expect_survivor(struct rdma_event_channel *ch, struct rdma_cm_id *id,
			    const char *what)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	long long end;
	int got = 0;

	expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED, 0, id, what);
	EXPECT_OK(rdma_disconnect(id));
	assert_int_equal(ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qia), 0);
	if (qa.qp_state != IBV_QPS_ERR)
		fail_msg("%s: the QP is in state %d after rdma_disconnect, expected ERR", what,
			 qa.qp_state);
	end = now_ms() + WAIT_MS;
	while (got < NRECV) {
		struct ibv_wc wc[NRECV];
		int n = ibv_poll_cq(id->recv_cq, NRECV, wc);

		assert_true(n >= 0);
		for (int i = 0; i < n; i++, got++) {
			if (wc[i].status != IBV_WC_WR_FLUSH_ERR || wc[i].wr_id != 100 + (uint64_t)got)
				fail_msg("%s: receive completion %d: wr_id %llu status %s, expected "
					 "%d IBV_WC_WR_FLUSH_ERR", what, got,
					 (unsigned long long)wc[i].wr_id,
					 ibv_wc_status_str(wc[i].status), 100 + got);
		}
		if (!n && now_ms() > end)
			fail_msg("%s: %d of %d receives completed within %d ms", what, got, NRECV,
				 WAIT_MS);
		if (!n)
			sched_yield();
	}
	/* Again: harmless. */
	EXPECT_OK(rdma_disconnect(id));
}

/* (d) A connected peer process killed: we are the active side. */
static void test_passive_killed_when_established(void **state)
{
	static char buf[64 * NRECV];
	struct ibv_mr *mr;
	struct kid *k;

	(void)state;
	k = spawn("passive", 0);
	fx->port = (uint16_t)kid_expect(k, 'P', "the child's rdma_listen");
	fx->cch = channel();
	fx->client = resolved(fx->cch, RDMA_PS_TCP, fx->port);
	create_qp(fx->client, IBV_QPT_RC);
	mr = ibv_reg_mr(fx->client->qp->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	post_recvs(fx->client, mr, buf);
	EXPECT_OK(rdma_connect(fx->client, NULL));
	kid_expect(k, 'R', "the child's CONNECT_REQUEST");
	kid_say(k, 'A');
	assert_int_equal(kid_expect(k, 'A', "the child's rdma_accept"), 0);
	expect_ack(fx->cch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->client, "connect to the child");
	kid_expect(k, 'E', "the child's ESTABLISHED");
	kid_kill(k);
	expect_survivor(fx->cch, fx->client, "the passive side killed when connected");
	rdma_destroy_qp(fx->client);
	assert_int_equal(ibv_dereg_mr(mr), 0);
}

/* (d) The same, we are the passive side. */
static void test_active_killed_when_established(void **state)
{
	static const char tag[] = "child";
	static char buf[64 * NRECV];
	struct ibv_mr *mr;
	struct kid *k;

	(void)state;
	listen_on(RDMA_PS_TCP, 16);
	k = spawn("active", fx->port);
	kid_expect(k, 'C', "the child's rdma_connect");
	take_request(tag, sizeof(tag), "the child's request");
	create_qp(fx->server, IBV_QPT_RC);
	mr = ibv_reg_mr(fx->server->qp->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	post_recvs(fx->server, mr, buf);
	EXPECT_OK(rdma_accept(fx->server, NULL));
	kid_expect(k, 'E', "the child's ESTABLISHED");
	expect_ack(fx->lch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->server, "the child's connection");
	kid_kill(k);
	expect_survivor(fx->lch, fx->server, "the active side killed when connected");
	rdma_destroy_qp(fx->server);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	destroy_id(&fx->server);
	still_serving("a connected peer was killed");
}

/* ---- 4. arguments ---------------------------------------------------------------------- */

static void test_private_data_limits_rc(void **state)
{
	unsigned char big[256];
	struct rdma_conn_param p;
	struct rdma_cm_event *ev;

	(void)state;
	skip_on_iwarp("252 bytes each way (test_cm_iwarp.c)");
	fill(big, sizeof(big), 3);
	listen_on(RDMA_PS_TCP, 16);
	fx->cch = channel();
	fx->client = resolved(fx->cch, RDMA_PS_TCP, fx->port);
	create_qp(fx->client, IBV_QPT_RC);
	memset(&p, 0, sizeof(p));
	p.responder_resources = p.initiator_depth = 1;
	p.retry_count = p.rnr_retry_count = 7;

	/* rdma_connect: 56 at most (an IB CM REQ's 92 less the 36-byte rdma_cm header). */
	p.private_data = big;
	p.private_data_len = 57;
	EXPECT_ERRNO(rdma_connect(fx->client, &p), EINVAL);
	p.private_data_len = 255;
	EXPECT_ERRNO(rdma_connect(fx->client, &p), EINVAL);
	p.private_data = NULL;
	p.private_data_len = 1;
	EXPECT_ERRNO(rdma_connect(fx->client, &p), EINVAL);
	/* Nothing went out: the id connects as if they had not happened. */
	p.private_data = big;
	p.private_data_len = 56;
	EXPECT_OK(rdma_connect(fx->client, &p));
	take_request(big, 56, "a request with 56 bytes of private data");

	/* rdma_reject: 148 at most (REJ); a refused call leaves the request to answer. */
	EXPECT_ERRNO(rdma_reject(fx->server, big, 149), EINVAL);
	EXPECT_ERRNO(rdma_reject(fx->server, big, 255), EINVAL);
	EXPECT_ERRNO(rdma_reject(fx->server, NULL, 4), EINVAL);
	EXPECT_OK(rdma_reject(fx->server, big + 1, 148));
	ev = expect_event(fx->cch, RDMA_CM_EVENT_REJECTED, rej(28), fx->client, "reject with 148 bytes");
	expect_pd(ev, false, big + 1, 148, 148, "reject with 148 bytes");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	destroy_id(&fx->client);
	destroy_id(&fx->server);

	/* rdma_accept: 196 at most (REP). A failed accept rejects the request (rdma-core:
	 * the kernel sends a REJ, reason 28). */
	for (int round = 0; round < 3; round++) {
		const char *what = round == 0 ? "accept with 197 bytes" :
				   round == 1 ? "accept with a NULL pointer and 8 bytes" :
						"accept with 196 bytes";

		client_connect(RDMA_PS_TCP, NULL, 0);
		take_request(NULL, 0, what);
		create_qp(fx->server, IBV_QPT_RC);
		p.private_data = round == 1 ? NULL : big + 2;
		p.private_data_len = round == 0 ? 197 : round == 1 ? 8 : 196;
		if (round < 2) {
			EXPECT_ERRNO(rdma_accept(fx->server, &p), EINVAL);
			expect_ack(fx->cch, RDMA_CM_EVENT_REJECTED, rej(28), fx->client, what);
		} else {
			EXPECT_OK(rdma_accept(fx->server, &p));
			ev = expect_event(fx->cch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->client, what);
			expect_pd(ev, false, big + 2, 196, 196, what);
			assert_int_equal(rdma_ack_cm_event(ev), 0);
			expect_ack(fx->lch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->server, what);
			disconnect_rc(false, what);
		}
		destroy_id(&fx->client);
		destroy_id(&fx->server);
	}
}

static void test_private_data_limits_ud(void **state)
{
	unsigned char big[256];
	struct rdma_conn_param p;
	struct rdma_cm_event *ev;

	(void)state;
	fill(big, sizeof(big), 9);
	listen_on(RDMA_PS_UDP, 16);
	fx->cch = channel();
	fx->client = resolved(fx->cch, RDMA_PS_UDP, fx->port);
	create_qp(fx->client, IBV_QPT_UD);
	memset(&p, 0, sizeof(p));

	/* rdma_connect: 180 at most (SIDR REQ 216 less 36). */
	p.private_data = big;
	p.private_data_len = 181;
	EXPECT_ERRNO(rdma_connect(fx->client, &p), EINVAL);
	p.private_data = NULL;
	p.private_data_len = 2;
	EXPECT_ERRNO(rdma_connect(fx->client, &p), EINVAL);
	p.private_data = big;
	p.private_data_len = 180;
	EXPECT_OK(rdma_connect(fx->client, &p));
	take_request(big, 180, "a UD request with 180 bytes of private data");

	/* rdma_reject: 136 at most (SIDR REP); the active side: UNREACHABLE, SIDR REJECT (2). */
	EXPECT_ERRNO(rdma_reject(fx->server, big, 137), EINVAL);
	EXPECT_ERRNO(rdma_reject(fx->server, NULL, 1), EINVAL);
	EXPECT_OK(rdma_reject(fx->server, big + 1, 136));
	ev = expect_event(fx->cch, RDMA_CM_EVENT_UNREACHABLE, 2, fx->client,
			  "UD reject with 136 bytes");
	expect_pd(ev, true, big + 1, 136, 136, "UD reject with 136 bytes");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	destroy_id(&fx->client);
	destroy_id(&fx->server);

	/* rdma_accept: 136 at most (SIDR REP). */
	for (int round = 0; round < 2; round++) {
		const char *what = round ? "UD accept with 136 bytes" : "UD accept with 137 bytes";

		client_connect(RDMA_PS_UDP, NULL, 0);
		take_request(NULL, 0, what);
		create_qp(fx->server, IBV_QPT_UD);
		p.private_data = big + 2;
		p.private_data_len = round ? 136 : 137;
		if (!round) {
			EXPECT_ERRNO(rdma_accept(fx->server, &p), EINVAL);
			expect_ack(fx->cch, RDMA_CM_EVENT_UNREACHABLE, 2, fx->client, what);
		} else {
			EXPECT_OK(rdma_accept(fx->server, &p));
			ev = expect_event(fx->cch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->client, what);
			expect_pd(ev, true, big + 2, 136, 136, what);
			assert_int_equal(ev->param.ud.qp_num, fx->server->qp->qp_num);
			assert_int_equal(rdma_ack_cm_event(ev), 0);
		}
		destroy_id(&fx->client);
		destroy_id(&fx->server);
	}
}

static void test_null_arguments(void **state)
{
	struct sockaddr_in a = loopback(0);
	struct rdma_cm_id *id, *sync_listen, *out;
	struct rdma_cm_event *ev = NULL;
	struct rdma_conn_param p;
	struct ibv_qp_init_attr qia;
	struct ibv_qp_init_attr_ex qiax;
	struct ibv_srq_init_attr sia;
	struct ibv_qp_attr qa;
	struct rdma_addrinfo *res = NULL;
	int mask;

	(void)state;
	memset(&p, 0, sizeof(p));
	memset(&qia, 0, sizeof(qia));
	memset(&qiax, 0, sizeof(qiax));
	memset(&sia, 0, sizeof(sia));
	fx->cch = channel();

	/* Ids. */
	EXPECT_ERRNO(rdma_create_id(fx->cch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	EXPECT_ERRNO(rdma_create_id(fx->cch, &out, NULL, (enum rdma_port_space)0x1234), EINVAL);
	EXPECT_ERRNO(rdma_destroy_id(NULL), EINVAL);
	EXPECT_ERRNO(rdma_bind_addr(NULL, (struct sockaddr *)&a), EINVAL);
	EXPECT_ERRNO(rdma_resolve_addr(NULL, NULL, (struct sockaddr *)&a, 100), EINVAL);
	EXPECT_ERRNO(rdma_resolve_route(NULL, 100), EINVAL);
	EXPECT_ERRNO(rdma_listen(NULL, 1), EINVAL);
	EXPECT_ERRNO(rdma_connect(NULL, &p), EINVAL);
	EXPECT_ERRNO(rdma_connect(NULL, NULL), EINVAL);
	EXPECT_ERRNO(rdma_accept(NULL, &p), EINVAL);
	EXPECT_ERRNO(rdma_accept(NULL, NULL), EINVAL);
	EXPECT_ERRNO(rdma_reject(NULL, NULL, 0), EINVAL);
	EXPECT_ERRNO(rdma_reject_ece(NULL, NULL, 0), EINVAL);
	EXPECT_ERRNO(rdma_establish(NULL), EINVAL);
	EXPECT_ERRNO(rdma_disconnect(NULL), EINVAL);
	EXPECT_ERRNO(rdma_notify(NULL, IBV_EVENT_COMM_EST), EINVAL);
	EXPECT_ERRNO(rdma_migrate_id(NULL, fx->cch), EINVAL);
	EXPECT_ERRNO(rdma_set_option(NULL, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &(uint8_t){ 0 }, 1),
		     EINVAL);
	EXPECT_ERRNO(rdma_init_qp_attr(NULL, &qa, &mask), EINVAL);
	EXPECT_ERRNO(rdma_create_qp(NULL, NULL, &qia), EINVAL);
	EXPECT_ERRNO(rdma_create_qp_ex(NULL, &qiax), EINVAL);
	EXPECT_ERRNO(rdma_create_srq(NULL, NULL, &sia), EINVAL);
	EXPECT_ERRNO(rdma_get_request(NULL, &out), EINVAL);
	EXPECT_ERRNO(rdma_join_multicast(NULL, (struct sockaddr *)&a, NULL), EINVAL);
	EXPECT_ERRNO(rdma_leave_multicast(NULL, (struct sockaddr *)&a), EINVAL);
	EXPECT_ERRNO(rdma_set_local_ece(NULL, NULL), EINVAL);
	EXPECT_ERRNO(rdma_get_remote_ece(NULL, NULL), EINVAL);
	EXPECT_ERRNO(rdma_create_ep(NULL, NULL, NULL, NULL), EINVAL);
	/* The void calls return. */
	rdma_destroy_qp(NULL);
	rdma_destroy_srq(NULL);
	rdma_destroy_ep(NULL);
	rdma_destroy_event_channel(NULL);
	rdma_freeaddrinfo(NULL);

	/* Events and channels. */
	EXPECT_ERRNO(rdma_get_cm_event(NULL, &ev), EINVAL);
	EXPECT_ERRNO(rdma_get_cm_event(fx->cch, NULL), EINVAL);
	EXPECT_ERRNO(rdma_ack_cm_event(NULL), EINVAL);
	assert_string_equal(rdma_event_str((enum rdma_cm_event_type)999), "UNKNOWN EVENT");
	assert_string_equal(rdma_event_str((enum rdma_cm_event_type)-1), "UNKNOWN EVENT");
	EXPECT_ERRNO(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL);

	/* NULL arguments next to a good id. */
	fx->client = resolved(fx->cch, RDMA_PS_TCP, 7471);
	id = fx->client;
	EXPECT_ERRNO(rdma_bind_addr(id, NULL), EINVAL);
	EXPECT_ERRNO(rdma_init_qp_attr(id, NULL, &mask), EINVAL);
	EXPECT_ERRNO(rdma_init_qp_attr(id, &qa, NULL), EINVAL);
	EXPECT_ERRNO(rdma_create_qp(id, NULL, NULL), EINVAL);
	EXPECT_ERRNO(rdma_create_qp_ex(id, NULL), EINVAL);
	EXPECT_ERRNO(rdma_create_srq(id, NULL, NULL), EINVAL);
	EXPECT_ERRNO(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, NULL, 1), EINVAL);
	EXPECT_ERRNO(rdma_join_multicast(id, NULL, NULL), EINVAL);
	EXPECT_ERRNO(rdma_leave_multicast(id, NULL), EINVAL);
	EXPECT_ERRNO(rdma_create_ep(&out, NULL, NULL, NULL), EINVAL);
	destroy_id(&fx->client);
	EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_TCP));
	EXPECT_ERRNO(rdma_resolve_addr(fx->client, NULL, NULL, 100), EINVAL);
	destroy_id(&fx->client);

	/* A synchronous listener's rdma_get_request with nowhere to put the id. */
	EXPECT_OK(rdma_create_id(NULL, &sync_listen, NULL, RDMA_PS_TCP));
	fx->listen = sync_listen;
	EXPECT_OK(rdma_bind_addr(sync_listen, (struct sockaddr *)&a));
	EXPECT_OK(rdma_listen(sync_listen, 1));
	EXPECT_ERRNO(rdma_get_request(sync_listen, NULL), EINVAL);
	destroy_id(&fx->listen);
}

static void test_calls_in_wrong_state(void **state)
{
	struct sockaddr_in a = loopback(0), far = loopback(7471);
	struct rdma_conn_param p;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id, *other;
	int mask;

	(void)state;
	memset(&p, 0, sizeof(p));
	p.responder_resources = p.initiator_depth = 1;
	p.retry_count = p.rnr_retry_count = 7;
	listen_on(RDMA_PS_TCP, 16);
	fx->cch = channel();

	/* A fresh id. */
	EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_TCP));
	id = fx->client;
	EXPECT_ERRNO(rdma_resolve_route(id, 100), EINVAL);
	EXPECT_ERRNO(rdma_connect(id, &p), EINVAL);
	EXPECT_ERRNO(rdma_accept(id, &p), EINVAL);
	EXPECT_ERRNO(rdma_reject(id, NULL, 0), EINVAL);
	EXPECT_ERRNO(rdma_establish(id), EINVAL);
	EXPECT_ERRNO(rdma_disconnect(id), EINVAL);
	EXPECT_ERRNO(rdma_init_qp_attr(id, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT }, &mask),
		     EINVAL);
	/* Its address resolved, not its route. */
	EXPECT_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&far, 100));
	expect_ack(fx->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, id, "rdma_resolve_addr");
	EXPECT_ERRNO(rdma_connect(id, &p), EINVAL);
	EXPECT_ERRNO(rdma_resolve_addr(id, NULL, (struct sockaddr *)&far, 100), EINVAL);
	EXPECT_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&a), EINVAL);
	EXPECT_ERRNO(rdma_listen(id, 1), EINVAL);
	EXPECT_ERRNO(rdma_accept(id, &p), EINVAL);
	/* Route resolved: an RC connect without a QP nor a conn_param names no QP. */
	EXPECT_OK(rdma_resolve_route(id, 100));
	expect_ack(fx->cch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, id, "rdma_resolve_route");
	EXPECT_ERRNO(rdma_connect(id, NULL), EINVAL);
	/* One QP per id. */
	create_qp(id, IBV_QPT_RC);
	{
		struct ibv_qp_init_attr qia;

		memset(&qia, 0, sizeof(qia));
		qia.qp_type = IBV_QPT_RC;
		qia.cap.max_send_wr = qia.cap.max_recv_wr = 1;
		qia.cap.max_send_sge = qia.cap.max_recv_sge = 1;
		EXPECT_ERRNO(rdma_create_qp(id, NULL, &qia), EINVAL);
	}
	destroy_id(&fx->client);

	/* A listener. */
	EXPECT_ERRNO(rdma_listen(fx->listen, 16), EINVAL);
	EXPECT_ERRNO(rdma_accept(fx->listen, &p), EINVAL);
	EXPECT_ERRNO(rdma_reject(fx->listen, NULL, 0), EINVAL);
	EXPECT_ERRNO(rdma_connect(fx->listen, &p), EINVAL);
	EXPECT_ERRNO(rdma_bind_addr(fx->listen, (struct sockaddr *)&a), EINVAL);
	EXPECT_ERRNO(rdma_resolve_addr(fx->listen, NULL, (struct sockaddr *)&far, 100), EINVAL);
	EXPECT_ERRNO(rdma_disconnect(fx->listen), EINVAL);
	/* rdma_get_request is for synchronous listeners only. */
	EXPECT_ERRNO(rdma_get_request(fx->listen, &other), EINVAL);
	/* Its port is taken. */
	EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_TCP));
	a.sin_port = htons(fx->port);
	EXPECT_ERRNO(rdma_bind_addr(fx->client, (struct sockaddr *)&a), EADDRINUSE);
	destroy_id(&fx->client);

	/* Options. */
	EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_TCP));
	EXPECT_ERRNO(rdma_set_option(fx->client, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &(int){ 0 },
				     sizeof(int)),
		     EINVAL);
	EXPECT_ERRNO(rdma_set_option(fx->client, RDMA_OPTION_ID, 77, &(int){ 0 }, sizeof(int)),
		     ENOSYS);
	EXPECT_ERRNO(rdma_set_option(fx->client, 77, 0, &(int){ 0 }, sizeof(int)), ENOSYS);
	destroy_id(&fx->client);

	/* A connected pair: nothing to accept, reject or connect any more. */
	connect_rc("a connection");
	EXPECT_ERRNO(rdma_accept(fx->server, &p), EINVAL);
	EXPECT_ERRNO(rdma_reject(fx->server, NULL, 0), EINVAL);
	EXPECT_ERRNO(rdma_connect(fx->client, &p), EINVAL);
	EXPECT_ERRNO(rdma_establish(fx->client), EINVAL);
	EXPECT_ERRNO(rdma_resolve_route(fx->client, 100), EINVAL);
	disconnect_rc(true, "a connection");

	/* An empty channel, non-blocking: EAGAIN at once. */
	errno = 0;
	EXPECT_ERRNO(rdma_get_cm_event(fx->cch, &ev), EAGAIN);
}

/* ---- 5. bytes that are not a request ---------------------------------------------------- */

struct garbage {
	const char *what;
	unsigned char bytes[1024];
	size_t len;
	bool may_answer; /* a well-formed request from a non-softverbs peer: a reject reply */
};

static void test_garbage_is_dropped(void **state)
{
	static struct garbage g[9];
	unsigned char got[64];
	size_t n = 0, got_len;
	uint32_t x = 0x12345678;
	int fd;

	(void)state;
	listen_on(RDMA_PS_TCP, 64);

	g[n].what = "random bytes";
	for (size_t i = 0; i < 200; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		g[n].bytes[i] = (unsigned char)x;
	}
	g[n++].len = 200;
	g[n].what = "an HTTP request";
	g[n].len = strlen("GET / HTTP/1.0\r\n\r\n");
	memcpy(g[n].bytes, "GET / HTTP/1.0\r\n\r\n", g[n].len);
	n++;
	g[n].what = "an MPA request with PD_Length 513";
	g[n].len = mpa_header(g[n].bytes, mpa_req_key, 0, 1, 513);
	n++;
	g[n].what = "an MPA request with PD_Length 65535";
	g[n].len = mpa_header(g[n].bytes, mpa_req_key, 0, 1, 0xffff);
	n++;
	g[n].what = "an MPA reply's key";
	g[n].len = mpa_header(g[n].bytes, mpa_rep_key, 0, 1, 8) + 8;
	n++;
	g[n].what = "an MPA request with the reject bit";
	g[n].len = mpa_header(g[n].bytes, mpa_req_key, 0x20, 1, 0);
	n++;
	g[n].what = "an MPA request with reserved bits set";
	g[n].len = mpa_header(g[n].bytes, mpa_req_key, 0x01, 1, 0);
	n++;
	g[n].what = "an MPA request of revision 0";
	g[n].len = mpa_header(g[n].bytes, mpa_req_key, 0, 0, 0);
	n++;
	g[n].what = "an MPA request, then bytes before any reply";
	g[n].len = mpa_header(g[n].bytes, mpa_req_key, 0, 1, 12) + 12 + 4;
	memset(g[n].bytes + 20, 0x5a, 12 + 4);
	n++;
	assert_int_equal(n, ARRAY_LEN(g));

	for (size_t i = 0; i < n; i++) {
		long long ms;

		fd = tcp_to(fx->port);
		send_bytes(fd, g[i].bytes, g[i].len, g[i].what);
		ms = expect_closed(fd, PROMPT_MS, got, sizeof(got), &got_len, g[i].what);
		if (got_len && !g[i].may_answer)
			fail_msg("%s: the listener answered %zu bytes", g[i].what, got_len);
		/* If it answers, it is an MPA reply with the R (reject) bit. */
		if (got_len && (got_len < 20 || memcmp(got, mpa_rep_key, 16) || !(got[16] & 0x20)))
			fail_msg("%s: the answer is not an MPA reject reply", g[i].what);
		close_fd(fd, false);
		print_message("    %-66s dropped in %lld ms%s\n", g[i].what, ms,
			      got_len ? " (after an MPA reject reply)" : "");
		still_serving(g[i].what);
	}

	/* A lot of data at once (the listener reads at most a frame's worth). */
	{
		static unsigned char mib[1 << 20];

		memset(mib, 'x', sizeof(mib));
		fd = tcp_to(fx->port);
		(void)!send(fd, mib, sizeof(mib), MSG_NOSIGNAL | MSG_DONTWAIT);
		expect_closed(fd, PROMPT_MS, NULL, 0, NULL, "1 MiB of 'x'");
		close_fd(fd, false);
		still_serving("1 MiB of 'x'");
	}

	/* Port scanners: connect and go, with FIN or with RST, 20 of each. */
	{
		int fds_before = count_fds();
		long long end;

		for (int i = 0; i < 40; i++)
			close_fd(tcp_to(fx->port), i & 1);
		still_serving("40 connections closed at once");
		/* The listener's side of them is closed too (bounded wait: nothing signals it). */
		end = now_ms() + WAIT_MS;
		while (count_fds() > fds_before && now_ms() < end)
			sched_yield();
		if (count_fds() > fds_before)
			fail_msg("the listener holds %d more fds after 40 port scans",
				 count_fds() - fds_before);
	}
}

/*
 * Connections that say too little: a truncated MPA frame, part of the key, nothing at all.
 * The listener drops each 5 s after accepting it; it keeps at most 256 of them, so of
 * 300 the last 44 go at once. It serves real connections afterwards.
 */
static void test_silent_connections_dropped(void **state)
{
	static int fds[FLOOD];
	static long long t_open[FLOOD];
	static bool closed[FLOOD];
	unsigned char buf[64];
	int fds_before, nclosed = 0;
	long long t0, end;

	(void)state;
	listen_on(RDMA_PS_TCP, 1024);
	fx->cch = channel(); /* for still_serving, before the count */
	fds_before = count_fds();
	memset(closed, 0, sizeof(closed));
	t0 = now_ms();
	for (int i = 0; i < FLOOD; i++) {
		fds[i] = tcp_to(fx->port);
		t_open[i] = now_ms();
		if (i == 0) {
			/* A truncated frame: the header promises 64 bytes, 20 come. */
			size_t h = mpa_header(buf, mpa_req_key, 0, 1, 64);

			memset(buf + h, 0x11, 20);
			send_bytes(fds[i], buf, h + 20, "a truncated MPA frame");
		} else if (i == 1) {
			send_bytes(fds[i], mpa_req_key, 10, "10 bytes of the key");
		}
	}
	print_message("    %d connections opened in %lld ms\n", FLOOD, now_ms() - t0);

	/* Wait for the listener to close them; each close is noted with its time. */
	end = t0 + SILENT_MAX_MS;
	while (nclosed < FLOOD) {
		static struct pollfd p[FLOOD];
		int np = 0, idx[FLOOD];
		long long left = end - now_ms();

		for (int i = 0; i < FLOOD; i++) {
			if (!closed[i]) {
				p[np].fd = fds[i];
				p[np].events = POLLIN;
				p[np].revents = 0;
				idx[np++] = i;
			}
		}
		if (poll(p, (nfds_t)np, left > 0 ? (int)left : 0) <= 0)
			break;
		for (int j = 0; j < np; j++) {
			int i = idx[j];
			ssize_t r;

			if (!p[j].revents)
				continue;
			r = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
			if (r > 0)
				fail_msg("connection %d: the listener sent %zd bytes", i, r);
			if (r < 0 && errno != ECONNRESET)
				continue;
			closed[i] = true;
			nclosed++;
			/* The first 256 are kept until their time runs out; the rest are
			 * refused at once. */
			{
				long long ms = now_ms() - t_open[i];

				if (i < MAX_PENDING && ms < SILENT_MIN_MS)
					fail_msg("connection %d (%s) dropped after %lld ms, before its "
						 "5 s were up", i, i == 0 ? "truncated frame" :
						 i == 1 ? "part of the key" : "silent", ms);
				if (i >= MAX_PENDING && ms > PROMPT_MS)
					fail_msg("connection %d, beyond the %d kept, dropped only after "
						 "%lld ms", i, MAX_PENDING, ms);
				if (i < 3 || i == MAX_PENDING)
					print_message("    connection %d dropped after %lld ms\n", i, ms);
			}
		}
	}
	if (nclosed < FLOOD) {
		int first = -1;

		for (int i = FLOOD - 1; i >= 0; i--)
			if (!closed[i])
				first = i;
		fail_msg("%d of %d silent connections still open %d ms after they were made "
			 "(connection %d among them)", FLOOD - nclosed, FLOOD, SILENT_MAX_MS, first);
	}
	print_message("    all %d dropped %lld ms after the first was made\n", FLOOD, now_ms() - t0);
	for (int i = 0; i < FLOOD; i++)
		close_fd(fds[i], false);
	still_serving("300 silent connections");
	if (count_fds() > fds_before)
		fail_msg("%d more fds than before the silent connections", count_fds() - fds_before);
}

/* ---- ids destroyed with work outstanding -------------------------------------------- */

/* Waits up to WAIT_MS for an event to be queued on @ch, without reading it. */
static void wait_queued(struct rdma_event_channel *ch, const char *what)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	if (poll(&p, 1, WAIT_MS) != 1)
		fail_msg("%s: nothing queued within %d ms", what, WAIT_MS);
}

/*
 * Events not read when their id is destroyed are gone (rdma-core: the kernel drops them
 * from the channel's queue), so the channel's fd must not poll readable for them: an
 * application that polls channel->fd and then calls rdma_get_cm_event on a blocking
 * channel would block for an event that is not there. (An earlier library only marked
 * such events dead and left them counted on the fd; this test caught it.)
 */
static void test_destroyed_id_leaves_nothing_to_read(void **state)
{
	struct sockaddr_in a = loopback(7471);
	struct rdma_cm_id *other;
	struct pollfd p;

	(void)state;
	fx->cch = channel();
	/* Another id keeps the channel in use. */
	EXPECT_OK(rdma_create_id(fx->cch, &other, NULL, RDMA_PS_TCP));
	fx->server = other;
	EXPECT_OK(rdma_create_id(fx->cch, &fx->client, NULL, RDMA_PS_TCP));
	EXPECT_OK(rdma_resolve_addr(fx->client, NULL, (struct sockaddr *)&a, 100));
	wait_queued(fx->cch, "ADDR_RESOLVED");
	destroy_id(&fx->client);
	p = (struct pollfd){ .fd = fx->cch->fd, .events = POLLIN };
	if (poll(&p, 1, 0) != 0) {
		struct rdma_cm_event *ev = NULL;
		int r = rdma_get_cm_event(fx->cch, &ev);

		fail_msg("the channel polls readable after its only event's id was destroyed; "
			 "rdma_get_cm_event then returns %d (%s): a blocking channel would hang",
			 r, r ? strerror(errno) : rdma_event_str(ev->event));
	}
	/* The channel goes on working for the other id. */
	EXPECT_OK(rdma_resolve_addr(other, NULL, (struct sockaddr *)&a, 100));
	expect_ack(fx->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, other, "the other id's ADDR_RESOLVED");
}

/* A listener destroyed before its CONNECT_REQUEST was read: rdma-core destroys the new id
 * with it, which rejects the request (IB CM REJ, consumer defined: REJECTED status 28), as
 * destroying an unanswered new id does. */
static void test_listener_destroyed_rejects_unread_request(void **state)
{
	(void)state;
	listen_on(RDMA_PS_TCP, 16);
	client_connect(RDMA_PS_TCP, NULL, 0);
	wait_queued(fx->lch, "the CONNECT_REQUEST");
	destroy_id(&fx->listen);
	expect_ack(fx->cch, RDMA_CM_EVENT_REJECTED, rej(28), fx->client,
		   "a listener destroyed with an unread CONNECT_REQUEST");
}

/* Destroying a listener: its established connections carry on, its waiting raw
 * connections are closed, its port is free at once. */
static void test_listener_destroyed_children_carry_on(void **state)
{
	struct sockaddr_in a;
	uint16_t port;
	int fd;

	(void)state;
	listen_on(RDMA_PS_TCP, 16);
	port = fx->port;
	connect_rc("a connection to the listener");
	fd = tcp_to(port);
	send_bytes(fd, mpa_req_key, 8, "part of a request");
	destroy_id(&fx->listen);
	expect_closed(fd, PROMPT_MS, NULL, 0, NULL, "a waiting connection when its listener goes");
	close_fd(fd, false);
	/* The connection made through it: data, then disconnect, events on its channel. */
	{
		static char buf[64];
		struct ibv_mr *smr = ibv_reg_mr(fx->server->qp->pd, buf, sizeof(buf),
						IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf) };
		struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *rbad;
		struct ibv_send_wr swr = { .wr_id = 8, .opcode = IBV_WR_SEND, .send_flags =
					   IBV_SEND_INLINE | IBV_SEND_SIGNALED }, *sbad;
		struct ibv_sge ssge = { .addr = (uintptr_t)"hello", .length = 6 };
		struct ibv_wc wc;
		long long end = now_ms() + WAIT_MS;
		int n = 0;

		assert_non_null(smr);
		sge.lkey = smr->lkey;
		assert_int_equal(ibv_post_recv(fx->server->qp, &rwr, &rbad), 0);
		swr.sg_list = &ssge;
		swr.num_sge = 1;
		assert_int_equal(ibv_post_send(fx->client->qp, &swr, &sbad), 0);
		while ((n = ibv_poll_cq(fx->server->recv_cq, 1, &wc)) == 0 && now_ms() < end)
			sched_yield();
		if (n != 1 || wc.status != IBV_WC_SUCCESS || strcmp(buf, "hello"))
			fail_msg("a SEND on the listener's connection after the listener was "
				 "destroyed: %d completion(s), status %s", n,
				 n == 1 ? ibv_wc_status_str(wc.status) : "-");
		rdma_destroy_qp(fx->server);
		assert_int_equal(ibv_dereg_mr(smr), 0);
	}
	disconnect_rc(true, "a connection whose listener was destroyed");
	/* The port is free. */
	EXPECT_OK(rdma_create_id(fx->lch, &fx->listen, NULL, RDMA_PS_TCP));
	a = loopback(port);
	EXPECT_OK(rdma_bind_addr(fx->listen, (struct sockaddr *)&a));
	EXPECT_OK(rdma_listen(fx->listen, 16));
	fx->port = port;
	still_serving("a new listener on the same port");
}

/* ---- a peer that is not a softverbs listener ------------------------------------------ */

struct answer {
	const char *what;
	unsigned char bytes[700];
	size_t len;
	bool reset;     /* close with RST rather than FIN */
	bool rejected;  /* a real MPA reject: REJECTED 28 with the bytes after the header */
};

/*
 * A TCP server (not rdma_cm) takes our rdma_connect, reads the MPA request and answers
 * badly. Each ends the connect at once with an error event, never ESTABLISHED: an MPA
 * reject (R bit) is REJECTED status 28 with its private data; anything else
 * CONNECT_ERROR or UNREACHABLE with a negative status.
 */
static void test_foreign_listener_answers(void **state)
{
	static struct answer ans[8];
	struct sockaddr_in a = loopback(0);
	socklen_t alen = sizeof(a);
	size_t n = 0;
	int lfd;

	(void)state;
	skip_on_iwarp("any MPA reply is an iWARP peer's");
	ans[n].what = "close at once";
	n++;
	ans[n].what = "reset at once";
	ans[n++].reset = true;
	ans[n].what = "an HTTP answer";
	ans[n].len = strlen("HTTP/1.0 400 Bad Request\r\n\r\n");
	memcpy(ans[n].bytes, "HTTP/1.0 400 Bad Request\r\n\r\n", ans[n].len);
	n++;
	ans[n].what = "an MPA reply without softverbs' part";
	ans[n].len = mpa_header(ans[n].bytes, mpa_rep_key, 0, 1, 12) + 12;
	n++;
	ans[n].what = "an MPA reject reply with 5 bytes";
	ans[n].len = mpa_header(ans[n].bytes, mpa_rep_key, 0x20, 1, 5) + 5;
	memcpy(ans[n].bytes + 20, "nope!", 5);
	ans[n++].rejected = true;
	ans[n].what = "an MPA reply with PD_Length 600";
	ans[n].len = mpa_header(ans[n].bytes, mpa_rep_key, 0, 1, 600) + 600;
	n++;
	ans[n].what = "half an MPA reply, then FIN";
	ans[n].len = mpa_header(ans[n].bytes, mpa_rep_key, 0, 1, 100) + 40;
	n++;
	ans[n].what = "a request's key";
	ans[n].len = mpa_header(ans[n].bytes, mpa_req_key, 0, 1, 0);
	n++;
	assert_int_equal(n, ARRAY_LEN(ans));

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	keep_fd(lfd);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 8), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
	fx->port = ntohs(a.sin_port);

	for (size_t i = 0; i < n; i++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		unsigned char req[600];
		struct rdma_cm_event *ev;
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qia;
		long long t0;
		ssize_t got = 0;
		int fd;

		client_connect(RDMA_PS_TCP, "hi", 3);
		if (poll(&p, 1, WAIT_MS) != 1)
			fail_msg("%s: rdma_connect did not reach the TCP server", ans[i].what);
		fd = accept(lfd, NULL, NULL);
		assert_true(fd >= 0);
		keep_fd(fd);
		/* The request: an MPA request frame (RFC 5044 §7.1), first of all. */
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		while (got < 20 && poll(&p, 1, WAIT_MS) == 1) {
			ssize_t r = recv(fd, req + got, sizeof(req) - (size_t)got, 0);

			if (r <= 0)
				break;
			got += r;
		}
		if (got < 20 || memcmp(req, mpa_req_key, 16))
			fail_msg("%s: the connection did not start with an MPA request", ans[i].what);
		t0 = now_ms();
		if (ans[i].len)
			send_bytes(fd, ans[i].bytes, ans[i].len, ans[i].what);
		close_fd(fd, ans[i].reset);
		if (ans[i].rejected) {
			ev = expect_event(fx->cch, RDMA_CM_EVENT_REJECTED, rej(28), fx->client, ans[i].what);
			expect_pd(ev, false, (const unsigned char *)"nope!", 5, 148, ans[i].what);
		} else {
			ev = next_event(fx->cch, WAIT_MS);
			if (!ev)
				fail_msg("%s: no event within %d ms", ans[i].what, WAIT_MS);
			if ((ev->event != RDMA_CM_EVENT_CONNECT_ERROR &&
			     ev->event != RDMA_CM_EVENT_UNREACHABLE) || ev->status >= 0)
				fail_msg("%s: got %s status %d, expected CONNECT_ERROR or "
					 "UNREACHABLE with a negative status", ans[i].what,
					 rdma_event_str(ev->event), ev->status);
		}
		print_message("    %-40s -> %s status %d after %lld ms\n", ans[i].what,
			      rdma_event_str(ev->event), ev->status, now_ms() - t0);
		assert_int_equal(rdma_ack_cm_event(ev), 0);
		if (now_ms() - t0 > PROMPT_MS)
			fail_msg("%s: the error took %lld ms", ans[i].what, now_ms() - t0);
		/* The failed connection's QP is in ERR. */
		assert_int_equal(ibv_query_qp(fx->client->qp, &qa, IBV_QP_STATE, &qia), 0);
		if (qa.qp_state != IBV_QPS_ERR)
			fail_msg("%s: the QP is in state %d, expected ERR", ans[i].what, qa.qp_state);
		destroy_id(&fx->client);
	}
}

/* Only a listener of the other port space on the port: in rdma-core the port spaces are
 * separate service IDs (RDMA_PS_TCP 0x0106, RDMA_PS_UDP 0x0111, << 16 | port), so for the
 * request nobody listens: UNREACHABLE 1 (IB_SIDR_UNSUPPORTED) for UD, REJECTED 8
 * (IB_CM_REJ_INVALID_SERVICE_ID) for RC, not the codes of an application's rdma_reject
 * (UNREACHABLE 2 / REJECTED 28). */
static void test_connect_ud_to_rc_listener(void **state)
{
	(void)state;
	listen_on(RDMA_PS_TCP, 16);
	client_connect(RDMA_PS_UDP, NULL, 0);
	expect_ack(fx->cch, RDMA_CM_EVENT_UNREACHABLE, 1, fx->client,
		   "UD connect to a port with only an RC (RDMA_PS_TCP) listener");
	destroy_id(&fx->client);
	still_serving("a UD request to an RC listener");
}

static void test_connect_rc_to_ud_listener(void **state)
{
	(void)state;
	listen_on(RDMA_PS_UDP, 16);
	client_connect(RDMA_PS_TCP, NULL, 0);
	expect_ack(fx->cch, RDMA_CM_EVENT_REJECTED, rej(8), fx->client,
		   "RC connect to a port with only a UD (RDMA_PS_UDP) listener");
}

/* ---- a genuine request, replayed by a plain TCP peer ---------------------------------- */

/* What rdma_connect sends first, captured by a TCP server of ours (the connect then fails:
 * we close without answering). */
static size_t capture_request(unsigned char *buf, size_t cap, const char *pd)
{
	struct sockaddr_in a = loopback(0);
	socklen_t alen = sizeof(a);
	struct pollfd p;
	size_t got = 0, want = 20;
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd;
	uint16_t saved = fx->port;

	assert_true(lfd >= 0);
	keep_fd(lfd);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
	fx->port = ntohs(a.sin_port);
	client_connect(RDMA_PS_TCP, pd, (uint8_t)(strlen(pd) + 1));
	fx->port = saved;
	p = (struct pollfd){ .fd = lfd, .events = POLLIN };
	if (poll(&p, 1, WAIT_MS) != 1)
		fail_msg("rdma_connect did not reach our TCP server");
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	keep_fd(fd);
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	while (got < want) {
		ssize_t r;

		if (poll(&p, 1, WAIT_MS) != 1)
			fail_msg("the request stopped after %zu bytes", got);
		r = recv(fd, buf + got, cap - got, 0);
		if (r <= 0)
			fail_msg("the request's connection ended after %zu bytes", got);
		got += (size_t)r;
		if (got >= 20)
			want = 20 + (size_t)(buf[18] << 8 | buf[19]);
		assert_true(want <= cap);
	}
	if (memcmp(buf, mpa_req_key, 16) || got != want)
		fail_msg("the request is not one MPA request frame (%zu bytes)", got);
	close_fd(fd, false);
	close_fd(lfd, false);
	/* Our client learns that nobody answered. */
	assert_int_equal(rdma_ack_cm_event(expect_error_event(fx->cch, fx->client, false,
							      "a TCP server that closed")), 0);
	destroy_id(&fx->client);
	return got;
}

/* Reads an MPA reply from @fd: returns its flags. */
static uint8_t read_reply(int fd, const char *what)
{
	unsigned char buf[600];
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t got = 0, want = 20;

	while (got < want) {
		ssize_t r;

		if (poll(&p, 1, WAIT_MS) != 1)
			fail_msg("%s: no MPA reply within %d ms (%zu bytes)", what, WAIT_MS, got);
		r = recv(fd, buf + got, want - got, 0);
		if (r <= 0)
			fail_msg("%s: the connection ended before a whole reply (%zu bytes)", what,
				 got);
		got += (size_t)r;
		if (got == 20)
			want = 20 + (size_t)(buf[18] << 8 | buf[19]);
		assert_true(want <= sizeof(buf));
	}
	if (memcmp(buf, mpa_rep_key, 16))
		fail_msg("%s: the answer is not an MPA reply", what);
	return buf[16];
}

/*
 * The listener's side of a handshake whose peer is not what it claims: a genuine request
 * (captured from rdma_connect) replayed over plain TCP, then a wrong RTU or none.
 */
static void test_replayed_request(void **state)
{
	static const char tag[] = "replayed";
	unsigned char req[600];
	size_t len;
	struct rdma_cm_event *ev;
	int fd;

	(void)state;
	listen_on(RDMA_PS_TCP, 16);
	fx->cch = channel();
	len = capture_request(req, sizeof(req), tag);

	/* One byte at a time: the listener reassembles it; rdma_reject answers with an MPA
	 * reply with R set, and the connection ends. */
	fd = tcp_to(fx->port);
	for (size_t i = 0; i < len; i++)
		send_bytes(fd, req + i, 1, "a request, byte by byte");
	take_request(tag, sizeof(tag), "a replayed request, byte by byte");
	EXPECT_OK(rdma_reject(fx->server, "no", 3));
	if (!(read_reply(fd, "rdma_reject") & 0x20))
		fail_msg("rdma_reject's reply has no R (reject) bit");
	expect_closed(fd, PROMPT_MS, NULL, 0, NULL, "after rdma_reject");
	close_fd(fd, false);
	destroy_id(&fx->server);
	if (ct_cm_iwarp()) {
		/* iWARP has no RTU: the passive side is ESTABLISHED at its reply. */
		print_message("    no RTU on iWARP: the wrong-RTU and no-RTU cases skipped\n");
		return;
	}

	/* Accepted, then 8 bytes that are not the RTU: CONNECT_ERROR, never ESTABLISHED. */
	fd = tcp_to(fx->port);
	send_bytes(fd, req, len, "a replayed request");
	take_request(tag, sizeof(tag), "a replayed request");
	create_qp(fx->server, IBV_QPT_RC);
	EXPECT_OK(rdma_accept(fx->server, NULL));
	if (read_reply(fd, "rdma_accept") & 0x20)
		fail_msg("rdma_accept's reply has the R (reject) bit");
	send_bytes(fd, "GARBAGE!", 8, "a wrong RTU");
	ev = expect_error_event(fx->lch, fx->server, false, "a wrong RTU after the reply");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	expect_closed(fd, PROMPT_MS, NULL, 0, NULL, "after a wrong RTU");
	close_fd(fd, false);
	destroy_id(&fx->server);

	/* Accepted, then the peer goes before its RTU. */
	fd = tcp_to(fx->port);
	send_bytes(fd, req, len, "a replayed request");
	take_request(tag, sizeof(tag), "a replayed request");
	create_qp(fx->server, IBV_QPT_RC);
	EXPECT_OK(rdma_accept(fx->server, NULL));
	read_reply(fd, "rdma_accept");
	close_fd(fd, false);
	ev = expect_error_event(fx->lch, fx->server, false, "a peer that closed before its RTU");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	destroy_id(&fx->server);

	/* The request with bytes after it (nothing may follow a request before the reply):
	 * dropped like garbage. */
	fd = tcp_to(fx->port);
	memcpy(req + len, "junk", 4);
	send_bytes(fd, req, len + 4, "a request with 4 bytes after it");
	expect_closed(fd, PROMPT_MS, NULL, 0, NULL, "a request with 4 bytes after it");
	close_fd(fd, false);
	still_serving("replayed requests");
}

/* ---- many at once ------------------------------------------------------------------------ */

/* BURST clients connect at the same time; the listener takes every request, in any order. */
static void test_burst_of_connects(void **state)
{
	struct rdma_cm_id **cl = fx->many, **sv = fx->many + BURST;
	int nreq = 0, nest_c = 0, nest_s = 0, ndisc_c = 0, ndisc_s = 0;
	long long end;

	(void)state;
	listen_on(RDMA_PS_TCP, 8); /* a backlog smaller than the burst */
	fx->cch = channel();
	for (int i = 0; i < BURST; i++) {
		cl[i] = resolved(fx->cch, RDMA_PS_TCP, fx->port);
		create_qp(cl[i], IBV_QPT_RC);
	}
	for (int i = 0; i < BURST; i++)
		EXPECT_OK(rdma_connect(cl[i], NULL));
	end = now_ms() + 4 * WAIT_MS;
	while (nreq < BURST || nest_c < BURST || nest_s < BURST) {
		struct rdma_event_channel *chs[2] = { fx->lch, fx->cch };
		bool any = false;

		for (int c = 0; c < 2; c++) {
			struct rdma_cm_event *ev = next_event(chs[c], 0);

			if (!ev)
				continue;
			any = true;
			if (ev->status)
				fail_msg("burst: %s status %d", rdma_event_str(ev->event), ev->status);
			if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
				sv[nreq] = ev->id;
				create_qp(sv[nreq], IBV_QPT_RC);
				EXPECT_OK(rdma_accept(sv[nreq], NULL));
				nreq++;
			} else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
				c ? nest_c++ : nest_s++;
			} else {
				fail_msg("burst: unexpected %s", rdma_event_str(ev->event));
			}
			assert_int_equal(rdma_ack_cm_event(ev), 0);
		}
		if (!any && now_ms() > end)
			fail_msg("burst of %d: %d requests, %d + %d ESTABLISHED after %d ms", BURST,
				 nreq, nest_c, nest_s, 4 * WAIT_MS);
		if (!any) {
			struct pollfd p[2] = { { .fd = fx->lch->fd, .events = POLLIN },
					       { .fd = fx->cch->fd, .events = POLLIN } };

			poll(p, 2, 100);
		}
	}
	/* Of each pair one side disconnects: the client for odd i, else the server whose
	 * peer it is (requests came in any order; the ports tell the pairs). */
	for (int i = 0; i < BURST; i++) {
		struct rdma_cm_id *first = cl[i];

		for (int j = 0; j < BURST && !(i & 1); j++)
			if (rdma_get_dst_port(sv[j]) == rdma_get_src_port(cl[i]))
				first = sv[j];
		if (!(i & 1) && first == cl[i])
			fail_msg("burst: no server id has client %d's port as its peer's", i);
		EXPECT_OK(rdma_disconnect(first));
	}
	end = now_ms() + 4 * WAIT_MS;
	while (ndisc_c < BURST || ndisc_s < BURST) {
		struct rdma_cm_event *ev = next_event(fx->lch, 0);

		/* (Each DISCONNECTED of the same-host protocol is followed by its id's
		 * TIMEWAIT_EXIT 10 ms later: on a slow machine some come while others are
		 * still to be read. Not counted.) */
		if (ev) {
			if (ev->event != RDMA_CM_EVENT_DISCONNECTED &&
			    ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT)
				fail_msg("burst: %s on the listener's side", rdma_event_str(ev->event));
			ndisc_s += ev->event == RDMA_CM_EVENT_DISCONNECTED;
			assert_int_equal(rdma_ack_cm_event(ev), 0);
		}
		if ((ev = next_event(fx->cch, 0))) {
			if (ev->event != RDMA_CM_EVENT_DISCONNECTED &&
			    ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT)
				fail_msg("burst: %s on the clients' side", rdma_event_str(ev->event));
			ndisc_c += ev->event == RDMA_CM_EVENT_DISCONNECTED;
			assert_int_equal(rdma_ack_cm_event(ev), 0);
		}
		if (now_ms() > end)
			fail_msg("burst: %d + %d of %d DISCONNECTED after %d ms", ndisc_c, ndisc_s,
				 BURST, 4 * WAIT_MS);
	}
	for (int i = 0; i < 2 * BURST; i++)
		destroy_id(&fx->many[i]);
	still_serving("a burst of connections");
}

/* ---- 6. a long-lived listener ------------------------------------------------------------ */

static void cycle(int i)
{
	char what[64];
	struct rdma_cm_event *ev;

	snprintf(what, sizeof(what), "cycle %d", i);
	fx->client = resolved(fx->cch, RDMA_PS_TCP, fx->port);
	create_qp(fx->client, IBV_QPT_RC);
	EXPECT_OK(rdma_connect(fx->client, NULL));
	ev = expect_event(fx->lch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, NULL, what);
	fx->server = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	create_qp(fx->server, IBV_QPT_RC);
	EXPECT_OK(rdma_accept(fx->server, NULL));
	expect_ack(fx->cch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->client, what);
	expect_ack(fx->lch, RDMA_CM_EVENT_ESTABLISHED, 0, fx->server, what);
	/* Each side goes first every other time. */
	disconnect_rc(i & 1, what);
}

static void test_connect_disconnect_1000_cycles(void **state)
{
	size_t m0, m1;
	long rss0, rss1;
	int fd0, fd1;
	long long t0, ms;

	(void)state;
	listen_on(RDMA_PS_TCP, 64);
	fx->cch = channel();
	for (int i = 0; i < WARMUP; i++)
		cycle(i);
	fd0 = count_fds();
	rss0 = vm_rss_kib();
	m0 = malloc_in_use();
	t0 = now_ms();
	for (int i = 0; i < CYCLES; i++)
		cycle(WARMUP + i);
	ms = now_ms() - t0;
	fd1 = count_fds();
	rss1 = vm_rss_kib();
	m1 = malloc_in_use();
	print_message("    %d connect/disconnect cycles in %lld ms (%.1f us each)\n", CYCLES, ms,
		      ms * 1000.0 / CYCLES);
	print_message("    fds %d -> %d; VmRSS %ld -> %ld KiB; malloc in use %zu -> %zu bytes\n",
		      fd0, fd1, rss0, rss1, m0, m1);
	if (fd1 > fd0 + 2)
		fail_msg("%d more fds after %d cycles", fd1 - fd0, CYCLES);
	/* A leak of one small object per cycle would show as 100 KiB and more. */
	assert_true(m0 > 0); /* the count is read (under ASan too), not a 0 compared to 0 */
	if (m1 > m0 + 64 * 1024)
		fail_msg("malloc'd memory grew by %zu bytes over %d cycles", m1 - m0, CYCLES);
	/* ASan's quarantine holds freed memory: RSS grows by design there, so under ASan
	 * only the allocator's own count above says whether memory leaks. */
#if !RB_ASAN
	if (rss1 > rss0 + 4096)
		fail_msg("VmRSS grew by %ld KiB over %d cycles", rss1 - rss0, CYCLES);
#endif
	if (ms > 60000)
		fail_msg("%d cycles took %lld ms", CYCLES, ms);
}

/*
 * rping's race at exit: its main thread destroys the event channel its CM thread reads.
 * A reader that comes back only after that gets -1 / EBADF (rdma-core's read of the
 * closed descriptor fails so), from memory still valid: under ASan a read of the freed
 * channel would be reported. Destroying many more channels in between changes nothing.
 */
static void test_get_event_after_channel_destroyed(void **state)
{
	struct rdma_event_channel *late[3];
	struct rdma_cm_event *ev;

	(void)state;
	for (int i = 0; i < 3; i++) {
		late[i] = rdma_create_event_channel();
		assert_non_null(late[i]);
		rdma_destroy_event_channel(late[i]);
		EXPECT_ERRNO(rdma_get_cm_event(late[i], &ev), EBADF);
	}
	for (int i = 0; i < 10; i++) {
		struct rdma_event_channel *c = rdma_create_event_channel();

		assert_non_null(c);
		rdma_destroy_event_channel(c);
	}
	EXPECT_ERRNO(rdma_get_cm_event(late[2], &ev), EBADF);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_connect_no_listener_rc_rejected),
		T(test_connect_no_listener_ud_unreachable),
		T(test_resolve_addr_off_host),
		T(test_half_request_then_close),
		T(test_active_killed_before_accept),
		T(test_passive_killed_holding_request),
		T(test_passive_killed_after_accept),
		T(test_passive_killed_when_established),
		T(test_active_killed_when_established),
		T(test_private_data_limits_rc),
		T(test_private_data_limits_ud),
		T(test_null_arguments),
		T(test_calls_in_wrong_state),
		T(test_garbage_is_dropped),
		T(test_silent_connections_dropped),
		T(test_destroyed_id_leaves_nothing_to_read),
		T(test_get_event_after_channel_destroyed),
		T(test_listener_destroyed_rejects_unread_request),
		T(test_listener_destroyed_children_carry_on),
		T(test_foreign_listener_answers),
		T(test_connect_ud_to_rc_listener),
		T(test_connect_rc_to_ud_listener),
		T(test_replayed_request),
		T(test_burst_of_connects),
		T(test_connect_disconnect_1000_cycles),
#undef T
	};

	if (argc >= 5 && !strcmp(argv[1], CHILD_FLAG))
		return child_main(argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
