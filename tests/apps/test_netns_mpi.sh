#!/usr/bin/env bash
# Open MPI with ranks on two hosts (network namespaces A and B joined by a veth pair,
# tests/apps/netns.sh): 4 ranks of tests/apps/mpi/mpi_check.c, two in each namespace,
# over libfabric's verbs;ofi_rxm on softverbs (pml cm, mtl ofi; btl self only, so no TCP
# shortcut) — between the namespaces on softverbs' iWARP wire, within one on shm. mpirun
# runs in A and starts one orted in each namespace through a plm_rsh_agent that runs
# `ip netns exec HOST`. The test asserts:
# - mpi_check's results (every pair's ping-pong bytes 1 B .. 4 MiB, allreduce sums,
#   allgather contents, 1 MiB bcasts) all ok;
# - every rank's mtl took the verbs provider on softverbs0;
# - the ping-pongs between the namespaces crossed the veth pair (more than 16 MiB on it);
# Every rank has SOFTVERBS_LOOPBACK=0: libfabric otherwise offers the other host 127.0.0.1
# (docs/user-guide.md, "UCX, Open MPI and MPICH"; rdmacm_test_cm_api checks the rule).
# Skips (77) without root, Open MPI or the private view.
. "$(dirname "$0")/lib.sh" "$1"
NETNS_SH=$(cd "$(dirname "$0")" && pwd)/netns.sh
for t in mpicc.openmpi mpirun.openmpi ucx_info; do need $t; done
need_view
. "$NETNS_SH"
SRC="$(dirname "$0")/mpi/mpi_check.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mpicc.openmpi -O2 -Wall -Wextra -Werror -o "$TMP/check" "$SRC" 2>"$TMP/cc"
check "mpi_check builds with mpicc.openmpi" test $? -eq 0

ns_pair
# The rsh agent: "agent HOST COMMAND": COMMAND in HOST's namespace. The hosts are named
# hosta and hostb, not by their namespaces: Open MPI 4.1 compresses node names into a
# regex, and a name of dashes and digits (svt-PID-N-a) once came back as a node it "does
# not know how to route a message to".
cat >"$TMP/agent" <<EOF
#!/bin/sh
case \$1 in hosta) ns=$NS_A ;; hostb) ns=$NS_B ;; *) echo "agent: no host \$1" >&2; exit 1 ;; esac
shift
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$TMP/agent"
printf 'hosta slots=2\nhostb slots=2\n' >"$TMP/hosts"

# What mpi_check prints on success, 4 ranks: one ERE a line.
mapfile -t OK <"$(dirname "$0")/mpi/mpi_check.4ranks"

# mpi NAME SECS LOOPBACK: the 4 ranks across the namespaces, bounded, SOFTVERBS_LOOPBACK
# set to LOOPBACK on every rank; the transcript in $TMP/NAME, its status in $rc.
mpi() {
  local start=$SECONDS
  ip netns exec "$NS_A" timeout -k 5 "$2" mpirun.openmpi --allow-run-as-root --oversubscribe \
    -np 4 --hostfile "$TMP/hosts" --map-by node --mca plm_rsh_agent "$TMP/agent" \
    --mca routed direct --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include veth0 \
    --mca btl self --mca pml cm --mca mtl ofi --mca mtl_base_verbose 20 \
    -x FI_PROVIDER='verbs;ofi_rxm' -x SOFTVERBS_LOOPBACK="$3" -x SOFTVERBS_LOG=error \
    "$SV" run "$TMP/check" >"$TMP/$1" 2>&1
  rc=$?
  echo "    $1: $((SECONDS - start)) s, exit $rc"
}

before=$(ns_link_count "$NS_A" bytes)
mpi ofi 90 0
after=$(ns_link_count "$NS_A" bytes)
# Open MPI's launch across the namespaces (orted by the agent, its connection back to
# mpirun) once in about ten runs hung before any rank's MPI_Init: a few KB on the veth
# pair, no rank's mtl line. That is not softverbs': launch once more, and say so.
if [ "$rc" -ne 0 ] && [ $((after - before)) -lt $((1 << 20)) ] &&
   ! grep -q 'mtl:ofi:provider' "$TMP/ofi"; then
  echo "    Open MPI's launch did not reach MPI_Init ($((after - before)) bytes moved): once more"
  before=$(ns_link_count "$NS_A" bytes)
  mpi ofi 90 0
  after=$(ns_link_count "$NS_A" bytes)
fi
check "mtl ofi across the namespaces: exits 0" test "$rc" -eq 0
[ "$rc" -eq 0 ] || grep -vE 'mca: base|select' "$TMP/ofi" | tail -n 10 | sed 's/^/    /'
grep '^mpi_check:' "$TMP/ofi" >"$TMP/ofi.lines"
check "mtl ofi across the namespaces: mpi_check's results all ok" transcript "$TMP/ofi.lines" "${OK[@]}"
check "every rank's mtl took verbs on softverbs0" count_lines "$TMP/ofi" "mtl:ofi:provider: softverbs0" 4
moved=$((after - before))
echo "    veth0 of A: $moved bytes during the run"
check "the ping-pongs between the namespaces crossed the veth pair (> 16 MiB)" \
  test "$moved" -gt $((16 << 20))

finish
