/* Completion channels, CQs (plain and extended) and their events. */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "core/sv_qp_data.h"
#include "verbs.h"

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct sv_comp_channel *chan;

	if (!context)
		return sv_fail_null(EINVAL);
	chan = calloc(1, sizeof(*chan));
	if (!chan)
		return sv_fail_null(ENOMEM);
	/* Semaphore mode: one count per event; one read takes one event. */
	chan->ibv.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (chan->ibv.fd < 0) {
		int err = errno;

		free(chan);
		return sv_fail_null(err);
	}
	chan->ibv.context = context;
	pthread_mutex_init(&chan->lock, NULL);
	return &chan->ibv;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sv_comp_channel *chan;

	if (!channel)
		return EINVAL;
	chan = to_svchan(channel);
	pthread_mutex_lock(&chan->lock);
	if (channel->refcnt) {
		pthread_mutex_unlock(&chan->lock);
		return EBUSY;
	}
	pthread_mutex_unlock(&chan->lock);
	close(channel->fd);
	pthread_mutex_destroy(&chan->lock);
	free(chan);
	return 0;
}

enum {
	SV_CQ_WC_FLAGS = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	SV_CQ_CREATE_FLAGS = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
};

/* --- the extended poll API: ibv_start_poll / ibv_next_poll / ibv_end_poll ------------ */

static void cur_to_ex(struct sv_cq *cq)
{
	cq->ibv.wr_id = cq->cur.wc.wr_id;
	cq->ibv.status = cq->cur.wc.status;
}

/* Under the CQ's lock: the oldest completion becomes the one the extended poll is on. */
static void take_cur(struct sv_cq *cq)
{
	uint32_t tail = sv_cq_idx(&cq->tail);

	cq->cur = cq->ring[tail & (cq->size - 1)];
	sv_cq_set_idx(&cq->tail, tail + 1);
	cur_to_ex(cq);
}

/*
 * Moves the work of @cq's QPs. A transmit it leaves waiting for room is the progress
 * thread's to retry once the application stops polling (asleep on its channel, say): a
 * thread about to sleep untimed is told, as after a post (sv_engine_blocked).
 */
static void move_qps(struct sv_cq *cq)
{
	if (sv_cq_progress(cq))
		sv_engine_blocked();
}

/* The CQ lock is held from a successful start_poll to end_poll, as providers do. */
static int cqx_start_poll(struct ibv_cq_ex *ibcq, struct ibv_poll_cq_attr *attr)
{
	struct sv_cq *cq = to_svcq_ex(ibcq);

	if (attr && attr->comp_mask)
		return EINVAL;
	if (sv_cq_empty(cq))
		move_qps(cq);
	sv_engine_note_poll();
	sv_spin_lock(&cq->lock);
	if (sv_cq_empty(cq)) {
		sv_spin_unlock(&cq->lock);
		return ENOENT;
	}
	take_cur(cq);
	return 0;
}

static int cqx_next_poll(struct ibv_cq_ex *ibcq)
{
	struct sv_cq *cq = to_svcq_ex(ibcq);

	if (sv_cq_empty(cq))
		return ENOENT;
	take_cur(cq);
	return 0;
}

static void cqx_end_poll(struct ibv_cq_ex *ibcq)
{
	sv_spin_unlock(&to_svcq_ex(ibcq)->lock);
}

static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.opcode; }
static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.vendor_err; }
static uint32_t cqx_read_byte_len(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.byte_len; }
static __be32 cqx_read_imm_data(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.imm_data; }
static uint32_t cqx_read_qp_num(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.qp_num; }
static uint32_t cqx_read_src_qp(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.src_qp; }
static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.wc_flags; }
static uint32_t cqx_read_slid(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.slid; }
static uint8_t cqx_read_sl(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.sl; }
static uint8_t cqx_read_dlid_path_bits(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.wc.dlid_path_bits; }
static uint64_t cqx_read_completion_ts(struct ibv_cq_ex *c) { return to_svcq_ex(c)->cur.ts; }
static uint16_t cqx_read_cvlan(struct ibv_cq_ex *c) { (void)c; return 0; }
static uint32_t cqx_read_flow_tag(struct ibv_cq_ex *c) { (void)c; return 0; }
static void cqx_read_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *tm)
{
	(void)c;
	memset(tm, 0, sizeof(*tm));
}

/* The timestamp is CLOCK_MONOTONIC; the wall clock reading shifts it to CLOCK_REALTIME. */
static uint64_t cqx_read_completion_wallclock_ns(struct ibv_cq_ex *c)
{
	struct timespec mono, real;
	int64_t offset;

	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_REALTIME, &real);
	offset = (real.tv_sec - mono.tv_sec) * 1000000000ll + (real.tv_nsec - mono.tv_nsec);
	return to_svcq_ex(c)->cur.ts + (uint64_t)offset;
}

