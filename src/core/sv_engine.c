#include "core/sv_engine.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/sv_obj.h"
#include "core/sv_qp_data.h"
#include "core/sv_wire.h"
#include "util/sv_log.h"
#include "util/sv_thread.h"
#include "util/sv_time.h"

static _Atomic uint32_t bad_pkeys_gone; /* counted on QPs destroyed since */

/* A descriptor the progress thread watches for a wire. */
struct watch {
	bool parked; /* out of the epoll set until armed or unparked (sv_engine_park) */
	int fd;
	uint32_t events; /* what it was added for (sv_engine_unpark adds it back so) */
	sv_watch_fn fn;
	void *arg;
	uint64_t id;
	struct watch *next;
};

static struct {
	pthread_mutex_t lock; /* guards everything up to qps_lock */
	pid_t pid;            /* the process this state belongs to (fork) */
	int epfd, wake_fd;
	bool started;
	uint64_t next_id;
	struct watch *watches;
	/* The QPs: those the passes visit, and the quiet ones (sv_engine_wake_qp), each list
	 * with room for every QP, so that a QP moves between them without allocating. The
	 * lock is taken last: whoever holds it takes no other. */
	pthread_mutex_t qps_lock;
	struct sv_qp **qps, **quiet;
	int n_qps, n_quiet, cap;
	void (*_Atomic rings)(void); /* the wire that rings (sv_engine_rings) */
} eng = { .lock = PTHREAD_MUTEX_INITIALIZER, .qps_lock = PTHREAD_MUTEX_INITIALIZER,
	  .epfd = -1, .wake_fd = -1 };

static void *progress_main(void *arg);

/* Set in the progress thread (sv_engine_on_thread). Initial-exec: read on the poll path,
 * where the general model's __tls_get_addr call cost more than the read (one byte of the
 * static TLS block glibc keeps for libraries loaded later, as UCX loads this one). */
static _Thread_local bool in_progress_thread __attribute__((tls_model("initial-exec")));

void sv_engine_lock(void)
{
	pthread_mutex_lock(&eng.lock);
}

void sv_engine_unlock(void)
{
	pthread_mutex_unlock(&eng.lock);
}

bool sv_engine_on_thread(void)
{
	return in_progress_thread;
}

static _Atomic bool app_busy; /* progress_main's judgement, for sv_engine_app_busy */
static _Atomic bool may_sleep; /* progress_main is about to sleep, or sleeps */
static _Atomic bool kick_pending; /* a kick is on the eventfd, not read yet */
static bool pass_blocked;      /* the last pass met a QP whose transmit waits for room */

