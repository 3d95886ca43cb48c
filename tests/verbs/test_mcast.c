/*
 * UD multicast on one host, black-box (ibv_attach_mcast(3), ibv_detach_mcast(3), IBA
 * 10.5.2.5 and 10.2.4).
 *
 * What is asserted:
 * - ibv_query_device reports multicast groups and attachments per group.
 * - ibv_attach_mcast/ibv_detach_mcast return 0 or a positive errno: EINVAL for a NULL QP
 *   or GID, a QP that is not UD, a GID that is not multicast (IPv6 ff00::/8, or
 *   IPv4-mapped ::ffff:224.0.0.0/4), and for a detach from a group the QP is not in.
 *   Attaching twice to a group is 0 and one membership; one detach ends it.
 * - A membership is the abstract unix socket @softverbs/mcast/<MGID hex>/<QPN hex>,
 *   listed in /proc/net/unix from the attach to the detach, or to the member process's
 *   exit (killed or exiting without a detach).
 * - ibv_destroy_qp of an attached QP is EBUSY and leaves the QP working and attached;
 *   once detached from every group it is destroyed.
 * - A UD SEND to QPN 0xFFFFFF through a global AH whose DGID is the group reaches each
 *   member once (the sending QP too if it is a member): a RECV completion with
 *   IBV_WC_GRH, src_qp the sender's QPN, qp_num the member's, byte_len the message + 40,
 *   the GRH's DGID the group and its SGID the sender's GID; the data byte for byte;
 *   imm_data for SEND_WITH_IMM. So do max_mcast_qp_attach members (on one CQ, or a CQ
 *   each), IPv4-mapped groups, members in another process, and a member that waits on
 *   its completion channel (it gets a CQ event). A non-member,
 *   a member that detached and a member whose Q_Key differs from the WR's get nothing:
 *   a unicast marker sent after the multicast by the same QP (one QP's messages arrive in
 *   order) is the first thing their waiting receive gets. A send to a group without
 *   members completes successfully (a lost datagram).
 *
 * Groups are ff0e:7376::<pid>:<n> (and IPv4-mapped groups made from the pid), so that
 * runs of this program at the same time do not share a group.
 */
#include "verbs/sv_test_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define W TP_WAIT_MS
#define GRH 40
#define QKEY 0x11111111u  /* tu_conn_init's */
#define QKEY2 0x22222222u /* a member whose Q_Key differs */
#define MC_QPN 0xffffffu  /* IBA 10.5.2.5: the multicast destination QP */
#define SLOT 8192u        /* one receive: a GRH and up to 4096 bytes fit */
#define NSLOT 64u         /* receive slots at the start of the buffer */
#define SEND_OFF (NSLOT * SLOT)
#define MARK_OFF (SEND_OFF + SLOT)
#define MARK_LEN 24u
#define BUF_LEN (SEND_OFF + 4 * SLOT)
#define MAX_ATT 96
#define MAX_EXTRA 64
#define MAX_MEMBERS 2
#define STASH 128

static const struct tp_qp_opts ud_opts = { .type = IBV_QPT_UD };

/* The fixture: our endpoint, member processes, and the memberships teardown undoes. */
struct mc {
	struct tp_ep ep;
	struct tp_peer member[MAX_MEMBERS];
	struct {
		struct ibv_qp *qp;
		union ibv_gid mgid;
	} att[MAX_ATT];
	int natt;
	/* QPs and CQs besides the endpoint's (fanout_to_max_members and others). */
	struct ibv_qp *extra[MAX_EXTRA];
	int nextra;
	struct ibv_cq *extra_cq[MAX_EXTRA];
	int nextra_cq;
	/* Receive completions polled from ep.rcq but not yet looked at (next_recv). */
	struct ibv_wc stash[STASH];
	int nstash;
};

static int mc_setup(void **state)
{
	struct mc *x = calloc(1, sizeof(*x));

	if (!x)
		return -1;
	for (int i = 0; i < MAX_MEMBERS; i++)
		x->member[i].sock = x->member[i].pidfd = -1;
	*state = x;
	return 0;
}

static int mc_teardown(void **state)
{
	struct mc *x = *state;
	int rc = 0;

	/* A test that stopped early leaves memberships: without a detach, no destroy. */
	for (int i = x->natt - 1; i >= 0; i--)
		(void)ibv_detach_mcast(x->att[i].qp, &x->att[i].mgid, 0);
	for (int i = x->nextra - 1; i >= 0; i--)
		if (ibv_destroy_qp(x->extra[i])) {
			fprintf(stderr, "mc_teardown: ibv_destroy_qp: errno %d\n", errno);
			rc = -1;
		}
	for (int i = x->nextra_cq - 1; i >= 0; i--)
		if (ibv_destroy_cq(x->extra_cq[i])) {
			fprintf(stderr, "mc_teardown: ibv_destroy_cq: errno %d\n", errno);
			rc = -1;
		}
	for (int i = 0; i < MAX_MEMBERS; i++)
		if (x->member[i].pid || x->member[i].sock >= 0)
			rc |= tp_cleanup(&x->member[i]);
	rc |= tp_ep_close(&x->ep);
	free(x);
	*state = NULL;
	return rc;
}

static struct mc *mc_open(void **state)
{
	struct mc *x = *state;

	tp_ep_open(&x->ep, BUF_LEN, 0);
	return x;
}

/* ---- groups and memberships ---------------------------------------------------------- */

/* A group of this process only: ff0e:7376::<pid>:<n>. */
static void new_mgid(union ibv_gid *g)
{
	static uint32_t n;
	uint32_t pid = htonl((uint32_t)getpid()), k = htonl(++n);

	memset(g, 0, sizeof(*g));
	g->raw[0] = 0xff;
	g->raw[1] = 0x0e;
	g->raw[2] = 's';
	g->raw[3] = 'v';
	memcpy(&g->raw[8], &pid, 4);
	memcpy(&g->raw[12], &k, 4);
}

/* ::ffff:a.b.c.d */
static void v4_gid(union ibv_gid *g, uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = 0xff;
	g->raw[11] = 0xff;
	g->raw[12] = a;
	g->raw[13] = b;
	g->raw[14] = c;
	g->raw[15] = d;
}

static const char *gid_str(const union ibv_gid *g, char *out, size_t len)
{
	if (!inet_ntop(AF_INET6, g->raw, out, (socklen_t)len))
		snprintf(out, len, "?");
	return out;
}

static void expect_gid(const union ibv_gid *got, const union ibv_gid *want, const char *field,
		       const char *what)
{
	char g[64], w[64];

	if (!memcmp(got, want, sizeof(*got)))
		return;
	fail_msg("%s: %s is %s, expected %s", what, field, gid_str(got, g, sizeof(g)),
		 gid_str(want, w, sizeof(w)));
}

static void attach_qp(struct mc *x, struct ibv_qp *qp, const union ibv_gid *mgid)
{
	char g[64];
	int rc = ibv_attach_mcast(qp, mgid, 0);

	if (rc)
		fail_msg("ibv_attach_mcast(QP %u, %s) returned %d, expected 0", qp->qp_num,
			 gid_str(mgid, g, sizeof(g)), rc);
	for (int i = 0; i < x->natt; i++)
		if (x->att[i].qp == qp && !memcmp(&x->att[i].mgid, mgid, sizeof(*mgid)))
			return;
	assert_true(x->natt < MAX_ATT);
	x->att[x->natt].qp = qp;
	x->att[x->natt++].mgid = *mgid;
}

