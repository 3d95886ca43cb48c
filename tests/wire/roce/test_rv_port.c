/*
 * Port 4791 shared by one user's processes (src/wire/roce/rv_port.h), on a test port of
 * its own (SV_TEST_RV_PORT, 24791 by default) so that nothing else on the host is
 * touched. Members are forked children, each with its socket and a QPN block; the test
 * sends them datagrams (a BTH naming a QPN of the block) from an ordinary UDP socket
 * through loopback and asks each what it got.
 *
 * What is asserted, each with bounded waits:
 * - alone, a process is index 0, gets the datagrams of its block (OURS) and sees those
 *   of a block nobody owns as strays;
 * - four processes find four distinct places, and every datagram reaches the owner of
 *   its block: none stray;
 * - one leaves (rv_port_close): the last takes its place, the program says so at once,
 *   and the others still get every datagram of theirs, with nobody probing again;
 * - one is killed: the first to look (rv_port_resteer, as after a stray) prunes it and
 *   bumps the membership, the others are told (their inotify on the registry is
 *   readable), see it (rv_port_stale) and find their places again, and then every
 *   datagram reaches its owner;
 * - two are killed at once (the order in which the kernel moved the last sockets into
 *   their places is not known): a stray makes its receiver look and bump the
 *   membership, and once every survivor has looked again, every datagram reaches its
 *   owner;
 * - CM listeners: a process's service is found (its block) by another, which cannot
 *   listen on it while it lives, can once it stopped or died; at most RV_PORT_SERVICES;
 * - a registry file that is not the user's alone is refused (-EACCES);
 * - as root: another user's process cannot join (-EADDRINUSE) and the group goes on.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wire/roce/rv_port.h"

enum { MEMBERS = 4, PER_BLOCK = 50, WAIT_MS = 5000, BLOCK0 = 3000 };

static uint16_t test_port(void)
{
	const char *e = getenv("SV_TEST_RV_PORT");

	return (uint16_t)(e ? atoi(e) : 24791);
}

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* --- a member ----------------------------------------------------------------------------- */

/* What the parent asks, and the member's answer. */
struct cmd {
	char op;        /* 'c' counts (when @want datagrams came, or after WAIT_MS), 'r'
			 * resteer (@want: after a stray), 's' stale?, 'd' forget changes so
			 * far, 'w' told of a change of the registry since?, 'q' leave; CM
			 * services: 'L' listen on @want, 'U' stop, 'F' find its listener */
	int want;
};
struct ans {
	int rc, index, ours, strays;
	uint32_t block; /* 'F': the listener's block */
	int gsi, fwds;  /* datagrams to QP1; forwards, each checked (fwd_ok) */
};

/* What 'f' forwards, and whether a forward carries it whole. */
static const uint8_t fwd_src[16] = { [10] = 0xff, [11] = 0xff, 10, 77, 0, 2 };
static const uint8_t fwd_dgram[24] = { 0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 7, 0x80, 1 };

static bool fwd_ok(const uint8_t *m, size_t n)
{
	struct rv_port_fwd f;

	return !rv_port_forwarded(m, n, &f) && !memcmp(f.src, fwd_src, 16) && f.sport == 49152 &&
	       f.len == sizeof(fwd_dgram) && !memcmp(f.dgram, fwd_dgram, f.len);
}

/* Reads what came (waiting up to @ms for the first), counting it in @a; whether any. */
static bool take(struct rv_port *p, struct ans *a, int ms)
{
	struct pollfd one = { rv_port_fd(p), POLLIN, 0 };
	uint8_t m[256];
	ssize_t n;
	bool any = false;

	if (ms && poll(&one, 1, ms) <= 0)
		return false;
	while ((n = recv(rv_port_fd(p), m, sizeof(m), MSG_DONTWAIT)) >= 0) {
		enum rv_port_dgram d = rv_port_classify(p, m, (size_t)n);

		a->ours += d == RV_DGRAM_OURS;
		a->strays += d == RV_DGRAM_STRAY;
		a->gsi += d == RV_DGRAM_GSI;
		a->fwds += d == RV_DGRAM_FORWARD && fwd_ok(m, (size_t)n);
		any = true;
	}
	return any;
}

