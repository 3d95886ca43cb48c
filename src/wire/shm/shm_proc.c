/*
 * What the shm wire shares per process rather than per QP, so that a QP costs no
 * descriptor of its own:
 *
 * - arenas: our QPs' segments, one file per block of QP numbers (sv_qpn.h), a QP's
 *   segment at its number's place in it. A peer process maps the arena once, however
 *   many of its QPs it reaches.
 * - maps: the arenas and key tables of other processes as we map them, one mapping per
 *   file however many peers use it.
 * - procs: the processes our peers live in: their engine's wake-up descriptor (one per
 *   process) and whether they died.
 *
 * Everything here is under the engine's lock, but the progress thread's look at the
 * rings (shm_arena_rings) and the fork hook.
 */
#include "wire/shm/shm_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "core/sv_obj.h"
#include "util/sv_shared.h"
#include "wire/sv_qpn.h"

/* --- arenas: our segments ----------------------------------------------------------------- */

struct arena {
	uint32_t block;
	int fd;
	char *base;
};

static struct arena *arenas;
static int n_arenas;

/* The rings of our arenas, for the progress thread to look at without the engine's
 * lock (shm_arena_rings): appended, never moved. */
enum { RINGS_MAX = 1024 };
static struct {
	struct shm_arena_hdr *_Atomic hdr[RINGS_MAX];
	uint32_t block[RINGS_MAX];
	atomic_int n;
} rings;

/* A child of fork() makes arenas of its own: the parent's are the parent's (their
 * mappings stay, inherited QPs point there; its thread looks at their rings). */
void shm_arena_atfork_child(void)
{
	for (int i = 0; i < n_arenas; i++)
		close(arenas[i].fd);
	free(arenas);
	arenas = NULL;
	n_arenas = 0;
	atomic_store(&rings.n, 0);
}

static struct arena *arena_of_block(uint32_t block, bool create)
{
	struct arena *grown, *a;

	for (int i = 0; i < n_arenas; i++)
		if (arenas[i].block == block)
			return &arenas[i];
	if (!create)
		return NULL;
	grown = realloc(arenas, (size_t)(n_arenas + 1) * sizeof(*arenas));
	if (!grown)
		return NULL;
	arenas = grown;
	a = &arenas[n_arenas];
	/* Sized for the block's every QP; pages are touched only as QPs use them. */
	a->base = sv_shared_alloc("softverbs-qps", SHM_ARENA_BYTES, SV_SHARED_SIZED, &a->fd);
	if (!a->base)
		return NULL;
	a->block = block;
	n_arenas++;
	if (atomic_load(&rings.n) < RINGS_MAX) {
		int k = atomic_load(&rings.n);

		rings.block[k] = block;
		atomic_store(&rings.hdr[k], (struct shm_arena_hdr *)a->base);
		atomic_store(&rings.n, k + 1); /* (past RINGS_MAX: its QPs never go quiet) */
	}
	return a;
}

/* @seg's memory in @a given back: it reads as zeros, and none of it is resident. The
 * range is mapped afresh over itself (the same file range, at the same address): to
 * every tool that watches memory (ThreadSanitizer, valgrind) it is new memory, as a
 * segment of its own was, not the last QP's of that number. */
static void seg_clear(const struct arena *a, void *seg)
{
	off_t off = (char *)seg - a->base;

	if (!fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, SHM_SEG_STRIDE) &&
	    mmap(seg, SHM_SEG_STRIDE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
		 a->fd, off) == seg)
		return;
	if (madvise(seg, SHM_SEG_STRIDE, MADV_REMOVE))
		memset(seg, 0, SHM_SEG_STRIDE); /* (a kernel without it: zeros, if resident) */
}

int shm_arena_seg(uint32_t qpn, void **seg)
{
	struct arena *a;

	errno = 0;
	a = arena_of_block(qpn >> SV_QPN_BLOCK_BITS, true);
	if (!a)
		return errno ? -errno : -ENOMEM;
	*seg = a->base + SHM_ARENA_HDR + (size_t)(qpn & (SV_QPN_BLOCK - 1)) * SHM_SEG_STRIDE;
	/* All zeros, untouched: a late peer of the number's last QP may have written since
	 * it went (it finds a QP in RESET before it writes, but may have looked before). */
	seg_clear(a, *seg);
	return 0;
}

