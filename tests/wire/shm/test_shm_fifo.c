/*
 * The shm wire's message ring (src/wire/shm/shm_fifo.h), used in-process on a buffer of
 * SHM_FIFO_BYTES: a message's round trip; messages of many slot counts wrapping around
 * the ring's end over several laps (the payload contiguous modulo the ring, checked in
 * the raw memory, not only through shm_fifo_get); a full ring refusing with -EAGAIN and
 * taking messages again once the consumer released some (the producer's cached head
 * refreshed); a slot written in an earlier lap never looking published; the wake-up
 * protocol (publish wakes only an armed consumer and disarms it, arm-then-look, disarm,
 * take_armed); and two producer threads with one consumer delivering every message once,
 * in each producer's order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wire/shm/shm_fifo.h"

static struct shm_fifo *fifo_new(void)
{
	struct shm_fifo *f = aligned_alloc(64, (SHM_FIFO_BYTES + 63) & ~(size_t)63);

	assert_non_null(f);
	/* Garbage everywhere first: init must make every slot free. */
	memset(f, 0xa5, SHM_FIFO_BYTES);
	shm_fifo_init(f);
	return f;
}

static uint64_t head_of(struct shm_fifo *f)
{
	return atomic_load_explicit(&f->head, memory_order_relaxed);
}

static uint64_t tail_of(struct shm_fifo *f)
{
	return atomic_load_explicit(&f->tail, memory_order_relaxed);
}

static uint32_t armed_of(struct shm_fifo *f)
{
	return atomic_load_explicit(&f->armed, memory_order_relaxed);
}

static uint64_t seq_of(struct shm_fifo *f, uint32_t slot)
{
	return atomic_load_explicit(&f->slots[slot].seq, memory_order_relaxed);
}

/* Byte @i of message @msg's payload. */
static unsigned char pat(uint32_t msg, uint32_t i)
{
	return (unsigned char)(msg * 131u + i * 7u + (i >> 8) + 1u);
}

/* A message's header: what the test reads back. */
struct hdr {
	uint32_t msg, len;
	uint64_t pos;
};

/* Reserves, fills (header and payload, the payload in two pieces) and publishes message
 * @msg of @len payload bytes; -EAGAIN if the ring is full. */
static int produce(struct shm_fifo *f, uint64_t *cached, uint32_t msg, uint32_t len,
		   uint64_t *pos_out)
{
	unsigned char buf[SHM_FIFO_SLOTS * SHM_SLOT_SIZE / 8];
	struct hdr h = { .msg = msg, .len = len };
	uint64_t pos;
	uint32_t cut = len / 3;
	int rc;

	assert_true(len <= sizeof(buf));
	rc = shm_fifo_reserve(f, shm_fifo_slots_for(len), cached, &pos);
	if (rc)
		return rc;
	h.pos = pos;
	for (uint32_t i = 0; i < len; i++)
		buf[i] = pat(msg, i);
	memcpy(shm_fifo_slot(f, pos)->hdr, &h, sizeof(h));
	shm_fifo_put(f, pos, 0, buf, cut);
	shm_fifo_put(f, pos, cut, buf + cut, len - cut);
	assert_false(shm_fifo_publish(f, pos));
	if (pos_out)
		*pos_out = pos;
	return 0;
}

/* Payload byte @k of the message at @pos, read from the ring's memory directly: slot
 * pos + 1 + k / 64 modulo the ring, byte k % 64 of it. */
static unsigned char raw_byte(struct shm_fifo *f, uint64_t pos, uint32_t k)
{
	uint64_t slot = (pos + 1 + k / SHM_SLOT_SIZE) % SHM_FIFO_SLOTS;

	return ((unsigned char *)&f->slots[slot])[k % SHM_SLOT_SIZE];
}

/* Consumes the next message, which must be message @msg of @len bytes: its header, its
 * payload through shm_fifo_get (in two pieces) and in the raw ring; then releases it. */
