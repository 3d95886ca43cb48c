#!/usr/bin/env bash
# bench/ab.sh — softverbs before and after a change, in one invocation: the two
# builds take turns on the same three perftest figures bench/run.sh measures, and
# the medians are compared against a 5 % bound.
#
# Every number printed comes with the command that produced it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/ab.sh [--pairs N] [--quick] [--out DIR] [--keep] REV_BEFORE REV_AFTER

Compares two softverbs builds on three perftest figures, alternating them in one
invocation, and fails if any figure's median falls more than 5 %:
  ib_send_lat -s 2 -n 10000 -H                    median one-way latency (µs): the
                                                  median of the samples -H prints,
                                                  i.e. t_typical with more digits;
                                                  higher is worse
  ib_write_bw -s 1048576 -n 5000 --report_gbits   BW average / 8 (GB/s); lower is worse
  ib_write_bw -s 8 -t 128 -l 32 -n 3200000 -N --report_gbits
                                                  message rate, MsgRate (Mpps); lower
                                                  is worse
These are bench/run.sh's commands (run.sh's pinned message rate; -H only adds
the samples to the latency run's output). Server and client are two processes
on 127.0.0.1, pinned to the first two CPUs this process may use (as run.sh's
baselines pick them), each under timeout -k 5 PERFTEST_TIMEOUT.

REV_BEFORE, REV_AFTER: a git revision of this repository (built from a clean
export of that commit: git archive | tar into a temporary directory, then
cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSV_TESTS=OFF, as scripts/setup.sh
builds but without the tests and without apt), or the path of an existing build
directory (one holding bin/softverbs, e.g. build for the working tree's
uncommitted state). Two revisions naming the same commit are built once.

Order: for each figure the two builds run back to back, and the order flips
from one pair to the next (pair 1 before then after, pair 2 after then before,
...: B A, A B, B A, ...). A slow drift of the machine (a build elsewhere
starting or ending) then falls on each side equally over every two pairs,
where a fixed B A order would charge it to one side every time; an even N
balances the order exactly.

options:
  --pairs N   pairs of runs per figure (default 3)
  --quick     a tenth of the iterations (-n 1000, 500, 320000): to check the
              script, not to judge a change
  --out DIR   keep every perftest log and the build logs in DIR
  --keep      keep the temporary builds (their paths are printed) so that a
              later run can take them as build directories
  -h, --help  this text

Prints each run's value with its commands, then a table (markdown): figure,
every run's value before and after, the medians, after/before, and PASS or FAIL
against the 5 % bound.

exit status: 0 every figure within 5 %; 1 some figure fell more than 5 %;
2 usage; 3 a build, the data-path probe or a perftest run failed (and no
figure failed the bound).

environment:
  PERFTEST_TIMEOUT   seconds allowed for each perftest process (default 60)
  PERFTEST_PORT      first TCP port for perftest's handshake (default 18600)
  SOFTVERBS_LIBDIR   unset for the runs: each build's softverbs uses its own
                     libraries
EOF
}

caller_dir=$PWD
cd "$(dirname "$0")/.."
repo=$PWD

pairs=3
quick=0
keep=0
out_dir=
revs=()
while [ $# -gt 0 ]; do
	case "$1" in
	--pairs)
		[ $# -ge 2 ] || { usage >&2; exit 2; }
		pairs=$2
		shift
		;;
	--pairs=*) pairs=${1#--pairs=} ;;
	--quick) quick=1 ;;
	--keep) keep=1 ;;
	--out)
		[ $# -ge 2 ] || { usage >&2; exit 2; }
		out_dir=$2
		shift
		;;
	-h | --help) usage; exit 0 ;;
	--) shift; revs+=("$@"); break ;;
	-*) echo "ab.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	*) revs+=("$1") ;;
	esac
	shift
done
if [ "${#revs[@]}" -ne 2 ]; then
	echo "ab.sh: give two revisions or build directories, before and after (see --help)" >&2
	exit 2
