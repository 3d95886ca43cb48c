#!/usr/bin/env bash
# cmake --install to a prefix gives the libraries with their SONAME links, the CLI and a
# softverbs.pc that points at that prefix; the installed CLI runs programs on the
# installed library.
. "$(dirname "$0")/lib.sh" "$1"
need pkg-config
need ibv_devices
P="$TMP/prefix"

cmake --install "$BUILD" --prefix "$P" >/dev/null 2>&1; rc=$?
check "cmake --install exits 0" test "$rc" -eq 0
lib=$(dirname "$(find "$P" -name 'libibverbs.so.1' | head -1)")
check "libibverbs.so.1 installed" test -e "$lib/libibverbs.so.1"
check "libibverbs.so links to the SONAME" test -L "$lib/libibverbs.so"
check "SONAME is libibverbs.so.1" bash -c "readelf -d '$lib/libibverbs.so.1' | grep -q 'SONAME.*libibverbs.so.1'"
check "librdmacm.so.1 installed beside it" test -e "$lib/librdmacm.so.1"
check "SONAME is librdmacm.so.1" bash -c "readelf -d '$lib/librdmacm.so.1' | grep -q 'SONAME.*librdmacm.so.1'"
check "librdmacm.so.1 finds the installed libibverbs.so.1" \
  bash -c "LD_LIBRARY_PATH='$lib' ldd '$lib/librdmacm.so.1' | grep -q '$lib/libibverbs.so.1'"
check "softverbs CLI installed" test -x "$P/bin/softverbs"
pc=$(find "$P" -name softverbs.pc | head -1)
check "softverbs.pc installed" test -n "$pc"
pclib=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=libdir softverbs)
check "pkg-config's libdir holds the installed library" test -e "$pclib/libibverbs.so"
"$P/bin/softverbs" run ibv_devices >"$TMP/out" 2>&1; rc=$?
check "installed softverbs run ibv_devices exits 0" test "$rc" -eq 0
check "lists softverbs0" contains "$TMP/out" softverbs0
finish
