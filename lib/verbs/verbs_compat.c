/*
 * Legacy helpers from libibverbs' oldest version nodes (IBVERBS_1.0 / 1.1). Programs
 * still import them: Debian's librdmacm links the kernel-ABI converters, and old
 * applications call the sysfs and fork helpers. None of them involves a device.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_compat.h"

/* --- kernel ABI structs <-> verbs structs ------------------------------------------ */

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

/*
 * The kernel struct also carries qp_attr_mask, which has no place in ibv_qp_attr (the
 * caller reads it from the kernel struct itself); ibv_qp_attr's rate_limit has no kernel
 * counterpart and is left as the caller set it.
 */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->qp_state = src->qp_state;
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;

	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;

	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);

	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/* Both path record layouts keep LIDs, P_Key and flow label in network byte order. */
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->reversible = src->reversible;
	dst->mtu = src->mtu;
	dst->pkey = src->pkey;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->numb_path = src->numb_path;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

/* --- sysfs ------------------------------------------------------------------------- */

static pthread_once_t sv_sysfs_once = PTHREAD_ONCE_INIT;
static char sv_sysfs_path[IBV_SYSFS_PATH_MAX];

static void sv_sysfs_path_init(void)
{
	/* secure_getenv: a setuid program must not take a path from its caller. */
	const char *env = secure_getenv("SYSFS_PATH");
	size_t len;

	if (!env || !*env)
		env = "/sys";
	snprintf(sv_sysfs_path, sizeof(sv_sysfs_path), "%s", env);
	len = strlen(sv_sysfs_path);
	while (len > 1 && sv_sysfs_path[len - 1] == '/')
		sv_sysfs_path[--len] = '\0';
}

const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sv_sysfs_once, sv_sysfs_path_init);
	return sv_sysfs_path;
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	size_t len = 0;
	char *path;
	int fd;

	if (!size) {
		errno = EINVAL;
		return -1;
	}
	if (size > INT_MAX)
		size = INT_MAX;
	if (asprintf(&path, "%s/%s", dir, file) < 0) {
		errno = ENOMEM;
		return -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;

	while (len < size) {
		ssize_t n = read(fd, buf + len, size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;

			close(fd);
			errno = err;
			return -1;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);

	if (len && buf[len - 1] == '\n')
		len--;
	if (len == size) {
		/* No room for the terminator: the contents did not fit. */
		errno = EOVERFLOW;
		return -1;
	}
	buf[len] = '\0';
	return (int)len;
}

/* --- fork support -------------------------------------------------------------------- */

/*
 * rdma-core marks registered memory MADV_DONTFORK so that a child's copy-on-write cannot
 * move pages under the HCA. Softverbs pins nothing; a forked child simply has its own
 * copy of the memory, so there is nothing to prepare.
 */
int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
