#!/usr/bin/env bash
# Debian's unmodified ibv_devices and ibv_devinfo see softverbs0.
. "$(dirname "$0")/lib.sh" "$1"
need ibv_devinfo

"$SV" run ibv_devices >"$TMP/devices" 2>&1; rc=$?
check "ibv_devices exits 0" test "$rc" -eq 0
check "ibv_devices lists softverbs0" contains "$TMP/devices" softverbs0

"$SV" run ibv_devinfo -v >"$TMP/devinfo" 2>&1; rc=$?
check "ibv_devinfo -v exits 0" test "$rc" -eq 0
check "port 1 is PORT_ACTIVE" contains "$TMP/devinfo" "PORT_ACTIVE"
check "link layer is Ethernet" contains "$TMP/devinfo" "link_layer:.*Ethernet"
check "GID table holds ::ffff:127.0.0.1 as RoCE v2" contains "$TMP/devinfo" "::ffff:127.0.0.1, RoCE v2"
check "LID is not zero" bash -c "grep -E 'port_lid:' '$TMP/devinfo' | grep -vqE 'port_lid:\s+0$'"
check "MTU 4096" contains "$TMP/devinfo" "active_mtu:.*4096"
check "transport is InfiniBand (RoCE-like)" contains "$TMP/devinfo" "transport:.*InfiniBand"

SOFTVERBS_TRANSPORT=iwarp "$SV" run ibv_devinfo >"$TMP/iwarp" 2>&1; rc=$?
check "SOFTVERBS_TRANSPORT=iwarp: ibv_devinfo exits 0" test "$rc" -eq 0
check "SOFTVERBS_TRANSPORT=iwarp: transport is iWARP" contains "$TMP/iwarp" "transport:.*iWARP"

"$SV" run ibv_devinfo -d softverbs0 -i 2 >"$TMP/badport" 2>&1; rc=$?
check "ibv_devinfo on port 2 fails cleanly" test "$rc" -ne 0 -a "$rc" -lt 128
finish