void sv_engine_blocked(void)
{
	/* tx_blocked was stored before (seq_cst), may_sleep is stored before the arming
	 * pass reads it (sv_qp_needs_timer): the thread sleeps timed, or is woken. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&may_sleep) && !in_progress_thread)
		sv_engine_kick();
}

bool sv_engine_app_busy(void)
{
	return atomic_load_explicit(&app_busy, memory_order_relaxed);
}

int sv_engine_wake_fd(void)
{
	return eng.wake_fd;
}

static int add_watch(int fd, uint32_t events, sv_watch_fn fn, void *arg, uint64_t *id)
{
	struct watch *w = calloc(1, sizeof(*w));
	struct epoll_event ev = { .events = events };

	if (!w)
		return -ENOMEM;
	ev.data.ptr = w;
	if (epoll_ctl(eng.epfd, EPOLL_CTL_ADD, fd, &ev)) {
		int err = -errno;

		free(w);
		return err;
	}
	w->fd = fd;
	w->events = events;
	w->fn = fn;
	w->arg = arg;
	w->id = ++eng.next_id;
	w->next = eng.watches;
	eng.watches = w;
	if (id)
		*id = w->id;
	return 0;
}

static int engine_start(void);

int sv_engine_watch_locked(int fd, sv_watch_fn fn, void *arg, uint64_t *id)
{
	int err = engine_start();

	return err ? err : add_watch(fd, EPOLLIN | EPOLLRDHUP, fn, arg, id);
}

int sv_engine_watch_oneshot_locked(int fd, sv_watch_fn fn, void *arg, uint64_t *id)
{
	int err = engine_start();

	return err ? err : add_watch(fd, EPOLLONESHOT, fn, arg, id);
}

int sv_engine_watch_edge_locked(int fd, sv_watch_fn fn, void *arg, uint64_t *id)
{
	int err = engine_start();

	return err ? err : add_watch(fd, EPOLLIN | EPOLLET, fn, arg, id);
}

void sv_engine_park(uint64_t id)
{
	pthread_mutex_lock(&eng.lock);
	for (struct watch *w = eng.watches; w; w = w->next) {
		if (w->id == id) {
			if (!w->parked && !epoll_ctl(eng.epfd, EPOLL_CTL_DEL, w->fd, NULL))
				w->parked = true;
			break;
		}
	}
	pthread_mutex_unlock(&eng.lock);
}

void sv_engine_unpark(uint64_t id)
{
	pthread_mutex_lock(&eng.lock);
	for (struct watch *w = eng.watches; w; w = w->next) {
		if (w->id == id) {
			struct epoll_event ev = { .events = w->events, .data.ptr = w };

			if (w->parked && !epoll_ctl(eng.epfd, EPOLL_CTL_ADD, w->fd, &ev))
				w->parked = false;
			break;
		}
	}
	pthread_mutex_unlock(&eng.lock);
}

int sv_engine_rearm(uint64_t id, uint32_t events)
{
	int err = -ENOENT;

	pthread_mutex_lock(&eng.lock);
	for (struct watch *w = eng.watches; w; w = w->next) {
		if (w->id == id) {
			struct epoll_event ev = { .events = events | EPOLLONESHOT, .data.ptr = w };

			err = epoll_ctl(eng.epfd, w->parked ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, w->fd,
					&ev) ? -errno : 0;
			if (!err)
				w->parked = false;
			break;
		}
	}
	pthread_mutex_unlock(&eng.lock);
	return err;
}

void sv_engine_unwatch_locked(uint64_t id)
{
	for (struct watch **pp = &eng.watches; *pp; pp = &(*pp)->next) {
		struct watch *w = *pp;

		if (w->id == id) {
			*pp = w->next;
			if (!w->parked)
				epoll_ctl(eng.epfd, EPOLL_CTL_DEL, w->fd, NULL);
			free(w);
			return;
		}
	}
}

/*
 * fork() while another thread holds the engine's lock, or a lock a wire takes under it,
 * would leave the child a lock nobody releases: take them around fork, the engine's
 * first, and give the child fresh ones (it starts its own engine on first use: eng.pid
 * differs).
 */
enum { MAX_FORK_HOOKS = 8 };
static struct sv_fork_hooks fork_hooks[MAX_FORK_HOOKS];
static _Atomic int n_fork_hooks;

void sv_engine_fork_hooks(const struct sv_fork_hooks *h)
{
	static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
	int n;

	pthread_mutex_lock(&hooks_lock);
	n = atomic_load(&n_fork_hooks);
	for (int i = 0; i < n; i++)
		if (fork_hooks[i].prepare == h->prepare) {
			pthread_mutex_unlock(&hooks_lock);
			return; /* registered already */
		}
	if (n < MAX_FORK_HOOKS) {
		fork_hooks[n] = *h;
		atomic_store(&n_fork_hooks, n + 1);
	}
	pthread_mutex_unlock(&hooks_lock);
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&eng.lock);
	for (int i = 0; i < atomic_load(&n_fork_hooks); i++)
		fork_hooks[i].prepare();
	pthread_mutex_lock(&eng.qps_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&eng.qps_lock);
	for (int i = atomic_load(&n_fork_hooks) - 1; i >= 0; i--)
		fork_hooks[i].parent();
	pthread_mutex_unlock(&eng.lock);
}

