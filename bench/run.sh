#!/bin/sh
# bench/run.sh BUILD_DIR [--quick] [--cases a,b]: what `make bench` runs. First bench_machine: the
# CPU, the ISA of the build and the thread count, and the roofline (FMA peak and read bandwidth on 1
# and on all threads), which it hands to the other programs in BENCH_MACHINE. Then every other
# bench_* binary in BUILD_DIR (from the repository root), then, when Debian's PyTorch is importable
# by /usr/bin/python3, the PyTorch side (bench/torch_bench.py) with the same thread count, and a
# table of every `implicit NAME METRIC=VALUE ... roofline=P%` line: throughput, % of roofline,
# and the PyTorch throughput and ratio where it has the case. BENCH_THREADS (default: all cores)
# sets the threads of both sides. Exits non-zero if any bench fails.
dir=${1:-build}
[ $# -gt 0 ] && shift
threads=${BENCH_THREADS:-$(nproc 2>/dev/null || echo 1)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
out=$(mktemp)
status=0
if [ -x "$dir/bench_machine" ]; then
    echo "== bench_machine --threads $threads"
    "$dir/bench_machine" --threads "$threads" | tee -a "$out" || { echo "bench_machine failed"; status=1; }
    BENCH_MACHINE=$(sed -n 's/^BENCH_MACHINE=//p' "$out")
    export BENCH_MACHINE
fi
for b in "$dir"/bench_*; do
    [ -x "$b" ] || continue
    case "$b" in *.d|*.o|*/bench_machine) continue ;; esac
    echo "== $(basename "$b")"
    "$b" "$@" | tee -a "$out" || { echo "$(basename "$b") failed"; status=1; }
done
if [ -f bench/torch_bench.py ] && /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
    echo "== torch_bench.py --threads $threads $*"
    /usr/bin/python3 bench/torch_bench.py --threads "$threads" "$@" | tee -a "$out" || { echo "torch_bench.py failed"; status=1; }
fi
echo
# roofline / cpu roof: implicit's % of roofline against wall-clock / CPU time (bench_util.h); reread:
# generation's % of the re-read bound (weights read per f call at the bandwidth of the cache level
# that holds them, wall-clock); pt roof: torch's, the same work in its wall-clock time, i.e.
# implicit's % / ratio
awk -v threads="$threads" '
    /^machine cpu=/ { host = $0; sub(/^machine /, "", host) }
    /^(implicit|torch) / {
        side = $1; name = $2; split($3, kv, "="); val[side, name] = kv[2]; unit[name] = kv[1]
        for (i = 4; i <= NF; i++) {
            r = $i; sub(/%$/, "", r)
            if (r ~ /^roofline=/) { sub(/^roofline=/, "", r); roof[side, name] = r }
            if (r ~ /^roofline_cpu=/) { sub(/^roofline_cpu=/, "", r); croof[side, name] = r }
            if (r ~ /^roofline_reread=/) { sub(/^roofline_reread=/, "", r); rroof[side, name] = r }
        }
        if (side == "implicit" && !(name in seen)) { seen[name] = 1; order[n++] = name }
    }
    END {
        printf "== implicit vs PyTorch, %s threads (throughput of each case, higher is better; %% of roofline)\n", threads
        if (host != "") printf "   host: %s\n", host
        printf "| %-19s | %-12s | %14s | %8s | %8s | %8s | %14s | %7s | %8s |\n", "case", "metric", "implicit", "roofline", "cpu roof", "reread", "pytorch", "ratio", "pt roof"
        printf "|---------------------|--------------|----------------|----------|----------|----------|----------------|---------|----------|\n"
        for (i = 0; i < n; i++) {
            c = order[i]
            rf = (("implicit", c) in roof) ? sprintf("%7.1f%%", roof["implicit", c]) : "-"
            cf = (("implicit", c) in croof) ? sprintf("%7.1f%%", croof["implicit", c]) : "-"
            rr = (("implicit", c) in rroof) ? sprintf("%7.1f%%", rroof["implicit", c]) : "-"
            if (("torch", c) in val) {
                ratio = val["implicit", c] / val["torch", c]
                pr = (("implicit", c) in roof) ? sprintf("%7.1f%%", roof["implicit", c] / ratio) : "-"
                printf "| %-19s | %-12s | %14.1f | %8s | %8s | %8s | %14.1f | %6.2fx | %8s |\n", c, unit[c], val["implicit", c], rf, cf, rr, val["torch", c], ratio, pr
            } else
                printf "| %-19s | %-12s | %14.1f | %8s | %8s | %8s | %14s | %7s | %8s |\n", c, unit[c], val["implicit", c], rf, cf, rr, "-", "-", "-"
        }
    }' "$out"
rm -f "$out"
exit $status