static void consume(struct shm_fifo *f, uint32_t msg, uint32_t len)
{
	unsigned char buf[SHM_FIFO_SLOTS * SHM_SLOT_SIZE / 8];
	struct shm_slot *s;
	struct hdr h;
	uint64_t pos = 0;
	uint32_t cut = (len * 2) / 5;

	s = shm_fifo_peek(f, &pos);
	if (!s)
		fail_msg("message %u (%u bytes) not published at head %llu", msg, len,
			 (unsigned long long)head_of(f));
	assert_int_equal(pos, head_of(f));
	assert_ptr_equal(s, &f->slots[pos % SHM_FIFO_SLOTS]);
	memcpy(&h, s->hdr, sizeof(h));
	if (h.msg != msg || h.len != len || h.pos != pos)
		fail_msg("header at %llu: message %u of %u bytes at %llu, want %u of %u bytes",
			 (unsigned long long)pos, h.msg, h.len, (unsigned long long)h.pos, msg, len);
	memset(buf, 0, sizeof(buf));
	shm_fifo_get(f, pos, 0, buf, cut);
	shm_fifo_get(f, pos, cut, buf + cut, len - cut);
	for (uint32_t i = 0; i < len; i++) {
		if (buf[i] != pat(msg, i))
			fail_msg("message %u at %llu: payload byte %u is %#x, want %#x", msg,
				 (unsigned long long)pos, i, buf[i], pat(msg, i));
		if (raw_byte(f, pos, i) != pat(msg, i))
			fail_msg("message %u at %llu: payload byte %u not in slot %llu (modulo the "
				 "ring), byte %u",
				 msg, (unsigned long long)pos, i,
				 (unsigned long long)((pos + 1 + i / SHM_SLOT_SIZE) % SHM_FIFO_SLOTS),
				 i % SHM_SLOT_SIZE);
	}
	shm_fifo_release(f, shm_fifo_slots_for(len));
	assert_int_equal(head_of(f), pos + shm_fifo_slots_for(len));
}

static void test_slots_for(void **state)
{
	(void)state;
	assert_int_equal(shm_fifo_slots_for(0), 1);
	assert_int_equal(shm_fifo_slots_for(1), 2);
	assert_int_equal(shm_fifo_slots_for(SHM_SLOT_SIZE), 2);
	assert_int_equal(shm_fifo_slots_for(SHM_SLOT_SIZE + 1), 3);
	assert_int_equal(shm_fifo_slots_for(10 * SHM_SLOT_SIZE), 11);
}

static void test_init_leaves_an_empty_ring(void **state)
{
	struct shm_fifo *f = fifo_new();
	uint64_t pos;

	(void)state;
	assert_int_equal(head_of(f), 0);
	assert_int_equal(tail_of(f), 0);
	assert_int_equal(armed_of(f), 0);
	assert_int_equal(f->nslots, SHM_FIFO_SLOTS);
	for (uint32_t i = 0; i < SHM_FIFO_SLOTS; i++)
		if (seq_of(f, i))
			fail_msg("slot %u's seq is %#llx after init, want 0", i,
				 (unsigned long long)seq_of(f, i));
	assert_null(shm_fifo_peek(f, &pos));
	free(f);
}

static void test_round_trip(void **state)
{
	struct shm_fifo *f = fifo_new();
	uint64_t cached = 0, pos, got;
	unsigned char out[200];
	struct hdr h = { .msg = 7, .len = 200 }, hh;
	unsigned char in[200];

	(void)state;
	for (uint32_t i = 0; i < sizeof(in); i++)
		in[i] = pat(7, i);
	assert_int_equal(shm_fifo_reserve(f, shm_fifo_slots_for(200), &cached, &pos), 0);
	assert_int_equal(pos, 0);
	assert_int_equal(tail_of(f), shm_fifo_slots_for(200));
	memcpy(shm_fifo_slot(f, pos)->hdr, &h, sizeof(h));
	shm_fifo_put(f, pos, 0, in, sizeof(in));
	/* Reserved and written, not published: the consumer sees nothing. */
	assert_null(shm_fifo_peek(f, &got));
	assert_false(shm_fifo_publish(f, pos));
	assert_int_equal(seq_of(f, 0), pos + 1);
	assert_ptr_equal(shm_fifo_peek(f, &got), &f->slots[0]);
	assert_int_equal(got, pos);
	/* Peeking does not consume. */
	assert_ptr_equal(shm_fifo_peek(f, &got), &f->slots[0]);
	memcpy(&hh, f->slots[0].hdr, sizeof(hh));
	assert_memory_equal(&hh, &h, sizeof(h));
	shm_fifo_get(f, pos, 0, out, sizeof(out));
	assert_memory_equal(out, in, sizeof(in));
	/* A piece from the middle. */
	memset(out, 0, sizeof(out));
	shm_fifo_get(f, pos, 70, out, 60);
	assert_memory_equal(out, in + 70, 60);
	shm_fifo_release(f, shm_fifo_slots_for(200));
	assert_int_equal(head_of(f), tail_of(f));
	assert_null(shm_fifo_peek(f, &got));
	free(f);
}

