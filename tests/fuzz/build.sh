#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (the normal build, gcc, never needs this):
#   tests/fuzz/build.sh [OUTDIR] [TARGET...]   (default build-fuzz/, both targets)
#   fuzz_iw_decode  the codec alone (iw_proto.c, iw_mpa.c, iw_crc.c)
#   fuzz_rv_decode  the RoCE v2 packet codec and ICRC check (rv_proto.c, rv_icrc.c)
#   fuzz_udp_rc     an RC connection's packet translation (udp_rc.c, with rv_proto.c)
#   fuzz_rv_cm      the IB CM's MAD decoder and rdma_cm's header (rv_cm.c)
#   fuzz_iw_rx      the receive path of a real QP: links OUTDIR/lib/lib/libibverbs.so,
#                   the whole library built with clang, ASan, UBSan and libFuzzer's
#                   coverage (cmake in OUTDIR/lib, incremental)
#   fuzz_roce_rx    the same for an RC QP on the RoCE v2 wire (datagrams on loopback)
# Exit 77 when clang or its libFuzzer runtime is missing (Debian: clang,
# libclang-rt-14-dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-fuzz}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_iw_decode fuzz_iw_rx)
CC=${CC:-clang}
mkdir -p "$out"
out=$(cd "$out" && pwd)
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
# The library under test, instrumented, for the receive-path targets (fuzz_iw_rx,
# fuzz_roce_rx): every file of the receive path counts for coverage (the wire, the core's
# responder and completer, the key table). OUTDIR/lib, configured once, built
# incrementally.
build_lib() {
  if [ ! -f "$out/lib/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$out/lib" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Debug \
      -DSV_SANITIZE=address,undefined -DCMAKE_C_FLAGS="-O1 -fsanitize=fuzzer-no-link" \
      >"$out/lib.log" 2>&1 || { cat "$out/lib.log"; exit 1; }
  fi
  cmake --build "$out/lib" --target ibverbs -j2 >>"$out/lib.log" 2>&1 ||
    { tail -50 "$out/lib.log"; exit 1; }
}
for t in "${targets[@]}"; do
  case $t in
  fuzz_iw_decode)
    "$CC" "${flags[@]}" -o "$out/fuzz_iw_decode" "$root/tests/fuzz/fuzz_iw_decode.c" \
      "$root/src/wire/iwarp/iw_proto.c" "$root/src/wire/iwarp/iw_mpa.c" \
      "$root/src/wire/iwarp/iw_crc.c" -lisal
    ;;
  fuzz_iw_rx)
    build_lib
    "$CC" "${flags[@]}" -I"$root/include" -o "$out/fuzz_iw_rx" \
      "$root/tests/fuzz/fuzz_iw_rx.c" "$root/src/wire/iwarp/iw_proto.c" \
      "$root/src/wire/iwarp/iw_crc.c" -L"$out/lib/lib" -Wl,-rpath,"$out/lib/lib" \
      -libverbs -lisal
    ;;
  fuzz_roce_rx)
    build_lib
    "$CC" "${flags[@]}" -I"$root/include" -o "$out/fuzz_roce_rx" \
      "$root/tests/fuzz/fuzz_roce_rx.c" -L"$out/lib/lib" -Wl,-rpath,"$out/lib/lib" \
      -libverbs -lz
    ;;
  fuzz_rv_decode)
    "$CC" "${flags[@]}" -o "$out/fuzz_rv_decode" "$root/tests/fuzz/fuzz_rv_decode.c" \
      "$root/src/wire/roce/rv_proto.c" "$root/src/wire/roce/rv_icrc.c" -lisal -lz
    ;;
  fuzz_rv_cm)
    "$CC" "${flags[@]}" -o "$out/fuzz_rv_cm" "$root/tests/fuzz/fuzz_rv_cm.c" \
      "$root/src/wire/roce/rv_cm.c"
    ;;
  fuzz_udp_rc)
    "$CC" "${flags[@]}" -o "$out/fuzz_udp_rc" "$root/tests/fuzz/fuzz_udp_rc.c" \
      "$root/src/wire/udp/udp_rc.c" "$root/src/wire/roce/rv_proto.c"
    ;;
  *) echo "no fuzz target $t"; exit 2 ;;
  esac
  echo "built $out/$t"
done