static void detach_qp(struct mc *x, struct ibv_qp *qp, const union ibv_gid *mgid)
{
	char g[64];
	int rc = ibv_detach_mcast(qp, mgid, 0);

	if (rc)
		fail_msg("ibv_detach_mcast(QP %u, %s) returned %d, expected 0", qp->qp_num,
			 gid_str(mgid, g, sizeof(g)), rc);
	for (int i = 0; i < x->natt; i++)
		if (x->att[i].qp == qp && !memcmp(&x->att[i].mgid, mgid, sizeof(*mgid))) {
			x->att[i] = x->att[--x->natt];
			break;
		}
}

/* The same for the endpoint's QP @qp. */
static void attach(struct mc *x, int qp, const union ibv_gid *mgid)
{
	attach_qp(x, x->ep.qp[qp], mgid);
}

static void detach(struct mc *x, int qp, const union ibv_gid *mgid)
{
	detach_qp(x, x->ep.qp[qp], mgid);
}

/* A UD QP of our endpoint in RTS with Q_Key @qkey: its index. */
static int ud_qp(struct mc *x, uint32_t qkey)
{
	int qp = tp_ep_create_qp(&x->ep, &ud_opts);
	struct tu_conn c;

	tu_conn_init(&c, x->ep.res, 0);
	c.qkey = qkey;
	assert_int_equal(tu_qp_connect(x->ep.qp[qp], &c, IBV_QPS_RTS), 0);
	return qp;
}

static uint32_t qpn_of(const struct mc *x, int qp)
{
	return x->ep.qp[qp]->qp_num;
}

/* ---- /proc/net/unix -------------------------------------------------------------------- */

/* How many sockets /proc/net/unix lists as the membership of @qpn in @mgid (@qpn < 0:
 * of any QP in @mgid). */
static int proc_count(const union ibv_gid *mgid, long qpn)
{
	char name[128], line[512];
	size_t n;
	FILE *f;
	int count = 0;

	n = (size_t)snprintf(name, sizeof(name), " @softverbs/mcast/");
	for (int i = 0; i < 16; i++)
		n += (size_t)snprintf(name + n, sizeof(name) - n, "%02x", mgid->raw[i]);
	snprintf(name + n, sizeof(name) - n, "/");
	if (qpn >= 0)
		snprintf(name + n, sizeof(name) - n, "/%06lx", qpn);
	f = fopen("/proc/net/unix", "re");
	if (!f)
		fail_msg("cannot read /proc/net/unix: errno %d", errno);
	while (fgets(line, sizeof(line), f)) {
		char *at = strstr(line, name);

		if (!at)
			continue;
		at += strlen(name);
		if (qpn < 0 || *at == '\n' || *at == '\0')
			count++;
	}
	fclose(f);
	return count;
}

static void expect_proc(const union ibv_gid *mgid, long qpn, int want, const char *what)
{
	char g[64], q[32];
	int got = proc_count(mgid, qpn);

	if (qpn >= 0)
		snprintf(q, sizeof(q), "QP %06lx", qpn);
	else
		snprintf(q, sizeof(q), "any QP");
	if (got != want)
		fail_msg("%s: /proc/net/unix lists %d membership(s) of %s in %s, expected %d",
			 what, got, q, gid_str(mgid, g, sizeof(g)), want);
}

/* A membership ends when its socket closes; a process's sockets close as it exits. */
static void wait_proc(const union ibv_gid *mgid, long qpn, int want, const char *what)
{
	long long end = tu_now_ms() + W;
	char g[64];
	int got;

	while ((got = proc_count(mgid, qpn)) != want) {
		if (tu_now_ms() > end)
			fail_msg("%s: /proc/net/unix still lists %d membership(s) of QP %06lx in "
				 "%s after %d ms, expected %d",
				 what, got, qpn, gid_str(mgid, g, sizeof(g)), W, want);
		sched_yield();
	}
}

/* ---- sending and receiving ------------------------------------------------------------- */

/* A SEND of @len bytes at @off through a global AH to @dgid, to @qpn with @qkey. */
static struct tp_wr ud_wr(const struct mc *x, uint64_t id, uint32_t off, uint32_t len,
			  const union ibv_gid *dgid, uint32_t qpn, uint32_t qkey)
{
	struct tp_wr w = tp_wr1(id, IBV_WR_SEND, off, len);

	tu_fill_ah(x->ep.res, &w.ah);
	w.ah.grh.dgid = *dgid;
	w.remote_qpn = qpn;
	w.remote_qkey = qkey;
	return w;
}

/* The multicast SEND of message @seed (@len bytes). */
static struct tp_wr mc_wr(struct mc *x, uint64_t id, uint32_t len, uint32_t seed,
			  const union ibv_gid *mgid, uint32_t qkey)
{
	tp_fill(x->ep.buf + SEND_OFF, len, seed, 0);
	return ud_wr(x, id, SEND_OFF, len, mgid, MC_QPN, qkey);
}

/* A unicast marker (message @seed, MARK_LEN bytes) to QP @qpn of this host. */
static struct tp_wr mark_wr(struct mc *x, uint64_t id, uint32_t seed, uint32_t qpn,
			    uint32_t qkey)
{
	tp_fill(x->ep.buf + MARK_OFF, MARK_LEN, seed, 0);
	return ud_wr(x, id, MARK_OFF, MARK_LEN, &x->ep.res->gid, qpn, qkey);
}

/* Posts @n WRs (one chain) on QP @qp; every one must complete successfully, in order. */
static void send_all(struct mc *x, int qp, const struct tp_wr *w, int n)
{
	int bad;

	assert_int_equal(tp_ep_post_send(&x->ep, qp, w, n, &bad), 0);
	for (int i = 0; i < n; i++)
		tp_expect_wc(x->ep.scq, w[i].wr_id, IBV_WC_SUCCESS, W, NULL);
}

static void post_slot(struct mc *x, int qp, uint32_t slot)
{
	struct tp_sge sge = { slot * SLOT, SLOT };

	assert_true(slot < NSLOT);
	assert_int_equal(tp_ep_post_recv(&x->ep, qp, slot, &sge, 1), 0);
}

/* The next receive completion of QP @qpn (all QPs share ep.rcq; one QP's come in order). */
static void next_recv(struct mc *x, uint32_t qpn, struct ibv_wc *out, const char *what)
{
	long long end = tu_now_ms() + W;

	for (;;) {
		int r;

		for (int i = 0; i < x->nstash; i++)
			if (x->stash[i].qp_num == qpn) {
				*out = x->stash[i];
				memmove(&x->stash[i], &x->stash[i + 1],
					(size_t)(x->nstash - i - 1) * sizeof(x->stash[0]));
				x->nstash--;
				return;
			}
		if (x->nstash == STASH)
			fail_msg("%s: %d receive completions of other QPs pile up", what, STASH);
		r = ibv_poll_cq(x->ep.rcq, STASH - x->nstash, x->stash + x->nstash);
		assert_true(r >= 0);
		x->nstash += r;
		if (!r && tu_now_ms() > end)
			fail_msg("%s: no receive completion at QP %u within %d ms", what, qpn, W);
	}
}

