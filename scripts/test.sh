#!/usr/bin/env bash
# Runs the whole test suite: the normal build (every test), an ASan+UBSan build
# (unit and verbs tests), and a clang build (must compile warning-free).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --no-run

echo "== gcc build: all tests"
(cd build && ctest --output-on-failure -j2)

echo "== ASan+UBSan build: unit and verbs tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSV_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$(nproc)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2 -L 'unit|verbs')

echo "== clang build"
CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-clang -j"$(nproc)"
echo "test.sh: all suites passed"
