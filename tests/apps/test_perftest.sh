#!/usr/bin/env bash
# Debian's unmodified perftest on softverbs: each benchmark runs to completion between
# two processes, with both copy paths, -a, and over XRC. perftest 4.5 has no data
# validation: what is checked is its result table — exactly one row per message size
# asked, each with the size and the iteration count asked and a non-zero figure —
# and that neither side printed an error. (bench/ measures; this only checks they run.)
. "$(dirname "$0")/lib.sh" "$1"
need ib_send_lat
P=18620
N=1000

# perf NAME SIZE ITERS PROGRAM ARGS...: a checked pair; SIZE "-" for the default size,
# "all" for -a (2 to 8 MiB).
perf() {
  local name=$1 size=$2 iters=$3 prog=$4 sizes side; shift 4
  local args=(-n "$iters")
  case $size in
  all) args+=(-a); sizes=$(for i in $(seq 1 23); do echo $((1 << i)); done) ;;
  *) args+=(-s "$size"); sizes=$size ;;
  esac
  P=$((P + 1))
  pair "$name" $P "$prog" -d softverbs0 -p $P "${args[@]}" "$@"
  # shellcheck disable=SC2086
  check "$name: result rows of $(echo $sizes | wc -w) size(s) x $iters iterations" \
    rows "$TMP/$name.cli" "$iters" $sizes
  for side in cli srv; do
    check "$name ($side): no error printed" no_error "$TMP/$name.$side"
  done
}

# Both copy paths: process_vm_* (probed, the default) and the bounce copy.
for mode in cma bounce; do
  export SOFTVERBS_SHM_COPY=$mode
  perf "ib_send_lat-$mode" 2 $N ib_send_lat
  perf "ib_send_bw-$mode" 65536 $N ib_send_bw
  perf "ib_write_lat-$mode" 2 $N ib_write_lat
  perf "ib_write_bw-$mode" 65536 $N ib_write_bw
  perf "ib_read_lat-$mode" 2 $N ib_read_lat
  perf "ib_read_bw-$mode" 65536 $N ib_read_bw
  perf "ib_atomic_lat-$mode" 8 $N ib_atomic_lat
  perf "ib_atomic_bw-$mode" 8 $N ib_atomic_bw
done
unset SOFTVERBS_SHM_COPY
for t in ib_send_lat ib_write_bw ib_read_lat; do
  perf "$t-a" all 50 $t # 50, not more: ib_send_lat -a -n 200 takes 60 s on a loaded 2-CPU machine
done
# XRC connections (-c XRC: each side a domain, an SRQ, initiator and target QPs).
for t in "ib_send_lat 2" "ib_send_bw 65536" "ib_write_lat 2" "ib_write_bw 65536" \
         "ib_read_lat 2" "ib_read_bw 65536"; do
  read -r t size <<<"$t"
  perf "$t-xrc" "$size" 1000 "$t" -c XRC -x 0
done
# Completion-event mode (-e: each side sleeps on its completion channel; perftest refuses
# it for WRITE), every connection type. perftest 4.5 takes both CQs' events from one
# channel and polls once per event, the reply's CQ after the send's: a send that
# completed after the reply's receive, or a datagram dropped while the server slept,
# showed as an error or a run that never ends.
for t in "ib_send_lat 2" "ib_send_bw 65536" "ib_read_lat 2" "ib_read_bw 65536" \
         "ib_atomic_lat 8" "ib_atomic_bw 8" "ib_send_lat 2 UC" "ib_send_bw 65536 UC" \
         "ib_send_lat 2 UD" "ib_send_bw 4096 UD" "ib_send_lat 2 XRC" "ib_send_bw 65536 XRC"; do
  read -r t size type <<<"$t"
  if [ -n "$type" ]; then
    perf "$t-$type-events" "$size" $N "$t" -e -c "$type"
  else
    perf "$t-events" "$size" $N "$t" -e
  fi
done
finish
