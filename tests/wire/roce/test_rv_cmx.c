/*
 * One IB CM connection's exchange (src/wire/roce/rv_cmx.c) with no network: an active and
 * a passive side hand each other the MADs they send (through rv_cm_encode/decode), or lose
 * them, and the clock is the test's. Asserted: the REQ, REP, RTU exchange and its
 * communication IDs; DREQ and DREP either way, both at once, TimeWait and its exit; a
 * lost REQ, REP, RTU or DREP made good by the timer or by answering a duplicate again;
 * retries that run out (the REQ's Max CM Retries): a REJ with reason Timeout and
 * UNREACHABLE, or, for a DREQ, DISCONNECTED all the same; an MRA that stretches the wait;
 * a REJ with the consumer's reason and private data; MADs of other connections refused
 * (-ENOENT); calls in the wrong state refused (-EINVAL).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "wire/roce/rv_cmx.h"

#define T 14 /* CM response timeout: 4.096 µs × 2^14 = 67 ms */

struct pair {
	struct rv_cmx a, b; /* active, passive */
	uint64_t now;
};

static struct rv_cm_msg decode(const struct rv_cmx_out *o)
{
	struct rv_cm_msg m;

	assert_true(o->send);
	assert_int_equal(rv_cm_decode(o->mad, RV_MAD_LEN, &m), 0);
	return m;
}

/* @o's MAD into @to; what @to answers in *@back. */
static int pass(struct pair *p, const struct rv_cmx_out *o, struct rv_cmx *to,
		struct rv_cmx_out *back)
{
	struct rv_cm_msg m = decode(o);

	return rv_cmx_on_mad(to, &m, p->now, back);
}

static struct rv_cm_msg req(void)
{
	return (struct rv_cm_msg){ .attr = RV_CM_REQ, .tid = 0x1234, .local_id = 0x00110001,
				   .service_id = 0x01064e20, .qpn = 0x111, .starting_psn = 7,
				   .remote_cm_timeout = T, .local_cm_timeout = T,
				   .max_cm_retries = 2, .mtu = 3 };
}

static struct rv_cm_msg rep(void)
{
	return (struct rv_cm_msg){ .attr = RV_CM_REP, .local_id = 0x00220002, .qpn = 0x222,
				   .starting_psn = 9 };
}

/* REQ, REP, RTU: both ESTABLISHED; the MADs as the IBA has them. */
static void establish(struct pair *p)
{
	struct rv_cm_msg r = req(), m;
	struct rv_cmx_out o, o2;

	memset(p, 0, sizeof(*p));
	p->now = 1000;
	assert_int_equal(rv_cmx_connect(&p->a, &r, p->now, &o), 0);
	assert_int_equal(p->a.state, RV_CMX_REQ_SENT);
	m = decode(&o);
	assert_int_equal(m.attr, RV_CM_REQ);
	assert_int_equal(pass(p, &o, &p->b, &o2), 0);
	assert_int_equal(o2.event, RV_CMX_EV_REQUEST);
	assert_false(o2.send);
	assert_int_equal(p->b.peer.qpn, 0x111);
	r = rep();
	assert_int_equal(rv_cmx_accept(&p->b, &r, p->now, &o), 0);
	m = decode(&o);
	assert_int_equal(m.attr, RV_CM_REP);
	assert_int_equal(m.remote_id, 0x00110001); /* names the REQ's sender */
	assert_int_equal(m.tid, 0x1234);
	assert_int_equal(pass(p, &o, &p->a, &o2), 0);
	assert_int_equal(o2.event, RV_CMX_EV_ESTABLISHED);
	assert_int_equal(p->a.peer.qpn, 0x222);
	m = decode(&o2);
	assert_int_equal(m.attr, RV_CM_RTU);
	assert_int_equal(m.local_id, 0x00110001);
	assert_int_equal(m.remote_id, 0x00220002);
	assert_int_equal(pass(p, &o2, &p->b, &o), 0);
	assert_int_equal(o.event, RV_CMX_EV_ESTABLISHED);
	assert_false(o.send);
	assert_int_equal(p->a.deadline, 0);
	assert_int_equal(p->b.deadline, 0);
}

static void test_establish_and_disconnect(void **state)
{
	struct pair p;
	struct rv_cmx_out o, o2;
	struct rv_cm_msg m;

	(void)state;
	establish(&p);
	assert_int_equal(rv_cmx_disconnect(&p.a, 0x222, p.now, &o), 0);
	m = decode(&o);
	assert_int_equal(m.attr, RV_CM_DREQ);
	assert_int_equal(m.qpn, 0x222);
	assert_int_equal(pass(&p, &o, &p.b, &o2), 0);
	assert_int_equal(o2.event, RV_CMX_EV_DISCONNECTED);
	assert_int_equal(decode(&o2).attr, RV_CM_DREP);
	assert_int_equal(p.b.state, RV_CMX_TIMEWAIT);
	assert_int_equal(pass(&p, &o2, &p.a, &o), 0);
	assert_int_equal(o.event, RV_CMX_EV_DISCONNECTED);
	assert_int_equal(p.a.state, RV_CMX_TIMEWAIT);
	/* TimeWait ends on its timer, not before. */
	rv_cmx_on_timer(&p.a, p.now + RV_CMX_TIMEWAIT_NS - 1, &o);
	assert_int_equal(o.event, RV_CMX_EV_NONE);
	rv_cmx_on_timer(&p.a, p.now + RV_CMX_TIMEWAIT_NS, &o);
	assert_int_equal(o.event, RV_CMX_EV_TIMEWAIT_EXIT);
	assert_int_equal(p.a.state, RV_CMX_CLOSED);
}

