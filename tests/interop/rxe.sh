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
#   RC over RoCE v2 (softverbs' own choice for a host without softverbs): ibv_rc_pingpong -c (64 and 4096 bytes) and
#   ibv_srq_pingpong -c and ibv_uc_pingpong -c (UC), RUNS times each way; perftest's
#   send/write/read/atomic latency
#   and send/write/read bandwidth, once each way (MTU 1024 on both sides)
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
  # pp_ways KIND PROG SIZE [ARGS...]: PROG with -c and ARGS between softverbs and rxe,
  # RUNS times each way, then rxe with itself for its own figure. (RC: softverbs finds no
  # softverbs on the guest and takes RoCE v2 by itself.)
  pp_ways() {
    local kind=$1 prog=$2 size=$3 r rc src out args
    shift 3
    args=("$@") # (the loop's set -- takes the positional parameters)
    for r in $(seq "$RUNS"); do
      # softverbs client -> rxe server
      port=$((port + 1))
      gsh "$prog -d rxe0 -g $GG ${args[*]} -c -s $size -n $ITERS -p $port > /tmp/ps.log 2>&1 < /dev/null &" >/dev/null
      glisten $port >/dev/null
      timeout 60 "$SV" run $prog -g "$HG" "${args[@]}" -c -s $size -n "$ITERS" -p $port $G \
        > "$T/pc.log" 2>&1; rc=$?
      out=$(gsh "i=0; while pidof $prog >/dev/null && [ \$i -lt 100 ]; do sleep 0.2; i=\$((i+1)); done
                 killall -9 $prog 2>/dev/null; grep -c 'iters in' /tmp/ps.log; grep -iE 'mismatch|fail' /tmp/ps.log | head -2")
      check "$prog -s $size softverbs->rxe run $r (rc $rc, server: ${out//$'\n'/ })" \
        pp_ok $rc "$T/pc.log" ||
        { cp "$T/pc.log" "$T/fail-$kind-sv-$prog-$size-$r.log"; tail -n 3 "$T/pc.log" | sed 's/^/    /'
          gsh "tail -n 5 /tmp/ps.log; dmesg | tail -n 5" | sed 's/^/    guest: /'; }
      figure "${prog}_$size" softverbs-client/rxe-server "$(usec "$T/pc.log")"
      # rxe client -> softverbs server
      port=$((port + 1))
      timeout 60 "$SV" run $prog -g "$HG" "${args[@]}" -c -s $size -n "$ITERS" -p $port \
        > "$T/ps.log" 2>&1 &
      spid=$!
      hlisten $port
      out=$(gsh "timeout 60 $prog -d rxe0 -g $GG ${args[*]} -c -s $size -n $ITERS -p $port $H > /tmp/pc.log 2>&1
                 echo \$?; awk '/usec\\/iter/ { print \$(NF-1) }' /tmp/pc.log | tail -n 1")
      wait $spid; src=$?
      set -- $out
      check "$prog -s $size rxe->softverbs run $r (client rc ${1:-?}, server rc $src)" \
        test "${1:-1}" -eq 0 -a "$src" -eq 0 ||
        { cp "$T/ps.log" "$T/fail-$kind-rxe-$prog-$size-$r.log"; tail -n 3 "$T/ps.log" | sed 's/^/    /'
          gsh "tail -n 5 /tmp/pc.log" | sed 's/^/    guest: /'; }
      figure "${prog}_$size" rxe-client/softverbs-server "${2:-?}"
    done
    # rxe with itself, same VM
    port=$((port + 1))
    out=$(gsh "$prog -d rxe0 -g $GG ${args[*]} -s $size -n $ITERS -p $port > /tmp/bs.log 2>&1 < /dev/null & s=\$!
               . /guest/lib.sh; kvmh_wait_tcp_listen $port 30
               timeout 60 $prog -d rxe0 -g $GG ${args[*]} -s $size -n $ITERS -p $port $G > /tmp/bc.log 2>&1
               wait \$s; awk '/usec\\/iter/ { print \$(NF-1) }' /tmp/bc.log | tail -n 1")
    figure "${prog}_$size" rxe/rxe "$out"
  }
  # perf_ways KIND PROG SIZE FIELD [ARGS...]: perftest between softverbs and rxe, once each
  # way (FIELD: the column of the client's result line that is the figure), then rxe
  # with itself.
  perf_ways() {
    local kind=$1 prog=$2 size=$3 col=$4 out rc src v
    shift 4
    port=$((port + 1))
    gsh "timeout 60 $prog -d rxe0 -x $GG $* -s $size -n $ITERS -p $port > /tmp/ps.log 2>&1 < /dev/null &" >/dev/null
    glisten $port >/dev/null
    timeout 60 "$SV" run $prog -x "$HG" "$@" -s $size -n "$ITERS" -p $port $G \
      > "$T/pc.log" 2>&1; rc=$?
    gsh "i=0; while pidof $prog >/dev/null && [ \$i -lt 100 ]; do sleep 0.2; i=\$((i+1)); done" >/dev/null
    v=$(awk -v s=$size -v c=$col '$1 == s && NF >= c { v = $c } END { print v }' "$T/pc.log")
    check "$prog $* -s $size softverbs->rxe (rc $rc, ${v:-no figure})" test "$rc" -eq 0 -a -n "$v" ||
      tail -n 3 "$T/pc.log" | sed 's/^/    /'
    figure "${prog}_${kind}_$size" softverbs-client/rxe-server "${v:-?}"
    port=$((port + 1))
    timeout 60 "$SV" run $prog -x "$HG" "$@" -s $size -n "$ITERS" -p $port \
      > "$T/ps.log" 2>&1 &
    local spid=$!
    hlisten $port
    out=$(gsh "timeout 60 $prog -d rxe0 -x $GG $* -s $size -n $ITERS -p $port $H > /tmp/pc.log 2>&1
               echo \$?; awk -v s=$size -v c=$col '\$1 == s && NF >= c { v = \$c } END { print v }' /tmp/pc.log")
    wait $spid; src=$?
    set -- $out
    check "$prog -s $size rxe->softverbs (client rc ${1:-?}, server rc $src, ${2:-no figure})" \
      test "${1:-1}" -eq 0 -a "$src" -eq 0 -a -n "${2:-}" || tail -n 3 "$T/ps.log" | sed 's/^/    /'
    figure "${prog}_${kind}_$size" rxe-client/softverbs-server "${2:-?}"
  }
  pp_ways ud ibv_ud_pingpong 64
  pp_ways ud ibv_ud_pingpong 1024
  perf_ways ud ib_send_lat 2 5 -c UD   # t_typical, us
  perf_ways ud ib_send_bw 1024 4 -c UD # BW average, MB/s
  # RC over RoCE v2: MTU 1024 on both sides (rxe0's on a 1500-byte link)
  pp_ways rc ibv_rc_pingpong 64 -m 1024
  pp_ways rc ibv_rc_pingpong 4096 -m 1024
  pp_ways rc ibv_srq_pingpong 4096 -m 1024
  # UC over RoCE v2 (nothing is lost on the tap: every message arrives)
  pp_ways uc ibv_uc_pingpong 4096 -m 1024
  for p in "ib_send_lat 2" "ib_write_lat 2" "ib_read_lat 2" "ib_atomic_lat 8"; do
    perf_ways rc $p 5 -m 1024
  done
  for p in ib_send_bw ib_write_bw ib_read_bw; do
    perf_ways rc $p 65536 4 -m 1024
  done
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
