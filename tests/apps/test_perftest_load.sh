#!/usr/bin/env bash
# Debian's unmodified perftest loads on softverbs (its provider libraries libmlx5 and
# libefa bind to our IBVERBS_PRIVATE_34 node), opens softverbs0, and both sides get
# through perftest's own TCP handshake (port 18515): each prints the peer's QPN.
# Data does not move yet (the data path is a later milestone), so the test stops there.
. "$(dirname "$0")/lib.sh" "$1"
need ib_write_bw
PORT=18515

"$SV" run stdbuf -oL ib_write_bw -d softverbs0 -p $PORT >"$TMP/server" 2>&1 &
server=$!
# Wait (bounded) for the server to listen before the client connects.
for _ in $(seq 100); do
  ss -ltn 2>/dev/null | grep -q ":$PORT " && break
  kill -0 $server 2>/dev/null || break
  sleep 0.05
done
timeout 10 "$SV" run stdbuf -oL ib_write_bw -d softverbs0 -p $PORT 127.0.0.1 >"$TMP/client" 2>&1 &
client=$!
# Both sides print "remote address" once the handshake is through.
for _ in $(seq 200); do
  contains "$TMP/server" "remote address" && contains "$TMP/client" "remote address" && break
  sleep 0.05
done
check "no symbol lookup error" bash -c "! grep -qE 'symbol lookup error|not found' '$TMP/server' '$TMP/client'"
check "server opened softverbs0" contains "$TMP/server" "Device *: softverbs0"
check "server reached the handshake" contains "$TMP/server" "remote address"
check "client reached the handshake" contains "$TMP/client" "remote address"
check "link type Ethernet" contains "$TMP/client" "Link type *: Ethernet"
kill $server $client 2>/dev/null
wait 2>/dev/null
finish
