/*
 * Black-box tests of the device, context and port queries: what rdma-core 44 over a
 * kernel RoCE provider (rxe, mlx5) returns for the same calls.
 *
 * Conventions checked here (rdma-core 44 man pages and libibverbs/verbs.c):
 *   ibv_query_port / ibv_query_device(_ex) / ibv_query_gid_ex: 0 or a positive errno;
 *   ibv_query_gid / ibv_query_pkey / ibv_get_pkey_index: -1 on error;
 *   ibv_query_gid_table: the entry count or a negative errno;
 *   ibv_query_pkey returns the P_Key in network byte order (htobe16 of the sysfs value).
 */
#include "verbs/sv_test_peer.h"
#include "verbs/sv_test_util.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PORT 1

static const union ibv_gid loopback_v4_gid = {
	.raw = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1 },
};

static int gid_is_zero(const union ibv_gid *gid)
{
	static const union ibv_gid zero;

	return !memcmp(gid, &zero, sizeof(zero));
}

static struct ibv_device *find_dev(struct ibv_device **list, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "softverbs0"))
			return list[i];
	return NULL;
}

static int port_gid_tbl_len(struct ibv_context *ctx)
{
	struct ibv_port_attr pa;

	assert_int_equal(ibv_query_port(ctx, PORT, &pa), 0);
	return pa.gid_tbl_len;
}

/* ---- device list ------------------------------------------------------------------ */

/* The list is non-NULL, NULL-terminated, counts its entries and names softverbs0. */
static void test_device_list_is_null_terminated_and_holds_softverbs0(void **state)
{
	struct ibv_device **list;
	int n = -1;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	assert_true(n >= 1);
	assert_null(list[n]);
	for (int i = 0; i < n; i++)
		assert_non_null(list[i]);
	assert_non_null(find_dev(list, n));
	ibv_free_device_list(list);
}

/* num_devices is optional (man ibv_get_device_list). */
static void test_device_list_accepts_null_count(void **state)
{
	struct ibv_device **list;
	int n = 0;

	(void)state;
	list = ibv_get_device_list(NULL);
	assert_non_null(list);
	while (list[n])
		n++;
	assert_true(n >= 1);
	ibv_free_device_list(list);
}

/* The GUID is non-zero and is the node_guid query_device reports (both big-endian). */
static void test_device_guid_nonzero_and_matches_node_guid(void **state)
{
	struct ibv_device_attr attr;
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_device *dev;
	__be64 guid;
	int n;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	dev = find_dev(list, n);
	assert_non_null(dev);
	guid = ibv_get_device_guid(dev);
	assert_true(guid != 0);
	ctx = ibv_open_device(dev);
	assert_non_null(ctx);
	assert_int_equal(ibv_query_device(ctx, &attr), 0);
	assert_true(attr.node_guid == guid);
	assert_int_equal(ibv_close_device(ctx), 0);
	ibv_free_device_list(list);
}

/* A kernel-backed device has a stable index >= 0 (-1 only without kernel support). */
static void test_device_index_is_non_negative(void **state)
{
	struct ibv_device **list;
	int n;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	assert_true(ibv_get_device_index(find_dev(list, n)) >= 0);
	ibv_free_device_list(list);
}

/* The device's node/transport types are those of a RoCE CA or an iWARP RNIC. */
static void test_device_node_and_transport_type_are_consistent(void **state)
{
	struct ibv_device **list;
	struct ibv_device *dev;
	int n;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	dev = find_dev(list, n);
	assert_non_null(dev);
	if (dev->node_type == IBV_NODE_CA)
		assert_int_equal(dev->transport_type, IBV_TRANSPORT_IB);
	else if (dev->node_type == IBV_NODE_RNIC)
		assert_int_equal(dev->transport_type, IBV_TRANSPORT_IWARP);
	else
		fail_msg("node_type %d is neither CA nor RNIC", dev->node_type);
	assert_string_equal(dev->name, "softverbs0");
	ibv_free_device_list(list);
}

/* ---- open / close ------------------------------------------------------------------ */

/* open gives a context naming the device; two opens give two contexts; close is 0. */
static void test_open_and_close_device(void **state)
{
	struct ibv_device **list;
	struct ibv_context *a, *b;
	struct ibv_device *dev;
	int n;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	dev = find_dev(list, n);
	assert_non_null(dev);
	a = ibv_open_device(dev);
	b = ibv_open_device(dev);
	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	assert_ptr_equal(a->device, dev);
	assert_true(a->num_comp_vectors >= 1);
	assert_true(a->async_fd >= 0);
	assert_int_not_equal(a->async_fd, b->async_fd);
	assert_int_equal(ibv_close_device(a), 0);
	assert_int_equal(ibv_close_device(b), 0);
	ibv_free_device_list(list);
}