static void atfork_child(void)
{
	pthread_mutex_init(&eng.qps_lock, NULL);
	for (int i = atomic_load(&n_fork_hooks) - 1; i >= 0; i--)
		fork_hooks[i].child();
	sv_mr_place_after_fork();
	pthread_mutex_init(&eng.lock, NULL);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static void wake_drain(void *arg, uint32_t events)
{
	uint64_t v;

	(void)arg;
	(void)events;
	(void)!read(eng.wake_fd, &v, sizeof(v));
	/* After the read (cleared first, a kick between the two would leave the flag set
	 * and the eventfd empty: every later kick skipped), before the pass that follows:
	 * what a kicker stored before it found the flag set is seen there. */
	atomic_store(&kick_pending, false);
}

/* Starts the engine of this process. Caller holds eng.lock. */
static int engine_start(void)
{
	pthread_t thread;
	int err;

	pthread_once(&atfork_once, atfork_register);
	if (eng.started && eng.pid == getpid())
		return 0;
	/* A forked child inherits a copy without the thread: start afresh (the parent's
	 * descriptors it inherited stay the parent's business). */
	eng.started = false;
	eng.watches = NULL;
	eng.n_qps = eng.n_quiet = 0;
	eng.epfd = epoll_create1(EPOLL_CLOEXEC);
	eng.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	atomic_store(&kick_pending, false); /* (a forked child's: its parent's flag) */
	err = eng.epfd < 0 || eng.wake_fd < 0 ? -errno : 0;
	if (!err)
		err = add_watch(eng.wake_fd, EPOLLIN, wake_drain, NULL, NULL);
	if (!err && sv_thread_start(&thread, progress_main, NULL))
		err = -EAGAIN;
	if (err) {
		/* Nothing of a half-started engine stays open. */
		if (eng.watches) {
			free(eng.watches);
			eng.watches = NULL;
		}
		if (eng.epfd >= 0)
			close(eng.epfd);
		if (eng.wake_fd >= 0)
			close(eng.wake_fd);
		eng.epfd = eng.wake_fd = -1;
		return err;
	}
	pthread_detach(thread);
	eng.pid = getpid();
	eng.started = true;
	return 0;
}

/* QP lists: a QP knows its place in its list (qps_lock held). */
static void list_add(struct sv_qp **list, int *n, struct sv_qp *qp)
{
	qp->eng_slot = *n;
	list[(*n)++] = qp;
}

static void list_del(struct sv_qp **list, int *n, struct sv_qp *qp)
{
	struct sv_qp *last;

	/* Not there: a QP a forked child inherited (its lists started empty). */
	if (qp->eng_slot < 0 || qp->eng_slot >= *n || list[qp->eng_slot] != qp)
		return;
	last = list[--*n];
	list[qp->eng_slot] = last;
	last->eng_slot = qp->eng_slot;
}

int sv_engine_add_qp(struct sv_qp *qp)
{
	int err;

	pthread_mutex_lock(&eng.lock);
	err = engine_start();
	pthread_mutex_unlock(&eng.lock);
	if (err)
		return err;
	pthread_mutex_lock(&eng.qps_lock);
	if (eng.n_qps + eng.n_quiet == eng.cap) {
		int cap = eng.cap ? 2 * eng.cap : 16;
		struct sv_qp **q = realloc(eng.qps, (size_t)cap * sizeof(*q));

		if (q)
			eng.qps = q;
		q = q ? realloc(eng.quiet, (size_t)cap * sizeof(*q)) : NULL;
		if (q) {
			eng.quiet = q;
			eng.cap = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err) {
		atomic_store(&qp->eng_quiet, false);
		list_add(eng.qps, &eng.n_qps, qp);
	}
	pthread_mutex_unlock(&eng.qps_lock);
	return err;
}

/* Packets peers dropped for @qp's P_Key, on both its wires. */
static uint32_t qp_bad_pkeys(struct sv_qp *qp)
{
	return qp->wire->bad_pkeys(qp) + (qp->far ? qp->far->bad_pkeys(qp) : 0);
}

uint32_t sv_engine_bad_pkeys(void)
{
	uint32_t n = atomic_load(&bad_pkeys_gone);

	pthread_mutex_lock(&eng.qps_lock);
	for (int i = 0; i < eng.n_qps; i++)
		n += qp_bad_pkeys(eng.qps[i]);
	for (int i = 0; i < eng.n_quiet; i++)
		n += qp_bad_pkeys(eng.quiet[i]);
	pthread_mutex_unlock(&eng.qps_lock);
	return n;
}

void sv_engine_remove_qp(struct sv_qp *qp)
{
	pthread_mutex_lock(&eng.qps_lock);
	atomic_fetch_add(&bad_pkeys_gone, qp_bad_pkeys(qp));
	if (atomic_load(&qp->eng_quiet))
		list_del(eng.quiet, &eng.n_quiet, qp);
	else
		list_del(eng.qps, &eng.n_qps, qp);
	atomic_store(&qp->eng_quiet, false); /* a late wake finds nothing to do */
	qp->eng_slot = -1;
	pthread_mutex_unlock(&eng.qps_lock);
	/* The progress thread may still hold a reference taken before we unlinked it. */
	while (atomic_load(&qp->eng_ref))
		sched_yield();
}

void sv_engine_wake_qp(struct sv_qp *qp)
{
	bool woken = false;

	/* Relaxed: a wake that misses a QP going quiet at this moment is made good by the
	 * thread's audit (AUDIT_NS); everything that wakes a QP is rare beside the posts and
	 * polls it follows. */
	if (!atomic_load_explicit(&qp->eng_quiet, memory_order_relaxed))
		return;
	pthread_mutex_lock(&eng.qps_lock);
	if (atomic_load_explicit(&qp->eng_quiet, memory_order_relaxed) && qp->eng_slot >= 0) {
		list_del(eng.quiet, &eng.n_quiet, qp);
		list_add(eng.qps, &eng.n_qps, qp);
		atomic_store_explicit(&qp->eng_quiet, false, memory_order_relaxed);
		woken = true;
	}
	pthread_mutex_unlock(&eng.qps_lock);
	/* The thread may be asleep, untimed: it must look at the QP now. */
	if (woken && !in_progress_thread)
		sv_engine_kick();
}

void sv_engine_rings(void (*scan)(void))
{
	atomic_store(&eng.rings, scan);
}

/* Every quiet QP back in the passes (the audit). */
static void wake_all(void)
{
	pthread_mutex_lock(&eng.qps_lock);
	while (eng.n_quiet) {
		struct sv_qp *qp = eng.quiet[eng.n_quiet - 1];

		list_del(eng.quiet, &eng.n_quiet, qp);
		list_add(eng.qps, &eng.n_qps, qp);
		atomic_store_explicit(&qp->eng_quiet, false, memory_order_relaxed);
	}
	pthread_mutex_unlock(&eng.qps_lock);
}

/* Before the thread sleeps: the QPs the arming pass found idle go quiet. */
static void quiet_idle(void)
{
	pthread_mutex_lock(&eng.qps_lock);
	for (int i = 0; i < eng.n_qps;) {
		struct sv_qp *qp = eng.qps[i];

		/* Looked at again: the application may have moved it since the pass. */
		if (qp->eng_may_quiet && !sv_qp_needs_timer(qp) &&
		    !atomic_load_explicit(&qp->eng_ref, memory_order_relaxed)) {
			qp->eng_may_quiet = false;
			atomic_store_explicit(&qp->eng_quiet, true, memory_order_relaxed);
			list_del(eng.qps, &eng.n_qps, qp);
			list_add(eng.quiet, &eng.n_quiet, qp);
			continue; /* the last one took its place */
		}
		i++;
	}
	pthread_mutex_unlock(&eng.qps_lock);
}

void sv_engine_kick(void)
{
	uint64_t one = 1;

	/* One write until the thread reads it: the count stays on the eventfd, so a thread
	 * awake meanwhile finds it when it next waits, and looks. */
	if (eng.started && !atomic_exchange(&kick_pending, true))
		(void)!write(eng.wake_fd, &one, sizeof(one));
}

void sv_engine_pin_locked(struct sv_qp *qp)
{
	atomic_fetch_add(&qp->eng_ref, 1);
}

void sv_engine_unpin_qp(struct sv_qp *qp)
{
	atomic_fetch_sub_explicit(&qp->eng_ref, 1, memory_order_release);
}

/* --- the progress thread ------------------------------------------------------------------- */

enum { MAX_PINNED = 256 };

/* Pins up to MAX_PINNED QPs from @start; returns how many. */
static int pin_some(struct sv_qp **out, int start, int *total)
{
	int n = 0;

	pthread_mutex_lock(&eng.qps_lock);
	*total = eng.n_qps;
	for (int i = start; i < eng.n_qps && n < MAX_PINNED; i++) {
		out[n] = eng.qps[i];
		atomic_fetch_add(&out[n]->eng_ref, 1);
		n++;
	}
	pthread_mutex_unlock(&eng.qps_lock);
	return n;
}

enum pass { PASS_WORK, PASS_WORK_UNPOLLED, PASS_ARM, PASS_ARM_UNPOLLED, PASS_DISARM };

/*
 * Whether a poller moved @qp since the look before @look, and can be left to do so: not
 * if the QP has lately placed one-sided operations of its peer that change memory here
 * (a WRITE through the wire, an atomic), which the application does not wait for — it
 * may be spinning on the very memory they write. A relaxed read is enough: a stale
 * one arms a QP needlessly, or leaves it for the next look, 1 ms on.
 */
static bool polled_since(struct sv_qp *qp, uint32_t look)
{
	return look - atomic_load_explicit(&qp->polled_look, memory_order_relaxed) <= 1 &&
	       look - atomic_load_explicit(&qp->placed_look, memory_order_relaxed) > 2;
}

/*
 * Whether @qp, just armed, may leave the passes while the thread sleeps: its wire rings
 * for it (and it has no second wire that does not), it needs no timer, and arming did
 * arm it (a QP holding a message for want of a receive reports armed without it).
 */
static bool may_go_quiet(struct sv_qp *qp)
{
	return (qp->wire->caps & SV_WIRE_RINGS) && !qp->far && !sv_qp_needs_timer(qp) &&
	       !sv_qp_recv_awaited(qp) &&
	       atomic_load_explicit(&eng.rings, memory_order_relaxed) != NULL;
}

static int wire_assist(struct sv_qp *qp)
{
	return qp->wire->assist ? qp->wire->assist(qp) : 0;
}

/* One pass over every QP. WORK: how much was done; ARM: 0 if a QP had work; the
 * _UNPOLLED variants: the same for the QPs no poller moved since the previous look. */
static int pass_all(enum pass what, bool *timed)
{
	uint32_t look = atomic_load_explicit(&sv_engine_look, memory_order_relaxed);
	struct sv_qp *qps[MAX_PINNED];
	int total, start = 0, result = what == PASS_ARM || what == PASS_ARM_UNPOLLED ? 1 : 0;

	*timed = false;
	pass_blocked = false;
	do {
		int n = pin_some(qps, start, &total);

		for (int i = 0; i < n; i++) {
			struct sv_qp *qp = qps[i];
			bool armed;

			switch (what) {
			case PASS_WORK:
				result += sv_qp_progress(qp) + wire_assist(qp);
				break;
			case PASS_WORK_UNPOLLED:
				/* No copy assist: the application spins on this CPU. */
				if (!polled_since(qp, look))
					result += sv_qp_progress(qp);
				break;
			case PASS_ARM:
				armed = sv_qp_arm(qp, true);
				if (!armed)
					result = 0;
				qp->eng_may_quiet = armed && may_go_quiet(qp);
				break;
			case PASS_ARM_UNPOLLED:
				qp->eng_may_quiet = false;
				if (!polled_since(qp, look)) {
					armed = sv_qp_arm(qp, false);
					if (!armed)
						result = 0;
					qp->eng_may_quiet = armed && may_go_quiet(qp);
				} else {
					sv_qp_park(qp);
				}
				break;
			case PASS_DISARM:
				qp->wire->disarm(qp);
				if (qp->far)
					qp->far->disarm(qp);
				break;
			}
			if (sv_qp_needs_timer(qp))
				*timed = true;
			if (atomic_load_explicit(&qp->tx_blocked, memory_order_relaxed))
				pass_blocked = true;
			atomic_fetch_sub(&qp->eng_ref, 1);
		}
		start += n;
	} while (start < total);
	return result;
}

/*
 * The thread adapts to the application. Armed, it sleeps until a producer signals (a
 * system call on the producer's side, then a wake-up here): right for an application
 * that waits on a completion channel or does not call in at all. An application that
 * busy-polls its CQs moves the work itself; there the thread stops arming the QPs those
 * polls move (so their producers make no system call), arms only the others (a QP on a
 * CQ nobody polls, one that places its peer's one-sided operations), and looks every
 * millisecond. Busy polling shows as many polls per wake-up (sv_engine_polls); an
 * application that waits on a channel polls a few times per event. Only when not busy
 * does the thread help peers copy (copy assist): busy, the CPU is the application's.
 */
enum { BUSY_POLLS = 64 }; /* polls per BUSY_WINDOW_NS that mean "the application spins" */
#define BUSY_WINDOW_NS 1000000ull
#define SOCKETS_NS 100000ull /* while busy, look at the watches this often */
#define SPIN_NS 50000ull     /* how long after its last work the thread keeps looking */
#define BLOCKED_NS 5000000ull /* ... while a transmit waits for a peer to make room */

void sv_engine_serve(int timeout)
{
	struct epoll_event evs[16];
	int n = epoll_wait(eng.epfd, evs, 16, timeout);

	pthread_mutex_lock(&eng.lock);
	for (int i = 0; i < n; i++) {
		struct watch *w = evs[i].data.ptr;
		bool live = false;

		/* An earlier event of this batch may have dropped it. */
		for (struct watch *x = eng.watches; x && !live; x = x->next)
			live = x == w;
		if (live)
			w->fn(w->arg, evs[i].events);
	}
	pthread_mutex_unlock(&eng.lock);
}

/* Quiet QPs: how many there are (0 once every QP is back in the passes). */
static int quiet_count(void)
{
	int n;

	pthread_mutex_lock(&eng.qps_lock);
	n = eng.n_quiet;
	pthread_mutex_unlock(&eng.qps_lock);
	return n;
}

/*
 * The QPs their wire rang for since the last look come back into the passes; and every
 * AUDIT_NS all quiet QPs do, once: a wake that raced with a QP going quiet (the checks
 * are relaxed, sv_engine_wake_qp) is made good within that time, never lost.
 */
#define AUDIT_NS 100000000ull
static void quiet_look(uint64_t *last_audit)
{
	uint64_t now;

	if (!quiet_count())
		return;
	atomic_load(&eng.rings)(); /* (set: a QP went quiet, may_go_quiet) */
	now = sv_now_ns();
	if (now - *last_audit >= AUDIT_NS) {
		*last_audit = now;
		wake_all();
	}
}

static void *progress_main(void *arg)
{
	uint64_t seen = 0, seen_at = 0, last_work = 0, last_sockets = 0, last_audit = 0;
	bool busy = false;

	(void)arg;
	in_progress_thread = true;
	for (;;) {
		bool timed;
		uint64_t polls, now;
		int timeout;

		quiet_look(&last_audit);
		/* While the application busy-polls, its polls move the QPs they reach: this
		 * thread leaves those alone. Chasing the same stream, it would take the CPU
		 * the application needs (one CPU for both: a quarter of the message rate) and
		 * hold the locks its posts wait for. */
		if (pass_all(busy ? PASS_WORK_UNPOLLED : PASS_WORK, &timed)) {
			last_work = sv_now_ns();
			/* Peers attaching and hanging up are answered promptly. */
			if (last_work - last_sockets > SOCKETS_NS) {
				last_sockets = last_work;
				sv_engine_serve(0);
			}
			continue;
		}
		/* Busy polling is judged over a millisecond at least, not between two looks. */
		now = sv_now_ns();
		if (now - seen_at >= BUSY_WINDOW_NS) {
			polls = atomic_load_explicit(&sv_engine_polls, memory_order_relaxed);
			busy = polls - seen > BUSY_POLLS;
			atomic_store_explicit(&app_busy, busy, memory_order_relaxed);
			seen = polls;
			seen_at = now;
		}
		/* Traffic the application does not poll for (one-sided, or it waits on a
		 * channel) comes in bursts: look again for a moment before sleeping, yielding the
		 * core to anyone who wants it. */
		if (!busy && (now - last_work < SPIN_NS ||
			      (pass_blocked && now - last_work < BLOCKED_NS))) {
			/* A transmit that waits for room (a peer asleep on its channel while its
			 * progress thread drains) goes on as soon as there is: no peer wakes us
			 * for it. Past BLOCKED_NS without progress, the timer looks. */
			sched_yield();
			continue;
		}
		/* Busy: the QPs the application's polls move are left to it; those it does not
		 * poll (another CQ, one-sided placement) still wake this thread. */
		atomic_fetch_add_explicit(&sv_engine_look, 1, memory_order_relaxed);
		atomic_store(&may_sleep, true);
		if (!pass_all(busy ? PASS_ARM_UNPOLLED : PASS_ARM, &timed)) {
			atomic_store(&may_sleep, false);
			pass_all(PASS_DISARM, &timed);
			/* A QP that will not arm must not keep the watches from being served
			 * (connections handed to us, peers attaching). */
			if (now - last_sockets > SOCKETS_NS) {
				last_sockets = now;
				sv_engine_serve(0);
			}
			continue;
		}
		/* Asleep, the QPs that armed idle cost nothing: they leave the passes until
		 * their wire rings (or the audit, AUDIT_NS on). */
		quiet_idle();
		timeout = busy || timed ? 1 : quiet_count() ? (int)(AUDIT_NS / 1000000) : -1;
		if (busy || timed)
			atomic_store(&may_sleep, false); /* a blocked transmit waits 1 ms at most */
		sv_engine_serve(timeout);
		atomic_store(&may_sleep, false);
		pass_all(PASS_DISARM, &timed);
		last_sockets = sv_now_ns();
	}
	return NULL;
}
