/*
 * reqresp — an event-driven request/response exchange, as storage targets and their
 * initiators run it: one request in flight, a small request, a 4 KiB reply, both sides
 * asleep until their data comes. Over RDMA (rdma_cm, SEND/RECV, each side waiting on its
 * completion channel) or over TCP (one socket, each side waiting in epoll_wait), so that
 * the two run the same exchange in one invocation (bench/reqresp.sh alternates them).
 *
 *   reqresp server [--tcp] [-p PORT] [-s REPLY] [-q REQUEST]
 *   reqresp client [--tcp] [-p PORT] [-s REPLY] [-q REQUEST] [-n ITERS] HOST
 *
 * The client prints one line: the median, 99th percentile and mean round trip in µs
 * (from the request's post to the reply's receipt, the reply's bytes checked), e.g.
 *   reqresp rdma 64 4096 20000: median 21.3 p99 48.1 mean 23.0 us
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -o reqresp bench/reqresp.c -lrdmacm -libverbs
 * Run on softverbs: softverbs run reqresp server / softverbs run reqresp client HOST.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct opts {
	bool server, tcp;
	const char *host, *port;
	size_t reply, request;
	long iters;
};

static void die(const char *what)
{
	fprintf(stderr, "reqresp: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fill(unsigned char *b, size_t n, long seq)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seq * 31 + (long)i);
}

static bool filled(const unsigned char *b, size_t n, long seq)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)(seq * 31 + (long)i))
			return false;
	return true;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const struct opts *o, uint64_t *rtt)
{
	double sum = 0;

	for (long i = 0; i < o->iters; i++)
		sum += (double)rtt[i];
	qsort(rtt, (size_t)o->iters, sizeof(*rtt), cmp_u64);
	printf("reqresp %s %zu %zu %ld: median %.1f p99 %.1f mean %.1f us\n",
	       o->tcp ? "tcp" : "rdma", o->request, o->reply, o->iters,
	       (double)rtt[o->iters / 2] / 1e3, (double)rtt[o->iters * 99 / 100] / 1e3,
	       sum / (double)o->iters / 1e3);
}

/* --- TCP ------------------------------------------------------------------------------- */

static int fcntl_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Until @n bytes are in (the socket is non-blocking: epoll says when to read). */
static void tcp_in(int fd, int ep, unsigned char *b, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = recv(fd, b + got, n - got, 0);
		struct epoll_event ev;

		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			exit(got ? 1 : 0); /* the peer closed: between messages, the end */
		if (errno != EAGAIN && errno != EINTR)
			die("recv");
		if (epoll_wait(ep, &ev, 1, -1) < 0 && errno != EINTR)
			die("epoll_wait");
	}
}

static void tcp_out(int fd, const unsigned char *b, size_t n)
{
	size_t put = 0;

	while (put < n) {
		ssize_t r = send(fd, b + put, n - put, MSG_NOSIGNAL);

		if (r < 0 && errno != EAGAIN && errno != EINTR)
			die("send");
		if (r > 0)
			put += (size_t)r;
	}
}

static void run_tcp(const struct opts *o)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = o->server ? AI_PASSIVE : 0 }, *ai;
	unsigned char *req = calloc(1, o->request), *rep = calloc(1, o->reply);
	struct epoll_event ev = { .events = EPOLLIN };
	int fd, ep, one = 1;

	if (!req || !rep)
		die("calloc");
	if (getaddrinfo(o->host, o->port, &hints, &ai))
		die("getaddrinfo");
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (o->server) {
		int l = fd;

		if (bind(l, ai->ai_addr, ai->ai_addrlen) || listen(l, 1))
			die("bind/listen");
		fd = accept(l, NULL, NULL);
		if (fd < 0)
			die("accept");
		close(l);
	} else if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		die("connect");
	}
	freeaddrinfo(ai);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (fcntl_nonblock(fd))
		die("fcntl");
	ep = epoll_create1(0);
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
		die("epoll");
	if (o->server) {
		for (long seq = 0;; seq++) {
			tcp_in(fd, ep, req, o->request);
			fill(rep, o->reply, seq);
			tcp_out(fd, rep, o->reply);
		}
	} else {
		uint64_t *rtt = calloc((size_t)o->iters, sizeof(*rtt));

		if (!rtt)
			die("calloc");
		for (long seq = 0; seq < o->iters; seq++) {
			uint64_t t0 = now_ns();

			fill(req, o->request, seq);
			tcp_out(fd, req, o->request);
			tcp_in(fd, ep, rep, o->reply);
			rtt[seq] = now_ns() - t0;
			if (!filled(rep, o->reply, seq)) {
				fprintf(stderr, "reqresp: reply %ld: wrong bytes\n", seq);
				exit(1);
			}
		}
		report(o, rtt);
	}
	close(fd);
}

