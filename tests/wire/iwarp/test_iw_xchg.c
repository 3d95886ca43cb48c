/*
 * The MPA exchange (src/wire/iwarp/iw_xchg.h), the one verbs-only setup and rdma_cm
 * share: the initiator's request (revision 2, the words capped to 14 bits, never
 * peer-to-peer); the responder's answer (revision 1 answered in kind with one Read each
 * way, C echoed both ways, peer-to-peer refused with a reply still filled); the
 * initiator's check of the reply (a revision above the request's, an RTR kind never
 * offered); frames through the codec in both forms (flagged, as siw reads them; the
 * verbs-only port's unflagged form, where revision 1 is refused but its R still seen);
 * reading a frame off a stream a byte at a time and never a byte past it, the end of the
 * stream and garbage (refused at the first wrong byte, before the rest comes); sending;
 * the request wait from the environment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/iwarp/iw_xchg.h"

static void request_is_rev2_with_words(void **state)
{
	struct iw_xchg_side r = iw_xchg_request(true, 5, 0xffff);

	(void)state;
	assert_int_equal(r.rev, IW_MPA_REV2);
	assert_true(r.crc);
	assert_int_equal(r.ird, 5);
	assert_int_equal(r.ord, IW_MPA_IRD_ORD_MAX); /* 14 bits */
	assert_int_equal(r.rtr, 0);                  /* never peer-to-peer */
}

static void answer_rules(void **state)
{
	struct iw_xchg_side req = iw_xchg_request(false, 4, 2), reply;

	(void)state;
	/* Revision 2: our words, C echoed (off). */
	assert_int_equal(iw_xchg_answer(&req, 16, 3, &reply), 0);
	assert_int_equal(reply.rev, IW_MPA_REV2);
	assert_false(reply.crc);
	assert_int_equal(reply.ird, 16);
	assert_int_equal(reply.ord, 3);
	/* C echoed on. */
	req.crc = true;
	assert_int_equal(iw_xchg_answer(&req, 16, 3, &reply), 0);
	assert_true(reply.crc);
	/* Revision 1: answered in kind, one Read each way. */
	req = (struct iw_xchg_side){ .rev = IW_MPA_REV, .crc = true, .ird = 1, .ord = 1 };
	assert_int_equal(iw_xchg_answer(&req, 16, 3, &reply), 0);
	assert_int_equal(reply.rev, IW_MPA_REV);
	assert_int_equal(reply.ird, 1);
	assert_int_equal(reply.ord, 1);
	assert_true(reply.crc);
	/* Peer-to-peer: refused, the reply (for the reject) filled all the same. */
	req = iw_xchg_request(true, 1, 1);
	req.rtr = IW_RTR_WRITE;
	memset(&reply, 0xee, sizeof(reply));
	assert_int_equal(iw_xchg_answer(&req, 8, 8, &reply), -EOPNOTSUPP);
	assert_int_equal(reply.rev, IW_MPA_REV2);
	assert_true(reply.crc);
	assert_int_equal(reply.rtr, 0);
}

static void check_reply_rules(void **state)
{
	struct iw_xchg_side req = iw_xchg_request(true, 4, 4), reply = req;

	(void)state;
	assert_int_equal(iw_xchg_check_reply(&req, &reply), 0);
	reply.rev = IW_MPA_REV; /* a revision 1 responder: fine */
	assert_int_equal(iw_xchg_check_reply(&req, &reply), 0);
	req.rev = IW_MPA_REV;
	reply.rev = IW_MPA_REV2; /* above what was asked */
	assert_int_equal(iw_xchg_check_reply(&req, &reply), -EPROTO);
	req = iw_xchg_request(true, 4, 4);
	reply = req;
	reply.rtr = IW_RTR_READ; /* chosen, never offered */
	assert_int_equal(iw_xchg_check_reply(&req, &reply), -EPROTO);
	req.rtr = IW_RTR_READ | IW_RTR_WRITE;
	assert_int_equal(iw_xchg_check_reply(&req, &reply), 0);
}

