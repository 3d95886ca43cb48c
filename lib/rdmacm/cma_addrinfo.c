/* rdma_getaddrinfo: getaddrinfo(3) with the RDMA fields (port space, QP type). */
#include "cma.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

static struct rdma_addrinfo *from_ai(const struct addrinfo *ai, const struct rdma_addrinfo *hints)
{
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
	struct sockaddr *sa;

	if (!r)
		return NULL;
	sa = malloc(ai->ai_addrlen);
	if (!sa) {
		free(r);
		return NULL;
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai->ai_family;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space :
		hints && hints->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type :
		r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	if (passive) {
		r->ai_src_addr = sa;
		r->ai_src_len = ai->ai_addrlen;
	} else {
		r->ai_dst_addr = sa;
		r->ai_dst_len = ai->ai_addrlen;
		/* A source the caller named in the hints goes along. */
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = malloc(hints->ai_src_len);
			if (r->ai_src_addr) {
				memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
				r->ai_src_len = hints->ai_src_len;
			}
		}
	}
	if (ai->ai_canonname) {
		char *c = strdup(ai->ai_canonname);

		if (passive)
			r->ai_src_canonname = c;
		else
			r->ai_dst_canonname = c;
	}
	return r;
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	struct addrinfo h, *ai = NULL, *i;
	struct rdma_addrinfo *head = NULL, **tail = &head;
	int ret;

	if (!res || (!node && !service && !(hints && hints->ai_flags & RAI_PASSIVE))) {
		errno = EINVAL;
		return -1;
	}
	if (hints && hints->ai_port_space && hints->ai_port_space != RDMA_PS_TCP &&
	    hints->ai_port_space != RDMA_PS_UDP && hints->ai_port_space != RDMA_PS_IB &&
	    hints->ai_port_space != RDMA_PS_IPOIB) {
		errno = EINVAL;
		return -1;
	}
	memset(&h, 0, sizeof(h));
	h.ai_socktype = SOCK_STREAM;
	if (hints) {
		if (hints->ai_flags & RAI_PASSIVE)
			h.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			h.ai_flags |= AI_NUMERICHOST;
		if (hints->ai_flags & RAI_FAMILY)
			h.ai_family = hints->ai_family;
		else if (hints->ai_family == AF_INET || hints->ai_family == AF_INET6)
			h.ai_family = hints->ai_family;
		if (hints->ai_family == AF_IB) {
			errno = EAFNOSUPPORT;
			return -1;
		}
	}
	ret = getaddrinfo(node, service, &h, &ai);
	if (ret) {
		/* rdma-core passes getaddrinfo's EAI_* code through as the return value. */
		if (ret == EAI_SYSTEM)
			return -1;
		errno = ret == EAI_MEMORY ? ENOMEM : ret == EAI_NONAME ? ENOENT : EINVAL;
		return ret;
	}
	for (i = ai; i; i = i->ai_next) {
		struct rdma_addrinfo *r;

		if (i->ai_family != AF_INET && i->ai_family != AF_INET6)
			continue;
		r = from_ai(i, hints);
		if (!r) {
			freeaddrinfo(ai);
			rdma_freeaddrinfo(head);
			errno = ENOMEM;
			return -1;
		}
		*tail = r;
		tail = &r->ai_next;
	}
	freeaddrinfo(ai);
	if (!head) {
		errno = ENOENT;
		return EAI_NONAME;
	}
	*res = head;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}