/* --- RDMA ------------------------------------------------------------------------------ */

/* One completion of @cq, asleep on @ch meanwhile (armed, then polled again: a
 * completion that came before the arm is not waited for). */
static void wait_wc(struct ibv_cq *cq, struct ibv_comp_channel *ch, struct ibv_wc *wc)
{
	for (;;) {
		struct ibv_cq *ecq;
		void *ctx;
		int n = ibv_poll_cq(cq, 1, wc);

		if (n == 0) {
			if (ibv_req_notify_cq(cq, 0))
				die("ibv_req_notify_cq");
			n = ibv_poll_cq(cq, 1, wc);
		}
		if (n < 0)
			die("ibv_poll_cq");
		if (n > 0) {
			if (wc->status == IBV_WC_WR_FLUSH_ERR)
				exit(0); /* the peer disconnected: between exchanges, the end */
			if (wc->status != IBV_WC_SUCCESS) {
				fprintf(stderr, "reqresp: completion %s (wr_id %llu)\n",
					ibv_wc_status_str(wc->status), (unsigned long long)wc->wr_id);
				exit(1);
			}
			return;
		}
		if (ibv_get_cq_event(ch, &ecq, &ctx))
			die("ibv_get_cq_event");
		ibv_ack_cq_events(ecq, 1);
	}
}

/* Takes the send completions that are there (each send is signaled; the send CQ holds
 * twice what can be outstanding). */
static void reap_sends(struct rdma_cm_id *id)
{
	struct ibv_wc wc[4];
	int n;

	while ((n = ibv_poll_cq(id->send_cq, 4, wc)) > 0)
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "reqresp: send %s\n", ibv_wc_status_str(wc[i].status));
				exit(1);
			}
	if (n < 0)
		die("ibv_poll_cq");
}

