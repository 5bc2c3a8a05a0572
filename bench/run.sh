#!/bin/sh
# bench/run.sh BUILD_DIR [--quick] [--cases a,b]: what `make bench` runs. First bench_machine: the
# CPU, the ISA of the build and the thread count, and the roofline (FMA peak and read bandwidth on 1
# and on all threads), which it hands to the other programs in BENCH_MACHINE. Then every other
# bench_* binary in BUILD_DIR (from the repository root), then, when Debian's PyTorch is importable
# by /usr/bin/python3, the PyTorch side (bench/torch_bench.py, or the command in BENCH_TORCH) with
# the same thread count, and a table of every `implicit NAME METRIC=VALUE ... roofline=P%` line:
# throughput, % of roofline, and the PyTorch throughput and ratio where it has the case.
# BENCH_THREADS (default: all cores) sets the threads of both sides. Exits non-zero if any bench
# fails.
#
# BENCH_PAIRS=N (default 0) then runs every case both sides have N more times as alternated pairs,
# our binary and PyTorch back to back for that one case, and adds the median ratio of the pairs and
# their range to the table. The whole-run ratio compares two measurements minutes apart, and a
# shared host's speed drifts over minutes (by 20-30% on the host of docs/benchmarks.md), which
# moves that ratio as much; a pair, taken within seconds, sees the same host on both sides.
# BENCH_SCALING=N (with BENCH_THREADS > 1) likewise runs every case of ours N times at one thread
# and at BENCH_THREADS back to back, and adds the median speedup and its range.
dir=${1:-build}
[ $# -gt 0 ] && shift
threads=${BENCH_THREADS:-$(nproc 2>/dev/null || echo 1)}
pairs=${BENCH_PAIRS:-0}
scaling=${BENCH_SCALING:-0}
case "$pairs" in '' | *[!0-9]*) echo "run.sh: BENCH_PAIRS must be a whole number, not '$pairs'" >&2; exit 2 ;; esac
case "$scaling" in '' | *[!0-9]*) echo "run.sh: BENCH_SCALING must be a whole number, not '$scaling'" >&2; exit 2 ;; esac
case "$threads" in '' | *[!0-9]* | 0) echo "run.sh: BENCH_THREADS must be a positive whole number, not '$threads'" >&2; exit 2 ;; esac
if [ "$scaling" -gt 0 ] && [ "$threads" -eq 1 ]; then
    echo "run.sh: BENCH_SCALING compares one thread with BENCH_THREADS threads, and BENCH_THREADS is 1" >&2
    exit 2
fi
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
out=$(mktemp) fail=$(mktemp) cases=$(mktemp)
trap 'rm -f "$out" "$fail" "$cases"' EXIT
# run NAME CMD...: CMD's output to the terminal and to $out; a failure is recorded in $fail (a
# pipeline's status is tee's in sh, so it is taken inside the pipe)
run() {
    name=$1
    shift
    { "$@" || echo "$name failed" >>"$fail"; } | tee -a "$out"
}
# the PyTorch side: BENCH_TORCH (a command taking torch_bench.py's arguments) or, when Debian's
# PyTorch is importable, bench/torch_bench.py
torch_ok=0 torch_cmd=${BENCH_TORCH:-}
if [ -n "$torch_cmd" ]; then
    torch_ok=1
elif [ -f bench/torch_bench.py ] && /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
    torch_ok=1 torch_cmd="/usr/bin/python3 bench/torch_bench.py"
fi
if [ -x "$dir/bench_machine" ]; then
    echo "== bench_machine --threads $threads"
    run bench_machine "$dir/bench_machine" --threads "$threads"
    BENCH_MACHINE=$(sed -n 's/^BENCH_MACHINE=//p' "$out")
    export BENCH_MACHINE
fi
for b in "$dir"/bench_*; do
    [ -x "$b" ] || continue
    case "$b" in *.d|*.o|*/bench_machine) continue ;; esac
    echo "== $(basename "$b")"
    start=$(wc -l <"$out")
    run "$(basename "$b")" "$b" "$@"
    # which program prints each case (for the pairs below)
    tail -n +$((start + 1)) "$out" | sed -n "s|^implicit \([^ ]*\) .*|\1 $b|p" >>"$cases"
done
if [ $torch_ok = 1 ]; then
    echo "== torch_bench.py --threads $threads $*"
    run torch_bench.py $torch_cmd --threads "$threads" "$@"
fi
# a case two programs print is paired once, with the first
awk '!seen[$1]++' "$cases" >"$cases.u" && mv "$cases.u" "$cases"
if [ "$pairs" -gt 0 ] && [ $torch_ok = 0 ]; then
    echo "BENCH_PAIRS: no PyTorch side (Debian's python3-torch is not importable), so no pairs"
elif [ "$pairs" -gt 0 ]; then
    echo "== $pairs alternated pairs per case (ours, then PyTorch's, the one case each)"
    while read -r c b; do
        grep -q "^torch $c " "$out" || continue
        p=1
        while [ $p -le "$pairs" ]; do
            for side in implicit torch; do
                if [ $side = implicit ]; then
                    line=$("$b" "$@" --cases "$c" </dev/null | grep "^implicit $c ")
                else
                    line=$($torch_cmd --threads "$threads" "$@" --cases "$c" </dev/null | grep "^torch $c ")
                fi
                [ -n "$line" ] || { echo "pair $p of $c: no $side line" | tee -a "$fail"; continue; }
                echo "pair $p $line" | tee -a "$out"
            done
            p=$((p + 1))
        done
    done <"$cases"