static void member(int ctl, uint32_t block, uid_t uid)
{
	struct rv_port *p;
	struct ans a = { 0 };
	struct cmd c;

	if (uid && (setgid(uid) || setuid(uid)))
		_exit(3);
	a.rc = rv_port_open(test_port(), &p);
	if (!a.rc)
		a.rc = rv_port_claim(p, block);
	a.index = a.rc ? -1 : rv_port_index(p);
	if (write(ctl, &a, sizeof(a)) != sizeof(a) || a.rc)
		_exit(a.rc ? 2 : 1);
	for (;;) {
		struct pollfd pfd[2] = { { rv_port_fd(p), POLLIN, 0 }, { ctl, POLLIN, 0 } };
		if (poll(pfd, 2, -1) < 0)
			_exit(1);
		take(p, &a, 0);
		if (!(pfd[1].revents & (POLLIN | POLLHUP)))
			continue;
		if (read(ctl, &c, sizeof(c)) != sizeof(c))
			_exit(0); /* the parent went */
		switch (c.op) {
		case 'c': {
			long long end = now_ms() + WAIT_MS;

			while (a.ours + a.strays + a.gsi + a.fwds < c.want && now_ms() < end)
				take(p, &a, 50);
			break;
		}
		case 'r': { /* want: 1 if after a stray; answered once the probe is back */
			long long end = now_ms() + WAIT_MS;

			a.rc = rv_port_resteer(p, c.want != 0);
			while (!a.rc && rv_port_probing(p) && now_ms() < end)
				take(p, &a, 50);
			if (rv_port_probing(p))
				a.rc = -ETIMEDOUT;
			break;
		}
		case 's':
			a.rc = rv_port_stale(p);
			break;
		case 'd': /* forget what it was told so far */
			rv_port_drain_watch(p);
			a.rc = 0;
			break;
		case 'w': { /* was it told (its inotify readable)? */
			struct pollfd w = { rv_port_watch_fd(p), POLLIN, 0 };

			a.rc = poll(&w, 1, WAIT_MS) == 1;
			rv_port_drain_watch(p);
			break;
		}
		case 'L':
			a.rc = rv_port_listen(p, (uint32_t)c.want);
			break;
		case 'U':
			rv_port_unlisten(p, (uint32_t)c.want);
			a.rc = 0;
			break;
		case 'F':
			a.block = 0;
			a.rc = rv_port_listener(p, (uint32_t)c.want, &a.block);
			break;
		case 'f': { /* forward to the owner of block @want, PER_BLOCK times */
			struct rv_port_fwd f = { .sport = 49152, .dgram = fwd_dgram,
						 .len = sizeof(fwd_dgram) };
			int index = rv_port_index_of(p, (uint32_t)c.want);

			memcpy(f.src, fwd_src, 16);
			a.rc = index < 0 ? index : 0;
			for (int i = 0; !a.rc && i < PER_BLOCK; i++)
				a.rc = rv_port_forward(p, index, &f);
			break;
		}
		case 'q':
			rv_port_close(p);
			_exit(0);
		}
		a.index = rv_port_index(p);
		if (write(ctl, &a, sizeof(a)) != sizeof(a))
			_exit(1);
		a.ours = a.strays = a.gsi = a.fwds = 0;
	}
}

struct kid {
	pid_t pid;
	int ctl;
	uint32_t block;
	int index;
};

/* Forks a member owning @block (as @uid if not 0); its first answer in *a. */
static void spawn(struct kid *k, uint32_t block, uid_t uid, struct ans *a)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	k->block = block;
	k->pid = fork();
	assert_true(k->pid >= 0);
	if (!k->pid) {
		close(sv[0]);
		member(sv[1], block, uid);
	}
	close(sv[1]);
	k->ctl = sv[0];
	assert_int_equal(read(k->ctl, a, sizeof(*a)), sizeof(*a));
	k->index = a->index;
}

static struct ans ask(struct kid *k, char op, int want)
{
	struct cmd c = { op, want };
	struct ans a;

