#!/usr/bin/env bash
# The long fuzzing run (issue 13: >= 10 M executions of the receive path): both targets,
# one after the other, each until it has run EXECS inputs (10,000,000) or MINUTES have
# passed (30), from the seeds in the tree, new inputs kept in OUTDIR/long-TARGET. Prints
# each target's executions, time and rate; exits non-zero on a crash or sanitizer report
# (the input is left in OUTDIR as crash-*).
#   tests/fuzz/long.sh [OUTDIR] [MINUTES] [EXECS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build-fuzz}
mins=${2:-30}
execs=${3:-10000000}
bash "$here/build.sh" "$out"
out=$(cd "$out" && pwd)
rc=0
for t in fuzz_iw_decode fuzz_iw_rx; do
  case $t in
  fuzz_iw_decode) seeds=$here/corpus/iw_decode ;;
  fuzz_iw_rx) seeds=$here/corpus/iw_rx ;;
  esac
  mkdir -p "$out/long-$t"
  start=$(date +%s)
  set +e
  (cd "$out" && SOFTVERBS_LOG=error "./$t" -runs="$execs" -max_total_time=$((mins * 60)) \
     -print_final_stats=1 "long-$t" "$seeds" >"long-$t.log" 2>&1)
  r=$?
  set -e
  secs=$(( $(date +%s) - start ))
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/long-$t.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/long-$t.log")
  echo "$t: ${n:-?} executions in ${secs} s (${rate:-?}/s), exit $r, log $out/long-$t.log"
  [ "$r" -eq 0 ] || rc=1
done
exit $rc
