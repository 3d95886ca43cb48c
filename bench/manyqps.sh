#!/usr/bin/env bash
# bench/manyqps.sh — what thousands of QPs cost (issue 24): the 8-byte write rate spread
# over 1 to 4,096 QPs, and ib_send_lat (polling and -e) with 4,096 idle QPs open beside
# its own in both processes (bench/idle_qps.c, preloaded), rounds alternating in one
# invocation, server on the first CPU and client on the second.
#
# Every number printed comes with the command that produced it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/manyqps.sh [--rounds N] [--build DIR] [--out DIR]

N rounds (default 5). Each round runs, one host:
  rate   ib_write_bw -s 8 -t 128 -l 32 -N -q Q, Q = 1 16 128 1024 4096 (the
         iterations per QP shrink so that every run posts ~3.2 M writes)
  lat    ib_send_lat -s 2 -n 20000 with 0 and 4096 idle RC QPs open in each process
  lat-e  the same with -e (completion channels), -n 5000
and prints the medians of the rounds with the commands, and the ratios issue 24
asks for: rate(1024) / rate(1) >= 0.8, lat(4096 open) / lat(0) <= 1.2.

  --build DIR  the build to measure (default: build)
  --out DIR    keep the logs there (default: a temporary directory, removed)
EOF
}

rounds=5
build=build
out=
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
sv=$build/bin/softverbs
[ -x "$sv" ] || { echo "$sv is not built" >&2; exit 1; }
command -v ib_write_bw >/dev/null || { echo "perftest is not installed" >&2; exit 1; }
if [ -n "$out" ]; then
	mkdir -p "$out"
	tmp=$(cd "$out" && pwd)
else
	tmp=$(mktemp -d)
fi
. bench/perftest-lib.sh
trap 'pt_stop_server; [ -n "$out" ] || rm -rf "$tmp"' EXIT
pt_timeout=${PERFTEST_TIMEOUT:-120}
next_port=19200
pt_pin_cpus
pt_gid_args

# The idle QPs go into ib_send_lat only (not into softverbs' CLI): a wrapper that
# preloads them, run as the program.
cc -O2 -std=c11 -Wall -Wextra -shared -fPIC -o "$tmp/idle_qps.so" bench/idle_qps.c \
	-I/usr/include -libverbs
cat >"$tmp/ib_send_lat_idle" <<EOF
#!/bin/sh
LD_PRELOAD=$tmp/idle_qps.so exec ib_send_lat "\$@"
EOF
chmod +x "$tmp/ib_send_lat_idle"

qs=(1 16 128 1024 4096)
declare -A rate lat late
for ((r = 1; r <= rounds; r++)); do
	line="round $r:"
	for q in "${qs[@]}"; do
		n=$((3200000 / q / 32 * 32))
		[ "$n" -ge 64 ] || n=64
		pair "rate.$q.$r" ib_write_bw -d softverbs0 -s 8 -q "$q" -t 128 -l 32 -n "$n" -N ||
			{ echo "ib_write_bw -q $q failed (round $r): $tmp/rate.$q.$r.client.log" >&2; exit 1; }
		rate[$q]+="$(column "$tmp/rate.$q.$r.client.log" 8 'MsgRate[Mpps]') "
		line+=" q$q $(column "$tmp/rate.$q.$r.client.log" 8 'MsgRate[Mpps]')"
		eval "rate_cmd_$q=\$client_cmd"
	done
	for idle in 0 4096; do
		export IDLE_QPS=$idle
		pair "lat.$idle.$r" "$tmp/ib_send_lat_idle" -d softverbs0 -s 2 -n 20000 ||
			{ echo "ib_send_lat failed (round $r): $tmp/lat.$idle.$r.client.log" >&2; exit 1; }
		lat[$idle]+="$(column "$tmp/lat.$idle.$r.client.log" 2 't_typical[usec]') "
		lat_cmd=$client_cmd
		pair "late.$idle.$r" "$tmp/ib_send_lat_idle" -d softverbs0 -s 2 -n 5000 -e ||
			{ echo "ib_send_lat -e failed (round $r): $tmp/late.$idle.$r.client.log" >&2; exit 1; }
		late[$idle]+="$(column "$tmp/late.$idle.$r.client.log" 2 't_typical[usec]') "
		late_cmd=$client_cmd
		line+=" lat($idle) $(column "$tmp/lat.$idle.$r.client.log" 2 't_typical[usec]')"
		line+=" lat-e($idle) $(column "$tmp/late.$idle.$r.client.log" 2 't_typical[usec]')"
	done
	unset IDLE_QPS
	echo "$line"
done

med() { printf '%s\n' $1 | median; }
echo
echo "medians of $rounds rounds (one host, server on CPU ${cpus[0]:-?}, client on ${cpus[1]:-?}):"
r1=$(med "${rate[1]}")
for q in "${qs[@]}"; do
	m=$(med "${rate[$q]}")
	cmd=rate_cmd_$q
	echo "  8-byte writes over $q QPs: $m Mpps ($(calc %.2f "$m / $r1") of 1 QP)   ${!cmd}"
done
l0=$(med "${lat[0]}")
l1=$(med "${lat[4096]}")
e0=$(med "${late[0]}")
e1=$(med "${late[4096]}")
echo "  ib_send_lat t_typical, 0 idle QPs: $l0 µs; 4096 idle QPs: $l1 µs ($(calc %.2f "$l1 / $l0"))"
echo "      $lat_cmd   (IDLE_QPS=N, bench/idle_qps.c preloaded)"
echo "  ib_send_lat -e t_typical, 0 idle QPs: $e0 µs; 4096 idle QPs: $e1 µs ($(calc %.2f "$e1 / $e0"))"
echo "      $late_cmd"
