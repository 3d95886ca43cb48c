/*
 * Black-box tests of the rdma_cm API (librdmacm.so.1) through rdma_* and ibv_* only.
 *
 * Expected behaviour is rdma-core 44's librdmacm over a RoCE port, as the kernel's RDMA CM
 * reports it to user space: private data limits and the padded lengths receivers see,
 * the fields of each event, reject reasons 8 and 28, UD (SIDR) statuses 1 and 2, one
 * DISCONNECTED per side, QPs moved inside the application's calls only.
 *
 * Most tests run both ends in this process: the listener on one event channel, the
 * connecting id on another, driven by reading their events in order. Tests that take a
 * family run over 127.0.0.1 and over ::1 (skipped, with a message, when ::1 is not
 * configured). A peer process (this program, run again with --cm-peer) is used only where
 * a process has to go away. Every wait is bounded (CT_WAIT_MS).
 */
#include "rdmacm/cm_test_util.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A short wait for checks that something does NOT happen. */
/* How long "no event" is watched: an event the library makes comes in milliseconds;
 * 500 ms also sees one a loaded machine delays. */
#define QUIET_MS 500

/* ---- the fixture ---------------------------------------------------------------------- */

struct fx {
	int family;
	struct ct_pair p, q;
	struct rdma_event_channel *ch[4];
	int nch;
	struct rdma_cm_id *ids[8];
	int nids;
	pid_t peer;
	int peer_sock;
	bool leak; /* a thread may still use what the test made: leave it */
	void *mem[2]; /* freed by teardown (unless leak) */
	struct ibv_mr *mrs[4];  /* registered by reg(), not yet deregistered */
	/* verbs objects a test made itself (test_connect_response_and_establish) */
	struct ibv_qp *own_qp;
	struct ibv_cq *own_cq;
	struct ibv_mr *own_mr;
	struct ibv_pd *own_pd;
	struct ibv_ah *ahs[2];
};

static int fam4 = AF_INET;
static int fam6 = AF_INET6;

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->family = *state ? *(int *)*state : AF_INET;
	f->peer_sock = -1;
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;

	unsetenv("SOFTVERBS_LOOPBACK"); /* test_bind_loopback_device, if it failed midway */
	if (f->peer > 0) {
		kill(f->peer, SIGKILL);
		waitpid(f->peer, NULL, 0);
	}
	if (f->peer_sock >= 0)
		close(f->peer_sock);
	if (!f->leak) {
		for (size_t i = 0; i < ARRAY_LEN(f->mrs); i++)
			if (f->mrs[i])
				ibv_dereg_mr(f->mrs[i]);
		for (size_t i = 0; i < ARRAY_LEN(f->ahs); i++)
			if (f->ahs[i])
				ibv_destroy_ah(f->ahs[i]);
		if (f->own_mr)
			ibv_dereg_mr(f->own_mr);
		if (f->own_qp)
			ibv_destroy_qp(f->own_qp);
		if (f->own_cq)
			ibv_destroy_cq(f->own_cq);
		if (f->own_pd)
			ibv_dealloc_pd(f->own_pd);
		for (int i = f->nids - 1; i >= 0; i--) {
			if (!f->ids[i])
				continue;
			if (f->ids[i]->qp)
				rdma_destroy_qp(f->ids[i]);
			rdma_destroy_id(f->ids[i]);
		}
		ct_pair_close(&f->p);
		ct_pair_close(&f->q);
		for (int i = f->nch - 1; i >= 0; i--)
			rdma_destroy_event_channel(f->ch[i]);
		free(f->mem[0]);
		free(f->mem[1]);
	} else {
		/* Still reachable for threads that outlived their test (and for LeakSanitizer). */
		static void *kept[32];
		static int nkept;

		for (int i = 0; i < 2 && nkept < (int)ARRAY_LEN(kept); i++)
			kept[nkept++] = f->mem[i];
	}
	free(f);
	*state = NULL;
	return 0;
}

/* Skips the IPv6 case of a test when ::1 is not there. */
static void need_family(const struct fx *f)
{
	if (f->family == AF_INET6 && !ct_have_ipv6()) {
		print_message("::1 is not configured on this host: IPv6 case skipped\n");
		skip();
	}
}

static struct rdma_event_channel *fx_channel(struct fx *f)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (!ch)
		fail_msg("rdma_create_event_channel: errno %d", errno);
	assert_true(f->nch < (int)ARRAY_LEN(f->ch));
	f->ch[f->nch++] = ch;
	return ch;
}

static struct rdma_cm_id *fx_id(struct fx *f, struct rdma_event_channel *ch, void *ctx,
				enum rdma_port_space ps)
{
	struct rdma_cm_id *id = NULL;

	if (rdma_create_id(ch, &id, ctx, ps))
		fail_msg("rdma_create_id: errno %d", errno);
	assert_non_null(id);
	assert_true(f->nids < (int)ARRAY_LEN(f->ids));
	f->ids[f->nids++] = id;
	return id;
}

/* Tracks an id a test got from an event (teardown destroys it). */
static void fx_keep(struct fx *f, struct rdma_cm_id *id)
{
	assert_true(f->nids < (int)ARRAY_LEN(f->ids));
	f->ids[f->nids++] = id;
}

/* ---- small helpers -------------------------------------------------------------------- */

static void fill(void *buf, size_t len, unsigned seed)
{
	unsigned char *b = buf;

	for (size_t i = 0; i < len; i++)
		b[i] = (unsigned char)((i * 31 + seed * 17 + (i >> 8)) | 1);
}

/* The private data of an event: @len (what the event reports) must be @seen, the first
 * @sent_len bytes @sent's, the rest zero. */
static void check_pdata(const void *pd, uint8_t len, uint8_t seen, const void *sent,
			size_t sent_len, const char *what)
{
	const unsigned char *b = pd;

	if (len != seen)
		fail_msg("%s: private_data_len %u, expected %u", what, len, seen);
	if (!seen)
		return;
	assert_non_null(pd);
	if (sent_len && memcmp(pd, sent, sent_len))
		fail_msg("%s: the private data sent did not arrive as sent", what);
	for (size_t i = sent_len; i < seen; i++)
		if (b[i])
			fail_msg("%s: byte %zu after the %zu sent is 0x%02x, expected 0", what, i,
				 sent_len, b[i]);
}

static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

static bool is_loopback(const struct sockaddr *sa, int family)
{
	struct sockaddr_storage lo;

	return same_ip(sa, ct_loopback(&lo, family, 0));
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

static void wait_readable(int fd, int ms, const char *what)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int n;

	do
		n = poll(&pfd, 1, ms);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		fail_msg("waited %d ms for %s", ms, what);
}

/* An MR on the id's PD, deregistered by unreg() or teardown. */
static struct ibv_mr *reg(struct fx *f, struct rdma_cm_id *id, void *buf, size_t len, int access)
{
	struct ibv_mr *mr;

	assert_non_null(id->pd);
	mr = ibv_reg_mr(id->pd, buf, len, access);
	if (!mr)
		fail_msg("ibv_reg_mr: errno %d", errno);
	for (size_t i = 0; i < ARRAY_LEN(f->mrs); i++)
		if (!f->mrs[i]) {
			f->mrs[i] = mr;
			return mr;
		}
	fail_msg("reg: more than %zu MRs", ARRAY_LEN(f->mrs));
	return NULL;
}

static void unreg(struct fx *f, struct ibv_mr *mr)
{
	for (size_t i = 0; i < ARRAY_LEN(f->mrs); i++)
		if (f->mrs[i] == mr)
			f->mrs[i] = NULL;
	assert_int_equal(ibv_dereg_mr(mr), 0);
}

static void post_recv(struct rdma_cm_id *id, struct ibv_mr *mr, void *buf, uint32_t len,
		      uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_recv(id->qp, &wr, &bad), 0);
}

static void post_send(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len,
		      uint64_t wr_id, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	assert_int_equal(ibv_post_send(qp, &wr, &bad), 0);
}

/* ================================================================================== */
/* Calls that need no connection                                                      */
/* ================================================================================== */

/* rdma_event_str names every event exactly as rdma-core does; others are "UNKNOWN EVENT". */
static void test_event_str_names(void **state)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	  "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED",	  "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	  "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED",	  "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED",	  "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	  "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE",	  "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	(void)state;
	assert_int_equal(RDMA_CM_EVENT_TIMEWAIT_EXIT, 15);
	for (size_t i = 0; i < ARRAY_LEN(names); i++)
		assert_string_equal(rdma_event_str((enum rdma_cm_event_type)i), names[i]);
	assert_string_equal(rdma_event_str((enum rdma_cm_event_type)16), "UNKNOWN EVENT");
	assert_string_equal(rdma_event_str((enum rdma_cm_event_type)1000), "UNKNOWN EVENT");
}

/* rdma_get_devices: a NULL-terminated list holding one open context (the one ids use);
 * the count is optional. */
static void test_get_devices_one_context(void **state)
{
	struct fx *f = *state;
	struct ibv_context **list, **list2;
	struct ibv_device_attr attr;
	struct sockaddr_storage ss;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	int n = -1;

	list = rdma_get_devices(&n);
	assert_non_null(list);
	assert_int_equal(n, 1);
	assert_non_null(list[0]);
	assert_null(list[1]);
	assert_int_equal(ibv_query_device(list[0], &attr), 0);
	list2 = rdma_get_devices(NULL);
	assert_non_null(list2);
	assert_ptr_equal(list2[0], list[0]);
	assert_null(list2[1]);
	rdma_free_devices(list2);

	/* An id on the device uses the same context. */
	ch = fx_channel(f);
	id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(rdma_resolve_addr(id, NULL, ct_loopback(&ss, AF_INET, 7471), 2000), 0);
	ct_expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	assert_ptr_equal(id->verbs, list[0]);
	rdma_free_devices(list);
}

/* rdma_create_id: RC for RDMA_PS_TCP/IB, UD for RDMA_PS_UDP/IPOIB; other port spaces and a
 * NULL id pointer are EINVAL. */
static void test_create_id_port_spaces(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	static const struct {
		enum rdma_port_space ps;
		enum ibv_qp_type type;
	} cases[] = {
		{ RDMA_PS_TCP, IBV_QPT_RC },
		{ RDMA_PS_IB, IBV_QPT_RC },
		{ RDMA_PS_UDP, IBV_QPT_UD },
		{ RDMA_PS_IPOIB, IBV_QPT_UD },
	};
	struct rdma_cm_id *id = NULL;
	int ctx;

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		id = fx_id(f, ch, &ctx, cases[i].ps);
		assert_int_equal(id->ps, cases[i].ps);
		assert_int_equal(id->qp_type, cases[i].type);
		assert_ptr_equal(id->context, &ctx);
		assert_ptr_equal(id->channel, ch);
		assert_null(id->qp);
	}
	errno = 0;
	assert_int_equal(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x0999), -1);
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), -1);
	assert_int_equal(errno, EINVAL);
}

/* A channel whose fd the caller made O_NONBLOCK: rdma_get_cm_event is -1/EAGAIN while
 * empty; poll() reports POLLIN when an event is queued, and not after it was read. NULL
 * arguments are EINVAL. */
