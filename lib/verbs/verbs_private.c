/*
 * The IBVERBS_PRIVATE_34 node: rdma-core's interface between libibverbs and its provider
 * libraries (libmlx5.so.1, libefa.so.1, ...). Softverbs has no providers, but Debian's
 * perftest binaries list libmlx5.so.1 and libefa.so.1 as DT_NEEDED and everything is
 * linked BIND_NOW, so those two libraries must load beside ours: every PRIVATE_34 symbol
 * they import has to exist, and their constructors call verbs_register_driver_34() at
 * load time. Nothing else ever reaches these functions (no device of ours is theirs), so
 * each one is the smallest thing that is safe to call: ibv_cmd_* and execute_ioctl
 * report EOPNOTSUPP (a positive errno, as rdma-core's command helpers do), the rest do
 * nothing or fail cleanly.
 *
 * rdma-core declares all of this in its uninstalled <infiniband/driver.h>; the prototypes
 * below are ours. Pointers to driver-private structs are plain `void *`, and the ibv_cmd_*
 * stubs take `(void)`: the symbol name is all the dynamic linker checks, and no caller
 * ever gets as far as passing them arguments.
 *
 * ibv_query_gid_type and verbs_open_device, also in this node, live in verbs_query.c and
 * verbs_device.c: they are real entry points that ibv_devinfo and friends call.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* One X() per ibv_cmd_* symbol of the node. */
#define SV_IBV_CMD_STUBS(X)                                                                    \
	X(advise_mr) X(alloc_dm) X(alloc_mw) X(alloc_pd) X(attach_mcast) X(close_xrcd)         \
	X(create_ah) X(create_counters) X(create_cq) X(create_cq_ex) X(create_flow)            \
	X(create_flow_action_esp) X(create_qp) X(create_qp_ex) X(create_qp_ex2)                \
	X(create_rwq_ind_table) X(create_srq) X(create_srq_ex) X(create_wq) X(dealloc_mw)      \
	X(dealloc_pd) X(dereg_mr) X(destroy_ah) X(destroy_counters) X(destroy_cq)              \
	X(destroy_flow) X(destroy_flow_action) X(destroy_qp) X(destroy_rwq_ind_table)          \
	X(destroy_srq) X(destroy_wq) X(detach_mcast) X(free_dm) X(get_context) X(modify_cq)    \
	X(modify_flow_action_esp) X(modify_qp) X(modify_qp_ex) X(modify_srq) X(modify_wq)      \
	X(open_qp) X(open_xrcd) X(poll_cq) X(post_recv) X(post_send) X(post_srq_recv)          \
	X(query_context) X(query_device_any) X(query_mr) X(query_port) X(query_qp)             \
	X(query_srq) X(read_counters) X(reg_dm_mr) X(reg_dmabuf_mr) X(reg_mr)                  \
	X(req_notify_cq) X(rereg_mr) X(resize_cq)

#define SV_DECLARE_CMD(name) int ibv_cmd_##name(void);
SV_IBV_CMD_STUBS(SV_DECLARE_CMD)

int execute_ioctl(struct ibv_context *context, void *cmd);
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link);
void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id);
void verbs_register_driver_34(const void *ops);
void verbs_set_ops(struct verbs_context *vctx, const void *ops);
void verbs_uninit_context(struct verbs_context *context);
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
extern bool verbs_allow_disassociate_destroy;

#define SV_DEFINE_CMD(name)                                                                    \
	int ibv_cmd_##name(void)                                                               \
	{                                                                                      \
		return EOPNOTSUPP;                                                             \
	}
SV_IBV_CMD_STUBS(SV_DEFINE_CMD)

int execute_ioctl(struct ibv_context *context, void *cmd)
{
	(void)context;
	(void)cmd;
	return EOPNOTSUPP;
}

/* rdma-core trims the attribute count of a command buffer chain; ours are never built. */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link)
{
	(void)link;
	return num_attrs;
}

void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
{
	(void)ctx;
	(void)level;
	(void)fmt;
}

void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id)
{
	(void)device;
	(void)cmd_fd;
	(void)alloc_size;
	(void)context_offset;
	(void)driver_id;
	errno = EOPNOTSUPP;
	return NULL;
}

/*
 * Called from the providers' constructors while the dynamic linker is still loading the
 * program: it must not allocate, print or touch anything. The provider is simply not
 * recorded, so it never matches a device.
 */
void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

void verbs_set_ops(struct verbs_context *vctx, const void *ops)
{
	(void)vctx;
	(void)ops;
}

void verbs_uninit_context(struct verbs_context *context)
{
	(void)context;
}

void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context)
{
	(void)cq;
	(void)context;
	(void)channel;
	(void)cq_context;
}

/* There is no kernel device behind a provider here, hence no sysfs directory for it. */
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fmt, ...)
{
	(void)buf;
	(void)size;
	(void)sysfs_dev;
	(void)fmt;
	errno = ENOENT;
	return -1;
}

/* A 1-byte data object (size 1 in the dynamic symbol table), as the providers expect. */
bool verbs_allow_disassociate_destroy = false;
