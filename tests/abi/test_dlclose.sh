#!/usr/bin/env bash
# libibverbs.so.1 and librdmacm.so.1 stay mapped after a dlclose() of their last handle.
# Their threads (the progress engine, the CM thread) live as long as the process; a
# program that loads them through a plugin and unloads it must not unmap code those
# threads still run. Open MPI does exactly that at MPI_Finalize with `--mca mtl ofi`
# (dlclose of mca_mtl_ofi, libfabric and with it libibverbs): a segfault in the
# engine's thread, in code no longer mapped, before the fix (-Wl,-z,nodelete).
. "$(dirname "$0")/../apps/lib.sh" "$1"
need python3
need readelf
LIB=$(realpath "$BUILD/lib")
# A sanitizer build's library cannot be loaded by python3 (its runtime must come first).
if readelf -d "$LIB/libibverbs.so.1" | grep -q 'NEEDED.*lib\(a\|t\|ub\)san'; then
  echo "SKIP: a sanitizer build (SV_SANITIZE): python3 cannot dlopen its libraries"
  exit 77
fi

for l in libibverbs.so.1 librdmacm.so.1; do
  check "$l is marked NODELETE" bash -c "readelf -d '$LIB/$l' | grep -q 'Flags:.*NODELETE'"
done

# A process loads libibverbs by path, creates a QP (which starts the engine's thread),
# destroys everything, closes its only handle, and reports what is left.
python3 - "$LIB/libibverbs.so.1" >"$TMP/verbs" 2>&1 <<'EOF'
import ctypes, os, sys, _ctypes
path = sys.argv[1]
def threads(): return len(os.listdir("/proc/self/task"))
def mapped(): return any(path in l for l in open("/proc/self/maps"))
before = threads()
v = ctypes.CDLL(path)
P = ctypes.c_void_p
for name, res, args in [("ibv_get_device_list", P, [ctypes.POINTER(ctypes.c_int)]),
                        ("ibv_free_device_list", None, [P]),
                        ("ibv_open_device", P, [P]), ("ibv_close_device", ctypes.c_int, [P]),
                        ("ibv_alloc_pd", P, [P]), ("ibv_dealloc_pd", ctypes.c_int, [P]),
                        ("ibv_create_cq", P, [P, ctypes.c_int, P, P, ctypes.c_int]),
                        ("ibv_destroy_cq", ctypes.c_int, [P]),
                        ("ibv_create_qp", P, [P, P]), ("ibv_destroy_qp", ctypes.c_int, [P])]:
    f = getattr(v, name); f.restype = res; f.argtypes = args
class Cap(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in
                ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data")]
class InitAttr(ctypes.Structure):  # struct ibv_qp_init_attr
    _fields_ = [("qp_context", P), ("send_cq", P), ("recv_cq", P), ("srq", P),
                ("cap", Cap), ("qp_type", ctypes.c_int), ("sq_sig_all", ctypes.c_int)]
n = ctypes.c_int(0)
lst = v.ibv_get_device_list(ctypes.byref(n))
assert lst and n.value >= 1, "no device"
ctx = v.ibv_open_device(ctypes.cast(lst, ctypes.POINTER(P))[0])
pd = v.ibv_alloc_pd(ctx)
cq = v.ibv_create_cq(ctx, 16, None, None, 0)
attr = InitAttr(send_cq=cq, recv_cq=cq, cap=Cap(4, 4, 1, 1, 0), qp_type=2)  # IBV_QPT_RC
qp = v.ibv_create_qp(pd, ctypes.byref(attr))
assert ctx and pd and cq and qp, "resource creation failed"
with_qp = threads()
assert v.ibv_destroy_qp(qp) == 0 and v.ibv_destroy_cq(cq) == 0
assert v.ibv_dealloc_pd(pd) == 0 and v.ibv_close_device(ctx) == 0
v.ibv_free_device_list(lst)
_ctypes.dlclose(v._handle)
print("engine thread started:", with_qp > before)
print("mapped after dlclose:", mapped())
EOF
rc=$?
check "libibverbs: the program exits 0" test "$rc" -eq 0
check "libibverbs: a QP started a thread" contains "$TMP/verbs" "engine thread started: True"
check "libibverbs: still mapped after dlclose of its last handle" \
  contains "$TMP/verbs" "mapped after dlclose: True"

# librdmacm (it loads our libibverbs by its SONAME: LD_LIBRARY_PATH decides).
LD_LIBRARY_PATH=$LIB python3 - "$LIB/librdmacm.so.1" >"$TMP/cm" 2>&1 <<'EOF'
import ctypes, sys, _ctypes
path = sys.argv[1]
cm = ctypes.CDLL(path)
cm.rdma_create_event_channel.restype = ctypes.c_void_p
cm.rdma_destroy_event_channel.argtypes = [ctypes.c_void_p]
ch = cm.rdma_create_event_channel()
assert ch, "rdma_create_event_channel failed"
cm.rdma_destroy_event_channel(ch)
_ctypes.dlclose(cm._handle)
print("mapped after dlclose:", any(path in l for l in open("/proc/self/maps")))
EOF
rc=$?
check "librdmacm: the program exits 0" test "$rc" -eq 0
check "librdmacm: still mapped after dlclose of its last handle" \
  contains "$TMP/cm" "mapped after dlclose: True"
[ "$FAIL" -eq 0 ] || { echo "--- libibverbs:"; cat "$TMP/verbs"; echo "--- librdmacm:"; cat "$TMP/cm"; }
finish
