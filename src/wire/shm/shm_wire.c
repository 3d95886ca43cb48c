/* The shm wire's ops table: what the core calls (src/core/sv_wire.h), in the files of
 * src/wire/shm/ that do it. */
#include "wire/shm/shm_wire.h"

const struct sv_wire_ops sv_wire_shm = {
	.name = "shm",
	.seg_min = SHM_CHUNK, /* shm_seg_max cuts nothing smaller */
	.caps = SV_WIRE_ACKED | SV_WIRE_RNR | SV_WIRE_ATOMICS | SV_WIRE_IMM | SV_WIRE_SEND_IMM |
		SV_WIRE_DIRECT | SV_WIRE_ORDERED | SV_WIRE_RINGS,
	.qp_init = shm_qp_qp_init,
	.qp_fini = shm_qp_qp_fini,
	.qp_take = shm_qp_qp_take,
	.qp_leave = shm_qp_qp_leave,
	.publish = shm_qp_publish,
	.connect = shm_qp_connect_qpn,
	.attach = shm_qp_attach,
	.release = shm_qp_release,
	.disconnect = shm_qp_disconnect,
	.discard = shm_qp_discard,
	.reach = shm_qp_reach,
	.dropped = shm_qp_dropped,
	.seg_max = shm_seg_max,
	.send = shm_send,
	.direct = shm_direct,
	.direct_abandon = shm_direct_abandon,
	.batch_ready = shm_batch_ready,
	.write_batch = shm_write_batch,
	.abandon = shm_qp_abandon,
	.flush = shm_qp_flush,
	.poll = shm_rx_poll,
	.arm = shm_qp_arm,
	.disarm = shm_qp_disarm,
	.assist = shm_rx_assist,
	.local_peer = shm_qp_local_peer,
	.needs_timer = shm_qp_needs_timer,
	.timers = shm_qp_timers,
	.bad_pkeys = shm_qp_bad_pkeys,
	.mcast_attach = shm_mcast_attach,
	.mcast_detach = shm_mcast_detach,
	.mcast_count = shm_mcast_count,
	.mcast_members = shm_mcast_members,
};
