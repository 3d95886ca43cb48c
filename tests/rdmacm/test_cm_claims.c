/*
 * Claims of docs/conformance.md's rdma_cm part that no other test checked:
 *
 * - rdma_resolve_addr/rdma_resolve_route take any timeout_ms: on one host the answer is
 *   immediate, so even 1 ms gives ADDR_RESOLVED / ROUTE_RESOLVED with status 0;
 * - an RC connect to a peer that accepts the TCP connection and never answers ends in
 *   RDMA_CM_EVENT_UNREACHABLE with -ETIMEDOUT after 30 s, not before (its own ctest
 *   entry, rdmacm_test_cm_claims_silent_peer: it waits those 30 s);
 * - a send-only full member (rdma_join_multicast_ex, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
 *   reaches the group's members and receives nothing: neither its own datagram nor a
 *   member's (a full member receives both);
 * - RDMA_OPTION_ID_ACK_TIMEOUT: one byte, RC ids only (else EINVAL); it is the QP's
 *   timeout in rdma_init_qp_attr's RTS attributes and on the connected QP (18 without);
 * - the "Not yet" table: every call it lists answers as it says (EOPNOTSUPP for the
 *   ECE calls, -1/ENOSYS for rsockets), and the test's list is the table's (read from
 *   the document at run time).
 */
#include "rdmacm/cm_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define WAIT_MS 10000
#define SILENT_WAIT_MS 30000 /* docs/conformance.md: "RC: no answer in 30 s (-ETIMEDOUT)" */

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void expect_ack(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
		       struct rdma_cm_id *id, int timeout_ms)
{
	struct rdma_cm_event *ev = ct_wait_event(ch, type, timeout_ms);

	assert_ptr_equal(ev->id, id);
	if (ev->status)
		fail_msg("%s: status %d, want 0", rdma_event_str(type), ev->status);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
}

/* ---- resolve timeouts --------------------------------------------------------------- */

static void test_resolve_with_a_1_ms_timeout(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage ss;
	struct rdma_cm_id *id;

	(void)state;
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(id, NULL, ct_loopback(&ss, AF_INET, 7471), 1), 0);
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id, WAIT_MS);
	assert_int_equal(rdma_resolve_route(id, 1), 0);
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id, WAIT_MS);
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

/* ---- a silent peer ------------------------------------------------------------------ */

static void test_connect_to_a_silent_peer_times_out(void **state)
{
	struct rdma_event_channel *ch;
	struct sockaddr_storage ss;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	socklen_t len = sizeof(sa);
	long long t0, ms;
	int lfd;

	(void)state;
	if (!getenv("SV_TEST_SILENT_PEER")) {
		print_message("    (runs as rdmacm_test_cm_claims_silent_peer: it waits 30 s)\n");
		return;
	}
	/* The silent peer: the kernel completes the TCP handshake (backlog), nobody reads. */
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	ch = rdma_create_event_channel();
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(id, NULL,
					   ct_loopback(&ss, AF_INET, ntohs(sa.sin_port)), 2000), 0);
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id, WAIT_MS);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id, WAIT_MS);
	assert_int_equal(rdma_create_qp(id, NULL, &qa), 0);
	t0 = now_ms();
	assert_int_equal(rdma_connect(id, &cp), 0);
	ev = ct_next_event(ch, SILENT_WAIT_MS + WAIT_MS);
	ms = now_ms() - t0;
	if (!ev)
		fail_msg("no event within %d ms of connecting to a silent peer",
			 SILENT_WAIT_MS + WAIT_MS);
	print_message("    %s (status %d) %lld ms after rdma_connect\n", rdma_event_str(ev->event),
		      ev->status, ms);
	if (ev->event != RDMA_CM_EVENT_UNREACHABLE || ev->status != -ETIMEDOUT)
		fail_msg("a silent peer gave %s status %d, want RDMA_CM_EVENT_UNREACHABLE %d",
			 rdma_event_str(ev->event), ev->status, -ETIMEDOUT);
	if (ms < SILENT_WAIT_MS - 10)
		fail_msg("UNREACHABLE after %lld ms: the peer has %d ms to answer", ms,
			 SILENT_WAIT_MS);
	assert_int_equal(rdma_ack_cm_event(ev), 0);
	rdma_destroy_qp(id);
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
	close(lfd);
}

