/*
 * XRC domains: the scope in which an XRC target QP delivers a request into the XRC SRQ
 * its sender names (IBA 11.2.x; rdma-core's ibv_open_xrcd). Handles opened on the same
 * file share one domain, as the kernel shares an ib_xrcd by inode; fd -1 opens a private
 * one. A domain lives in one process: its SRQs and target QPs are that process's
 * objects (docs/architecture.md, "XRC"). Senders may be anywhere on the host.
 *
 * Lock: each domain's lock guards its member lists (taken before a CQ's qps_lock). A
 * responder delivering into one of its SRQs holds it for reading for the whole message,
 * so an SRQ leaves the domain (and may be freed) only when no message is being placed
 * in it.
 */
#ifndef SV_XRCD_H
#define SV_XRCD_H

#include <stdint.h>

struct sv_qp;
struct sv_srq;
struct sv_xrc_domain;

/* 0, or -EBADF (@fd is not open), -EAGAIN (the file has no domain and O_CREAT is not in
 * @oflags), -EINVAL (O_EXCL and the file has one), -ENOMEM: as the kernel answers. */
int sv_xrc_domain_open(int fd, int oflags, struct sv_xrc_domain **out);
/* Drops one handle's reference; the last frees the domain. */
void sv_xrc_domain_close(struct sv_xrc_domain *d);

/* A number for a new SRQ: unique in the process, 24 bits, never 0. */
uint32_t sv_xrc_srq_number(void);

/*
 * Members. A target QP's work is moved by whoever polls the CQ of one of its domain's
 * SRQs, as a QP's is by whoever polls its own CQs: each target is attached to those
 * CQs while both are members. 0 or -ENOMEM.
 */
int sv_xrc_domain_add_srq(struct sv_xrc_domain *d, struct sv_srq *srq);
/* Waits until no message is being placed in @srq, then takes it out. */
void sv_xrc_domain_remove_srq(struct sv_xrc_domain *d, struct sv_srq *srq);
int sv_xrc_domain_add_target(struct sv_xrc_domain *d, struct sv_qp *qp);
void sv_xrc_domain_remove_target(struct sv_xrc_domain *d, struct sv_qp *qp);

/* Reader side, for the responder: find the SRQ numbered @srqn between lock and unlock. */
void sv_xrc_domain_rdlock(struct sv_xrc_domain *d);
struct sv_srq *sv_xrc_domain_find(struct sv_xrc_domain *d, uint32_t srqn);
void sv_xrc_domain_unlock(struct sv_xrc_domain *d);

#endif
