#!/usr/bin/env bash
# bench/run.sh — softverbs' performance against baselines taken in the same run.
#
# 1. Builds bench/baselines.c into a temporary directory and runs it (memcpy,
#    null syscall, process_vm_writev/readv, cache-line ping-pong, wake-ups).
# 2. When softverbs' data path works (build/bin/softverbs exists and a short
#    ib_send_lat pair on it completes in time), runs Debian's perftest on
#    softverbs, server and client as two processes on 127.0.0.1, and prints each
#    figure as a ratio against the matching baseline. Otherwise says it skipped.
#
# Every number printed comes with the command that produced it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/run.sh [--no-perftest] [--out DIR] [-- BASELINES_ARGS...]

Builds bench/baselines.c (cc -O2 -std=c11 -D_GNU_SOURCE) into a temporary
directory and runs it, then runs perftest on softverbs when its data path works:
  ib_send_lat -s 2                        vs the cache-line one-way latency
  ib_write_bw -s 65536, -s 1048576        vs process_vm_writev (at the start, and just
                                          before and after, on the client's CPU) and
                                          memcpy (warm)
  ib_write_bw -s 8 -t 128 -l 32 -N        message rate, absolute (3.2 M writes,
                                          pinned and unpinned;
                                          -N: perftest takes no per-post timestamps)
Server and client are two processes on 127.0.0.1 (pinned to the two CPUs the
baselines used, when there are two), each bounded by timeout(1).

options:
  --no-perftest    baselines only
  --out DIR        keep the baselines JSON and the perftest logs in DIR
  -h, --help       this text
  -- ARGS          passed to baselines (e.g. -- --reps 11 --rep-ms 100)

environment:
  CC                 compiler (default cc)
  SOFTVERBS_BUILD    softverbs' build directory (default build)
  PERFTEST_TIMEOUT   seconds allowed for each perftest process (default 60)
  PERFTEST_PORT      first TCP port for perftest's handshake (default 18600)
EOF
}

cd "$(dirname "$0")/.."

run_perftest=1
out_dir=
baseline_args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--no-perftest) run_perftest=0 ;;
	--out)
		[ $# -ge 2 ] || { usage >&2; exit 2; }
		out_dir=$2
		shift
		;;
	-h | --help) usage; exit 0 ;;
	--) shift; baseline_args=("$@"); break ;;
	*) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done

CC=${CC:-cc}
build_dir=${SOFTVERBS_BUILD:-build}
pt_timeout=${PERFTEST_TIMEOUT:-60}
next_port=${PERFTEST_PORT:-18600}
sv="$build_dir/bin/softverbs"

# pair, column, calc, the perftest commands' iteration counts (shared with ab.sh).
. bench/perftest-lib.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/softverbs-bench.XXXXXX")
cleanup() {
	# Only the perftest processes this script started, by their pids.
	pt_stop_server
	if [ -n "$out_dir" ]; then
		mkdir -p "$out_dir"
		cp "$tmp"/*.json "$tmp"/*.log "$out_dir"/ 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
# baselines

echo "== baselines"
build_cmd=("$CC" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$tmp/baselines" bench/baselines.c)
echo "build: ${build_cmd[*]}"
"${build_cmd[@]}"

baselines_json="$tmp/baselines.json"
baselines_cmd=("$tmp/baselines" --json-file "$baselines_json" "${baseline_args[@]}")
echo "run:   ${baselines_cmd[*]}"
echo
rc=0
"${baselines_cmd[@]}" || rc=$?
if [ "$rc" -ge 2 ]; then
	echo "run.sh: baselines failed (exit status $rc)" >&2
	exit "$rc"
fi

# baseline NAME BYTES [JSON]: the median of one result; nothing (and success) if
# it is unavailable or was not measured. baselines writes each result on one line.
baseline() {
	local file=${3:-$baselines_json}
	sed -n "/\"name\": \"$1\", \"bytes\": $2,/s/.*\"status\": \"ok\", \"median\": \\([^,]*\\),.*/\\1/p" \
		"$file" | head -n 1
}

# json_int KEY: an integer (or null) field at the top of the baselines JSON.
json_int() {
	sed -n "s/^  \"$1\": \\([0-9]*\\|null\\),\$/\\1/p" "$baselines_json" | head -n 1
}

echo
if [ "$run_perftest" -eq 0 ]; then
	echo "perftest on softverbs: skipped (--no-perftest)"
	exit 0
fi

# ---------------------------------------------------------------------------
# perftest on softverbs