fi
if [ "$scaling" -gt 0 ]; then
    echo "== $scaling alternated pairs per case of ours (1 thread, then $threads)"
    while read -r c b; do
        p=1
        while [ $p -le "$scaling" ]; do
            for nt in 1 "$threads"; do
                line=$(OMP_NUM_THREADS=$nt OPENBLAS_NUM_THREADS=$nt "$b" "$@" --cases "$c" </dev/null | grep "^implicit $c ")
                [ -n "$line" ] || { echo "scaling pair $p of $c: no line at $nt threads" | tee -a "$fail"; continue; }
                echo "scale $p $nt $line" | tee -a "$out"
            done
            p=$((p + 1))
        done
    done <"$cases"
fi
echo
# roofline / cpu roof: implicit's % of roofline against wall-clock / CPU time (bench_util.h); reread:
# generation's % of the re-read bound (weights read per f call at the bandwidth of the cache level
# that holds them, wall-clock); pt roof: torch's, the same work in its wall-clock time, i.e.
# implicit's % / ratio; pairs (with BENCH_PAIRS): the median ratio of the alternated pairs and the
# lowest and highest; x 1 thread (with BENCH_SCALING): the same for threads / one thread
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
    /^pair [0-9]+ (implicit|torch) / { split($5, kv, "="); pv[$3, $4, $2] = kv[2]; if ($2 > npair[$4]) npair[$4] = $2 }
    /^scale [0-9]+ [0-9]+ implicit / {
        split($6, kv, "="); sv[$3 == 1 ? "one" : "all", $5, $2] = kv[2]; if ($2 > nscale[$5]) nscale[$5] = $2
    }
    # " median (lowest-highest, count)" of the k values in q, sorted here
    function summary(q, k,    a, b, t, med) {
        if (k == 0) return "-"
        for (a = 1; a < k; a++) # insertion sort: a handful of pairs
            for (b = a; b > 0 && q[b - 1] > q[b]; b--) { t = q[b]; q[b] = q[b - 1]; q[b - 1] = t }
        med = k % 2 ? q[(k - 1) / 2] : (q[k / 2 - 1] + q[k / 2]) / 2
        return sprintf("%.2fx (%.2f-%.2f, %d)", med, q[0], q[k - 1], k)
    }
    END {
        any = 0; anys = 0
        for (c in npair) any = 1
        for (c in nscale) anys = 1
        printf "== implicit vs PyTorch, %s threads (throughput of each case, higher is better; %% of roofline)\n", threads
        if (host != "") printf "   host: %s\n", host
        printf "| %-19s | %-12s | %14s | %8s | %8s | %8s | %14s | %7s | %8s |", "case", "metric", "implicit", "roofline", "cpu roof", "reread", "pytorch", "ratio", "pt roof"
        if (any) printf " %-25s |", "pairs: median (range)"
        if (anys) printf " %-25s |", sprintf("x 1 thread at %d (range)", threads)
        printf "\n|---------------------|--------------|----------------|----------|----------|----------|----------------|---------|----------|"
        if (any) printf "---------------------------|"
        if (anys) printf "---------------------------|"
        printf "\n"
        for (i = 0; i < n; i++) {
            c = order[i]
            rf = (("implicit", c) in roof) ? sprintf("%7.1f%%", roof["implicit", c]) : "-"
            cf = (("implicit", c) in croof) ? sprintf("%7.1f%%", croof["implicit", c]) : "-"
            rr = (("implicit", c) in rroof) ? sprintf("%7.1f%%", rroof["implicit", c]) : "-"
            if (("torch", c) in val) {
                ratio = val["implicit", c] / val["torch", c]
                pr = (("implicit", c) in roof) ? sprintf("%7.1f%%", roof["implicit", c] / ratio) : "-"
                printf "| %-19s | %-12s | %14.1f | %8s | %8s | %8s | %14.1f | %6.2fx | %8s |", c, unit[c], val["implicit", c], rf, cf, rr, val["torch", c], ratio, pr
            } else
                printf "| %-19s | %-12s | %14.1f | %8s | %8s | %8s | %14s | %7s | %8s |", c, unit[c], val["implicit", c], rf, cf, rr, "-", "-", "-"
            if (any) {
                k = 0
                for (p = 1; p <= npair[c]; p++)
                    if (("implicit", c, p) in pv && ("torch", c, p) in pv && pv["torch", c, p] > 0)
                        q[k++] = pv["implicit", c, p] / pv["torch", c, p]
                printf " %-25s |", summary(q, k)
            }
            if (anys) {
                k = 0
                for (p = 1; p <= nscale[c]; p++)
                    if (("one", c, p) in sv && ("all", c, p) in sv && sv["one", c, p] > 0)
                        q[k++] = sv["all", c, p] / sv["one", c, p]
                printf " %-25s |", summary(q, k)
            }
            printf "\n"
        }
    }' "$out"
if [ -s "$fail" ]; then
    cat "$fail"
    exit 1
fi
exit 0
