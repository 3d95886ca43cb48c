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
# namespace nothing is touched.
#
# Two routes to the mount namespace, tried in this order:
#   1. `unshare -m` (root, or CAP_SYS_ADMIN);
#   2. an unprivileged user namespace, `unshare -Urm`, where the kernel allows one: the
#      mounts are made as the namespace's root, then COMMAND runs in a nested user
#      namespace that maps the caller's own uid and gid back (`unshare --user --map-user
#      --map-group`), so the suite sees the caller's ids (supplementary groups are lost).
# When neither works, or a mount fails, COMMAND runs WITHOUT the shim (the suite then
# skips its rdma_cm tests) and this says so on stderr in capitals.
#
# Environment:
#   SV_SYSFS_SHIM_STATUS=FILE  write one line there: "active <route>" or "fallback <why>"
#                              (tests/pyverbs/run_pyverbs.py reads it)
#   SV_SYSFS_SHIM=off          do not set up the shim (fallback "disabled")
#   SV_SYSFS_SHIM_NO_HUGEPAGES=1  also show 0 reserved 2 MiB pages to COMMAND (bind-mounts
#                              a file holding 0 over sysfs' nr_hugepages), so that
#                              `run_pyverbs.py --update-baseline` can learn which tests
#                              need huge pages
set -u
cmd=("$@")

status() {
	if [ -n "${SV_SYSFS_SHIM_STATUS:-}" ]; then
		echo "$*" >"$SV_SYSFS_SHIM_STATUS" || true
	fi
}

# Runs COMMAND with the caller's own ids: through the nested user namespace on route 2.
# None of the shim's variables reach COMMAND (one run under another must not think it
# is already inside).
run() {
	local uid=${SV_SYSFS_SHIM_UID:-} gid=${SV_SYSFS_SHIM_GID:-}
	unset SV_SYSFS_SHIM SV_SYSFS_SHIM_UID SV_SYSFS_SHIM_GID SV_SYSFS_SHIM_ROUTE \
		SV_SYSFS_SHIM_STATUS SV_SYSFS_SHIM_NO_HUGEPAGES
	if [ -n "$uid" ]; then
		exec unshare --user --map-user="$uid" --map-group="$gid" -- "$@"
	fi
	exec "$@"
}

fallback() {
	{
		echo "sysfs_shim: *** NOT SET UP: $1 ***"
		echo "sysfs_shim: *** running WITHOUT it: the suite will skip its rdma_cm tests ***"
	} >&2
	status "fallback $1"
	run "${cmd[@]}"
}

if [ "${SV_SYSFS_SHIM:-}" != inside ]; then
	if [ $# -eq 0 ]; then
		echo "usage: sysfs_shim.sh COMMAND [ARGS...]" >&2
		exit 2
	fi
	if [ "${SV_SYSFS_SHIM:-}" = off ]; then
		fallback "disabled (SV_SYSFS_SHIM=off)"
	fi
	if err_m=$(unshare -m true 2>&1); then
		exec env SV_SYSFS_SHIM=inside SV_SYSFS_SHIM_ROUTE="mount namespace (unshare -m)" \
			unshare -m bash "$0" "$@"
	fi
	uid=$(id -u)
	gid=$(id -g)
	if err_u=$(unshare -Urm unshare --user --map-user="$uid" --map-group="$gid" true 2>&1)
	then
		exec env SV_SYSFS_SHIM=inside SV_SYSFS_SHIM_UID="$uid" SV_SYSFS_SHIM_GID="$gid" \
			SV_SYSFS_SHIM_ROUTE="user namespace (unshare -Urm, uid $uid)" \
			unshare -Urm bash "$0" "$@"
	fi
	fallback "no mount namespace: unshare -m: ${err_m:-failed}; unshare -Urm: ${err_u:-failed}"
fi

# Inside the new mount namespace.
mounted=
real=
fail() {
	if [ -n "$mounted" ]; then
		umount -l /sys/class 2>/dev/null || true
	fi
	if [ -n "$real" ]; then
		umount -l "$real" 2>/dev/null
		rmdir "$real" 2>/dev/null
	fi
	fallback "$1 (in a ${SV_SYSFS_SHIM_ROUTE:-mount namespace})"
}
mount --make-rprivate / 2>/dev/null || true
real=$(mktemp -d) || fail "mktemp -d"
mount --bind /sys/class "$real" || fail "mount --bind /sys/class"
mount -t tmpfs -o mode=755 softverbs-sysfs /sys/class || fail "mount tmpfs on /sys/class"
mounted=1
for c in "$real"/*; do
	name=$(basename "$c")
	mkdir -p "/sys/class/$name" || fail "mkdir /sys/class/$name"
	mount --bind "$c" "/sys/class/$name" || fail "mount --bind /sys/class/$name"
done
mkdir -p /sys/class/infiniband/softverbs0/device/net/lo ||
	fail "mkdir /sys/class/infiniband/softverbs0/device/net/lo"
# The classes stay mounted on their own; the temporary folder goes.
umount -l "$real" 2>/dev/null && rmdir "$real" 2>/dev/null
route=${SV_SYSFS_SHIM_ROUTE:-mount namespace}
if [ "${SV_SYSFS_SHIM_NO_HUGEPAGES:-}" = 1 ]; then
	hp=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
	zero=$(mktemp) || fail "mktemp"
	echo 0 >"$zero"
	if [ -e "$hp" ] && ! mount --bind "$zero" "$hp"; then
		rm -f "$zero"
		fail "mount --bind over $hp"
	fi
	rm -f "$zero"
	route="$route, huge pages hidden"
fi
echo "sysfs_shim: active: $route" >&2
status "active $route"
run "${cmd[@]}"
