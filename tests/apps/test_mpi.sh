#!/usr/bin/env bash
# Debian's Open MPI 4.1 and MPICH 4.0 on softverbs, 4 ranks on one host (issue 14). Each
# run is tests/apps/mpi/mpi_check.c, which checks its results (every rank pair's
# ping-pong bytes from 1 B to 4 MiB, MPI_Allreduce sums, MPI_Allgather contents, a 1 MiB
# MPI_Bcast from two roots) and prints one "mpi_check: ... ok" line per operation:
# - Open MPI, pml ucx restricted to softverbs (UCX_NET_DEVICES=softverbs0:1,
#   UCX_TLS=rc,self: rc_verbs with ud_verbs to wire it up; btl self only): UCX's lanes
#   (UCX_LOG_LEVEL=info) are self/memory0 to the rank itself and rc_verbs/softverbs0:1,
#   nothing else (no posix, sysv, cma, tcp), and every rank has an rc_verbs-only lane;
# - Open MPI, pml cm with mtl ofi on FI_PROVIDER='verbs;ofi_rxm': every rank's mtl says it
#   took the verbs provider on domain softverbs0;
# - MPICH (ch4:ucx) over UCX rc on softverbs0:1, lanes as for Open MPI;
# - the checks can fail: mpi_check --corrupt (one flipped byte) exits non-zero and says
#   where the difference is;
# - bad input: UCX_TLS=rc_mlx5 (an mlx5-only transport) makes Open MPI and MPICH fail
#   MPI_Init within 30 s, UCX naming the transport.
. "$(dirname "$0")/lib.sh" "$1"
for t in mpicc.openmpi mpirun.openmpi mpicc.mpich mpirun.mpich ucx_info; do need $t; done
need_view
SRC="$(dirname "$0")/mpi/mpi_check.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
OMPI=(mpirun.openmpi --allow-run-as-root --oversubscribe -np 4)

mpicc.openmpi -O2 -Wall -Wextra -Werror -o "$TMP/check_ompi" "$SRC" 2>"$TMP/cc_ompi"
check "mpi_check builds with mpicc.openmpi" test $? -eq 0
mpicc.mpich -O2 -Wall -Wextra -Werror -o "$TMP/check_mpich" "$SRC" 2>"$TMP/cc_mpich"
check "mpi_check builds with mpicc.mpich" test $? -eq 0

# What mpi_check prints on success, 4 ranks: one ERE a line.
mapfile -t OK <"$(dirname "$0")/mpi/mpi_check.4ranks"

# run NAME COMMAND...: bounded; exit 0 and mpi_check's lines, exactly.
run() {
  local name=$1 start=$SECONDS rc; shift
  timeout 120 "$SV" run "$@" >"$TMP/$name" 2>&1
  rc=$?
  echo "    $name: $((SECONDS - start)) s"
  check "$name: exits 0 (exit $rc)" test $rc -eq 0
  [ $rc -eq 0 ] || grep -vE 'gid_attrs|UCX  INFO' "$TMP/$name" | tail -n 8 | sed 's/^/    /'
  # Rank 0's lines, wherever they start: the launcher forwards each rank's output in
  # chunks, and another rank's unfinished line (a library's warning) can come before one
  # (MPICH's hydra did once: "mpi_check: 4 ranks" missed).
  grep -o 'mpi_check: .*' "$TMP/$name" >"$TMP/$name.lines"
  check "$name: mpi_check's results all ok" transcript "$TMP/$name.lines" "${OK[@]}"
}

# shellcheck disable=SC2054 # (the comma is UCX_TLS's list)
UCX_RC=(-x UCX_TLS=rc,self -x UCX_NET_DEVICES=softverbs0:1 -x UCX_LOG_LEVEL=info)
run ompi-ucx "${OMPI[@]}" --mca pml ucx --mca btl self "${UCX_RC[@]}" "$TMP/check_ompi"
check "ompi-ucx: UCX lanes rc_verbs/softverbs0:1 (and self) only" ucx_lanes "$TMP/ompi-ucx"

run ompi-ofi "${OMPI[@]}" --mca pml cm --mca mtl ofi --mca btl self \
  -x FI_PROVIDER='verbs;ofi_rxm' --mca mtl_base_verbose 1 --mca mtl_ofi_verbose 1 "$TMP/check_ompi"
check "ompi-ofi: 4 ranks' mtl ofi on verbs;ofi_rxm" \
  count_lines "$TMP/ompi-ofi" "mtl:ofi:prov: verbs;ofi_rxm$" 4
check "ompi-ofi: 4 ranks' mtl ofi on domain softverbs0" \
  count_lines "$TMP/ompi-ofi" "mtl:ofi:provider: softverbs0$" 4

run mpich-ucx mpirun.mpich -np 4 -env UCX_TLS rc,self -env UCX_NET_DEVICES softverbs0:1 \
  -env UCX_LOG_LEVEL info "$TMP/check_mpich"
check "mpich-ucx: UCX lanes rc_verbs/softverbs0:1 (and self) only" ucx_lanes "$TMP/mpich-ucx"

# The checks can fail: a byte flipped on receipt (rank 1, 1 KiB ping-pong).
timeout 120 "$SV" run mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --mca pml ucx \
  --mca btl self -x UCX_TLS=rc,self -x UCX_NET_DEVICES=softverbs0:1 \
  "$TMP/check_ompi" --corrupt >"$TMP/corrupt" 2>&1
rc=$?
check "corrupt: exits non-zero (exit $rc)" test $rc -ne 0 -a $rc -ne 124
check "corrupt: says where" contains "$TMP/corrupt" \
  "^rank 1: ping-pong (1024 B from rank 0) differs at byte 512: got 0x.., expected 0x..$"
check "corrupt: reports FAILED" contains "$TMP/corrupt" "^mpi_check: FAILED$"

# bad NAME COMMAND...: fails (not by the timeout) within 30 s, UCX naming rc_mlx5.
bad() {
  local name=$1 start=$SECONDS rc; shift
  timeout 120 "$SV" run "$@" >"$TMP/$name" 2>&1
  rc=$?
  check "$name: fails (exit $rc)" test $rc -ne 0 -a $rc -ne 124
  check "$name: within 30 s ($((SECONDS - start)) s)" test $((SECONDS - start)) -lt 30
  check "$name: says rc_mlx5 is not available" contains "$TMP/$name" "transport 'rc_mlx5' is not available"
  check "$name: mpi_check did not start" lacks "$TMP/$name" "^mpi_check:"
}
bad ompi-ucx-rc_mlx5 "${OMPI[@]}" --mca pml ucx --mca btl self -x UCX_TLS=rc_mlx5 \
  -x UCX_NET_DEVICES=softverbs0:1 "$TMP/check_ompi"
check "ompi-ucx-rc_mlx5: Open MPI says pml ucx cannot be selected" \
  contains "$TMP/ompi-ucx-rc_mlx5" "PML ucx cannot be selected"
bad mpich-ucx-rc_mlx5 mpirun.mpich -np 4 -env UCX_TLS rc_mlx5,self \
  -env UCX_NET_DEVICES softverbs0:1 "$TMP/check_mpich"
finish