/* The REQ lost twice, sent again on each timeout; the third time is the last retry's. */
static void test_lost_req_and_retries_out(void **state)
{
	struct pair p = { .now = 5000 };
	struct rv_cm_msg r = req();
	struct rv_cmx_out o, first;
	uint64_t wait = rv_cmx_wait_ns(T);

	(void)state;
	assert_int_equal(rv_cmx_connect(&p.a, &r, p.now, &first), 0);
	rv_cmx_on_timer(&p.a, p.now + wait - 1, &o);
	assert_false(o.send);
	for (int i = 0; i < 2; i++) { /* max_cm_retries 2: two more sends */
		p.now += wait;
		rv_cmx_on_timer(&p.a, p.now, &o);
		assert_true(o.send);
		assert_memory_equal(o.mad, first.mad, RV_MAD_LEN);
		assert_int_equal(o.event, RV_CMX_EV_NONE);
	}
	p.now += wait;
	rv_cmx_on_timer(&p.a, p.now, &o);
	assert_int_equal(o.event, RV_CMX_EV_UNREACHABLE);
	assert_int_equal(o.status, -ETIMEDOUT);
	assert_int_equal(decode(&o).attr, RV_CM_REJ);
	assert_int_equal(decode(&o).reason, RV_CM_REJ_TIMEOUT);
	assert_int_equal(p.a.state, RV_CMX_CLOSED);
}

/* The REP lost: the passive side's timer sends it again, and so does a duplicate REQ;
 * then the RTU lost: the duplicate REP it brings gets the RTU again. */
static void test_lost_rep_and_rtu(void **state)
{
	struct pair p = { .now = 100 };
	struct rv_cm_msg r = req();
	struct rv_cmx_out req_o, rep_o, o, o2;

	(void)state;
	assert_int_equal(rv_cmx_connect(&p.a, &r, p.now, &req_o), 0);
	assert_int_equal(pass(&p, &req_o, &p.b, &o), 0);
	r = rep();
	assert_int_equal(rv_cmx_accept(&p.b, &r, p.now, &rep_o), 0); /* ... lost */
	p.now += rv_cmx_wait_ns(T);
	rv_cmx_on_timer(&p.a, p.now, &o); /* the active side sends its REQ again */
	assert_memory_equal(o.mad, req_o.mad, RV_MAD_LEN);
	assert_int_equal(pass(&p, &o, &p.b, &o2), 0); /* a duplicate: the REP again */
	assert_memory_equal(o2.mad, rep_o.mad, RV_MAD_LEN);
	assert_int_equal(o2.event, RV_CMX_EV_NONE);
	rv_cmx_on_timer(&p.b, p.now, &o); /* and its own timer too */
	assert_memory_equal(o.mad, rep_o.mad, RV_MAD_LEN);
	assert_int_equal(pass(&p, &o, &p.a, &o2), 0);
	assert_int_equal(o2.event, RV_CMX_EV_ESTABLISHED); /* its RTU ... lost */
	assert_int_equal(pass(&p, &rep_o, &p.a, &o), 0); /* a late REP: the RTU again */
	assert_int_equal(o.event, RV_CMX_EV_NONE);
	assert_memory_equal(o.mad, o2.mad, RV_MAD_LEN);
	assert_int_equal(pass(&p, &o, &p.b, &o2), 0);
	assert_int_equal(o2.event, RV_CMX_EV_ESTABLISHED);
}