bool shm_arena_locate(uint32_t qpn, int *fd, uint64_t *off)
{
	struct arena *a = arena_of_block(qpn >> SV_QPN_BLOCK_BITS, false);

	if (!a)
		return false;
	*fd = a->fd;
	*off = SHM_ARENA_HDR + (uint64_t)(qpn & (SV_QPN_BLOCK - 1)) * SHM_SEG_STRIDE;
	return true;
}

void shm_arena_release(uint32_t qpn, void *seg)
{
	struct arena *a = arena_of_block(qpn >> SV_QPN_BLOCK_BITS, false);

	/* Only ours: an inherited QP's segment is the parent's, still in use. */
	if (!a)
		return;
	/* Its pages go back (and read as zeros: a peer that has not heard yet sees a QP in
	 * RESET, which takes nothing). */
	seg_clear(a, seg);
}

void shm_arena_rings(void)
{
	int n = atomic_load_explicit(&rings.n, memory_order_acquire);

	for (int i = 0; i < n; i++) {
		struct shm_arena_hdr *h = atomic_load_explicit(&rings.hdr[i], memory_order_relaxed);

		for (uint32_t k = 0; k < 4; k++) {
			uint64_t bits;

			if (!atomic_load_explicit(&h->ring[k], memory_order_relaxed))
				continue;
			/* Acquire: what the ringer published before is seen by the look. */
			bits = atomic_exchange_explicit(&h->ring[k], 0, memory_order_acquire);
			/* The engine's lock keeps the QPs found by number alive. */
			sv_engine_lock();
			while (bits) {
				uint32_t qpn = rings.block[i] << SV_QPN_BLOCK_BITS | k * 64 |
					       (uint32_t)__builtin_ctzll(bits);
				struct sv_qp *qp = sv_qpn_owner(qpn);

				bits &= bits - 1;
				/* (anyone may ring: a number of nobody, or of a QP on another
				 * wire, is passed over) */
				if (qp && qp->wire == &sv_wire_shm)
					sv_engine_wake_qp(qp);
			}
			sv_engine_unlock();
		}
	}
}

/* --- maps: other processes' files ---------------------------------------------------------- */

struct map {
	dev_t dev;
	ino_t ino;
	int prot;
	void *addr;
	size_t len;
	int refs;
	struct map *next;
};

static struct map *maps;

void *shm_map_get(int fd, size_t len, int prot)
{
	struct stat st;
	struct map *m;

	if (fstat(fd, &st))
		return NULL;
	for (m = maps; m; m = m->next) {
		if (m->dev == st.st_dev && m->ino == st.st_ino && m->prot == prot &&
		    m->len == len) {
			m->refs++;
			return m->addr;
		}
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->addr = mmap(NULL, len, prot, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (m->addr == MAP_FAILED) {
		free(m);
		return NULL;
	}
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->prot = prot;
	m->len = len;
	m->refs = 1;
	m->next = maps;
	maps = m;
	return m->addr;
}

void shm_map_put(const void *addr)
{
	for (struct map **pp = &maps, *m; (m = *pp); pp = &m->next) {
		if (m->addr != addr)
			continue;
		if (--m->refs == 0) {
			*pp = m->next;
			munmap(m->addr, m->len);
			free(m);
		}
		return;
	}
}

/* --- procs: the processes of our peers ----------------------------------------------------- */

static struct shm_proc *procs;
static struct shm_proc self = { .wake_fd = -1, .refs = 1 };

struct shm_proc *shm_proc_self(void)
{
	/* Written only when it changes (first use, a forked child): the data path reads
	 * wake_fd without the lock. */
	if (self.pid != getpid() || self.wake_fd != sv_engine_wake_fd()) {
		self.pid = getpid();
		self.wake_fd = sv_engine_wake_fd();
	}
	return &self;
}

struct shm_proc *shm_proc_find(pid_t pid)
{
	for (struct shm_proc *p = procs; p; p = p->next)
		if (p->pid == pid && !atomic_load_explicit(&p->dead, memory_order_relaxed))
			return p;
	return NULL;
}

struct shm_proc *shm_proc_get(pid_t pid)
{
	struct shm_proc *p = shm_proc_find(pid);

	if (p) {
		p->refs++;
		return p;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->pid = pid;
	p->wake_fd = -1;
	p->refs = 1;
	p->next = procs;
	procs = p;
	return p;
}

void shm_proc_put(struct shm_proc *p)
{
	if (!p || p == &self || --p->refs > 0)
		return;
	for (struct shm_proc **pp = &procs; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	if (p->wake_fd >= 0)
		close(p->wake_fd);
	free(p);
}
