/* The device list and contexts: ibv_get_device_list, ibv_open_device, ibv_close_device. */
#include <endian.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "verbs.h"

struct ibv_device sv_ibv_device = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = SV_DEV_NAME,
	.dev_name = "uverbs0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs0",
	.ibdev_path = "/sys/class/infiniband/" SV_DEV_NAME,
};

static pthread_once_t sv_init_once = PTHREAD_ONCE_INIT;
static struct sv_host sv_host_at_load;

static void sv_init(void)
{
	const char *t = getenv("SOFTVERBS_TRANSPORT");

	sv_log_init();
	/* The device is RoCE-like (an IB channel adapter on Ethernet). SOFTVERBS_TRANSPORT=
	 * iwarp presents it as an iWARP RNIC, as Linux siw0 is, for programs that act by the
	 * transport (perftest's ib_send_bw exchanges credits on iWARP only). */
	if (t && !strcmp(t, "iwarp")) {
		sv_ibv_device.node_type = IBV_NODE_RNIC;
		sv_ibv_device.transport_type = IBV_TRANSPORT_IWARP;
	} else if (t && *t && strcmp(t, "ib")) {
		sv_warn("SOFTVERBS_TRANSPORT=%s: not 'ib' or 'iwarp', using ib", t);
	}
	if (sv_host_probe(&sv_host_at_load))
		sv_warn("SOFTVERBS_PKEYS is malformed; using the default partition only");
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	pthread_once(&sv_init_once, sv_init);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &sv_ibv_device;
	if (num_devices)
		*num_devices = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	(void)device;
	pthread_once(&sv_init_once, sv_init);
	return htobe64(sv_host_at_load.node_guid);
}

int ibv_get_device_index(struct ibv_device *device)
{
	return device == &sv_ibv_device ? 0 : -1;
}

static void sv_context_set_ops(struct sv_context *ctx)
{
	struct verbs_context *v = &ctx->vctx;
	struct ibv_context_ops *ops = &v->context.ops;

	/* The header inlines call these through fixed offsets: never NULL. */
	ops->poll_cq = sv_verbs_poll_cq;
	ops->req_notify_cq = sv_verbs_req_notify_cq;
	ops->post_send = sv_verbs_post_send;
	ops->post_recv = sv_verbs_post_recv;
	ops->post_srq_recv = sv_verbs_post_srq_recv;
	sv_verbs_mw_ops(ops);

	v->query_port = sv_verbs_query_port;
	v->query_device_ex = sv_verbs_query_device_ex;
	v->query_rt_values = sv_verbs_query_rt_values;
	v->create_cq_ex = sv_verbs_create_cq_ex;
	v->create_qp_ex = sv_verbs_create_qp_ex;
	v->create_srq_ex = sv_verbs_create_srq_ex;
	v->advise_mr = sv_verbs_advise_mr;
	v->alloc_parent_domain = sv_verbs_alloc_parent_domain;
	v->alloc_td = sv_verbs_alloc_td;
	v->alloc_dm = sv_verbs_alloc_dm;
	v->free_dm = sv_verbs_free_dm;
	v->reg_dm_mr = sv_verbs_reg_dm_mr;
	v->dealloc_td = sv_verbs_dealloc_td;
	sv_verbs_xrc_ops(v);
	v->sz = sizeof(struct verbs_context);
}

/* --- shares (what ibv_import_device joins) ---------------------------------------------- */

static pthread_mutex_t shares_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_share *shares;

/* A new share for @cmd_fd (the memfd that names it). */
static struct sv_share *share_new(int cmd_fd)
{
	struct sv_share *sh = calloc(1, sizeof(*sh));
	struct stat st;

	if (!sh)
		return NULL;
	if (fstat(cmd_fd, &st) || sv_mr_table_init(&sh->mrs)) {
		free(sh);
		return NULL;
	}
	sh->dev = st.st_dev;
	sh->ino = st.st_ino;
	sh->refs = 1;
	pthread_mutex_init(&sh->lock, NULL);
	pthread_mutex_lock(&shares_lock);
	sh->next = shares;
	shares = sh;
	pthread_mutex_unlock(&shares_lock);
	return sh;
}

