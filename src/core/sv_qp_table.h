/*
 * The QP state machine: which transitions exist and which attributes each one
 * requires or allows, per QP type (IBA vol. 1, 10.3.1, "QP state transition
 * properties"; the same table the kernel applies in ib_modify_qp_is_ok()).
 */
#ifndef SV_QP_TABLE_H
#define SV_QP_TABLE_H

#include <infiniband/verbs.h>
#include <stdbool.h>

extern const char *const sv_qp_state_name[];

/* True if the type is one softverbs implements (RC, UC, UD, XRC_SEND, XRC_RECV). */
bool sv_qp_type_supported(enum ibv_qp_type type);

/* Reliable-connected semantics (acknowledgements, RNR, errors take the pair to Error):
 * RC, and both ends of XRC, which is RC with the receive side in a domain's SRQs. */
static inline bool sv_qp_type_reliable(enum ibv_qp_type type)
{
	return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

/* The type of the QP a QP of @type connects to (an XRC initiator to a target). */
static inline enum ibv_qp_type sv_qp_type_peer(enum ibv_qp_type type)
{
	if (type == IBV_QPT_XRC_SEND)
		return IBV_QPT_XRC_RECV;
	if (type == IBV_QPT_XRC_RECV)
		return IBV_QPT_XRC_SEND;
	return type;
}

/*
 * True if moving a QP of @type from @cur to @next with the attributes in @mask is
 * legal: the transition exists, every required attribute is present and nothing
 * outside required | optional | IBV_QP_STATE is. Without IBV_QP_STATE in the mask,
 * next must equal cur.
 */
bool sv_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur,
			 enum ibv_qp_state next, int mask);

/* The attributes a transition requires; -1 if it does not exist (tests count them). */
int sv_qp_transition_required(enum ibv_qp_type type, enum ibv_qp_state cur,
			      enum ibv_qp_state next);

#endif
