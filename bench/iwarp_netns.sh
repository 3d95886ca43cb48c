#!/usr/bin/env bash
# bench/iwarp_netns.sh — softverbs between two hosts (the iWARP wire) against the TCP
# baselines, all measured in one invocation on the same path: two network namespaces
# joined by a veth pair (tests/apps/netns.sh: A 10.77.0.1, B 10.77.0.2), the server of
# every pair in A pinned to one CPU, the client in B pinned to the other.
#
# Baselines: sockperf TCP and UDP ping-pong latency, one iperf3 TCP stream, libfabric's tcp
# provider (fi_pingpong; fi_rma_bw when installed) and UCX's tcp transport
# (ucx_perftest). softverbs: perftest under `softverbs run` with SOFTVERBS_WIRE=iwarp;
# a run that fails is reported "n/a (failed)" and the script goes on.
#
# Every figure is printed with the commands that produced it, then a table of ratios
# (softverbs / baseline, same invocation). Needs root (namespaces); the benchmark
# programs are installed with apt-get when missing.
set -uo pipefail

usage() {
	cat <<'EOF'
usage: bench/iwarp_netns.sh [--rounds N] [--seconds S] [--quiet-wait S] [--baselines-only]
                            [--lat-pairs P] [--out DIR]

Across a veth pair between two network namespaces (server in A on CPU 0, client
in B on CPU 1, each under taskset and timeout), N rounds (default 3) of:
  sockperf ping-pong --tcp --nonblocked -m 14     one-way latency (p50), µs
  sockperf ping-pong --nonblocked -m 14 (UDP)      one-way latency (p50), µs
  iperf3 -c, one TCP stream                        Gb/s
  fi_pingpong -p tcp -e msg, 2 B and 1 MiB         one-way latency, µs; MB/s
  fi_rma_bw -p tcp (when installed)                Gb/s
  ucx_perftest, UCX_TLS=tcp: tag_lat 8 B, ucp_put_bw 1 MiB and 8 B, ucp_get 1 MiB
  softverbs (SOFTVERBS_WIRE=iwarp): ib_send_lat -s 2, ib_write_bw -s 1048576,
  ib_read_bw -s 1048576, ib_write_bw -s 8 -t 128 -l 32 -N (message rate),
  ib_send_lat -c UD -s 2 (the UDP wire); with SOFTVERBS_WIRE=roce (RC over RoCE v2)
  and -m 1024 (the path MTU of the veth's 1500 bytes, as a NIC reports it)
  ib_send_lat -s 2, ib_write_bw and ib_read_bw -s 1048576 and the message rate;
  ucx_perftest tag_lat 8 B with
  UCX_TLS=rc_verbs,ud_verbs:aux on softverbs0:1
Each figure is the median of its rounds; the table gives softverbs / baseline. Each
line shows, as "others", how many tasks other work had runnable just before its run
began (the machine may be shared).

Then P latency triples (--lat-pairs, default 5), each run back to back: sockperf TCP
(2 s), ib_send_lat -s 2, UCX tcp tag_lat 8 B. Each triple gives its own ratios, and the
verdict is their median: a machine whose speed moves between runs (the development VM
has a fast and a slow mode, 1.5x apart, each lasting seconds to minutes) puts a round's
sockperf and ib_send_lat, minutes apart, in different modes; a triple's, seconds
apart, mostly in the same.

options:
  --rounds N         rounds of every measurement (default 3)
  --seconds S        duration of each sockperf and iperf3 run (default 5)
  --quiet-wait S     before each round, wait up to S seconds (default 0) until other
                     work keeps less than half a CPU busy; it is noted anyway
  --baselines-only   skip the softverbs runs
  --lat-pairs P      latency triples run back to back after the rounds (default 5; 0:
                     none)
  --out DIR          keep every log in DIR
  -h, --help         this text

environment:
  SOFTVERBS_BUILD    softverbs' build directory (default build)
  BENCH_TIMEOUT      seconds allowed for each program (default 60)
EOF
}

cd "$(dirname "$0")/.." || exit 2

rounds=3
seconds=5
quiet_wait=0
with_sv=1
lat_pairs=5
out_dir=
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=${2:?}; shift ;;
	--seconds) seconds=${2:?}; shift ;;
	--quiet-wait) quiet_wait=${2:?}; shift ;;
	--baselines-only) with_sv=0 ;;
	--lat-pairs) lat_pairs=${2:?}; shift ;;
	--out) out_dir=${2:?}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "iwarp_netns.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done
