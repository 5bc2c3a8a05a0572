#!/bin/sh
# bench/vs_llama2c.sh RUN_C [ROUNDS]: batch-1 greedy generation of `implicit generate` against
# llama2.c's run.c (a path to that file; it is not part of this repository) on the same weights,
# one thread, pinned to one core. Steps:
#   1. builds run.c twice, `-Ofast -march=native` and `-Ofast -march=native -mno-avx512f`;
#   2. writes a Llama with the shapes of stories15M (D 288, 6 layers, 6 heads, SwiGLU hidden 768,
#      V 32000, tied) and one of a 110M model (D 768, 12 layers, 12 heads, hidden 2048) with
#      `implicit init`, and converts each with bench/llama2c_convert.py (llama2.c's model.bin and
#      tokenizer.bin, and our tok.bpe with the same id -> bytes map);
#   3. checks that both programs print the same greedy text from start token 1 (exits 1 if not);
#   4. runs ROUNDS (default 5) interleaved rounds (the order alternates each round) and prints, per
#      shape and llama2.c build, best and median tok/s of each program and their ratio, plus our
#      wall time per run (load included) and both programs' peak resident memory.
# tok/s is each program's own figure: ours from the "generated N tokens in T s" line, llama2.c's
# "achieved tok/s" (which leaves out its first token).
# Environment: IMPLICIT (our binary, default build/implicit), IMPLICIT_AVX2 (an AVX2 build of ours,
# `make CFLAGS=-mno-avx512f BUILD=build-avx2`, compared with the -mno-avx512f llama2.c; without it
# ours is compared with both), CPU (core to pin to, default 1), WORK (scratch folder, default a
# new temporary one, removed at the end unless KEEP=1), N15 / N110 (tokens per run, default 128 / 32),
# SHAPES (default "s15 b110").
set -eu
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: bench/vs_llama2c.sh RUN_C [ROUNDS]   (RUN_C: path to llama2.c's run.c)" >&2
    exit 2
fi
run_c=$1
rounds=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
implicit=${IMPLICIT:-$here/build/implicit}
implicit_avx2=${IMPLICIT_AVX2:-$implicit}
cpu=${CPU:-1}
n15=${N15:-128}
n110=${N110:-32}
shapes=${SHAPES:-s15 b110}
[ -x "$implicit" ] || { echo "vs_llama2c: no $implicit (run make, or set IMPLICIT)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "vs_llama2c: python3 is needed for the conversion" >&2; exit 2; }
case "$rounds" in '' | *[!0-9]*) echo "vs_llama2c: ROUNDS must be a number, got '$rounds'" >&2; exit 2 ;; esac
if [ -n "${WORK:-}" ]; then work=$WORK; mkdir -p "$work"; else work=$(mktemp -d); fi
[ "${KEEP:-0}" = 1 ] || [ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 LC_ALL=C
timer=
[ -x /usr/bin/time ] && timer="/usr/bin/time -f %e:%M -o"

echo "== host: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(getconf _NPROCESSORS_ONLN) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== building $run_c"
gcc -Ofast -march=native "$run_c" -lm -o "$work/run_native"
gcc -Ofast -march=native -mno-avx512f "$run_c" -lm -o "$work/run_avx2"

for s in $shapes; do
    case $s in
        s15) args="--n_layer 6 --d_model 288 --n_head 6 --d_inner 1152"; n=$n15 ;;
        b110) args="--n_layer 12 --d_model 768 --n_head 12 --d_inner 3072 --seed 2"; n=$n110 ;;
        *) echo "vs_llama2c: unknown shape '$s' (s15, b110)" >&2; exit 2 ;;
    esac
    if [ ! -f "$work/$s/model.bin" ]; then
        # shellcheck disable=SC2086
        "$implicit" init "$work/$s.safetensors" --model llama --vocab_size 32000 $args --max_seq_len 256 \
            --rope_theta 10000 >/dev/null
        python3 "$here/bench/llama2c_convert.py" "$work/$s.safetensors" "$work/$s"
    fi
