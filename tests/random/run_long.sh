#!/usr/bin/env bash
# The long run of the randomized verbs test: many seeds, one after another, for a given
# time; every other run on the bounce copy path (SOFTVERBS_SHM_COPY=bounce). Prints each
# failing seed with the command that replays it, a summary (runs, operations, ops/s),
# the failures grouped by their message, and exits 1 if any run failed.
#
#   tests/random/run_long.sh [--minutes M] [--per-run S] [--build DIR] [--no-known-defects]
#
#   --minutes M           how long to run (default 10)
#   --per-run S           seconds per seed (default 20)
#   --build DIR           the build tree holding tests/random_verbs (default build)
#   --no-known-defects    leave out the cases of the defects being fixed (default: in)
set -u
minutes=10
per_run=20
build=build
known=--known-defects
while [ $# -gt 0 ]; do
	case "$1" in
	--minutes) minutes=$2; shift 2 ;;
	--per-run) per_run=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--no-known-defects) known=; shift ;;
	*) sed -n '2,13p' "$0"; exit 2 ;;
	esac
done
bin=$build/tests/random_verbs
[ -x "$bin" ] || { echo "run_long: $bin not built" >&2; exit 2; }
export SOFTVERBS_LOG=${SOFTVERBS_LOG:-error}
log=$(mktemp -d /tmp/random_verbs.XXXXXX)
trap 'rm -rf "$log"' EXIT

end=$(( $(date +%s) + minutes * 60 ))
runs=0 okruns=0 ops=0 secs=0
declare -a failed=()
while [ "$(date +%s)" -lt "$end" ]; do
	left=$(( end - $(date +%s) ))
	t=$(( left < per_run ? left : per_run ))
	[ "$t" -ge 1 ] || break
	copy=cma
	[ $((runs % 2)) -eq 1 ] && copy=bounce
	out=$log/run.$runs
	if [ "$copy" = bounce ]; then
		SOFTVERBS_SHM_COPY=bounce "$bin" --ops 1000000000 --seconds "$t" $known >"$out" 2>&1
	else
		"$bin" --ops 1000000000 --seconds "$t" $known >"$out" 2>&1
	fi
	rc=$?
	runs=$((runs + 1))
	seed=$(sed -n 's/^random_verbs: seed \(0x[0-9a-f]*\).*/\1/p' "$out" | head -1)
	if [ $rc -eq 0 ] && grep -q ' ok (' "$out"; then
		okruns=$((okruns + 1))
		n=$(sed -n 's/.* ops \([0-9]*\) ok (.*/\1/p' "$out")
		s=$(sed -n 's/.* local steps, \([0-9.]*\) s)$/\1/p' "$out")
		ops=$((ops + n))
		secs=$(awk -v a="$secs" -v b="$s" 'BEGIN { print a + b }')
	else
		first=$(grep -m1 'FAIL' "$out" || tail -1 "$out")
		op=$(echo "$first" | sed -n 's/.* op \([0-9]*\) .*/\1/p')
		env=; [ "$copy" = bounce ] && env="SOFTVERBS_SHM_COPY=bounce "
		echo "run_long: FAIL (exit $rc) seed $seed: $first"
		echo "  replay: ${env}$bin --seed $seed --ops ${op:-N} $known"
		failed+=("$(echo "$first" | sed -e 's/seed 0x[0-9a-f]* op [0-9]* //' \
			-e 's/0x[0-9a-f]*/X/g' -e 's/[0-9][0-9]*/N/g')")
	fi
done
rate=$(awk -v o="$ops" -v s="$secs" 'BEGIN { if (s > 0) printf "%.0f", o / s; else print 0 }')
echo "run_long: $runs runs ($okruns ok, ${#failed[@]} failed), $ops operations in the ok runs," \
     "$rate ops/s, known defects $([ -n "$known" ] && echo in || echo out)"
if [ ${#failed[@]} -gt 0 ]; then
	echo "run_long: failures by kind:"
	printf '%s\n' "${failed[@]}" | sort | uniq -c | sort -rn
	exit 1
fi