static void test_reject_and_mra(void **state)
{
	struct pair p = { .now = 1 };
	struct rv_cm_msg r = req(), mra = { .attr = RV_CM_MRA, .local_id = 0x00220002,
					      .remote_id = 0x00110001, .msg = 0,
					      .service_timeout = 20 };
	struct rv_cmx_out req_o, o, o2;
	uint8_t mad[RV_MAD_LEN];
	uint64_t deadline;

	(void)state;
	assert_int_equal(rv_cmx_connect(&p.a, &r, p.now, &req_o), 0);
	deadline = p.a.deadline;
	/* An MRA: the REP comes later; the timer does not fire at the old deadline. */
	assert_int_equal(rv_cm_encode(&mra, mad), 0);
	memcpy(o.mad, mad, sizeof(mad));
	o.send = true;
	assert_int_equal(pass(&p, &o, &p.a, &o2), 0);
	assert_true(p.a.deadline >= p.now + rv_cmx_wait_ns(20));
	rv_cmx_on_timer(&p.a, deadline, &o);
	assert_false(o.send);
	assert_int_equal(o.event, RV_CMX_EV_NONE);
	/* The passive side refuses, with the consumer's reason and private data. */
	assert_int_equal(pass(&p, &req_o, &p.b, &o), 0);
	assert_int_equal(rv_cmx_reject(&p.b, RV_CM_REJ_CONSUMER_DEFINED, "no!", 3, &o), 0);
	assert_int_equal(p.b.state, RV_CMX_CLOSED);
	assert_int_equal(decode(&o).remote_id, 0x00110001);
	assert_int_equal(pass(&p, &o, &p.a, &o2), 0);
	assert_int_equal(o2.event, RV_CMX_EV_REJECTED);
	assert_int_equal(o2.status, RV_CM_REJ_CONSUMER_DEFINED);
	assert_memory_equal(p.a.peer.private_data, "no!", 3);
	assert_int_equal(p.a.state, RV_CMX_CLOSED);
	assert_int_equal(p.a.deadline, 0);
}

/* Both disconnect at once; a DREQ unanswered; a duplicate DREQ in TimeWait. */
static void test_disconnects(void **state)
{
	struct pair p;
	struct rv_cmx_out da, db, o;

	(void)state;
	establish(&p);
	assert_int_equal(rv_cmx_disconnect(&p.a, 1, p.now, &da), 0);
	assert_int_equal(rv_cmx_disconnect(&p.b, 2, p.now, &db), 0);
	assert_int_equal(pass(&p, &db, &p.a, &o), 0);
	assert_int_equal(o.event, RV_CMX_EV_DISCONNECTED);
	assert_int_equal(decode(&o).attr, RV_CM_DREP);
	assert_int_equal(pass(&p, &da, &p.b, &o), 0);
	assert_int_equal(o.event, RV_CMX_EV_DISCONNECTED);
	assert_int_equal(pass(&p, &da, &p.b, &o), 0); /* again, in TimeWait: the DREP again */
	assert_int_equal(o.event, RV_CMX_EV_NONE);
	assert_int_equal(decode(&o).attr, RV_CM_DREP);

	establish(&p);
	assert_int_equal(rv_cmx_disconnect(&p.a, 1, p.now, &da), 0);
	for (int i = 0; i < 2; i++) {
		p.now += rv_cmx_wait_ns(T);
		rv_cmx_on_timer(&p.a, p.now, &o);
		assert_memory_equal(o.mad, da.mad, RV_MAD_LEN);
	}
	p.now += rv_cmx_wait_ns(T);
	rv_cmx_on_timer(&p.a, p.now, &o);
	assert_int_equal(o.event, RV_CMX_EV_DISCONNECTED); /* all the same */
	assert_int_equal(p.a.state, RV_CMX_TIMEWAIT);
}

static void test_foreign_and_wrong_state(void **state)
{
	struct pair p;
	struct rv_cm_msg m = { .attr = RV_CM_DREQ, .local_id = 0x00220002, .remote_id = 0x99 },
			 r = req();
	struct rv_cmx_out o;

	(void)state;
	establish(&p);
	assert_int_equal(rv_cmx_on_mad(&p.a, &m, p.now, &o), -ENOENT); /* not our ID */
	m.remote_id = 0x00110001;
	m.local_id = 0x77; /* ours, but from another connection's end */
	assert_int_equal(rv_cmx_on_mad(&p.a, &m, p.now, &o), -ENOENT);
	assert_int_equal(p.a.state, RV_CMX_ESTABLISHED);
	assert_int_equal(rv_cmx_connect(&p.a, &r, p.now, &o), -EINVAL);
	r = rep();
	assert_int_equal(rv_cmx_accept(&p.a, &r, p.now, &o), -EINVAL);
	assert_int_equal(rv_cmx_reject(&p.a, 28, NULL, 0, &o), -EINVAL);
	memset(&p.a, 0, sizeof(p.a));
	assert_int_equal(rv_cmx_disconnect(&p.a, 1, p.now, &o), -EINVAL);
	r = req();
	r.attr = RV_CM_REP;
	assert_int_equal(rv_cmx_connect(&p.a, &r, p.now, &o), -EINVAL);
	/* An active side takes no REQ. */
	r = req();
	assert_int_equal(rv_cmx_connect(&p.a, &r, p.now, &o), 0);
	assert_int_equal(rv_cmx_on_mad(&p.a, &r, p.now, &o), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_establish_and_disconnect),
		cmocka_unit_test(test_lost_req_and_retries_out),
		cmocka_unit_test(test_lost_rep_and_rtu),
		cmocka_unit_test(test_reject_and_mra),
		cmocka_unit_test(test_disconnects),
		cmocka_unit_test(test_foreign_and_wrong_state),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
