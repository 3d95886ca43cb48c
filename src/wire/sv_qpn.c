#include "wire/sv_qpn.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/sv_log.h"

struct qpn_block {
	uint32_t block;
	int fd;
	uint32_t n_used;
	uint32_t next; /* where the search for a free number starts: numbers go round */
	uint64_t used[SV_QPN_BLOCK / 64];
	void *owner[SV_QPN_BLOCK];
};

static pthread_mutex_t qpn_lock = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static struct qpn_block *blocks;
static int n_blocks;
static pid_t owner_pid;

int sv_qpn_sockname(uint32_t qpn, char *buf, int len)
{
	return snprintf(buf, (size_t)len, "softverbs/qpn/%u", qpn >> SV_QPN_BLOCK_BITS);
}

static int claim_block(uint32_t block)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, n;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Abstract namespace: sun_path starts with a NUL byte. */
	n = sv_qpn_sockname(block << SV_QPN_BLOCK_BITS, sa.sun_path + 1, sizeof(sa.sun_path) - 1);
	if (bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) ||
	    listen(fd, 64)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

/* After fork() the child inherits the parent's blocks: it must claim its own. */
static void forget_inherited(void)
{
	if (owner_pid == getpid())
		return;
	for (int i = 0; i < n_blocks; i++)
		close(blocks[i].fd);
	free(blocks);
	blocks = NULL;
	n_blocks = 0;
	owner_pid = getpid();
}

static struct qpn_block *new_block(void)
{
	uint32_t start = ((uint32_t)getpid() * 2654435761u) % (SV_QPN_BLOCKS - 1);
	struct qpn_block *grown;

	grown = realloc(blocks, (size_t)(n_blocks + 1) * sizeof(*blocks));
	if (!grown)
		return NULL;
	blocks = grown;
	for (uint32_t n = 0; n < SV_QPN_BLOCKS - 1; n++) {
		uint32_t block = 1 + (start + n) % (SV_QPN_BLOCKS - 1); /* block 0 holds QP0/QP1 */
		int fd = claim_block(block);

		if (fd == -EADDRINUSE)
			continue;
		if (fd < 0) {
			errno = -fd;
			return NULL;
		}
		memset(&blocks[n_blocks], 0, sizeof(blocks[n_blocks]));
		blocks[n_blocks].block = block;
		blocks[n_blocks].fd = fd;
		return &blocks[n_blocks++];
	}
	return NULL;
}

static int (*_Atomic block_answer)(int listen_fd);

void sv_qpn_answer_blocks(int (*answer)(int listen_fd))
{
	atomic_store(&block_answer, answer);
}

int sv_qpn_alloc(uint32_t *qpn, void *owner, int *new_listen_fd)
{
	int (*answer)(int listen_fd);
	struct qpn_block *b = NULL;
	int ret = -ENOMEM;

	*new_listen_fd = -1;
	pthread_mutex_lock(&qpn_lock);
	forget_inherited();
	for (int i = 0; i < n_blocks && !b; i++)
		if (blocks[i].n_used < SV_QPN_BLOCK)
			b = &blocks[i];
	if (!b) {
		errno = ENOMEM;
		b = new_block();
		if (b)
			*new_listen_fd = b->fd;
		else if (errno == EMFILE || errno == ENFILE)
			ret = -errno; /* else ENOMEM: out of memory, or of blocks */
	}
	if (b) {
		/* A number freed is taken again as late as the block allows, as a NIC's QPNs
		 * go round: a peer that has not yet heard that its QP went away finds no new
		 * QP under the old number (and the shm wire reuses its segment late). */
		for (uint32_t k = 0; k < SV_QPN_BLOCK; k++) {
			uint32_t i = (b->next + k) % SV_QPN_BLOCK;

			if (b->used[i / 64] & (1ull << (i % 64)))
				continue;
			b->used[i / 64] |= 1ull << (i % 64);
			b->owner[i] = owner;
			b->n_used++;
			b->next = (i + 1) % SV_QPN_BLOCK;
			*qpn = (b->block << SV_QPN_BLOCK_BITS) | i;
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&qpn_lock);
	answer = atomic_load(&block_answer);
	if (*new_listen_fd >= 0 && answer) {
		if (answer(*new_listen_fd))
			sv_dbg("qpn: the block of %u has no listener: attaches to it will fail",
			       *qpn);
		*new_listen_fd = -1;
	}
	return ret;
}

void sv_qpn_free(uint32_t qpn)
{
	uint32_t block = qpn >> SV_QPN_BLOCK_BITS, i = qpn & (SV_QPN_BLOCK - 1);

	pthread_mutex_lock(&qpn_lock);
	if (owner_pid == getpid()) {
		for (int n = 0; n < n_blocks; n++) {
			if (blocks[n].block != block)
				continue;
			if (blocks[n].used[i / 64] & (1ull << (i % 64))) {
				blocks[n].used[i / 64] &= ~(1ull << (i % 64));
				blocks[n].owner[i] = NULL;
				blocks[n].n_used--;
			}
			break;
		}
	}
	pthread_mutex_unlock(&qpn_lock);
}

void *sv_qpn_owner(uint32_t qpn)
{
	uint32_t block = qpn >> SV_QPN_BLOCK_BITS, i = qpn & (SV_QPN_BLOCK - 1);
	void *owner = NULL;

	pthread_mutex_lock(&qpn_lock);
	if (owner_pid == getpid())
		for (int n = 0; n < n_blocks && !owner; n++)
			if (blocks[n].block == block)
				owner = blocks[n].owner[i];
	pthread_mutex_unlock(&qpn_lock);
	return owner;
}

/* fork(): the child must not inherit the lock held by another thread (pthread_atfork). */
void sv_qpn_atfork_prepare(void)
{
	pthread_mutex_lock(&qpn_lock);
}

void sv_qpn_atfork_parent(void)
{
	pthread_mutex_unlock(&qpn_lock);
}

void sv_qpn_atfork_child(void)
{
	pthread_mutex_init(&qpn_lock, NULL);
	/* The child's copies of the parent's block sockets go now, not at its first QP: a
	 * child that makes none would keep the parent's blocks claimed after the parent died
	 * (the kernel drops a name only when its last descriptor closes). */
	forget_inherited();
}