/* Nothing more arrived at any of our QPs. */
static void expect_no_more_recv(struct mc *x, const char *what)
{
	if (x->nstash)
		fail_msg("%s: an extra receive completion at QP %u (wr_id %llu, byte_len %u)",
			 what, x->stash[0].qp_num, (unsigned long long)x->stash[0].wr_id,
			 x->stash[0].byte_len);
	tp_expect_no_wc(x->ep.rcq, 0, what);
}

/* @wc is the multicast copy of message @seed (@len bytes) from @src at our QP @qpn, in
 * @slot. */
static void check_mc_wc(struct mc *x, const struct ibv_wc *wc, uint32_t qpn, uint32_t slot,
			uint32_t len, uint32_t seed, uint32_t src, const union ibv_gid *mgid,
			const char *m)
{
	const struct ibv_grh *grh = (const struct ibv_grh *)(x->ep.buf + slot * SLOT);

	if (wc->status != IBV_WC_SUCCESS)
		fail_msg("%s: status %s", m, ibv_wc_status_str(wc->status));
	tp_expect_eq((long long)wc->wr_id, slot, "wr_id (the first receive waiting)", m);
	tp_expect_eq(wc->opcode, IBV_WC_RECV, "opcode", m);
	tp_expect_eq(wc->byte_len, len + GRH, "byte_len (message + 40-byte GRH)", m);
	tp_expect_eq(!!(wc->wc_flags & IBV_WC_GRH), 1, "IBV_WC_GRH", m);
	tp_expect_eq(wc->src_qp, src, "src_qp (the sender's QPN)", m);
	tp_expect_eq(wc->qp_num, qpn, "qp_num", m);
	expect_gid(&grh->dgid, mgid, "the GRH's DGID (the group)", m);
	expect_gid(&grh->sgid, &x->ep.res->gid, "the GRH's SGID (the sender's GID 0)", m);
	tp_assert_pattern(x->ep.buf + slot * SLOT + GRH, len, seed, 0, m);
}

/* The next receive completion of our QP @qpn is that multicast copy. */
static void expect_mc_recv_qpn(struct mc *x, uint32_t qpn, uint32_t slot, uint32_t len,
			       uint32_t seed, uint32_t src, const union ibv_gid *mgid,
			       const char *what, struct ibv_wc *out)
{
	struct ibv_wc wc;
	char m[160];

	snprintf(m, sizeof(m), "%s, at member QP %u", what, qpn);
	next_recv(x, qpn, &wc, m);
	check_mc_wc(x, &wc, qpn, slot, len, seed, src, mgid, m);
	if (out)
		*out = wc;
}

static void expect_mc_recv(struct mc *x, int qp, uint32_t slot, uint32_t len, uint32_t seed,
			   uint32_t src, const union ibv_gid *mgid, const char *what)
{
	expect_mc_recv_qpn(x, qpn_of(x, qp), slot, len, seed, src, mgid, what, NULL);
}

/* The first receive completion of QP @qp is marker @seed in @slot: whatever was sent to
 * the QP before the marker (by the same sender) did not arrive. */
static void expect_marker_first(struct mc *x, int qp, uint32_t slot, uint32_t seed,
				const char *what)
{
	struct ibv_wc wc;
	char m[160];

	snprintf(m, sizeof(m), "%s, at QP %u", what, qpn_of(x, qp));
	next_recv(x, qpn_of(x, qp), &wc, m);
	if (wc.status != IBV_WC_SUCCESS)
		fail_msg("%s: status %s", m, ibv_wc_status_str(wc.status));
	if (wc.wr_id != slot || wc.byte_len != MARK_LEN + GRH ||
	    tp_mismatch(x->ep.buf + slot * SLOT + GRH, MARK_LEN, seed, 0) >= 0)
		fail_msg("%s: its first receive got %u bytes (wr_id %llu), not the %u-byte marker "
			 "sent after the multicast: the multicast reached it",
			 m, wc.byte_len, (unsigned long long)wc.wr_id, MARK_LEN + GRH);
}

/* ---- device ---------------------------------------------------------------------------- */

static void test_device_reports_mcast_limits(void **state)
{
	struct tu_res *res = *state;
	struct ibv_device_attr a;

	memset(&a, 0, sizeof(a));
	assert_int_equal(ibv_query_device(res->ctx, &a), 0);
	if (a.max_mcast_grp <= 0)
		fail_msg("max_mcast_grp is %d, expected > 0 (multicast is supported)",
			 a.max_mcast_grp);
	if (a.max_mcast_qp_attach <= 0)
		fail_msg("max_mcast_qp_attach is %d, expected > 0", a.max_mcast_qp_attach);
	if (a.max_total_mcast_qp_attach < a.max_mcast_qp_attach)
		fail_msg("max_total_mcast_qp_attach %d < max_mcast_qp_attach %d",
			 a.max_total_mcast_qp_attach, a.max_mcast_qp_attach);
}

/* ---- arguments --------------------------------------------------------------------------- */