/* An opened context stays usable after the list that named it is freed (man page). */
static void test_context_outlives_device_list(void **state)
{
	struct ibv_device_attr attr;
	struct ibv_device **list;
	struct ibv_context *ctx;
	int n;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	ctx = ibv_open_device(find_dev(list, n));
	assert_non_null(ctx);
	ibv_free_device_list(list);
	assert_int_equal(ibv_query_device(ctx, &attr), 0);
	assert_string_equal(ibv_get_device_name(ctx->device), "softverbs0");
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* ---- query_device ------------------------------------------------------------------ */

/* One port, non-zero limits, HCA-level atomics. */
static void test_query_device_limits(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_device_attr a;

	(void)state;
	memset(&a, 0xa5, sizeof(a));
	assert_int_equal(ibv_query_device(ctx, &a), 0);
	assert_int_equal(a.phys_port_cnt, 1);
	assert_int_equal(a.atomic_cap, IBV_ATOMIC_HCA);
	assert_true(a.max_qp > 0);
	assert_true(a.max_qp_wr > 0);
	assert_true(a.max_sge > 0);
	assert_true(a.max_sge_rd > 0);
	assert_true(a.max_cq > 0);
	assert_true(a.max_cqe > 0);
	assert_true(a.max_mr > 0);
	assert_true(a.max_mr_size > 0);
	assert_true(a.max_pd > 0);
	assert_true(a.max_qp_rd_atom > 0);
	assert_true(a.max_qp_init_rd_atom > 0);
	assert_true(a.max_srq > 0);
	assert_true(a.max_srq_wr > 0);
	assert_true(a.max_srq_sge > 0);
	assert_true(a.max_ah > 0);
	assert_true(a.max_pkeys > 0);
	assert_true(a.node_guid != 0);
	/* 4 KiB pages must be supported: page_size_cap is a bit mask of page sizes. */
	assert_true(a.page_size_cap & 4096);
	/* fw_ver is a C string within its array. */
	assert_non_null(memchr(a.fw_ver, 0, sizeof(a.fw_ver)));
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* query_device_ex's orig_attr is exactly what query_device returns. */
static void test_query_device_ex_orig_attr_matches_query_device(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_device_attr_ex ax;
	struct ibv_device_attr a;

	(void)state;
	memset(&a, 0, sizeof(a));
	memset(&ax, 0x5a, sizeof(ax));
	assert_int_equal(ibv_query_device(ctx, &a), 0);
	assert_int_equal(ibv_query_device_ex(ctx, NULL, &ax), 0);
	assert_memory_equal(&ax.orig_attr, &a, sizeof(a));
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* ---- query_port -------------------------------------------------------------------- */

/* Port 1: ACTIVE, Ethernet, MTU 4096, a LID, a GID table and a P_Key table. */
static void test_query_port_1_is_active_ethernet(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_port_attr pa;

	(void)state;
	memset(&pa, 0xa5, sizeof(pa));
	assert_int_equal(ibv_query_port(ctx, PORT, &pa), 0);
	assert_int_equal(pa.state, IBV_PORT_ACTIVE);
	assert_int_equal(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(pa.active_mtu, IBV_MTU_4096);
	assert_int_equal(pa.max_mtu, IBV_MTU_4096);
	assert_int_not_equal(pa.lid, 0);
	assert_true(pa.gid_tbl_len > 0);
	assert_true(pa.pkey_tbl_len > 0);
	assert_true(pa.max_msg_sz > 0);
	/* An ACTIVE port's physical state is LinkUp (5). */
	assert_int_equal(pa.phys_state, 5);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* Ports 0 and 2 do not exist: EINVAL, returned (rdma_is_port_valid in the kernel). */
static void test_query_port_invalid_port_is_einval(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_port_attr pa;

	(void)state;
	assert_int_equal(ibv_query_port(ctx, 0, &pa), EINVAL);
	assert_int_equal(ibv_query_port(ctx, 2, &pa), EINVAL);
	assert_int_equal(ibv_query_port(ctx, 255, &pa), EINVAL);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* The exported IBVERBS_1.1 ibv_query_port (not the header's inline) gives the same. */
static void test_query_port_exported_symbol(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_port_attr pa;

	(void)state;
	memset(&pa, 0, sizeof(pa));
	assert_int_equal((ibv_query_port)(ctx, PORT, (struct _compat_ibv_port_attr *)&pa), 0);
	assert_int_equal(pa.state, IBV_PORT_ACTIVE);
	assert_int_equal(pa.active_mtu, IBV_MTU_4096);
	assert_int_equal(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal((ibv_query_port)(ctx, 2, (struct _compat_ibv_port_attr *)&pa),
			 EINVAL);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* ---- GIDs -------------------------------------------------------------------------- */

/* GID 0 exists and is not all-zero. */
static void test_query_gid_index0_nonzero(void **state)
{
	struct ibv_context *ctx = tu_open();
	union ibv_gid gid;

	(void)state;
	memset(&gid, 0, sizeof(gid));
	assert_int_equal(ibv_query_gid(ctx, PORT, 0, &gid), 0);
	assert_false(gid_is_zero(&gid));
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* The loopback address is reachable, so ::ffff:127.0.0.1 is in the table. */
static void test_query_gid_table_has_v4_loopback(void **state)
{
	struct ibv_context *ctx = tu_open();
	int len = port_gid_tbl_len(ctx);
	int found = -1;

	(void)state;
	for (int i = 0; i < len && found < 0; i++) {
		union ibv_gid gid;

		assert_int_equal(ibv_query_gid(ctx, PORT, i, &gid), 0);
		if (!memcmp(&gid, &loopback_v4_gid, sizeof(gid)))
			found = i;
	}
	assert_true(found >= 0);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* ibv_query_gid: -1 past the table, for a negative index and for ports 0 and 2. */
static void test_query_gid_out_of_range_is_minus_one(void **state)
{
	struct ibv_context *ctx = tu_open();
	int len = port_gid_tbl_len(ctx);
	union ibv_gid gid;

	(void)state;
	assert_int_equal(ibv_query_gid(ctx, PORT, len, &gid), -1);
	assert_int_equal(ibv_query_gid(ctx, PORT, len + 1000, &gid), -1);
	assert_int_equal(ibv_query_gid(ctx, PORT, -1, &gid), -1);
	assert_int_equal(ibv_query_gid(ctx, 0, 0, &gid), -1);
	assert_int_equal(ibv_query_gid(ctx, 2, 0, &gid), -1);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* query_gid_ex on entry 0: same GID, index 0, port 1, RoCE v2, a net device. */
static void test_query_gid_ex_index0(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_gid_entry e;
	union ibv_gid gid;

	(void)state;
	memset(&e, 0xa5, sizeof(e));
	assert_int_equal(ibv_query_gid(ctx, PORT, 0, &gid), 0);
	assert_int_equal(ibv_query_gid_ex(ctx, PORT, 0, &e, 0), 0);
	assert_memory_equal(&e.gid, &gid, sizeof(gid));
	assert_int_equal(e.gid_index, 0);
	assert_int_equal(e.port_num, PORT);
	assert_int_equal(e.gid_type, IBV_GID_TYPE_ROCE_V2);
	/* RoCE GIDs come from a net device's address: its ifindex is reported. */
	assert_int_not_equal(e.ndev_ifindex, 0);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* query_gid_ex errors are returned errno values: EINVAL for bad port, index, flags. */
static void test_query_gid_ex_errors(void **state)
{
	struct ibv_context *ctx = tu_open();
	int len = port_gid_tbl_len(ctx);
	struct ibv_gid_entry e;

	(void)state;
	assert_int_equal(ibv_query_gid_ex(ctx, 2, 0, &e, 0), EINVAL);
	assert_int_equal(ibv_query_gid_ex(ctx, 0, 0, &e, 0), EINVAL);
	assert_int_equal(ibv_query_gid_ex(ctx, PORT, len, &e, 0), EINVAL);
	assert_int_equal(ibv_query_gid_ex(ctx, PORT, 0, &e, 1), EINVAL);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/*
 * The table lists the valid entries only, each consistent with query_gid_ex; an empty
 * slot inside the table is ENODATA for query_gid_ex and an all-zero GID (return 0) for
 * ibv_query_gid, which rdma-core keeps for API compatibility.
 */
static void test_query_gid_table_entries(void **state)
{
	struct ibv_context *ctx = tu_open();
	int len = port_gid_tbl_len(ctx);
	struct ibv_gid_entry *tab = calloc((size_t)len + 4, sizeof(*tab));
	int empty = -1, has_lo = 0;
	char *valid = calloc((size_t)len, 1);
	ssize_t n;

	(void)state;
	assert_non_null(tab);
	assert_non_null(valid);
	n = ibv_query_gid_table(ctx, tab, (size_t)len + 4, 0);
	assert_true(n >= 1);
	assert_true(n <= len);
	for (ssize_t i = 0; i < n; i++) {
		struct ibv_gid_entry e;

		assert_int_equal(tab[i].port_num, PORT);
		assert_int_equal(tab[i].gid_type, IBV_GID_TYPE_ROCE_V2);
		assert_true(tab[i].gid_index < (uint32_t)len);
		assert_false(gid_is_zero(&tab[i].gid));
		assert_int_equal(valid[tab[i].gid_index], 0); /* no index listed twice */
		valid[tab[i].gid_index] = 1;
		assert_int_equal(ibv_query_gid_ex(ctx, PORT, tab[i].gid_index, &e, 0), 0);
		assert_memory_equal(&e, &tab[i], sizeof(e));
		if (!memcmp(&tab[i].gid, &loopback_v4_gid, sizeof(union ibv_gid)))
			has_lo = 1;
	}
	assert_true(has_lo);
	for (int i = 0; i < len && empty < 0; i++)
		if (!valid[i])
			empty = i;
	if (empty >= 0) {
		struct ibv_gid_entry e;
		union ibv_gid gid;

		assert_int_equal(ibv_query_gid_ex(ctx, PORT, (uint32_t)empty, &e, 0), ENODATA);
		memset(&gid, 0xa5, sizeof(gid));
		assert_int_equal(ibv_query_gid(ctx, PORT, empty, &gid), 0);
		assert_true(gid_is_zero(&gid));
	}
	free(valid);
	free(tab);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* Too small an array (or none) and non-zero flags fail with a negative errno. */
static void test_query_gid_table_errors(void **state)
{
	struct ibv_context *ctx = tu_open();
	int len = port_gid_tbl_len(ctx);
	struct ibv_gid_entry *tab = calloc((size_t)len, sizeof(*tab));
	ssize_t n;

	(void)state;
	assert_non_null(tab);
	n = ibv_query_gid_table(ctx, tab, (size_t)len, 0);
	assert_true(n >= 1);
	if (n >= 2)
		assert_int_equal(ibv_query_gid_table(ctx, tab, (size_t)n - 1, 0), -EINVAL);
	assert_true(ibv_query_gid_table(ctx, tab, 0, 0) < 0);
	assert_int_equal(ibv_query_gid_table(ctx, tab, (size_t)len, 1), -EINVAL);
	free(tab);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* ---- P_Keys ------------------------------------------------------------------------ */

/* P_Key 0 is the default full-membership key 0xffff, in network byte order. */
static void test_query_pkey_index0_default(void **state)
{
	struct ibv_context *ctx = tu_open();
	__be16 pkey = 0;

	(void)state;
	assert_int_equal(ibv_query_pkey(ctx, PORT, 0, &pkey), 0);
	assert_int_equal(pkey, htobe16(0xffff));
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* -1 past the P_Key table, for a negative index and for a bad port. */
static void test_query_pkey_out_of_range_is_minus_one(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_port_attr pa;
	__be16 pkey;

	(void)state;
	assert_int_equal(ibv_query_port(ctx, PORT, &pa), 0);
	assert_int_equal(ibv_query_pkey(ctx, PORT, pa.pkey_tbl_len, &pkey), -1);
	assert_int_equal(ibv_query_pkey(ctx, PORT, -1, &pkey), -1);
	assert_int_equal(ibv_query_pkey(ctx, 2, 0, &pkey), -1);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* get_pkey_index finds 0xffff at 0; an absent key or a bad port is -1. */
static void test_get_pkey_index(void **state)
{
	struct ibv_context *ctx = tu_open();

	(void)state;
	assert_int_equal(ibv_get_pkey_index(ctx, PORT, htobe16(0xffff)), 0);
	assert_int_equal(ibv_get_pkey_index(ctx, PORT, htobe16(0x1234)), -1);
	assert_int_equal(ibv_get_pkey_index(ctx, 2, htobe16(0xffff)), -1);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/*
 * With an asymmetric key the byte order is observable: rdma-core returns
 * htobe16(value) and get_pkey_index takes a key in network byte order.
 * softverbs' partition table is configured with SOFTVERBS_PKEYS (sv_device.h), read
 * once per process when the device is first opened: earlier tests here opened it
 * already, so the test runs in a fresh run of this program (tp_fresh: re-executed with
 * SOFTVERBS_PKEYS in its environment from the start).
 */
static void test_pkey_byte_order_with_configured_table(void **state)
{
	struct ibv_context *ctx;
	__be16 pkey = 0;
	bool fresh;

	(void)state;
	assert_int_equal(setenv("SOFTVERBS_PKEYS", "0xffff,0x8001", 1), 0);
	fresh = tp_fresh("test_pkey_byte_order_with_configured_table", 20000);
	if (!fresh) {
		unsetenv("SOFTVERBS_PKEYS");
		return; /* the fresh run passed */
	}
	ctx = tu_open();
	assert_int_equal(ibv_query_pkey(ctx, PORT, 0, &pkey), 0);
	assert_int_equal(pkey, htobe16(0xffff));
	assert_int_equal(ibv_query_pkey(ctx, PORT, 1, &pkey), 0);
	if (pkey != htobe16(0x8001))
		fail_msg("SOFTVERBS_PKEYS=0xffff,0x8001: P_Key index 1 reads 0x%04x, want "
			 "htobe16(0x8001) = 0x%04x", pkey, htobe16(0x8001));
	assert_int_equal(ibv_get_pkey_index(ctx, PORT, htobe16(0x8001)), 1);
	/* The same key given in host order is another key, absent from the table. */
	assert_int_equal(ibv_get_pkey_index(ctx, PORT, (__be16)0x8001), -1);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* ---- async events ------------------------------------------------------------------ */

/* async_fd is a real descriptor, and poll() says not readable with nothing pending. */
static void test_async_fd_is_pollable_and_idle(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };

	(void)state;
	assert_true(fcntl(ctx->async_fd, F_GETFD) != -1);
	assert_int_equal(poll(&pfd, 1, 50), 0);
	assert_int_equal(pfd.revents, 0);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* With O_NONBLOCK on async_fd, get_async_event returns -1/EAGAIN at once. */
static void test_get_async_event_nonblocking_is_eagain(void **state)
{
	struct ibv_context *ctx = tu_open();
	struct ibv_async_event ev;
	int flags;

	(void)state;
	flags = fcntl(ctx->async_fd, F_GETFL);
	assert_true(flags >= 0);
	assert_int_equal(fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
	errno = 0;
	assert_int_equal(ibv_get_async_event(ctx, &ev), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(ibv_close_device(ctx), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_list_is_null_terminated_and_holds_softverbs0),
		cmocka_unit_test(test_device_list_accepts_null_count),
		cmocka_unit_test(test_device_guid_nonzero_and_matches_node_guid),
		cmocka_unit_test(test_device_index_is_non_negative),
		cmocka_unit_test(test_device_node_and_transport_type_are_consistent),
		cmocka_unit_test(test_open_and_close_device),
		cmocka_unit_test(test_context_outlives_device_list),
		cmocka_unit_test(test_query_device_limits),
		cmocka_unit_test(test_query_device_ex_orig_attr_matches_query_device),
		cmocka_unit_test(test_query_port_1_is_active_ethernet),
		cmocka_unit_test(test_query_port_invalid_port_is_einval),
		cmocka_unit_test(test_query_port_exported_symbol),
		cmocka_unit_test(test_query_gid_index0_nonzero),
		cmocka_unit_test(test_query_gid_table_has_v4_loopback),
		cmocka_unit_test(test_query_gid_out_of_range_is_minus_one),
		cmocka_unit_test(test_query_gid_ex_index0),
		cmocka_unit_test(test_query_gid_ex_errors),
		cmocka_unit_test(test_query_gid_table_entries),
		cmocka_unit_test(test_query_gid_table_errors),
		cmocka_unit_test(test_query_pkey_index0_default),
		cmocka_unit_test(test_query_pkey_out_of_range_is_minus_one),
		cmocka_unit_test(test_get_pkey_index),
		cmocka_unit_test(test_pkey_byte_order_with_configured_table),
		cmocka_unit_test(test_async_fd_is_pollable_and_idle),
		cmocka_unit_test(test_get_async_event_nonblocking_is_eagain),
	};

	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
