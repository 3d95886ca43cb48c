#!/bin/sh
# Guest half of tests/interop/siw.sh, run by ../shared/kvm/boot.sh inside the VM (busybox
# sh, root): creates siw0 on eth0 and serves a shell on TCP 7998 (socat, one shell per
# connection) to the host side, which runs the programs of both halves from there. Exits
# with the host side's status once it is done (kvmh_wait_host).
. /guest/lib.sh
rdma link add siw0 type siw netdev eth0 || { echo "KVMH: siw0 not created"; exit 2; }
mount -t debugfs none /sys/kernel/debug 2>/dev/null
socat TCP-LISTEN:7998,reuseaddr,fork EXEC:/bin/sh,stderr &
kvmh_go
kvmh_wait_host "${1:-3000}"
