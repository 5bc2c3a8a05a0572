#!/bin/sh
# test_bench_scaling: `bench_fp --scaling PAIRS` and `bench_implicit --scaling PAIRS`, the speedup of
# the thread count over one thread as the median of call-by-call alternations: the line's fields
# (pairs as asked, min <= median <= max, best and both times positive), refused values (not a number, 0)
# with exit 2, and one thread refused with exit 2 (a build without OpenMP has only that). `make`
# installs this script as BUILD/test_bench_scaling; tests/run.sh runs it from the repository root.
dir=$(dirname "$0")
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL test_bench_scaling: $*"; fail=$((fail+1)); }
# one (program, case) of each: the line must hold pairs=3 and ordered, positive figures
check_line() {
    echo "$1" | awk -v want="$2" '
        $1 == "scaling" && $2 == want {
            for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            if (v["pairs"] == 3 && v["min"] > 0 && v["min"] <= v["speedup"] && v["speedup"] <= v["max"] &&
                v["best"] > 0 && v["ms_1"] > 0 && v["ms_2"] > 0) good = 1
        }
        END { exit good ? 0 : 1 }'
}
out=$(OMP_NUM_THREADS=2 "$dir/bench_fp" --cases m1_64 --scaling 3 2>&1); rc=$?
if echo "$out" | grep -q "a build without OpenMP"; then
    [ $rc -eq 2 ] && ok || bad "bench_fp at one thread exited $rc"
else
    [ $rc -eq 0 ] && ok || bad "bench_fp --scaling 3 exited $rc: $out"
    check_line "$out" m1_64 && ok || bad "bench_fp line: $out"
    out=$(OMP_NUM_THREADS=2 "$dir/bench_implicit" --cases imp_gen_b1 --scaling 3 2>&1); rc=$?
    [ $rc -eq 0 ] && ok || bad "bench_implicit --scaling 3 exited $rc: $out"
    check_line "$out" imp_gen_b1 && ok || bad "bench_implicit line: $out"
fi
for prog in bench_fp bench_implicit; do
    for v in 0 x 2y -1; do
        out=$(OMP_NUM_THREADS=2 "$dir/$prog" --cases none --scaling "$v" 2>&1); rc=$?
        [ $rc -eq 2 ] && echo "$out" | grep -q -- "--scaling takes a whole number" && ok ||
            bad "$prog --scaling '$v': exit $rc, '$out'"
    done
    out=$(OMP_NUM_THREADS=1 "$dir/$prog" --cases none --scaling 2 2>&1); rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -q "compares one thread with more" && ok ||
        bad "$prog --scaling at one thread: exit $rc, '$out'"
done
echo "test_bench_scaling: $pass passed, $fail failed"
[ $fail -eq 0 ]
