#!/usr/bin/env bash
# cmake --install to a prefix gives the libraries with their SONAME links, the CLI and a
# softverbs.pc that points at that prefix; the installed CLI runs programs on the
# installed library; SOFTVERBS_LIBDIR tells softverbs run where the libraries are: the
# program it runs loads libibverbs.so.1 from there (as its /proc/self/maps shows), and a
# directory without them is refused before anything runs.
. "$(dirname "$0")/lib.sh" "$1"
need pkg-config
need ibv_devices
need python3
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

# maps_libibverbs: the files libibverbs is mapped from in a child that dlopens it by its
# SONAME (so LD_LIBRARY_PATH decides), one a line.
maps_libibverbs() {
  "$@" python3 -c 'import ctypes; ctypes.CDLL("libibverbs.so.1")
for l in open("/proc/self/maps"):
    f = l.split()[-1]
    if "/libibverbs.so" in f: print(f)' | sort -u
}
rlib=$(realpath "$lib")
# The build tree's CLI would use the build tree's library; told, it uses the installed one.
maps_libibverbs env SOFTVERBS_LIBDIR="$lib" "$SV" run >"$TMP/maps" 2>&1; rc=$?
check "SOFTVERBS_LIBDIR: the program runs" test "$rc" -eq 0
check "SOFTVERBS_LIBDIR: libibverbs is mapped from that directory" \
  bash -c "grep -q '^$rlib/libibverbs.so' '$TMP/maps'"
check "SOFTVERBS_LIBDIR: and from nowhere else" \
  bash -c "! grep -qv '^$rlib/libibverbs.so' '$TMP/maps'"
maps_libibverbs "$SV" run >"$TMP/maps.default" 2>&1
check "without it, the build tree's CLI maps the build tree's library" \
  grep -q "^$(realpath "$BUILD/lib")/libibverbs.so" "$TMP/maps.default"
SOFTVERBS_LIBDIR="$lib" "$SV" run printenv LD_LIBRARY_PATH >"$TMP/ldpath" 2>&1
check "SOFTVERBS_LIBDIR: comes first in the program's LD_LIBRARY_PATH" \
  bash -c "head -n 1 '$TMP/ldpath' | grep -q '^$lib\(:\|\$\)'"
SOFTVERBS_LIBDIR="$TMP/nowhere" "$SV" run touch "$TMP/ran" >"$TMP/bogus" 2>&1; rc=$?
check "SOFTVERBS_LIBDIR without the libraries: exit 127" test "$rc" -eq 127
check "SOFTVERBS_LIBDIR without the libraries: the program is not run" test ! -e "$TMP/ran"
check "SOFTVERBS_LIBDIR without the libraries: the error says what is missing and names the variable" \
  bash -c "grep -q 'libibverbs.so.1 not found' '$TMP/bogus' && grep -q SOFTVERBS_LIBDIR '$TMP/bogus'"
finish
