#!/bin/bash
# softverbs against Linux's kernel soft-iWARP (siw), both directions: boots Debian's
# kernel with siw in qemu (../shared/kvm: fetch.sh, build-initramfs.sh, boot.sh; tap
# networking, host 10.199.0.1 in a network namespace of its own, guest 10.199.0.2) and
# runs Debian's unmodified rdma_cm programs with one end on softverbs (this build's
# libraries, on the host side of the tap) and the other on siw0 in the guest:
#   rping -v -V -C COUNT        (RUNS times each way; every ping's data checked by
#                                both ends, each end's count of pings checked)
#   ucmatose, rdma_server/rdma_client, cmtime
#   perftest -R: ib_{send,write,read}_{lat,bw}
# and the same perftest and rping with both ends on siw in the guest, for siw's own
# figures beside ours (emulated kernel code: compare within one run only).
#
# usage: tests/interop/siw.sh BUILD_DIR [--runs N] [--perf-runs N] [--count N] [--quick]
#                                        [--keep]
#   --runs N       rping, ucmatose, rdma_server/client and cmtime N times each way (10)
#   --perf-runs N  each perftest N times each way and with siw alone (3)
#   --quick        one run each, 200 pings, perftest write only
#   --keep    keep the host side's logs (printed where)
# Needs root (a network namespace, a tap device, apt-get on first use) and the kvm
# harness beside the checkout (SOFTVERBS_KVM_DIR, default ../shared/kvm); skips (77)
# with a message otherwise. What the harness downloads and builds goes under
# BUILD_DIR/kvm (KVM_CACHE, KVM_BUILD, KVM_OUT), since ../shared may be read-only.
# The first run fetches ~230 MB of Debian packages and builds siw.ko (a few minutes);
# a boot takes ~10 s, the whole matrix ~5 minutes under TCG.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

