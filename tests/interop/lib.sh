# What tests/interop/siw.sh and rxe.sh share (sourced): the host side's helpers, and the
# outer side's setting up, booting and reporting of the VM (../shared/kvm, tap
# networking: host 10.199.0.1 in a namespace of its own, guest 10.199.0.2, where
# guest-serve.sh serves a shell on TCP 7998).

# ---- the host side ---------------------------------------------------------------------
PASS=0 FAIL=0
# gsh CMD: runs CMD in the guest's shell, prints what it printed.
gsh() {
  timeout 600 bash -c 'exec 3<>/dev/tcp/10.199.0.2/7998 || exit 2
                       printf "%s\nexit\n" "$1" >&3; cat <&3' gsh "$1"
}
# glisten PORT / hlisten PORT: until something listens on TCP PORT in the guest / here.
glisten() { gsh ". /guest/lib.sh; kvmh_wait_tcp_listen $1 30 && echo yes"; }
hlisten() {
  for _ in $(seq 300); do
    ss -ltnH | awk -v p=":$1" '{ l = $4 } substr(l, length(l) - length(p) + 1) == p { f = 1 }
                               END { exit !f }' && return 0
    sleep 0.1
  done
  return 1
}
check() { # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then PASS=$((PASS + 1)); echo "ok   $name"
  else FAIL=$((FAIL + 1)); echo "FAIL $name"; return 1; fi
}
figure() { echo "figure $1 $2 $3"; } # NAME PEERS VALUE

# ---- the outer side --------------------------------------------------------------------
# vm_ready KIND BUILD: skips (77) without root, the harness or a VM it can build; exports
# where the harness keeps what it downloads and builds (under BUILD/kvm); sets KVM.
vm_ready() {
  local kind=$1 build=$2
  KVM=${SOFTVERBS_KVM_DIR:-$ROOT/../shared/kvm}
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: the $kind VM needs root (a tap device, apt-get)"; exit 77; }
  [ -x "$KVM/boot.sh" ] || { echo "SKIP: no kvm harness at $KVM (SOFTVERBS_KVM_DIR)"; exit 77; }
  [ -x "$build/bin/softverbs" ] || { echo "$kind.sh: $build/bin/softverbs not built" >&2; exit 2; }
  export KVM_CACHE=$build/kvm/cache KVM_BUILD=$build/kvm/build KVM_OUT=$build/kvm/out
  mkdir -p "$KVM_CACHE" "$KVM_BUILD" "$KVM_OUT"
  if [ ! -s "$KVM_BUILD/initramfs.cpio.gz" ] || [ ! -s "$KVM_BUILD/vmlinuz" ]; then
    echo "$kind.sh: fetching and building the VM (first use; a few minutes)"
    if ! "$KVM/fetch.sh" > "$KVM_OUT/fetch.log" 2>&1 ||
       ! "$KVM/build-initramfs.sh" > "$KVM_OUT/build.log" 2>&1; then
      tail -n 5 "$KVM_OUT/fetch.log" "$KVM_OUT/build.log" 2>/dev/null
      echo "SKIP: the VM could not be built here (logs in $KVM_OUT)"
      exit 77
    fi
  fi
}

# vm_run KIND HOST_CMD TITLE WIDTH: boots the VM with KIND's device, runs HOST_CMD in
# the tap's namespace (T: its log directory, made here), prints its lines and the
# medians of its figures (TITLE, names WIDTH wide); the exit status: 0 if all passed.
vm_run() {
  local kind=$1 host_cmd=$2 title=$3 width=$4 log rc
  log=$KVM_OUT/$kind-$(date +%Y%m%dT%H%M%S).log
  echo "$kind.sh: booting (log $log); host side logs in $T"
  "$KVM/boot.sh" -q --net tap --netns "sv$kind$$" --timeout 3000 --log "$log" \
    --host-cmd "$host_cmd" "$HERE/guest-serve.sh" 2900 "$kind"
  rc=$?
  grep -v '^figure ' "$log.host" | grep -v '^KVMH-HOST-RC'
  echo "figures ($title):"
  grep '^figure ' "$log.host" | awk '{ print $2, $3 }' | sort -u | while read -r name peers; do
    med=$(awk -v n="$name" -v p="$peers" '$2 == n && $3 == p { print $4 }' "$log.host" |
          sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }')
    printf "  %-${width}s %-30s %s\n" "$name" "$peers" "$med"
  done
  grep -q ' passed, 0 failed$' "$log.host" || rc=1
  return $rc
}