skip() {
	echo "perftest on softverbs: skipped ($1)"
	exit 0
}

[ -x "$sv" ] || skip "data path not available: no $sv"
for prog in ib_send_lat ib_write_bw timeout; do
	command -v "$prog" >/dev/null || skip "$prog is not installed"
done

cpu_server=$(json_int cpu_parent)
cpu_client=$(json_int cpu_child)
pin_server=()
pin_client=()
if [ -n "$cpu_server" ] && [ "$cpu_server" != null ] && command -v taskset >/dev/null; then
	pin_server=(taskset -c "$cpu_server")
	pin_client=(taskset -c "$cpu_client")
fi

pt_gid_args

echo "== perftest on softverbs"
if ! pair probe ib_send_lat -s 2 -n 5 || ! column "$tmp/probe.client.log" 2 't_typical[usec]' >/dev/null; then
	# Exit status 124: timeout(1) ended it.
	echo "probe: $client_cmd"
	echo "  client (exit $client_rc) | $(tail -n 1 "$tmp/probe.client.log" 2>/dev/null)"
	echo "  server (exit $server_rc) | $(tail -n 1 "$tmp/probe.server.log" 2>/dev/null)"
	skip "data path not available"
fi

# The summary table: one row per comparison, printed at the end.
summary=()
row() {   # row TEST SOFTVERBS BASELINE RATIO
	summary+=("$(printf '%-31s %-13s %-42s %s' "$1" "$2" "$3" "$4")")
}

failures=0
report() {   # report LABEL: a failed run, with its command and the log's tail
	failures=$((failures + 1))
	echo "$1: failed or unparsable output (client exit $client_rc, server exit $server_rc)"
	row "$1" "failed" "(see above)" "-"
	echo "  server: $server_cmd"
	echo "  client: $client_cmd"
	tail -n 5 "$tmp/$2.client.log" | sed 's/^/  | /'
}

# cacheline TAG: the cache-line one-way latency measured now, in ns. It follows
# where the hypervisor places the vCPUs and can move by several times within a
# run, so ib_send_lat is bracketed by two of these.
cacheline_cmd() {
	echo "$tmp/baselines --only cacheline --json-file $tmp/cacheline-$1.json"
}
cacheline() {
	"$tmp/baselines" --only cacheline --json-file "$tmp/cacheline-$1.json" >/dev/null 2>&1 || true
	baseline cacheline_oneway 64 "$tmp/cacheline-$1.json"
}

# Latency: perftest's typical (median) one-way latency vs the cache-line one-way.
cl_before=$(cacheline before)
if pair send_lat ib_send_lat -s 2 -n "$pt_lat_iters" &&
	lat=$(column "$tmp/send_lat.client.log" 2 't_typical[usec]'); then
	cl_after=$(cacheline after)
	echo
	echo "ib_send_lat -s 2: t_typical $lat µs one way"
	echo "  server: $server_cmd"
	echo "  client: $client_cmd"
	test="ib_send_lat -s 2" value="$lat us"
	for when in before after; do
		if [ "$when" = before ]; then cl=$cl_before; else cl=$cl_after; fi
		[ -n "$cl" ] || continue
		ratio="$(calc '%.1f' "$lat * 1000 / $cl")x"
		echo "  vs cache line one way just $when, $(calc '%.1f' "$cl") ns: $ratio"
		echo "     ($(cacheline_cmd "$when"))"
		row "$test" "$value" "cache line one way, $when: $(calc '%.1f' "$cl") ns" "$ratio"
		test="" value=""
	done
	[ -z "$test" ] || row "$test" "$value" "(cache line not measured)" "-"
else
	report "ib_send_lat -s 2" send_lat
fi

# process_vm_writev just before and just after a bandwidth run, on the client's CPU:
# the copy the write path makes, timed where and when perftest's is (the VM's memory
# bandwidth drifts over a run by more than the difference being measured).
pvm_cmd() {
	echo "${pin_client[*]} $tmp/baselines --only pvm --json-file $tmp/pvm-$1.json"
}
pvm_at() {
	"${pin_client[@]}" "$tmp/baselines" --only pvm --json-file "$tmp/pvm-$1.json" \
		>/dev/null 2>&1 || true
	baseline process_vm_writev "$2" "$tmp/pvm-$1.json"
}