/*
 * Messages of 1 to 41 slots (payload 0 to 40 * 64 bytes plus odd remainders), several
 * in flight at once, for more than five laps: every one arrives intact, and many
 * straddle the ring's end.
 */
static void test_wrap_around_many_sizes_and_laps(void **state)
{
	enum { IN_FLIGHT = 5 };
	struct shm_fifo *f = fifo_new();
	uint32_t lens[IN_FLIGHT], produced = 0, consumed = 0, wrapped = 0, n_sizes = 0;
	uint64_t cached = 0, pos;
	bool seen[42] = { false };

	(void)state;
	while (tail_of(f) < 5ull * SHM_FIFO_SLOTS + 17) {
		/* Fill up to IN_FLIGHT messages, then drain a few. */
		while (produced - consumed < IN_FLIGHT) {
			uint32_t len = (produced * 37u) % (40 * SHM_SLOT_SIZE + 1);

			if (produced % 11 == 0)
				len = 0;
			assert_int_equal(produce(f, &cached, produced, len, &pos), 0);
			lens[produced % IN_FLIGHT] = len;
			if (pos % SHM_FIFO_SLOTS + shm_fifo_slots_for(len) > SHM_FIFO_SLOTS)
				wrapped++;
			if (!seen[shm_fifo_slots_for(len)]) {
				seen[shm_fifo_slots_for(len)] = true;
				n_sizes++;
			}
			produced++;
		}
		for (int i = 0; i < 1 + (int)(produced % 3); i++, consumed++)
			consume(f, consumed, lens[consumed % IN_FLIGHT]);
	}
	while (consumed < produced) {
		consume(f, consumed, lens[consumed % IN_FLIGHT]);
		consumed++;
	}
	assert_int_equal(head_of(f), tail_of(f));
	if (wrapped < 5)
		fail_msg("only %u messages straddled the ring's end in 5 laps", wrapped);
	if (n_sizes < 40)
		fail_msg("only %u distinct slot counts were tried", n_sizes);
	free(f);
}

/* A payload that starts exactly at slot 0 (header in the last slot), and one whose
 * header is at slot 0 (no wrap): the two edges of contiguous(). */
static void test_wrap_edges(void **state)
{
	struct shm_fifo *f = fifo_new();
	uint64_t cached = 0, pos;
	uint32_t msg = 0;

	(void)state;
	/* Move head and tail to the last slot with one-slot messages of a large batch. */
	for (uint32_t i = 0; i < SHM_FIFO_SLOTS - 1; i += 64) {
		uint32_t n = SHM_FIFO_SLOTS - 1 - i < 64 ? SHM_FIFO_SLOTS - 1 - i : 64;

		assert_int_equal(produce(f, &cached, msg, (n - 1) * SHM_SLOT_SIZE, NULL), 0);
		consume(f, msg, (n - 1) * SHM_SLOT_SIZE);
		msg++;
	}
	assert_int_equal(head_of(f), SHM_FIFO_SLOTS - 1);
	assert_int_equal(produce(f, &cached, msg, 3 * SHM_SLOT_SIZE + 5, &pos), 0);
	assert_int_equal(pos % SHM_FIFO_SLOTS, SHM_FIFO_SLOTS - 1);
	/* The payload's first byte is slot 0's first byte. */
	assert_int_equal(((unsigned char *)&f->slots[0])[0], pat(msg, 0));
	consume(f, msg, 3 * SHM_SLOT_SIZE + 5);
	msg++;
	/* Up to the ring's end in messages of at most 64 slots, the last ending exactly
	 * there; then one whose header is slot 0. */
	for (;;) {
		uint32_t left = SHM_FIFO_SLOTS - (uint32_t)(head_of(f) % SHM_FIFO_SLOTS);
		uint32_t n = left < 64 ? left : 64;

		assert_int_equal(produce(f, &cached, msg, (n - 1) * SHM_SLOT_SIZE, &pos), 0);
		consume(f, msg, (n - 1) * SHM_SLOT_SIZE);
		msg++;
		if (n == left)
			break;
	}
	assert_int_equal(head_of(f), 2 * SHM_FIFO_SLOTS);
	assert_int_equal(produce(f, &cached, msg, 100, &pos), 0);
	assert_int_equal(pos % SHM_FIFO_SLOTS, 0);
	consume(f, msg, 100);
	free(f);
}