[[ $rounds =~ ^[1-9][0-9]*$ && $seconds =~ ^[1-9][0-9]*$ && $quiet_wait =~ ^[0-9]+$ &&
   $lat_pairs =~ ^[0-9]+$ ]] ||
	{ echo "iwarp_netns.sh: --rounds, --seconds, --quiet-wait and --lat-pairs take integers" >&2
	  exit 2; }

build_dir=${SOFTVERBS_BUILD:-build}
SV=$build_dir/bin/softverbs
T=${BENCH_TIMEOUT:-60}

# The programs, installed (Debian's packages) when missing.
declare -A pkg_of=([sockperf]=sockperf [iperf3]=iperf3 [fi_pingpong]=libfabric-bin
	[ucx_perftest]=ucx-utils [ib_send_lat]=perftest [taskset]=util-linux
	[python3]=python3 [ip]=iproute2)
missing=()
for prog in "${!pkg_of[@]}"; do
	command -v "$prog" >/dev/null || missing+=("${pkg_of[$prog]}")
done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" -eq 0 ] || { echo "iwarp_netns.sh: install ${missing[*]} (needs root)" >&2; exit 1; }
	echo "installing ${missing[*]}"
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends "${missing[@]}" >/dev/null; }; then
		echo "iwarp_netns.sh: apt-get install ${missing[*]} failed" >&2
		exit 1
	fi
fi

