#!/usr/bin/env bash
# bench/events.sh — completion-event mode (perftest -e) against its yardsticks, in one
# invocation, rounds interleaved.
#
# Every number printed comes with the command that produced it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/events.sh [--rounds N] [--build DIR] [--out DIR]

Measures, N rounds (default 5), each round in this order:
  wake-up      bench/baselines --only wakeup: an eventfd ping-pong between two
               processes, each blocked in read(); its round trip / 2 is one
               cross-CPU wake-up
  lat -e       ib_send_lat -s 2 -n 2000 -e: both sides asleep on their completion
               channel; t_typical (µs, one way)
  ud poll      ib_send_bw -c UD -s 4096 -n 20000: BW average (MB/s), polling
  ud -e        the same with -e
and prints the medians with two ratios: lat -e / wake-up (issue 24 asks <= 1.5) and
ud -e / ud poll (asks >= 0.5). Server on the first CPU this process may use, client
on the second, both on 127.0.0.1 under softverbs run, each bounded by timeout.

  --rounds N   rounds (odd is best: the median is a measured value)
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
command -v ib_send_lat >/dev/null || { echo "perftest is not installed" >&2; exit 1; }
if [ -n "$out" ]; then
	mkdir -p "$out"
	tmp=$out
else
	tmp=$(mktemp -d)
fi
. bench/perftest-lib.sh
trap 'pt_stop_server; [ -n "$out" ] || rm -rf "$tmp"' EXIT
pt_timeout=${PERFTEST_TIMEOUT:-60}
next_port=18900
pt_pin_cpus
pt_gid_args

cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$tmp/baselines" bench/baselines.c

wake=() lat=() udp=() ude=()
for ((r = 1; r <= rounds; r++)); do
	"$tmp/baselines" --only wakeup --reps 5 >"$tmp/wake.$r.log"
	w=$(awk '/^eventfd wake-up, round trip/ { print $(NF-8) }' "$tmp/wake.$r.log")
	wake+=("$(calc %.2f "$w / 2")")
	pair "lat.$r" ib_send_lat -d softverbs0 -s 2 -n 2000 -e ||
		{ echo "ib_send_lat -e failed (round $r): $tmp/lat.$r.client.log" >&2; exit 1; }
	lat+=("$(column "$tmp/lat.$r.client.log" 2 't_typical[usec]')")
	lat_cmd=$client_cmd
	pair "udp.$r" ib_send_bw -d softverbs0 -c UD -s 4096 -n 20000 ||
		{ echo "ib_send_bw -c UD failed (round $r)" >&2; exit 1; }
	udp+=("$(column "$tmp/udp.$r.client.log" 4096 'BW average[MB/sec]')")
	udp_cmd=$client_cmd
	pair "ude.$r" ib_send_bw -d softverbs0 -c UD -s 4096 -n 20000 -e ||
		{ echo "ib_send_bw -c UD -e failed (round $r)" >&2; exit 1; }
	ude+=("$(column "$tmp/ude.$r.client.log" 4096 'BW average[MB/sec]')")
	ude_cmd=$client_cmd
	echo "round $r: wake-up ${wake[-1]} µs, lat -e ${lat[-1]} µs," \
		"UD poll ${udp[-1]} MB/s, UD -e ${ude[-1]} MB/s"
done
mw=$(printf '%s\n' "${wake[@]}" | median)
ml=$(printf '%s\n' "${lat[@]}" | median)
mp=$(printf '%s\n' "${udp[@]}" | median)
me=$(printf '%s\n' "${ude[@]}" | median)
echo
echo "medians of $rounds rounds:"
echo "  one wake-up (eventfd round trip / 2)  $mw µs   $tmp/baselines --only wakeup --reps 5"
echo "  ib_send_lat -e t_typical           $ml µs   $lat_cmd"
echo "  ib_send_bw -c UD, polling          $mp MB/s   $udp_cmd"
echo "  ib_send_bw -c UD -e                $me MB/s   $ude_cmd"
echo "  lat -e / wake-up: $(calc %.2f "$ml / $mw")    UD -e / UD poll: $(calc %.2f "$me / $mp")"
