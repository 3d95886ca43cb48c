/*
 * shm_assist: the copy-assist job a requester posts on its responder's QP page.
 *
 * A large RDMA WRITE or READ between two processes is one process_vm_writev/readv by
 * the requester: one CPU copies, and on these machines the kernel's side of that call
 * (pinning, page walks) makes it several times slower than memcpy. The responder's
 * progress thread, when it is awake anyway, can copy part of it at the same time from
 * its end (process_vm_readv of a WRITE's source, process_vm_writev into a READ's
 * destination). The requester stays the authority: it never waits for help that does
 * not come, and it redoes whatever the helper could not copy.
 *
 * The message's bytes [0, len) are cut into chunks of SHM_ASSIST_CHUNK; what follows
 * len (the message's last SHM_ASSIST_TAIL bytes) is never offered: the requester copies
 * it after every chunk has landed, so a target polling on a WRITE's last byte sees it
 * last. `claim` holds the job's number and the chunks nobody took yet, [front, back):
 * the requester takes from the front, the helper one at a time from the back, each
 * with a compare-and-swap on the whole word. A helper counts what it finished in
 * `done`, tagged with the job's number (a copy of an earlier job finishing late never
 * counts for this one), and names the job in `failed` if it could not copy a chunk.
 *
 * A helper reads the job's descriptor after it took a chunk: the requester posts no
 * other job while a chunk it handed out is not counted (unless it abandons the job on an
 * error, when what lands there no longer matters).
 *
 * Trust: either side may be another user's process. Every field is read with atomic
 * loads and re-validated by the helper against its own key table (the responder's
 * memory) and the requester's (the requester's memory); the requester bounds what it
 * reads from the word by what it posted.
 */
#ifndef SHM_ASSIST_H
#define SHM_ASSIST_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#define SHM_ASSIST_CHUNK (64u * 1024) /* bytes per chunk */
#define SHM_ASSIST_TAIL 4096u          /* the message's last bytes: the requester's, last */
#define SHM_ASSIST_SGE 32              /* the requester's buffers (SV_MAX_SGE) */

struct shm_assist_sge {
	_Atomic uint64_t addr;    /* in the requester's address space, as posted */
	_Atomic uint64_t len_key; /* length << 32 | lkey */
};

struct shm_assist {
	_Alignas(64) _Atomic uint64_t claim; /* job << 32 | front << 16 | back, in chunks */
	_Atomic uint64_t done;   /* job << 32 | chunks the helper finished */
	_Atomic uint64_t failed; /* the job one of whose chunks the helper could not copy */
	_Atomic uint64_t addr;   /* the responder's memory: address and key, as posted */
	_Atomic uint64_t op;     /* rkey << 32 | SHM_ASSIST_WRITE | number of SGEs */
	_Atomic uint64_t len;    /* bytes the chunks cover (the message less its tail) */
	struct shm_assist_sge sge[SHM_ASSIST_SGE];
};

static_assert(offsetof(struct shm_assist, len) == 40 && offsetof(struct shm_assist, sge) == 48 &&
		      sizeof(struct shm_assist_sge) == 16,
	      "fixed layout (tests forge jobs)");

#define SHM_ASSIST_WRITE 0x100u /* op: RDMA WRITE (the helper pulls); else READ (pushes) */

static inline uint64_t shm_assist_word(uint32_t job, uint32_t front, uint32_t back)
{
	return (uint64_t)job << 32 | (uint64_t)(front & 0xffff) << 16 | (back & 0xffff);
}

static inline uint32_t shm_assist_job(uint64_t c) { return (uint32_t)(c >> 32); }
static inline uint32_t shm_assist_front(uint64_t c) { return (uint32_t)(c >> 16) & 0xffff; }
static inline uint32_t shm_assist_back(uint64_t c) { return (uint32_t)c & 0xffff; }

/* Chunks a job of @len bytes has (at most 0xffff: a message is at most 2 GiB). */
static inline uint32_t shm_assist_chunks(uint64_t len)
{
	return (uint32_t)((len + SHM_ASSIST_CHUNK - 1) / SHM_ASSIST_CHUNK);
}

/* Whether a chunk waits for someone to take it (read relaxed: a hint). */
static inline bool shm_assist_pending(struct shm_assist *a)
{
	uint64_t c = atomic_load_explicit(&a->claim, memory_order_relaxed);

	return shm_assist_front(c) < shm_assist_back(c);
}

/*
 * Takes up to @want chunks from the front of job @job: true and [*first, *first + *n),
 * or false when none is left. *back is where the helper's chunks start (as far as the
 * word says: it only moves down to meet the front).
 */
static inline bool shm_assist_take_front(struct shm_assist *a, uint32_t job, uint32_t want,
					 uint32_t *first, uint32_t *n, uint32_t *back)
{
	uint64_t c = atomic_load_explicit(&a->claim, memory_order_acquire);

	for (;;) {
		uint32_t f = shm_assist_front(c), b = shm_assist_back(c), k;

		*back = b;
		if (shm_assist_job(c) != job || f >= b)
			return false;
		k = want < b - f ? want : b - f;
		if (atomic_compare_exchange_weak_explicit(&a->claim, &c,
							  shm_assist_word(job, f + k, b),
							  memory_order_acq_rel,
							  memory_order_acquire)) {
			*first = f;
			*n = k;
			return true;
		}
	}
}

/* Takes the last chunk of whatever job is posted: true and the word it took it from. */
static inline bool shm_assist_take_back(struct shm_assist *a, uint64_t *taken)
{
	uint64_t c = atomic_load_explicit(&a->claim, memory_order_acquire);
	uint32_t f = shm_assist_front(c), b = shm_assist_back(c);

	if (f >= b)
		return false;
	if (!atomic_compare_exchange_strong_explicit(&a->claim, &c,
						     shm_assist_word(shm_assist_job(c), f, b - 1),
						     memory_order_acq_rel, memory_order_acquire))
		return false;
	*taken = c;
	return true;
}

/* The helper finished a chunk of @job (counted only while that job is posted). */
static inline void shm_assist_count(struct shm_assist *a, uint32_t job)
{
	uint64_t d = atomic_load_explicit(&a->done, memory_order_relaxed);

	while ((uint32_t)(d >> 32) == job &&
	       !atomic_compare_exchange_weak_explicit(&a->done, &d, d + 1, memory_order_release,
						      memory_order_relaxed))
		;
}

/* Nothing of job @job is left to take (the requester abandons it). */
static inline void shm_assist_close(struct shm_assist *a, uint32_t job)
{
	uint64_t c = atomic_load_explicit(&a->claim, memory_order_relaxed);

	while (shm_assist_job(c) == job && shm_assist_front(c) < shm_assist_back(c) &&
	       !atomic_compare_exchange_weak_explicit(&a->claim, &c,
						      shm_assist_word(job, shm_assist_back(c),
								      shm_assist_back(c)),
						      memory_order_acq_rel, memory_order_relaxed))
		;
}

#endif
