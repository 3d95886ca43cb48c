#include "core/sv_mr.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "util/sv_shared.h"

int sv_mr_table_init(struct sv_mr_table *t)
{
	memset(t, 0, sizeof(*t));
	/* Shareable, so that a wire's peers on the host can map the table read-only and
	 * check keys themselves (one-sided operations); sealed: only we write it. */
	t->slots = sv_shared_alloc("softverbs-mr", SV_MR_TABLE_BYTES,
				   SV_SHARED_SIZED | SV_SHARED_OURS, &t->fd);
	if (!t->slots)
		return -errno;
	pthread_mutex_init(&t->lock, NULL);
	t->next_free_hint = 1; /* slot 0 stays free so that key 0 never names an MR */
	return 0;
}

void sv_mr_table_destroy(struct sv_mr_table *t)
{
	if (!t->slots)
		return;
	munmap(t->slots, SV_MR_TABLE_BYTES);
	close(t->fd);
	pthread_mutex_destroy(&t->lock);
	t->slots = NULL;
}

static uint32_t random_tag(void)
{
	uint32_t r = 0;

	while (r == 0) {
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint32_t)(uintptr_t)&r ^ 0x9e3779b9u; /* never reached on Linux */
		r &= (1u << (32 - SV_MR_INDEX_BITS)) - 1;
	}
	return r;
}

static uint32_t make_key(uint32_t index)
{
	uint32_t tag = random_tag(); /* 12 bits */

	return (tag >> 8) << (SV_MR_KEY_SHIFT + SV_MR_INDEX_BITS) | index << SV_MR_KEY_SHIFT |
	       (tag & 0xff);
}

/*
 * Publishing an entry: the key is written last with release order, and cleared first on
 * removal, so a reader that sees a key sees the contents that go with it.
 */
static void publish(struct sv_mr_entry *slot, const struct sv_mr_entry *e, uint32_t key)
{
	atomic_store_explicit(&slot->key, 0, memory_order_relaxed);
	slot->pd = e->pd;
	slot->access = e->access;
	slot->flags = e->flags;
	slot->iova = e->iova;
	slot->length = e->length;
	slot->vaddr = e->vaddr;
	atomic_store_explicit(&slot->key, key, memory_order_release);
}

/*
 * This process's library places data into registered memory itself — the responder's
 * bounce WRITEs, READ answers, atomics, receives, copy assist — between
 * sv_mr_place_begin and sv_mr_place_end. Removing or changing a slot then waits once for
 * every placement under way (place_fence): when ibv_dereg_mr or ibv_rereg_mr returns,
 * nothing that found the old key valid is still copying, and the owner may unmap the
 * memory (a NIC's driver waits for in-flight DMA the same way). A fence goes first:
 * placements that begin while it waits step back until it is done, so they cannot
 * starve it. Nothing is placed under a fence's wait, nor fenced under a placement.
 *
 * Two counters and sequentially consistent order (a reader raises placing, then looks
 * at fencing; a fence raises fencing, then looks at placing): of a placement and a fence
 * that meet, at least one sees the other. A pthread rwlock did this with two calls into
 * libc and their compare-and-swap loops on every poll that placed.
 */
static _Atomic uint32_t placing; /* placements under way */
static _Atomic uint32_t fencing; /* fences waiting for them */

void sv_mr_place_begin(void)
{
	for (;;) {
		atomic_fetch_add(&placing, 1);
		if (!atomic_load(&fencing))
			return;
		atomic_fetch_sub_explicit(&placing, 1, memory_order_release);
		while (atomic_load_explicit(&fencing, memory_order_acquire))
			sched_yield();
	}
}

void sv_mr_place_end(void)
{
	/* Release: what was placed is seen by the fence that finds placing at 0. */
	atomic_fetch_sub_explicit(&placing, 1, memory_order_release);
}

void sv_mr_place_after_fork(void)
{
	/* The child has no placing thread; the parent's may have been placing. */
	atomic_store(&placing, 0);
	atomic_store(&fencing, 0);
}

static void place_fence(void)
{
	atomic_fetch_add(&fencing, 1);
	while (atomic_load(&placing))
		sched_yield();
	atomic_fetch_sub(&fencing, 1);
}