static void cq_ex_set_ops(struct ibv_cq_ex *cq)
{
	cq->start_poll = cqx_start_poll;
	cq->next_poll = cqx_next_poll;
	cq->end_poll = cqx_end_poll;
	cq->read_opcode = cqx_read_opcode;
	cq->read_vendor_err = cqx_read_vendor_err;
	cq->read_byte_len = cqx_read_byte_len;
	cq->read_imm_data = cqx_read_imm_data;
	cq->read_qp_num = cqx_read_qp_num;
	cq->read_src_qp = cqx_read_src_qp;
	cq->read_wc_flags = cqx_read_wc_flags;
	cq->read_slid = cqx_read_slid;
	cq->read_sl = cqx_read_sl;
	cq->read_dlid_path_bits = cqx_read_dlid_path_bits;
	cq->read_completion_ts = cqx_read_completion_ts;
	cq->read_completion_wallclock_ns = cqx_read_completion_wallclock_ns;
	cq->read_cvlan = cqx_read_cvlan;
	cq->read_flow_tag = cqx_read_flow_tag;
	cq->read_tm_info = cqx_read_tm_info;
}

/* --- create / destroy ------------------------------------------------------------------ */

static struct sv_cq *create_cq(struct ibv_context *context, int cqe, void *cq_context,
			       struct ibv_comp_channel *channel, int comp_vector,
			       uint64_t wc_flags)
{
	struct sv_context *ctx;
	struct sv_cq *cq;
	int err;

	if (!context || cqe < 1 || cqe > SV_MAX_CQE || comp_vector < 0 ||
	    comp_vector >= context->num_comp_vectors ||
	    (channel && channel->context != context))
		return sv_fail_null(EINVAL);
	ctx = to_svctx(context);
	if (atomic_fetch_add(&ctx->n_cq, 1) >= SV_MAX_CQ) {
		atomic_fetch_sub(&ctx->n_cq, 1);
		return sv_fail_null(ENOMEM);
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		err = ENOMEM;
		goto err_count;
	}
	err = -sv_cq_init(cq, (uint32_t)cqe);
	if (err)
		goto err_free;
	cq->wc_flags = wc_flags;
	cq->ibv.context = context;
	cq->ibv.channel = channel;
	cq->ibv.cq_context = cq_context;
	cq->ibv.cqe = cqe;
	pthread_mutex_init(&cq->ibv.mutex, NULL);
	pthread_cond_init(&cq->ibv.cond, NULL);
	sv_spin_init(&cq->qps_lock);
	cq_ex_set_ops(&cq->ibv);
	if (channel) {
		struct sv_comp_channel *chan = to_svchan(channel);

		cq->chan = chan;
		pthread_mutex_lock(&chan->lock);
		channel->refcnt++;
		if (chan->n_cqs >= 0 && chan->n_cqs < SV_CHAN_CQS)
			chan->cqs[chan->n_cqs++] = cq;
		else
			chan->n_cqs = -1; /* too many to watch: the waiter sleeps on the fd alone */
		pthread_mutex_unlock(&chan->lock);
	}
	return cq;

err_free:
	free(cq);
err_count:
	atomic_fetch_sub(&ctx->n_cq, 1);
	return sv_fail_null(err);
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct sv_cq *cq = create_cq(context, cqe, cq_context, channel, comp_vector, 0);

	return cq ? ibv_cq_ex_to_cq(&cq->ibv) : NULL;
}

struct ibv_cq_ex *sv_verbs_create_cq_ex(struct ibv_context *context,
					struct ibv_cq_init_attr_ex *attr)
{
	struct sv_cq *cq;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return sv_fail_null(EINVAL);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)SV_CQ_CREATE_FLAGS))
		return sv_fail_null(EOPNOTSUPP);
	if (attr->wc_flags & ~(uint64_t)SV_CQ_WC_FLAGS)
		return sv_fail_null(EOPNOTSUPP);
	if (attr->cqe > SV_MAX_CQE)
		return sv_fail_null(EINVAL);
	/* IBV_CQ_INIT_ATTR_MASK_PD names a parent domain (of this context), nothing else. */
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
	    (!attr->parent_domain || attr->parent_domain->context != context ||
	     !to_svpd(attr->parent_domain)->parent))
		return sv_fail_null(EINVAL);
	cq = create_cq(context, (int)attr->cqe, attr->cq_context, attr->channel,
		       (int)attr->comp_vector, attr->wc_flags);
	return cq ? &cq->ibv : NULL;
}

