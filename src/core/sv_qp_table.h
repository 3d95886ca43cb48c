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

/* True if the type is one softverbs implements (RC, UC, UD). */
bool sv_qp_type_supported(enum ibv_qp_type type);

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