if [ "${1:-}" = --host-side ]; then
  shift
  # ---- the host side: runs inside the tap's namespace (boot.sh --host-cmd) --------
  BUILD=$1 RUNS=$2 COUNT=$3 QUICK=$4 T=$5 PRUNS=$6
  SV="$BUILD/bin/softverbs"
  G=10.199.0.2 H=10.199.0.1
  mkdir -p "$T"
  # gwait: until no program of the test runs in the guest (30 s), then none does.
  gwait() {
    gsh 'i=0; while pidof rping ucmatose rdma_server cmtime ib_send_lat ib_send_bw \
           ib_write_lat ib_write_bw ib_read_lat ib_read_bw >/dev/null && [ $i -lt 150 ]; do
           sleep 0.2; i=$((i + 1)); done
         killall -9 rping ucmatose rdma_server cmtime ib_send_lat ib_send_bw ib_write_lat \
           ib_write_bw ib_read_lat ib_read_bw 2>/dev/null; true'
  }

  # rping_ok LOG_CLIENT RC N_CLIENT N_SERVER: exit 0, every ping seen by the server,
  # all but possibly the last by the client (rping's client prints the ping it got back
  # before it sends the next: the last is not printed when the server ends first), no
  # mismatch reported by -V.
  rping_ok() {
    [ "$2" -eq 0 ] && [ "$3" -ge $((COUNT - 1)) ] && [ "$4" -eq "$COUNT" ] &&
      ! grep -qiE 'mismatch|error' "$1"
  }

  port=7200
  for r in $(seq "$RUNS"); do
    # softverbs client -> siw server
    port=$((port + 1))
    gsh "rping -s -a $G -p $port -C $COUNT -v -V > /tmp/rs.log 2>&1 < /dev/null &" >/dev/null
    glisten $port >/dev/null
    t0=$(date +%s.%N)
    timeout 120 "$SV" run rping -c -a $G -p $port -C "$COUNT" -v -V > "$T/rc.log" 2>&1; rc=$?
    t1=$(date +%s.%N)
    gwait >/dev/null
    ns=$(gsh "grep -c 'ping data' /tmp/rs.log")
    nc=$(grep -c 'ping data' "$T/rc.log")
    check "rping softverbs->siw run $r ($nc/$ns pings, rc $rc)" rping_ok "$T/rc.log" $rc "$nc" "$ns" ||
      { cp "$T/rc.log" "$T/fail-rping-sv-$r.log"
        gsh "tail -n 5 /tmp/rs.log; dmesg | tail -n 20" > "$T/fail-rping-sv-$r.guest"; }
    figure rping_s softverbs-client/siw-server "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
    # siw client -> softverbs server
    port=$((port + 1))
    timeout 130 "$SV" run rping -s -a $H -p $port -C "$COUNT" -v -V > "$T/rs.log" 2>&1 &
    spid=$!
    hlisten $port
    out=$(gsh "t0=\$(cut -d' ' -f1 /proc/uptime); timeout 120 rping -c -a $H -p $port -C $COUNT -v -V > /tmp/rc.log 2>&1
               echo \$? \$(grep -c 'ping data' /tmp/rc.log) \$t0 \$(cut -d' ' -f1 /proc/uptime)
               grep -iE 'mismatch|error' /tmp/rc.log | head -3")
    wait $spid
    ns=$(grep -c 'ping data' "$T/rs.log")
    set -- $out
    check "rping siw->softverbs run $r ($2/$ns pings, rc $1)" rping_ok "$T/rs.log" "$1" "$2" "$ns" ||
      { cp "$T/rs.log" "$T/fail-rping-siw-$r.log"
        gsh "tail -n 5 /tmp/rc.log; dmesg | tail -n 20" > "$T/fail-rping-siw-$r.guest"; }
    figure rping_s siw-client/softverbs-server "$(awk -v a="$3" -v b="$4" 'BEGIN { print b - a }')"
  done
  # siw with itself, same VM
  port=$((port + 1))
  out=$(gsh "rping -s -a $G -p $port -C $COUNT -v -V > /tmp/bs.log 2>&1 < /dev/null & s=\$!
             . /guest/lib.sh; kvmh_wait_tcp_listen $port 30
             t0=\$(cut -d' ' -f1 /proc/uptime); timeout 120 rping -c -a $G -p $port -C $COUNT -v -V > /tmp/bc.log 2>&1
             echo \$? \$t0 \$(cut -d' ' -f1 /proc/uptime); wait \$s")
  set -- $out
  figure rping_s siw/siw "$(awk -v a="$2" -v b="$3" 'BEGIN { print b - a }')"

  # simple rdma_cm programs: NAME SERVER-ARGS CLIENT-ARGS (addresses filled in)
  cm_prog() {
    local name=$1 sargs=$2 cargs=$3 sbin=$1 cbin=$1 out rc
    [ "$name" = rdma_server ] && cbin=rdma_client
    port=$((port + 1))
    gsh "$sbin ${sargs//ADDR/$G} -p $port > /tmp/ps.log 2>&1 < /dev/null &" >/dev/null
    glisten $port >/dev/null
    timeout 60 "$SV" run $cbin ${cargs//ADDR/$G} -p $port > "$T/pc.log" 2>&1; rc=$?
    out=$(gsh "i=0; while pidof $sbin >/dev/null && [ \$i -lt 100 ]; do sleep 0.2; i=\$((i+1)); done
               pidof $sbin >/dev/null && { killall -9 $sbin; echo killed; }; true")
    [ "$name" = cmtime ] && out= # its server waits for ever: killed once the client is done
    check "$name softverbs->siw (client rc $rc${out:+, server $out})" \
      test "$rc" -eq 0 -a -z "$out"
    [ "$rc" -eq 0 ] || tail -n 3 "$T/pc.log" | sed 's/^/    /'
    port=$((port + 1))
    timeout 60 "$SV" run $sbin ${sargs//ADDR/$H} -p $port > "$T/ps.log" 2>&1 &
    local spid=$!
    hlisten $port
    out=$(gsh "timeout 60 $cbin ${cargs//ADDR/$H} -p $port > /tmp/pc.log 2>&1; echo \$?; tail -n 3 /tmp/pc.log")
    # cmtime's server waits for ever: ended once its client is done (timeout passes the
    # TERM on), not after the minute
    [ "$name" = cmtime ] && kill "$spid" 2>/dev/null
    wait $spid; local src=$?
    [ "$name" = cmtime ] && src=0 # its server waits for ever: timeout ends it
    check "$name siw->softverbs (client rc ${out%%$'\n'*}, server rc $src)" \
      test "${out%%$'\n'*}" = 0 -a "$src" -eq 0 ||
      { echo "$out" | tail -n +2 | sed 's/^/    client: /'; tail -n 3 "$T/ps.log" | sed 's/^/    server: /'; }
  }
  for r in $(seq "$RUNS"); do
    cm_prog ucmatose "-b ADDR" "-s ADDR"
    cm_prog rdma_server "-s ADDR" "-s ADDR"
    cm_prog cmtime "-b ADDR -c 10" "-s ADDR -c 10"
  done

  # perftest -R: TEST SIZE; the figure is t_typical (lat) or BW average (bw)
  pt_value() { # LOG KIND
    awk -v k="$2" '$1 ~ /^[0-9]+$/ && NF >= 5 { v = (k == "lat") ? $5 : $4 } END { print v }' "$1"
  }
  perf() {
    local t=$1 size=$2 kind=${1##*_} iters=1000 out v pre=()
    # perftest's ib_send_bw exchanges credits only where the local device's transport is
    # iWARP: the softverbs end presents softverbs0 as an RNIC then, as siw0 is.
    [ "$t" = ib_send_bw ] && pre=(env SOFTVERBS_TRANSPORT=iwarp)
    port=$((port + 1))
    gsh "$t -R -d siw0 -p $port -n $iters -s $size > /tmp/ts.log 2>&1 < /dev/null &" >/dev/null
    glisten $port >/dev/null
    timeout 120 "${pre[@]}" "$SV" run $t -R -p $port -n $iters -s "$size" $G > "$T/tc.log" 2>&1; rc=$?
    gwait >/dev/null
    v=$(pt_value "$T/tc.log" "$kind")
    check "$t -s $size softverbs->siw (rc $rc, $v)" test "$rc" -eq 0 -a -n "$v"
    [ "$rc" -eq 0 ] || tail -n 3 "$T/tc.log" | sed 's/^/    /'
    figure "$t" softverbs-client/siw-server "$v"
    port=$((port + 1))
    timeout 130 "${pre[@]}" "$SV" run $t -R -p $port -n $iters -s "$size" > "$T/ts.log" 2>&1 &
    local spid=$!
    hlisten $port
    gsh "timeout 120 $t -R -d siw0 -p $port -n $iters -s $size $H > /tmp/tc.log 2>&1; echo rc=\$?" > "$T/tcg.rc"
    gsh "cat /tmp/tc.log" > "$T/tcg.log"
    wait $spid; local src=$?
    v=$(pt_value "$T/tcg.log" "$kind")
    check "$t -s $size siw->softverbs (rc $(cat "$T/tcg.rc"), server rc $src, $v)" \
      test "$(cat "$T/tcg.rc")" = rc=0 -a "$src" -eq 0 -a -n "$v" ||
      tail -n 3 "$T/tcg.log" | sed 's/^/    /'

    figure "$t" siw-client/softverbs-server "$v"
    port=$((port + 1))
    gsh "$t -R -d siw0 -p $port -n $iters -s $size > /tmp/bs.log 2>&1 < /dev/null &
         . /guest/lib.sh; kvmh_wait_tcp_listen $port 30
         timeout 120 $t -R -d siw0 -p $port -n $iters -s $size $G > /tmp/bc.log 2>&1" >/dev/null
    gwait >/dev/null
    gsh "cat /tmp/bc.log" > "$T/bc.log"
    figure "$t" siw/siw "$(pt_value "$T/bc.log" "$kind")"
  }
  for r in $(seq "$PRUNS"); do
    if [ "$QUICK" = 1 ]; then
      perf ib_write_lat 2
      perf ib_write_bw 65536
    else
      perf ib_send_lat 2
      perf ib_send_bw 65536
      for t in write read; do
        perf ib_${t}_lat 2
        perf ib_${t}_bw 65536
      done
    fi
  done
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
  exit
fi

# ---- the outer side: set up, boot, report -----------------------------------------------
BUILD=${1:?usage: siw.sh BUILD_DIR [--runs N] [--perf-runs N] [--count N] [--quick] [--keep]}
BUILD=$(cd "$BUILD" && pwd)
shift
RUNS=10 PRUNS=3 COUNT=1000 QUICK=0 KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --perf-runs) PRUNS=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --quick) QUICK=1 RUNS=1 PRUNS=1 COUNT=200; shift ;;
    --keep) KEEP=1; shift ;;
    *) echo "siw.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
vm_ready siw "$BUILD"
T=$(mktemp -d /tmp/sv-siw.XXXXXX)
vm_run siw "bash '$HERE/siw.sh' --host-side '$BUILD' $RUNS $COUNT $QUICK '$T' $PRUNS" \
  "medians; rping: seconds for $COUNT pings; lat: t_typical us; bw: MB/s" 14
rc=$?
[ "$KEEP" = 1 ] || rm -rf "$T"
exit $rc
