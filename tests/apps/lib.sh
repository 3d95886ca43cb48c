# Shared by the app tests: run Debian's unmodified rdma-core programs on softverbs.
# Usage in a test: . "$(dirname "$0")/lib.sh" "$1"
BUILD=${1:?usage: test_X.sh BUILD_DIR}
SV="$BUILD/bin/softverbs"
PASS=0
FAIL=0
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT

need() {
  command -v "$1" >/dev/null || { echo "SKIP: $1 is not installed"; exit 77; }
}

# need_view: UCX and Open MPI see softverbs0 only where /dev/infiniband/uverbs0 exists:
# in softverbs run's private view (root or an unprivileged user namespace) or after the
# one-time set-up of docs/user-guide.md. Skips, with softverbs run's reason, where
# neither is there (needs ucx_info).
need_view() {
  timeout 60 "$SV" run ucx_info -d >"$TMP/need_view" 2>&1
  if ! grep -q '^# Memory domain: softverbs0$' "$TMP/need_view" &&
     grep -q 'no private view' "$TMP/need_view"; then
    echo "SKIP: $(grep -m 1 'no private view' "$TMP/need_view")"
    exit 77
  fi
}

check() { # check NAME CONDITION...: one assertion, counted
  local name=$1; shift
  if "$@"; then PASS=$((PASS + 1)); echo "ok   $name"
  else FAIL=$((FAIL + 1)); echo "FAIL $name"; fi
}

contains() { grep -q -- "$2" "$1"; }
lacks() { ! grep -q -- "$2" "$1"; }

# only_lines FILE ERE...: every line of FILE matches one of the EREs (a program's
# transcript holds nothing but what it prints on success: any error line fails).
# Prints the first lines that match none.
only_lines() {
  local file=$1 re; shift
  local args=()
  for re in "$@"; do args+=(-e "$re"); done
  if grep -vqE "${args[@]}" "$file"; then
    echo "    unexpected lines in $(basename "$file"):"
    grep -vE "${args[@]}" "$file" | head -n 5 | sed 's/^/      /'
    return 1
  fi
}

# count_lines FILE ERE N: exactly N lines of FILE match ERE (says how many did).
count_lines() {
  local n
  n=$(grep -cE -- "$2" "$1")
  [ "$n" -eq "$3" ] && return 0
  echo "    $(basename "$1"): $n lines match '$2', expected $3:"
  grep -E -- "$2" "$1" | head -n 5 | sed 's/^/      /'
  return 1
}

# transcript FILE ERE...: FILE holds exactly one line per ERE, each matching its ERE
# whole, in order. Shows the difference otherwise.
transcript() {
  local file=$1 i=0 line; shift
  local want=("$@") got=()
  mapfile -t got <"$file"
  if [ ${#got[@]} -ne ${#want[@]} ]; then
    echo "    $(basename "$file"): ${#got[@]} lines, expected ${#want[@]}:"
    head -n 8 "$file" | sed 's/^/      /'
    # The lines were picked from FILE without .lines: show where they stood there.
    case $file in
    *.lines) [ -f "${file%.lines}" ] && grep -n -B2 -- "${want[0]%%:*}" "${file%.lines}" |
               head -n 30 | sed 's/^/      raw: /' ;;
    esac
    return 1
  fi
  for line in "${got[@]}"; do
    if ! [[ $line =~ ^${want[$i]}$ ]]; then
      echo "    $(basename "$file") line $((i + 1)): '$line' does not match '${want[$i]}'"
      return 1
    fi
    i=$((i + 1))
  done
}

# rping_data N PREFIX: the lines rping -v prints for N pings of its default 64 bytes:
# "rdma-ping-K: " then letters from 'A' + K (wrapping from 'z' to 'A') to byte 63.
rping_data() {
  awk -v n="$1" -v pre="$2" 'BEGIN {
    start = 65
    for (k = 0; k < n; k++) {
      s = sprintf("rdma-ping-%d: ", k)
      for (c = start; length(s) < 63; c = c == 122 ? 65 : c + 1)
        s = s sprintf("%c", c)
      start = start == 122 ? 65 : start + 1
      print pre "ping data: " s
    }
  }'
}

# late_cm ERRLOG STATUS: rping's race at exit. Its main thread destroys the event channel
# its CM thread reads, never joining that thread: if the thread comes back to
# rdma_get_cm_event only after the destruction (a loaded machine), it gets EBADF — as
# with rdma-core, whose read of the closed descriptor fails the same way — prints this
# and exits 255 after the last ping.
late_cm() {
  [ "$2" -eq 255 ] && [ "$(tail -n 1 "$1")" = "rdma_get_cm_event: Bad file descriptor" ]
}