# column, calc and the perftest iteration counts bench/run.sh uses.
. bench/perftest-lib.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/softverbs-iwarp-bench.XXXXXX")
# shellcheck disable=SC2317 # (run by the EXIT trap)
keep_logs() {
	if [ -n "$out_dir" ]; then
		mkdir -p "$out_dir" && cp "$tmp"/* "$out_dir"/ 2>/dev/null
		echo "logs in $out_dir"
	fi
	rm -rf "$tmp"
}
trap keep_logs EXIT
# The namespaces, removed on any exit (netns.sh's trap, which then runs keep_logs).
. tests/apps/netns.sh
ns_pair

ncpu=$(nproc)
CPU_S=0
CPU_C=$((ncpu > 1 ? 1 : 0))
PIN_S=(taskset -c "$CPU_S")
PIN_C=(taskset -c "$CPU_C")

load() { cut -d' ' -f1 /proc/loadavg; }
# others: runnable tasks other than the sampler, averaged over 20 looks 25 ms apart,
# taken between two runs (none of this script's benchmarks is running then): how many
# CPUs other work keeps busy. The load average would count this script's own spinning
# pairs of the minute before.
others() {
	local i n=0 a b c r
	for i in $(seq 20); do
		read -r a b c r _ </proc/loadavg # (a builtin: the only reader running is this shell)
		n=$((n + ${r%/*} - 1))
		sleep 0.025
	done
	calc '%.1f' "$n / 20"
}
echo "== iWARP between namespaces: baselines and softverbs, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host: nproc $ncpu, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
if awk -v l="$(load)" 'BEGIN { exit !(l > 1.5) }'; then
	echo "note: the 1-minute load is $(load) (> 1.5): other work is running; figures may be low"
fi
echo "versions: sockperf $(dpkg-query -W -f='${Version}' sockperf 2>/dev/null)," \
	"iperf3 $(dpkg-query -W -f='${Version}' iperf3 2>/dev/null)," \
	"libfabric $(dpkg-query -W -f='${Version}' libfabric1 2>/dev/null)," \
	"UCX $(dpkg-query -W -f='${Version}' ucx-utils 2>/dev/null)," \
	"perftest $(dpkg-query -W -f='${Version}' perftest 2>/dev/null)"
echo "server in namespace A (10.77.0.1) on CPU $CPU_S, client in B (10.77.0.2) on CPU $CPU_C;" \
	"each program under timeout -k 5 $T; $rounds round(s)"
echo

# run NAME PORT STOP SERVER... :: CLIENT...: one pair; the server in A (once it listens
# on PORT), the client in B. STOP "stop": the server serves until stopped (TERM once the
# client is done); "-": it exits by itself (bounded: 10 s after the client). Logs in
# $tmp/NAME.{srv,cli}; the commands in run_srv, run_cli. Succeeds when both exit 0.
run() {
	local name=$1 port=$2 stop=$3 srv=() cli=() spid crc=255 src
	shift 3
	while [ $# -gt 0 ] && [ "$1" != :: ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	run_load=$(others)
	run_srv="[A] ${srv[*]}"
	run_cli="[B] ${cli[*]}"
	ns_bg "$NS_A" "$T" "${srv[@]}" >"$tmp/$name.srv" 2>&1
	spid=$NS_PID
	if ns_wait_listen "$NS_A" "$port" "" "$spid" 15 >>"$tmp/$name.srv"; then
		ns_exec "$NS_B" "$T" "${cli[@]}" >"$tmp/$name.cli" 2>&1
		crc=$?
	fi
	if [ "$stop" = stop ]; then
		ns_wait_exit "$spid" 0
		src=$?
		[ $src -eq 143 ] && src=0
	else
		ns_wait_exit "$spid" "$([ $crc -eq 0 ] && echo 10 || echo 3)"
		src=$?
	fi
	run_status="server $src, client $crc"
	[ $crc -eq 0 ] && [ $src -eq 0 ]
}

# Figures: fig_vals[KEY] the values of the rounds, fig_cmd[KEY] the commands,
# fig_unit[KEY], fig_fail[KEY] why the last round gave none.
declare -A fig_vals fig_cmd fig_unit fig_fail fig_label
keys=()

# record KEY LABEL UNIT VALUE: VALUE (empty: failed) for this round, printed with the
# commands.
record() {
	local key=$1 label=$2 unit=$3 val=$4
	[[ " ${keys[*]} " == *" $key "* ]] || keys+=("$key")
	fig_label[$key]=$label
	fig_unit[$key]=$unit
	fig_cmd[$key]="$run_srv | $run_cli"
	last_val=$val
	if [ -n "$val" ]; then
		fig_vals[$key]="${fig_vals[$key]:-} $val"
		printf '  %-44s %10s %-5s  %s\n' "$label" "$val" "$unit" "$run_cli"
		printf '  %-44s %10s %-5s  %s\n' "(others $run_load)" "" "" "$run_srv"
	else
		fig_fail[$key]="$run_status; $(last_words "$tmp/$key.cli") / $(last_words "$tmp/$key.srv")"
		printf '  %-44s %10s %-5s  %s\n' "$label" "n/a" "" "(failed: ${fig_fail[$key]})"
		printf '  %-44s %10s %-5s  %s\n' "(others ${run_load:-?})" "" "" "$run_cli"
		printf '  %-44s %10s %-5s  %s\n' "" "" "" "$run_srv"
	fi
}

# last_words LOG: its first line that reports an error, or else its last line that is
# not blank or a rule of dashes.
last_words() {
	{ grep -m 1 -E "[Ee]rror|[Ff]ail|[Cc]ouldn't|[Uu]nable|exceeded" "$1" ||
		grep -vE '^[[:space:]-]*$' "$1" | tail -n 1; } 2>/dev/null | sed 's/^[[:space:]]*//'
}

