#!/bin/bash
# softverbs against Linux's kernel Soft-RoCE (rxe), both directions: boots Debian's kernel
# with rxe in qemu (../shared/kvm, tap networking: host 10.199.0.1 in a network namespace
# of its own, guest 10.199.0.2) and runs Debian's unmodified programs with one end on
# softverbs (this build's libraries, on the host side of the tap) and the other on rxe0
# in the guest, exchanging QPNs and GIDs over their own TCP connection (no rdma_cm):
#   ibv_ud_pingpong -c (every message's data checked by the receiver), RUNS times each
#   way, sizes 64 and 1024 (rxe0's MTU on a 1500-byte link is 1024);
#   ib_send_lat -c UD -s 2 and ib_send_bw -c UD -s 1024 (perftest, -x GID index), once
#   each way
# and the same with both ends on rxe in the guest, for rxe's own figure beside ours
# (emulated kernel code: compare within one run only).
#
# usage: tests/interop/rxe.sh BUILD_DIR [--runs N] [--iters N] [--keep]
#   --runs N   each case N times each way (3)
#   --iters N  round trips per run (500)
#   --keep     keep the host side's logs (printed where)
# Needs root (a network namespace, a tap device, apt-get on first use) and the kvm
# harness beside the checkout (SOFTVERBS_KVM_DIR, default ../shared/kvm); skips (77)
# with a message otherwise. The harness's downloads and builds go under BUILD_DIR/kvm.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

