#!/bin/bash
# usage: sysfs_shim.sh COMMAND [ARGS...]
#
# rdma-core's suite finds the IP address of a device through sysfs: it lists
# /sys/class/infiniband/<dev>/device/net/ and asks `ip addr` about the interface it
# finds there, and skips every rdma_cm test when there is none. softverbs has no kernel
# device, so there is no such directory. This runs COMMAND in a private mount namespace
# where /sys/class is a tmpfs holding the real classes (each bind-mounted back, so their
# relative links still resolve) plus infiniband/softverbs0/device/net/lo: the one path
# the suite reads, naming the loopback interface. Nothing else changes; outside the
# namespace nothing is touched. Without the privilege for a mount namespace (root, or an
# unprivileged user namespace), COMMAND runs as is and those tests skip, as they would.
set -u
if [ "${SV_SYSFS_SHIM:-}" != inside ]; then
	if unshare -m true 2>/dev/null; then
		exec env SV_SYSFS_SHIM=inside unshare -m bash "$0" "$@"
	fi
	echo "sysfs_shim: no mount namespace here; the suite's rdma_cm tests will skip" >&2
	exec "$@"
fi

fail() {
	echo "sysfs_shim: $1; running without it" >&2
	exec "$@"
}
mount --make-rprivate / 2>/dev/null || true
real=$(mktemp -d) || fail "mktemp"
mount --bind /sys/class "$real" || fail "bind /sys/class"
mount -t tmpfs -o mode=755 softverbs-sysfs /sys/class || fail "tmpfs on /sys/class"
for c in "$real"/*; do
	name=$(basename "$c")
	mkdir -p "/sys/class/$name" && mount --bind "$c" "/sys/class/$name"
done
mkdir -p /sys/class/infiniband/softverbs0/device/net/lo
exec "$@"
