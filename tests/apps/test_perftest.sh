#!/usr/bin/env bash
# Debian's unmodified perftest on softverbs: each benchmark runs to completion between
# two processes and prints a result line, with both copy paths, -a, and over XRC.
# (bench/ measures; this only checks they run.)
. "$(dirname "$0")/lib.sh" "$1"
need ib_send_lat
P=18620

result_line() { grep -qE '^ +[0-9]+ +[0-9]+ +[0-9.]+' "$1"; }

# Both copy paths: process_vm_* (probed, the default) and the bounce copy.
for mode in cma bounce; do
  export SOFTVERBS_SHM_COPY=$mode
  for t in ib_send_lat ib_send_bw ib_write_lat ib_write_bw ib_read_lat ib_read_bw \
           ib_atomic_lat ib_atomic_bw; do
    P=$((P + 1))
    pair "$t-$mode" $P "$t" -d softverbs0 -p $P
    check "$t ($mode): prints a result" result_line "$TMP/$t-$mode.cli"
  done
done
unset SOFTVERBS_SHM_COPY
for t in ib_send_lat ib_write_bw ib_read_lat; do
  P=$((P + 1))
  pair "$t-a" $P "$t" -d softverbs0 -p $P -a -n 200
  check "$t -a: reaches 8 MiB" grep -qE '^ +8388608 ' "$TMP/$t-a.cli"
done
# XRC connections (-c XRC: each side a domain, an SRQ, initiator and target QPs).
for t in ib_send_lat ib_send_bw ib_write_lat ib_write_bw ib_read_lat ib_read_bw; do
  P=$((P + 1))
  pair "$t-xrc" $P "$t" -d softverbs0 -p $P -c XRC -x 0 -n 1000
  check "$t -c XRC: prints a result" result_line "$TMP/$t-xrc.cli"
done
finish