static void test_channel_nonblocking_and_poll(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;
	struct sockaddr_storage ss;
	struct rdma_cm_id *id;
	int fl = fcntl(ch->fd, F_GETFL);

	assert_true(ch->fd >= 0);
	assert_true(fl >= 0);
	assert_int_equal(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
	errno = 0;
	assert_int_equal(rdma_get_cm_event(ch, &ev), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(poll(&pfd, 1, 0), 0);

	id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(rdma_resolve_addr(id, NULL, ct_loopback(&ss, AF_INET, 7471), 2000), 0);
	if (poll(&pfd, 1, CT_WAIT_MS) != 1 || !(pfd.revents & POLLIN))
		fail_msg("poll on the channel fd: no POLLIN within %d ms with ADDR_RESOLVED due",
			 CT_WAIT_MS);
	assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
	assert_int_equal(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	assert_ptr_equal(ev->id, id);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	pfd.revents = 0;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	errno = 0;
	assert_int_equal(rdma_get_cm_event(ch, &ev), -1);
	assert_int_equal(errno, EAGAIN);

	errno = 0;
	assert_int_equal(rdma_get_cm_event(ch, NULL), -1);
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(rdma_ack_cm_event(NULL), -1);
	assert_int_equal(errno, EINVAL);
}

/* rdma_bind_addr with port 0 picks a port (rdma_get_src_port, network order, non-zero,
 * the same as in route.addr.src_addr); a second bind of the id is EINVAL. */
static void test_bind_port_zero(void **state)
{
	struct fx *f = *state;
	struct sockaddr_storage ss;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	uint16_t port;

	need_family(f);
	ch = fx_channel(f);
	id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(rdma_bind_addr(id, ct_loopback(&ss, f->family, 0)), 0);
	port = ntohs(rdma_get_src_port(id));
	assert_true(port != 0);
	assert_int_equal(id->route.addr.src_addr.sa_family, f->family);
	assert_int_equal(ct_port(&id->route.addr.src_addr), port);
	assert_true(is_loopback(rdma_get_local_addr(id), f->family));
	assert_int_equal(rdma_get_dst_port(id), 0);

	errno = 0;
	assert_int_equal(rdma_bind_addr(id, ct_loopback(&ss, f->family, 0)), -1);
	assert_int_equal(errno, EINVAL);
}

/* rdma_bind_addr to the loopback: softverbs0 answers there (id->verbs set, as rxe on lo);
 * with SOFTVERBS_LOOPBACK=0 the id holds the address but no device, as after a wildcard
 * bind, and a listener there still hears connects (libfabric's verbs provider between
 * hosts: it offers a loopback-bound id's address to its peers when the id has a device).
 * The wildcard never takes one. To an interface address: test_connect_over_interface_address. */
static void test_bind_loopback_device(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	struct sockaddr_storage ss;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;

	need_family(f);
	ch = fx_channel(f);
	id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(rdma_bind_addr(id, ct_loopback(&ss, f->family, 0)), 0);
	assert_non_null(id->verbs);

	assert_int_equal(setenv("SOFTVERBS_LOOPBACK", "0", 1), 0);
	id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(rdma_bind_addr(id, ct_loopback(&ss, f->family, 0)), 0);
	assert_null(id->verbs);
	assert_true(is_loopback(rdma_get_local_addr(id), f->family));
	id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = (sa_family_t)f->family;
	assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&ss), 0);
	assert_null(id->verbs);
	/* A listener bound to the loopback without a device: a connect reaches it, and the
	 * connection has the device. */
	ct_pair_listen(p, f->family, RDMA_PS_TCP);
	assert_null(p->listen_id->verbs);
	ct_pair_connect(p, NULL, NULL);
	assert_non_null(p->server->verbs);
	assert_int_equal(unsetenv("SOFTVERBS_LOOPBACK"), 0);
}

/* Binding a port another id listens on is EADDRINUSE. */
static void test_bind_port_of_listener_in_use(void **state)
{
	struct fx *f = *state;
	struct sockaddr_storage ss;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *a, *b;
	uint16_t port;

	need_family(f);
	ch = fx_channel(f);
	a = fx_id(f, ch, NULL, RDMA_PS_TCP);
	b = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(rdma_bind_addr(a, ct_loopback(&ss, f->family, 0)), 0);
	port = ntohs(rdma_get_src_port(a));
	assert_int_equal(rdma_listen(a, 4), 0);
	errno = 0;
	assert_int_equal(rdma_bind_addr(b, ct_loopback(&ss, f->family, port)), -1);
	assert_int_equal(errno, EADDRINUSE);
}

/*
 * Binding a port another id has bound (not listening) fails too: rdma_cm ids do not share
 * ports unless both set RDMA_OPTION_ID_REUSEADDR (kernel cma_check_port; its default is
 * off). The kernel answers EADDRINUSE, or EADDRNOTAVAIL when it counts the address as a
 * wildcard (it does so for the loopback); either is accepted, success is not.
 */
static void test_bind_port_of_bound_id_in_use(void **state)
{
	struct fx *f = *state;
	struct sockaddr_storage ss;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *a, *b;
	uint16_t port;
	int r;

	need_family(f);
	ch = fx_channel(f);
	a = fx_id(f, ch, NULL, RDMA_PS_TCP);
	b = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(rdma_bind_addr(a, ct_loopback(&ss, f->family, 0)), 0);
	port = ntohs(rdma_get_src_port(a));
	errno = 0;
	r = rdma_bind_addr(b, ct_loopback(&ss, f->family, port));
	if (r == 0)
		fail_msg("a second id bound port %u that another (bound, not listening) id "
			 "holds; expected -1/EADDRINUSE", port);
	if (errno != EADDRINUSE && errno != EADDRNOTAVAIL)
		fail_msg("bind of a port in use: errno %d, expected EADDRINUSE", errno);
}

/* A wildcard of @family on @port, AFONLY as @afonly (-1: not set). */
static int bind_any(struct rdma_cm_id *id, int family, uint16_t port, int afonly)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	ss.ss_family = (sa_family_t)family;
	if (family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons(port);
	if (afonly >= 0)
		assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &afonly,
						 sizeof(afonly)), 0);
	return rdma_bind_addr(id, (struct sockaddr *)&ss);
}

/*
 * The port space per address family, as kernel rdma_cm keeps it: 0.0.0.0:P and
 * [::]:P with RDMA_OPTION_ID_AFONLY listen side by side (a dual-stack server's two
 * listeners), while [::]:P without it (dual stack) overlaps IPv4 and is EADDRINUSE next
 * to 0.0.0.0:P, and 0.0.0.0:P next to it.
 */
static void test_bind_per_family(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *v4, *v6, *dual, *late4;
	uint16_t port;

	need_family(f);
	ch = fx_channel(f);
	v4 = fx_id(f, ch, NULL, RDMA_PS_TCP);
	v6 = fx_id(f, ch, NULL, RDMA_PS_TCP);
	dual = fx_id(f, ch, NULL, RDMA_PS_TCP);
	late4 = fx_id(f, ch, NULL, RDMA_PS_TCP);
	assert_int_equal(bind_any(v4, AF_INET, 0, -1), 0);
	port = ntohs(rdma_get_src_port(v4));
	assert_int_equal(rdma_listen(v4, 4), 0);
	errno = 0;
	assert_int_equal(bind_any(dual, AF_INET6, port, 0), -1);
	assert_int_equal(errno, EADDRINUSE);
	if (bind_any(v6, AF_INET6, port, 1))
		fail_msg("[::]:%u with AFONLY beside 0.0.0.0:%u: errno %d", port, port, errno);
	assert_int_equal(rdma_listen(v6, 4), 0);
	/* The other way round: a dual-stack wildcard first holds the port for IPv4 too. */
	assert_int_equal(rdma_destroy_id(v4), 0);
	assert_int_equal(rdma_destroy_id(v6), 0);
	f->ids[0] = f->ids[1] = NULL;
	assert_int_equal(bind_any(dual, AF_INET6, port, 0), 0);
	errno = 0;
	assert_int_equal(bind_any(late4, AF_INET, port, -1), -1);
	assert_int_equal(errno, EADDRINUSE);
}

/* Bad addresses: an unsupported family is EAFNOSUPPORT, NULL is EINVAL. */
static void test_bind_bad_address(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_id *id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	ss.ss_family = AF_UNIX;
	errno = 0;
	assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&ss), -1);
	assert_int_equal(errno, EAFNOSUPPORT);
	errno = 0;
	assert_int_equal(rdma_bind_addr(id, NULL), -1);
	assert_int_equal(errno, EINVAL);
	/* The id is still usable. */
	assert_int_equal(rdma_bind_addr(id, ct_loopback(&ss, AF_INET, 0)), 0);
}

/* rdma_listen on an unbound id binds a wildcard address with a picked port; a connect to
 * 127.0.0.1 on that port reaches it. */
static void test_listen_unbound_binds_wildcard(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	struct rdma_cm_event *ev;
	uint16_t port;
	struct rdma_cm_id *l;
	int ctx;

	ct_skip_on_iwarp("a reject is REJECTED -ECONNREFUSED, not 28");
	ct_pair_channels(p, AF_INET, RDMA_PS_TCP);
	l = fx_id(f, p->lch, &ctx, RDMA_PS_TCP);
	assert_int_equal(rdma_listen(l, 4), 0);
	port = ntohs(rdma_get_src_port(l));
	assert_true(port != 0);
	ct_loopback(&p->addr, AF_INET, port);
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	assert_ptr_equal(ev->listen_id, l);
	assert_ptr_equal(ev->id->context, &ctx);
	fx_keep(f, ev->id);
	assert_int_equal(rdma_reject(ev->id, NULL, 0), 0);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_event(p->cch, RDMA_CM_EVENT_REJECTED, 28);
}

/* rdma_resolve_addr: ADDR_RESOLVED with id->verbs set and both addresses filled
 * (src: the loopback with a port, dst: as given); rdma_resolve_route: ROUTE_RESOLVED with
 * one path. Resolving a route first is EINVAL. */
static void test_resolve_addr_and_route(void **state)
{
	struct fx *f = *state;
	struct sockaddr_storage dst;
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int ctx;

	need_family(f);
	ch = fx_channel(f);
	id = fx_id(f, ch, &ctx, RDMA_PS_TCP);
	errno = 0;
	assert_int_equal(rdma_resolve_route(id, 2000), -1);
	assert_int_equal(errno, EINVAL);

	assert_int_equal(rdma_resolve_addr(id, NULL, ct_loopback(&dst, f->family, 7471), 2000), 0);
	ev = ct_wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, CT_WAIT_MS);
	assert_int_equal(ev->status, 0);
	assert_ptr_equal(ev->id, id);
	assert_null(ev->listen_id);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_non_null(id->verbs);
	assert_int_equal(id->port_num, 1);
	assert_int_equal(id->route.addr.src_addr.sa_family, f->family);
	assert_true(is_loopback(&id->route.addr.src_addr, f->family));
	assert_true(rdma_get_src_port(id) != 0);
	assert_true(same_ip(rdma_get_peer_addr(id), (struct sockaddr *)&dst));
	assert_int_equal(ntohs(rdma_get_dst_port(id)), 7471);

	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	ev = ct_wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, CT_WAIT_MS);
	assert_int_equal(ev->status, 0);
	assert_ptr_equal(ev->id, id);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(id->route.num_paths, 1);
	assert_non_null(id->route.path_rec);
}

/*
 * A destination that is not an address of this host: an RC id resolves it as kernel
 * rdma_cm does (iWARP), from the source address the routing table gives (no packet is
 * sent: the test compares with a UDP socket's connect), or gets ADDR_ERROR with the
 * route lookup's error; a UD id the same (its datagrams go on the UDP wire).
 */
static void test_resolve_addr_not_local(void **state)
{
	struct fx *f = *state;
	struct sockaddr_storage dst, src;
	socklen_t slen = sizeof(src);
	struct ifaddrs *ifs;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_id *id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	struct rdma_cm_id *ud = fx_id(f, ch, NULL, RDMA_PS_UDP);
	struct rdma_cm_event *ev;
	int route_err = 0, fd;

	/* TEST-NET-3 / the IPv6 documentation prefix, unless this host has it. */
	memset(&dst, 0, sizeof(dst));
	if (f->family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&dst;

		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, "2001:db8::7:7", &s6->sin6_addr), 1);
		s6->sin6_port = htons(7471);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&dst;

		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, "203.0.113.77", &s4->sin_addr), 1);
		s4->sin_port = htons(7471);
	}
	assert_int_equal(getifaddrs(&ifs), 0);
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
		if (i->ifa_addr && same_ip(i->ifa_addr, (struct sockaddr *)&dst)) {
			freeifaddrs(ifs);
			print_message("the test's foreign address is on this host: skipped\n");
			skip();
		}
	freeifaddrs(ifs);
	fd = socket(f->family, SOCK_DGRAM, 0);
	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&dst, (socklen_t)(f->family == AF_INET6 ?
			sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in))) ||
	    getsockname(fd, (struct sockaddr *)&src, &slen))
		route_err = errno;
	close(fd);

	for (int k = 0; k < 2; k++) { /* the RC id, then the UD id: the same answer */
		struct rdma_cm_id *x = k ? ud : id;

		assert_int_equal(rdma_resolve_addr(x, NULL, (struct sockaddr *)&dst, 2000), 0);
		if (route_err) {
			ev = ct_wait_event(ch, RDMA_CM_EVENT_ADDR_ERROR, CT_WAIT_MS);
			assert_int_equal(ev->status, -route_err);
		} else {
			ev = ct_wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, CT_WAIT_MS);
			assert_int_equal(ev->status, 0);
			assert_true(same_ip(&x->route.addr.src_addr, (struct sockaddr *)&src));
			assert_true(same_ip(rdma_get_peer_addr(x), (struct sockaddr *)&dst));
			assert_non_null(x->verbs);
		}
		assert_ptr_equal(ev->id, x);
		assert_int_equal(rdma_ack_cm_event(ev), 0);
	}
}

/* rdma_set_option: TOS takes 1 byte (and shows as the route's traffic class),
 * REUSEADDR and AFONLY an int; another length is EINVAL, an unknown option ENOSYS. */
static void test_set_option_lengths(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_id *id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	struct sockaddr_storage ss;
	uint8_t tos = 0x20;
	int one = 1, tos_int = 0x20;

	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1), 0);
	errno = 0;
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos_int,
					 sizeof(tos_int)), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one,
					 sizeof(one)), 0);
	errno = 0;
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &tos, 1),
			 -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one,
					 sizeof(one)), 0);
	errno = 0;
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &tos, 1), -1);
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, 77, &one, sizeof(one)), -1);
	assert_int_equal(errno, ENOSYS);

	/* The TOS set before route resolution is the path's traffic class. */
	assert_int_equal(rdma_resolve_addr(id, NULL, ct_loopback(&ss, AF_INET, 7471), 2000), 0);
	ct_expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	ct_expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	assert_non_null(id->route.path_rec);
	assert_int_equal(id->route.path_rec->traffic_class, 0x20);
}

/* rdma_migrate_id moves an id and its unread events to another channel: the old channel
 * no longer has them, the new one does, and later events go there too. */