fi
case "$pairs" in
'' | *[!0-9]*) echo "ab.sh: --pairs wants a positive integer, not '$pairs'" >&2; exit 2 ;;
esac
if [ "$pairs" -lt 1 ]; then
	echo "ab.sh: --pairs wants a positive integer, not '$pairs'" >&2
	exit 2
fi
if [ -n "$out_dir" ]; then
	case "$out_dir" in /*) ;; *) out_dir="$caller_dir/$out_dir" ;; esac
fi

for prog in ib_send_lat ib_write_bw timeout git cmake tar; do
	command -v "$prog" >/dev/null || { echo "ab.sh: $prog is not installed" >&2; exit 3; }
done
unset SOFTVERBS_LIBDIR

pt_timeout=${PERFTEST_TIMEOUT:-60}
next_port=${PERFTEST_PORT:-18600}
. bench/perftest-lib.sh
if [ "$quick" -eq 1 ]; then
	pt_lat_iters=$((pt_lat_iters / 10))
	pt_bw_iters=$((pt_bw_iters / 10))
	pt_rate_iters=$((pt_rate_iters / 10))
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/softverbs-ab.XXXXXX")
cleanup() {
	# Only the perftest processes this script started, by their pids.
	pt_stop_server
	if [ -n "$out_dir" ]; then
		mkdir -p "$out_dir"
		cp "$tmp"/*.log "$out_dir"/ 2>/dev/null || true
	fi
	if [ "$keep" -eq 1 ] && compgen -G "$tmp/src-*" >/dev/null; then
		echo "builds kept: $tmp/src-*/build"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
# the two builds

