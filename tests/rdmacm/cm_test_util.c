#include "rdmacm/cm_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- events --------------------------------------------------------------------------- */

struct rdma_cm_event *ct_next_event(struct rdma_event_channel *ch, int timeout_ms)
{
	long long end = now_ms() + timeout_ms;
	struct rdma_cm_event *ev = NULL;
	int flags = fcntl(ch->fd, F_GETFL);

	assert_true(flags >= 0);
	/* Non-blocking while we read: a count for an event that was dropped (its id
	 * destroyed) must not leave rdma_get_cm_event blocked past the bound. */
	assert_int_equal(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK), 0);
	for (;;) {
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		long long left = end - now_ms();
		int n;

		if (left < 0)
			left = 0;
		n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0 && !rdma_get_cm_event(ch, &ev))
			break;
		if (n > 0 && errno != EAGAIN) {
			int err = errno;

			fcntl(ch->fd, F_SETFL, flags);
			fail_msg("rdma_get_cm_event: errno %d (%s)", err, strerror(err));
		}
		if (left == 0)
			break;
	}
	fcntl(ch->fd, F_SETFL, flags);
	return ev;
}

struct rdma_cm_event *ct_wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
				    int timeout_ms)
{
	struct rdma_cm_event *ev = ct_next_event(ch, timeout_ms);

	if (!ev)
		fail_msg("expected %s within %d ms: no event came", rdma_event_str(type),
			 timeout_ms);
	if (ev->event != type) {
		enum rdma_cm_event_type got = ev->event;
		int status = ev->status;

		rdma_ack_cm_event(ev);
		fail_msg("expected %s, got %s (status %d)", rdma_event_str(type),
			 rdma_event_str(got), status);
	}
	return ev;
}

void ct_expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type type, int status)
{
	struct rdma_cm_event *ev = ct_wait_event(ch, type, CT_WAIT_MS);
	int got = ev->status;

	assert_int_equal(rdma_ack_cm_event(ev), 0);
	if (got != status)
		fail_msg("%s: status %d, expected %d", rdma_event_str(type), got, status);
}

void ct_expect_timewait_exit(struct rdma_event_channel *ch, struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;

	if (ct_cm_iwarp())
		return;
	ev = ct_wait_event(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, CT_WAIT_MS);
	if (id)
		assert_ptr_equal(ev->id, id);
	assert_int_equal(ev->status, 0);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
}

void ct_expect_no_event(struct rdma_event_channel *ch, int ms, const char *why)
{
	struct rdma_cm_event *ev = ct_next_event(ch, ms);

	if (ev) {
		enum rdma_cm_event_type got = ev->event;
		int status = ev->status;

		rdma_ack_cm_event(ev);
		fail_msg("%s: unexpected %s (status %d)", why, rdma_event_str(got), status);
	}
}

/* ---- addresses ------------------------------------------------------------------------ */

struct sockaddr *ct_loopback(struct sockaddr_storage *ss, int family, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_loopback;
		s6->sin6_port = htons(port);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		s4->sin_port = htons(port);
	}
	return (struct sockaddr *)ss;
}

uint16_t ct_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	return 0;
}

void ct_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
	else if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
}

bool ct_have_ipv6(void)
{
	struct sockaddr_storage ss;
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	bool ok;

	if (fd < 0)
		return false;
	ok = bind(fd, ct_loopback(&ss, AF_INET6, 0), sizeof(struct sockaddr_in6)) == 0;
	close(fd);
	return ok;
}

uint16_t ct_free_port(int family)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_storage ss;
	uint16_t port;

	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	if (rdma_bind_addr(id, ct_loopback(&ss, family, 0)))
		fail_msg("rdma_bind_addr(%s loopback, port 0): errno %d", ct_family_str(family),
			 errno);
	port = ntohs(rdma_get_src_port(id));
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
	assert_true(port != 0);
	return port;
}

const char *ct_family_str(int family)
{
	return family == AF_INET6 ? "IPv6" : family == AF_INET ? "IPv4" : "family ?";
}

/* ---- completions ---------------------------------------------------------------------- */

void ct_expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status, int timeout_ms,
		  struct ibv_wc *out)
{
	long long end = now_ms() + timeout_ms;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && now_ms() < end)
		sched_yield();
	if (n < 0)
		fail_msg("ibv_poll_cq: %d", n);
	if (n == 0)
		fail_msg("expected completion %llu (%s) within %d ms: none came",
			 (unsigned long long)wr_id, ibv_wc_status_str(status), timeout_ms);
	if (wc.wr_id != wr_id || wc.status != status)
		fail_msg("expected completion %llu (%s), got %llu (%s, vendor_err %u)",
			 (unsigned long long)wr_id, ibv_wc_status_str(status),
			 (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.vendor_err);
	/* Defined for every status (ibv_poll_cq(3)); softverbs reports none. */
	if (wc.vendor_err)
		fail_msg("completion %llu: vendor_err %u, expected 0", (unsigned long long)wr_id,
			 wc.vendor_err);
	/* A send-queue completion carries none of the receive-side flags. */
	if (status == IBV_WC_SUCCESS && !(wc.opcode & IBV_WC_RECV) && wc.wc_flags)
		fail_msg("completion %llu (send queue): wc_flags 0x%x, expected 0",
			 (unsigned long long)wr_id, wc.wc_flags);
	if (out)
		*out = wc;
}

/* ---- a connected RC pair ---------------------------------------------------------------- */

