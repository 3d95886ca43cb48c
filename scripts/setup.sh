#!/usr/bin/env bash
# Sets up a Debian 12 machine for softverbs, builds it, and runs the main job.
#   scripts/setup.sh            install what is missing, build, run the demo
#   scripts/setup.sh --no-run   install and build only
# Installing needs root: run as root, or have sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build dependencies and the rdma-core programs the tests run unmodified; iproute2,
# iputils-ping and tshark for the tests between network namespaces (tests/apps/netns.sh),
# nftables to lose packets on their link on purpose (the kernel may have no netem), gdb
# for the stacks of a program that hangs there;
# the stacks the tests run on softverbs (UCX, libfabric, Open MPI, MPICH) and gnuplot for
# bench/mpi.sh's plots.
PACKAGES=(build-essential cmake pkg-config clang libclang-rt-14-dev libcmocka-dev
          libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest qperf libisal-dev
          zlib1g-dev python3 python3-pyverbs iproute2 iputils-ping tshark nftables gdb
          ucx-utils libfabric-bin openmpi-bin libopenmpi-dev mpich libmpich-dev gnuplot-nox)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# rdma-core's suite runs its huge-page tests (ODP, parent domains) only when 2 MiB pages
# are reserved; reserve a few (32 MiB) where we may, never shrinking what is there.
hp=/proc/sys/vm/nr_hugepages
if [ -w "$hp" ] && [ "$(cat "$hp")" -lt 16 ]; then
  echo 16 > "$hp" 2>/dev/null || echo "setup: could not reserve huge pages (suite skips those tests)"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"

if [ "${1:-}" != "--no-run" ]; then
  # The main job: the device as Debian's unmodified ibv_devices sees it, then the
  # walk-through (open, PD, CQ, RC QP, MR, connect, RDMA WRITE, a batch of WRITEs with
  # only the last signaled, READ back, SEND, clean up) between two processes.
  build/bin/softverbs run ibv_devices
  build/bin/softverbs run build/bin/walkthrough --self
fi