/* The share whose cmd_fd @fd opens (another fd of the same file), one more user. */
static struct sv_share *share_find(int fd)
{
	struct sv_share *sh;
	struct stat st;

	if (fstat(fd, &st))
		return NULL;
	pthread_mutex_lock(&shares_lock);
	for (sh = shares; sh; sh = sh->next) {
		if (sh->dev == st.st_dev && sh->ino == st.st_ino) {
			sh->refs++;
			break;
		}
	}
	pthread_mutex_unlock(&shares_lock);
	return sh;
}

static void share_put(struct sv_share *sh)
{
	struct sv_share **p;
	bool last;

	pthread_mutex_lock(&shares_lock);
	last = --sh->refs == 0;
	if (last) {
		for (p = &shares; *p; p = &(*p)->next) {
			if (*p == sh) {
				*p = sh->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&shares_lock);
	if (!last)
		return;
	sv_mr_table_destroy(&sh->mrs);
	pthread_mutex_destroy(&sh->lock);
	free(sh->pds);
	free(sh->dms);
	free(sh);
}

/* A context on @share (NULL: a new one) with @cmd_fd, which it owns from now on. */
static struct ibv_context *sv_open_on(struct ibv_device *device, struct sv_share *share,
				      int cmd_fd)
{
	struct sv_context *ctx;
	int err;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		err = -ENOMEM;
		goto err_share;
	}
	err = sv_host_probe(&ctx->host);
	if (err && err != -EINVAL)
		goto err_free;
	if (!share && !(share = share_new(cmd_fd))) {
		err = -ENOMEM;
		goto err_free;
	}
	ctx->share = share;
	ctx->mrs = &share->mrs;
	ctx->vctx.context.async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ctx->vctx.context.async_fd < 0) {
		err = -errno;
		goto err_free;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
	ctx->vctx.context.device = device;
	/* A real file, as the uverbs fd is: ibv_import_device finds the share by it. */
	ctx->vctx.context.cmd_fd = cmd_fd;
	ctx->vctx.context.num_comp_vectors = SV_NUM_COMP_VECTORS;
	ctx->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	sv_context_set_ops(ctx);
	sv_dbg("context %p opened", (void *)ctx);
	return &ctx->vctx.context;

err_free:
	free(ctx);
err_share:
	if (share)
		share_put(share);
	close(cmd_fd);
	return sv_fail_null(-err);
}

static struct ibv_context *sv_open(struct ibv_device *device)
{
	int cmd_fd;

	pthread_once(&sv_init_once, sv_init);
	if (device != &sv_ibv_device)
		return sv_fail_null(ENODEV);
	cmd_fd = memfd_create("softverbs-context", MFD_CLOEXEC);
	if (cmd_fd < 0)
		return sv_fail_null(errno);
	return sv_open_on(device, NULL, cmd_fd);
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	return sv_open(device);
}

/* IBVERBS_PRIVATE_34: rdma-core's providers' way in; the same as ibv_open_device. */
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	(void)private_data;
	return sv_open(device);
}

/*
 * A second context on the objects of the context whose cmd_fd @cmd_fd is (a dup of it,
 * passed within the process or to another one... within this process: the share is
 * found by the file). It takes @cmd_fd over, as rdma-core does.
 */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct sv_share *share;

	pthread_once(&sv_init_once, sv_init);
	share = share_find(cmd_fd);
	if (!share)
		return sv_fail_null(fcntl(cmd_fd, F_GETFD) < 0 ? EBADF : EOPNOTSUPP);
	return sv_open_on(&sv_ibv_device, share, cmd_fd);
}

int ibv_close_device(struct ibv_context *context)
{
	struct sv_context *ctx;
	struct sv_async_event *e;

	if (!context)
		return EINVAL;
	ctx = to_svctx(context);
	/* Like rdma-core, objects still open are not checked: they die with the context. */
	while ((e = ctx->async_head)) {
		ctx->async_head = e->next;
		free(e);
	}
	close(context->async_fd);
	close(context->cmd_fd);
	share_put(ctx->share);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&context->mutex);
	free(ctx);
	return 0;
}