done

# ours BIN SHAPE N OUT: one run of ours; stdout to OUT.txt, stderr to OUT.err, time/RSS to OUT.time
ours() {
    $timer "$4.time" taskset -c "$cpu" "$1" generate "$work/$2.safetensors" --tokenizer "$work/$2/tok.bpe" \
        --prompt "$(printf '\001')" --echo 0 --max_tokens "$3" --temperature 0 --threads 1 >"$4.txt" 2>"$4.err"
}
theirs() {
    $timer "$4.time" taskset -c "$cpu" "$1" "$work/$2/model.bin" -z "$work/$2/tokenizer.bin" -t 0 -n "$3" \
        >"$4.txt" 2>"$4.err"
}

status=0
for s in $shapes; do
    [ "$s" = s15 ] && n=$n15 || n=$n110
    for build in native avx2; do
        [ "$build" = native ] && bin=$implicit || bin=$implicit_avx2
        run="$work/run_$build"
        rm -f "$work/rounds_${s}_$build"
        # the same text: our raw bytes through llama2.c's printing rules against its stdout
        ours "$bin" "$s" 32 "$work/chk_o"
        theirs "$run" "$s" 32 "$work/chk_l"
        if ! python3 - "$work/chk_o.txt" "$work/chk_l.txt" "$here/bench" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
from llama2c_convert import normalize
ours = normalize(open(sys.argv[1], "rb").read())
theirs = open(sys.argv[2], "rb").read().rstrip(b"\n")
if ours != theirs:
    print("texts differ:\n  implicit: %r\n  llama2.c: %r" % (ours[:200], theirs[:200]))
    sys.exit(1)
print("same text (%d bytes): %r" % (len(ours), ours[:60]))
EOF
        then
            echo "vs_llama2c: $s, llama2.c $build: the two programs do not compute the same model" >&2
            status=1
            continue
        fi
        r=1
        while [ "$r" -le "$rounds" ]; do
            if [ $((r % 2)) = 1 ]; then ours "$bin" "$s" "$n" "$work/o"; theirs "$run" "$s" "$n" "$work/l"
            else theirs "$run" "$s" "$n" "$work/l"; ours "$bin" "$s" "$n" "$work/o"; fi
            o=$(sed -n 's/.*generated [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$work/o.err")
            l=$(sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p' "$work/l.err")
            [ -n "$o" ] && [ -n "$l" ] || { echo "vs_llama2c: no tok/s in a run:"; cat "$work/o.err" "$work/l.err"; exit 1; }
            ot=$(cat "$work/o.time" 2>/dev/null || echo "-:-")
            lt=$(cat "$work/l.time" 2>/dev/null || echo "-:-")
            echo "$o $l $ot $lt" >>"$work/rounds_${s}_$build"
            r=$((r + 1))
        done
        python3 - "$work/rounds_${s}_$build" "$s" "$build" "$(basename "$bin")" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
o = [float(r[0]) for r in rows]; l = [float(r[1]) for r in rows]
def tm(col, i):
    v = [r[col].split(":")[i] for r in rows]
    return min(float(x) for x in v) if all(x != "-" for x in v) else float("nan")
ow, orss, lw, lrss = tm(2, 0), tm(2, 1) / 1024, tm(3, 0), tm(3, 1) / 1024
name = {"s15": "stories15M", "b110": "110M"}[sys.argv[2]]
print("%-10s llama2.c %-6s rounds %d | implicit tok/s best %7.1f median %7.1f | llama2.c best %7.1f median %7.1f"
      " | ratio best %.2fx median %.2fx | wall s (min) %.2f / %.2f | peak RSS MB %.0f / %.0f"
      % (name, sys.argv[3], len(rows), max(o), statistics.median(o), max(l), statistics.median(l),
         max(o) / max(l), statistics.median(o) / statistics.median(l), ow, lw, orss, lrss))
EOF
    done
done
exit $status