static void test_migrate_id_moves_unread_events(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch1 = fx_channel(f), *ch2 = fx_channel(f);
	struct rdma_cm_id *id = fx_id(f, ch1, NULL, RDMA_PS_TCP);
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;

	assert_int_equal(rdma_resolve_addr(id, NULL, ct_loopback(&ss, AF_INET, 7471), 2000), 0);
	wait_readable(ch1->fd, CT_WAIT_MS, "ADDR_RESOLVED on the first channel");
	assert_int_equal(rdma_migrate_id(id, ch2), 0);
	assert_ptr_equal(id->channel, ch2);
	ct_expect_no_event(ch1, QUIET_MS, "the channel the id left");
	ev = ct_wait_event(ch2, RDMA_CM_EVENT_ADDR_RESOLVED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, id);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	ct_expect_event(ch2, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	ct_expect_no_event(ch1, 0, "the channel the id left");
}

/* rdma_getaddrinfo: RAI_PASSIVE fills ai_src_addr, an active lookup ai_dst_addr; the
 * port space / QP type follow the hints; a failure returns getaddrinfo's negative EAI_*
 * code; no node, service or hints is -1/EINVAL. */
static void test_getaddrinfo(void **state)
{
	struct fx *f = *state;
	struct rdma_addrinfo hints, *res = NULL;
	const char *host = f->family == AF_INET6 ? "::1" : "127.0.0.1";
	int ret;

	need_family(f);
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	assert_int_equal(rdma_getaddrinfo(host, "7471", &hints, &res), 0);
	assert_non_null(res);
	assert_true(res->ai_flags & RAI_PASSIVE);
	assert_int_equal(res->ai_family, f->family);
	assert_int_equal(res->ai_port_space, RDMA_PS_TCP);
	assert_int_equal(res->ai_qp_type, IBV_QPT_RC);
	assert_non_null(res->ai_src_addr);
	assert_true(res->ai_src_len > 0);
	assert_true(is_loopback(res->ai_src_addr, f->family));
	assert_int_equal(ct_port(res->ai_src_addr), 7471);
	assert_null(res->ai_dst_addr);
	rdma_freeaddrinfo(res);

	/* Passive without a node: the wildcard address. */
	res = NULL;
	hints.ai_family = f->family;
	assert_int_equal(rdma_getaddrinfo(NULL, "7471", &hints, &res), 0);
	assert_non_null(res->ai_src_addr);
	assert_int_equal(res->ai_src_addr->sa_family, f->family);
	if (f->family == AF_INET)
		assert_int_equal(((struct sockaddr_in *)res->ai_src_addr)->sin_addr.s_addr, 0);
	else
		assert_true(IN6_IS_ADDR_UNSPECIFIED(
			&((struct sockaddr_in6 *)res->ai_src_addr)->sin6_addr));
	rdma_freeaddrinfo(res);

	/* Active. */
	res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_UDP;
	assert_int_equal(rdma_getaddrinfo(host, "7174", &hints, &res), 0);
	assert_false(res->ai_flags & RAI_PASSIVE);
	assert_int_equal(res->ai_port_space, RDMA_PS_UDP);
	assert_int_equal(res->ai_qp_type, IBV_QPT_UD);
	assert_non_null(res->ai_dst_addr);
	assert_true(res->ai_dst_len > 0);
	assert_true(is_loopback(res->ai_dst_addr, f->family));
	assert_int_equal(ct_port(res->ai_dst_addr), 7174);
	assert_null(res->ai_src_addr);
	assert_null(res->ai_next);
	rdma_freeaddrinfo(res);

	/* Failures. */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	ret = rdma_getaddrinfo("not-a-number", "7471", &hints, &res);
	if (ret != EAI_NONAME)
		fail_msg("numeric host that is not: returned %d, expected EAI_NONAME (%d)", ret,
			 EAI_NONAME);
	ret = rdma_getaddrinfo(host, "no-such-service-cm", &hints, &res);
	if (ret != EAI_SERVICE)
		fail_msg("unknown service: returned %d, expected EAI_SERVICE (%d)", ret,
			 EAI_SERVICE);
	errno = 0;
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, NULL, &res), -1);
	assert_int_equal(errno, EINVAL);
}

/* The rsocket calls exist and fail with ENOSYS. */
static void test_rsocket_calls_enosys(void **state)
{
	struct sockaddr_storage ss;
	struct pollfd pfd = { .fd = 0, .events = POLLIN };
	char b[4] = { 0 };
	int v = 0;
	socklen_t vl = sizeof(v);

	(void)state;
#define EXPECT_ENOSYS(call)                                                                \
	do {                                                                               \
		errno = 0;                                                                 \
		if ((call) != -1 || errno != ENOSYS)                                       \
			fail_msg("%s: expected -1/ENOSYS, errno %d", #call, errno);        \
	} while (0)
	EXPECT_ENOSYS(rsocket(AF_INET, SOCK_STREAM, 0));
	EXPECT_ENOSYS(rbind(3, ct_loopback(&ss, AF_INET, 0), sizeof(struct sockaddr_in)));
	EXPECT_ENOSYS(rlisten(3, 1));
	EXPECT_ENOSYS(raccept(3, NULL, NULL));
	EXPECT_ENOSYS(rconnect(3, ct_loopback(&ss, AF_INET, 1), sizeof(struct sockaddr_in)));
	EXPECT_ENOSYS(rsend(3, b, sizeof(b), 0));
	EXPECT_ENOSYS(rrecv(3, b, sizeof(b), 0));
	EXPECT_ENOSYS(rpoll(&pfd, 1, 0));
	EXPECT_ENOSYS(rsetsockopt(3, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v)));
	EXPECT_ENOSYS(rgetsockopt(3, SOL_SOCKET, SO_REUSEADDR, &v, &vl));
	EXPECT_ENOSYS(rshutdown(3, SHUT_RDWR));
	EXPECT_ENOSYS(rclose(3));
#undef EXPECT_ENOSYS
}

/* A multicast group of @family (port 0). */
static struct sockaddr *mc_group(struct sockaddr_storage *ss, int family)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, "ff0e::cafe:7", &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, "239.7.7.7", &s4->sin_addr), 1);
	}
	return (struct sockaddr *)ss;
}

/*
 * Multicast as mckey uses it: UD ids resolve the group address (ADDR_RESOLVED), create
 * their QPs, rdma_join_multicast gives MULTICAST_JOIN with the join's context in
 * param.ud.private_data, QPN 0xFFFFFF, Q_Key RDMA_UDP_QKEY and an address handle
 * ibv_create_ah takes; a datagram sent there reaches the other member. Leaving works
 * once; a group never joined is EADDRNOTAVAIL.
 */
static void test_multicast_join_send_leave(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *a, *b, *ids[2];
	struct sockaddr_storage grp;
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	static unsigned char abuf[256], bbuf[512];
	struct ibv_mr *amr, *bmr;
	struct ibv_ah_attr ah_attr;
	struct ibv_wc wc;
	int ctx[2];

	need_family(f);
	ch = fx_channel(f);
	a = ids[0] = fx_id(f, ch, NULL, RDMA_PS_UDP);
	b = ids[1] = fx_id(f, ch, NULL, RDMA_PS_UDP);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(rdma_resolve_addr(ids[i], NULL, mc_group(&grp, f->family), 2000),
				 0);
		ev = ct_wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, CT_WAIT_MS);
		assert_ptr_equal(ev->id, ids[i]);
		assert_int_equal(ev->status, 0);
		assert_int_equal(rdma_ack_cm_event(ev), 0);
		assert_non_null(ids[i]->verbs);
		qa = ct_qp_attr(IBV_QPT_UD);
		if (rdma_create_qp(ids[i], NULL, &qa))
			fail_msg("rdma_create_qp (UD, multicast member %d): errno %d", i, errno);
	}
	for (int i = 0; i < 2; i++) {
		if (rdma_join_multicast(ids[i], mc_group(&grp, f->family), &ctx[i]))
			fail_msg("rdma_join_multicast (member %d): errno %d", i, errno);
		ev = ct_wait_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN, CT_WAIT_MS);
		assert_ptr_equal(ev->id, ids[i]);
		assert_int_equal(ev->status, 0);
		assert_ptr_equal(ev->param.ud.private_data, &ctx[i]);
		assert_int_equal(ev->param.ud.qp_num, 0xffffff);
		assert_int_equal(ev->param.ud.qkey, RDMA_UDP_QKEY);
		if (i == 0)
			ah_attr = ev->param.ud.ah_attr;
		assert_int_equal(rdma_ack_cm_event(ev), 0);
	}
	f->ahs[0] = ibv_create_ah(a->pd, &ah_attr);
	if (!f->ahs[0])
		fail_msg("ibv_create_ah with MULTICAST_JOIN's ah_attr: errno %d", errno);

	amr = reg(f, a, abuf, sizeof(abuf), IBV_ACCESS_LOCAL_WRITE);
	bmr = reg(f, b, bbuf, sizeof(bbuf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(b, bmr, bbuf, 40 + 128, 61);
	fill(abuf, 100, 17);
	{
		struct ibv_sge sge = { .addr = (uintptr_t)abuf, .length = 100, .lkey = amr->lkey };
		struct ibv_send_wr wr = { .wr_id = 62, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		wr.wr.ud.ah = f->ahs[0];
		wr.wr.ud.remote_qpn = 0xffffff;
		wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
		assert_int_equal(ibv_post_send(a->qp, &wr, &bad), 0);
	}
	/* The sender's completion first: it moves the sender's work (see
	 * test_send_completes_polling_only_requester for why the order matters here). */
	ct_expect_wc(a->send_cq, 62, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	ct_expect_wc(b->recv_cq, 61, IBV_WC_SUCCESS, CT_WAIT_MS, &wc);
	assert_int_equal(wc.byte_len, 40 + 100);
	assert_int_equal(wc.src_qp, a->qp->qp_num);
	assert_memory_equal(bbuf + 40, abuf, 100);

	assert_int_equal(rdma_leave_multicast(b, mc_group(&grp, f->family)), 0);
	errno = 0;
	assert_int_equal(rdma_leave_multicast(b, mc_group(&grp, f->family)), -1);
	assert_int_equal(errno, EADDRNOTAVAIL);
	assert_int_equal(rdma_leave_multicast(a, mc_group(&grp, f->family)), 0);
	assert_int_equal(ibv_destroy_ah(f->ahs[0]), 0);
	f->ahs[0] = NULL;
	unreg(f, amr);
	unreg(f, bmr);
}

/* Resolves @id (on @ch) towards the loopback of @family, reading both events. */
static void resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, int family,
		    uint16_t port)
{
	struct sockaddr_storage ss;

	assert_int_equal(rdma_resolve_addr(id, NULL, ct_loopback(&ss, family, port), 2000), 0);
	ct_expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	ct_expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
}

/*
 * rdma_create_qp with no PD and no CQs: the id's default PD (id->pd), CQs the library
 * makes with their own completion channels (cq_context = the id) in id->send_cq/recv_cq,
 * written back into the caller's attributes; an RC QP is left in INIT. A second QP is
 * EINVAL. rdma_destroy_qp takes the QP and those CQs away.
 */
static void test_create_qp_defaults_rc(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_id *id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC), qa2 = ct_qp_attr(IBV_QPT_RC);

	resolve(ch, id, AF_INET, 7471);
	if (rdma_create_qp(id, NULL, &qa))
		fail_msg("rdma_create_qp: errno %d", errno);
	assert_non_null(id->qp);
	assert_non_null(id->pd);
	assert_ptr_equal(id->qp->pd, id->pd);
	assert_ptr_equal(id->pd->context, id->verbs);
	assert_non_null(id->send_cq);
	assert_non_null(id->recv_cq);
	assert_non_null(id->send_cq_channel);
	assert_non_null(id->recv_cq_channel);
	assert_ptr_equal(id->send_cq->cq_context, id);
	assert_ptr_equal(id->recv_cq->cq_context, id);
	assert_ptr_equal(id->send_cq->channel, id->send_cq_channel);
	assert_ptr_equal(id->recv_cq->channel, id->recv_cq_channel);
	assert_ptr_equal(id->qp->send_cq, id->send_cq);
	assert_ptr_equal(id->qp->recv_cq, id->recv_cq);
	assert_ptr_equal(qa.send_cq, id->send_cq);
	assert_ptr_equal(qa.recv_cq, id->recv_cq);
	assert_true(qa.cap.max_send_wr >= CT_QP_WR);
	assert_true(qa.cap.max_recv_wr >= CT_QP_WR);
	assert_int_equal(id->qp->qp_type, IBV_QPT_RC);
	assert_int_equal(qp_state(id->qp), IBV_QPS_INIT);

	errno = 0;
	assert_int_equal(rdma_create_qp(id, NULL, &qa2), -1);
	assert_int_equal(errno, EINVAL);

	rdma_destroy_qp(id);
	assert_null(id->qp);
	assert_null(id->send_cq);
	assert_null(id->recv_cq);
	assert_null(id->send_cq_channel);
	assert_null(id->recv_cq_channel);
}

/* With the caller's PD and CQ the QP uses them, and rdma_destroy_qp leaves the CQ (the
 * caller destroys it afterwards). A PD of another context is EINVAL. */
static void test_create_qp_callers_pd_and_cq(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_id *id = fx_id(f, ch, NULL, RDMA_PS_TCP);
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct ibv_device **devs;
	struct ibv_context *other;
	struct ibv_pd *pd, *opd;
	struct ibv_cq *cq;
	int n = 0;

	resolve(ch, id, AF_INET, 7471);
	pd = ibv_alloc_pd(id->verbs);
	cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0);
	assert_non_null(pd);
	assert_non_null(cq);

	/* Another context's PD. */
	devs = ibv_get_device_list(&n);
	assert_non_null(devs);
	assert_true(n >= 1);
	other = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	assert_non_null(other);
	opd = ibv_alloc_pd(other);
	assert_non_null(opd);
	qa.send_cq = qa.recv_cq = cq;
	errno = 0;
	assert_int_equal(rdma_create_qp(id, opd, &qa), -1);
	assert_int_equal(errno, EINVAL);
	assert_null(id->qp);
	assert_int_equal(ibv_dealloc_pd(opd), 0);
	assert_int_equal(ibv_close_device(other), 0);

	qa = ct_qp_attr(IBV_QPT_RC);
	qa.send_cq = qa.recv_cq = cq;
	if (rdma_create_qp(id, pd, &qa))
		fail_msg("rdma_create_qp with the caller's PD and CQ: errno %d", errno);
	assert_ptr_equal(id->qp->pd, pd);
	assert_ptr_equal(id->pd, pd);
	assert_ptr_equal(id->qp->send_cq, cq);
	assert_ptr_equal(id->qp->recv_cq, cq);
	assert_int_equal(qp_state(id->qp), IBV_QPS_INIT);
	rdma_destroy_qp(id);
	assert_null(id->qp);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* A UD id's QP comes out of rdma_create_qp in RTS with Q_Key RDMA_UDP_QKEY. */
static void test_create_qp_ud_ready(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_id *id = fx_id(f, ch, NULL, RDMA_PS_UDP);
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_UD), ia;
	struct ibv_qp_attr a;

	resolve(ch, id, AF_INET, 7174);
	if (rdma_create_qp(id, NULL, &qa))
		fail_msg("rdma_create_qp (UD): errno %d", errno);
	assert_int_equal(id->qp->qp_type, IBV_QPT_UD);
	assert_int_equal(ibv_query_qp(id->qp, &a, IBV_QP_STATE | IBV_QP_QKEY, &ia), 0);
	assert_int_equal(a.qp_state, IBV_QPS_RTS);
	assert_int_equal(a.qkey, RDMA_UDP_QKEY);
	rdma_destroy_qp(id);
	assert_null(id->qp);
}

