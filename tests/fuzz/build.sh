#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (the normal build, gcc, never needs this):
#   tests/fuzz/build.sh [OUTDIR]        (default build-fuzz/)
# Exit 77 when clang or its libFuzzer runtime is missing (Debian: clang,
# libclang-rt-14-dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-fuzz}
CC=${CC:-clang}
mkdir -p "$out"
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -Wall -Wextra -Werror -I"$root/src")
if ! command -v "$CC" >/dev/null ||
   ! echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n); int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' |
     "$CC" -x c -fsanitize=fuzzer -o "$out/.probe" - 2>/dev/null; then
  echo "SKIP: $CC with libFuzzer is not available"
  exit 77
fi
rm -f "$out/.probe"
"$CC" "${flags[@]}" -o "$out/fuzz_iw_decode" "$root/tests/fuzz/fuzz_iw_decode.c" \
  "$root/src/wire/iwarp/iw_proto.c" "$root/src/wire/iwarp/iw_mpa.c" \
  "$root/src/wire/iwarp/iw_crc.c" -lisal
echo "built $out/fuzz_iw_decode"
