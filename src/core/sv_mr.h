/*
 * The memory-key table of a context: lkey/rkey -> registered range.
 *
 * A key is (tag << SV_MR_INDEX_BITS) | index: the index names a slot, the tag is random
 * per registration, so a key is not guessable from another key and a stale key
 * (deregistered, slot reused) misses. Every access through a key, local or remote, is
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

struct sv_mr_entry {
	_Atomic uint32_t key; /* 0 = free slot; written last, cleared first */
	uint32_t pd;      /* handle of the owning PD */
	uint32_t access;  /* enum ibv_access_flags */
	uint32_t pad;
	uint64_t iova;    /* first address peers and SGEs use */
	uint64_t length;
	uint64_t vaddr;   /* where iova maps to in the owner's address space */
};

struct sv_mr_table {
	pthread_mutex_t lock; /* guards allocation; lookups read entries */
	int fd;               /* memfd behind slots: peers map it read-only to check keys */
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
/* A live slot's contents and key (ibv_import_mr): 0, or -EINVAL if none. */
int sv_mr_table_read(struct sv_mr_table *t, uint32_t index, struct sv_mr_entry *e,
		     uint32_t *key);
/* New contents for a slot (rereg), with a fresh key unless @keep_key. */
int sv_mr_table_update(struct sv_mr_table *t, uint32_t index, const struct sv_mr_entry *e,
		       bool keep_key, uint32_t *key);
void sv_mr_table_remove(struct sv_mr_table *t, uint32_t index);

/*
 * Checks an access of [addr, addr + len) through @key for @need access rights by a
 * QP of PD @pd. On success *vaddr is where addr lives in the owner's address space.
 * need == 0 is a local read, which every MR allows.
 */
enum sv_access_result sv_mr_check(const struct sv_mr_entry *slots, uint32_t key, uint32_t pd,
				  uint32_t need, uint64_t addr, uint64_t len, uint64_t *vaddr);


#endif
