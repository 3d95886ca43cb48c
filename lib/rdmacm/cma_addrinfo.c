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
	r->ai_flags = passive ? RAI_PASSIVE : 0;
	r->ai_family = ai->ai_family;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space :
		ai->ai_socktype == SOCK_DGRAM ? RDMA_PS_UDP : RDMA_PS_TCP;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type :
		ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
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
	struct rdma_addrinfo *r;
	int ret;

	if (!res || (!node && !service && !hints)) {
		errno = EINVAL;
		return -1;
	}
	if (!cma_device())
		return -1;
	if (!node && !service) {
		/* Only the hints: rdma-core hands back their addresses and flags. */
		r = calloc(1, sizeof(*r));
		if (!r) {
			errno = ENOMEM;
			return -1;
		}
		r->ai_flags = hints->ai_flags;
		r->ai_family = hints->ai_family;
		r->ai_qp_type = hints->ai_qp_type;
		r->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_addr && hints->ai_dst_len) {
			r->ai_dst_addr = malloc(hints->ai_dst_len);
			if (!r->ai_dst_addr) {
				free(r);
				errno = ENOMEM;
				return -1;
			}
			memcpy(r->ai_dst_addr, hints->ai_dst_addr, hints->ai_dst_len);
			r->ai_dst_len = hints->ai_dst_len;
		}
		/* And the source the hints name, as for any answer without one. */
		if (hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = malloc(hints->ai_src_len);
			if (!r->ai_src_addr) {
				rdma_freeaddrinfo(r);
				errno = ENOMEM;
				return -1;
			}
			memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
			r->ai_src_len = hints->ai_src_len;
		}
		*res = r;
		return 0;
	}
	memset(&h, 0, sizeof(h));
	h.ai_socktype = SOCK_STREAM;
	if (hints) {
		if (hints->ai_flags & RAI_PASSIVE)
			h.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			h.ai_flags |= AI_NUMERICHOST;
		if (hints->ai_family != AF_IB)
			h.ai_family = hints->ai_family;
		if (hints->ai_qp_type == IBV_QPT_UD || hints->ai_port_space == RDMA_PS_UDP ||
		    hints->ai_port_space == RDMA_PS_IPOIB)
			h.ai_socktype = SOCK_DGRAM;
	}
	/* rdma-core returns getaddrinfo's EAI_* code itself (negative), errno untouched. */
	ret = getaddrinfo(node, service, hints ? &h : NULL, &ai);
	if (ret)
		return ret;
	for (i = ai; i && i->ai_family != AF_INET && i->ai_family != AF_INET6; i = i->ai_next)
		;
	if (!i) {
		freeaddrinfo(ai);
		return EAI_FAMILY;
	}
	/* The first answer only, as rdma-core. */
	r = from_ai(i, hints);
	freeaddrinfo(ai);
	if (!r) {
		errno = ENOMEM;
		return -1;
	}
	*res = r;
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
