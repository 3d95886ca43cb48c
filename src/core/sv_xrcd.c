#include "core/sv_xrcd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/sv_obj.h"

struct sv_xrc_domain {
	struct sv_xrc_domain *next; /* the process's domains with a file (under domains_lock) */
	int refs;                   /* open handles (under domains_lock) */
	bool has_file;
	dev_t dev;                  /* the file, as fstat names it */
	ino_t ino;
	pthread_rwlock_t lock;      /* guards srqs */
	struct sv_srq **srqs;
	int n_srqs, cap_srqs;
};

static pthread_mutex_t domains_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_xrc_domain *domains;
static atomic_uint srq_numbers;

uint32_t sv_xrc_srq_number(void)
{
	uint32_t n;

	do
		n = (atomic_fetch_add(&srq_numbers, 1) + 1) & 0xffffff;
	while (!n);
	return n;
}

static struct sv_xrc_domain *domain_of_file(dev_t dev, ino_t ino)
{
	for (struct sv_xrc_domain *d = domains; d; d = d->next)
		if (d->dev == dev && d->ino == ino)
			return d;
	return NULL;
}

int sv_xrc_domain_open(int fd, int oflags, struct sv_xrc_domain **out)
{
	struct sv_xrc_domain *d = NULL;
	struct stat st;
	int err = 0;

	if (fd != -1 && fstat(fd, &st))
		return -EBADF;
	pthread_mutex_lock(&domains_lock);
	if (fd != -1) {
		d = domain_of_file(st.st_dev, st.st_ino);
		if (!d && !(oflags & O_CREAT))
			err = -EAGAIN;
		else if (d && (oflags & O_EXCL))
			err = -EINVAL;
	}
	if (!err && !d) {
		d = calloc(1, sizeof(*d));
		if (!d) {
			err = -ENOMEM;
		} else {
			pthread_rwlock_init(&d->lock, NULL);
			if (fd != -1) {
				d->has_file = true;
				d->dev = st.st_dev;
				d->ino = st.st_ino;
				d->next = domains;
				domains = d;
			}
		}
	}
	if (!err) {
		d->refs++;
		*out = d;
	}
	pthread_mutex_unlock(&domains_lock);
	return err;
}

void sv_xrc_domain_close(struct sv_xrc_domain *d)
{
	bool last;

	pthread_mutex_lock(&domains_lock);
	last = --d->refs == 0;
	if (last && d->has_file) {
		struct sv_xrc_domain **p = &domains;

		while (*p != d)
			p = &(*p)->next;
		*p = d->next;
	}
	pthread_mutex_unlock(&domains_lock);
	if (!last)
		return;
	pthread_rwlock_destroy(&d->lock);
	free(d->srqs);
	free(d);
}

int sv_xrc_domain_add_srq(struct sv_xrc_domain *d, struct sv_srq *srq)
{
	int err = 0;

	pthread_rwlock_wrlock(&d->lock);
	if (d->n_srqs == d->cap_srqs) {
		int cap = d->cap_srqs ? 2 * d->cap_srqs : 8;
		struct sv_srq **n = realloc(d->srqs, (size_t)cap * sizeof(*n));

		if (n) {
			d->srqs = n;
			d->cap_srqs = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		d->srqs[d->n_srqs++] = srq;
	pthread_rwlock_unlock(&d->lock);
	return err;
}

void sv_xrc_domain_remove_srq(struct sv_xrc_domain *d, struct sv_srq *srq)
{
	pthread_rwlock_wrlock(&d->lock);
	for (int i = 0; i < d->n_srqs; i++) {
		if (d->srqs[i] == srq) {
			d->srqs[i] = d->srqs[--d->n_srqs];
			break;
		}
	}
	pthread_rwlock_unlock(&d->lock);
}

void sv_xrc_domain_rdlock(struct sv_xrc_domain *d)
{
	pthread_rwlock_rdlock(&d->lock);
}

struct sv_srq *sv_xrc_domain_find(struct sv_xrc_domain *d, uint32_t srqn)
{
	for (int i = 0; i < d->n_srqs; i++)
		if (d->srqs[i]->srqn == srqn)
			return d->srqs[i];
	return NULL;
}

void sv_xrc_domain_unlock(struct sv_xrc_domain *d)
{
	pthread_rwlock_unlock(&d->lock);
}