/* ---- send-only multicast ------------------------------------------------------------- */

struct mc_end {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	unsigned char buf[4096]; /* [0, 100): what it sends; 1 KiB slots for receives after */
	struct ibv_ah *ah;
};

static void mc_post_recv(struct mc_end *e, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + 1024 * (1 + id % 2), 1024, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_recv(e->id->qp, &wr, &bad), 0);
}

static void mc_send(struct mc_end *e, uint64_t id, unsigned seed)
{
	struct ibv_sge sge = { (uintptr_t)e->buf, 100, e->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	for (int i = 0; i < 100; i++)
		e->buf[i] = (unsigned char)(seed + i);
	wr.wr.ud.ah = e->ah;
	wr.wr.ud.remote_qpn = 0xffffff;
	wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
	assert_int_equal(ibv_post_send(e->id->qp, &wr, &bad), 0);
	ct_expect_wc(e->id->send_cq, id, IBV_WC_SUCCESS, WAIT_MS, NULL);
}

static void mc_expect_recv(struct mc_end *e, uint64_t id, unsigned seed, uint32_t src,
			   const char *what)
{
	struct ibv_wc wc;
	const unsigned char *p = e->buf + 1024 * (1 + id % 2) + 40;

	ct_expect_wc(e->id->recv_cq, id, IBV_WC_SUCCESS, WAIT_MS, &wc);
	if (wc.byte_len != 140 || wc.src_qp != src)
		fail_msg("%s: byte_len %u src_qp %u, want 140 and %u", what, wc.byte_len,
			 wc.src_qp, src);
	for (int i = 0; i < 100; i++)
		if (p[i] != (unsigned char)(seed + i))
			fail_msg("%s: byte %d is 0x%02x, want 0x%02x", what, i, p[i],
				 (unsigned char)(seed + i));
}

static void test_send_only_member_sends_and_receives_nothing(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in grp = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(0xef010207) /* 239.1.2.7 */ };
	struct mc_end *e = calloc(2, sizeof(*e)), *member = &e[0], *sender = &e[1];
	struct rdma_cm_join_mc_attr_ex ja = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
		.addr = (struct sockaddr *)&grp,
	};
	struct ibv_wc wc;

	(void)state;
	assert_non_null(ch);
	assert_non_null(e);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_UD);
		struct rdma_cm_event *ev;

		assert_int_equal(rdma_create_id(ch, &e[i].id, NULL, RDMA_PS_UDP), 0);
		assert_int_equal(rdma_resolve_addr(e[i].id, NULL, (struct sockaddr *)&grp, 2000), 0);
		expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, e[i].id, WAIT_MS);
		if (rdma_create_qp(e[i].id, NULL, &qa))
			fail_msg("rdma_create_qp (UD): errno %d", errno);
		e[i].mr = ibv_reg_mr(e[i].id->pd, e[i].buf, sizeof(e[i].buf),
				     IBV_ACCESS_LOCAL_WRITE);
		assert_non_null(e[i].mr);
		if (i == 0)
			assert_int_equal(rdma_join_multicast(e[i].id, (struct sockaddr *)&grp, NULL),
					 0);
		else if (rdma_join_multicast_ex(e[i].id, &ja, NULL))
			fail_msg("rdma_join_multicast_ex (send-only full member): errno %d", errno);
		ev = ct_wait_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN, WAIT_MS);
		assert_ptr_equal(ev->id, e[i].id);
		assert_int_equal(ev->status, 0);
		e[i].ah = ibv_create_ah(e[i].id->pd, &ev->param.ud.ah_attr);
		assert_non_null(e[i].ah);
		assert_int_equal(rdma_ack_cm_event(ev), 0);
	}
	for (uint64_t k = 0; k < 2; k++) {
		mc_post_recv(member, 10 + k);
		mc_post_recv(sender, 20 + k);
	}
	/* The send-only member's datagram reaches the member, not itself. */
	mc_send(sender, 1, 40);
	mc_expect_recv(member, 10, 40, sender->id->qp->qp_num, "the send-only member's datagram");
	/* The member's own datagram reaches the member (a full member receives its own),
	 * not the send-only member. */
	mc_send(member, 2, 80);
	mc_expect_recv(member, 11, 80, member->id->qp->qp_num, "the member's own datagram");
	/* Each datagram was placed in every attached QP by its send, before the receives
	 * above completed: the send-only member's receives are still posted, none taken. */
	if (ibv_poll_cq(sender->id->recv_cq, 1, &wc) != 0)
		fail_msg("the send-only member received a datagram (wr_id %llu, from QP %u)",
			 (unsigned long long)wc.wr_id, wc.src_qp);
	assert_int_equal(rdma_leave_multicast(sender->id, (struct sockaddr *)&grp), 0);
	assert_int_equal(rdma_leave_multicast(member->id, (struct sockaddr *)&grp), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ibv_destroy_ah(e[i].ah), 0);
		assert_int_equal(ibv_dereg_mr(e[i].mr), 0);
		rdma_destroy_qp(e[i].id);
		assert_int_equal(rdma_destroy_id(e[i].id), 0);
	}
	free(e);
	rdma_destroy_event_channel(ch);
}