static void test_full_ring_is_eagain_until_released(void **state)
{
	struct shm_fifo *f = fifo_new();
	uint64_t cached = 0, stale = 0, pos;
	uint32_t n = 0;

	(void)state;
	/* More slots than the ring has: never possible. */
	assert_int_equal(shm_fifo_reserve(f, SHM_FIFO_SLOTS + 1, &cached, &pos), -EINVAL);
	assert_int_equal(tail_of(f), 0);
	/* A message of exactly the ring's size fits an empty ring. */
	assert_int_equal(shm_fifo_reserve(f, SHM_FIFO_SLOTS, &cached, &pos), 0);
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), -EAGAIN);
	shm_fifo_publish(f, pos);
	assert_non_null(shm_fifo_peek(f, &pos));
	shm_fifo_release(f, SHM_FIFO_SLOTS);

	/* 3-slot messages until the ring refuses. */
	while (produce(f, &cached, n, 2 * SHM_SLOT_SIZE, NULL) == 0)
		n++;
	assert_int_equal(n, SHM_FIFO_SLOTS / 3);
	/* Two slots are left: a 2-slot message fits, a 3-slot one does not. */
	assert_int_equal(produce(f, &cached, n, 2 * SHM_SLOT_SIZE, NULL), -EAGAIN);
	assert_int_equal(tail_of(f) - head_of(f), SHM_FIFO_SLOTS - SHM_FIFO_SLOTS % 3);
	/* A second producer whose cached head is from long ago sees the same. */
	stale = 0;
	assert_int_equal(shm_fifo_reserve(f, 3, &stale, &pos), -EAGAIN);
	assert_int_equal(produce(f, &cached, 100000, SHM_SLOT_SIZE, NULL), 0);
	assert_int_equal(tail_of(f) - head_of(f), SHM_FIFO_SLOTS);
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), -EAGAIN);

	/* The consumer frees one message: room for exactly one more, and the producer's
	 * cached head (still the old one) is refreshed to see it. */
	consume(f, 0, 2 * SHM_SLOT_SIZE);
	assert_int_not_equal(cached, head_of(f));
	assert_int_equal(produce(f, &cached, n, 2 * SHM_SLOT_SIZE, NULL), 0);
	assert_int_equal(cached, head_of(f));
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), -EAGAIN);
	/* Everything comes out in order. */
	for (uint32_t i = 1; i < SHM_FIFO_SLOTS / 3; i++)
		consume(f, i, 2 * SHM_SLOT_SIZE);
	consume(f, 100000, SHM_SLOT_SIZE);
	consume(f, n, 2 * SHM_SLOT_SIZE);
	assert_int_equal(head_of(f), tail_of(f));
	free(f);
}

/*
 * A payload slot of lap 0 holds the very word a header there in lap 1 would have as its
 * published seq; a header slot keeps lap 0's seq. Neither looks published in lap 1
 * before its producer publishes.
 */
static void test_stale_slots_never_look_published(void **state)
{
	struct shm_fifo *f = fifo_new();
	uint64_t cached = 0, pos, got;
	uint64_t fake[8];
	uint32_t msg = 1;

	(void)state;
	/* Message 0 at position 0: header at slot 0, payload in slots 1..8, each payload
	 * slot's first 8 bytes the seq a lap-1 header in that slot would publish. */
	for (uint32_t i = 0; i < 8; i++)
		fake[i] = SHM_FIFO_SLOTS + 1 + i + 1;
	assert_int_equal(shm_fifo_reserve(f, 9, &cached, &pos), 0);
	for (uint32_t i = 0; i < 8; i++)
		shm_fifo_put(f, pos, i * SHM_SLOT_SIZE, &fake[i], sizeof(fake[i]));
	shm_fifo_publish(f, pos);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(seq_of(f, 1 + i), fake[i]);
	assert_non_null(shm_fifo_peek(f, &got));
	shm_fifo_release(f, 9);
	/* Released: the payload slots' seq words are zero, the header's keeps lap 0's. */
	for (uint32_t i = 0; i < 8; i++)
		if (seq_of(f, 1 + i))
			fail_msg("payload slot %u's seq is %#llx after release, want 0", 1 + i,
				 (unsigned long long)seq_of(f, 1 + i));
	assert_int_equal(seq_of(f, 0), 1);

	/* Go round to the end of lap 0 in one-slot messages. */
	while (tail_of(f) < SHM_FIFO_SLOTS) {
		assert_int_equal(produce(f, &cached, msg, 0, NULL), 0);
		consume(f, msg, 0);
		msg++;
	}
	/* Lap 1, slot 0: its lap-0 seq (1) is not this lap's. */
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), 0);
	assert_int_equal(pos, SHM_FIFO_SLOTS);
	assert_null(shm_fifo_peek(f, &got));
	shm_fifo_publish(f, pos);
	assert_non_null(shm_fifo_peek(f, &got));
	shm_fifo_release(f, 1);
	/* Lap 1, slots 1..8, once message 0's payload: each reserved, not published. */
	for (uint32_t i = 0; i < 8; i++) {
		assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), 0);
		assert_int_equal(pos, SHM_FIFO_SLOTS + 1 + i);
		if (shm_fifo_peek(f, &got))
			fail_msg("lap 1's slot %u looks published before its producer published "
				 "(a stale payload word of lap 0)", 1 + i);
		shm_fifo_publish(f, pos);
		assert_non_null(shm_fifo_peek(f, &got));
		assert_int_equal(got, pos);
		shm_fifo_release(f, 1);
	}
	free(f);
}

