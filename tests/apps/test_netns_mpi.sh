#!/usr/bin/env bash
# MPI with ranks on two hosts (network namespaces A and B joined by a veth pair,
# tests/apps/netns.sh): 4 ranks of tests/apps/mpi/mpi_check.c, two in each namespace, in
# three runs, each with no TCP or shared-memory shortcut of the stack's own:
# - Open MPI, pml cm / mtl ofi on libfabric's verbs;ofi_rxm (btl self only);
# - Open MPI, pml ucx with UCX_TLS=rc,self on softverbs0:1 (UCX's rc_verbs, wired up
#   over ud_verbs: the UD datagrams between the namespaces go on softverbs' UDP wire);
# - MPICH over UCX, the same UCX settings.
# Between the namespaces the connected QPs move to softverbs' iWARP wire, within one
# they stay on shm. Open MPI's mpirun runs in A and starts one orted in each namespace
# through a plm_rsh_agent that runs `ip netns exec HOST`; MPICH's mpiexec the same through
# hydra's rsh launcher. Each run asserts:
# - mpi_check's results (every pair's ping-pong bytes 1 B .. 4 MiB, allreduce sums,
#   allgather contents, 1 MiB bcasts) all ok;
# - every rank took softverbs0 (mtl ofi's provider line; UCX's lanes rc_verbs/softverbs0:1);
# - the ping-pongs between the namespaces crossed the veth pair (more than 16 MiB on it).
# Every rank has SOFTVERBS_LOOPBACK=0: libfabric otherwise offers the other host 127.0.0.1
# (docs/user-guide.md, "UCX, Open MPI and MPICH"; rdmacm_test_cm_api checks the rule).
# Skips (77) without root, Open MPI, MPICH or the private view.
. "$(dirname "$0")/lib.sh" "$1"
NETNS_SH=$(cd "$(dirname "$0")" && pwd)/netns.sh
for t in mpicc.openmpi mpirun.openmpi mpicc.mpich mpirun.mpich ucx_info; do need $t; done
need_view
. "$NETNS_SH"
SRC="$(dirname "$0")/mpi/mpi_check.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mpicc.openmpi -O2 -Wall -Wextra -Werror -o "$TMP/check" "$SRC" 2>"$TMP/cc"
check "mpi_check builds with mpicc.openmpi" test $? -eq 0
mpicc.mpich -O2 -Wall -Wextra -Werror -o "$TMP/check_mpich" "$SRC" 2>"$TMP/cc_mpich"
check "mpi_check builds with mpicc.mpich" test $? -eq 0

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

# ompi NAME SECS ARGS...: Open MPI's 4 ranks across the namespaces, bounded, with ARGS
# (the pml and its settings); the transcript in $TMP/NAME, its status in $rc, the bytes
# through A's veth0 in $moved.
ompi() {
  local name=$1 secs=$2
  shift 2
  ip netns exec "$NS_A" timeout -k 5 "$secs" mpirun.openmpi --allow-run-as-root \
    --oversubscribe -np 4 --hostfile "$TMP/hosts" --map-by node --mca plm_rsh_agent "$TMP/agent" \
    --mca routed direct --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include veth0 \
    --mca btl self -x SOFTVERBS_LOOPBACK=0 -x SOFTVERBS_LOG=error "$@" \
    "$SV" run "$TMP/check" >"$TMP/$name" 2>&1
}

# mpich NAME SECS ARGS...: the same with MPICH's mpiexec (hydra, its rsh launcher).
mpich() {
  local name=$1 secs=$2
  shift 2
  ip netns exec "$NS_A" timeout -k 5 "$secs" mpirun.mpich -launcher rsh \
    -launcher-exec "$TMP/agent" -hosts hosta:2,hostb:2 -iface veth0 -np 4 \
    -env SOFTVERBS_LOOPBACK 0 -env SOFTVERBS_LOG error "$@" \
    "$SV" run "$TMP/check_mpich" >"$TMP/$name" 2>&1
}

# run LAUNCHER NAME ARGS...: one run, timed, with the bytes it moved across the veth pair.
# Open MPI's launch across the namespaces (orted by the agent, its connection back to
# mpirun) once in about ten runs hung before any rank's MPI_Init: a few KB on the veth
# pair, no rank's output. That is not softverbs': launch once more, and say so.
run() {
  local launcher=$1 name=$2 start=$SECONDS before after
  shift 2
  before=$(ns_link_count "$NS_A" bytes)
  "$launcher" "$name" 90 "$@"
  rc=$?
  after=$(ns_link_count "$NS_A" bytes)
  if [ "$rc" -ne 0 ] && [ $((after - before)) -lt $((1 << 20)) ] &&
     ! grep -q '^mpi_check:' "$TMP/$name"; then
    echo "    $name: the launch did not reach MPI_Init ($((after - before)) bytes moved): once more"
    before=$(ns_link_count "$NS_A" bytes)
    "$launcher" "$name" 90 "$@"
    rc=$?
    after=$(ns_link_count "$NS_A" bytes)
  fi
  moved=$((after - before))
  echo "    $name: $((SECONDS - start)) s, exit $rc, veth0 of A: $moved bytes"
  check "$name across the namespaces: exits 0" test "$rc" -eq 0
  [ "$rc" -eq 0 ] || grep -vE 'mca: base|select|UCX  INFO|gid_attrs' "$TMP/$name" | tail -n 10 | sed 's/^/    /'
  # Rank 0's lines, wherever they start: the launcher forwards each rank's output in
  # chunks, and another rank's unfinished line (a library's warning) can come before one
  # (MPICH's hydra did once: "mpi_check: 4 ranks" missed), or a whole UCX log line in the
  # middle of one ("m[...] UCX  INFO ep_cfg...\npi_check: 4 ranks"): such a line and its
  # end are taken out first, joining the two halves.
  perl -0pe 's/\[[0-9.]+\] \[[^\]\n]*\]\s+\S+:\d+\s+UCX\s+[A-Z]+\s[^\n]*\n//g' "$TMP/$name" |
    grep -o 'mpi_check: .*' >"$TMP/$name.lines"
  check "$name across the namespaces: mpi_check's results all ok" \
    transcript "$TMP/$name.lines" "${OK[@]}"
  check "$name: the ping-pongs between the namespaces crossed the veth pair (> 16 MiB)" \
    test "$moved" -gt $((16 << 20))
}

run ompi ofi --mca pml cm --mca mtl ofi --mca mtl_base_verbose 20 -x FI_PROVIDER='verbs;ofi_rxm'
check "ofi: every rank's mtl took verbs on softverbs0" \
  count_lines "$TMP/ofi" "mtl:ofi:provider: softverbs0" 4

# shellcheck disable=SC2054 # (the comma is UCX_TLS's list)
run ompi ompi-ucx --mca pml ucx -x UCX_TLS=rc,self -x UCX_NET_DEVICES=softverbs0:1 \
  -x UCX_LOG_LEVEL=info
check "ompi-ucx: UCX lanes rc_verbs/softverbs0:1 (and self) only" ucx_lanes "$TMP/ompi-ucx"

run mpich mpich-ucx -env UCX_TLS rc,self -env UCX_NET_DEVICES softverbs0:1 -env UCX_LOG_LEVEL info
check "mpich-ucx: UCX lanes rc_verbs/softverbs0:1 (and self) only" ucx_lanes "$TMP/mpich-ucx"

finish
