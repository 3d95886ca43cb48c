#!/usr/bin/env bash
# ctest's fuzz_iw_decode, fuzz_iw_rx, fuzz_roce_rx, fuzz_rv_cm, fuzz_rv_decode and fuzz_udp_rc: builds the target with clang (tests/fuzz/build.sh;
# exit 77, a skip, without clang and libFuzzer) and runs it for SECONDS (60) from the seed
# corpus, new inputs kept in OUTDIR/corpus-TARGET (the seeds in the tree stay as they are).
#   tests/fuzz/run.sh OUTDIR [SECONDS] [TARGET]     (TARGET: fuzz_iw_decode by default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
secs=${2:-60}
target=${3:-fuzz_iw_decode}
bash "$here/build.sh" "$out" "$target"
case $target in
fuzz_iw_decode) seeds=$here/corpus/iw_decode; kept=$out/corpus ;;
fuzz_iw_rx) seeds=$here/corpus/iw_rx; kept=$out/corpus-iw_rx ;;
fuzz_rv_decode) seeds=$here/corpus/rv_decode; kept=$out/corpus-rv_decode ;;
fuzz_udp_rc) seeds=$here/corpus/udp_rc; kept=$out/corpus-udp_rc ;;
fuzz_roce_rx) seeds=$here/corpus/roce_rx; kept=$out/corpus-roce_rx ;;
fuzz_rv_cm) seeds=$here/corpus/rv_cm; kept=$out/corpus-rv_cm ;;
esac
mkdir -p "$kept"
# fuzz_iw_rx: the library's log stays quiet (every input ends a QP on purpose)
SOFTVERBS_LOG=${SOFTVERBS_LOG:-error} exec "$out/$target" -max_total_time="$secs" \
  -print_final_stats=1 "$kept" "$seeds"