/* rdma_init_qp_attr before a connection: INIT with STATE|PKEY_INDEX|PORT and ACCESS_FLAGS
 * (RC) or QKEY = RDMA_UDP_QKEY (UD); port 1. A state past ERR is EINVAL. */
static void test_init_qp_attr_before_connect(void **state)
{
	struct fx *f = *state;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_id *rc = fx_id(f, ch, NULL, RDMA_PS_TCP);
	struct rdma_cm_id *ud = fx_id(f, ch, NULL, RDMA_PS_UDP);
	const int base = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	struct ibv_qp_attr a;
	int mask = 0;

	resolve(ch, rc, AF_INET, 7471);
	resolve(ch, ud, AF_INET, 7174);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	assert_int_equal(rdma_init_qp_attr(rc, &a, &mask), 0);
	assert_int_equal(mask, base | IBV_QP_ACCESS_FLAGS);
	assert_int_equal(a.qp_state, IBV_QPS_INIT);
	assert_int_equal(a.port_num, rc->port_num);
	assert_int_equal(a.port_num, 1);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	assert_int_equal(rdma_init_qp_attr(ud, &a, &mask), 0);
	assert_int_equal(mask, base | IBV_QP_QKEY);
	assert_int_equal(a.qkey, RDMA_UDP_QKEY);
	assert_int_equal(a.port_num, 1);

	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)(IBV_QPS_ERR + 1);
	errno = 0;
	assert_int_equal(rdma_init_qp_attr(rc, &a, &mask), -1);
	assert_int_equal(errno, EINVAL);
}

/* ================================================================================== */
/* RC connections                                                                     */
/* ================================================================================== */

/*
 * CONNECT_REQUEST: listen_id = the listener, id = a new id with verbs set and the
 * listener's context and channel; route src = local address + listening port, dst = the
 * connecting id's address and port; responder_resources / initiator_depth swapped;
 * qp_num = the remote QPN; private data padded to 56 (bytes sent first, then zeros).
 */
static void test_connect_request_fields(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	unsigned char pd[40];
	struct rdma_conn_param cp = { .responder_resources = 3, .initiator_depth = 5,
				      .retry_count = 6, .rnr_retry_count = 4,
				      .private_data = pd, .private_data_len = sizeof(pd) };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *nid;

	ct_skip_on_iwarp("no QPN or IB CM padding in an MPA request");
	need_family(f);
	fill(pd, sizeof(pd), 1);
	ct_pair_listen(p, f->family, RDMA_PS_TCP);
	ct_client_connect(p, &cp);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	nid = p->server = ev->id;
	assert_int_equal(ev->status, 0);
	assert_ptr_equal(ev->listen_id, p->listen_id);
	assert_non_null(nid);
	assert_true(nid != p->listen_id && nid != p->client);
	assert_non_null(nid->verbs);
	assert_ptr_equal(nid->context, p);
	assert_ptr_equal(nid->channel, p->lch);
	assert_int_equal(nid->ps, RDMA_PS_TCP);
	assert_int_equal(nid->qp_type, IBV_QPT_RC);
	assert_null(nid->qp);

	assert_int_equal(nid->route.addr.src_addr.sa_family, f->family);
	assert_true(is_loopback(rdma_get_local_addr(nid), f->family));
	assert_int_equal(ct_port(rdma_get_local_addr(nid)), ct_port((struct sockaddr *)&p->addr));
	assert_int_equal(rdma_get_src_port(nid), rdma_get_src_port(p->listen_id));
	assert_true(same_ip(rdma_get_peer_addr(nid), rdma_get_local_addr(p->client)));
	assert_true(rdma_get_src_port(p->client) != 0);
	assert_int_equal(ntohs(rdma_get_dst_port(nid)), ntohs(rdma_get_src_port(p->client)));

	assert_int_equal(ev->param.conn.responder_resources, 5);
	assert_int_equal(ev->param.conn.initiator_depth, 3);
	assert_int_equal(ev->param.conn.qp_num, p->client->qp->qp_num);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 56, pd,
		    sizeof(pd), "CONNECT_REQUEST");
	assert_int_equal(rdma_ack_cm_event(ev), 0);

	assert_int_equal(rdma_reject(nid, NULL, 0), 0);
	ct_expect_event(p->cch, RDMA_CM_EVENT_REJECTED, 28);
}

/*
 * rdma_accept moves the passive QP to RTS before it answers. The active side's
 * ESTABLISHED carries the reply's values swapped, the passive QPN, private data padded to
 * 196; its QP goes to RTS when the application reads that event, and only then (the RTU)
 * does the passive side get its ESTABLISHED.
 */
static void test_established_fields_and_order(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	unsigned char pd[100];
	struct rdma_conn_param cp = { .responder_resources = 3, .initiator_depth = 5,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_conn_param sp = { .responder_resources = 2, .initiator_depth = 4,
				      .rnr_retry_count = 6, .private_data = pd,
				      .private_data_len = sizeof(pd) };
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct rdma_cm_event *ev;

	ct_skip_on_iwarp("the passive side is ESTABLISHED at its reply (no RTU)");
	need_family(f);
	fill(pd, sizeof(pd), 2);
	ct_pair_listen(p, f->family, RDMA_PS_TCP);
	ct_client_connect(p, &cp);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->server = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_create_qp(p->server, NULL, &qa), 0);
	assert_int_equal(qp_state(p->server->qp), IBV_QPS_INIT);
	assert_int_equal(rdma_accept(p->server, &sp), 0);
	assert_int_equal(qp_state(p->server->qp), IBV_QPS_RTS);

	wait_readable(p->cch->fd, CT_WAIT_MS, "the reply at the connecting side");
	assert_int_equal(qp_state(p->client->qp), IBV_QPS_INIT);
	ct_expect_no_event(p->lch, QUIET_MS,
			   "passive side before the active side read its ESTABLISHED");

	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	assert_int_equal(ev->status, 0);
	assert_ptr_equal(ev->id, p->client);
	assert_int_equal(ev->param.conn.responder_resources, 4);
	assert_int_equal(ev->param.conn.initiator_depth, 2);
	assert_int_equal(ev->param.conn.qp_num, p->server->qp->qp_num);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 196, pd,
		    sizeof(pd), "active ESTABLISHED");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(qp_state(p->client->qp), IBV_QPS_RTS);

	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	assert_int_equal(ev->status, 0);
	assert_ptr_equal(ev->id, p->server);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_no_event(p->cch, 0, "connecting side once established");
}

/* After connecting, SENDs flow both ways and arrive byte for byte. */
static void test_send_recv_both_ways(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	static unsigned char cbuf[4096], sbuf[4096];
	struct ibv_mr *cmr, *smr;
	struct ibv_wc wc;
	unsigned char want[1000];

	need_family(f);
	ct_pair_open(p, f->family);
	memset(cbuf, 0, sizeof(cbuf));
	memset(sbuf, 0, sizeof(sbuf));
	cmr = reg(f, p->client, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	smr = reg(f, p->server, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(p->server, smr, sbuf + 2048, 1024, 1);
	post_recv(p->client, cmr, cbuf + 2048, 1024, 2);

	fill(cbuf, 1000, 7);
	post_send(p->client->qp, cmr, cbuf, 1000, 3, IBV_WR_SEND, 0, 0);
	ct_expect_wc(p->server->recv_cq, 1, IBV_WC_SUCCESS, CT_WAIT_MS, &wc);
	ct_expect_wc(p->client->send_cq, 3, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, 1000);
	assert_int_equal(wc.qp_num, p->server->qp->qp_num);
	fill(want, sizeof(want), 7);
	assert_memory_equal(sbuf + 2048, want, 1000);

	fill(sbuf, 777, 9);
	post_send(p->server->qp, smr, sbuf, 777, 4, IBV_WR_SEND, 0, 0);
	ct_expect_wc(p->client->recv_cq, 2, IBV_WC_SUCCESS, CT_WAIT_MS, &wc);
	ct_expect_wc(p->server->send_cq, 4, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	assert_int_equal(wc.byte_len, 777);
	fill(want, 777, 9);
	assert_memory_equal(cbuf + 2048, want, 777);

	unreg(f, cmr);
	unreg(f, smr);
}

/*
 * With both RC QPs in this process, a SEND whose application polls only the requester's
 * CQ completes there: as on a NIC, the responder acknowledges without its application.
 * (It once stalled: QPs created while the progress thread slept had unarmed fifos, and a
 * sender of the same process wakes nobody; new fifos are now born armed.) The same holds
 * when the requester sleeps in its completion channel (test_sync_endpoints_messages).
 * Four messages, 10 s each at most (milliseconds on an idle machine; a stall is for ever).
 */
static void test_send_completes_polling_only_requester(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	static unsigned char cbuf[256], sbuf[1024];
	struct ibv_mr *cmr, *smr;
	struct ibv_wc wc;

	ct_pair_open(p, AF_INET);
	cmr = reg(f, p->client, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	smr = reg(f, p->server, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 4; i++)
		post_recv(p->server, smr, sbuf + 256 * i, 256, 100 + (uint64_t)i);
	for (int i = 0; i < 4; i++) {
		struct timespec t0, t;
		int n;

		fill(cbuf, 64, (unsigned)i);
		post_send(p->client->qp, cmr, cbuf, 64, 200 + (uint64_t)i, IBV_WR_SEND, 0, 0);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			n = ibv_poll_cq(p->client->send_cq, 1, &wc);
			clock_gettime(CLOCK_MONOTONIC, &t);
		} while (n == 0 && (t.tv_sec - t0.tv_sec) * 1000 +
					   (t.tv_nsec - t0.tv_nsec) / 1000000 < 10000);
		if (n == 0) {
			bool received = ibv_poll_cq(p->server->recv_cq, 1, &wc) == 1;

			fail_msg("same-process RC: SEND %d not completed "
				 "at the requester within 10 s while only its CQ was "
				 "polled; the responder's receive %s completed",
				 i, received ? "HAD" : "had not");
		}
		assert_int_equal(n, 1);
		assert_int_equal(wc.wr_id, 200 + (uint64_t)i);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		ct_expect_wc(p->server->recv_cq, 100 + (uint64_t)i, IBV_WC_SUCCESS, CT_WAIT_MS,
			     NULL);
	}
	unreg(f, cmr);
	unreg(f, smr);
}

struct remote_buf {
	uint64_t addr; /* big endian */
	uint32_t rkey; /* big endian */
	uint32_t len;  /* big endian */
};

/* The passive side hands {addr, rkey, len} of a REMOTE_WRITE buffer over in rdma_accept's
 * private data; the active side RDMA WRITEs into it, then SENDs; the bytes are there and
 * nothing around them changed. */
static void test_rdma_write_rkey_in_private_data(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	static unsigned char cbuf[4096], sbuf[8192];
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct rdma_conn_param sp = { .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7 };
	struct remote_buf rb, got;
	struct ibv_mr *cmr, *smr;
	struct rdma_cm_event *ev;
	unsigned char want[3000];

	need_family(f);
	memset(sbuf, 0, sizeof(sbuf));
	ct_pair_listen(p, f->family, RDMA_PS_TCP);
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->server = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_create_qp(p->server, NULL, &qa), 0);
	smr = reg(f, p->server, sbuf, sizeof(sbuf),
		  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	post_recv(p->server, smr, sbuf + 4096, 64, 10);
	rb.addr = htobe64((uintptr_t)sbuf);
	rb.rkey = htonl(smr->rkey);
	rb.len = htonl(4096);
	sp.private_data = &rb;
	sp.private_data_len = sizeof(rb);
	assert_int_equal(rdma_accept(p->server, &sp), 0);

	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	assert_true(ev->param.conn.private_data_len >= sizeof(got));
	memcpy(&got, ev->param.conn.private_data, sizeof(got));
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_event(p->lch, RDMA_CM_EVENT_ESTABLISHED, 0);
	assert_int_equal(ntohl(got.len), 4096);

	cmr = reg(f, p->client, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	fill(cbuf, 3000, 11);
	post_send(p->client->qp, cmr, cbuf, 3000, 20, IBV_WR_RDMA_WRITE,
		  be64toh(got.addr) + 100, ntohl(got.rkey));
	ct_expect_wc(p->client->send_cq, 20, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	memcpy(cbuf + 3072, "done", 4);
	post_send(p->client->qp, cmr, cbuf + 3072, 4, 21, IBV_WR_SEND, 0, 0);
	ct_expect_wc(p->server->recv_cq, 10, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	ct_expect_wc(p->client->send_cq, 21, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);

	fill(want, sizeof(want), 11);
	assert_memory_equal(sbuf + 100, want, 3000);
	for (size_t i = 0; i < 4096; i++)
		if ((i < 100 || i >= 3100) && sbuf[i])
			fail_msg("byte %zu outside the RDMA WRITE changed to 0x%02x", i, sbuf[i]);
	assert_memory_equal(sbuf + 4096, "done", 4);
	unreg(f, cmr);
	unreg(f, smr);
}

/*
 * RC private data limits: rdma_connect 56, rdma_reject 148, rdma_accept 196; one more is
 * -1/EINVAL. A failed connect leaves the id able to connect; a failed accept rejects the
 * request (REJECTED 28). The maximum of each arrives whole.
 */
static void test_private_data_limits_rc(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	unsigned char pd[200];
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7, .private_data = pd };
	struct rdma_conn_param sp = cp;
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *nid;

	ct_skip_on_iwarp("252 bytes each way, not the IB CM sizes");
	need_family(f);
	fill(pd, sizeof(pd), 3);
	ct_pair_listen(p, f->family, RDMA_PS_TCP);

	/* Connection 1: connect 57 refused, 56 goes; reject 149 and accept 197 refused. */
	cp.private_data_len = 57;
	assert_int_equal(rdma_create_id(p->cch, &p->client, p, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(p->client, NULL, (struct sockaddr *)&p->addr, 2000), 0);
	ct_expect_event(p->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	assert_int_equal(rdma_resolve_route(p->client, 2000), 0);
	ct_expect_event(p->cch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	qa = ct_qp_attr(IBV_QPT_RC);
	assert_int_equal(rdma_create_qp(p->client, NULL, &qa), 0);
	errno = 0;
	assert_int_equal(rdma_connect(p->client, &cp), -1);
	assert_int_equal(errno, EINVAL);
	ct_expect_no_event(p->lch, QUIET_MS, "listener after a refused rdma_connect");
	cp.private_data_len = 56;
	assert_int_equal(rdma_connect(p->client, &cp), 0);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	nid = ev->id;
	fx_keep(f, nid);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 56, pd, 56,
		    "CONNECT_REQUEST with 56 bytes");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	errno = 0;
	assert_int_equal(rdma_reject(nid, pd, 149), -1);
	assert_int_equal(errno, EINVAL);
	qa = ct_qp_attr(IBV_QPT_RC);
	assert_int_equal(rdma_create_qp(nid, NULL, &qa), 0);
	sp.private_data_len = 197;
	errno = 0;
	assert_int_equal(rdma_accept(nid, &sp), -1);
	assert_int_equal(errno, EINVAL);
	ct_expect_event(p->cch, RDMA_CM_EVENT_REJECTED, 28);
	rdma_destroy_qp(p->client);
	assert_int_equal(rdma_destroy_id(p->client), 0);
	p->client = NULL;

	/* Connection 2: accept with 196. */
	cp.private_data_len = 0;
	ct_client_connect(p, &cp);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	nid = ev->id;
	fx_keep(f, nid);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 56, NULL, 0,
		    "CONNECT_REQUEST without private data");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	qa = ct_qp_attr(IBV_QPT_RC);
	assert_int_equal(rdma_create_qp(nid, NULL, &qa), 0);
	sp.private_data_len = 196;
	assert_int_equal(rdma_accept(nid, &sp), 0);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 196, pd, 196,
		    "ESTABLISHED with 196 bytes");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_event(p->lch, RDMA_CM_EVENT_ESTABLISHED, 0);
	rdma_destroy_qp(p->client);
	assert_int_equal(rdma_destroy_id(p->client), 0);
	p->client = NULL;
	ct_expect_event(p->lch, RDMA_CM_EVENT_DISCONNECTED, 0);

	/* Connection 3: reject with 148. */
	ct_client_connect(p, &cp);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	nid = ev->id;
	fx_keep(f, nid);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_reject(nid, pd, 148), 0);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_REJECTED, CT_WAIT_MS);
	assert_int_equal(ev->status, 28);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 148, pd, 148,
		    "REJECTED with 148 bytes");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
}

/* rdma_reject: the active side gets REJECTED status 28 with the private data padded to
 * 148, and its QP is in ERROR once it read the event. */
static void test_reject_rc(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	unsigned char pd[10];
	struct rdma_cm_event *ev;

	ct_skip_on_iwarp("a reject is REJECTED -ECONNREFUSED with the private data raw");
	need_family(f);
	fill(pd, sizeof(pd), 4);
	ct_pair_listen(p, f->family, RDMA_PS_TCP);
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->server = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_reject(p->server, pd, sizeof(pd)), 0);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_REJECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->client);
	assert_int_equal(ev->status, 28);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 148, pd,
		    sizeof(pd), "REJECTED");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(qp_state(p->client->qp), IBV_QPS_ERR);
	ct_expect_no_event(p->lch, QUIET_MS, "listener after rdma_reject");
	/* A request that was answered cannot be rejected again. */
	errno = 0;
	assert_int_equal(rdma_reject(p->server, NULL, 0), -1);
	assert_int_equal(errno, EINVAL);
}

