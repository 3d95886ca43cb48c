# shellcheck shell=bash disable=SC2034,SC2154  # a library: its caller sets and reads these
# bench/perftest-lib.sh — running Debian's perftest on softverbs, shared by
# bench/run.sh and bench/ab.sh (sourced, not run: `. bench/perftest-lib.sh`).
#
# The caller sets, before calling pair:
#   sv          softverbs' CLI of the build under test (BUILD/bin/softverbs)
#   tmp         a directory for the logs (NAME.server.log, NAME.client.log)
#   pt_timeout  seconds allowed for each perftest process (timeout -k 5)
#   next_port   the first TCP port to try for perftest's handshake
#   pin_server, pin_client   arrays: a taskset prefix for each side, or empty
#   gid_args    array: -x INDEX of ::ffff:127.0.0.1 (see pt_gid_args), or empty
# and after it reads server_cmd, client_cmd, server_rc, client_rc. While a pair
# runs, server_pid and client_pid are its two sides (timeout(1) processes): the
# caller's EXIT trap should call pt_stop_server.

# The perftest runs both scripts measure (client side; the server gets the same
# arguments without 127.0.0.1). Iteration counts, so that a before/after
# comparison runs exactly the commands bench/run.sh reports.
pt_lat_iters=10000        # ib_send_lat -s 2 -n ...
pt_bw_iters=5000          # ib_write_bw -s SIZE -n ... --report_gbits
pt_rate_iters=3200000     # ib_write_bw -s 8 -t 128 -l 32 -n ... -N --report_gbits

# pt_gid_args: sets gid_args to the GID index of 127.0.0.1 (RoCE v2,
# IPv4-mapped) as "$sv info" lists it, so that both sides use loopback.
pt_gid_args() {
	local gid_index
	gid_args=()
	gid_index=$("$sv" info 2>/dev/null |
		sed -n 's/^gid\[ *\([0-9]*\)\] *::ffff:127\.0\.0\.1$/\1/p' | head -n 1) || true
	if [ -n "$gid_index" ]; then
		gid_args=(-x "$gid_index")
	fi
}

# pt_pin_cpus: the CPUs this shell may run on (cpus), and the server pinned to the first,
# the client to the second (pin_server, pin_client), when there are two.
pt_pin_cpus() {
	mapfile -t cpus < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
		awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }')
	pin_server=()
	pin_client=()
	if [ ${#cpus[@]} -ge 2 ]; then
		pin_server=(taskset -c "${cpus[0]}")
		pin_client=(taskset -c "${cpus[1]}")
	fi
}

# pt_stop_server: ends the perftest client and server a pair started, if they
# are running, by their pids (timeout(1) processes, which pass the signal on to
# perftest).
pt_stop_server() {
	local pid
	for pid in "${client_pid:-}" "${server_pid:-}"; do
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		fi
	done
	client_pid=
	server_pid=
}

# is_listening PORT: some socket listens on TCP PORT (IPv4 or IPv6).
is_listening() {
	local hex
	hex=$(printf '%04X' "$1")
	cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p="$hex" '{ n = split($2, a, ":"); if (a[n] == p && $4 == "0A") f = 1 }
			END { exit !f }'
}

# Commands and exit statuses of the last pair, for the report.
server_pid=
client_pid=
server_cmd=
client_cmd=
server_rc=
client_rc=

# pair NAME PROGRAM ARGS...: runs PROGRAM as server and as client of 127.0.0.1,
# each under timeout; the client's output goes to $tmp/NAME.client.log.
# Succeeds when both exit 0.
pair() {
	local name=$1 prog=$2 port i rc_c=0 rc_s=0
	shift 2
	port=$next_port
	while is_listening "$port"; do port=$((port + 1)); done
	next_port=$((port + 1))

	local srv=(timeout -k 5 "$pt_timeout" "${pin_server[@]}" "$sv" run -- "$prog" -p "$port"
		"${gid_args[@]}" "$@")
	local cli=(timeout -k 5 "$pt_timeout" "${pin_client[@]}" "$sv" run -- "$prog" -p "$port"
		"${gid_args[@]}" "$@" 127.0.0.1)
	server_cmd="${srv[*]}"
	client_cmd="${cli[*]}"

	"${srv[@]}" >"$tmp/$name.server.log" 2>&1 &
	server_pid=$!
	# Wait for the server's handshake socket (polled, at most PERFTEST_TIMEOUT).
	for ((i = 0; i < pt_timeout * 20; i++)); do
		is_listening "$port" && break
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.05
	done
	if is_listening "$port"; then
		# In the background and waited for, so that a signal's trap runs at once
		# and pt_stop_server can end this client too.
		"${cli[@]}" >"$tmp/$name.client.log" 2>&1 &
		client_pid=$!
		wait "$client_pid" || rc_c=$?
		client_pid=
	else
		rc_c=255
		echo "server never listened on port $port" >"$tmp/$name.client.log"
	fi
	if [ "$rc_c" -ne 0 ]; then
		kill "$server_pid" 2>/dev/null || true
	fi
	wait "$server_pid" || rc_s=$?
	server_pid=
	server_rc=$rc_s
	client_rc=$rc_c
	[ "$rc_c" -eq 0 ] && [ "$rc_s" -eq 0 ]
}

# column LOG SIZE COLUMN: the value under perftest's header COLUMN (e.g.
# "t_typical[usec]") in the result row for SIZE bytes. The header names the
# columns; the row is the last one after it whose first field is SIZE and whose
# fields are all numbers.
column() {
	awk -v size="$2" -v want="$3" '
	function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
	/#bytes/ {
		ncol = 0
		line = $0
		while (match(line, /#[a-z]+|[A-Za-z0-9_%. ]*\[[^\]]*\]/)) {
			name[++ncol] = trim(substr(line, RSTART, RLENGTH))
			line = substr(line, RSTART + RLENGTH)
		}
		next
	}
	ncol > 0 && $1 == size {
		ok = 1
		for (i = 1; i <= NF; i++)
			if ($i !~ /^[0-9]+(\.[0-9]+)?$/) ok = 0
		if (ok)
			for (i = 1; i <= ncol && i <= NF; i++)
				if (name[i] == want) val = $i
	}
	END { if (val == "") exit 1; print val }' "$1"
}

# median: the median of the numbers on stdin, one a line (the lower middle one of an
# even count: always a measured value).
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# calc FORMAT EXPR: floating-point arithmetic (awk), printed with FORMAT.
calc() {
	awk "BEGIN { printf \"$1\", $2 }"
}