/* ---- RDMA_OPTION_ID_ACK_TIMEOUT ------------------------------------------------------ */

static uint8_t qp_timeout(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_TIMEOUT, &ia), 0);
	return a.timeout;
}

static void test_ack_timeout_option(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *ud;
	struct ibv_qp_attr a;
	struct ct_pair p;
	uint8_t t = 20;
	uint32_t wide = 20;
	int mask;

	(void)state;
	assert_non_null(ch);
	/* Lengths and id types: one byte, RC only. */
	assert_int_equal(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP), 0);
	errno = 0;
	assert_int_equal(rdma_set_option(ud, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, 1),
			 -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(rdma_destroy_id(ud), 0);
	rdma_destroy_event_channel(ch);

	/* Set on the connecting id before it connects: its RTS attributes and its QP. */
	ct_pair_listen(&p, AF_INET, RDMA_PS_TCP);
	assert_int_equal(rdma_create_id(p.cch, &p.client, &p, RDMA_PS_TCP), 0);
	errno = 0;
	assert_int_equal(rdma_set_option(p.client, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
					 &wide, sizeof(wide)), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(rdma_set_option(p.client, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
					 &t, sizeof(t)), 0);
	assert_int_equal(rdma_resolve_addr(p.client, NULL, (struct sockaddr *)&p.addr, 2000), 0);
	expect_ack(p.cch, RDMA_CM_EVENT_ADDR_RESOLVED, p.client, WAIT_MS);
	assert_int_equal(rdma_resolve_route(p.client, 2000), 0);
	expect_ack(p.cch, RDMA_CM_EVENT_ROUTE_RESOLVED, p.client, WAIT_MS);
	{
		struct ibv_qp_init_attr qa = ct_qp_attr(IBV_QPT_RC);
		struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
					      .retry_count = 7, .rnr_retry_count = 7 };
		struct rdma_cm_event *ev;

		assert_int_equal(rdma_create_qp(p.client, NULL, &qa), 0);
		assert_int_equal(rdma_connect(p.client, &cp), 0);
		ev = ct_wait_event(p.lch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
		p.server = ev->id;
		assert_int_equal(rdma_ack_cm_event(ev), 0);
		qa = ct_qp_attr(IBV_QPT_RC);
		assert_int_equal(rdma_create_qp(p.server, NULL, &qa), 0);
		/* The passive side without the option: the default. */
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		assert_int_equal(rdma_init_qp_attr(p.server, &a, &mask), 0);
		assert_true(mask & IBV_QP_TIMEOUT);
		assert_int_equal(a.timeout, 18);
		assert_int_equal(rdma_accept(p.server, &cp), 0);
		expect_ack(p.cch, RDMA_CM_EVENT_ESTABLISHED, p.client, WAIT_MS);
		expect_ack(p.lch, RDMA_CM_EVENT_ESTABLISHED, p.server, WAIT_MS);
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	assert_int_equal(rdma_init_qp_attr(p.client, &a, &mask), 0);
	assert_true(mask & IBV_QP_TIMEOUT);
	assert_int_equal(a.timeout, 20);
	assert_int_equal(qp_timeout(p.client->qp), 20);
	assert_int_equal(qp_timeout(p.server->qp), 18);
	ct_pair_close(&p);
}

/* ---- the "Not yet" table ------------------------------------------------------------- */

struct not_yet {
	const char *names; /* the table's backticked names it covers, space-separated */
	void (*check)(void);
};

static void expect_minus1(int rc, int want, const char *call)
{
	if (rc != -1 || errno != want)
		fail_msg("%s: returned %d errno %d (%s); docs/conformance.md says -1 with %s",
			 call, rc, errno, strerror(errno), strerror(want));
}

static void c_ece(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_ece ece = { .vendor_id = 0x02c9 };
	struct rdma_cm_id *id;

	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	errno = 0;
	expect_minus1(rdma_set_local_ece(id, &ece), EOPNOTSUPP, "rdma_set_local_ece");
	errno = 0;
	expect_minus1(rdma_get_remote_ece(id, &ece), EOPNOTSUPP, "rdma_get_remote_ece");
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

#define RS(call, expr)                                                                     \
	do {                                                                               \
		errno = 0;                                                                 \
		expect_minus1((int)(expr), ENOSYS, call);                                  \
	} while (0)

static void c_rsockets(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(7471),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	char b[8] = { 0 };
	struct iovec iov = { b, sizeof(b) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct pollfd pfd = { .fd = 3, .events = POLLIN };
	int v = 1;

	RS("rsocket", rsocket(AF_INET, SOCK_STREAM, 0));
	RS("rbind", rbind(3, (struct sockaddr *)&sa, sizeof(sa)));
	RS("rlisten", rlisten(3, 1));
	RS("raccept", raccept(3, NULL, NULL));
	RS("rconnect", rconnect(3, (struct sockaddr *)&sa, sizeof(sa)));
	RS("rshutdown", rshutdown(3, SHUT_RDWR));
	RS("rclose", rclose(3));
	RS("rrecv", rrecv(3, b, sizeof(b), 0));
	RS("rrecvfrom", rrecvfrom(3, b, sizeof(b), 0, NULL, NULL));
	RS("rrecvmsg", rrecvmsg(3, &mh, 0));
	RS("rsend", rsend(3, b, sizeof(b), 0));
	RS("rsendto", rsendto(3, b, sizeof(b), 0, (struct sockaddr *)&sa, sizeof(sa)));
	RS("rsendmsg", rsendmsg(3, &mh, 0));
	RS("rread", rread(3, b, sizeof(b)));
	RS("rreadv", rreadv(3, &iov, 1));
	RS("rwrite", rwrite(3, b, sizeof(b)));
	RS("rwritev", rwritev(3, &iov, 1));
	RS("rpoll", rpoll(&pfd, 1, 0));
	RS("rselect", rselect(0, NULL, NULL, NULL, NULL));
	RS("rsetsockopt", rsetsockopt(3, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v)));
	RS("rgetsockopt", rgetsockopt(3, SOL_SOCKET, SO_REUSEADDR, &v, &len));
	RS("rfcntl", rfcntl(3, F_GETFL));
	RS("rgetpeername", rgetpeername(3, (struct sockaddr *)&sa, &len));
	RS("rgetsockname", rgetsockname(3, (struct sockaddr *)&sa, &len));
	RS("riomap", riomap(3, b, sizeof(b), PROT_WRITE, 0, -1) == -1 ? -1 : 0);
	RS("riounmap", riounmap(3, b, sizeof(b)));
	/* riowrite returns a byte count: 0 written, errno ENOSYS. */
	errno = 0;
	if (riowrite(3, b, sizeof(b), 0, 0) != 0 || errno != ENOSYS)
		fail_msg("riowrite: want 0 bytes and ENOSYS (docs/conformance.md), errno %d", errno);
}

static const struct not_yet not_yet[] = {
	{ "rdma_set_local_ece rdma_get_remote_ece", c_ece },
	{ "rsocket rbind rlisten raccept rconnect rshutdown rclose rrecv* rsend* rread* rwrite* "
	  "rpoll rselect r*sockopt rfcntl rget*name riomap riounmap riowrite", c_rsockets },
};

/* Backticked names of the first column of rows of the rdma_cm "Not yet" table whose
 * answer is EOPNOTSUPP or ENOSYS. */
static int doc_names(char names[][64], int max)
{
	FILE *f = fopen(SV_SOURCE_DIR "/docs/conformance.md", "r");
	char line[4096];
	bool cm = false, in = false;
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char *p, *end;

		if (!strncmp(line, "# ", 2))
			cm = strstr(line, "rdma_cm") != NULL;
		if (!strncmp(line, "## ", 3)) {
			if (in)
				break;
			in = cm && !strncmp(line, "## Not yet", 10);
			continue;
		}
		if (!in || strncmp(line, "| ", 2) || (!strstr(line, "EOPNOTSUPP") &&
						       !strstr(line, "ENOSYS")))
			continue;
		end = strstr(line + 2, " |");
		assert_non_null(end);
		*end = 0;
		for (p = line; (p = strchr(p, '`')) && n < max;) {
			char *q = strchr(p + 1, '`');

			assert_non_null(q);
			assert_true(q - p - 1 < 64);
			memcpy(names[n], p + 1, (size_t)(q - p - 1));
			names[n++][q - p - 1] = 0;
			p = q + 1;
		}
	}
	fclose(f);
	return n;
}

static bool covers(const char *list, const char *name)
{
	size_t k = strlen(name);

	for (const char *p = list; (p = strstr(p, name)); p += k)
		if ((p == list || p[-1] == ' ') && (p[k] == ' ' || !p[k]))
			return true;
	return false;
}

static void test_every_call_of_the_not_yet_table_answers_it(void **state)
{
	char names[64][64];
	int n = doc_names(names, 64);

	(void)state;
	if (n < 10)
		fail_msg("docs/conformance.md: only %d names in the rdma_cm \"Not yet\" table", n);
	for (int i = 0; i < n; i++) {
		bool found = false;

		for (size_t k = 0; k < ARRAY_LEN(not_yet); k++)
			found |= covers(not_yet[k].names, names[i]);
		if (!found)
			fail_msg("docs/conformance.md lists `%s` as not yet there; no check here "
				 "(tests/rdmacm/test_cm_claims.c, not_yet[])", names[i]);
	}
	for (size_t k = 0; k < ARRAY_LEN(not_yet); k++) {
		char copy[512], *save, *tok;

		snprintf(copy, sizeof(copy), "%s", not_yet[k].names);
		for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
			bool in_doc = false;

			for (int i = 0; i < n; i++)
				in_doc |= !strcmp(names[i], tok);
			if (!in_doc)
				fail_msg("`%s` is checked here as not yet there but is not in "
					 "docs/conformance.md's rdma_cm \"Not yet\" table", tok);
		}
		not_yet[k].check();
	}
	print_message("    %d names of the table checked\n", n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resolve_with_a_1_ms_timeout),
		cmocka_unit_test(test_connect_to_a_silent_peer_times_out),
		cmocka_unit_test(test_send_only_member_sends_and_receives_nothing),
		cmocka_unit_test(test_ack_timeout_option),
		cmocka_unit_test(test_every_call_of_the_not_yet_table_answers_it),
	};

	if (getenv("SV_TEST_SILENT_PEER"))
		cmocka_set_test_filter("test_connect_to_a_silent_peer_times_out");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