# resolve LABEL ARG: sets build_LABEL (the build directory) and desc_LABEL,
# building ARG's commit when ARG is not a build directory.
declare -A build desc commit_built
resolve() {
	local label=$1 arg=$2 dir commit src log
	dir=$arg
	case "$dir" in /*) ;; *) dir="$caller_dir/$dir" ;; esac
	if [ -d "$dir" ]; then
		dir=$(cd "$dir" && pwd)
		if [ ! -x "$dir/bin/softverbs" ]; then
			echo "ab.sh: $arg is a directory but not a build directory (no bin/softverbs)" >&2
			exit 2
		fi
		build[$label]=$dir
		desc[$label]="build directory $dir"
		return
	fi
	if ! commit=$(git -C "$repo" rev-parse --verify --quiet "$arg^{commit}"); then
		echo "ab.sh: '$arg' is neither a build directory nor a git revision of $repo" >&2
		exit 2
	fi
	desc[$label]="$arg = $(git -C "$repo" log -1 --format='%h %s' "$commit" | cut -c1-60)"
	if [ -n "${commit_built[$commit]:-}" ]; then
		build[$label]=${commit_built[$commit]}
		desc[$label]="${desc[$label]} (the same commit: one build)"
		return
	fi
	src="$tmp/src-$label"
	log="$tmp/build-$label.log"
	mkdir -p "$src"
	echo "build $label: git archive $commit | tar -x -C $src"
	echo "       cmake -S $src -B $src/build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSV_TESTS=OFF"
	echo "       cmake --build $src/build -j$(nproc)"
	if ! { git -C "$repo" archive --format=tar "$commit" | tar -x -C "$src"; } >"$log" 2>&1 ||
		! cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSV_TESTS=OFF \
			>>"$log" 2>&1 ||
		! cmake --build "$src/build" -j"$(nproc)" >>"$log" 2>&1 ||
		[ ! -x "$src/build/bin/softverbs" ]; then
		echo "ab.sh: building $arg ($commit) failed; the end of $log:" >&2
		tail -n 20 "$log" | sed 's/^/  | /' >&2
		exit 3
	fi
	build[$label]="$src/build"
	commit_built[$commit]="$src/build"
}

echo "== builds"
t0=$SECONDS
resolve before "${revs[0]}"
resolve after "${revs[1]}"
echo "before: ${desc[before]}"
echo "        ${build[before]}"
echo "after:  ${desc[after]}"
echo "        ${build[after]}"
echo "(builds took $((SECONDS - t0)) s)"

# ---------------------------------------------------------------------------
# pinning: the first two CPUs this process may use, as bench/baselines.c picks them

cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status |
	awk -F, '{ for (i = 1; i <= NF && n < 2; i++) {
			k = split($i, r, "-"); lo = r[1]; hi = (k > 1) ? r[2] : r[1]
			for (c = lo; c <= hi && n < 2; c++) { printf "%s%d", n ? " " : "", c; n++ }
		} }')
pin_server=()
pin_client=()
read -r cpu_server cpu_client <<<"$cpus" || true
if [ -n "${cpu_client:-}" ] && command -v taskset >/dev/null; then
	pin_server=(taskset -c "$cpu_server")
	pin_client=(taskset -c "$cpu_client")
	echo "pinning: server on CPU $cpu_server, client on CPU $cpu_client"
else
	echo "pinning: none (fewer than two CPUs, or no taskset)"
fi

# use LABEL: point pair at LABEL's build.
use() {
	sv="${build[$1]}/bin/softverbs"
	pt_gid_args
}

# ---------------------------------------------------------------------------
# the figures

figs=(lat bw rate)
declare -A fig_name fig_unit fig_worse fig_fmt
fig_name[lat]="ib_send_lat -s 2"
fig_unit[lat]="µs"
fig_worse[lat]=higher
fig_fmt[lat]=%.4f
fig_name[bw]="ib_write_bw -s 1048576"
fig_unit[bw]="GB/s"
fig_worse[bw]=lower
fig_fmt[bw]=%.2f
fig_name[rate]="ib_write_bw -s 8 -t 128 -l 32 -N, pinned"
fig_unit[rate]="Mpps"
fig_worse[rate]=lower
fig_fmt[rate]=%.2f

# samples_median LOG: the median of the latency samples ib_send_lat -H prints
# after its "#, usec" line (one "N, VALUE" a line); fails when there are none.
samples_median() {
	awk -F', ' '/^#, usec/ { h = 1; next }
		h && /^[0-9]+, [0-9.e+-]+$/ { print $2; next }
		h { h = 0 }' "$1" | sort -g |
		awk '{ v[++n] = $1 }
		END { if (n == 0) exit 1
			printf "%.4f\n", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

# measure FIG NAME: runs FIG once on the build `use` chose; sets value. (Not in a
# command substitution: pair's server_pid, next_port and commands must stay here.)
value=
measure() {
	local log="$tmp/$2.client.log" gbit
	value=
	case "$1" in
	lat)
		pair "$2" ib_send_lat -s 2 -n "$pt_lat_iters" -H || return 1
		value=$(samples_median "$log") || value=$(column "$log" 2 't_typical[usec]')
		;;
	bw)
		pair "$2" ib_write_bw -s 1048576 -n "$pt_bw_iters" --report_gbits || return 1
		gbit=$(column "$log" 1048576 'BW average[Gb/sec]') || return 1
		value=$(calc '%.2f' "$gbit / 8")
		;;
	rate)
		pair "$2" ib_write_bw -s 8 -t 128 -l 32 -n "$pt_rate_iters" -N --report_gbits ||
			return 1
		value=$(column "$log" 8 'MsgRate[Mpps]') || return 1
		value=$(calc '%.2f' "$value")
		;;
	esac
}

# The data path of each build, once, with run.sh's probe (also a warm-up).
echo
echo "== probe"
for label in before after; do
	use "$label"
	if ! pair "probe-$label" ib_send_lat -s 2 -n 5 ||
		! column "$tmp/probe-$label.client.log" 2 't_typical[usec]' >/dev/null; then
		echo "probe ($label): $client_cmd"
		echo "  client (exit $client_rc) | $(tail -n 1 "$tmp/probe-$label.client.log" 2>/dev/null)"
		echo "  server (exit $server_rc) | $(tail -n 1 "$tmp/probe-$label.server.log" 2>/dev/null)"
		echo "ab.sh: the $label build's data path does not work" >&2
		exit 3
	fi
	echo "$label: ok"
done

declare -A vals cmds
failed_runs=0
echo
echo "== runs ($pairs pairs$([ "$quick" -eq 1 ] && echo ', --quick'))"
for ((p = 1; p <= pairs; p++)); do
	tp=$SECONDS
	if [ $((p % 2)) -eq 1 ]; then order=(before after); else order=(after before); fi
	for fig in "${figs[@]}"; do
		for label in "${order[@]}"; do
			use "$label"
			name="$fig-$label-$p"
			if measure "$fig" "$name"; then
				vals[$fig.$label]+="$value "
				echo "pair $p, $label, ${fig_name[$fig]}: $value ${fig_unit[$fig]}"
			else
				failed_runs=$((failed_runs + 1))
				vals[$fig.$label]+="failed "
				echo "pair $p, $label, ${fig_name[$fig]}: failed or unparsable" \
					"(client exit $client_rc, server exit $server_rc)"
				tail -n 5 "$tmp/$name.client.log" 2>/dev/null | sed 's/^/  | /'
			fi
			echo "  server: $server_cmd"
			echo "  client: $client_cmd"
			# The commands differ between the builds only in the path and the port.
			cmds[$fig]=$(printf '%s\n' "${client_cmd/"${build[$label]}"/BUILD}" |
				sed 's/ -p [0-9]* / -p PORT /')
		done
	done
	echo "(pair $p took $((SECONDS - tp)) s)"
done

# ---------------------------------------------------------------------------
# the table

# median VALUES...: the median of the numbers among VALUES ("failed" skipped).
median() {
	printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
		awk '{ v[++n] = $1 }
		END { if (n == 0) exit 1
			printf "%.6g\n", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

bound=0.05
regressions=0
echo
echo "== before/after: medians of $pairs pairs, bound 5 %$([ "$quick" -eq 1 ] && echo ' (--quick)')"
echo "before: ${desc[before]}"
echo "after:  ${desc[after]}"
echo
echo "| figure | unit | before | after | median before | median after | after/before | result |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for fig in "${figs[@]}"; do
	read -r -a b <<<"${vals[$fig.before]:-}"
	read -r -a a <<<"${vals[$fig.after]:-}"
	if mb=$(median "${b[@]}") && ma=$(median "${a[@]}"); then
		ratio=$(calc '%.3f' "$ma / $mb")
		mb=$(calc "${fig_fmt[$fig]}" "$mb")
		ma=$(calc "${fig_fmt[$fig]}" "$ma")
		if [ "${fig_worse[$fig]}" = higher ]; then
			verdict=$(awk -v r="$ratio" -v d="$bound" 'BEGIN { print (r > 1 + d) ? "FAIL" : "PASS" }')
			rule="≤ 1.05"
		else
			verdict=$(awk -v r="$ratio" -v d="$bound" 'BEGIN { print (r < 1 - d) ? "FAIL" : "PASS" }')
			rule="≥ 0.95"
		fi
		[ "$verdict" = PASS ] || regressions=$((regressions + 1))
		result="$verdict ($rule)"
	else
		mb=${mb:--} ma=${ma:--} ratio=- result="no result"
	fi
	echo "| ${fig_name[$fig]} | ${fig_unit[$fig]} | ${b[*]} | ${a[*]} | $mb | $ma | $ratio | $result |"
done
echo
echo "commands (client side; the server is the same without 127.0.0.1, pinned to"
echo "CPU ${cpu_server:-any}; BUILD is the build directory of each side):"
for fig in "${figs[@]}"; do
	echo "  ${cmds[$fig]}"
done
echo "order: for each figure, pair 1 before then after, pair 2 after then before, and so on"

if [ "$regressions" -gt 0 ]; then
	echo "ab.sh: $regressions figure(s) fell more than 5 %" >&2
	exit 1
fi
if [ "$failed_runs" -gt 0 ]; then
	echo "ab.sh: $failed_runs run(s) failed" >&2
	exit 3
fi