/* A frame of each kind through the codec and back, in @unflagged's form. */
static void round_trip(bool unflagged)
{
	static const char pd[] = "private";
	unsigned char buf[IW_MPA_FRAME_MAX];
	struct iw_xchg_side me = iw_xchg_request(true, 7, 9), got;
	const unsigned char *gpd;
	uint16_t glen;
	bool rej;
	int n;

	me.rtr = IW_RTR_SEND | IW_RTR_READ;
	n = iw_xchg_encode(buf, sizeof(buf), IW_MPA_REQUEST, unflagged, &me, false, pd, sizeof(pd));
	assert_true(n == IW_MPA_HDR_LEN + IW_MPA_ENH_LEN + (int)sizeof(pd));
	for (int k = 0; k < n; k++)
		assert_int_equal(iw_xchg_decode(buf, (size_t)k, IW_MPA_REQUEST, unflagged, &got,
						&rej, &gpd, &glen), -EAGAIN);
	assert_int_equal(iw_xchg_decode(buf, (size_t)n, IW_MPA_REQUEST, unflagged, &got, &rej,
					&gpd, &glen), n);
	assert_false(rej);
	assert_int_equal(got.rev, IW_MPA_REV2);
	assert_true(got.crc);
	assert_int_equal(got.ird, 7);
	assert_int_equal(got.ord, 9);
	assert_int_equal(got.rtr, IW_RTR_SEND | IW_RTR_READ);
	assert_int_equal(glen, sizeof(pd));
	assert_memory_equal(gpd, pd, sizeof(pd));
	/* The other form refuses it: the enhanced flag is set or missing. */
	assert_int_equal(iw_xchg_decode(buf, (size_t)n, IW_MPA_REQUEST, !unflagged, &got, &rej,
					&gpd, &glen), unflagged ? n : -EPROTO);
	/* A reject reply. */
	n = iw_xchg_encode(buf, sizeof(buf), IW_MPA_REPLY, unflagged, &me, true, NULL, 0);
	assert_true(n > 0);
	assert_int_equal(iw_xchg_decode(buf, (size_t)n, IW_MPA_REPLY, unflagged, &got, &rej,
					&gpd, &glen), n);
	assert_true(rej);
	/* R never goes in a request. */
	assert_int_equal(iw_xchg_encode(buf, sizeof(buf), IW_MPA_REQUEST, unflagged, &me, true,
					NULL, 0), -EINVAL);
}

static void frames_both_forms(void **state)
{
	(void)state;
	round_trip(false);
	round_trip(true);
}

static void revision1(void **state)
{
	static const struct iw_xchg_side rev1 = { .rev = IW_MPA_REV, .crc = true };
	unsigned char buf[IW_MPA_FRAME_MAX];
	struct iw_xchg_side got;
	const unsigned char *pd;
	uint16_t len;
	bool rej;
	int n = iw_xchg_encode(buf, sizeof(buf), IW_MPA_REPLY, false, &rev1, true, "ab", 2);

	(void)state;
	assert_int_equal(n, IW_MPA_HDR_LEN + 2);
	assert_int_equal(iw_xchg_decode(buf, (size_t)n, IW_MPA_REPLY, false, &got, &rej, &pd,
					&len), n);
	assert_int_equal(got.rev, IW_MPA_REV);
	assert_int_equal(got.ird, 1); /* RFC 6581: no words, one Read each way */
	assert_int_equal(got.ord, 1);
	assert_true(rej);
	assert_int_equal(len, 2);
	/* The unflagged form has words always: refused, its R still seen. */
	rej = false;
	assert_int_equal(iw_xchg_decode(buf, (size_t)n, IW_MPA_REPLY, true, &got, &rej, &pd,
					&len), -EPROTO);
	assert_true(rej);
}

static void socket_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
}

