/*
 * shm_fifo: a bounded multi-producer, single-consumer message ring in shared memory.
 *
 * The ring lives in a segment that producer and consumer map at different addresses:
 * it holds no pointers, only positions. A message takes one or more 64-byte slots: the
 * first holds a sequence word and a 56-byte header, the payload follows in the next
 * slots, contiguous modulo the ring size. A producer reserves slots by advancing
 * `tail` (CAS: several processes may produce), writes, then publishes by storing
 * seq = position + 1 in the first slot with release order. The consumer reads the
 * slot at `head` when its seq says it is published, then zeroes the sequence words of
 * the payload slots it consumed (so old payload never looks published; a header's
 * stale seq names an earlier lap) and advances `head`.
 *
 * Wakeups: a consumer about to sleep sets `armed`; a producer that finds it set after
 * publishing clears it and signals the consumer's eventfd. A busy consumer never arms,
 * so producing makes no system call (UCX's FIFO works the same way).
 *
 * Trust: the other side may be another user's process (the bounce copy exists for
 * that) and can write anything into the ring. Every ring has SHM_FIFO_SLOTS slots and
 * positions are masked with that constant, never with the `nslots` field in shared
 * memory, so no value the peer writes makes an access leave the ring.
 */
#ifndef SHM_FIFO_H
#define SHM_FIFO_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_SLOT_SIZE 64
#define SHM_HDR_SIZE (SHM_SLOT_SIZE - 8)
#define SHM_FIFO_SLOTS 2048u /* every ring: 128 KiB (a power of two) */

struct shm_slot {
	_Atomic uint64_t seq; /* position + 1 once published; 0 when free */
	unsigned char hdr[SHM_HDR_SIZE];
};

struct shm_fifo {
	/* Producers' and the consumer's indices on cache lines of their own. */
	_Alignas(64) _Atomic uint64_t tail; /* next position to reserve (producers) */
	_Alignas(64) _Atomic uint64_t head; /* next position to consume (consumer) */
	_Alignas(64) _Atomic uint32_t armed; /* the consumer sleeps: wake it */
	uint32_t nslots;                     /* SHM_FIFO_SLOTS: informative, never trusted */
	_Alignas(64) struct shm_slot slots[];
};

static_assert(sizeof(struct shm_slot) == SHM_SLOT_SIZE, "a slot is one cache line");
static_assert(offsetof(struct shm_fifo, head) == 64, "indices on separate lines");
static_assert(offsetof(struct shm_fifo, slots) == 192, "fixed layout");

#define SHM_FIFO_BYTES (sizeof(struct shm_fifo) + (size_t)SHM_FIFO_SLOTS * SHM_SLOT_SIZE)

/* Slots needed for a message with @payload bytes after its header. */
static inline uint32_t shm_fifo_slots_for(uint32_t payload)
{
	return 1 + (payload + SHM_SLOT_SIZE - 1) / SHM_SLOT_SIZE;
}

void shm_fifo_init(struct shm_fifo *f);
/* The same for a ring whose memory is all zeros (a new segment): its slots are left
 * untouched, so that a QP's idle ring costs no resident memory. */
void shm_fifo_init_zeroed(struct shm_fifo *f);

/* --- producer ---------------------------------------------------------------------------- */

/*
 * Reserves @n slots; 0 and *pos, or -EAGAIN when the ring is full. @cached_head is the
 * producer's private copy of head (read from the consumer's line only when needed).
 */
int shm_fifo_reserve(struct shm_fifo *f, uint32_t n, uint64_t *cached_head, uint64_t *pos);

static inline struct shm_slot *shm_fifo_slot(struct shm_fifo *f, uint64_t pos)
{
	return &f->slots[pos & (SHM_FIFO_SLOTS - 1)];
}

/*
 * Copies between application memory (@app) and the library's own: memcpy. Under
 * ThreadSanitizer only the library's side is recorded (shm_fifo.c says why), so a race
 * on a ring slot or any of the library's memory stays reported.
 */
void shm_copy_from_app(void *dst, const void *app, size_t n);
void shm_copy_to_app(void *app, const void *src, size_t n);

/* Copies payload bytes into the slots after the header slot at @pos (from application
 * memory or the library's: shm_copy_from_app). */
void shm_fifo_put(struct shm_fifo *f, uint64_t pos, uint32_t off, const void *src, uint32_t len);

/* Publishes the message at @pos. Returns true if the consumer must be woken. */
bool shm_fifo_publish(struct shm_fifo *f, uint64_t pos);
/* After publishing something else the consumer looks at when it wakes (a copy-assist
 * job): true if it sleeps and must be woken. */
bool shm_fifo_take_armed(struct shm_fifo *f);

/* --- consumer ---------------------------------------------------------------------------- */

/* The next published message, or NULL. Under the consumer's lock (else: shm_fifo_look). */
static inline struct shm_slot *shm_fifo_peek(struct shm_fifo *f, uint64_t *pos)
{
	uint64_t h = atomic_load_explicit(&f->head, memory_order_relaxed);
	struct shm_slot *s = shm_fifo_slot(f, h);

	/* Acquire: the header and payload written before publish are visible. */
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != h + 1)
		return NULL;
	*pos = h;
	return s;
}

/*
 * Whether the slot at head looks published, from a thread that does not hold the
 * consumer's lock (a poll deciding whether to take it, the progress thread arming).
 * A hint, confirmed under the lock by shm_fifo_peek: another consumer may free that
 * slot meanwhile and a producer fill it with payload, unordered with this read. Both
 * are plain loads and stores on the CPU; ThreadSanitizer, which cannot know that the
 * answer is only a hint, is told to allow this one read (tests/tsan.supp). Reading
 * the tail instead, which no payload overlays, cost a ping-pong ×1.45 (a second cache
 * line written by the producer, read on every poll).
 */
static inline bool shm_fifo_look(struct shm_fifo *f)
{
	uint64_t h = atomic_load_explicit(&f->head, memory_order_relaxed);

	return atomic_load_explicit(&shm_fifo_slot(f, h)->seq, memory_order_relaxed) == h + 1;
}

/* Copies payload bytes out of the message at @pos (shm_copy_to_app). */
void shm_fifo_get(struct shm_fifo *f, uint64_t pos, uint32_t off, void *dst, uint32_t len);

/* Frees the @n slots of the message at head. */
void shm_fifo_release(struct shm_fifo *f, uint32_t n);

/* Before sleeping: arm, then look again (shm_fifo_look: a message published before
 * arming is seen). */
bool shm_fifo_arm(struct shm_fifo *f);
void shm_fifo_disarm(struct shm_fifo *f);

#endif
