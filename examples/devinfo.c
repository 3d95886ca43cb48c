/*
 * devinfo: the first step of every RDMA program: find a device, open it, ask what it
 * can do. Build: cc devinfo.c -libverbs (against softverbs or any rdma-core).
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_device_attr dev;
	struct ibv_port_attr port;
	union ibv_gid gid;
	char buf[INET6_ADDRSTRLEN];
	int n;

	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		fprintf(stderr, "no RDMA device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx || ibv_query_device(ctx, &dev) || ibv_query_port(ctx, 1, &port) ||
	    ibv_query_gid(ctx, 1, 0, &gid)) {
		perror("open/query");
		return 1;
	}
	inet_ntop(AF_INET6, gid.raw, buf, sizeof(buf));
	printf("%s: %d port(s), max_qp %d, max_mr %d, max_cqe %d\n",
	       ibv_get_device_name(list[0]), dev.phys_port_cnt, dev.max_qp, dev.max_mr,
	       dev.max_cqe);
	printf("port 1: %s, lid 0x%x, gid[0] %s\n", ibv_port_state_str(port.state), port.lid, buf);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