/* Nobody listens on the port: REJECTED status 8 (invalid service ID), private data 148
 * bytes of zeros. */
static void test_connect_no_listener_rc(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	struct rdma_cm_event *ev;

	ct_skip_on_iwarp("nobody listening is REJECTED -ECONNREFUSED, not 8");
	need_family(f);
	ct_pair_channels(p, f->family, RDMA_PS_TCP);
	ct_loopback(&p->addr, f->family, ct_free_port(f->family));
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_REJECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->client);
	assert_int_equal(ev->status, 8);
	check_pdata(ev->param.conn.private_data, ev->param.conn.private_data_len, 148, NULL, 0,
		    "REJECTED (no listener)");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(qp_state(p->client->qp), IBV_QPS_ERR);
}

/*
 * rdma_disconnect: the QP goes to ERROR and its posted receives flush; each side gets
 * exactly one DISCONNECTED; the other side's rdma_disconnect flushes its receives; calling
 * it again after DISCONNECTED returns 0.
 */
static void test_disconnect_flushes_one_event_each(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	static unsigned char cbuf[256], sbuf[256];
	struct ibv_mr *cmr, *smr;
	struct rdma_cm_event *ev;

	need_family(f);
	ct_pair_open(p, f->family);
	cmr = reg(f, p->client, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	smr = reg(f, p->server, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(p->client, cmr, cbuf, 128, 11);
	post_recv(p->client, cmr, cbuf + 128, 128, 12);
	post_recv(p->server, smr, sbuf, 128, 21);
	post_recv(p->server, smr, sbuf + 128, 128, 22);

	assert_int_equal(rdma_disconnect(p->client), 0);
	assert_int_equal(qp_state(p->client->qp), IBV_QPS_ERR);
	ct_expect_wc(p->client->recv_cq, 11, IBV_WC_WR_FLUSH_ERR, CT_WAIT_MS, NULL);
	ct_expect_wc(p->client->recv_cq, 12, IBV_WC_WR_FLUSH_ERR, CT_WAIT_MS, NULL);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_DISCONNECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->client);
	assert_int_equal(ev->status, 0);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_DISCONNECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->server);
	assert_int_equal(ev->status, 0);
	assert_int_equal(rdma_ack_cm_event(ev), 0);

	assert_int_equal(rdma_disconnect(p->server), 0);
	assert_int_equal(qp_state(p->server->qp), IBV_QPS_ERR);
	ct_expect_wc(p->server->recv_cq, 21, IBV_WC_WR_FLUSH_ERR, CT_WAIT_MS, NULL);
	ct_expect_wc(p->server->recv_cq, 22, IBV_WC_WR_FLUSH_ERR, CT_WAIT_MS, NULL);
	/* Then each side's TIMEWAIT_EXIT (RoCE), and nothing more. */
	ct_expect_timewait_exit(p->cch, p->client);
	ct_expect_timewait_exit(p->lch, p->server);
	ct_expect_no_event(p->cch, QUIET_MS, "a second DISCONNECTED (active side)");
	ct_expect_no_event(p->lch, QUIET_MS, "a second DISCONNECTED (passive side)");

	assert_int_equal(rdma_disconnect(p->client), 0);
	assert_int_equal(rdma_disconnect(p->server), 0);
	ct_expect_no_event(p->cch, QUIET_MS, "DISCONNECTED after a repeated rdma_disconnect");
	ct_expect_no_event(p->lch, 0, "DISCONNECTED after a repeated rdma_disconnect");
	unreg(f, cmr);
	unreg(f, smr);
}

/* Both sides call rdma_disconnect before reading anything: still one DISCONNECTED each. */
static void test_disconnect_both_at_once(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;

	need_family(f);
	ct_pair_open(p, f->family);
	assert_int_equal(rdma_disconnect(p->client), 0);
	assert_int_equal(rdma_disconnect(p->server), 0);
	ct_expect_event(p->cch, RDMA_CM_EVENT_DISCONNECTED, 0);
	ct_expect_event(p->lch, RDMA_CM_EVENT_DISCONNECTED, 0);
	ct_expect_timewait_exit(p->cch, p->client);
	ct_expect_timewait_exit(p->lch, p->server);
	ct_expect_no_event(p->cch, QUIET_MS, "a second DISCONNECTED (active side)");
	ct_expect_no_event(p->lch, 0, "a second DISCONNECTED (passive side)");
}

/* Destroying a connected id (QP first) disconnects the peer: DISCONNECTED, both ways. */
static void test_destroy_connected_id_disconnects_peer(void **state)
{
	struct fx *f = *state;
	struct rdma_cm_event *ev;

	need_family(f);
	ct_pair_open(&f->p, f->family);
	rdma_destroy_qp(f->p.client);
	assert_int_equal(rdma_destroy_id(f->p.client), 0);
	f->p.client = NULL;
	ev = ct_wait_event(f->p.lch, RDMA_CM_EVENT_DISCONNECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, f->p.server);
	assert_int_equal(ev->status, 0);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_disconnect(f->p.server), 0);

	ct_pair_open(&f->q, f->family);
	rdma_destroy_qp(f->q.server);
	assert_int_equal(rdma_destroy_id(f->q.server), 0);
	f->q.server = NULL;
	ev = ct_wait_event(f->q.cch, RDMA_CM_EVENT_DISCONNECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, f->q.client);
	assert_int_equal(ev->status, 0);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
}

/* rdma_init_qp_attr on connected ids: RTR and RTS with the masks rdma-core gives, aimed at
 * each other (dest QPN, the PSNs cross), and what the QPs really hold. */
static void test_init_qp_attr_connected(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	struct ibv_qp_attr crtr, crts, srtr, srts, init, q;
	struct ibv_qp_init_attr qi;
	int mask;

	ct_skip_on_iwarp("no QPN or PSN is exchanged");
	need_family(f);
	ct_pair_open(p, f->family);

	memset(&init, 0, sizeof(init));
	init.qp_state = IBV_QPS_INIT;
	assert_int_equal(rdma_init_qp_attr(p->server, &init, &mask), 0);
	assert_int_equal(mask & init_mask, init_mask);
	assert_true(init.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);

	struct {
		struct rdma_cm_id *id;
		struct ibv_qp_attr *a;
		enum ibv_qp_state s;
		int want;
	} cases[] = {
		{ p->client, &crtr, IBV_QPS_RTR, rtr_mask },
		{ p->client, &crts, IBV_QPS_RTS, rts_mask },
		{ p->server, &srtr, IBV_QPS_RTR, rtr_mask },
		{ p->server, &srts, IBV_QPS_RTS, rts_mask },
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		memset(cases[i].a, 0, sizeof(*cases[i].a));
		cases[i].a->qp_state = cases[i].s;
		mask = 0;
		assert_int_equal(rdma_init_qp_attr(cases[i].id, cases[i].a, &mask), 0);
		assert_int_equal(cases[i].a->qp_state, cases[i].s);
		if ((mask & cases[i].want) != cases[i].want)
			fail_msg("rdma_init_qp_attr(%s) mask 0x%x lacks 0x%x",
				 cases[i].s == IBV_QPS_RTR ? "RTR" : "RTS", mask,
				 cases[i].want & ~mask);
	}
	assert_int_equal(crtr.dest_qp_num, p->server->qp->qp_num);
	assert_int_equal(srtr.dest_qp_num, p->client->qp->qp_num);
	assert_int_equal(crtr.rq_psn, srts.sq_psn);
	assert_int_equal(srtr.rq_psn, crts.sq_psn);
	assert_true(crtr.ah_attr.is_global);
	assert_int_equal(crtr.ah_attr.port_num, 1);
	assert_true(crtr.path_mtu >= IBV_MTU_256 && crtr.path_mtu <= IBV_MTU_4096);
	assert_true(crts.retry_cnt <= 7 && crts.rnr_retry <= 7);

	/* The QPs the library connected hold these values. */
	assert_int_equal(ibv_query_qp(p->client->qp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN |
				      IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &qi), 0);
	assert_int_equal(q.qp_state, IBV_QPS_RTS);
	assert_int_equal(q.dest_qp_num, p->server->qp->qp_num);
	assert_int_equal(q.sq_psn, crts.sq_psn);
	assert_int_equal(q.rq_psn, crtr.rq_psn);
	assert_int_equal(ibv_query_qp(p->server->qp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi), 0);
	assert_int_equal(q.qp_state, IBV_QPS_RTS);
	assert_int_equal(q.dest_qp_num, p->client->qp->qp_num);
}

