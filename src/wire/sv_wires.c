#include "wire/sv_wires.h"

#include "wire/shm/shm_wire.h"

const struct sv_wire_ops *sv_wire_for_qp(void)
{
	return &sv_wire_shm;
}