if [ "${1:-}" = --host-side ]; then
  shift
  # ---- the host side: runs inside the tap's namespace (boot.sh --host-cmd) --------
  BUILD=$1 RUNS=$2 ITERS=$3 T=$4
  SV="$BUILD/bin/softverbs"
  G=10.199.0.2 H=10.199.0.1
  mkdir -p "$T"
  # usec/iter of a pingpong's log
  usec() { awk '/usec\/iter/ { print $(NF-1) }' "$1" | tail -n 1; }

  # The GID index of softverbs0 for 10.199.0.1 (IPv4 mapped), and rxe0's for the guest.
  HG=$("$SV" run ibv_devinfo -v 2>/dev/null |
       awk '/GID\[/ && /::ffff:10.199.0.1/ { sub(/.*GID\[ */, ""); sub(/\].*/, ""); print; exit }')
  GG=$(gsh "ibv_devinfo -d rxe0 -v" |
       awk '/GID\[/ && /::ffff:10.199.0.2/ { sub(/.*GID\[ */, ""); sub(/\].*/, ""); print; exit }')
  echo "GID index: softverbs0 ${HG:-?} (10.199.0.1), rxe0 ${GG:-?} (10.199.0.2)"
  [ -n "$HG" ] && [ -n "$GG" ] || { echo "FAIL no IPv4 GID on one side"; echo "0 passed, 1 failed"; exit 1; }

  # pp_ok RC LOG: exit 0, the iterations reported, nothing about bad data
  pp_ok() { [ "$1" -eq 0 ] && grep -q "$ITERS iters" "$2" && ! grep -qiE 'mismatch|fail' "$2"; }

  port=18600
  for size in 64 1024; do
    for r in $(seq "$RUNS"); do
      # softverbs client -> rxe server
      port=$((port + 1))
      gsh "ibv_ud_pingpong -d rxe0 -g $GG -c -s $size -n $ITERS -p $port > /tmp/us.log 2>&1 < /dev/null &" >/dev/null
      glisten $port >/dev/null
      timeout 60 "$SV" run ibv_ud_pingpong -g "$HG" -c -s $size -n "$ITERS" -p $port $G \
        > "$T/uc.log" 2>&1; rc=$?
      out=$(gsh "i=0; while pidof ibv_ud_pingpong >/dev/null && [ \$i -lt 100 ]; do sleep 0.2; i=\$((i+1)); done
                 killall -9 ibv_ud_pingpong 2>/dev/null; grep -c 'iters in' /tmp/us.log; grep -iE 'mismatch|fail' /tmp/us.log | head -2")
      check "ud_pingpong -s $size softverbs->rxe run $r (rc $rc, server: ${out//$'\n'/ })" \
        pp_ok $rc "$T/uc.log" ||
        { cp "$T/uc.log" "$T/fail-ud-sv-$size-$r.log"; tail -n 3 "$T/uc.log" | sed 's/^/    /'
          gsh "tail -n 5 /tmp/us.log; dmesg | tail -n 5" | sed 's/^/    guest: /'; }
      figure "ud_pingpong_$size" softverbs-client/rxe-server "$(usec "$T/uc.log")"
      # rxe client -> softverbs server
      port=$((port + 1))
      timeout 60 "$SV" run ibv_ud_pingpong -g "$HG" -c -s $size -n "$ITERS" -p $port \
        > "$T/us.log" 2>&1 &
      spid=$!
      hlisten $port
      out=$(gsh "timeout 60 ibv_ud_pingpong -d rxe0 -g $GG -c -s $size -n $ITERS -p $port $H > /tmp/uc.log 2>&1
                 echo \$?; awk '/usec\\/iter/ { print \$(NF-1) }' /tmp/uc.log | tail -n 1")
      wait $spid; src=$?
      set -- $out
      check "ud_pingpong -s $size rxe->softverbs run $r (client rc ${1:-?}, server rc $src)" \
        test "${1:-1}" -eq 0 -a "$src" -eq 0 ||
        { cp "$T/us.log" "$T/fail-ud-rxe-$size-$r.log"; tail -n 3 "$T/us.log" | sed 's/^/    /'
          gsh "tail -n 5 /tmp/uc.log" | sed 's/^/    guest: /'; }
      figure "ud_pingpong_$size" rxe-client/softverbs-server "${2:-?}"
    done
    # rxe with itself, same VM
    port=$((port + 1))
    out=$(gsh "ibv_ud_pingpong -d rxe0 -g $GG -s $size -n $ITERS -p $port > /tmp/bs.log 2>&1 < /dev/null & s=\$!
               . /guest/lib.sh; kvmh_wait_tcp_listen $port 30
               timeout 60 ibv_ud_pingpong -d rxe0 -g $GG -s $size -n $ITERS -p $port $G > /tmp/bc.log 2>&1
               wait \$s; awk '/usec\\/iter/ { print \$(NF-1) }' /tmp/bc.log | tail -n 1")
    figure "ud_pingpong_$size" rxe/rxe "$out"
  done
  # perftest over UD (-c UD, its own exchange over TCP, GIDs by index): PROG SIZE FIELD
  # (the column of the client's result line that is the figure)
  perf_ud() {
    local prog=$1 size=$2 col=$3 out rc src v
    port=$((port + 1))
    gsh "timeout 60 $prog -d rxe0 -x $GG -c UD -s $size -n $ITERS -p $port > /tmp/ps.log 2>&1 < /dev/null &" >/dev/null
    glisten $port >/dev/null
    timeout 60 "$SV" run $prog -x "$HG" -c UD -s $size -n "$ITERS" -p $port $G > "$T/pc.log" 2>&1; rc=$?
    gsh "i=0; while pidof $prog >/dev/null && [ \$i -lt 100 ]; do sleep 0.2; i=\$((i+1)); done" >/dev/null
    v=$(awk -v s=$size -v c=$col '$1 == s && NF >= c { v = $c } END { print v }' "$T/pc.log")
    check "$prog -c UD -s $size softverbs->rxe (rc $rc, ${v:-no figure})" test "$rc" -eq 0 -a -n "$v" ||
      tail -n 3 "$T/pc.log" | sed 's/^/    /'
    figure "${prog}_ud_$size" softverbs-client/rxe-server "${v:-?}"
    port=$((port + 1))
    timeout 60 "$SV" run $prog -x "$HG" -c UD -s $size -n "$ITERS" -p $port > "$T/ps.log" 2>&1 &
    local spid=$!
    hlisten $port
    out=$(gsh "timeout 60 $prog -d rxe0 -x $GG -c UD -s $size -n $ITERS -p $port $H > /tmp/pc.log 2>&1
               echo \$?; awk -v s=$size -v c=$col '\$1 == s && NF >= c { v = \$c } END { print v }' /tmp/pc.log")
    wait $spid; src=$?
    set -- $out
    check "$prog -c UD -s $size rxe->softverbs (client rc ${1:-?}, server rc $src, ${2:-no figure})" \
      test "${1:-1}" -eq 0 -a "$src" -eq 0 -a -n "${2:-}" || tail -n 3 "$T/ps.log" | sed 's/^/    /'
    figure "${prog}_ud_$size" rxe-client/softverbs-server "${2:-?}"
    # rxe with itself, same VM
    port=$((port + 1))
    out=$(gsh "$prog -d rxe0 -x $GG -c UD -s $size -n $ITERS -p $port > /tmp/bs.log 2>&1 < /dev/null & s=\$!
               . /guest/lib.sh; kvmh_wait_tcp_listen $port 30
               timeout 60 $prog -d rxe0 -x $GG -c UD -s $size -n $ITERS -p $port $G > /tmp/bc.log 2>&1
               wait \$s; awk -v s=$size -v c=$col '\$1 == s && NF >= c { v = \$c } END { print v }' /tmp/bc.log")
    figure "${prog}_ud_$size" rxe/rxe "$out"
  }
  perf_ud ib_send_lat 2 5   # t_typical, us
  perf_ud ib_send_bw 1024 4 # BW average, MB/s
  gsh "rdma statistic show link rxe0/1" |
    awk '{ for (i = 1; i < NF; i++) if ($i ~ /pkts|seq|err|drop|dup/) printf " %s %s", $i, $(i + 1) }
         END { print "" }' | sed 's/^/rxe0 counters:/'
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
  exit $?
fi

# ---- the host: build the VM if needed, boot it, run the host side in its namespace -------
BUILD=${1:?usage: rxe.sh BUILD_DIR [--runs N] [--iters N] [--keep]}
BUILD=$(cd "$BUILD" && pwd)
shift
RUNS=3 ITERS=500 KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "rxe.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
vm_ready rxe "$BUILD"
T=$(mktemp -d /tmp/sv-rxe.XXXXXX)
vm_run rxe "bash '$HERE/rxe.sh' --host-side '$BUILD' $RUNS $ITERS '$T'" \
  "medians; pingpongs: usec per round trip; lat: t_typical us; bw: MB/s" 18
rc=$?
[ "$KEEP" = 1 ] || rm -rf "$T"
exit $rc
