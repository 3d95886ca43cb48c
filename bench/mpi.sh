#!/usr/bin/env bash
# shellcheck disable=SC2054 # (commas inside Open MPI's arguments, not array separators)
# bench/mpi.sh — MPI on softverbs against Open MPI's own transports, on the same ranks in
# one invocation: bench/mpi_bench.c (ping-pong latency and bandwidth, MPI_Allreduce and
# MPI_Allgather bus bandwidth by size, as nccl-tests count them) under Open MPI over
#   sv-ucx    softverbs through UCX:       --mca pml ucx, UCX_TLS=rc,self,
#                                          UCX_NET_DEVICES=softverbs0:1 (no shared memory)
#   sv-ofi    softverbs through libfabric: --mca pml cm --mca mtl ofi,
#                                          FI_PROVIDER='verbs;ofi_rxm'
#   vader     Open MPI's shared memory:    --mca pml ob1 --mca btl self,vader
#   tcp       Open MPI's TCP on loopback:  --mca pml ob1 --mca btl self,tcp
# The softverbs runs go through `softverbs run`. Writes DIR/<transport>-np<N>.tsv (the
# benchmark's output), .cmd (the exact command and the load before it), .log, a combined
# markdown table DIR/mpi.md (with softverbs / vader ratios) and the plots DIR/*.svg.
# --netns: the ranks on two "hosts", network namespaces joined by a veth pair
# (tests/apps/netns.sh), softverbs (its iWARP wire) against Open MPI's btl tcp.
set -uo pipefail

usage() {
	cat <<'EOF'
usage: bench/mpi.sh [--np LIST] [--transports LIST] [--quick] [--netns] [--out DIR]

Builds bench/mpi_bench.c with mpicc.openmpi into DIR (and checks that it also builds
with mpicc.mpich), then runs it under mpirun.openmpi on one host over each transport:
  sv-ucx   softverbs, --mca pml ucx, UCX_TLS=rc,self UCX_NET_DEVICES=softverbs0:1
  sv-ofi   softverbs, --mca pml cm --mca mtl ofi, FI_PROVIDER='verbs;ofi_rxm'
  vader    --mca pml ob1 --mca btl self,vader
  tcp      --mca pml ob1 --mca btl self,tcp, loopback
2 ranks: ping-pong, all-reduce, all-gather; each further N of --np: the collectives.
Every rank count runs all transports one after the other before the next count. A run
that fails is reported with the end of its log and the script goes on. A softverbs run
counts only when its log shows that the stack chose softverbs0 (UCX_LOG_LEVEL=info:
"tag(rc_verbs/softverbs0:1)"; --mca mtl_base_verbose 100: "mtl:ofi:provider:
softverbs0"); mpi_bench itself checks every size's result before timing it.

options:
  --np LIST          rank counts, comma-separated (default 2,4; 2 always comes first,
                     ping-pong needs it). More ranks than CPUs: oversubscribed, noisy.
  --transports LIST  a subset of sv-ucx,sv-ofi,vader,tcp (default all)
  --quick            mpi_bench --quick: sizes x4, 3 repeats, fewer iterations
  --netns            (root) across two network namespaces A and B joined by a veth
                     pair (10.77.0.1, 10.77.0.2; tests/apps/netns.sh), half the ranks
                     in each: mpirun in A starts one orted in each namespace through
                     --mca plm_rsh_agent DIR/agent.sh ("agent.sh HOST CMD": ip netns
                     exec HOST, pinned to CPU 0 in A and 1 in B, under `softverbs run`
                     for the softverbs transports), hosts named by namespace, --bind-to
                     none; sv-ofi with SOFTVERBS_LOOPBACK=0; tcp over veth0; vader
                     does not apply; ratios against tcp
  --out DIR          where everything goes (default: a new directory in /tmp)
  -h, --help         this text

environment:
  SOFTVERBS_BUILD    softverbs' build directory (default build)
  MPI_TIMEOUT        seconds allowed for each mpirun (default 180)
  GNUPLOT            gnuplot binary (default gnuplot; no plots without it)
EOF
}

invocation="bench/mpi.sh $*"
cd "$(dirname "$0")/.." || exit 2

nps=2,4
transports=sv-ucx,sv-ofi,vader,tcp
quick=
netns=
out_dir=
while [ $# -gt 0 ]; do
	case "$1" in
	--np) nps=${2:?}; shift ;;
	--transports) transports=${2:?}; shift ;;
	--quick) quick=--quick ;;
	--netns) netns=1 ;;
	--out) out_dir=${2:?}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "mpi.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done
