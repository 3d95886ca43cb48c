#include "core/sv_xrcd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/sv_obj.h"
#include "core/sv_cq.h"

struct sv_xrc_domain {
	struct sv_xrc_domain *next; /* the process's domains with a file (under domains_lock) */
	int refs;                   /* open handles (under domains_lock) */
	bool has_file;
	dev_t dev;                  /* the file, as fstat names it */
	ino_t ino;
	pthread_rwlock_t lock;      /* guards srqs and tgts */
	struct sv_srq **srqs;
	int n_srqs, cap_srqs;
	struct sv_qp **tgts;        /* the domain's target QPs */
	int n_tgts, cap_tgts;
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
	free(d->tgts);
	free(d);
}

/* Appends @p to the array *@v of *@n (capacity *@cap). Caller holds the write lock. */
static int push(void ***v, int *n, int *cap, void *p)
{
	if (*n == *cap) {
		int c = *cap ? 2 * *cap : 8;
		void **x = realloc(*v, (size_t)c * sizeof(*x));

		if (!x)
			return -ENOMEM;
		*v = x;
		*cap = c;
	}
	(*v)[(*n)++] = p;
	return 0;
}

static void drop(void **v, int *n, void *p)
{
	for (int i = 0; i < *n; i++) {
		if (v[i] == p) {
			v[i] = v[--*n];
			return;
		}
	}
}

/*
 * A poller of an XRC SRQ's CQ moves the work of the domain's targets (sv_cq_progress),
 * as it moves that of the QPs it completes for: each target is attached to the CQ of
 * every SRQ of its domain, once per pair. This attaches (or detaches) the pairs of a new
 * member: @srq with every target, or @qp with every SRQ. Caller holds the write lock.
 */
static int pairs(struct sv_xrc_domain *d, struct sv_srq *srq, struct sv_qp *qp, bool attach)
{
	int n = srq ? d->n_tgts : d->n_srqs;

	for (int i = 0; i < n; i++) {
		struct sv_cq *cq = srq ? srq->cq : d->srqs[i]->cq;
		struct sv_qp *t = srq ? d->tgts[i] : qp;

		if (!attach) {
			sv_cq_detach_qp(cq, t);
		} else if (sv_cq_attach_qp(cq, t)) {
			while (i--)
				sv_cq_detach_qp(srq ? srq->cq : d->srqs[i]->cq, srq ? d->tgts[i] : qp);
			return -ENOMEM;
		}
	}
	return 0;
}

int sv_xrc_domain_add_srq(struct sv_xrc_domain *d, struct sv_srq *srq)
{
	int err;

	pthread_rwlock_wrlock(&d->lock);
	err = pairs(d, srq, NULL, true);
	if (!err && (err = push((void ***)&d->srqs, &d->n_srqs, &d->cap_srqs, srq)))
		pairs(d, srq, NULL, false);
	pthread_rwlock_unlock(&d->lock);
	return err;
}

void sv_xrc_domain_remove_srq(struct sv_xrc_domain *d, struct sv_srq *srq)
{
	pthread_rwlock_wrlock(&d->lock);
	drop((void **)d->srqs, &d->n_srqs, srq);
	pairs(d, srq, NULL, false);
	pthread_rwlock_unlock(&d->lock);
}

int sv_xrc_domain_add_target(struct sv_xrc_domain *d, struct sv_qp *qp)
{
	int err;

	pthread_rwlock_wrlock(&d->lock);
	err = pairs(d, NULL, qp, true);
	if (!err && (err = push((void ***)&d->tgts, &d->n_tgts, &d->cap_tgts, qp)))
		pairs(d, NULL, qp, false);
	pthread_rwlock_unlock(&d->lock);
	return err;
}

void sv_xrc_domain_remove_target(struct sv_xrc_domain *d, struct sv_qp *qp)
{
	pthread_rwlock_wrlock(&d->lock);
	drop((void **)d->tgts, &d->n_tgts, qp);
	pairs(d, NULL, qp, false);
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
