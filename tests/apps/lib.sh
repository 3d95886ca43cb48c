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