/*
 * An active id without a QP (qp_num in conn_param): CONNECT_RESPONSE instead of
 * ESTABLISHED; the application moves its own QP with rdma_init_qp_attr and calls
 * rdma_establish; then the passive side gets ESTABLISHED and data flows. rdma_establish on
 * an established id is EINVAL.
 */
static void test_connect_response_and_establish(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	static unsigned char cbuf[256], sbuf[256];
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	static const enum ibv_qp_state steps[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_mr *cmr, *smr;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr a;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	int mask;

	ct_skip_on_iwarp("no CONNECT_RESPONSE: the QP takes the stream");
	need_family(f);
	ct_pair_listen(p, f->family, RDMA_PS_TCP);
	assert_int_equal(rdma_create_id(p->cch, &p->client, p, RDMA_PS_TCP), 0);
	resolve(p->cch, p->client, f->family, ct_port((struct sockaddr *)&p->addr));
	pd = f->own_pd = ibv_alloc_pd(p->client->verbs);
	cq = f->own_cq = ibv_create_cq(p->client->verbs, 16, NULL, NULL, 0);
	assert_non_null(pd);
	assert_non_null(cq);
	qa.send_cq = qa.recv_cq = cq;
	qp = f->own_qp = ibv_create_qp(pd, &qa);
	assert_non_null(qp);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	assert_int_equal(rdma_init_qp_attr(p->client, &a, &mask), 0);
	assert_int_equal(ibv_modify_qp(qp, &a, mask), 0);
	cp.qp_num = qp->qp_num;
	assert_int_equal(rdma_connect(p->client, &cp), 0);

	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->server = ev->id;
	assert_int_equal(ev->param.conn.qp_num, qp->qp_num);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	qa = ct_qp_attr(IBV_QPT_RC);
	assert_int_equal(rdma_create_qp(p->server, NULL, &qa), 0);
	smr = reg(f, p->server, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(p->server, smr, sbuf, sizeof(sbuf), 31);
	assert_int_equal(rdma_accept(p->server, NULL), 0);

	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_CONNECT_RESPONSE, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->client);
	assert_int_equal(ev->status, 0);
	assert_int_equal(ev->param.conn.qp_num, p->server->qp->qp_num);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_null(p->client->qp);
	ct_expect_no_event(p->lch, QUIET_MS, "passive side before rdma_establish");

	for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
		memset(&a, 0, sizeof(a));
		a.qp_state = steps[i];
		assert_int_equal(rdma_init_qp_attr(p->client, &a, &mask), 0);
		if (ibv_modify_qp(qp, &a, mask))
			fail_msg("moving the application's QP to state %d with rdma_init_qp_attr's "
				 "values (mask 0x%x) failed", steps[i], mask);
	}
	assert_int_equal(rdma_establish(p->client), 0);
	ct_expect_event(p->lch, RDMA_CM_EVENT_ESTABLISHED, 0);
	ct_expect_no_event(p->cch, 0, "active side after rdma_establish");

	cmr = f->own_mr = ibv_reg_mr(pd, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(cmr);
	fill(cbuf, 100, 5);
	post_send(qp, cmr, cbuf, 100, 32, IBV_WR_SEND, 0, 0);
	ct_expect_wc(p->server->recv_cq, 31, IBV_WC_SUCCESS, CT_WAIT_MS, &wc);
	ct_expect_wc(cq, 32, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	assert_int_equal(wc.byte_len, 100);
	assert_memory_equal(sbuf, cbuf, 100);

	/* Not again, and not for an id that has its QP. */
	errno = 0;
	assert_int_equal(rdma_establish(p->client), -1);
	assert_int_equal(errno, EINVAL);

	assert_int_equal(rdma_disconnect(p->client), 0);
	ct_expect_event(p->cch, RDMA_CM_EVENT_DISCONNECTED, 0);
	ct_expect_event(p->lch, RDMA_CM_EVENT_DISCONNECTED, 0);
	f->own_mr = NULL;
	assert_int_equal(ibv_dereg_mr(cmr), 0);
	unreg(f, smr);
	f->own_qp = NULL;
	assert_int_equal(ibv_destroy_qp(qp), 0);
	f->own_cq = NULL;
	assert_int_equal(ibv_destroy_cq(cq), 0);
	f->own_pd = NULL;
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* rdma_establish on an id that connected with its own QP (ESTABLISHED) is EINVAL. */
static void test_establish_with_qp_einval(void **state)
{
	struct fx *f = *state;

	ct_pair_open(&f->p, AF_INET);
	errno = 0;
	assert_int_equal(rdma_establish(f->p.client), -1);
	assert_int_equal(errno, EINVAL);
}

/* A connected id migrated to a new channel gets its later events (DISCONNECTED) there. */
static void test_migrate_connected_id(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	struct rdma_event_channel *ch = fx_channel(f);
	struct rdma_cm_event *ev;

	ct_skip_on_iwarp("a reject is REJECTED -ECONNREFUSED, not 28");
	need_family(f);
	ct_pair_open(p, f->family);
	assert_int_equal(rdma_migrate_id(p->server, ch), 0);
	assert_ptr_equal(p->server->channel, ch);
	assert_int_equal(rdma_disconnect(p->client), 0);
	ev = ct_wait_event(ch, RDMA_CM_EVENT_DISCONNECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->server);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_timewait_exit(ch, p->server);
	ct_expect_no_event(p->lch, QUIET_MS, "the listener's channel the id left");
	ct_expect_event(p->cch, RDMA_CM_EVENT_DISCONNECTED, 0);

	/* The listener stays on its channel: the next request comes there. */
	rdma_destroy_qp(p->client);
	assert_int_equal(rdma_destroy_id(p->client), 0);
	p->client = NULL;
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	fx_keep(f, ev->id);
	assert_int_equal(rdma_reject(ev->id, NULL, 0), 0);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_event(p->cch, RDMA_CM_EVENT_REJECTED, 28);
	ct_expect_no_event(ch, 0, "the migrated id's channel");
}

/* An address of one of this host's interfaces (not the loopback) of @family, or false. */
static bool local_interface_addr(int family, struct sockaddr_storage *out)
{
	struct ifaddrs *ifs;
	bool found = false;

	if (getifaddrs(&ifs))
		return false;
	for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != family ||
		    (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
			continue;
		if (family == AF_INET6 &&
		    IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
			continue;
		memset(out, 0, sizeof(*out));
		memcpy(out, i->ifa_addr,
		       family == AF_INET6 ? sizeof(struct sockaddr_in6)
					  : sizeof(struct sockaddr_in));
		found = true;
	}
	freeifaddrs(ifs);
	return found;
}

/* A listener bound to an interface address of this host (not the loopback) is reached at
 * that address, and data flows. */
static void test_connect_over_interface_address(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	struct sockaddr_storage ifa;
	static unsigned char cbuf[256], sbuf[256];
	struct ibv_mr *cmr, *smr;
	struct ibv_wc wc;
	char txt[INET6_ADDRSTRLEN];

	if (!local_interface_addr(f->family, &ifa)) {
		print_message("no non-loopback %s address on this host: skipped\n",
			      ct_family_str(f->family));
		skip();
	}
	ct_pair_channels(p, f->family, RDMA_PS_TCP);
	assert_int_equal(rdma_create_id(p->lch, &p->listen_id, p, RDMA_PS_TCP), 0);
	ct_set_port((struct sockaddr *)&ifa, 0);
	inet_ntop(f->family,
		  f->family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&ifa)->sin6_addr
					: (void *)&((struct sockaddr_in *)&ifa)->sin_addr,
		  txt, sizeof(txt));
	if (rdma_bind_addr(p->listen_id, (struct sockaddr *)&ifa))
		fail_msg("rdma_bind_addr(%s): errno %d", txt, errno);
	assert_non_null(p->listen_id->verbs);
	assert_int_equal(rdma_listen(p->listen_id, 4), 0);
	memcpy(&p->addr, &ifa, sizeof(ifa));
	ct_set_port((struct sockaddr *)&p->addr, ntohs(rdma_get_src_port(p->listen_id)));
	ct_pair_connect(p, NULL, NULL);
	assert_true(same_ip(rdma_get_local_addr(p->server), (struct sockaddr *)&ifa));

	cmr = reg(f, p->client, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	smr = reg(f, p->server, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(p->server, smr, sbuf, sizeof(sbuf), 41);
	fill(cbuf, 200, 8);
	post_send(p->client->qp, cmr, cbuf, 200, 42, IBV_WR_SEND, 0, 0);
	ct_expect_wc(p->server->recv_cq, 41, IBV_WC_SUCCESS, CT_WAIT_MS, &wc);
	ct_expect_wc(p->client->send_cq, 42, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	assert_int_equal(wc.byte_len, 200);
	assert_memory_equal(sbuf, cbuf, 200);
	unreg(f, cmr);
	unreg(f, smr);
}

/* ================================================================================== */
/* UD                                                                                 */
/* ================================================================================== */

/*
 * UD: CONNECT_REQUEST carries the private data padded to 180; rdma_accept answers with no
 * further event on the passive side; the active ESTABLISHED carries the passive QPN, Q_Key
 * RDMA_UDP_QKEY, an address handle that ibv_create_ah takes, private data padded to 136.
 * A datagram then reaches the passive QP, and the answer (AH from its completion) comes
 * back.
 */
static void test_ud_connect_accept_and_send(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	unsigned char cpd[180], spd[136];
	struct rdma_conn_param cp = { .private_data = cpd, .private_data_len = sizeof(cpd) };
	struct rdma_conn_param sp = { .private_data = spd, .private_data_len = sizeof(spd) };
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_UD), qi;
	static unsigned char cbuf[1024], sbuf[1024];
	struct rdma_cm_event *ev;
	struct ibv_ah *ah, *sah;
	struct ibv_mr *cmr, *smr;
	struct ibv_qp_attr qattr;
	uint32_t rqpn, rqkey;
	struct ibv_wc wc;

	need_family(f);
	fill(cpd, sizeof(cpd), 12);
	fill(spd, sizeof(spd), 13);
	ct_pair_listen(p, f->family, RDMA_PS_UDP);
	ct_client_connect(p, &cp);
	assert_int_equal(p->client->qp_type, IBV_QPT_UD);

	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->server = ev->id;
	assert_ptr_equal(ev->listen_id, p->listen_id);
	assert_int_equal(ev->id->qp_type, IBV_QPT_UD);
	assert_non_null(ev->id->verbs);
	check_pdata(ev->param.ud.private_data, ev->param.ud.private_data_len, 180, cpd,
		    sizeof(cpd), "UD CONNECT_REQUEST");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_create_qp(p->server, NULL, &qa), 0);
	smr = reg(f, p->server, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(p->server, smr, sbuf, 40 + 256, 51);
	sp.qp_num = p->server->qp->qp_num;
	assert_int_equal(rdma_accept(p->server, &sp), 0);

	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->client);
	assert_int_equal(ev->status, 0);
	assert_int_equal(ev->param.ud.qp_num, p->server->qp->qp_num);
	assert_int_equal(ev->param.ud.qkey, RDMA_UDP_QKEY);
	check_pdata(ev->param.ud.private_data, ev->param.ud.private_data_len, 136, spd,
		    sizeof(spd), "UD ESTABLISHED");
	ah = f->ahs[0] = ibv_create_ah(p->client->pd, &ev->param.ud.ah_attr);
	if (!ah)
		fail_msg("ibv_create_ah with the ESTABLISHED event's ah_attr: errno %d", errno);
	rqpn = ev->param.ud.qp_num;
	rqkey = ev->param.ud.qkey;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_no_event(p->lch, QUIET_MS, "passive UD side after rdma_accept");

	/* A datagram to the passive QP, with our QPN as immediate data. */
	cmr = reg(f, p->client, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(p->client, cmr, cbuf + 512, 40 + 256, 52);
	fill(cbuf, 200, 14);
	{
		struct ibv_sge sge = { .addr = (uintptr_t)cbuf, .length = 200, .lkey = cmr->lkey };
		struct ibv_send_wr wr = { .wr_id = 53, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_IMM,
					  .send_flags = IBV_SEND_SIGNALED,
					  .imm_data = htonl(p->client->qp->qp_num) }, *bad;

		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = rqpn;
		wr.wr.ud.remote_qkey = rqkey;
		assert_int_equal(ibv_post_send(p->client->qp, &wr, &bad), 0);
	}
	ct_expect_wc(p->client->send_cq, 53, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	ct_expect_wc(p->server->recv_cq, 51, IBV_WC_SUCCESS, CT_WAIT_MS, &wc);
	assert_int_equal(wc.byte_len, 40 + 200);
	assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(ntohl(wc.imm_data), p->client->qp->qp_num);
	assert_int_equal(wc.src_qp, p->client->qp->qp_num);
	assert_memory_equal(sbuf + 40, cbuf, 200);

	/* The answer, the way udaddy and perftest address it. */
	assert_int_equal(ibv_query_qp(p->server->qp, &qattr, IBV_QP_QKEY, &qi), 0);
	assert_int_equal(qattr.qkey, RDMA_UDP_QKEY);
	sah = f->ahs[1] = ibv_create_ah_from_wc(p->server->pd, &wc, (struct ibv_grh *)sbuf,
						p->server->port_num);
	if (!sah)
		fail_msg("ibv_create_ah_from_wc: errno %d", errno);
	fill(sbuf + 512, 64, 15);
	{
		struct ibv_sge sge = { .addr = (uintptr_t)(sbuf + 512), .length = 64,
				       .lkey = smr->lkey };
		struct ibv_send_wr wr = { .wr_id = 54, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		wr.wr.ud.ah = sah;
		wr.wr.ud.remote_qpn = ntohl(wc.imm_data);
		wr.wr.ud.remote_qkey = qattr.qkey;
		assert_int_equal(ibv_post_send(p->server->qp, &wr, &bad), 0);
	}
	ct_expect_wc(p->server->send_cq, 54, IBV_WC_SUCCESS, CT_WAIT_MS, NULL);
	ct_expect_wc(p->client->recv_cq, 52, IBV_WC_SUCCESS, CT_WAIT_MS, &wc);
	assert_int_equal(wc.byte_len, 40 + 64);
	assert_memory_equal(cbuf + 512 + 40, sbuf + 512, 64);

	f->ahs[0] = f->ahs[1] = NULL;
	assert_int_equal(ibv_destroy_ah(ah), 0);
	assert_int_equal(ibv_destroy_ah(sah), 0);
	unreg(f, cmr);
	unreg(f, smr);
}

/* UD, nobody listening: UNREACHABLE status 1 (SIDR "unsupported"). */
static void test_ud_no_listener_unreachable(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	struct rdma_cm_event *ev;

	need_family(f);
	ct_pair_channels(p, f->family, RDMA_PS_UDP);
	ct_loopback(&p->addr, f->family, ct_free_port(f->family));
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_UNREACHABLE, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->client);
	assert_int_equal(ev->status, 1);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
}

/* UD private data limits: connect 180, accept 136, reject 136; one more is -1/EINVAL.
 * A failed accept rejects the request (UNREACHABLE 2); rdma_reject gives UNREACHABLE
 * status 2 with its private data padded to 136. */
static void test_ud_limits_and_reject(void **state)
{
	struct fx *f = *state;
	struct ct_pair *p = &f->p;
	unsigned char pd[200];
	struct rdma_conn_param cp = { .private_data = pd, .private_data_len = 181 };
	struct rdma_conn_param sp = { .private_data = pd, .private_data_len = 137 };
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *nid;

	need_family(f);
	fill(pd, sizeof(pd), 16);
	ct_pair_listen(p, f->family, RDMA_PS_UDP);
	assert_int_equal(rdma_create_id(p->cch, &p->client, p, RDMA_PS_UDP), 0);
	resolve(p->cch, p->client, f->family, ct_port((struct sockaddr *)&p->addr));
	qa = ct_qp_attr(IBV_QPT_UD);
	assert_int_equal(rdma_create_qp(p->client, NULL, &qa), 0);
	errno = 0;
	assert_int_equal(rdma_connect(p->client, &cp), -1);
	assert_int_equal(errno, EINVAL);
	cp.private_data_len = 180;
	assert_int_equal(rdma_connect(p->client, &cp), 0);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	nid = ev->id;
	fx_keep(f, nid);
	check_pdata(ev->param.ud.private_data, ev->param.ud.private_data_len, 180, pd, 180,
		    "UD CONNECT_REQUEST with 180 bytes");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	errno = 0;
	assert_int_equal(rdma_reject(nid, pd, 137), -1);
	assert_int_equal(errno, EINVAL);
	qa = ct_qp_attr(IBV_QPT_UD);
	assert_int_equal(rdma_create_qp(nid, NULL, &qa), 0);
	sp.qp_num = nid->qp->qp_num;
	errno = 0;
	assert_int_equal(rdma_accept(nid, &sp), -1);
	assert_int_equal(errno, EINVAL);
	ct_expect_event(p->cch, RDMA_CM_EVENT_UNREACHABLE, 2);
	rdma_destroy_qp(p->client);
	assert_int_equal(rdma_destroy_id(p->client), 0);
	p->client = NULL;

	/* rdma_reject with 136 bytes. */
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	nid = ev->id;
	fx_keep(f, nid);
	check_pdata(ev->param.ud.private_data, ev->param.ud.private_data_len, 180, NULL, 0,
		    "UD CONNECT_REQUEST without private data");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_reject(nid, pd, 136), 0);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_UNREACHABLE, CT_WAIT_MS);
	assert_int_equal(ev->status, 2);
	check_pdata(ev->param.ud.private_data, ev->param.ud.private_data_len, 136, pd, 136,
		    "UD UNREACHABLE after rdma_reject");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	rdma_destroy_qp(p->client);
	assert_int_equal(rdma_destroy_id(p->client), 0);
	p->client = NULL;

	/* rdma_accept with 136 bytes. */
	ct_client_connect(p, NULL);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	nid = ev->id;
	fx_keep(f, nid);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	qa = ct_qp_attr(IBV_QPT_UD);
	assert_int_equal(rdma_create_qp(nid, NULL, &qa), 0);
	sp.private_data_len = 136;
	sp.qp_num = nid->qp->qp_num;
	assert_int_equal(rdma_accept(nid, &sp), 0);
	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	check_pdata(ev->param.ud.private_data, ev->param.ud.private_data_len, 136, pd, 136,
		    "UD ESTABLISHED with 136 bytes");
	assert_int_equal(rdma_ack_cm_event(ev), 0);
}

/* ================================================================================== */
/* The synchronous API (rdma_server / rdma_client)                                    */
/* ================================================================================== */

struct sync_side {
	int family;
	char port[16];
	bool data;                 /* exchange a message each way (rdma_server/rdma_client) */
	struct rdma_cm_id *listen; /* the server's */
	/* where it is, or where it failed (read by the test while the thread may run) */
	_Atomic(const char *) step;
	int err;                   /* errno at the failed step */
	bool done;
	bool had_qp, had_pd, had_cqs, had_event, rts;
	struct sync_side *peer;    /* the client's: the server */
	unsigned char got[16];
	unsigned char rbuf[16], sbuf[16]; /* the messages (16 bytes each way) */
};

/* Both sides of a synchronous test, on the heap: a thread that outlives its test (it
 * timed out) must not write into a later test's stack. */
static void sync_sides(struct fx *f, struct sync_side **srv, struct sync_side **cli)
{
	*srv = f->mem[0] = calloc(1, sizeof(**srv));
	*cli = f->mem[1] = calloc(1, sizeof(**cli));
	assert_non_null(*srv);
	assert_non_null(*cli);
	(*cli)->peer = *srv;
}

#define SYNC_STEP(s, name, call)                                                           \
	do {                                                                               \
		atomic_store(&(s)->step, (name));                                          \
		errno = 0;                                                                 \
		if (!(call)) {                                                             \
			(s)->err = errno ? errno : -1;                                     \
			return NULL;                                                       \
		}                                                                          \
	} while (0)

static bool qp_is_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	return qp && !ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) && a.qp_state == IBV_QPS_RTS;
}

static bool qp_is_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	return qp && !ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) && a.qp_state == IBV_QPS_ERR;
}

