#!/bin/sh
# Guest half of tests/interop/siw.sh and rxe.sh, run by ../shared/kvm/boot.sh inside the
# VM (busybox sh, root): creates the kernel's device on eth0 (siw0, or rxe0 with "rxe" as
# the second argument) and serves a shell on TCP 7998 (socat, one shell per connection)
# to the host side, which runs the programs of both halves from there. Exits with the
# host side's status once it is done (kvmh_wait_host).
#   guest-serve.sh [TIMEOUT_SEC] [siw|rxe]
. /guest/lib.sh
kind=${2:-siw}
rdma link add ${kind}0 type $kind netdev eth0 || { echo "KVMH: ${kind}0 not created"; exit 2; }
mount -t debugfs none /sys/kernel/debug 2>/dev/null
socat TCP-LISTEN:7998,reuseaddr,fork EXEC:/bin/sh,stderr &
kvmh_go
kvmh_wait_host "${1:-3000}"