	assert_int_equal(write(k->ctl, &c, sizeof(c)), sizeof(c));
	assert_int_equal(read(k->ctl, &a, sizeof(a)), sizeof(a));
	k->index = a.index;
	return a;
}

static void reap(struct kid *k)
{
	struct cmd c = { 'q', 0 };
	int st;

	if (k->pid <= 0)
		return;
	(void)!write(k->ctl, &c, sizeof(c));
	waitpid(k->pid, &st, 0);
	close(k->ctl);
	k->pid = 0;
}

/* @n datagrams through loopback to a QPN of @block: a BTH and 8 bytes, each from a
 * socket of its own (another source port: where the program does not pick, the group's
 * hash spreads them over its sockets). */
static void send_to_block(uint32_t block, int n)
{
	struct sockaddr_in d = { .sin_family = AF_INET, .sin_port = htons(test_port()),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	uint32_t qpn = block << 8 | 0x11;
	uint8_t m[20] = { 0x04, 0, 0xff, 0xff, 0, (uint8_t)(qpn >> 16), (uint8_t)(qpn >> 8),
			  (uint8_t)qpn };

	for (int i = 0; i < n; i++) {
		int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		assert_true(s >= 0);
		assert_int_equal(sendto(s, m, sizeof(m), 0, (struct sockaddr *)&d, sizeof(d)),
				 sizeof(m));
		close(s);
	}
}

/* Every live member gets exactly its PER_BLOCK, none a stray. */
static void all_delivered(struct kid *k, int n, const char *when)
{
	for (int i = 0; i < n; i++)
		if (k[i].pid > 0)
			send_to_block(k[i].block, PER_BLOCK);
	for (int i = 0; i < n; i++) {
		struct ans a;

		if (k[i].pid <= 0)
			continue;
		a = ask(&k[i], 'c', PER_BLOCK);
		if (a.ours != PER_BLOCK || a.strays)
			fail_msg("%s: member %d (index %d, block %u): %d of its %d datagrams, "
				 "%d strays", when, i, a.index, k[i].block, a.ours, PER_BLOCK,
				 a.strays);
	}
}

/* --- the cases ---------------------------------------------------------------------------- */

static void test_alone(void **state)
{
	struct kid k;
	struct ans a;

	(void)state;
	spawn(&k, BLOCK0, 0, &a);
	assert_int_equal(a.rc, 0);
	assert_int_equal(a.index, 0);
	send_to_block(BLOCK0, PER_BLOCK);
	a = ask(&k, 'c', PER_BLOCK);
	assert_int_equal(a.ours, PER_BLOCK);
	assert_int_equal(a.strays, 0);
	send_to_block(BLOCK0 + 77, 5); /* nobody's: by the hash, to the only socket */
	a = ask(&k, 'c', 5);
	assert_int_equal(a.ours, 0);
	assert_int_equal(a.strays, 5);
	reap(&k);
}

static void start_group(struct kid *k)
{
	bool seen[MEMBERS] = { false };

	for (int i = 0; i < MEMBERS; i++) {
		struct ans a;

		spawn(&k[i], BLOCK0 + (uint32_t)i, 0, &a);
		assert_int_equal(a.rc, 0);
		if (a.index < 0 || a.index >= MEMBERS || seen[a.index])
			fail_msg("member %d found index %d", i, a.index);
		seen[a.index] = true;
	}
}

static void test_group_leave(void **state)
{
	struct kid k[MEMBERS];

	(void)state;
	start_group(k);
	all_delivered(k, MEMBERS, "four members");
	/* The second leaves: the last takes its place, and the program says so already. */
	reap(&k[1]);
	all_delivered(k, MEMBERS, "after one left");
	for (int i = 0; i < MEMBERS; i++)
		reap(&k[i]);
}

static void test_group_crash(void **state)
{
	struct kid k[MEMBERS];
	struct ans a;
	int st;

	(void)state;
	start_group(k);
	for (int i = 2; i < MEMBERS; i++)
		ask(&k[i], 'd', 0);
	/* The first dies without a word: the kernel moves the last socket into its place;
	 * the registry still lists it. */
	kill(k[0].pid, SIGKILL);
	waitpid(k[0].pid, &st, 0);
	close(k[0].ctl);
	k[0].pid = 0;
	/* One member looks (a stray would make it): it prunes, and the others see it. */
	a = ask(&k[1], 'r', 1);
	assert_int_equal(a.rc, 0);
	for (int i = 2; i < MEMBERS; i++) {
		if (ask(&k[i], 'w', 0).rc != 1)
			fail_msg("member %d was not told the registry changed", i);
		a = ask(&k[i], 's', 0);
		if (a.rc != 1)
			fail_msg("member %d does not see the membership changed", i);
		assert_int_equal(ask(&k[i], 'r', 0).rc, 0);
	}
	{
		bool seen[MEMBERS] = { false };

		for (int i = 1; i < MEMBERS; i++) {
			if (k[i].index < 0 || k[i].index >= MEMBERS - 1 || seen[k[i].index])
				fail_msg("after the crash member %d is at index %d", i,
					 k[i].index);
			seen[k[i].index] = true;
		}
	}
	all_delivered(k, MEMBERS, "after one was killed");
	for (int i = 0; i < MEMBERS; i++)
		reap(&k[i]);
}

static void test_group_two_die(void **state)
{
	struct kid k[MEMBERS];
	int st;

	(void)state;
	start_group(k);
	for (int i = 0; i < 2; i++)
		kill(k[i].pid, SIGKILL);
	for (int i = 0; i < 2; i++) {
		waitpid(k[i].pid, &st, 0);
		close(k[i].ctl);
		k[i].pid = 0;
	}
	/* A stray reached the third (as it would): it looks, and everyone is to look. */
	assert_int_equal(ask(&k[2], 'r', 1).rc, 0);
	if (ask(&k[3], 's', 0).rc != 1)
		fail_msg("the fourth does not see the membership changed");
	assert_int_equal(ask(&k[3], 'r', 0).rc, 0);
	if (k[2].index == k[3].index || k[2].index < 0 || k[2].index > 1 || k[3].index < 0 ||
	    k[3].index > 1)
		fail_msg("after two died the survivors are at %d and %d", k[2].index, k[3].index);
	all_delivered(k, MEMBERS, "after two were killed at once");
	for (int i = 0; i < MEMBERS; i++)
		reap(&k[i]);
}

/* CM listeners: one process a service; another finds its block, cannot take it while it
 * lives, can once it stopped listening or died (pruned by the first that looks). */
static void test_cm_listeners(void **state)
{
	enum { SID = 0x01064e20, SID2 = 0x01111c06 };
	struct kid k[2];
	struct ans a;

	(void)state;
	spawn(&k[0], BLOCK0, 0, &a);
	spawn(&k[1], BLOCK0 + 1, 0, &a);
	assert_int_equal(ask(&k[1], 'F', SID).rc, -ENOENT);
	assert_int_equal(ask(&k[0], 'L', SID).rc, 0);
	assert_int_equal(ask(&k[0], 'L', SID).rc, 0); /* ours already */
	a = ask(&k[1], 'F', SID);
	assert_int_equal(a.rc, 0);
	assert_int_equal(a.block, BLOCK0);
	assert_int_equal(ask(&k[1], 'L', SID).rc, -EADDRINUSE);
	assert_int_equal(ask(&k[1], 'L', SID2).rc, 0);
	assert_int_equal(ask(&k[0], 'F', SID2).block, BLOCK0 + 1);
	ask(&k[0], 'U', SID);
	assert_int_equal(ask(&k[1], 'F', SID).rc, -ENOENT);
	assert_int_equal(ask(&k[1], 'L', SID).rc, 0);
	assert_int_equal(ask(&k[0], 'F', SID).block, BLOCK0 + 1);
	/* The listener dies: its services go with it. */
	kill(k[1].pid, SIGKILL);
	waitpid(k[1].pid, NULL, 0);
	close(k[1].ctl);
	k[1].pid = 0;
	assert_int_equal(ask(&k[0], 'F', SID).rc, -ENOENT);
	assert_int_equal(ask(&k[0], 'F', SID2).rc, -ENOENT);
	assert_int_equal(ask(&k[0], 'L', SID).rc, 0);
	/* RV_PORT_SERVICES at most (SID is one). */
	for (int i = 1; i < RV_PORT_SERVICES; i++)
		assert_int_equal(ask(&k[0], 'L', SID + i).rc, 0);
	assert_int_equal(ask(&k[0], 'L', SID + RV_PORT_SERVICES).rc, -ENOSPC);
	reap(&k[0]);
}

/* QP1's datagrams are nobody's stray; a forward reaches the owner of the block named,
 * whole, whichever process sends it. */
static void test_gsi_and_forwards(void **state)
{
	struct kid k[MEMBERS];
	struct sockaddr_in d = { .sin_family = AF_INET, .sin_port = htons(test_port()),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int gsi = 0, s;

	(void)state;
	start_group(k);
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(s >= 0);
	for (int i = 0; i < PER_BLOCK; i++)
		assert_int_equal(sendto(s, fwd_dgram, sizeof(fwd_dgram), 0, (struct sockaddr *)&d,
					sizeof(d)), sizeof(fwd_dgram));
	close(s);
	for (int i = 0; i < MEMBERS; i++) {
		struct ans a = ask(&k[i], 'c', 0);

		if (a.strays)
			fail_msg("member %d took %d datagrams to QP1 for strays", i, a.strays);
		gsi += a.gsi;
	}
	/* (counted as they came: ask 'c' with want 0 returns what was read so far) */
	for (int tries = 0; gsi < PER_BLOCK && tries < 50; tries++)
		for (int i = 0; i < MEMBERS; i++)
			gsi += ask(&k[i], 'c', 0).gsi;
	assert_int_equal(gsi, PER_BLOCK);
	/* Member 0 forwards to each other member's block: each gets every forward, whole. */
	for (int to = 1; to < MEMBERS; to++) {
		struct ans a = ask(&k[0], 'f', (int)k[to].block);

		assert_int_equal(a.rc, 0);
		a = ask(&k[to], 'c', PER_BLOCK);
		if (a.fwds != PER_BLOCK)
			fail_msg("member %d (index %d) got %d of %d forwards", to, a.index, a.fwds,
				 PER_BLOCK);
	}
	assert_int_equal(ask(&k[0], 'f', BLOCK0 + 99).rc, -ENOENT);
	for (int i = 0; i < MEMBERS; i++)
		reap(&k[i]);
}

static void test_registry_not_ours(void **state)
{
	struct stat ns;
	char path[128];
	struct rv_port *p;
	int fd;

	(void)state;
	assert_int_equal(stat("/proc/self/ns/net", &ns), 0);
	snprintf(path, sizeof(path), "/dev/shm/softverbs-roce-%u-%u-%lu",
		 (unsigned)(test_port() + 1), (unsigned)geteuid(), (unsigned long)ns.st_ino);
	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, 0666), 0); /* anyone may write it */
	close(fd);
	assert_int_equal(rv_port_open((uint16_t)(test_port() + 1), &p), -EACCES);
	unlink(path);
}

static void test_other_user(void **state)
{
	struct kid mine, theirs;
	struct ans a;
	int st;

	(void)state;
	if (geteuid())
		skip(); /* needs root to be another user */
	spawn(&mine, BLOCK0, 0, &a);
	assert_int_equal(a.rc, 0);
	/* nobody (65534) cannot join root's group */
	spawn(&theirs, BLOCK0 + 1, 65534, &a);
	assert_int_equal(a.rc, -EADDRINUSE);
	waitpid(theirs.pid, &st, 0);
	close(theirs.ctl);
	send_to_block(BLOCK0, PER_BLOCK);
	a = ask(&mine, 'c', PER_BLOCK);
	assert_int_equal(a.ours, PER_BLOCK);
	reap(&mine);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alone),
		cmocka_unit_test(test_group_leave),
		cmocka_unit_test(test_group_crash),
		cmocka_unit_test(test_group_two_die),
		cmocka_unit_test(test_cm_listeners),
		cmocka_unit_test(test_gsi_and_forwards),
		cmocka_unit_test(test_registry_not_ours),
		cmocka_unit_test(test_other_user),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