static void read_exactly_one_frame(void **state)
{
	unsigned char frame[IW_MPA_FRAME_MAX], after[4] = { 1, 2, 3, 4 }, rest[8];
	struct iw_xchg_side me = iw_xchg_request(false, 2, 2);
	struct iw_xchg_rx rx = { 0 };
	int sv[2], n, r = 0;

	(void)state;
	socket_pair(sv);
	n = iw_xchg_encode(frame, sizeof(frame), IW_MPA_REQUEST, false, &me, false, "xyz", 3);
	assert_true(n > 0);
	/* A byte at a time: 0 until the last; the bytes behind it stay on the stream. */
	for (int k = 0; k < n; k++) {
		assert_int_equal(write(sv[1], frame + k, 1), 1);
		if (k == n - 1)
			assert_int_equal(write(sv[1], after, sizeof(after)), sizeof(after));
		r = iw_xchg_read(&rx, sv[0], IW_MPA_REQUEST, false);
		if (k < n - 1)
			assert_int_equal(r, 0);
	}
	assert_int_equal(r, n);
	assert_int_equal(rx.len, (size_t)n);
	assert_memory_equal(rx.buf, frame, (size_t)n);
	assert_int_equal(read(sv[0], rest, sizeof(rest)), sizeof(after));
	assert_memory_equal(rest, after, sizeof(after));
	/* The end of the stream half-way. */
	memset(&rx, 0, sizeof(rx));
	assert_int_equal(write(sv[1], frame, 10), 10);
	assert_int_equal(iw_xchg_read(&rx, sv[0], IW_MPA_REQUEST, false), 0);
	close(sv[1]);
	assert_int_equal(iw_xchg_read(&rx, sv[0], IW_MPA_REQUEST, false), -ECONNRESET);
	close(sv[0]);
}

static void garbage_refused_early(void **state)
{
	struct iw_xchg_rx rx = { 0 };
	int sv[2];

	(void)state;
	socket_pair(sv);
	/* "GET / HTTP/1.1" is no MPA key: refused on its first byte, without the rest. */
	assert_int_equal(write(sv[1], "G", 1), 1);
	assert_int_equal(iw_xchg_read(&rx, sv[0], IW_MPA_REQUEST, false), -EPROTO);
	/* A reply's key where a request's is expected. */
	memset(&rx, 0, sizeof(rx));
	assert_int_equal(write(sv[1], "MPA ID Rep Frame", 16), 16);
	assert_int_equal(iw_xchg_read(&rx, sv[0], IW_MPA_REQUEST, false), -EPROTO);
	close(sv[0]);
	close(sv[1]);
}

static void send_whole(void **state)
{
	unsigned char got[64];
	int sv[2];

	(void)state;
	socket_pair(sv);
	assert_int_equal(iw_xchg_send(sv[0], "0123456789", 10), 0);
	assert_int_equal(read(sv[1], got, sizeof(got)), 10);
	close(sv[1]);
	assert_int_equal(iw_xchg_send(sv[0], "x", 1), -EPIPE);
	close(sv[0]);
}

static void request_wait(void **state)
{
	(void)state;
	unsetenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS");
	assert_int_equal(iw_xchg_request_wait_ns(), 5000000000ull);
	setenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS", "250", 1);
	assert_int_equal(iw_xchg_request_wait_ns(), 250000000ull);
	setenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS", "0", 1); /* out of range: the default */
	assert_int_equal(iw_xchg_request_wait_ns(), 5000000000ull);
	setenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS", "12x", 1);
	assert_int_equal(iw_xchg_request_wait_ns(), 5000000000ull);
	unsetenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(request_is_rev2_with_words),
		cmocka_unit_test(answer_rules),
		cmocka_unit_test(check_reply_rules),
		cmocka_unit_test(frames_both_forms),
		cmocka_unit_test(revision1),
		cmocka_unit_test(read_exactly_one_frame),
		cmocka_unit_test(garbage_refused_early),
		cmocka_unit_test(send_whole),
		cmocka_unit_test(request_wait),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
