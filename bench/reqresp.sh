#!/usr/bin/env bash
# bench/reqresp.sh — an event-driven request/response exchange (bench/reqresp.c: one
# request of 64 bytes in flight, a reply of 4 KiB, each side asleep until its data
# comes) over softverbs against the same exchange over TCP with epoll, rounds
# alternating in one invocation, on one host and (as root) across two network
# namespaces.
#
# Every number printed comes with the command that produced it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/reqresp.sh [--rounds N] [--iters N] [--build DIR] [--netns]

N rounds (default 5); each runs the RDMA exchange (softverbs run reqresp, rdma_cm,
completion channels) and the TCP one (reqresp --tcp, epoll, also under softverbs run,
which does not touch its socket), in alternating order, ITERS exchanges each (default
20000), and takes the client's median round trip. Prints both medians of the rounds'
medians with the commands, and rdma / tcp (issue 24 asks <= 1.0).

  --netns     between two hosts: two network namespaces joined by a veth pair
              (tests/apps/netns.sh; root), server in A (10.77.0.1), client in B;
              softverbs' exchange then runs over iWARP
  --build DIR the build to measure (default: build)
EOF
}

rounds=5
iters=20000
build=build
netns=0
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--netns) netns=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
SV=$PWD/$build/bin/softverbs
[ -x "$SV" ] || { echo "$SV is not built" >&2; exit 1; }
. bench/perftest-lib.sh # median, calc
TMPD=$(mktemp -d)
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$TMPD/reqresp" bench/reqresp.c -lrdmacm -libverbs
RR=$TMPD/reqresp
port=18515

if [ $netns = 1 ]; then
	[ "$(id -u)" -eq 0 ] || { echo "--netns needs root" >&2; exit 1; }
	. tests/apps/netns.sh
	ns_pair
	addr=10.77.0.1
	srv_run() { ns_bg "$NS_A" 120 "$SV" run "$RR" server "$@"; srv=$NS_PID; }
	cli_run() { ns_exec "$NS_B" 120 "$SV" run "$RR" client "$@" $addr; }
	listening() { ns_wait_listen "$NS_A" "$1" "" "$srv" 15; }
	trap 'rm -rf "$TMPD"' EXIT
	where="across two namespaces (A 10.77.0.1 server, B 10.77.0.2 client)"
else
	addr=127.0.0.1
	srv_run() { timeout 120 "$SV" run "$RR" server "$@" & srv=$!; }
	cli_run() { timeout 120 "$SV" run "$RR" client "$@" $addr; }
	listening() { # the TCP mode listens; rdma_cm's listener holds the port as TCP too
		for _ in $(seq 100); do
			ss -ltnH | awk -v p=":$1" '{ if (substr($4, length($4) - length(p) + 1) == p) f = 1 }
				END { exit !f }' && return 0
			sleep 0.05
		done
		return 1
	}
	trap 'kill ${srv:-} 2>/dev/null; rm -rf "$TMPD"' EXIT
	where="on one host (127.0.0.1)"
fi

# one MODE: a server and a client; prints the client's median (µs).
one() {
	local mode=() line
	[ "$1" = tcp ] && mode=(--tcp)
	port=$((port + 1))
	srv_run "${mode[@]}" -p $port
	listening $port || { echo "the server never listened on $port" >&2; exit 1; }
	line=$(cli_run "${mode[@]}" -p $port -n "$iters")
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
	echo "$line" >>"$TMPD/lines"
	echo "$line" | awk '{ print $7 }'
}

rdma=() tcp=()
for ((r = 1; r <= rounds; r++)); do
	if ((r % 2)); then
		rdma+=("$(one rdma)")
		tcp+=("$(one tcp)")
	else
		tcp+=("$(one tcp)")
		rdma+=("$(one rdma)")
	fi
	echo "round $r: rdma ${rdma[-1]} µs, tcp ${tcp[-1]} µs (median round trips)"
done
mr=$(printf '%s\n' "${rdma[@]}" | median)
mt=$(printf '%s\n' "${tcp[@]}" | median)
echo
echo "$where, $rounds rounds of $iters exchanges (64 B request, 4096 B reply):"
echo "  softverbs (rdma_cm, completion channels)  median round trip $mr µs"
echo "    softverbs run reqresp server -p PORT / softverbs run reqresp client -p PORT -n $iters $addr"
echo "  TCP (epoll)                               median round trip $mt µs"
echo "    reqresp server --tcp -p PORT / reqresp client --tcp -p PORT -n $iters $addr"
echo "  rdma / tcp: $(calc %.2f "$mr / $mt")"
