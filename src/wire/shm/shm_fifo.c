#include "wire/shm/shm_fifo.h"

#include "util/sv_app.h"

#include <errno.h>
#include <string.h>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#endif

void shm_fifo_init(struct shm_fifo *f)
{
	atomic_init(&f->tail, 0);
	atomic_init(&f->head, 0);
	atomic_init(&f->armed, 0);
	f->nslots = SHM_FIFO_SLOTS;
	for (uint32_t i = 0; i < SHM_FIFO_SLOTS; i++)
		atomic_init(&f->slots[i].seq, 0);
}

void shm_fifo_init_zeroed(struct shm_fifo *f)
{
	f->nslots = SHM_FIFO_SLOTS; /* zeros are an empty ring: every slot free */
}

int shm_fifo_reserve(struct shm_fifo *f, uint32_t n, uint64_t *cached_head, uint64_t *pos)
{
	uint64_t t = atomic_load_explicit(&f->tail, memory_order_relaxed);

	if (n > SHM_FIFO_SLOTS)
		return -EINVAL;
	for (;;) {
		if (t + n - *cached_head > SHM_FIFO_SLOTS) {
			/* Acquire pairs with the consumer's release: its reads of the slots are done. */
			*cached_head = atomic_load_explicit(&f->head, memory_order_acquire);
			if (t + n - *cached_head > SHM_FIFO_SLOTS)
				return -EAGAIN;
		}
		/* Relaxed is enough: the slots are ordered by publish/peek, not by tail. */
		if (atomic_compare_exchange_weak_explicit(&f->tail, &t, t + n, memory_order_relaxed,
							  memory_order_relaxed)) {
			*pos = t;
			return 0;
		}
	}
}

/* Payload byte k of the message at pos lives at slot pos + 1 + k / 64. */
static unsigned char *payload_at(struct shm_fifo *f, uint64_t pos, uint32_t off)
{
	return (unsigned char *)shm_fifo_slot(f, pos + 1 + off / SHM_SLOT_SIZE) + off % SHM_SLOT_SIZE;
}

/* Bytes from @off to the end of the ring's memory (the payload wraps there). */
static uint32_t contiguous(uint64_t pos, uint32_t off)
{
	uint64_t slot = (pos + 1 + off / SHM_SLOT_SIZE) & (SHM_FIFO_SLOTS - 1);

	return (uint32_t)((SHM_FIFO_SLOTS - slot) * SHM_SLOT_SIZE - off % SHM_SLOT_SIZE);
}

/* The application's side of the bounce copy (src/util/sv_app.h: not recorded under
 * ThreadSanitizer, the ring's side is). */
void shm_copy_from_app(void *dst, const void *app, size_t n)
{
	sv_copy_from_app(dst, app, n);
}

void shm_copy_to_app(void *app, const void *src, size_t n)
{
	sv_copy_to_app(app, src, n);
}

void shm_fifo_put(struct shm_fifo *f, uint64_t pos, uint32_t off, const void *src, uint32_t len)
{
	const unsigned char *p = src;

	while (len) {
		uint32_t n = contiguous(pos, off);

		if (n > len)
			n = len;
		shm_copy_from_app(payload_at(f, pos, off), p, n);
		p += n;
		off += n;
		len -= n;
	}
}

void shm_fifo_get(struct shm_fifo *f, uint64_t pos, uint32_t off, void *dst, uint32_t len)
{
	unsigned char *p = dst;

	while (len) {
		uint32_t n = contiguous(pos, off);

		if (n > len)
			n = len;
		shm_copy_to_app(p, payload_at(f, pos, off), n);
		p += n;
		off += n;
		len -= n;
	}
}

bool shm_fifo_publish(struct shm_fifo *f, uint64_t pos)
{
	atomic_store_explicit(&shm_fifo_slot(f, pos)->seq, pos + 1, memory_order_release);
	return shm_fifo_take_armed(f);
}

bool shm_fifo_take_armed(struct shm_fifo *f)
{
	/*
	 * seq_cst pairs with shm_fifo_arm(): either the consumer's re-check sees what was
	 * published, or this load sees its armed flag (Dekker-style).
	 */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&f->armed, memory_order_relaxed))
		return atomic_exchange_explicit(&f->armed, 0, memory_order_relaxed) != 0;
	return false;
}

void shm_fifo_release(struct shm_fifo *f, uint32_t n)
{
	uint64_t h = atomic_load_explicit(&f->head, memory_order_relaxed);

	/*
	 * Payload slots hold the producer's bytes where a header slot has its seq word: clear
	 * those, so that a later lap's header there never looks published by chance. A
	 * header slot keeps its seq (pos + 1 of this lap, never a later lap's): the consumer
	 * of a one-slot message then only reads its cache line, and the producer's next write
	 * there need not take it back from us first.
	 */
	for (uint32_t i = 1; i < n; i++)
		atomic_store_explicit(&shm_fifo_slot(f, h + i)->seq, 0, memory_order_relaxed);
	/* Release: the slots are free (and their seq words cleared) before producers reuse them. */
	atomic_store_explicit(&f->head, h + n, memory_order_release);
}

bool shm_fifo_arm(struct shm_fifo *f)
{
	atomic_store_explicit(&f->armed, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (shm_fifo_look(f)) {
		atomic_store_explicit(&f->armed, 0, memory_order_relaxed);
		return false;
	}
	return true;
}

void shm_fifo_disarm(struct shm_fifo *f)
{
	atomic_store_explicit(&f->armed, 0, memory_order_relaxed);
}
