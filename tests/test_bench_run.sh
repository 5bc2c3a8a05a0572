#!/bin/sh
# test_bench_run: bench/run.sh's table, with stand-in programs for both sides: the ratio of a case
# both sides have, "-" where PyTorch has none, and with BENCH_PAIRS=N the median and range of the N
# alternated pairs (each pair one run of each side for that case), with BENCH_SCALING=N the median
# and range of N one-thread / all-thread pairs of ours; a failing bench program makes the run exit
# non-zero and is named; a BENCH_PAIRS that is not a number, and BENCH_SCALING at one thread, are
# refused. `make` installs this script as BUILD/test_bench_run; tests/run.sh runs it from the
# repository root.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL test_bench_run: $*"; fail=$((fail+1)); }
mkdir "$tmp/b"
# our side: case c1 at 100, 300, 200, 400 tok/s on successive runs (the first is the whole run's),
# c2 always 7; --cases picks lines as the real programs do
cat >"$tmp/b/bench_stand" <<'PROG'
#!/bin/sh
cases=c1,c2
while [ $# -gt 0 ]; do [ "$1" = --cases ] && cases=$2; shift; done
n=$(cat "$STAND_DIR/n" 2>/dev/null || echo 0); echo $((n + 1)) >"$STAND_DIR/n"
case ",$cases," in *,c1,*) set -- 100 300 200 400; shift $((n % 4)); echo "implicit c1 x_tok_s=$1 roofline=50.0%" ;; esac
case ",$cases," in *,c2,*) echo "implicit c2 x_tok_s=7 roofline=10.0%" ;; esac
exit 0
PROG
# PyTorch's side: c1 always 100 tok/s, no c2
printf '#!/bin/sh\necho "torch c1 x_tok_s=100"\n' >"$tmp/torch"
chmod +x "$tmp/b/bench_stand" "$tmp/torch"
export STAND_DIR=$tmp BENCH_TORCH=$tmp/torch BENCH_THREADS=1
row() { grep "^| $1 " "$tmp/out" | tr -s ' '; }
sh bench/run.sh "$tmp/b" >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 0 ] && ok || bad "a clean run exited $rc: $(tail -3 "$tmp/out")"
row c1 | grep -q '| 100.0 | 50.0% | - | - | 100.0 | 1.00x | 50.0% |$' && ok || bad "c1 row: $(row c1)"
row c2 | grep -q '| 7.0 | 10.0% | - | - | - | - | - |$' && ok || bad "c2 row: $(row c2)"
# three pairs: ours 300, 200, 400 against 100 each: median 3.00x, range 2.00-4.00
rm -f "$tmp/n"
BENCH_PAIRS=3 sh bench/run.sh "$tmp/b" >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 0 ] && ok || bad "a run with pairs exited $rc: $(tail -3 "$tmp/out")"
row c1 | grep -q '| 1.00x | 50.0% | 3.00x (2.00-4.00, 3) |$' && ok || bad "c1 row with pairs: $(row c1)"
row c2 | grep -q '| - | - | - | - |$' && ok || bad "c2 row with pairs: $(row c2)"
[ "$(grep -c '^pair [123] implicit c1 ' "$tmp/out")" -eq 3 ] && ok || bad "not three pairs of c1: $(grep '^pair' "$tmp/out")"
grep -q '^pair .* c2 ' "$tmp/out" && bad "c2, which PyTorch lacks, was paired" || ok
# a failing program: named, and the run exits non-zero (its lines still reach the table)
printf '#!/bin/sh\necho "implicit c3 x_tok_s=1 roofline=1.0%%"\nexit 3\n' >"$tmp/b/bench_broken"
chmod +x "$tmp/b/bench_broken"
sh bench/run.sh "$tmp/b" >"$tmp/out" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q '^bench_broken failed' "$tmp/out" && row c3 | grep -q '| 1.0 |' && ok ||
    bad "a failing bench: rc $rc, $(tail -3 "$tmp/out")"
rm "$tmp/b/bench_broken"
# two threads against one: the stand-in runs 100 tok/s on one thread and 150, 170, 160 on two
# (the first is the whole run's): speedups 1.7, 1.6, 1.5 in the pairs
mkdir "$tmp/s"
cat >"$tmp/s/bench_stand" <<'PROG'
#!/bin/sh
if [ "$OMP_NUM_THREADS" = 1 ]; then v=100
else
    n=$(cat "$STAND_DIR/n2" 2>/dev/null || echo 0); echo $((n + 1)) >"$STAND_DIR/n2"
    set -- 150 170 160; shift $((n % 3)); v=$1
fi
echo "implicit s1 x_tok_s=$v roofline=5.0%"
PROG
chmod +x "$tmp/s/bench_stand"
BENCH_THREADS=2 BENCH_SCALING=3 sh bench/run.sh "$tmp/s" >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 0 ] && ok || bad "a run with BENCH_SCALING exited $rc: $(tail -3 "$tmp/out")"
row s1 | grep -q '| 150.0 | 5.0% | - | - | - | - | - | 1.60x (1.50-1.70, 3) |$' && ok || bad "s1 row with scaling: $(row s1)"
BENCH_SCALING=2 sh bench/run.sh "$tmp/s" >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q 'BENCH_THREADS is 1' "$tmp/out" && ok || bad "BENCH_SCALING at one thread: rc $rc, $(cat "$tmp/out")"
BENCH_PAIRS=two sh bench/run.sh "$tmp/b" >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q 'BENCH_PAIRS must be a whole number' "$tmp/out" && ok || bad "BENCH_PAIRS=two: rc $rc, $(cat "$tmp/out")"
echo "test_bench_run: $pass passed, $fail failed"
[ $fail -eq 0 ]