# rows FILE ITERS SIZE...: FILE's result rows are exactly one per SIZE, in order, each
# "SIZE ITERS figures..." with its fourth column (BW average, t_max) above zero.
rows() {
  local file=$1 iters=$2; shift 2
  local want got
  want=$(printf '%s\n' "$@")
  got=$(awk -v n="$iters" '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 4 {
          print $1 ($2 == n && $4 + 0 > 0 ? "" : " (iterations " $2 ", figure " $4 ")") }' "$file")
  [ "$got" = "$want" ] && return 0
  echo "    $(basename "$file"): result rows ${got//$'\n'/ }, expected $* x $iters"
  return 1
}
# final FILE ITERS: (ucx_perftest) the "Final:" row has ITERS iterations, a latency and a bandwidth above 0
# (columns: iterations, latency 50%ile, average, overall, bandwidth average, overall,
# message rate average, overall). Prints it.
final() {
  local row
  row=$(grep '^Final:' "$1")
  echo "    $row"
  awk -v n="$2" '$1 == "Final:" && $2 == n && $4 > 0 && $6 > 0 && $8 > 0 { ok = 1 }
                 END { exit !ok }' <<<"$row" || { echo "    no sane Final: row"; return 1; }
}

# lanes FILE LANE: UCX reported its endpoint configurations (at least one) and every lane
# of every one is LANE (e.g. rc_verbs/softverbs0:1).
lanes() {
  local got
  count_lines "$1" "ep_cfg\[[0-9]+\]:" 0 >/dev/null && { echo "    $(basename "$1"): no ep_cfg line"; return 1; }
  got=$(grep -E 'ep_cfg\[[0-9]+\]:' "$1" | sed 's/.*ep_cfg\[[0-9]*\]://' |
        grep -oE '[a-z_0-9]+/[A-Za-z_0-9:.]+' | sort -u | tr '\n' ' ')
  [ "$got" = "$2 " ] && return 0
  echo "    $(basename "$1"): lanes $got, expected $2 only"
  return 1
}

# ucx_lanes FILE: every lane of every ep_cfg UCX reported is self/memory0 or
# rc_verbs/softverbs0:1, and each of the 4 ranks (by pid) has an endpoint configuration
# of rc_verbs/softverbs0:1 lanes alone (its lanes to the other ranks).
ucx_lanes() {
  local got pids
  got=$(grep -E 'ep_cfg\[[0-9]+\]:' "$1" | sed 's/.*ep_cfg\[[0-9]*\]://' |
        grep -oE '[a-z_0-9]+/[A-Za-z_0-9:.]+' | sort -u | tr '\n' ' ')
  if [ "$got" != "rc_verbs/softverbs0:1 self/memory0 " ]; then
    echo "    $(basename "$1"): lanes $got, expected rc_verbs/softverbs0:1 and self/memory0"
    return 1
  fi
  pids=$(grep -E 'ep_cfg\[[0-9]+\]:' "$1" | grep -v 'self/' | sed -nE 's/^\[[0-9.]+\] \[[^:]+:([0-9]+) *:.*/\1/p' |
         sort -u | wc -l)
  [ "$pids" -eq 4 ] || { echo "    $(basename "$1"): $pids ranks with rc_verbs-only lanes, expected 4"; return 1; }
}

no_error() { count_lines "$1" "[Ee]rror|[Ff]ail|[Cc]ouldn't|[Uu]nable" 0; }

finish() {
  echo "$(basename "$0" .sh): $PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
}

# wait_listen PORT PID [ADDR]: until PID listens on TCP PORT (at ADDR, as ss prints it:
# 127.0.0.1, [::1]; any address without it) (bounded: 5 s), or PID exits.
wait_listen() {
  for _ in $(seq 100); do
    ss -ltnH 2>/dev/null | awk -v p=":$1" -v a="${3:-}" \
      '{ l = $4 } a != "" && l == a p { f = 1 } a == "" && substr(l, length(l) - length(p) + 1) == p { f = 1 }
       END { exit !f }' && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  echo "    nothing listens on ${3:+$3:}$1 after 5 s"
  return 1
}

# pair NAME PORT PROGRAM ARGS...: runs PROGRAM as server and as client to 127.0.0.1 on
# softverbs, both bounded by a timeout; checks both exit 0. Output in $TMP/NAME.{srv,cli}.
# The bound is 180 s: a busy-polling pair such as ib_send_lat -a takes ~5 s on an idle
# machine and up to a minute beside two busy loops on two CPUs.
pair() {
  local name=$1 port=$2; shift 2
  timeout 180 "$SV" run "$@" >"$TMP/$name.srv" 2>&1 &
  local srv=$!
  wait_listen "$port" $srv
  timeout 180 "$SV" run "$@" 127.0.0.1 >"$TMP/$name.cli" 2>&1
  local crc=$?
  wait $srv
  local src=$?
  check "$name: client exits 0" test $crc -eq 0
  check "$name: server exits 0" test $src -eq 0
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    tail -n 5 "$TMP/$name.srv" "$TMP/$name.cli" | sed 's/^/    /'
  fi
}