struct ibv_qp_init_attr ct_qp_attr(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = CT_QP_WR, .max_recv_wr = CT_QP_WR, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = CT_QP_INLINE },
		.qp_type = type,
	};

	return a;
}

void ct_pair_channels(struct ct_pair *p, int family, enum rdma_port_space ps)
{
	memset(p, 0, sizeof(*p));
	p->family = family;
	p->ps = ps;
	p->lch = rdma_create_event_channel();
	p->cch = rdma_create_event_channel();
	if (!p->lch || !p->cch)
		fail_msg("rdma_create_event_channel: errno %d", errno);
}

void ct_pair_listen(struct ct_pair *p, int family, enum rdma_port_space ps)
{
	ct_pair_channels(p, family, ps);
	assert_int_equal(rdma_create_id(p->lch, &p->listen_id, p, ps), 0);
	if (rdma_bind_addr(p->listen_id, ct_loopback(&p->addr, family, 0)))
		fail_msg("rdma_bind_addr(%s loopback): errno %d", ct_family_str(family), errno);
	if (rdma_listen(p->listen_id, 8))
		fail_msg("rdma_listen: errno %d", errno);
	ct_set_port((struct sockaddr *)&p->addr, ntohs(rdma_get_src_port(p->listen_id)));
	assert_true(ct_port((struct sockaddr *)&p->addr) != 0);
}

static void keep_pd(unsigned char *dst, uint8_t *len, const struct rdma_conn_param *c)
{
	*len = c->private_data_len;
	if (c->private_data_len)
		memcpy(dst, c->private_data, c->private_data_len);
}

static const struct rdma_conn_param ct_default_param = {
	.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7,
};

void ct_client_connect(struct ct_pair *p, const struct rdma_conn_param *cparam)
{
	bool ud = p->ps == RDMA_PS_UDP || p->ps == RDMA_PS_IPOIB;
	struct ibv_qp_init_attr qa = ct_qp_attr(ud ? IBV_QPT_UD : IBV_QPT_RC);
	struct rdma_conn_param param = cparam ? *cparam : ct_default_param;

	assert_int_equal(rdma_create_id(p->cch, &p->client, p, p->ps), 0);
	if (rdma_resolve_addr(p->client, NULL, (struct sockaddr *)&p->addr, 2000))
		fail_msg("rdma_resolve_addr: errno %d", errno);
	ct_expect_event(p->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	if (rdma_resolve_route(p->client, 2000))
		fail_msg("rdma_resolve_route: errno %d", errno);
	ct_expect_event(p->cch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	if (rdma_create_qp(p->client, NULL, &qa))
		fail_msg("rdma_create_qp (client): errno %d", errno);
	if (rdma_connect(p->client, &param))
		fail_msg("rdma_connect: errno %d", errno);
}

void ct_pair_connect(struct ct_pair *p, const struct rdma_conn_param *cparam,
		     const struct rdma_conn_param *sparam)
{
	struct rdma_conn_param sp = sparam ? *sparam : ct_default_param;
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;

	ct_client_connect(p, cparam);
	ev = ct_wait_event(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST, CT_WAIT_MS);
	p->server = ev->id;
	keep_pd(p->req_pd, &p->req_pd_len, &ev->param.conn);
	p->req_qp_num = ev->param.conn.qp_num;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	qa = ct_qp_attr(IBV_QPT_RC);
	if (rdma_create_qp(p->server, NULL, &qa))
		fail_msg("rdma_create_qp (server): errno %d", errno);
	if (rdma_accept(p->server, &sp))
		fail_msg("rdma_accept: errno %d", errno);

	ev = ct_wait_event(p->cch, RDMA_CM_EVENT_ESTABLISHED, CT_WAIT_MS);
	if (ev->status) {
		int st = ev->status;

		rdma_ack_cm_event(ev);
		fail_msg("the client's ESTABLISHED: status %d, expected 0", st);
	}
	keep_pd(p->rep_pd, &p->rep_pd_len, &ev->param.conn);
	p->rep_qp_num = ev->param.conn.qp_num;
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	ct_expect_event(p->lch, RDMA_CM_EVENT_ESTABLISHED, 0);
}

void ct_pair_open(struct ct_pair *p, int family)
{
	ct_pair_listen(p, family, RDMA_PS_TCP);
	ct_pair_connect(p, NULL, NULL);
}

/* Destroys @id and its QP: 0, or the errno of a failed rdma_destroy_id. */
static int close_id(struct rdma_cm_id **id)
{
	int err = 0;

	if (!*id)
		return 0;
	if ((*id)->qp)
		rdma_destroy_qp(*id);
	if (rdma_destroy_id(*id))
		err = errno ? errno : -1;
	*id = NULL;
	return err;
}

void ct_pair_close(struct ct_pair *p)
{
	/* Everything is destroyed first, then a failure fails the test. */
	int client = close_id(&p->client), server = close_id(&p->server),
	    listener = close_id(&p->listen_id);

	if (p->cch)
		rdma_destroy_event_channel(p->cch);
	if (p->lch)
		rdma_destroy_event_channel(p->lch);
	p->cch = p->lch = NULL;
	if (client || server || listener)
		fail_msg("ct_pair_close: rdma_destroy_id failed: client errno %d, server errno %d, "
			 "listener errno %d (0: destroyed)", client, server, listener);
}

bool ct_cm_iwarp(void)
{
	const char *e = getenv("SOFTVERBS_CM_WIRE");

	return e && !strcmp(e, "iwarp");
}