static void test_bad_arguments_are_einval(void **state)
{
	struct mc *x = mc_open(state);
	const uint8_t p1 = (uint8_t)(getpid() >> 16), p2 = (uint8_t)(getpid() >> 8),
		      p3 = (uint8_t)getpid();
	int ud = ud_qp(x, QKEY);
	int rc_qp = tp_ep_create_qp(&x->ep, &(struct tp_qp_opts){ .type = IBV_QPT_RC });
	int uc_qp = tp_ep_create_qp(&x->ep, &(struct tp_qp_opts){ .type = IBV_QPT_UC });
	union ibv_gid mgid, not_mc[8], mc[4];
	char g[64];
	int n_not = 0;

	new_mgid(&mgid);
	/* Not multicast: our GID, ::, fe80::1, IPv4-mapped unicast and the neighbours of
	 * 224.0.0.0/4, and 224.0.0.1 not IPv4-mapped (::e000:1). */
	not_mc[n_not++] = x->ep.res->gid;
	memset(&not_mc[n_not++], 0, sizeof(mgid));
	memset(&not_mc[n_not], 0, sizeof(mgid));
	not_mc[n_not].raw[0] = 0xfe;
	not_mc[n_not].raw[1] = 0x80;
	not_mc[n_not++].raw[15] = 1;
	v4_gid(&not_mc[n_not++], 192, 168, 1, 1);
	v4_gid(&not_mc[n_not++], 223, 255, 255, 255);
	v4_gid(&not_mc[n_not++], 240, p1, p2, p3);
	v4_gid(&not_mc[n_not], 224, 0, 0, 1);
	not_mc[n_not].raw[10] = not_mc[n_not].raw[11] = 0;
	n_not++;
	/* Multicast: ff0e:..., ff02:..., ::ffff:224.x.y.z, ::ffff:239.x.y.z. */
	mc[0] = mgid;
	new_mgid(&mc[1]);
	mc[1].raw[1] = 0x02;
	v4_gid(&mc[2], 224, p1, p2, p3);
	v4_gid(&mc[3], 239, p1, p2, p3);

	assert_int_equal(ibv_attach_mcast(NULL, &mgid, 0), EINVAL);
	assert_int_equal(ibv_attach_mcast(x->ep.qp[ud], NULL, 0), EINVAL);
	assert_int_equal(ibv_detach_mcast(NULL, &mgid, 0), EINVAL);
	assert_int_equal(ibv_detach_mcast(x->ep.qp[ud], NULL, 0), EINVAL);
	/* Only UD QPs join groups (ib_attach_mcast: EINVAL otherwise). */
	assert_int_equal(ibv_attach_mcast(x->ep.qp[rc_qp], &mgid, 0), EINVAL);
	assert_int_equal(ibv_attach_mcast(x->ep.qp[uc_qp], &mgid, 0), EINVAL);
	assert_int_equal(ibv_detach_mcast(x->ep.qp[rc_qp], &mgid, 0), EINVAL);
	assert_int_equal(ibv_detach_mcast(x->ep.qp[uc_qp], &mgid, 0), EINVAL);
	expect_proc(&mgid, -1, 0, "after attaches of an RC and a UC QP were refused");
	/* Not attached: a detach is EINVAL. */
	assert_int_equal(ibv_detach_mcast(x->ep.qp[ud], &mgid, 0), EINVAL);

	for (int i = 0; i < n_not; i++) {
		int rc = ibv_attach_mcast(x->ep.qp[ud], &not_mc[i], 0);

		if (rc != EINVAL)
			fail_msg("ibv_attach_mcast(UD QP, %s) returned %d, expected EINVAL (%d): "
				 "not a multicast GID",
				 gid_str(&not_mc[i], g, sizeof(g)), rc, EINVAL);
		expect_proc(&not_mc[i], -1, 0, "after a refused attach");
		rc = ibv_detach_mcast(x->ep.qp[ud], &not_mc[i], 0);
		if (rc != EINVAL)
			fail_msg("ibv_detach_mcast(UD QP, %s) returned %d, expected EINVAL (%d)",
				 gid_str(&not_mc[i], g, sizeof(g)), rc, EINVAL);
	}
	for (unsigned int i = 0; i < ARRAY_LEN(mc); i++) {
		attach(x, ud, &mc[i]);
		expect_proc(&mc[i], qpn_of(x, ud), 1, gid_str(&mc[i], g, sizeof(g)));
		detach(x, ud, &mc[i]);
		expect_proc(&mc[i], -1, 0, "after the detach");
	}
	/* The QP holds no group: it is destroyed. */
	assert_int_equal(ibv_destroy_qp(x->ep.qp[ud]), 0);
	x->ep.qp[ud] = NULL;
}

/* ---- membership -------------------------------------------------------------------------- */

static void test_attach_detach_membership(void **state)
{
	struct mc *x = mc_open(state);
	int a = tp_ep_create_qp(&x->ep, &ud_opts); /* RESET: a QP joins in any state */
	int b = ud_qp(x, QKEY);
	union ibv_gid g1, g2;

	new_mgid(&g1);
	new_mgid(&g2);
	expect_proc(&g1, -1, 0, "before any attach");
	attach(x, a, &g1);
	expect_proc(&g1, qpn_of(x, a), 1, "after the attach");
	/* Twice is 0 and still one membership (rxe, mlx5). */
	attach(x, a, &g1);
	expect_proc(&g1, qpn_of(x, a), 1, "after attaching twice");
	expect_proc(&g1, -1, 1, "after attaching twice");
	/* A second group, a second QP. */
	attach(x, a, &g2);
	attach(x, b, &g1);
	expect_proc(&g2, qpn_of(x, a), 1, "QP a in group 2");
	expect_proc(&g1, qpn_of(x, b), 1, "QP b in group 1");
	expect_proc(&g1, -1, 2, "group 1 with QPs a and b");
	/* One detach ends the membership attached twice; the others stay. */
	detach(x, a, &g1);
	expect_proc(&g1, qpn_of(x, a), 0, "after the detach of QP a from group 1");
	expect_proc(&g2, qpn_of(x, a), 1, "QP a in group 2 after its detach from group 1");
	expect_proc(&g1, qpn_of(x, b), 1, "QP b in group 1 after QP a left");
	assert_int_equal(ibv_detach_mcast(x->ep.qp[a], &g1, 0), EINVAL);
	detach(x, a, &g2);
	detach(x, b, &g1);
	expect_proc(&g1, -1, 0, "after every detach");
	expect_proc(&g2, -1, 0, "after every detach");
	assert_int_equal(ibv_detach_mcast(x->ep.qp[b], &g1, 0), EINVAL);
	/* Attached twice, detached once: nothing holds the QP any more. */
	attach(x, b, &g2);
	attach(x, b, &g2);
	detach(x, b, &g2);
	assert_int_equal(ibv_destroy_qp(x->ep.qp[b]), 0);
	x->ep.qp[b] = NULL;
	assert_int_equal(ibv_destroy_qp(x->ep.qp[a]), 0);
	x->ep.qp[a] = NULL;
}

/* ib_attach_mcast holds the QP: destroying it while attached is EBUSY, and leaves it as
 * it was (attached, receiving). */
static void test_destroy_attached_qp_is_ebusy(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY);
	union ibv_gid g1, g2;
	struct tp_wr w;

	new_mgid(&g1);
	new_mgid(&g2);
	attach(x, a, &g1);
	attach(x, a, &g2);
	assert_int_equal(ibv_destroy_qp(x->ep.qp[a]), EBUSY);
	expect_proc(&g1, qpn_of(x, a), 1, "after a refused destroy");
	expect_proc(&g2, qpn_of(x, a), 1, "after a refused destroy");
	tp_expect_eq(tu_query_state(x->ep.qp[a]), IBV_QPS_RTS, "state", "after a refused destroy");
	post_slot(x, a, 0);
	w = mc_wr(x, 1, 300, 1, &g1, QKEY);
	send_all(x, s, &w, 1);
	expect_mc_recv(x, a, 0, 300, 1, qpn_of(x, s), &g1, "multicast after a refused destroy");

	detach(x, a, &g1);
	assert_int_equal(ibv_destroy_qp(x->ep.qp[a]), EBUSY); /* still in group 2 */
	detach(x, a, &g2);
	assert_int_equal(ibv_destroy_qp(x->ep.qp[a]), 0);
	x->ep.qp[a] = NULL;
	expect_proc(&g1, -1, 0, "after the destroy");
	expect_proc(&g2, -1, 0, "after the destroy");
	expect_no_more_recv(x, "after the destroy");
}

/* ---- fan-out ----------------------------------------------------------------------------- */

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return 128u << m; /* IBV_MTU_256 is 1 */
}

