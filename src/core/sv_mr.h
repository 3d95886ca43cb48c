/*
 * The memory-key table of a context: lkey/rkey -> registered range.
 *
 * A key is tag_hi << 28 | index << 8 | tag_lo: the index names a slot, the 12-bit tag is
 * random per registration, so a key is not guessable from another key and a stale key
 * (deregistered, slot reused) misses. The low 8 bits are the IBA's "key" part of an
 * R_Key: a memory window rebound with ibv_inc_rkey() keeps its slot. Every access through a key, local or remote, is
 * checked by sv_mr_check(): key, PD, access right, bounds (overflow-safe).
 */
#ifndef SV_MR_H
#define SV_MR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SV_MR_INDEX_BITS 20
#define SV_MR_SLOTS (1u << SV_MR_INDEX_BITS)
#define SV_MR_KEY_SHIFT 8

static inline uint32_t sv_mr_key_index(uint32_t key)
{
	return (key >> SV_MR_KEY_SHIFT) & (SV_MR_SLOTS - 1);
}

enum { SV_MR_F_MW = 1 }; /* sv_mr_entry.flags: a memory window */
enum { SV_MR_ACCESS_ON_DEMAND = 1 << 6 }; /* IBV_ACCESS_ON_DEMAND, kept in .access */

struct sv_mr_entry {
	_Atomic uint32_t key; /* 0 = free slot; written last, cleared first */
	uint32_t pd;      /* handle of the owning PD */
	uint32_t access;  /* enum ibv_access_flags */
	uint32_t flags;   /* SV_MR_F_* */
	uint64_t iova;    /* first address peers and SGEs use */
	uint64_t length;
	uint64_t vaddr;   /* where iova maps to in the owner's address space */
};

struct sv_mr_table {
	pthread_mutex_t lock; /* guards allocation; lookups read entries */
	int fd;               /* the shared memory behind slots (sv_shared.h): a wire's peers
	                       * map it read-only to check keys */
	struct sv_mr_entry *slots;
	uint32_t n_used;
	uint32_t next_free_hint;
};

enum sv_access_result {
	SV_ACCESS_OK,
	SV_ACCESS_BAD_KEY,    /* no such key, or stale */
	SV_ACCESS_BAD_PD,     /* the key belongs to another PD */
	SV_ACCESS_NO_RIGHT,   /* the access flag is missing */
	SV_ACCESS_OUT_OF_RANGE,
};

int sv_mr_table_init(struct sv_mr_table *t);
#define SV_MR_TABLE_BYTES ((size_t)SV_MR_SLOTS * sizeof(struct sv_mr_entry))
void sv_mr_table_destroy(struct sv_mr_table *t);

/* Allocates a slot and a fresh key. Returns 0 and *index, *key, or -ENOMEM. */
int sv_mr_table_add(struct sv_mr_table *t, const struct sv_mr_entry *e, uint32_t *index,
		    uint32_t *key);
/* New contents for a live slot under a new key of the same slot (a memory window's
 * bind, invalidation): 0, or -EINVAL if @old_key no longer names it or @new_key names
 * another slot. */
int sv_mr_table_rekey(struct sv_mr_table *t, uint32_t old_key, const struct sv_mr_entry *e,
		      uint32_t new_key);
/* A memory window of PD @pd named by @key reaches nothing any more (its key stays):
 * IBV_WR_LOCAL_INV, SEND_WITH_INV. 0, or -EINVAL if @key is no such window. */
int sv_mr_table_invalidate_mw(struct sv_mr_table *t, uint32_t key, uint32_t pd);
/* A live slot's contents and key (ibv_import_mr): 0, or -EINVAL if none. */
int sv_mr_table_read(struct sv_mr_table *t, uint32_t index, struct sv_mr_entry *e,
		     uint32_t *key);
/* New contents for a slot (rereg), with a fresh key unless @keep_key; returns once no
 * placement through the old contents is copying. */
int sv_mr_table_update(struct sv_mr_table *t, uint32_t index, const struct sv_mr_entry *e,
		       bool keep_key, uint32_t *key);
/* Removes a slot; returns once no placement that found its key valid is copying. */
void sv_mr_table_remove(struct sv_mr_table *t, uint32_t index);

/* Around this process's placements into registered memory (see sv_mr.c): a slot's
 * removal or change waits for the placements in progress. Not nested. */
void sv_mr_place_begin(void);
void sv_mr_place_end(void);
/* In a forked child (pthread_atfork): no placement is in progress there. */
void sv_mr_place_after_fork(void);

/*
 * Checks an access of [addr, addr + len) through @key for @need access rights by a
 * QP of PD @pd. On success *vaddr is where addr lives in the owner's address space.
 * need == 0 is a local read, which every MR allows.
 */
/* Whether the MR behind @key, which sv_mr_check() has just accepted, is on demand
 * (IBV_ACCESS_ON_DEMAND: its pages need not be there; sv_mem_accessible() says). */
static inline bool sv_mr_on_demand(const struct sv_mr_entry *slots, uint32_t key)
{
	return slots[sv_mr_key_index(key)].access & SV_MR_ACCESS_ON_DEMAND;
}

enum sv_access_result sv_mr_check(const struct sv_mr_entry *slots, uint32_t key, uint32_t pd,
				  uint32_t need, uint64_t addr, uint64_t len, uint64_t *vaddr);


#endif