# Bandwidth: perftest's average in Gb/s (10^9 bits) / 8 = GB/s, as the baselines.
for size in 65536 1048576; do
	name=write_bw_$size
	pvm_before=$(pvm_at "before-$size" "$size")
	if pair "$name" ib_write_bw -s "$size" -n "$pt_bw_iters" --report_gbits &&
		gbit=$(column "$tmp/$name.client.log" "$size" 'BW average[Gb/sec]'); then
		pvm_after=$(pvm_at "after-$size" "$size")
		gbs=$(calc '%.2f' "$gbit / 8")
		echo
		echo "ib_write_bw -s $size: $gbs GB/s ($gbit Gb/s average)"
		echo "  server: $server_cmd"
		echo "  client: $client_cmd"
		pvm=$(baseline process_vm_writev "$size")
		mc=$(baseline memcpy_warm "$size")
		if [ "$size" -ge 1048576 ]; then label="$((size / 1048576)) MiB"; else label="$((size / 1024)) KiB"; fi
		test="ib_write_bw -s $size" value="$gbs GB/s"
		for when in before after; do
			if [ "$when" = before ]; then b=$pvm_before; else b=$pvm_after; fi
			[ -n "$b" ] || continue
			ratio=$(calc '%.2f' "$gbit / 8 / $b")
			echo "  vs process_vm_writev just $when, $(calc '%.2f' "$b") GB/s: $ratio"
			echo "     ($(pvm_cmd "$when-$size"))"
			row "$test" "$value" "process_vm_writev $label, $when: $(calc '%.2f' "$b") GB/s" "$ratio"
			test="" value=""
		done
		if [ -n "$pvm" ]; then
			ratio=$(calc '%.2f' "$gbit / 8 / $pvm")
			echo "  vs process_vm_writev $(calc '%.2f' "$pvm") GB/s (baselines): $ratio"
			row "$test" "$value" "process_vm_writev $label: $(calc '%.2f' "$pvm") GB/s" "$ratio"
			test="" value=""
		fi
		if [ -n "$mc" ]; then
			ratio=$(calc '%.2f' "$gbit / 8 / $mc")
			echo "  vs memcpy warm $(calc '%.2f' "$mc") GB/s (baselines): $ratio"
			row "$test" "$value" "memcpy warm $label: $(calc '%.2f' "$mc") GB/s" "$ratio"
			test="" value=""
		fi
		[ -z "$test" ] || row "$test" "$value" "(baselines not measured)" "-"
	else
		report "ib_write_bw -s $size" "$name"
	fi
done

# Message rate: 8-byte writes, 32 per ibv_post_send, 128 outstanding; absolute. Run
# twice: pinned like the others, and unpinned (the scheduler may then run each side's
# progress thread on the other CPU; docs/performance.md says why that matters).
if pair msg_rate_pinned ib_write_bw -s 8 -t 128 -l 32 -n "$pt_rate_iters" -N --report_gbits &&
	mpps=$(column "$tmp/msg_rate_pinned.client.log" 8 'MsgRate[Mpps]'); then
	echo
	echo "ib_write_bw -s 8 -t 128 -l 32 -N (pinned): $mpps Mpps"
	echo "  server: $server_cmd"
	echo "  client: $client_cmd"
	row "ib_write_bw -s 8 -t 128 -l 32 -N, pinned" "$mpps Mpps" "(absolute)" "-"
else
	report "ib_write_bw -s 8 -t 128 -l 32 -N (pinned)" msg_rate_pinned
fi
pin_server=()
pin_client=()
if pair msg_rate ib_write_bw -s 8 -t 128 -l 32 -n "$pt_rate_iters" -N --report_gbits &&
	mpps=$(column "$tmp/msg_rate.client.log" 8 'MsgRate[Mpps]'); then
	echo
	echo "ib_write_bw -s 8 -t 128 -l 32 -N (unpinned): $mpps Mpps"
	echo "  server: $server_cmd"
	echo "  client: $client_cmd"
	row "ib_write_bw -s 8 -t 128 -l 32 -N, unpinned" "$mpps Mpps" "(absolute)" "-"
	call=$(baseline process_vm_writev_call 8)
	if [ -n "$call" ]; then
		echo "  (one process_vm_writev per message, $(calc '%.0f' "$call") ns (baselines), would cap it" \
			"at $(calc '%.2f' "1000 / $call") Mpps)"
	fi
else
	report "ib_write_bw -s 8 -t 128 -l 32 -N" msg_rate
fi

echo
echo "== summary: perftest on softverbs vs baselines of this run (commands above)"
printf '%-31s %-13s %-42s %s\n' "perftest (client side)" "softverbs" "baseline" "ratio"
for line in "${summary[@]}"; do
	echo "$line"
done
[ "$failures" -eq 0 ]
