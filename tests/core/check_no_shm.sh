#!/bin/bash
# The proof that the core needs nothing of shm: the program of test_core_wire.c (the
# verbs layer, libsvcore.a and the test wire) holds no symbol of src/wire/shm, and no
# sv_wires.c (which would choose the shm wire). It must hold the core's data path and
# the test wire, or the check says nothing.
#
# usage: check_no_shm.sh PROGRAM          Exit 0 pass, 1 fail, 77 skip (no nm).
set -u
export LC_ALL=C
prog=${1:?usage: check_no_shm.sh PROGRAM}
if ! command -v nm >/dev/null; then
	echo "SKIP: nm not found (install binutils)"
	exit 77
fi
syms=$(nm "$prog") || { echo "FAIL: nm $prog"; exit 1; }
rc=0
for want in sv_resp_deliver sv_comp_deliver sv_resp_flush sv_qp_tx_locked ibv_create_qp tw_wire; do
	if ! grep -qE " [A-Za-z] ${want}\$" <<<"$syms"; then
		echo "FAIL: $want is not in $prog: the check would prove nothing"
		rc=1
	fi
done
shm=$(grep -E ' [A-Za-z] (shm_[A-Za-z0-9_]*|sv_wire_shm)$' <<<"$syms")
if [ -n "$shm" ]; then
	echo "FAIL: symbols of src/wire/shm linked in:"
	echo "$shm"
	rc=1
fi
if grep -qE ' [A-Za-z] (sv_wire_for_qp)$' <<<"$syms" &&
   ! grep -qE ' [A-Za-z] tw_wire$' <<<"$syms"; then
	echo "FAIL: sv_wire_for_qp is not the test's"
	rc=1
fi
[ $rc -eq 0 ] && echo "PASS: no symbol of src/wire/shm in $(basename "$prog")"
exit $rc