[[ $nps =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "mpi.sh: --np takes numbers, e.g. 2,4" >&2; exit 2; }
IFS=, read -ra np_list <<<"$nps"
IFS=, read -ra tr_list <<<"$transports"
for t in "${tr_list[@]}"; do
	[[ $t =~ ^(sv-ucx|sv-ofi|vader|tcp)$ ]] ||
		{ echo "mpi.sh: unknown transport '$t' (see --help)" >&2; exit 2; }
done
if [ -n "$netns" ]; then
	# Between hosts there is no shared memory: the reference is btl tcp.
	mapfile -t tr_list < <(printf '%s\n' "${tr_list[@]}" | grep -vx vader)
	[ ${#tr_list[@]} -gt 0 ] || { echo "mpi.sh: --netns: no transport left (vader does not apply)" >&2; exit 2; }
fi
# 2 first: ping-pong runs there (and the table's ratios read it).
mapfile -t np_list < <(echo 2; printf '%s\n' "${np_list[@]}" | grep -vx 2 | sort -nu)

build_dir=${SOFTVERBS_BUILD:-build}
SV=$build_dir/bin/softverbs
T=${MPI_TIMEOUT:-180}
GNUPLOT=${GNUPLOT:-gnuplot}
for p in mpicc.openmpi mpirun.openmpi python3; do
	command -v "$p" >/dev/null || { echo "mpi.sh: $p not found (Debian: openmpi-bin, libopenmpi-dev, python3)" >&2; exit 1; }
done
case " ${tr_list[*]} " in *" sv-"*)
	[ -x "$SV" ] || { echo "mpi.sh: $SV not found: build softverbs first (or --transports vader,tcp)" >&2; exit 1; } ;;
esac
if [ -z "$out_dir" ]; then
	out_dir=$(mktemp -d "${TMPDIR:-/tmp}/softverbs-mpi-bench.XXXXXX")
else
	mkdir -p "$out_dir" || exit 1
fi

bench=$out_dir/mpi_bench
cflags=(-O2 -std=c11 -Wall -Wextra -Werror)
if ! mpicc.openmpi "${cflags[@]}" bench/mpi_bench.c -o "$bench" 2>"$out_dir/build.log"; then
	echo "mpi.sh: mpicc.openmpi ${cflags[*]} bench/mpi_bench.c failed:" >&2
	cat "$out_dir/build.log" >&2
	exit 1
fi
mpich_note="mpicc.mpich not installed"
if command -v mpicc.mpich >/dev/null; then
	if mpicc.mpich "${cflags[@]}" bench/mpi_bench.c -o "$out_dir/mpi_bench.mpich" 2>>"$out_dir/build.log"; then
		mpich_note="also builds with mpicc.mpich"
	else
		mpich_note="FAILS to build with mpicc.mpich (see build.log)"
	fi
fi

# The same launch options for every transport: the ranks are placed alike.
common=(mpirun.openmpi --oversubscribe -np)
[ "$(id -u)" -eq 0 ] && common=(mpirun.openmpi --allow-run-as-root --oversubscribe -np)
ref=vader
where="on one host"
if [ -n "$netns" ]; then
	ref=tcp
	where="across two network namespaces"
	# The namespaces, deleted on any exit (netns.sh's EXIT trap; it skips, exit 77,
	# without root).
	. tests/apps/netns.sh
	ns_pair
	agent=$out_dir/agent.sh
	cat >"$agent" <<-'AGENT'
		#!/bin/sh
		# plm_rsh_agent for bench/mpi.sh --netns: "agent.sh HOST CMD..." runs CMD, as a
		# remote shell would, in the network namespace HOST; pinned to the CPU given for
		# HOST in MPI_BENCH_CPUS ("NS=CPU ..."), under MPI_BENCH_PREFIX (softverbs run).
		host=$1
		shift
		cpu=$(printf '%s\n' $MPI_BENCH_CPUS | sed -n "s/^$host=//p")
		exec ip netns exec "$host" taskset -c "${cpu:-0}" $MPI_BENCH_PREFIX sh -c "$*"
	AGENT
	chmod +x "$agent"
	ncpu=$(nproc)
	export MPI_BENCH_CPUS="$NS_A=0 $NS_B=$((ncpu > 1 ? 1 : 0))"
	echo "namespaces: $NS_A (10.77.0.1, CPU 0), $NS_B (10.77.0.2, CPU $((ncpu > 1 ? 1 : 0)))"
fi

# launch TRANSPORT NP: sets cmd to the command line (an array), and proof to what the
# log must hold to show that the run took the transport it names (the stacks say which
# device they chose at start-up: UCX's info log, the ofi MTL's verbose output).
launch() {
	local t=$1 np=$2
	proof=
	if [ -n "$netns" ]; then
		launch_netns "$t" "$np"
		return
	fi
	case $t in
	sv-ucx) cmd=("$SV" run -- "${common[@]}" "$np" --mca pml ucx --mca btl '^vader,tcp,openib'
		-x UCX_TLS=rc,self -x UCX_NET_DEVICES=softverbs0:1 -x UCX_LOG_LEVEL=info)
		proof='tag(rc_verbs/softverbs0:1)' ;;
	sv-ofi) cmd=("$SV" run -- "${common[@]}" "$np" --mca pml cm --mca mtl ofi
		-x 'FI_PROVIDER=verbs;ofi_rxm' --mca mtl_base_verbose 100)
		proof='mtl:ofi:provider: softverbs0' ;;
	vader) cmd=("${common[@]}" "$np" --mca pml ob1 --mca btl self,vader) ;;
	tcp) cmd=("${common[@]}" "$np" --mca pml ob1 --mca btl self,tcp
		--mca btl_tcp_if_include lo) ;;
	esac
}