# median KEY: the median of KEY's values ("" if none).
median() {
	# shellcheck disable=SC2086
	printf '%s\n' ${fig_vals[$1]:-} | sort -g | awk '{ v[NR] = $1 }
		END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

num() { [[ ${1:-} =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] && echo "$1"; }

# --- the baselines ------------------------------------------------------------

# sockperf_lat [KEY SECONDS]
sockperf_lat() {
	local key=${1:-sockperf_lat} secs=${2:-$seconds} v=
	run $key 11111 stop "${PIN_S[@]}" sockperf server --tcp --nonblocked -i 10.77.0.1 -p 11111 :: \
		"${PIN_C[@]}" sockperf ping-pong --tcp --nonblocked -m 14 -i 10.77.0.1 -p 11111 -t "$secs" &&
		v=$(num "$(sed -n 's/.*percentile 50\.000 = *\([0-9.]*\).*/\1/p' "$tmp/$key.cli")")
	record $key "sockperf TCP ping-pong 14 B, one way (p50)" µs "$v"
}

# UDP: the baseline of UD datagrams between hosts (softverbs' UDP wire). The server's
# socket is UDP: wait for it in ss's UDP table.
sockperf_udp_lat() {
	local key=sockperf_udp_lat v=
	NS_SS_PROTO=u run $key 11112 stop "${PIN_S[@]}" sockperf server --nonblocked -i 10.77.0.1 -p 11112 :: \
		"${PIN_C[@]}" sockperf ping-pong --nonblocked -m 14 -i 10.77.0.1 -p 11112 -t "$seconds" &&
		v=$(num "$(sed -n 's/.*percentile 50\.000 = *\([0-9.]*\).*/\1/p' "$tmp/$key.cli")")
	record $key "sockperf UDP ping-pong 14 B, one way (p50)" µs "$v"
}

iperf3_bw() {
	local key=iperf3_bw v=
	run $key 5201 - "${PIN_S[@]}" iperf3 -s -1 -B 10.77.0.1 -p 5201 :: \
		"${PIN_C[@]}" iperf3 -c 10.77.0.1 -p 5201 -t "$seconds" -J &&
		v=$(num "$(python3 -c 'import json, sys
print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e9))' \
			"$tmp/$key.cli" 2>/dev/null)")
	record $key "iperf3, one TCP stream" Gb/s "$v"
}

# fi_pingpong's row: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; usec/xfer
# counts both directions' transfers, i.e. the one-way time.
fi_pp() {
	local key=$1 size=$2 iters=$3 field=$4 label=$5 unit=$6 v=
	run "$key" 47592 - "${PIN_S[@]}" fi_pingpong -p tcp -e msg -I "$iters" -S "$size" -B 47592 :: \
		"${PIN_C[@]}" fi_pingpong -p tcp -e msg -I "$iters" -S "$size" -P 47592 10.77.0.1 &&
		v=$(num "$(awk -v f="$field" '$1 != "bytes" && NF == 8 { v = $f } END { print v }' "$tmp/$key.cli")")
	record "$key" "$label" "$unit" "$v"
}

fi_rma() {
	local key=fi_rma_bw v=
	command -v fi_rma_bw >/dev/null || return 0
	run $key 47592 - "${PIN_S[@]}" fi_rma_bw -p tcp -e rdm -o write -S 1048576 -I 5000 -B 47592 :: \
		"${PIN_C[@]}" fi_rma_bw -p tcp -e rdm -o write -S 1048576 -I 5000 -P 47592 10.77.0.1 &&
		v=$(num "$(awk '$1 != "bytes" && NF == 8 { v = $6 * 8 / 1000 } END { if (v != "") printf "%.2f\n", v }' "$tmp/$key.cli")")
	record $key "fi_rma_bw tcp, WRITE 1 MiB" Gb/s "$v"
}

# ucx_perftest's "Final:" row: iterations, then latency/overhead 50%ile, average,
# overall (µs), bandwidth average, overall (MB/s), message rate average, overall (msg/s).
ucx() {
	local key=$1 test=$2 size=$3 iters=$4 field=$5 scale=$6 label=$7 unit=$8 v=
	run "$key" 13337 - env UCX_TLS=tcp UCX_NET_DEVICES=veth0 "${PIN_S[@]}" ucx_perftest -p 13337 :: \
		env UCX_TLS=tcp UCX_NET_DEVICES=veth0 "${PIN_C[@]}" ucx_perftest 10.77.0.1 -p 13337 \
		-t "$test" -s "$size" -n "$iters" &&
		v=$(num "$(awk -v f="$field" -v k="$scale" '$1 == "Final:" { printf "%.4g\n", $f * k }' "$tmp/$key.cli")")
	record "$key" "$label" "$unit" "$v"
}

# --- softverbs: perftest over the iWARP wire ------------------------------------

# sv_ucx KEY TEST SIZE ITERS FIELD SCALE LABEL UNIT: ucx_perftest on softverbs (rc_verbs
# over the iWARP wire, wired up over ud_verbs on the UDP wire), as ucx() reads it.
sv_ucx() {
	local key=$1 test=$2 size=$3 iters=$4 field=$5 scale=$6 label=$7 unit=$8 v=
	local env=(env UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=softverbs0:1)
	run "$key" 13338 - "${env[@]}" "${PIN_S[@]}" "$SV" run -- ucx_perftest -p 13338 :: \
		"${env[@]}" "${PIN_C[@]}" "$SV" run -- ucx_perftest 10.77.0.1 -p 13338 \
		-t "$test" -s "$size" -n "$iters" &&
		v=$(num "$(awk -v f="$field" -v k="$scale" '$1 == "Final:" { printf "%.4g\n", $f * k }' "$tmp/$key.cli")")
	record "$key" "$label" "$unit" "$v"
}

GA=
GB=
sv_ready() {
	[ -n "$GA" ] && [ -n "$GB" ] && return 0
	[ -x "$SV" ] || { sv_why="no $SV (build it: scripts/setup.sh --no-run)"; return 1; }
	GA=$(ns_gid_index "$NS_A" 10.77.0.1)
	GB=$(ns_gid_index "$NS_B" 10.77.0.2)
	[ -n "$GA" ] && [ -n "$GB" ] && return 0
	sv_why="no GID of 10.77.0.1 in A or of 10.77.0.2 in B in softverbs run ibv_devinfo -v"
	return 1
}

# sv KEY LABEL UNIT COLUMN SCALE SIZE PROGRAM ARGS...: perftest under softverbs run,
# SOFTVERBS_WIRE=$wire (iwarp unless the caller sets wire=roce); the figure is COLUMN
# (perftest's header name) x SCALE.
sv() {
	local key=$1 label=$2 unit=$3 col=$4 scale=$5 size=$6 prog=$7 v="" c
	shift 7
	if [ -n "${sv_gave_up[$key]:-}" ]; then
		return 0
	fi
	if ! sv_ready; then
		run_srv="[A] $SV run -- $prog $*"
		run_cli="[B] $SV run -- $prog $* 10.77.0.1"
		run_status=$sv_why
		record "$key" "$label" "$unit" ""
		sv_gave_up[$key]=1
		return 0
	fi
	run "$key" 18600 - env SOFTVERBS_WIRE="${wire:-iwarp}" "${PIN_S[@]}" "$SV" run -- "$prog" -p 18600 -x "$GA" "$@" :: \
		env SOFTVERBS_WIRE="${wire:-iwarp}" "${PIN_C[@]}" "$SV" run -- "$prog" -p 18600 -x "$GB" "$@" 10.77.0.1 &&
		c=$(column "$tmp/$key.cli" "$size" "$col") &&
		v=$(num "$(calc '%.4g' "$c * $scale")")
	record "$key" "$label" "$unit" "$v"
	# A failed run fails the same way in the next round: do not wait for it again.
	[ -n "$v" ] || sv_gave_up[$key]=1
}
declare -A sv_gave_up

# quiet: wait (at most --quiet-wait seconds) until other work keeps less than half a
# CPU busy.
quiet() {
	local deadline=$((SECONDS + quiet_wait))
	while awk -v l="$(others)" 'BEGIN { exit !(l >= 0.5) }' && [ $SECONDS -lt $deadline ]; do
		sleep 2
	done
}

for ((r = 1; r <= rounds; r++)); do
	quiet
	echo "== round $r of $rounds (1-minute load $(load), other work's runnable tasks $(others))"
	sockperf_lat
	sockperf_udp_lat
	iperf3_bw
	fi_pp fi_lat 2 100000 7 "fi_pingpong tcp 2 B, one way (mean)" µs
	fi_pp fi_1m 1048576 1000 6 "fi_pingpong tcp 1 MiB (ping-pong)" MB/s
	fi_rma
	ucx ucx_tag_lat tag_lat 8 100000 3 1 "ucx_perftest tcp tag_lat 8 B (p50)" µs
	ucx ucx_put_bw ucp_put_bw 1048576 2000 7 0.008 "ucx_perftest tcp ucp_put_bw 1 MiB" Gb/s
	ucx ucx_get_bw ucp_get 1048576 2000 7 0.008 "ucx_perftest tcp ucp_get 1 MiB" Gb/s
	ucx ucx_put_mr ucp_put_bw 8 1000000 9 0.000001 "ucx_perftest tcp ucp_put_bw 8 B, rate" M/s
	if [ $with_sv -eq 1 ]; then
		sv sv_lat "softverbs ib_send_lat -s 2 (t_typical)" µs 't_typical[usec]' 1 2 \
			ib_send_lat -s 2 -n "$pt_lat_iters"
		sv sv_write "softverbs ib_write_bw -s 1048576" Gb/s 'BW average[Gb/sec]' 1 1048576 \
			ib_write_bw -s 1048576 -n "$pt_bw_iters" --report_gbits
		sv sv_read "softverbs ib_read_bw -s 1048576" Gb/s 'BW average[Gb/sec]' 1 1048576 \
			ib_read_bw -s 1048576 -n "$pt_bw_iters" --report_gbits
		sv sv_rate "softverbs ib_write_bw -s 8 -t 128 -l 32 -N, rate" M/s 'MsgRate[Mpps]' 1 8 \
			ib_write_bw -s 8 -t 128 -l 32 -n "$pt_rate_iters" -N --report_gbits
		sv sv_ud_lat "softverbs ib_send_lat -c UD -s 2 (t_typical)" µs 't_typical[usec]' 1 2 \
			ib_send_lat -c UD -s 2 -n "$pt_lat_iters"
		# RoCE at the path MTU the veth's 1500 bytes allow (-m 1024, as rxe or a NIC
		# reports it): softverbs0's 4096 would go in IP fragments, a packet a call.
		wire=roce sv sv_roce_lat "softverbs RoCE ib_send_lat -s 2 -m 1024 (t_typical)" µs \
			't_typical[usec]' 1 2 ib_send_lat -s 2 -m 1024 -n "$pt_lat_iters"
		wire=roce sv sv_roce_write "softverbs RoCE ib_write_bw -s 1048576 -m 1024" Gb/s \
			'BW average[Gb/sec]' 1 1048576 ib_write_bw -s 1048576 -m 1024 -n "$pt_bw_iters" \
			--report_gbits
		wire=roce sv sv_roce_read "softverbs RoCE ib_read_bw -s 1048576 -m 1024" Gb/s \
			'BW average[Gb/sec]' 1 1048576 ib_read_bw -s 1048576 -m 1024 -n "$pt_bw_iters" \
			--report_gbits
		wire=roce sv sv_roce_rate "softverbs RoCE ib_write_bw -s 8 -t 128 -l 32 -N -m 1024, rate" \
			M/s 'MsgRate[Mpps]' 1 8 ib_write_bw -s 8 -t 128 -l 32 -m 1024 -n "$pt_rate_iters" -N \
			--report_gbits
		sv_ucx sv_ucx_lat tag_lat 8 100000 3 1 "ucx_perftest softverbs rc tag_lat 8 B (p50)" µs
	fi
	echo
done

# --- latency triples, back to back ----------------------------------------------

pair_sp=()
pair_sv=()
pair_ucx=()
if [ $with_sv -eq 1 ] && [ "$lat_pairs" -gt 0 ]; then
	for ((p = 1; p <= lat_pairs; p++)); do
		echo "== latency triple $p of $lat_pairs"
		last_val=
		sockperf_lat sockperf_lat_p 2
		pair_sp+=("$last_val")
		last_val=
		sv sv_lat_p "softverbs ib_send_lat -s 2 (t_typical), triples" µs 't_typical[usec]' 1 2 \
			ib_send_lat -s 2 -n "$pt_lat_iters"
		pair_sv+=("$last_val")
		last_val=
		ucx ucx_tag_lat_p tag_lat 8 100000 3 1 "ucx_perftest tcp tag_lat 8 B (p50), triples" µs
		pair_ucx+=("$last_val")
	done
	echo
fi

# --- the table ------------------------------------------------------------------

fig() { # fig KEY: "median unit (the rounds' values)", or n/a (failed)
	local k=$1 m
	m=$(median "$k")
	if [ -z "$m" ]; then
		echo "n/a (failed)"
	else
		# shellcheck disable=SC2086
		set -- ${fig_vals[$k]}
		echo "$m ${fig_unit[$k]:-}$([ $# -gt 1 ] && printf ' (%s)' "$(echo "$*" | tr ' ' '/')")"
	fi
}

echo "== summary: medians of $rounds round(s); ratio = softverbs / baseline (same invocation)"
echo
echo "| figure | median (rounds) | command (client, in B; server in A as listed above) |"
echo "| --- | --- | --- |"
for key in "${keys[@]}"; do
	[ "$with_sv" -eq 0 ] && [[ $key == sv_* ]] && continue
	printf '| %s | %s | %s |\n' "${fig_label[$key]}" "$(fig "$key")" \
		"\`${fig_cmd[$key]#*| \[B\] }\`"
done
echo

if [ $with_sv -eq 1 ]; then
	echo "| softverbs | baseline | ratio | target |"
	echo "| --- | --- | --- | --- |"
	# ratio SV BASE TARGET_RE WANT: the ratio and whether it meets WANT ("<= 1.2", ">= 0.9",
	# "< 1" ahead for a latency, "> 1" ahead for a rate).
	ratio() {
		local s b r verdict
		s=$(median "$1")
		b=$(median "$2")
		if [ -z "$s" ] || [ -z "$b" ]; then
			r="n/a"
			verdict="n/a"
		else
			r=$(calc '%.3f' "$s / $b")
			if awk -v r="$r" -v w="$3" 'BEGIN { split(w, a, " ")
				if (a[1] == "<=") exit !(r <= a[2]); if (a[1] == ">=") exit !(r >= a[2])
				if (a[1] == "<") exit !(r < a[2]); exit !(r > a[2]) }'; then
				verdict="met"
			else
				verdict="not met"
			fi
		fi
		printf '| %s: %s | %s: %s | %s | %s %s: %s |\n' "${fig_label[$1]}" "$(fig "$1")" \
			"${fig_label[$2]:-$2}" "$(fig "$2")" "$r" "ratio" "$3" "$verdict"
	}
	ratio sv_lat sockperf_lat "<= 1.2"
	ratio sv_lat fi_lat "< 1"
	ratio sv_lat ucx_tag_lat "< 1"
	ratio sv_write iperf3_bw ">= 0.9"
	ratio sv_write ucx_put_bw "> 1"
	[ -n "${fig_label[fi_rma_bw]:-}" ] && ratio sv_write fi_rma_bw "> 1"
	ratio sv_read iperf3_bw ">= 0.9"
	ratio sv_read ucx_get_bw "> 1"
	ratio sv_rate ucx_put_mr "> 1"
	ratio sv_ud_lat sockperf_udp_lat "<= 1.2"
	ratio sv_roce_lat sockperf_udp_lat "<= 1.1"
	ratio sv_roce_lat sv_lat "<= 1"
	ratio sv_roce_write iperf3_bw ">= 1"
	ratio sv_roce_read iperf3_bw ">= 1"
	ratio sv_roce_rate sv_rate ">= 1"
	ratio sv_ucx_lat ucx_tag_lat "< 1"
	echo
	if [ ${#pair_sv[@]} -gt 0 ]; then
		# pair_ratios BASE_ARRAY WANT LABEL: each triple's ib_send_lat / BASE, and their
		# median against WANT.
		pair_ratios() {
			local -n base=$1
			local rs=() i m verdict
			for i in "${!pair_sv[@]}"; do
				[ -n "${pair_sv[$i]}" ] && [ -n "${base[$i]:-}" ] &&
					rs+=("$(calc '%.3f' "${pair_sv[$i]} / ${base[$i]}")")
			done
			if [ ${#rs[@]} -eq 0 ]; then
				printf '| ib_send_lat / %s, each triple | n/a | %s: n/a |\n' "$3" "$2"
				return
			fi
			m=$(printf '%s\n' "${rs[@]}" | sort -g | awk '{ v[NR] = $1 } END {
				if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
			if awk -v r="$m" -v w="$2" 'BEGIN { split(w, a, " ")
				if (a[1] == "<=") exit !(r <= a[2]); exit !(r < a[2]) }'; then
				verdict="met"
			else
				verdict="not met"
			fi
			printf '| ib_send_lat / %s, each triple: %s | median %s | ratio %s: %s |\n' "$3" \
				"$(echo "${rs[*]}" | tr ' ' '/')" "$m" "$2" "$verdict"
		}
		echo "Latency triples, back to back (ib_send_lat µs: $(echo "${pair_sv[*]}" | tr ' ' '/');"
		echo "sockperf µs: $(echo "${pair_sp[*]}" | tr ' ' '/'); UCX tcp tag_lat µs:" \
			"$(echo "${pair_ucx[*]}" | tr ' ' '/')):"
		echo
		echo "| triples | median of the ratios | target |"
		echo "| --- | --- | --- |"
		pair_ratios pair_sp "<= 1.2" "sockperf TCP"
		pair_ratios pair_ucx "< 1" "UCX tcp tag_lat"
		echo
	fi
	for key in sv_lat sv_write sv_read sv_rate sv_ud_lat sv_roce_lat sv_roce_write sv_roce_read \
		sv_roce_rate sv_ucx_lat; do
		[ -n "${fig_fail[$key]:-}" ] && echo "$key failed: ${fig_fail[$key]}"
	done
fi
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit 0