int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct sv_cq *cq;

	if (!ibcq)
		return EINVAL;
	cq = to_svcq(ibcq);
	if (atomic_load(&cq->usecnt))
		return EBUSY;
	if (cq->chan)
		sv_chan_forget(cq->chan, cq);
	sv_async_forget(to_svctx(ibcq->context), ibcq);
	sv_wait_events_acked(&ibcq->mutex, &ibcq->cond, &ibcq->comp_events_completed,
			     &cq->comp_events_reported);
	sv_wait_events_acked(&ibcq->mutex, &ibcq->cond, &ibcq->async_events_completed,
			     &cq->async_events_reported);
	if (cq->chan) {
		struct sv_comp_channel *chan = cq->chan;

		pthread_mutex_lock(&chan->lock);
		chan->ibv.refcnt--;
		for (int i = 0; i < chan->n_cqs; i++)
			if (chan->cqs[i] == cq)
				chan->cqs[i] = chan->cqs[--chan->n_cqs];
		pthread_mutex_unlock(&chan->lock);
	}
	atomic_fetch_sub(&to_svctx(ibcq->context)->n_cq, 1);
	sv_cq_fini(cq);
	free(cq->qps);
	pthread_mutex_destroy(&ibcq->mutex);
	pthread_cond_destroy(&ibcq->cond);
	free(cq);
	return 0;
}

int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	int err;

	if (!ibcq || cqe < 1 || cqe > SV_MAX_CQE)
		return EINVAL;
	err = sv_cq_resize(to_svcq(ibcq), (uint32_t)cqe);
	if (err)
		return -err;
	ibcq->cqe = cqe;
	return 0;
}

/* --- poll and notify --------------------------------------------------------------------- */

int sv_verbs_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sv_cq *cq = to_svcq(ibcq);

	if (n <= 0)
		return n < 0 ? -EINVAL : 0;
	int got;

	/* Move the work of the CQ's QPs first, unless completions wait to be taken (the
	 * next poll moves it; a system call the wire would make, a socket's read, is not
	 * spent where the caller has its answer already): no thread hand-off on the fast
	 * path. */
	if (sv_cq_empty(cq))
		move_qps(cq);
	got = sv_cq_poll(cq, n, wc);
	sv_engine_note_poll();
	return got;
}

int sv_verbs_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	sv_cq_arm(to_svcq(ibcq), solicited_only);
	return 0;
}

/*
 * Before ibv_get_cq_event sleeps on the channel: where the QPs of its CQs have
 * descriptors of their own (the iWARP wire's sockets), this thread waits on those too
 * and moves the QPs itself when data comes, so that a message costs one wake-up (this
 * thread's), not the progress thread's and then this one's. Returns once the channel
 * has an event, or after one such move (the caller then reads the channel, asleep as
 * before if the data brought no event: the progress thread took it, or it was not for
 * a completion of this channel). False if there was nothing to wait on but the channel.
 */
enum { CHAN_WAIT_FDS = 16 };
static bool chan_wait(struct sv_comp_channel *chan)
{
	struct sv_cq *cqs[SV_CHAN_CQS];
	struct pollfd pfd[1 + CHAN_WAIT_FDS];
	int fds[CHAN_WAIT_FDS], n_cqs, n = 0;

	pthread_mutex_lock(&chan->lock);
	n_cqs = chan->n_cqs > 0 ? chan->n_cqs : 0;
	for (int i = 0; i < n_cqs; i++) {
		cqs[i] = chan->cqs[i];
		atomic_fetch_add(&cqs[i]->usecnt, 1); /* not destroyed meanwhile (EBUSY) */
	}
	pthread_mutex_unlock(&chan->lock);
	for (int i = 0; i < n_cqs; i++)
		sv_cq_wait_fds(cqs[i], fds, &n, CHAN_WAIT_FDS);
	if (n) {
		pfd[0] = (struct pollfd){ .fd = chan->ibv.fd, .events = POLLIN };
		for (int i = 0; i < n; i++)
			pfd[1 + i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		if (poll(pfd, (nfds_t)(1 + n), -1) > 0 && !(pfd[0].revents & POLLIN))
			for (int i = 0; i < n_cqs; i++)
				move_qps(cqs[i]);
	}
	for (int i = 0; i < n_cqs; i++)
		atomic_fetch_sub(&cqs[i]->usecnt, 1);
	return n > 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct sv_cq *svcq;
	uint64_t count;

	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	/* A non-blocking channel (O_NONBLOCK, as event loops set it) is read as it is. */
	if (!(fcntl(channel->fd, F_GETFL) & O_NONBLOCK))
		(void)chan_wait(to_svchan(channel));
	do {
		if (read(channel->fd, &count, sizeof(count)) != sizeof(count))
			return -1;
		/* A count left by a destroyed CQ has no event behind it: read on. */
		svcq = sv_chan_take(to_svchan(channel));
	} while (!svcq);
	pthread_mutex_lock(&svcq->ibv.mutex);
	svcq->comp_events_reported++;
	pthread_mutex_unlock(&svcq->ibv.mutex);
	*cq = ibv_cq_ex_to_cq(&svcq->ibv);
	*cq_context = svcq->ibv.cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