# launch_netns TRANSPORT NP: the same across the namespaces. mpirun runs in A, ranks
# fill A's slots then B's (NP/2 each, rounded up), the agent starts each orted (under
# `softverbs run` for softverbs: the view and the library go with the ranks). Each orted
# straight from mpirun and routed direct: Open MPI 4.1's default routing across these
# "hosts" sometimes lost a daemon ("ORTE does not know how to route a message", exit 139).
launch_netns() {
	local t=$1 np=$2
	local hosts=$out_dir/hosts-np$np
	printf '%s slots=%d\n' "$NS_A" $(((np + 1) / 2)) "$NS_B" $(((np + 1) / 2)) >"$hosts"
	local prefix=
	[[ $t == sv-* ]] && prefix="$(realpath "$SV") run --"
	cmd=(env "MPI_BENCH_PREFIX=$prefix" ip netns exec "$NS_A" "${common[@]}" "$np"
		--hostfile "$hosts" --bind-to none --mca plm_rsh_agent "$agent"
		--mca routed direct --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include veth0)
	case $t in
	sv-ucx) cmd+=(--mca pml ucx --mca btl '^vader,tcp,openib'
		-x UCX_TLS=rc,self -x UCX_NET_DEVICES=softverbs0:1 -x UCX_LOG_LEVEL=info)
		proof='tag(rc_verbs/softverbs0:1)' ;;
	# SOFTVERBS_LOOPBACK=0: a loopback bind takes no device, so libfabric's verbs
	# provider offers the peers veth0's address instead of 127.0.0.1.
	sv-ofi) cmd+=(--mca pml cm --mca mtl ofi -x 'FI_PROVIDER=verbs;ofi_rxm'
		-x SOFTVERBS_LOOPBACK=0 --mca mtl_base_verbose 100)
		proof='mtl:ofi:provider: softverbs0' ;;
	tcp) cmd+=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include veth0) ;;
	esac
}