/* Members a, b and the sender s itself get one copy each; a non-member n gets none. */
static void test_fanout_one_copy_per_member(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY), b = ud_qp(x, QKEY), n = ud_qp(x, QKEY);
	const uint32_t mtu = mtu_bytes(x->ep.res->port.active_mtu);
	const uint32_t lens[] = { 0, 1, 1000, mtu < 4096 ? mtu : 4096 };
	const int member[] = { s, a, b };
	union ibv_gid g;

	new_mgid(&g);
	attach(x, s, &g);
	attach(x, a, &g);
	attach(x, b, &g);
	expect_proc(&g, -1, 3, "group of s, a and b");
	for (uint32_t k = 0; k < ARRAY_LEN(lens); k++) {
		const uint32_t base = k * 8, seed = 100 + k, mseed = 200 + k;
		struct tp_wr w[5];
		char what[96];

		snprintf(what, sizeof(what), "multicast SEND%s of %u bytes",
			 k == 1 ? "_WITH_IMM" : "", lens[k]);
		/* Each member: a receive for the multicast, one for its marker. */
		for (int i = 0; i < 3; i++) {
			post_slot(x, member[i], base + 2 * (uint32_t)i);
			post_slot(x, member[i], base + 2 * (uint32_t)i + 1);
		}
		post_slot(x, n, base + 6);
		w[0] = mc_wr(x, 10 * k, lens[k], seed, &g, QKEY);
		if (k == 1) {
			w[0].opcode = IBV_WR_SEND_WITH_IMM;
			w[0].imm = htonl(0x5eed0000u + k);
		}
		/* A marker (the same bytes) to each member and to the non-member. */
		w[1] = mark_wr(x, 10 * k + 1, mseed, qpn_of(x, s), QKEY);
		w[2] = mark_wr(x, 10 * k + 2, mseed, qpn_of(x, a), QKEY);
		w[3] = mark_wr(x, 10 * k + 3, mseed, qpn_of(x, b), QKEY);
		w[4] = mark_wr(x, 10 * k + 4, mseed, qpn_of(x, n), QKEY);
		send_all(x, s, w, 5);
		for (int i = 0; i < 3; i++) {
			const uint32_t mslot = base + 2 * (uint32_t)i + 1;
			struct ibv_wc wc;
			char m[192];

			expect_mc_recv_qpn(x, qpn_of(x, member[i]), base + 2 * (uint32_t)i,
					   lens[k], seed, qpn_of(x, s), &g, what, &wc);
			tp_expect_eq(!!(wc.wc_flags & IBV_WC_WITH_IMM), k == 1, "IBV_WC_WITH_IMM",
				     what);
			if (k == 1)
				tp_expect_eq(wc.imm_data, w[0].imm, "imm_data", what);
			/* The second receive holds the marker, not a second copy. */
			snprintf(m, sizeof(m), "marker after the %s (one copy per member)", what);
			next_recv(x, qpn_of(x, member[i]), &wc, m);
			tp_expect_eq(wc.status, IBV_WC_SUCCESS, "status", m);
			tp_expect_eq((long long)wc.wr_id, mslot, "wr_id of the second receive", m);
			tp_expect_eq(wc.byte_len, MARK_LEN + GRH,
				     "byte_len of the second receive (a second copy?)", m);
			tp_assert_pattern(x->ep.buf + mslot * SLOT + GRH, MARK_LEN, mseed, 0, m);
		}
		expect_marker_first(x, n, base + 6, mseed, "non-member");
		expect_no_more_recv(x, what);
	}
}

/*
 * As many members as the device lets a group have (max_mcast_qp_attach; softverbs fans
 * out to at most 64), each receiving on the endpoint's one receive CQ (@own_cq false) or
 * on a CQ of its own (@own_cq true): one copy each.
 */
static void fanout_to_max_members(void **state, bool own_cq)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY);
	int n = x->ep.res->dev.max_mcast_qp_attach < MAX_EXTRA ?
			x->ep.res->dev.max_mcast_qp_attach :
			MAX_EXTRA;
	struct tu_conn c;
	union ibv_gid g;
	struct tp_wr w;
	char what[96];

	assert_true(n > 0);
	new_mgid(&g);
	tu_conn_init(&c, x->ep.res, 0);
	for (int i = 0; i < n; i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = x->ep.scq,
			.recv_cq = x->ep.rcq,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_UD,
		};
		struct ibv_sge sge = { (uintptr_t)(x->ep.buf + (uint32_t)i * SLOT), SLOT,
				       x->ep.mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 },
				   *bad;
		struct ibv_qp *qp;

		if (own_cq) {
			a.recv_cq = ibv_create_cq(x->ep.res->ctx, 4, NULL, NULL, 0);
			if (!a.recv_cq)
				fail_msg("ibv_create_cq for member %d of %d: errno %d", i + 1, n,
					 errno);
			x->extra_cq[x->nextra_cq++] = a.recv_cq;
		}
		qp = ibv_create_qp(x->ep.res->pd, &a);
		if (!qp)
			fail_msg("ibv_create_qp of member %d of %d: errno %d", i + 1, n, errno);
		x->extra[x->nextra++] = qp;
		assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
		assert_int_equal(ibv_post_recv(qp, &rwr, &bad), 0);
		attach_qp(x, qp, &g);
	}
	expect_proc(&g, -1, n, "group of max_mcast_qp_attach members");
	snprintf(what, sizeof(what), "multicast to a group of %d members (%s)", n,
		 own_cq ? "a CQ each" : "one receive CQ");
	w = mc_wr(x, 1, 64, 11, &g, QKEY);
	send_all(x, s, &w, 1);

	if (own_cq) {
		for (int i = 0; i < n; i++) {
			struct ibv_wc wc;
			char m[160];

			snprintf(m, sizeof(m), "%s, at member %d (QP %u)", what, i + 1,
				 x->extra[i]->qp_num);
			if (tu_poll(x->extra_cq[i], 1, &wc, W) != 1)
				fail_msg("%s: no receive completion within %d ms", m, W);
			check_mc_wc(x, &wc, x->extra[i]->qp_num, (uint32_t)i, 64, 11,
				    qpn_of(x, s), &g, m);
			tp_expect_no_wc(x->extra_cq[i], 0, m);
		}
		expect_no_more_recv(x, what);
		return;
	}
	/* One CQ: wait (bounded) for all n, then say which members got nothing. */
	{
		long long end = tu_now_ms() + W;
		int got = 0, first_missing = -1;

		while (x->nstash < n && tu_now_ms() <= end) {
			int r = ibv_poll_cq(x->ep.rcq, STASH - x->nstash, x->stash + x->nstash);

			assert_true(r >= 0);
			x->nstash += r;
		}
		for (int i = 0; i < n; i++) {
			bool seen = false;

			for (int k = 0; k < x->nstash && !seen; k++)
				seen = x->stash[k].qp_num == x->extra[i]->qp_num;
			got += seen;
			if (!seen && first_missing < 0)
				first_missing = i;
		}
		if (got != n)
			fail_msg("%s: %d of %d members got their copy within %d ms; the "
				 "first without is member %d (QP %u, QP number %d of the CQ, "
				 "counting the sender)",
				 what, got, n, W, first_missing + 1,
				 x->extra[first_missing]->qp_num, first_missing + 2);
	}
	for (int i = 0; i < n; i++)
		expect_mc_recv_qpn(x, x->extra[i]->qp_num, (uint32_t)i, 64, 11, qpn_of(x, s), &g,
				   what, NULL);
	expect_no_more_recv(x, what);
}

/*
 * 56 members sharing one receive CQ all get their copy. (This caught two bugs: QPs
 * created while the progress thread slept had unarmed fifos, so a sender of the same
 * process woke nobody, and polling a CQ moved only its first 16 QPs.)
 * test_fanout_to_max_members_cq_each: one CQ per member.
 */
static void test_fanout_to_max_members_one_cq(void **state)
{
	fanout_to_max_members(state, false);
}

