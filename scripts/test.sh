#!/usr/bin/env bash
# Runs the whole test suite: the normal build (every test), an ASan+UBSan build
# (unit, verbs and rdmacm tests), a TSan build (the data-path tests in both copy modes,
# the claims and connection manager tests, and the copy-assist protocol's threaded unit
# test), and a clang build (must compile warning-free).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --no-run

echo "== gcc build: all tests but the interop stage (ctest -L interop: README)"
(cd build && ctest --output-on-failure -j2 -LE interop)

echo "== ASan+UBSan build: unit, verbs and rdmacm tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSV_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$(nproc)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2 -L '^(unit|verbs|rdmacm)$')

echo "== TSan build: the progress engine and the CM thread under the two-process and threaded tests"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSV_SANITIZE=thread >/dev/null
cmake --build build-tsan -j"$(nproc)"
# die_after_fork=0: the tests fork their peer processes, which start threads. The bounce
# variants run too (the bounce copy's application side is not recorded under TSan:
# src/wire/shm/shm_fifo.c). Not the silent-peer test: it only waits 30 s for a timeout.
# Not the other-user test: its agent (uid 65534) cannot read a build tree only root may
# read, as a fresh clone's often is, so TSan cannot symbolize its reports and the one
# suppression (tests/tsan.supp) cannot match; it runs in the gcc and ASan stages.
# The shm ring's threaded test, the core over its test wire and the iWARP port's handoff
# test (unit_test_iw_conn: each peer's progress thread serves the port) run there too.
# Two at a time: 107 s instead of 212 on an idle machine.
# The data tests and the rdma_cm tests run again over iWARP (*_iwarp), and the hostile
# peer against an iWARP QP (verbs_test_iw_hostile): the wire's transmit and receive
# threads, its port and its hand-over under TSan. The UD tests over UDP (*_udp) and the
# hostile sender (verbs_test_udp_hostile) put the UDP wire's shared block socket there.
(cd build-tsan && TSAN_OPTIONS="die_after_fork=0 halt_on_error=1 suppressions=$PWD/../tests/tsan.supp" \
  ctest --output-on-failure -j2 -R '^(verbs_test_data_|verbs_test_claims|verbs_test_(iw|udp)_hostile$|rdmacm_|unit_test_(assist|shm_fifo|iw_conn)|core_test_core_wire$)' \
  -E '_silent_peer|_other_user')

echo "== clang build"
CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-clang -j"$(nproc)"
echo "test.sh: all suites passed"
