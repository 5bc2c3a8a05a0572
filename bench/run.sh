#!/bin/sh
# bench/run.sh BUILD_DIR [--quick]: what `make bench` runs. Runs every bench_* binary in BUILD_DIR
# (from the repository root), then, when Debian's PyTorch is importable by /usr/bin/python3, the
# PyTorch side (bench/torch_bench.py) with the same thread count, and prints both side by side
# with the ratio. BENCH_THREADS (default: all cores) sets the threads of both sides.
# Exits non-zero if any bench fails.
dir=${1:-build}
[ $# -gt 0 ] && shift
threads=${BENCH_THREADS:-$(nproc 2>/dev/null || echo 1)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
out=$(mktemp)
status=0
for b in "$dir"/bench_*; do
    [ -x "$b" ] || continue
    case "$b" in *.d|*.o) continue ;; esac
    echo "== $(basename "$b")"
    "$b" "$@" | tee -a "$out" || { echo "$(basename "$b") failed"; status=1; }
done
if [ -f bench/torch_bench.py ] && /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
    echo "== torch_bench.py --threads $threads $*"
    /usr/bin/python3 bench/torch_bench.py --threads "$threads" "$@" | tee -a "$out" || { echo "torch_bench.py failed"; status=1; }
    echo
    echo "== implicit vs PyTorch ($threads threads; throughput of each case, higher is better)"
    awk '
        /^(implicit|torch) / {
            side = $1; name = $2; split($3, kv, "="); val[side, name] = kv[2]; unit[name] = kv[1]
            if (!(name in seen)) { seen[name] = 1; order[n++] = name }
        }
        END {
            printf "| %-19s | %-12s | %14s | %14s | %7s |\n", "case", "metric", "implicit", "pytorch", "ratio"
            printf "|---------------------|--------------|----------------|----------------|---------|\n"
            for (i = 0; i < n; i++) {
                c = order[i]
                if (((("implicit", c) in val)) && ((("torch", c) in val)))
                    printf "| %-19s | %-12s | %14.1f | %14.1f | %6.2fx |\n", c, unit[c], val["implicit", c], val["torch", c], val["implicit", c] / val["torch", c]
            }
        }' "$out"
fi
rm -f "$out"
exit $status