int sv_mr_table_add(struct sv_mr_table *t, const struct sv_mr_entry *e, uint32_t *index,
		    uint32_t *key)
{
	int ret = -ENOMEM;

	pthread_mutex_lock(&t->lock);
	for (uint32_t n = 0; n < SV_MR_SLOTS; n++) {
		uint32_t i = (t->next_free_hint + n) & (SV_MR_SLOTS - 1);

		if (i == 0 || t->slots[i].key)
			continue;
		*index = i;
		*key = make_key(i);
		publish(&t->slots[i], e, *key);
		t->n_used++;
		t->next_free_hint = i + 1;
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int sv_mr_table_update(struct sv_mr_table *t, uint32_t index, const struct sv_mr_entry *e,
		       bool keep_key, uint32_t *key)
{
	pthread_mutex_lock(&t->lock);
	*key = keep_key ? atomic_load_explicit(&t->slots[index].key, memory_order_relaxed) :
			  make_key(index);
	publish(&t->slots[index], e, *key);
	pthread_mutex_unlock(&t->lock);
	place_fence(); /* the old range may be unmapped next */
	return 0;
}

int sv_mr_table_rekey(struct sv_mr_table *t, uint32_t old_key, const struct sv_mr_entry *e,
		      uint32_t new_key)
{
	uint32_t index = sv_mr_key_index(old_key);
	int err = 0;

	if (!old_key || !new_key || sv_mr_key_index(new_key) != index || index == 0)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	if (atomic_load_explicit(&t->slots[index].key, memory_order_relaxed) != old_key)
		err = -EINVAL;
	else
		publish(&t->slots[index], e, new_key);
	pthread_mutex_unlock(&t->lock);
	return err;
}

int sv_mr_table_invalidate_mw(struct sv_mr_table *t, uint32_t key, uint32_t pd)
{
	const struct sv_mr_entry *cur;
	struct sv_mr_entry e = { .pd = pd, .flags = SV_MR_F_MW };

	if (!key)
		return -EINVAL;
	cur = &t->slots[sv_mr_key_index(key)];
	if (atomic_load_explicit(&cur->key, memory_order_acquire) != key ||
	    !(cur->flags & SV_MR_F_MW) || cur->pd != pd)
		return -EINVAL;
	return sv_mr_table_rekey(t, key, &e, key);
}

int sv_mr_table_read(struct sv_mr_table *t, uint32_t index, struct sv_mr_entry *e,
		     uint32_t *key)
{
	int err = 0;

	if (index == 0 || index >= SV_MR_SLOTS)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	*key = atomic_load_explicit(&t->slots[index].key, memory_order_relaxed);
	if (!*key) {
		err = -EINVAL;
	} else {
		e->pd = t->slots[index].pd;
		e->access = t->slots[index].access;
		e->iova = t->slots[index].iova;
		e->length = t->slots[index].length;
		e->vaddr = t->slots[index].vaddr;
	}
	pthread_mutex_unlock(&t->lock);
	return err;
}

void sv_mr_table_remove(struct sv_mr_table *t, uint32_t index)
{
	pthread_mutex_lock(&t->lock);
	atomic_store_explicit(&t->slots[index].key, 0, memory_order_release);
	t->n_used--;
	if (index < t->next_free_hint)
		t->next_free_hint = index;
	pthread_mutex_unlock(&t->lock);
	place_fence();
}

enum sv_access_result sv_mr_check(const struct sv_mr_entry *slots, uint32_t key, uint32_t pd,
				  uint32_t need, uint64_t addr, uint64_t len, uint64_t *vaddr)
{
	const struct sv_mr_entry *e = &slots[sv_mr_key_index(key)];
	uint64_t off;

	struct sv_mr_entry c;

	if (key == 0 || atomic_load_explicit(&e->key, memory_order_acquire) != key)
		return SV_ACCESS_BAD_KEY;
	c.pd = e->pd;
	c.access = e->access;
	c.iova = e->iova;
	c.length = e->length;
	c.vaddr = e->vaddr;
	/* The slot may have been reused while we read it: the key changes when it is. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&e->key, memory_order_relaxed) != key)
		return SV_ACCESS_BAD_KEY;
	if (c.pd != pd)
		return SV_ACCESS_BAD_PD;
	if ((c.access & need) != need)
		return SV_ACCESS_NO_RIGHT;
	/* Overflow-safe: addr >= iova, len <= length, addr - iova <= length - len. */
	if (addr < c.iova || len > c.length)
		return SV_ACCESS_OUT_OF_RANGE;
	off = addr - c.iova;
	if (off > c.length - len)
		return SV_ACCESS_OUT_OF_RANGE;
	*vaddr = c.vaddr + off;
	return SV_ACCESS_OK;
}