static void test_fanout_to_max_members_cq_each(void **state)
{
	fanout_to_max_members(state, true);
}

/*
 * A member that waits on its completion channel (ibv_req_notify_cq, then the channel's
 * fd) is woken by the multicast. Its QP has a CQ of its own, which nothing polls.
 * (The QP is created while the progress thread sleeps: its fifo must be born armed.)
 */
static void test_member_waiting_on_channel_is_woken(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY);
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct pollfd pfd = { .fd = x->ep.ch->fd, .events = POLLIN };
	const char *what = "member waiting on its completion channel";
	struct ibv_cq *cq, *ev_cq = NULL;
	struct tu_conn c;
	struct ibv_qp *m;
	struct ibv_wc wc;
	union ibv_gid g;
	struct tp_wr w;
	void *ev_ctx = NULL;

	new_mgid(&g);
	cq = ibv_create_cq(x->ep.res->ctx, 8, NULL, x->ep.ch, 0);
	if (!cq)
		fail_msg("ibv_create_cq: errno %d", errno);
	x->extra_cq[x->nextra_cq++] = cq;
	a.send_cq = a.recv_cq = cq;
	m = ibv_create_qp(x->ep.res->pd, &a);
	if (!m)
		fail_msg("ibv_create_qp: errno %d", errno);
	x->extra[x->nextra++] = m;
	tu_conn_init(&c, x->ep.res, 0);
	assert_int_equal(tu_qp_connect(m, &c, IBV_QPS_RTS), 0);
	{
		struct ibv_sge sge = { (uintptr_t)x->ep.buf, SLOT, x->ep.mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 0, .sg_list = &sge, .num_sge = 1 }, *bad;

		assert_int_equal(ibv_post_recv(m, &rwr, &bad), 0);
	}
	attach_qp(x, m, &g);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	w = mc_wr(x, 1, 300, 21, &g, QKEY);
	send_all(x, s, &w, 1);
	if (poll(&pfd, 1, W) != 1)
		fail_msg("%s: no CQ event within %d ms after the multicast completed at the "
			 "sender (QP %u's copy was not processed)",
			 what, W, m->qp_num);
	assert_int_equal(ibv_get_cq_event(x->ep.ch, &ev_cq, &ev_ctx), 0);
	ibv_ack_cq_events(ev_cq, 1);
	assert_ptr_equal(ev_cq, cq);
	if (tu_poll(cq, 1, &wc, W) != 1)
		fail_msg("%s: a CQ event but no completion within %d ms", what, W);
	check_mc_wc(x, &wc, m->qp_num, 0, 300, 21, qpn_of(x, s), &g, what);
}

/* An IPv4-mapped group (::ffff:239.x.y.z, what RoCE makes of an IPv4 group) fans out
 * the same way; the GRH's DGID is the group. */
static void test_ipv4_mapped_group_fanout(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY), b = ud_qp(x, QKEY);
	const pid_t pid = getpid();
	union ibv_gid g;
	struct tp_wr w;

	v4_gid(&g, 239, (uint8_t)(pid >> 16), (uint8_t)(pid >> 8), (uint8_t)pid);
	attach(x, a, &g);
	attach(x, b, &g);
	expect_proc(&g, -1, 2, "IPv4-mapped group of a and b");
	post_slot(x, a, 0);
	post_slot(x, b, 1);
	w = mc_wr(x, 1, 777, 9, &g, QKEY);
	send_all(x, s, &w, 1);
	expect_mc_recv(x, a, 0, 777, 9, qpn_of(x, s), &g, "multicast to an IPv4-mapped group");
	expect_mc_recv(x, b, 1, 777, 9, qpn_of(x, s), &g, "multicast to an IPv4-mapped group");
	expect_no_more_recv(x, "multicast to an IPv4-mapped group");
}

/* A QP that detached gets nothing; attached again, it does. */
static void test_detached_qp_receives_nothing(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY), d = ud_qp(x, QKEY);
	union ibv_gid g;
	struct tp_wr w[2];

	new_mgid(&g);
	attach(x, a, &g);
	attach(x, d, &g);
	detach(x, d, &g);
	expect_proc(&g, qpn_of(x, d), 0, "after the detach");
	expect_proc(&g, qpn_of(x, a), 1, "the member that stayed");
	post_slot(x, a, 0);
	post_slot(x, d, 1);
	w[0] = mc_wr(x, 1, 500, 1, &g, QKEY);
	w[1] = mark_wr(x, 2, 2, qpn_of(x, d), QKEY);
	send_all(x, s, w, 2);
	/* The multicast went out: the member got it. */
	expect_mc_recv(x, a, 0, 500, 1, qpn_of(x, s), &g, "multicast after another QP detached");
	expect_marker_first(x, d, 1, 2, "QP detached before the multicast");
	expect_no_more_recv(x, "after the multicast to a group a QP left");

	/* Attached again: it is a member again. */
	attach(x, d, &g);
	post_slot(x, a, 2);
	post_slot(x, d, 3);
	w[0] = mc_wr(x, 3, 200, 3, &g, QKEY);
	send_all(x, s, w, 1);
	expect_mc_recv(x, a, 2, 200, 3, qpn_of(x, s), &g, "multicast after a re-attach");
	expect_mc_recv(x, d, 3, 200, 3, qpn_of(x, s), &g, "multicast after a re-attach");
	expect_no_more_recv(x, "after the multicast to the re-attached QP");
}

/* IBA 10.2.4: a member whose Q_Key is not the WR's drops the datagram. A Q_Key with the
 * high bit set in the WR is the sending QP's own (IBA 10.2.5). */
static void test_qkey_mismatch_not_delivered(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY), r = ud_qp(x, QKEY2);
	union ibv_gid g;
	struct tp_wr w[2];

	new_mgid(&g);
	attach(x, a, &g);
	attach(x, r, &g);

	/* Q_Key QKEY: a gets it, r (QKEY2) does not. */
	post_slot(x, a, 0);
	post_slot(x, r, 1);
	w[0] = mc_wr(x, 1, 100, 1, &g, QKEY);
	w[1] = mark_wr(x, 2, 2, qpn_of(x, r), QKEY2);
	send_all(x, s, w, 2);
	expect_mc_recv(x, a, 0, 100, 1, qpn_of(x, s), &g, "multicast with the member's Q_Key");
	expect_marker_first(x, r, 1, 2, "member with another Q_Key");
	expect_no_more_recv(x, "multicast with Q_Key 0x11111111");

	/* Q_Key QKEY2: r gets it, a does not. */
	post_slot(x, a, 2);
	post_slot(x, r, 3);
	w[0] = mc_wr(x, 3, 100, 3, &g, QKEY2);
	w[1] = mark_wr(x, 4, 4, qpn_of(x, a), QKEY);
	send_all(x, s, w, 2);
	expect_mc_recv(x, r, 3, 100, 3, qpn_of(x, s), &g, "multicast with the member's Q_Key");
	expect_marker_first(x, a, 2, 4, "member with another Q_Key");
	expect_no_more_recv(x, "multicast with Q_Key 0x22222222");

	/* 0x80000000: the sender's own Q_Key (QKEY): a again, not r. */
	post_slot(x, a, 4);
	post_slot(x, r, 5);
	w[0] = mc_wr(x, 5, 100, 5, &g, 0x80000000u);
	w[1] = mark_wr(x, 6, 6, qpn_of(x, r), QKEY2);
	send_all(x, s, w, 2);
	expect_mc_recv(x, a, 4, 100, 5, qpn_of(x, s), &g, "multicast with Q_Key 0x80000000");
	expect_marker_first(x, r, 5, 6, "member with another Q_Key than the sender's own");
	expect_no_more_recv(x, "multicast with Q_Key 0x80000000");
}