# shquote ARG...: the arguments as a shell would need them typed, quoted only when needed.
shquote() {
	local a out=
	for a in "$@"; do
		if [[ $a =~ ^[A-Za-z0-9_./=:,@%+-]+$ ]]; then out+="$a "
		else out+="'${a//\'/\'\\\'\'}' "; fi
	done
	echo "${out% }"
}

# tail_of FILE: its first line that names an error, then its last lines, on one line.
tail_of() {
	{
		grep -m 1 -E 'Fatal|[Ee]rror|Segmentation|Aborted|WRONG' "$1"
		grep -v '^\s*$\|^-*$' "$1" | tail -n 2
	} | tr '\n' ' ' | cut -c1-400
}

echo "== MPI $where: $(date -u +%Y-%m-%dT%H:%M:%SZ), nproc $(nproc), $(uname -sr)"
echo "   $(mpirun.openmpi --version 2>/dev/null | head -n 1); UCX $(dpkg-query -W -f='${Version}' libucx0 2>/dev/null);" \
	"libfabric $(dpkg-query -W -f='${Version}' libfabric1 2>/dev/null); mpi_bench: $mpich_note"
sv_env=$(env | grep '^SOFTVERBS_' | sort | tr '\n' ' ')
echo "   out: $out_dir; each mpirun under timeout -k 5 $T${sv_env:+; environment: $sv_env}"
failed=0
for np in "${np_list[@]}"; do
	tests=allreduce,allgather
	[ "$np" -eq 2 ] && tests=pingpong,allreduce,allgather
	for t in "${tr_list[@]}"; do
		launch "$t" "$np"
		cmd+=("$bench" --tests "$tests" ${quick:+"$quick"} --out "$out_dir/$t-np$np.tsv")
		base=$out_dir/$t-np$np
		load=$(cut -d' ' -f1-3 /proc/loadavg)
		{
			shquote "${cmd[@]}"
			echo "# load average before: $load; $(date -u +%H:%M:%SZ)"
		} >"$base.cmd"
		rm -f "$base.tsv"
		start=$(date +%s.%N)
		timeout -k 5 "$T" "${cmd[@]}" >"$base.log" 2>&1
		rc=$?
		# Across the namespaces Open MPI's launch (orted through the agent, its way
		# back to mpirun) sometimes hangs before any rank starts, btl tcp's too: the
		# timeout with nothing from a rank. Launched once more, and said so.
		if [ -n "$netns" ] && [ $rc -eq 124 ] && [ ! -s "$base.tsv" ] &&
		   ! grep -q 'UCX  INFO\|mtl:ofi\|mpi_bench' "$base.log"; then
			echo "again  $t np $np: the launch reached no rank in $T s"
			echo "# the first launch reached no rank in $T s: launched again" >>"$base.cmd"
			timeout -k 5 "$T" "${cmd[@]}" >"$base.log" 2>&1
			rc=$?
		fi
		secs=$(python3 -c "import time; print('%.1f' % (time.time() - $start))")
		if [ $rc -eq 0 ] && [ -s "$base.tsv" ] && [ -n "$proof" ] && ! grep -qF "$proof" "$base.log"; then
			failed=$((failed + 1))
			echo "FAILED $t np $np: the log does not show '$proof': not counted: $(head -n 1 "$base.cmd")"
			echo "# FAILED: the log does not show '$proof'" >>"$base.cmd"
			mv -f "$base.tsv" "$base.unconfirmed.tsv"
		elif [ $rc -eq 0 ] && [ -s "$base.tsv" ]; then
			echo "ok     $t np $np (${secs} s, load $load): $(head -n 1 "$base.cmd")"
		else
			failed=$((failed + 1))
			echo "FAILED $t np $np (exit $rc, ${secs} s): $(head -n 1 "$base.cmd")"
			echo "       $(tail_of "$base.log")"
			echo "# FAILED: exit $rc: $(tail_of "$base.log")" >>"$base.cmd"
			mv -f "$base.tsv" "$base.partial.tsv" 2>/dev/null
		fi
	done