static struct ibv_qp_init_attr sync_qp_attr(void)
{
	struct ibv_qp_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 16;
	attr.sq_sig_all = 1;
	return attr;
}

static void *sync_server(void *arg)
{
	struct sync_side *s = arg;
	unsigned char *rbuf = s->rbuf, *sbuf = s->sbuf;
	struct rdma_cm_id *id = NULL;
	struct ibv_mr *rmr = NULL, *smr = NULL;
	struct ibv_wc wc;

	SYNC_STEP(s, "rdma_get_request", rdma_get_request(s->listen, &id) == 0);
	s->had_qp = id->qp != NULL;
	s->had_pd = id->pd != NULL;
	s->had_cqs = id->send_cq && id->recv_cq && id->recv_cq_channel && id->send_cq_channel;
	if (s->data) {
		SYNC_STEP(s, "rdma_reg_msgs", (rmr = rdma_reg_msgs(id, rbuf, 16)) != NULL);
		SYNC_STEP(s, "rdma_reg_msgs", (smr = rdma_reg_msgs(id, sbuf, 16)) != NULL);
		SYNC_STEP(s, "rdma_post_recv", rdma_post_recv(id, NULL, rbuf, 16, rmr) == 0);
	}
	SYNC_STEP(s, "rdma_accept", rdma_accept(id, NULL) == 0);
	s->rts = qp_is_rts(id->qp);
	s->had_event = id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED;
	if (s->data) {
		SYNC_STEP(s, "rdma_get_recv_comp", rdma_get_recv_comp(id, &wc) == 1);
		SYNC_STEP(s, "recv completion status", wc.status == IBV_WC_SUCCESS);
		memcpy(s->got, rbuf, 16);
		fill(sbuf, 16, 22);
		SYNC_STEP(s, "rdma_post_send",
			  rdma_post_send(id, NULL, sbuf, 16, smr, 0) == 0);
		SYNC_STEP(s, "rdma_get_send_comp", rdma_get_send_comp(id, &wc) == 1);
		SYNC_STEP(s, "send completion status", wc.status == IBV_WC_SUCCESS);
	}
	SYNC_STEP(s, "rdma_disconnect", rdma_disconnect(id) == 0);
	if (s->data)
		SYNC_STEP(s, "rdma_dereg_mr", rdma_dereg_mr(rmr) == 0 && rdma_dereg_mr(smr) == 0);
	rdma_destroy_ep(id);
	atomic_store(&s->step, "done");
	s->done = true;
	return NULL;
}

static void *sync_client(void *arg)
{
	struct sync_side *s = arg;
	unsigned char *rbuf = s->rbuf, *sbuf = s->sbuf;
	struct rdma_addrinfo hints, *res = NULL;
	struct ibv_qp_init_attr attr = sync_qp_attr();
	struct rdma_cm_id *id = NULL;
	struct ibv_mr *rmr = NULL, *smr = NULL;
	struct ibv_wc wc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	SYNC_STEP(s, "rdma_getaddrinfo",
		  rdma_getaddrinfo(s->family == AF_INET6 ? "::1" : "127.0.0.1", s->port, &hints,
				   &res) == 0 && res->ai_dst_addr);
	SYNC_STEP(s, "rdma_create_ep (active)", rdma_create_ep(&id, res, NULL, &attr) == 0);
	rdma_freeaddrinfo(res);
	s->had_qp = id->qp != NULL;
	s->had_pd = id->pd != NULL;
	s->had_cqs = id->send_cq && id->recv_cq;
	SYNC_STEP(s, "QP from rdma_create_ep", id->qp != NULL);
	if (s->data) {
		SYNC_STEP(s, "rdma_reg_msgs", (rmr = rdma_reg_msgs(id, rbuf, 16)) != NULL);
		SYNC_STEP(s, "rdma_reg_msgs", (smr = rdma_reg_msgs(id, sbuf, 16)) != NULL);
		SYNC_STEP(s, "rdma_post_recv", rdma_post_recv(id, NULL, rbuf, 16, rmr) == 0);
	}
	SYNC_STEP(s, "rdma_connect", rdma_connect(id, NULL) == 0);
	s->rts = qp_is_rts(id->qp);
	if (!s->rts && ct_cm_iwarp() && s->peer && qp_is_err(id->qp)) {
		/* iWARP: a server that disconnects at once closes the stream the QP runs on,
		 * and the QP enters ERROR when it sees that (as siw's) — maybe before this
		 * look. Only a server already past its accept may have done it. */
		const char *st = atomic_load(&s->peer->step);

		s->rts = st && (!strcmp(st, "rdma_disconnect") || !strcmp(st, "rdma_dereg_mr") ||
				!strcmp(st, "done"));
	}
	s->had_event = id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED;
	if (s->data) {
		/* rdma_client's order: our send's completion, then the answer. */
		fill(sbuf, 16, 21);
		SYNC_STEP(s, "rdma_post_send",
			  rdma_post_send(id, NULL, sbuf, 16, smr, 0) == 0);
		SYNC_STEP(s, "rdma_get_send_comp", rdma_get_send_comp(id, &wc) == 1);
		SYNC_STEP(s, "send completion status", wc.status == IBV_WC_SUCCESS);
		SYNC_STEP(s, "rdma_get_recv_comp", rdma_get_recv_comp(id, &wc) == 1);
		SYNC_STEP(s, "recv completion status", wc.status == IBV_WC_SUCCESS);
		memcpy(s->got, rbuf, 16);
	}
	SYNC_STEP(s, "rdma_disconnect", rdma_disconnect(id) == 0);
	if (s->data)
		SYNC_STEP(s, "rdma_dereg_mr", rdma_dereg_mr(rmr) == 0 && rdma_dereg_mr(smr) == 0);
	rdma_destroy_ep(id);
	atomic_store(&s->step, "done");
	s->done = true;
	return NULL;
}

/* A synchronous listener from rdma_getaddrinfo (RAI_PASSIVE, port 0) and rdma_create_ep,
 * listening; its port goes to @cli. */
static struct rdma_cm_id *sync_listener(struct fx *f, struct sync_side *cli)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct ibv_qp_init_attr attr = sync_qp_attr();
	struct rdma_cm_id *l = NULL;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	assert_int_equal(rdma_getaddrinfo(f->family == AF_INET6 ? "::1" : "127.0.0.1", "0", &hints,
					  &res), 0);
	assert_non_null(res->ai_src_addr);
	if (rdma_create_ep(&l, res, NULL, &attr))
		fail_msg("rdma_create_ep (passive): errno %d", errno);
	rdma_freeaddrinfo(res);
	fx_keep(f, l);
	assert_null(l->qp);
	assert_int_equal(rdma_listen(l, 0), 0);
	assert_true(rdma_get_src_port(l) != 0);
	cli->family = f->family;
	snprintf(cli->port, sizeof(cli->port), "%u", ntohs(rdma_get_src_port(l)));
	return l;
}