/* UD is unreliable: a datagram to a group nobody is in completes, and is lost. */
static void test_send_to_group_without_members(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY);
	union ibv_gid g;
	struct tp_wr w[2];

	new_mgid(&g);
	post_slot(x, a, 0);
	w[0] = mc_wr(x, 1, 100, 1, &g, QKEY);
	w[1] = mark_wr(x, 2, 2, qpn_of(x, a), QKEY);
	send_all(x, s, w, 2);
	expect_marker_first(x, a, 0, 2, "non-member after a multicast to an empty group");
	tp_expect_eq(tu_query_state(x->ep.qp[s]), IBV_QPS_RTS, "sender's state",
		     "after a multicast to an empty group");

	/* The group is not remembered empty: a member that joins now receives. */
	attach(x, a, &g);
	post_slot(x, a, 1);
	w[0] = mc_wr(x, 3, 100, 3, &g, QKEY);
	send_all(x, s, w, 1);
	expect_mc_recv(x, a, 1, 100, 3, qpn_of(x, s), &g, "multicast once the group has a member");

	/* And empty again after the detach. */
	detach(x, a, &g);
	post_slot(x, a, 2);
	w[0] = mc_wr(x, 4, 100, 4, &g, QKEY);
	w[1] = mark_wr(x, 5, 5, qpn_of(x, a), QKEY);
	send_all(x, s, w, 2);
	expect_marker_first(x, a, 2, 5, "the last member, detached");
	expect_no_more_recv(x, "multicast to a group that emptied");
}

/* ---- members in other processes ------------------------------------------------------------ */

/*
 * A member process: this program run afresh with "--mcast-member <fd>" (as tp_start's
 * agent), answering requests over a SOCK_SEQPACKET socket. It joins with one UD QP whose
 * receives wait in MB_SLOTS slots of SLOT bytes.
 */
static const char member_flag[] = "--mcast-member";

enum mb_op { MB_JOIN = 1, MB_RECV, MB_DETACH, MB_EXIT, MB_QUIT_ATTACHED };

#define MB_SLOTS 8u
#define MB_DATA 256u

struct mb_req {
	uint32_t op;
	uint32_t qkey;
	union ibv_gid mgid;
	int32_t timeout_ms;
};

struct mb_rep {
	int32_t rc;
	uint32_t qpn;
	int32_t n;
	struct ibv_wc wc;
	uint8_t data[GRH + MB_DATA]; /* the start of the slot the completion names */
};

static int member_sock = -1;

