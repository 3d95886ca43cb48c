#!/usr/bin/env bash
# ctest's fuzz_iw_decode: builds the target with clang (tests/fuzz/build.sh; exit 77, a
# skip, without clang and libFuzzer) and runs it for SECONDS (60) from the seed corpus,
# new inputs kept in OUTDIR/corpus (the seeds in the tree stay as they are).
#   tests/fuzz/run.sh OUTDIR [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
secs=${2:-60}
bash "$here/build.sh" "$out"
mkdir -p "$out/corpus"
exec "$out/fuzz_iw_decode" -max_total_time="$secs" -print_final_stats=1 \
  "$out/corpus" "$here/corpus/iw_decode"