static void test_publish_wakes_only_an_armed_consumer(void **state)
{
	struct shm_fifo *f = fifo_new();
	uint64_t cached = 0, pos, got;

	(void)state;
	/* Not armed: publishing wakes nobody. */
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), 0);
	assert_false(shm_fifo_publish(f, pos));
	assert_non_null(shm_fifo_peek(f, &got));
	shm_fifo_release(f, 1);
	/* Armed on an empty ring: the next publish wakes and disarms, the one after not. */
	assert_true(shm_fifo_arm(f));
	assert_int_equal(armed_of(f), 1);
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), 0);
	assert_true(shm_fifo_publish(f, pos));
	assert_int_equal(armed_of(f), 0);
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), 0);
	assert_false(shm_fifo_publish(f, pos));
	for (int i = 0; i < 2; i++) {
		assert_non_null(shm_fifo_peek(f, &got));
		shm_fifo_release(f, 1);
	}
	/* Armed, then disarmed: no wake. */
	assert_true(shm_fifo_arm(f));
	shm_fifo_disarm(f);
	assert_int_equal(armed_of(f), 0);
	assert_int_equal(shm_fifo_reserve(f, 1, &cached, &pos), 0);
	assert_false(shm_fifo_publish(f, pos));
	shm_fifo_release(f, 1);
	free(f);
}

static void test_arm_sees_what_was_published(void **state)
{
	struct shm_fifo *f = fifo_new();
	uint64_t cached = 0, pos, got;

	(void)state;
	assert_int_equal(shm_fifo_reserve(f, 2, &cached, &pos), 0);
	/* Reserved but not published: arming succeeds (nothing to see yet). */
	assert_true(shm_fifo_arm(f));
	shm_fifo_disarm(f);
	shm_fifo_publish(f, pos);
	/* Published before arming: arm refuses (the consumer must look, not sleep) and
	 * leaves the flag clear, so the producer of the next message does not signal. */
	assert_false(shm_fifo_arm(f));
	assert_int_equal(armed_of(f), 0);
	assert_non_null(shm_fifo_peek(f, &got));
	shm_fifo_release(f, 2);
	assert_true(shm_fifo_arm(f));
	assert_int_equal(armed_of(f), 1);
	shm_fifo_disarm(f);
	free(f);
}

static void test_take_armed(void **state)
{
	struct shm_fifo *f = fifo_new();

	(void)state;
	assert_false(shm_fifo_take_armed(f));
	assert_true(shm_fifo_arm(f));
	assert_true(shm_fifo_take_armed(f));
	assert_int_equal(armed_of(f), 0);
	/* Taken once: a second producer does not signal again. */
	assert_false(shm_fifo_take_armed(f));
	free(f);
}

/* ---- two producers, one consumer ------------------------------------------------------- */

#define MT_MSGS 20000
#define MT_LIMIT_NS (30ull * 1000000000) /* no progress for this long: a failure */

