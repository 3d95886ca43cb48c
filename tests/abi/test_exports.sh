#!/bin/bash
# Our libibverbs.so.1 and librdmacm.so.1 must export what Debian's rdma-core 44 libraries
# export, node for node: programs and provider libraries linked against the real ones
# (BIND_NOW) load against ours only if every name@version they import is there.
#
# usage: test_exports.sh BUILD_DIR        (ctest runs it with the build tree)
# Checks, each counted, for each of the two libraries:
#   - the SONAME is the system's
#   - the set of version nodes is the system's (plus any SOFTVERBS_* of our own)
#   - every node has the system's parent
#   - the default (@@) symbols are exactly the system's, each in the same node
#   - each of those symbols has the system's type (FUNC / OBJECT)
#   - verbs_allow_disassociate_destroy is a 1-byte OBJECT
# Exit 0 pass, 1 fail, 77 skip (no system library or no readelf).
set -u
export LC_ALL=C

build=${1:?usage: test_exports.sh BUILD_DIR}
sysdir=${SV_SYSTEM_LIBDIR:-/usr/lib/x86_64-linux-gnu}

for lib in libibverbs.so.1 librdmacm.so.1; do
	if [ ! -e "$sysdir/$lib" ]; then
		echo "SKIP: system library $sysdir/$lib not found (install Debian's libibverbs1 and librdmacm1)"
		exit 77
	fi
done
if ! command -v readelf >/dev/null; then
	echo "SKIP: readelf not found (install binutils)"
	exit 77
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }

# Defined dynamic symbols as "name@@version TYPE SIZE", default versions only. The entries
# that define the version nodes themselves (ABS, named after the node; shown as "NODE" or
# "NODE@@NODE" depending on the binutils release) are left out.
default_syms() {
	readelf --dyn-syms -W "$1" | awk '
		$7 != "UND" && $8 ~ /@@/ {
			split($8, p, "@@")
			if (p[1] != p[2])
				print $8, $4, $3
		}' | sort -u
}

# Version definitions as "node parent" ("node -" for a root); the BASE entry (the
# SONAME) is not a node.
version_nodes() {
	readelf -V -W "$1" | awk '
		/^Version definition section/ { in_d = 1; next }
		/^Version (needs|symbols) section/ { in_d = 0 }
		!in_d { next }
		/Flags:/ {
			if (node != "") print node, (parent == "" ? "-" : parent)
			node = ""; parent = ""
			if ($0 ~ /Flags: BASE/) next
			node = $NF
			next
		}
		/Parent 1:/ { parent = $NF }
		END { if (node != "") print node, (parent == "" ? "-" : parent) }
	' | sort -u
}

# check_lib LIB: every check above for build/lib/LIB against the system's LIB.
check_lib() {
	lib=$1
	ours=$build/lib/$lib
	sys=$sysdir/$lib
	if [ ! -e "$ours" ]; then
		fail "$ours not found; build the project first"
		return
	fi
	default_syms "$sys" >"$tmp/sys.syms"
	default_syms "$ours" >"$tmp/ours.all.syms"
	version_nodes "$sys" >"$tmp/sys.nodes"
	version_nodes "$ours" >"$tmp/ours.all.nodes"

	# Our own private interface may add SOFTVERBS_* nodes and the symbols in them.
	grep -v '^SOFTVERBS_' "$tmp/ours.all.nodes" >"$tmp/ours.nodes"
	grep -v '@@SOFTVERBS_' "$tmp/ours.all.syms" >"$tmp/ours.syms"

	if [ ! -s "$tmp/sys.syms" ] || [ ! -s "$tmp/sys.nodes" ]; then
		fail "could not read the exports of $sys"
		return
	fi

	# Prints "  missing: X" for lines only in $1 (the system) and "  extra: X" for lines only
	# in $2 (ours); returns 1 when there is any.
	report_diff() {
		comm -23 "$1" "$2" | sed 's/^/  missing: /' >"$tmp/diff"
		comm -13 "$1" "$2" | sed 's/^/  extra:   /' >>"$tmp/diff"
		[ -s "$tmp/diff" ] || return 0
		cat "$tmp/diff"
		return 1
	}

	# --- SONAME
	soname=$(readelf -d -W "$ours" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
	if [ "$soname" = "$lib" ]; then
		pass "$lib: SONAME is $lib"
	else
		fail "$lib: SONAME is '${soname:-<none>}', want $lib"
	fi

	# --- version nodes and their parents
	cut -d' ' -f1 "$tmp/sys.nodes" >"$tmp/sys.names"
	cut -d' ' -f1 "$tmp/ours.nodes" >"$tmp/ours.names"
	if report_diff "$tmp/sys.names" "$tmp/ours.names"; then
		pass "$lib: version nodes match ($(wc -l <"$tmp/sys.names") nodes)"
	else
		fail "$lib: version nodes differ from $sys (missing: only there; extra: only ours)"
	fi
	join "$tmp/sys.nodes" "$tmp/ours.nodes" | awk '$2 != $3 {
		printf "  %s: parent %s, system has %s\n", $1, $3, $2 }' >"$tmp/parents"
	if [ -s "$tmp/parents" ]; then
		cat "$tmp/parents"
		fail "$lib: version node parents differ (lines above)"
	else
		pass "$lib: version node parents match"
	fi

	# --- default symbols, node by node
	cut -d' ' -f1 "$tmp/sys.syms" >"$tmp/sys.names"
	cut -d' ' -f1 "$tmp/ours.syms" >"$tmp/ours.names"
	if report_diff "$tmp/sys.names" "$tmp/ours.names"; then
		pass "$lib: default symbols match ($(wc -l <"$tmp/sys.names") name@@version)"
	else
		fail "$lib: default symbols differ from $sys (missing: only there; extra: only ours)"
	fi

	# --- symbol types, for the symbols both export
	join "$tmp/sys.syms" "$tmp/ours.syms" | awk '$2 != $4 {
		printf "  %s: %s, system has %s\n", $1, $4, $2 }' >"$tmp/types"
	if [ -s "$tmp/types" ]; then
		cat "$tmp/types"
		fail "$lib: symbol types differ (lines above)"
	else
		pass "$lib: symbol types match"
	fi
}

check_lib libibverbs.so.1
cp "$tmp/ours.all.syms" "$tmp/ibverbs.all.syms"
check_lib librdmacm.so.1

# --- the providers' data object: libmlx5 and libefa read it as a 1-byte bool
obj=$(awk '$1 == "verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34" {
	print $2, $3 }' "$tmp/ibverbs.all.syms")
if [ "$obj" = "OBJECT 1" ]; then
	pass "verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34 is a 1-byte OBJECT"
else
	fail "verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34: '${obj:-not exported}', want 'OBJECT 1'"
fi

echo "exports: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
