#!/usr/bin/env bash
# softverbs run's private view (tools/sv_view.c): /dev/infiniband/uverbs0 and the sysfs
# entries of softverbs0 inside, the same /dev, /sys/class and ids as before, nothing
# outside changed.
. "$(dirname "$0")/lib.sh" "$1"

ib=/sys/class/infiniband/softverbs0
outside_dev=$(ls -A /dev | sort)
outside_class=$(ls -A /sys/class | sort)
outside_mounts=$(wc -l </proc/self/mountinfo)

# What the program sees, in one shell under the view.
"$SV" run bash -c '
  ib='"$ib"'
  [ -c /dev/infiniband/uverbs0 ] && [ -r /dev/infiniband/uverbs0 ] && [ -w /dev/infiniband/uverbs0 ] && echo "uverbs0 rw char"
  [ -c /dev/infiniband/rdma_cm ] && echo "rdma_cm char"
  echo "node_type $(cat $ib/node_type)"
  echo "node_guid $(cat $ib/node_guid)"
  echo "state $(cat $ib/ports/1/state)"
  echo "link_layer $(cat $ib/ports/1/link_layer)"
  echo "gids $(ls $ib/ports/1/gids | wc -l)"
  echo "types $(cat $ib/ports/1/gid_attrs/types/* | sort -u)"
  echo "pkey0 $(cat $ib/ports/1/pkeys/0)"
  echo "ibdev $(cat /sys/class/infiniband_verbs/uverbs0/ibdev)"
  for g in $ib/ports/1/gids/*; do
    n=${g##*/}; echo "gid $n $(cat $g) $(cat $ib/ports/1/gid_attrs/ndevs/$n 2>/dev/null)"
  done
  echo "dev $(ls -A /dev | grep -vx infiniband | sort | tr "\n" " ")"
  echo "class $(ls -A /sys/class | grep -vxE "infiniband|infiniband_verbs" | sort | tr "\n" " ")"
  echo view-shm >/dev/shm/softverbs-view-test.$PPID
  echo "lo $(cat /sys/class/net/lo/operstate 2>/dev/null || echo missing)"
' >"$TMP/in" 2>"$TMP/in.err"
rc=$?
check "the program under the view exits 0" test $rc -eq 0
check "nothing on stderr" test ! -s "$TMP/in.err"
check "/dev/infiniband/uverbs0 is a character device, readable and writable" contains "$TMP/in" "^uverbs0 rw char$"
check "/dev/infiniband/rdma_cm is a character device" contains "$TMP/in" "^rdma_cm char$"
check "node_type is 1: CA" contains "$TMP/in" "^node_type 1: CA$"
guid=$("$SV" info | awk '/^node_guid/ { print $2 }')
want_guid=$(echo "$guid" | sed -E 's/(....)(....)(....)(....)/\1:\2:\3:\4/')
check "node_guid is softverbs info's ($want_guid)" contains "$TMP/in" "^node_guid $want_guid$"
check "port 1 is 4: ACTIVE" contains "$TMP/in" "^state 4: ACTIVE$"
check "link layer Ethernet" contains "$TMP/in" "^link_layer Ethernet$"
ngids=$("$SV" info | grep -c '^gid\[')
check "as many GIDs as softverbs info lists ($ngids)" contains "$TMP/in" "^gids $ngids$"
check "every GID's type is RoCE v2" contains "$TMP/in" "^types RoCE v2$"
check "P_Key 0 is 0xffff" contains "$TMP/in" "^pkey0 0xffff$"
check "uverbs0 names softverbs0" contains "$TMP/in" "^ibdev softverbs0$"
check "the GID of 127.0.0.1 is on lo" contains "$TMP/in" "^gid [0-9]* 0000:0000:0000:0000:0000:ffff:7f00:0001 lo$"
check "/dev holds what it held outside" test "$(grep '^dev ' "$TMP/in")" = "dev $(echo "$outside_dev" | tr '\n' ' ')"
check "/sys/class holds what it held outside" test "$(grep '^class ' "$TMP/in")" = "class $(echo "$outside_class" | tr '\n' ' ')"
check "a class's entries still resolve (/sys/class/net/lo)" bash -c "! grep -q '^lo missing' '$TMP/in'"
shm=$(ls /dev/shm/softverbs-view-test.* 2>/dev/null | head -n 1)
check "/dev/shm is the same file system inside and outside" test -n "$shm" -a "$(cat "$shm" 2>/dev/null)" = view-shm
rm -f /dev/shm/softverbs-view-test.*

# Outside, nothing changed.
check "outside: /dev unchanged" test "$(ls -A /dev | sort)" = "$outside_dev"
check "outside: /sys/class unchanged" test "$(ls -A /sys/class | sort)" = "$outside_class"
check "outside: no mount added" test "$(wc -l </proc/self/mountinfo)" -eq "$outside_mounts"

# A run inside a run adds nothing; --no-view and SOFTVERBS_VIEW=0 add no view.
SOFTVERBS_LOG=info "$SV" run "$SV" run true >"$TMP/nested" 2>&1
check "a run inside a run finds the view in place" contains "$TMP/nested" "private view: already in place"
if [ ! -e /dev/infiniband/uverbs0 ]; then
  check "--no-view: no /dev/infiniband/uverbs0" "$SV" run --no-view bash -c '[ ! -e /dev/infiniband/uverbs0 ]'
  check "SOFTVERBS_VIEW=0: no /dev/infiniband/uverbs0" env SOFTVERBS_VIEW=0 "$SV" run bash -c '[ ! -e /dev/infiniband/uverbs0 ]'
fi
"$SV" run ibv_devinfo >"$TMP/devinfo" 2>&1
check "ibv_devinfo runs under the view" contains "$TMP/devinfo" "PORT_ACTIVE"

# Without privilege: an unprivileged user gets the view through a user namespace, keeps
# its uid, and gains nothing outside it.
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null &&
   setpriv --reuid 65534 --regid 65534 --clear-groups test -x "$SV" 2>/dev/null; then
  SOFTVERBS_LOG=info setpriv --reuid 65534 --regid 65534 --clear-groups "$SV" run \
    bash -c 'id -u; [ -c /dev/infiniband/uverbs0 ] && [ -w /dev/infiniband/uverbs0 ] && echo rw; cat '"$ib"'/ports/1/state' \
    >"$TMP/user" 2>&1
  if grep -q "user namespace" "$TMP/user"; then
    check "unprivileged: the program keeps its uid" contains "$TMP/user" "^65534$"
    check "unprivileged: uverbs0 readable and writable" contains "$TMP/user" "^rw$"
    check "unprivileged: sysfs entries" contains "$TMP/user" "^4: ACTIVE$"
  elif grep -q "no private view" "$TMP/user"; then
    echo "note: unprivileged user namespaces are not allowed here: $(grep 'no private view' "$TMP/user")"
    check "unprivileged without user namespaces: the program still runs" contains "$TMP/user" "^65534$"
  else
    check "unprivileged run says which view it took" false
    sed 's/^/    /' "$TMP/user"
  fi
else
  echo "note: not root, or the build tree is not readable by nobody: the unprivileged case is not run"
fi
finish