/* Runs both sides in threads; fails the test unless both finish within CT_WAIT_MS. */
static void run_sync_pair(struct fx *f, struct sync_side *srv, struct sync_side *cli)
{
	struct timespec end;
	pthread_t ts, tc;
	bool ok_s, ok_c;

	assert_int_equal(pthread_create(&ts, NULL, sync_server, srv), 0);
	assert_int_equal(pthread_create(&tc, NULL, sync_client, cli), 0);
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += CT_WAIT_MS / 1000;
	ok_s = pthread_timedjoin_np(ts, NULL, &end) == 0;
	ok_c = pthread_timedjoin_np(tc, NULL, &end) == 0;
	if (!ok_s || !ok_c) {
		const char *ss = atomic_load(&srv->step), *cs = atomic_load(&cli->step);

		f->leak = true; /* the threads may still use the ids */
		if (!ok_s)
			pthread_detach(ts);
		if (!ok_c)
			pthread_detach(tc);
		fail_msg("synchronous server/client did not finish within %d ms: server at %s, "
			 "client at %s",
			 CT_WAIT_MS, ss ? ss : "start", cs ? cs : "start");
	}
	if (!srv->done)
		fail_msg("synchronous server failed at %s: errno %d", atomic_load(&srv->step),
			 srv->err);
	if (!cli->done)
		fail_msg("synchronous client failed at %s: errno %d", atomic_load(&cli->step),
			 cli->err);
}

/*
 * The synchronous API as rdma-core's rdma_server / rdma_client use it, each side in its
 * own thread: rdma_getaddrinfo (passive and active), rdma_create_ep (a listener; an active
 * id with its QP), rdma_listen, rdma_get_request (the QP made from the listener's
 * attributes, with the default PD and library CQs), rdma_accept and rdma_connect returning
 * once ESTABLISHED (QPs in RTS, the event kept in id->event), rdma_disconnect waiting for
 * DISCONNECTED, rdma_destroy_ep. rdma_get_request on an asynchronous id is EINVAL.
 */
static void test_sync_endpoints(void **state)
{
	struct fx *f = *state;
	struct sync_side *srv, *cli;

	need_family(f);
	sync_sides(f, &srv, &cli);
	srv->listen = sync_listener(f, cli);
	run_sync_pair(f, srv, cli);
	assert_true(srv->had_qp);
	assert_true(srv->had_pd);
	assert_true(srv->had_cqs);
	assert_true(srv->rts);
	assert_true(srv->had_event);
	assert_true(cli->had_qp);
	assert_true(cli->had_pd);
	assert_true(cli->had_cqs);
	assert_true(cli->rts);
	assert_true(cli->had_event);

	{
		struct rdma_event_channel *ch = fx_channel(f);
		struct rdma_cm_id *l = fx_id(f, ch, NULL, RDMA_PS_TCP), *id;

		errno = 0;
		assert_int_equal(rdma_get_request(l, &id), -1);
		assert_int_equal(errno, EINVAL);
	}
}

/*
 * The same with rdma_server / rdma_client's messages: rdma_reg_msgs, rdma_post_recv before
 * accept/connect, one 16-byte message each way with rdma_post_send, and the blocking
 * rdma_get_send_comp / rdma_get_recv_comp (completion channels). With both sides in one
 * process this hits the same-process completion bug described at
 * test_send_completes_polling_only_requester (a side blocks for ever, here bounded).
 */
static void test_sync_endpoints_messages(void **state)
{
	struct fx *f = *state;
	struct sync_side *srv, *cli;
	unsigned char want[16];

	need_family(f);
	sync_sides(f, &srv, &cli);
	srv->data = cli->data = true;
	srv->listen = sync_listener(f, cli);
	run_sync_pair(f, srv, cli);
	fill(want, sizeof(want), 21);
	assert_memory_equal(srv->got, want, sizeof(want));
	fill(want, sizeof(want), 22);
	assert_memory_equal(cli->got, want, sizeof(want));
}

/* Synchronous rdma_connect to a port nobody listens on: -1/ECONNREFUSED (REJECTED). */
static void *sync_refused(void *arg)
{
	struct sync_side *s = arg;
	struct rdma_addrinfo hints, *res = NULL;
	struct ibv_qp_init_attr attr = sync_qp_attr();
	struct rdma_cm_id *id = NULL;

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	SYNC_STEP(s, "rdma_getaddrinfo",
		  rdma_getaddrinfo(s->family == AF_INET6 ? "::1" : "127.0.0.1", s->port, &hints,
				   &res) == 0);
	SYNC_STEP(s, "rdma_create_ep (active)", rdma_create_ep(&id, res, NULL, &attr) == 0);
	rdma_freeaddrinfo(res);
	atomic_store(&s->step, "rdma_connect");
	errno = 0;
	s->err = rdma_connect(id, NULL) == 0 ? 0 : errno;
	s->had_event = id->event && id->event->event == RDMA_CM_EVENT_REJECTED;
	rdma_destroy_ep(id);
	s->done = true;
	return NULL;
}

static void test_sync_connect_refused(void **state)
{
	struct fx *f = *state;
	struct sync_side *srv, *cli;
	struct timespec end;
	pthread_t t;

	need_family(f);
	sync_sides(f, &srv, &cli);
	cli->family = f->family;
	snprintf(cli->port, sizeof(cli->port), "%u", ct_free_port(f->family));
	assert_int_equal(pthread_create(&t, NULL, sync_refused, cli), 0);
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += CT_WAIT_MS / 1000;
	if (pthread_timedjoin_np(t, NULL, &end)) {
		f->leak = true;
		pthread_detach(t);
		fail_msg("synchronous connect to a closed port still in %s after %d ms",
			 atomic_load(&cli->step), CT_WAIT_MS);
	}
	assert_true(cli->done);
	if (cli->err != ECONNREFUSED)
		fail_msg("synchronous connect to a closed port: errno %d (at %s), expected "
			 "ECONNREFUSED", cli->err, atomic_load(&cli->step));
	assert_true(cli->had_event);
}

/* ================================================================================== */
/* A peer process going away                                                          */
/* ================================================================================== */

/* The peer: this program run with --cm-peer <fd> <family> <port> <exit|wait>. It connects
 * to the port, writes 'E' on fd once ESTABLISHED, then exits at once (exit) or waits on fd
 * (wait) until the parent kills it. It uses no cmocka. */
static int peer_wait(struct rdma_event_channel *ch, enum rdma_cm_event_type type)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int ok;

	if (poll(&pfd, 1, CT_WAIT_MS) != 1 || rdma_get_cm_event(ch, &ev)) {
		fprintf(stderr, "cm peer: no %s\n", rdma_event_str(type));
		return -1;
	}
	ok = ev->event == type && ev->status == 0;
	if (!ok)
		fprintf(stderr, "cm peer: expected %s, got %s (status %d)\n", rdma_event_str(type),
			rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

static int run_peer(char **argv)
{
	int fd = atoi(argv[2]), family = atoi(argv[3]);
	uint16_t port = (uint16_t)atoi(argv[4]);
	bool wait_kill = !strcmp(argv[5], "wait");
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct rdma_event_channel *ch;
	struct sockaddr_storage ss;
	struct rdma_cm_id *id;
	char c;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, ct_loopback(&ss, family, port), 2000) ||
	    peer_wait(ch, RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 2000) ||
	    peer_wait(ch, RDMA_CM_EVENT_ROUTE_RESOLVED) || rdma_create_qp(id, NULL, &qa) ||
	    rdma_connect(id, &cp) || peer_wait(ch, RDMA_CM_EVENT_ESTABLISHED)) {
		fprintf(stderr, "cm peer: connecting failed (errno %d)\n", errno);
		return 1;
	}
	if (write(fd, "E", 1) != 1)
		return 1;
	if (wait_kill)
		while (read(fd, &c, 1) < 0 && errno == EINTR)
			;
	/* Leaves without destroying anything: the process going away is the test. */
	return 0;
}

/* Starts the peer towards the pair's listener; returns once it is running. */
static void start_peer(struct fx *f, const char *mode)
{
	char fdarg[16], famarg[16], portarg[16];
	int sv[2];
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	snprintf(famarg, sizeof(famarg), "%d", f->family);
	snprintf(portarg, sizeof(portarg), "%u", ct_port((struct sockaddr *)&f->p.addr));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		fcntl(sv[1], F_SETFD, 0);
		execl("/proc/self/exe", "test_cm_api", "--cm-peer", fdarg, famarg, portarg, mode,
		      (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	f->peer = pid;
	f->peer_sock = sv[0];
}

/* Reaps the peer once its end of the socket closed (it exited or was killed): bounded. */
static int reap_peer(struct fx *f)
{
	char c;
	int st = 0;

	wait_readable(f->peer_sock, CT_WAIT_MS, "the peer process to end");
	assert_int_equal(read(f->peer_sock, &c, 1), 0);
	assert_int_equal(waitpid(f->peer, &st, 0), f->peer);
	f->peer = 0;
	return st;
}

/* A peer process that connected and then exits (without destroying anything) or is
 * killed: the passive side gets DISCONNECTED. */
static void peer_gone_disconnects(struct fx *f, bool kill_it)
{
	struct ct_pair *p = &f->p;
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct rdma_cm_event *ev;
	char c = 0;
	int st;

	need_family(f);
	ct_pair_listen(p, f->family, RDMA_PS_TCP);
	start_peer(f, kill_it ? "wait" : "exit");
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->server = ev->id;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_create_qp(p->server, NULL, &qa), 0);
	assert_int_equal(rdma_accept(p->server, NULL), 0);
	ct_expect_event(p->lch, RDMA_CM_EVENT_ESTABLISHED, 0);
	wait_readable(f->peer_sock, CT_WAIT_MS, "the peer's ESTABLISHED");
	assert_int_equal(read(f->peer_sock, &c, 1), 1);
	assert_int_equal(c, 'E');
	if (kill_it)
		assert_int_equal(kill(f->peer, SIGKILL), 0);
	st = reap_peer(f);
	if (kill_it) {
		assert_true(WIFSIGNALED(st));
	} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fail_msg("peer process ended with status 0x%x", st);
	}
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_DISCONNECTED, CT_WAIT_MS);
	assert_ptr_equal(ev->id, p->server);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	assert_int_equal(rdma_disconnect(p->server), 0);
	assert_int_equal(qp_state(p->server->qp), IBV_QPS_ERR);
	ct_expect_timewait_exit(p->lch, p->server);
	ct_expect_no_event(p->lch, QUIET_MS, "a second DISCONNECTED");
}

static void test_peer_exit_disconnects(void **state)
{
	peer_gone_disconnects(*state, false);
}

static void test_peer_killed_disconnects(void **state)
{
	peer_gone_disconnects(*state, true);
}

/* ================================================================================== */

#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)
/* The family variants are named test_x/ipv4 and test_x/ipv6. */
#define T4(f) { #f "/ipv4", f, fx_setup, fx_teardown, &fam4 }
#define T6(f) { #f "/ipv6", f, fx_setup, fx_teardown, &fam6 }
#define T46(f) T4(f), T6(f)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_event_str_names),
		T(test_get_devices_one_context),
		T(test_create_id_port_spaces),
		T(test_channel_nonblocking_and_poll),
		T46(test_bind_port_zero),
		T46(test_bind_loopback_device),
		T46(test_bind_port_of_listener_in_use),
		T46(test_bind_port_of_bound_id_in_use),
		T6(test_bind_per_family),
		T(test_bind_bad_address),
		T(test_listen_unbound_binds_wildcard),
		T46(test_resolve_addr_and_route),
		T46(test_resolve_addr_not_local),
		T(test_set_option_lengths),
		T(test_migrate_id_moves_unread_events),
		T46(test_getaddrinfo),
		T(test_rsocket_calls_enosys),
		T46(test_multicast_join_send_leave),
		T(test_create_qp_defaults_rc),
		T(test_create_qp_callers_pd_and_cq),
		T(test_create_qp_ud_ready),
		T(test_init_qp_attr_before_connect),
		T46(test_connect_request_fields),
		T46(test_established_fields_and_order),
		T46(test_send_recv_both_ways),
		T46(test_rdma_write_rkey_in_private_data),
		T(test_send_completes_polling_only_requester),
		T46(test_private_data_limits_rc),
		T46(test_reject_rc),
		T46(test_connect_no_listener_rc),
		T46(test_disconnect_flushes_one_event_each),
		T46(test_disconnect_both_at_once),
		T46(test_destroy_connected_id_disconnects_peer),
		T46(test_init_qp_attr_connected),
		T46(test_connect_response_and_establish),
		T(test_establish_with_qp_einval),
		T46(test_migrate_connected_id),
		T46(test_connect_over_interface_address),
		T46(test_ud_connect_accept_and_send),
		T46(test_ud_no_listener_unreachable),
		T46(test_ud_limits_and_reject),
		T46(test_sync_endpoints),
		T46(test_sync_endpoints_messages),
		T46(test_sync_connect_refused),
		T46(test_peer_exit_disconnects),
		T46(test_peer_killed_disconnects),
	};

	if (argc == 6 && !strcmp(argv[1], "--cm-peer"))
		return run_peer(argv);
	/* SV_TEST_FILTER=pattern runs only the tests it matches. */
	if (getenv("SV_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SV_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
