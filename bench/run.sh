#!/bin/sh
# bench/run.sh BUILD_DIR: what `make bench` runs. Runs every bench_* binary in BUILD_DIR (from the
# repository root), then, when Debian's PyTorch is importable by /usr/bin/python3 and
# bench/torch_bench.py exists, the PyTorch side of the comparison with the same thread count.
# BENCH_THREADS (default: all cores) is passed to torch_bench.py as --threads; extra arguments
# after BUILD_DIR (e.g. --quick) go to every bench binary. Exits non-zero if any bench fails.
dir=${1:-build}
[ $# -gt 0 ] && shift
threads=${BENCH_THREADS:-$(nproc 2>/dev/null || echo 1)}
status=0
for b in "$dir"/bench_*; do
    [ -x "$b" ] || continue
    case "$b" in *.d|*.o) continue ;; esac
    echo "== $(basename "$b")"
    "$b" "$@" || { echo "$(basename "$b") failed"; status=1; }
done
if [ -f bench/torch_bench.py ] && /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
    echo "== torch_bench.py --threads $threads"
    /usr/bin/python3 bench/torch_bench.py --threads "$threads" || { echo "torch_bench.py failed"; status=1; }
fi
exit $status
