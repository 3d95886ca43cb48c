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

check() { # check NAME CONDITION...: one assertion, counted
  local name=$1; shift
  if "$@"; then PASS=$((PASS + 1)); echo "ok   $name"
  else FAIL=$((FAIL + 1)); echo "FAIL $name"; fi
}

contains() { grep -q -- "$2" "$1"; }

finish() {
  echo "$(basename "$0" .sh): $PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
}

# wait_listen PORT PID: until PID listens on TCP PORT (bounded: 5 s), or PID exits.
wait_listen() {
  for _ in $(seq 100); do
    ss -ltn 2>/dev/null | grep -q ":$1 " && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# pair NAME PORT PROGRAM ARGS...: runs PROGRAM as server and as client to 127.0.0.1 on
# softverbs, both bounded by a timeout; checks both exit 0. Output in $TMP/NAME.{srv,cli}.
pair() {
  local name=$1 port=$2; shift 2
  timeout 60 "$SV" run "$@" >"$TMP/$name.srv" 2>&1 &
  local srv=$!
  wait_listen "$port" $srv
  timeout 60 "$SV" run "$@" 127.0.0.1 >"$TMP/$name.cli" 2>&1
  local crc=$?
  wait $srv
  local src=$?
  check "$name: client exits 0" test $crc -eq 0
  check "$name: server exits 0" test $src -eq 0
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    tail -n 5 "$TMP/$name.srv" "$TMP/$name.cli" | sed 's/^/    /'
  fi
}
