#!/usr/bin/env bash
# Debian's unmodified perftest on softverbs: each benchmark runs to completion between
# two processes and prints a result line. (bench/ measures; this only checks they run.)
. "$(dirname "$0")/lib.sh" "$1"
need ib_send_lat
P=18620

result_line() { grep -qE '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$1"; }

for t in ib_send_lat ib_send_bw ib_write_lat ib_write_bw ib_read_lat ib_read_bw \
         ib_atomic_lat ib_atomic_bw; do
  P=$((P + 1))
  pair "$t" $P "$t" -d softverbs0 -p $P
  check "$t: prints a result" result_line "$TMP/$t.cli"
done
for t in ib_send_lat ib_write_bw ib_read_lat; do
  P=$((P + 1))
  pair "$t-a" $P "$t" -d softverbs0 -p $P -a -n 200
  check "$t -a: reaches 8 MiB" grep -qE '^ +8388608 ' "$TMP/$t-a.cli"
done
finish