static void member_run(void **state)
{
	struct tp_ep ep;
	struct mb_req q;
	struct mb_rep rep;
	union ibv_gid joined;
	bool attached = false;
	int qp = -1;
	struct timeval tv = { .tv_sec = 60 }; /* bounded even if the parent stops asking */

	(void)state;
	memset(&ep, 0, sizeof(ep));
	setsockopt(member_sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		ssize_t r = read(member_sock, &q, sizeof(q));

		if (r != (ssize_t)sizeof(q)) {
			if (attached)
				(void)ibv_detach_mcast(ep.qp[qp], &joined, 0);
			tp_ep_close(&ep);
			fail_msg("member: the parent went away (read %zd, errno %d)", r, errno);
		}
		memset(&rep, 0, sizeof(rep));
		switch (q.op) {
		case MB_JOIN: {
			struct tu_conn c;

			assert_int_equal(qp, -1);
			tp_ep_open(&ep, MB_SLOTS * SLOT, 0);
			qp = tp_ep_create_qp(&ep, &ud_opts);
			tu_conn_init(&c, ep.res, 0);
			c.qkey = q.qkey;
			assert_int_equal(tu_qp_connect(ep.qp[qp], &c, IBV_QPS_RTS), 0);
			for (uint32_t k = 0; k < MB_SLOTS; k++)
				assert_int_equal(tp_ep_post_recv(&ep, qp, k,
								 &(struct tp_sge){ k * SLOT, SLOT },
								 1),
						 0);
			rep.rc = ibv_attach_mcast(ep.qp[qp], &q.mgid, 0);
			attached = !rep.rc;
			joined = q.mgid;
			rep.qpn = ep.qp[qp]->qp_num;
			break;
		}
		case MB_RECV:
			assert_true(qp >= 0);
			rep.n = tu_poll(ep.rcq, 1, &rep.wc, q.timeout_ms);
			if (rep.n == 1 && rep.wc.wr_id < MB_SLOTS)
				memcpy(rep.data, ep.buf + rep.wc.wr_id * SLOT, sizeof(rep.data));
			break;
		case MB_DETACH:
			assert_true(qp >= 0);
			rep.rc = ibv_detach_mcast(ep.qp[qp], &joined, 0);
			attached = attached && rep.rc;
			break;
		case MB_EXIT:
			if (attached)
				rep.rc = ibv_detach_mcast(ep.qp[qp], &joined, 0);
			rep.rc |= tp_ep_close(&ep);
			break;
		case MB_QUIT_ATTACHED:
			/* Leaves without a detach or a destroy: the exit ends the membership. */
			if (write(member_sock, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
				_exit(3);
			_exit(0);
		default:
			fail_msg("member: unknown request %u", q.op);
		}
		if (write(member_sock, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
			fail_msg("member: answer lost (errno %d)", errno);
		if (q.op == MB_EXIT)
			break;
	}
}

static void member_start(struct tp_peer *p)
{
	tp_spawn(p, "mcast-member", member_flag);
}

static void member_call(struct tp_peer *p, const struct mb_req *q, struct mb_rep *rep,
			int timeout_ms)
{
	struct pollfd pfd = { .fd = p->sock, .events = POLLIN };
	ssize_t r;

	if (send(p->sock, q, sizeof(*q), MSG_NOSIGNAL) != (ssize_t)sizeof(*q))
		fail_msg("request %u to member %d: errno %d (member gone?)", q->op, (int)p->pid,
			 errno);
	if (poll(&pfd, 1, timeout_ms) != 1)
		fail_msg("member %d did not answer request %u within %d ms", (int)p->pid, q->op,
			 timeout_ms);
	r = recv(p->sock, rep, sizeof(*rep), 0);
	if (r != (ssize_t)sizeof(*rep))
		fail_msg("request %u: member %d hung up (see its output above)", q->op,
			 (int)p->pid);
}

/* The member process joins @mgid with a new UD QP of Q_Key @qkey: its QPN. */
static uint32_t member_join(struct tp_peer *p, const union ibv_gid *mgid, uint32_t qkey)
{
	struct mb_req q = { .op = MB_JOIN, .qkey = qkey, .mgid = *mgid };
	struct mb_rep rep;

	member_call(p, &q, &rep, W);
	if (rep.rc)
		fail_msg("ibv_attach_mcast in member %d returned %d, expected 0", (int)p->pid,
			 rep.rc);
	return rep.qpn;
}

/* Waits up to @ms for the member to exit: its status (code, or 128 + signal). */
static int member_wait_exit(struct tp_peer *p, int ms)
{
	struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };
	int st;

	if (poll(&pfd, 1, ms) != 1)
		fail_msg("member %d did not exit within %d ms", (int)p->pid, ms);
	assert_int_equal(waitpid(p->pid, &st, 0), p->pid);
	p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	p->pid = 0;
	return p->status;
}

/* A member in another process gets its copy (and, detached, no more). */
static void test_member_in_other_process_receives(void **state)
{
	struct mc *x = mc_open(state);
	struct tp_peer *p = &x->member[0];
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY);
	struct mb_req q = { .op = MB_RECV, .timeout_ms = W };
	struct mb_rep rep;
	const struct ibv_grh *grh = (const struct ibv_grh *)rep.data;
	const char *what = "multicast to a member in another process";
	union ibv_gid g;
	struct tp_wr w[2];
	uint32_t pqpn;

	new_mgid(&g);
	member_start(p);
	pqpn = member_join(p, &g, QKEY);
	expect_proc(&g, pqpn, 1, "the other process's membership");
	attach(x, a, &g);
	post_slot(x, a, 0);
	w[0] = mc_wr(x, 1, 200, 1, &g, QKEY);
	send_all(x, s, w, 1);
	expect_mc_recv(x, a, 0, 200, 1, qpn_of(x, s), &g, "multicast to members in two processes");

	member_call(p, &q, &rep, 2 * W);
	if (rep.n != 1)
		fail_msg("%s: no receive completion within %d ms", what, W);
	if (rep.wc.status != IBV_WC_SUCCESS)
		fail_msg("%s: status %s", what, ibv_wc_status_str(rep.wc.status));
	tp_expect_eq((long long)rep.wc.wr_id, 0, "wr_id", what);
	tp_expect_eq(rep.wc.opcode, IBV_WC_RECV, "opcode", what);
	tp_expect_eq(rep.wc.byte_len, 200 + GRH, "byte_len", what);
	tp_expect_eq(!!(rep.wc.wc_flags & IBV_WC_GRH), 1, "IBV_WC_GRH", what);
	tp_expect_eq(rep.wc.src_qp, qpn_of(x, s), "src_qp", what);
	tp_expect_eq(rep.wc.qp_num, pqpn, "qp_num", what);
	expect_gid(&grh->dgid, &g, "the GRH's DGID", what);
	expect_gid(&grh->sgid, &x->ep.res->gid, "the GRH's SGID", what);
	tp_assert_pattern(rep.data + GRH, 200, 1, 0, what);

	/* Detached: the next thing it gets is the marker sent after the next multicast. */
	q.op = MB_DETACH;
	member_call(p, &q, &rep, W);
	tp_expect_eq(rep.rc, 0, "ibv_detach_mcast", "member in another process");
	expect_proc(&g, pqpn, 0, "after the other process's detach");
	post_slot(x, a, 1);
	w[0] = mc_wr(x, 2, 200, 2, &g, QKEY);
	w[1] = mark_wr(x, 3, 3, pqpn, QKEY);
	send_all(x, s, w, 2);
	expect_mc_recv(x, a, 1, 200, 2, qpn_of(x, s), &g, "multicast after the other left");
	q.op = MB_RECV;
	member_call(p, &q, &rep, 2 * W);
	if (rep.n != 1)
		fail_msg("member in another process, detached: the marker did not arrive within "
			 "%d ms", W);
	if (rep.wc.byte_len != MARK_LEN + GRH || tp_mismatch(rep.data + GRH, MARK_LEN, 3, 0) >= 0)
		fail_msg("member in another process, detached: its first receive after the "
			 "detach got %u bytes, not the %u-byte marker: the multicast reached it",
			 rep.wc.byte_len, MARK_LEN + GRH);

	q.op = MB_EXIT;
	member_call(p, &q, &rep, W);
	tp_expect_eq(rep.rc, 0, "the member's cleanup", "member in another process");
	tp_expect_eq(member_wait_exit(p, W), 0, "exit status", "member process");
	expect_no_more_recv(x, "after the other process left");
}

/* The kernel drops a process's sockets as it exits: killed, or exiting without a detach,
 * a member leaves its groups. */
static void test_membership_ends_with_member_process(void **state)
{
	struct mc *x = mc_open(state);
	int s = ud_qp(x, QKEY), a = ud_qp(x, QKEY);
	struct mb_req q = { .op = MB_QUIT_ATTACHED };
	struct mb_rep rep;
	union ibv_gid g;
	struct tp_wr w[2];
	uint32_t k0, k1;

	new_mgid(&g);
	member_start(&x->member[0]);
	member_start(&x->member[1]);
	k0 = member_join(&x->member[0], &g, QKEY);
	k1 = member_join(&x->member[1], &g, QKEY);
	expect_proc(&g, k0, 1, "member process 0");
	expect_proc(&g, k1, 1, "member process 1");
	expect_proc(&g, -1, 2, "group of two member processes");

	tp_kill(&x->member[0]);
	wait_proc(&g, k0, 0, "member process killed (SIGKILL)");
	expect_proc(&g, k1, 1, "the member process that still runs");

	member_call(&x->member[1], &q, &rep, W);
	tp_expect_eq(member_wait_exit(&x->member[1], W), 0, "exit status",
		     "member process exiting while attached");
	wait_proc(&g, k1, 0, "member process exited without a detach");
	expect_proc(&g, -1, 0, "after both member processes ended");

	/* The group is empty: a send to it completes, nothing arrives anywhere. */
	post_slot(x, a, 0);
	w[0] = mc_wr(x, 1, 100, 1, &g, QKEY);
	w[1] = mark_wr(x, 2, 2, qpn_of(x, a), QKEY);
	send_all(x, s, w, 2);
	expect_marker_first(x, a, 0, 2, "non-member after the members' processes ended");
	expect_no_more_recv(x, "multicast to a group whose processes ended");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_device_reports_mcast_limits, tu_setup,
						tu_teardown),
#define T(f) cmocka_unit_test_setup_teardown(f, mc_setup, mc_teardown)
		T(test_bad_arguments_are_einval),
		T(test_attach_detach_membership),
		T(test_destroy_attached_qp_is_ebusy),
		T(test_fanout_one_copy_per_member),
		T(test_fanout_to_max_members_cq_each),
		T(test_fanout_to_max_members_one_cq),
		T(test_member_waiting_on_channel_is_woken),
		T(test_ipv4_mapped_group_fanout),
		T(test_detached_qp_receives_nothing),
		T(test_qkey_mismatch_not_delivered),
		T(test_send_to_group_without_members),
		T(test_member_in_other_process_receives),
		T(test_membership_ends_with_member_process),
#undef T
	};

	if (argc == 3 && !strcmp(argv[1], member_flag)) {
		const struct CMUnitTest member[] = { cmocka_unit_test(member_run) };

		member_sock = atoi(argv[2]);
		exit(cmocka_run_group_tests_name("mcast-member", member, NULL, NULL) ? 1 : 0);
	}
	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