done

# The table (markdown) and the plot data, from the TSVs.
python3 - "$out_dir" "${tr_list[*]}" "${np_list[*]}" "$ref" <<'EOF'
import csv, os, sys
out, trs, nps = sys.argv[1], sys.argv[2].split(), [int(n) for n in sys.argv[3].split()]
ref = sys.argv[4]
data = {}  # (transport, np, test) -> {bytes: row}
for t in trs:
    for n in nps:
        p = os.path.join(out, f"{t}-np{n}.tsv")
        if not os.path.exists(p):
            continue
        rows = [l for l in open(p) if not l.startswith("#")]
        for r in csv.DictReader(rows, delimiter="\t"):
            data.setdefault((t, n, r["test"]), {})[int(r["bytes"])] = r
def human(b):
    for u, s in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if b >= u and b % u == 0:
            return f"{b // u} {s}"
    return f"{b} B"
svs = [t for t in trs if t.startswith("sv-")]
def fmt(v):  # three significant digits, without exponents
    return "%.0f" % v if v >= 100 else "%.3g" % v if v >= 1e-3 else "%.2e" % v
lines = []
def table(title, test, n, col, unit, better):
    sizes = sorted({b for t in trs for b in data.get((t, n, test), {})})
    if not sizes:
        return
    ratios = [s for s in svs if ref in trs]
    lines.append(f"**{title}** ({unit}; {better}; ratio = softverbs / {ref})\n")
    head = ["bytes"] + trs + [f"{s}/{ref}" for s in ratios]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + " ---: |" * len(head))
    for b in sizes:
        cells = [human(b)]
        vals = {}
        for t in trs:
            r = data.get((t, n, test), {}).get(b)
            vals[t] = float(r[col]) if r else None
            cells.append(fmt(vals[t]) if r else "n/a")
        for s in ratios:
            a, v = vals.get(s), vals.get(ref)
            cells.append("%.2f" % (a / v) if a is not None and v else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    # Plot data: bytes and the column, one file per transport.
    for t in trs:
        d = data.get((t, n, test))
        if d:
            with open(os.path.join(out, f"plot-{test}-{col}-np{n}-{t}.dat"), "w") as f:
                for b in sorted(d):
                    f.write(f"{b}\t{d[b][col]}\n")
table("Ping-pong one-way latency, 2 ranks", "pingpong", 2, "usec", "µs, median", "lower is better")
table("Ping-pong bandwidth, 2 ranks", "pingpong", 2, "algbw_GBps", "GB/s = bytes / one-way time", "higher is better")
for n in nps:
    table(f"MPI_Allreduce bus bandwidth, {n} ranks", "allreduce", n, "busbw_GBps",
          "GB/s, algbw × 2(n−1)/n, bytes = one rank's buffer", "higher is better")
    table(f"MPI_Allgather bus bandwidth, {n} ranks", "allgather", n, "busbw_GBps",
          "GB/s, algbw × (n−1)/n, bytes = the whole received buffer", "higher is better")
with open(os.path.join(out, "mpi.md"), "w") as f:
    f.write("\n".join(lines))
EOF
{
	echo "Commands (\`${sv_env}$invocation\`; \$OUT is the output directory; load average before each run):"
	echo
	echo '```sh'
	for np in "${np_list[@]}"; do
		for t in "${tr_list[@]}"; do
			[ -e "$out_dir/$t-np$np.cmd" ] && sed "s#$out_dir/#\$OUT/#g" "$out_dir/$t-np$np.cmd"
		done
	done
	echo '```'
	if [ -n "$netns" ]; then
		echo
		echo "\$OUT/agent.sh (MPI_BENCH_CPUS=\"$MPI_BENCH_CPUS\"; the namespaces: tests/apps/netns.sh's ns_pair):"
		echo
		echo '```sh'
		cat "$agent"
		echo '```'
	fi
} >"$out_dir/commands.md"
echo
cat "$out_dir/mpi.md"

# The plots: 2×2 panels in one SVG, log axes, one line per transport (and rank count).
if command -v "$GNUPLOT" >/dev/null; then
	gp=$out_dir/plots.gp
	svg=mpi-onehost.svg
	[ -n "$netns" ] && svg=mpi-netns.svg
	plot_of() { # plot_of TEST COLUMN: the gnuplot plot clause of its data files
		local test=$1 col=$2 f sep='' n t dash
		printf 'plot '
		for n in "${np_list[@]}"; do
			for t in "${tr_list[@]}"; do
				f=plot-$test-$col-np$n-$t.dat
				[ -s "$out_dir/$f" ] || continue
				dash=1; [ "$n" -ne 2 ] && dash=2
				printf "%s'%s' using 1:2 with linespoints lt %d dt %d title '%s np %s'" \
					"$sep" "$f" "$(lt_of "$t")" "$dash" "$t" "$n"
				sep=", "
			done
		done
		[ -z "$sep" ] && printf "1/0 notitle"
		echo
	}
	lt_of() { case $1 in sv-ucx) echo 1 ;; sv-ofi) echo 2 ;; vader) echo 3 ;; *) echo 4 ;; esac; }
	{
		echo "set terminal svg size 1200,900 dynamic font 'sans,11'"
		echo "set output '$svg'"
		echo "set multiplot layout 2,2 title 'MPI $where: softverbs (UCX rc, libfabric verbs;ofi\\_rxm) vs Open MPI $([ -n "$netns" ] && echo tcp || echo vader and tcp) — $(date -u +%Y-%m-%d) ${quick:+(quick)}'"
		echo "set logscale x 2; set logscale y 10; set format y '%g'; set grid; set key top left font ',9'"
		echo "set xrange [1:4194304]; set xlabel 'message size (bytes)'"
		echo "set xtics ('1' 1, '16' 16, '256' 256, '4K' 4096, '64K' 65536, '1M' 1048576, '4M' 4194304)"
		echo "set title 'ping-pong one-way latency (2 ranks)'; set ylabel 'µs'"
		plot_of pingpong usec
		echo "set key bottom right"
		echo "set title 'ping-pong bandwidth (2 ranks)'; set ylabel 'GB/s'"
		plot_of pingpong algbw_GBps
		echo "set title 'MPI\\_Allreduce busbw (float sum; dashed: more ranks)'; set ylabel 'GB/s'"
		plot_of allreduce busbw_GBps
		echo "set title 'MPI\\_Allgather busbw (bytes = received)'; set ylabel 'GB/s'"
		plot_of allgather busbw_GBps
		echo "unset multiplot"
	} >"$gp"
	if (cd "$out_dir" && "$GNUPLOT" plots.gp) >"$out_dir/gnuplot.log" 2>&1; then
		echo "plot: $out_dir/$svg"
	else
		echo "mpi.sh: gnuplot failed: $(tail_of "$out_dir/gnuplot.log")"
	fi
else
	echo "(no plots: $GNUPLOT not found; Debian: gnuplot-nox)"
fi
echo "table: $out_dir/mpi.md; commands: $out_dir/commands.md"
[ $failed -eq 0 ] || { echo "$failed run(s) failed"; exit 1; }