struct mt {
	struct shm_fifo *f;
	_Atomic int stop; /* the consumer gave up: producers leave */
	uint32_t id;
	uint32_t sent;
	char err[128];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t mt_len(uint32_t id, uint32_t i)
{
	return (i * 53u + id * 17u) % (6 * SHM_SLOT_SIZE + 1);
}

static void *mt_producer(void *arg)
{
	struct mt *m = arg;
	unsigned char buf[6 * SHM_SLOT_SIZE];
	uint64_t cached = 0, pos;

	for (uint32_t i = 0; i < MT_MSGS; i++) {
		uint32_t len = mt_len(m->id, i);
		struct hdr h = { .msg = (m->id << 24) | i, .len = len };
		int rc;

		while ((rc = shm_fifo_reserve(m->f, shm_fifo_slots_for(len), &cached, &pos)) == -EAGAIN) {
			if (atomic_load(&m->stop))
				return NULL;
			sched_yield();
		}
		if (rc) {
			snprintf(m->err, sizeof(m->err), "reserve: %d", rc);
			return NULL;
		}
		for (uint32_t k = 0; k < len; k++)
			buf[k] = pat(h.msg, k);
		h.pos = pos;
		memcpy(shm_fifo_slot(m->f, pos)->hdr, &h, sizeof(h));
		shm_fifo_put(m->f, pos, 0, buf, len);
		shm_fifo_publish(m->f, pos);
		m->sent = i + 1;
	}
	return NULL;
}

static void test_two_producers_one_consumer(void **state)
{
	struct shm_fifo *f = fifo_new();
	struct mt m[2] = { { .f = f, .id = 1 }, { .f = f, .id = 2 } };
	pthread_t t[2];
	uint32_t next[3] = { 0, 0, 0 }, total = 0;
	unsigned char buf[6 * SHM_SLOT_SIZE];
	uint64_t last = now_ns();
	char err[200] = "";

	(void)state;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, mt_producer, &m[i]), 0);
	while (total < 2 * MT_MSGS && !err[0]) {
		struct shm_slot *s;
		struct hdr h;
		uint64_t pos;
		uint32_t id, i;

		s = shm_fifo_peek(f, &pos);
		if (!s) {
			if (now_ns() - last > MT_LIMIT_NS)
				snprintf(err, sizeof(err),
					 "no message for %llu s after %u of %u (producers sent %u, %u)",
					 MT_LIMIT_NS / 1000000000, total, 2 * MT_MSGS, m[0].sent,
					 m[1].sent);
			sched_yield();
			continue;
		}
		last = now_ns();
		memcpy(&h, s->hdr, sizeof(h));
		id = h.msg >> 24;
		i = h.msg & 0xffffff;
		if (id < 1 || id > 2 || h.pos != pos) {
			snprintf(err, sizeof(err), "garbage header at %llu: msg %#x pos %llu",
				 (unsigned long long)pos, h.msg, (unsigned long long)h.pos);
			break;
		}
		if (i != next[id] || h.len != mt_len(id, i)) {
			snprintf(err, sizeof(err),
				 "producer %u: message %u (%u bytes) came, want %u (%u bytes)", id, i,
				 h.len, next[id], mt_len(id, next[id]));
			break;
		}
		shm_fifo_get(f, pos, 0, buf, h.len);
		for (uint32_t k = 0; k < h.len; k++)
			if (buf[k] != pat(h.msg, k)) {
				snprintf(err, sizeof(err), "producer %u message %u: byte %u wrong", id,
					 i, k);
				break;
			}
		shm_fifo_release(f, shm_fifo_slots_for(h.len));
		next[id]++;
		total++;
	}
	atomic_store(&m[0].stop, 1);
	atomic_store(&m[1].stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	if (err[0])
		fail_msg("%s", err);
	for (int i = 0; i < 2; i++)
		if (m[i].err[0])
			fail_msg("producer %u: %s", m[i].id, m[i].err);
	assert_int_equal(next[1], MT_MSGS);
	assert_int_equal(next[2], MT_MSGS);
	/* Exactly once: nothing more is published. */
	{
		uint64_t pos;

		assert_null(shm_fifo_peek(f, &pos));
	}
	assert_int_equal(head_of(f), tail_of(f));
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_for),
		cmocka_unit_test(test_init_leaves_an_empty_ring),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_wrap_around_many_sizes_and_laps),
		cmocka_unit_test(test_wrap_edges),
		cmocka_unit_test(test_full_ring_is_eagain_until_released),
		cmocka_unit_test(test_stale_slots_never_look_published),
		cmocka_unit_test(test_publish_wakes_only_an_armed_consumer),
		cmocka_unit_test(test_arm_sees_what_was_published),
		cmocka_unit_test(test_take_armed),
		cmocka_unit_test(test_two_producers_one_consumer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