static void run_rdma(const struct opts *o)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP,
				       .ai_flags = o->server ? RAI_PASSIVE : 0 }, *res;
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};
	size_t rlen = o->request > o->reply ? o->request : o->reply;
	unsigned char *sbuf = calloc(1, rlen), *rbuf = calloc(1, rlen);
	struct rdma_cm_id *id, *listen_id = NULL;
	struct ibv_mr *smr, *rmr;
	struct ibv_wc wc;

	if (!sbuf || !rbuf)
		die("calloc");
	if (rdma_getaddrinfo(o->host, o->port, &hints, &res))
		die("rdma_getaddrinfo");
	if (o->server) {
		if (rdma_create_ep(&listen_id, res, NULL, &attr) || rdma_listen(listen_id, 1))
			die("rdma_create_ep/listen");
		if (rdma_get_request(listen_id, &id))
			die("rdma_get_request");
	} else if (rdma_create_ep(&id, res, NULL, &attr)) {
		die("rdma_create_ep");
	}
	rdma_freeaddrinfo(res);
	if (!id->qp || !id->recv_cq_channel || !id->send_cq)
		die("no QP with a completion channel");
	smr = rdma_reg_msgs(id, sbuf, rlen);
	rmr = rdma_reg_msgs(id, rbuf, rlen);
	if (!smr || !rmr)
		die("rdma_reg_msgs");
	if (o->server) {
		if (rdma_post_recv(id, NULL, rbuf, o->request, rmr) || rdma_accept(id, NULL))
			die("rdma_post_recv/accept");
		for (long seq = 0;; seq++) {
			wait_wc(id->recv_cq, id->recv_cq_channel, &wc);
			if (rdma_post_recv(id, NULL, rbuf, o->request, rmr))
				die("rdma_post_recv");
			fill(sbuf, o->reply, seq);
			if (rdma_post_send(id, NULL, sbuf, o->reply, smr, 0))
				die("rdma_post_send");
			reap_sends(id);
		}
	} else {
		uint64_t *rtt = calloc((size_t)o->iters, sizeof(*rtt));

		if (!rtt)
			die("calloc");
		if (rdma_connect(id, NULL))
			die("rdma_connect");
		for (long seq = 0; seq < o->iters; seq++) {
			uint64_t t0 = now_ns();

			if (rdma_post_recv(id, NULL, rbuf, o->reply, rmr))
				die("rdma_post_recv");
			fill(sbuf, o->request, seq);
			if (rdma_post_send(id, NULL, sbuf, o->request, smr, 0))
				die("rdma_post_send");
			wait_wc(id->recv_cq, id->recv_cq_channel, &wc);
			rtt[seq] = now_ns() - t0;
			if (wc.byte_len != o->reply || !filled(rbuf, o->reply, seq)) {
				fprintf(stderr, "reqresp: reply %ld: wrong bytes\n", seq);
				exit(1);
			}
			reap_sends(id);
		}
		report(o, rtt);
		rdma_disconnect(id);
	}
	rdma_dereg_mr(smr);
	rdma_dereg_mr(rmr);
	rdma_destroy_ep(id);
	if (listen_id)
		rdma_destroy_ep(listen_id);
}

static void usage(FILE *f)
{
	fputs("usage: reqresp server [--tcp] [-p PORT] [-s REPLY] [-q REQUEST]\n"
	      "       reqresp client [--tcp] [-p PORT] [-s REPLY] [-q REQUEST] [-n ITERS] HOST\n"
	      "One request in flight (REQUEST bytes, default 64), a reply of REPLY bytes\n"
	      "(default 4096), each side asleep until its data comes: over RDMA (rdma_cm,\n"
	      "SEND/RECV, completion channels) or with --tcp over a TCP socket (epoll).\n"
	      "PORT: default 18515. ITERS: default 20000. The client prints the median,\n"
	      "99th percentile and mean round trip in microseconds.\n", f);
}

int main(int argc, char **argv)
{
	struct opts o = { .port = "18515", .reply = 4096, .request = 64, .iters = 20000 };
	int i = 2;

	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		usage(argc > 1 && !strcmp(argv[1], "--help") ? stdout : stderr);
		return argc > 1 && !strcmp(argv[1], "--help") ? 0 : 2;
	}
	o.server = !strcmp(argv[1], "server");
	for (; i < argc; i++) {
		if (!strcmp(argv[i], "--tcp"))
			o.tcp = true;
		else if (!strcmp(argv[i], "-p") && i + 1 < argc)
			o.port = argv[++i];
		else if (!strcmp(argv[i], "-s") && i + 1 < argc)
			o.reply = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "-q") && i + 1 < argc)
			o.request = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			o.iters = strtol(argv[++i], NULL, 0);
		else if (!o.server && !o.host && argv[i][0] != '-')
			o.host = argv[i];
		else {
			usage(stderr);
			return 2;
		}
	}
	if ((!o.server && !o.host) || !o.reply || !o.request || o.iters < 1 ||
	    o.reply > (1u << 24) || o.request > (1u << 24)) {
		usage(stderr);
		return 2;
	}
	if (o.tcp)
		run_tcp(&o);
	else
		run_rdma(&o);
	return 0;
}
