#!/bin/sh
# test_byte_lm: a language model trained by PyTorch code, used as it is. tests/ref/gen_byte_lm.py
# trained a byte-level Llama on tests/ref/interop/byte_text.txt and wrote it with the reference's
# names and config (byte_llama.safetensors) and as a transformers folder (hf_byte_llama/), with
# PyTorch's loss on the text and its greedy continuation of a prompt (byte_llama_expected.txt).
# This test runs the README's Interop commands (which the README must show verbatim) on both
# checkpoints, unconverted, and on their `implicit export --layout hf`, which must be, byte for
# byte, the committed export_hf_byte_llama/ that the generator read back with PyTorch code:
#   - `implicit eval`: the loss is PyTorch's within the bound the generator derived from the
#     computation (K chained float32 accumulations of length n; see gen_byte_lm.py);
#   - `implicit generate --temperature 0`, examples/generate (C), examples/generate_cpp (C++) and
#     python/implicit.py: the bytes are PyTorch's at every step whose recorded top-1/top-2 margin
#     exceeds twice the logit bound (the generator asserts that all do, by a factor of 10).
# `make` installs this script as BUILD/test_byte_lm beside the binary; tests/run.sh runs it from
# the repository root. About 2 s.
dir=$(cd "$(dirname "$0")" && pwd)
imp="$dir/implicit"
ref=tests/ref/interop
exp=$ref/byte_llama_expected.txt
pass=0; fail=0
check() {   # check CONDITION-EXIT-STATUS MESSAGE
    if [ "$1" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL test_byte_lm: $2"; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
val() { sed -n "s/^$1 //p" "$exp"; }   # val KEY: the value of a `KEY value` line of the expected file
prompt=$(val prompt)
n_gen=$(val gen_tokens)
rel=$(val logit_rel_bound)
awk '/^step /{ print $3, $4, $5 }' "$exp" > "$tmp/steps.txt"   # PyTorch's id, margin, max |logit|
[ "$(wc -l < "$tmp/steps.txt")" -eq "$n_gen" ]; check $? "$exp: expected $n_gen steps"

# The commands as the README shows them: `implicit` is the binary under test, ./generate the C
# example, and the files they write (text.tok, hf_out) go to a scratch folder.
PREP="implicit data prepare $ref/byte_text.txt --out text.tok --val_frac $(val val_frac)"
EVAL="implicit eval $ref/byte_llama.safetensors --task lm --data text.tok --eval_lens $(val eval_len) --context $(val eval_len)"
GEN="implicit generate $ref/byte_llama.safetensors --prompt \"$prompt\" --temperature 0 --max_tokens $n_gen"
GEN_HF="implicit generate $ref/hf_byte_llama --prompt \"$prompt\" --temperature 0 --max_tokens $n_gen"
EXPORT="implicit export $ref/byte_llama.safetensors hf_out --layout hf"
EX_C="./generate $ref/byte_llama.safetensors \"$prompt\" $n_gen 0"
PY="PYTHONPATH=python python3 -c 'import implicit; m = implicit.Model.load(\"$ref/byte_llama.safetensors\"); print(m.generate(\"$prompt\", max_tokens=$n_gen, temperature=0))'"
for c in "$PREP" "$EVAL" "$GEN" "$GEN_HF" "$EXPORT" "$EX_C" "$PY"; do
    grep -qF -- "$c" README.md; check $? "README.md does not show the command: $c"
done
run() {   # run COMMAND [EXTRA ARGS]: the command with its programs and scratch files placed
    cmd=$(printf '%s' "$1" | sed "s|^implicit |\"$imp\" |; s| text.tok| $tmp/text.tok|; s| hf_out| $tmp/hf_out|")
    shift
    eval "$cmd \"\$@\""
}
# same_path NAME OUT: OUT (a continuation, as bytes) is PyTorch's greedy path, compared step by
# step while the recorded margin is above the bound (the generator checks that every one is)
same_path() {
    od -An -tu1 -v "$2" | tr -s ' ' '\n' | grep -v '^$' > "$tmp/got.txt"
    paste -d' ' "$tmp/steps.txt" "$tmp/got.txt" | awk -v rel="$rel" '
        { if ($2 <= 2 * rel * $3) { print "step " NR - 1 ": margin " $2 " within the bound: compared up to here"; exit }
          if ($4 != $1) { print "step " NR - 1 ": token " ($4 == "" ? "none" : $4) ", PyTorch " $1; bad = 1; exit } }
        END { exit bad }' > "$tmp/cmp.txt"
    check $? "$1: the greedy continuation differs from PyTorch's: $(cat "$tmp/cmp.txt")"
    [ "$(wc -l < "$tmp/got.txt")" -eq "$n_gen" ]; check $? "$1: generated $(wc -l < "$tmp/got.txt") bytes, not $n_gen"
}
printf '%s' "$prompt" > "$tmp/prompt.txt"

run "$PREP" > "$tmp/prep.txt" 2>&1; check $? "data prepare failed: $(tail -2 "$tmp/prep.txt")"
run "$EXPORT" > "$tmp/export.txt" 2>&1; check $? "export failed: $(tail -2 "$tmp/export.txt")"
for f in config.json model.safetensors; do
    cmp -s "$tmp/hf_out/$f" "$ref/export_hf_byte_llama/$f"
    check $? "export: $f differs from the committed $ref/export_hf_byte_llama/$f (regenerate: docs/interop.md)"
done

for ckpt in "$ref/byte_llama.safetensors" "$ref/hf_byte_llama" "$tmp/hf_out"; do
    name=${ckpt#"$tmp/"}
    # the loss, lossless from the CSV and as the table shows it
    run "$(printf '%s' "$EVAL" | sed "s|$ref/byte_llama.safetensors|$ckpt|")" --csv "$tmp/eval.csv" > "$tmp/eval.txt" 2>&1
    check $? "$name: eval failed: $(tail -2 "$tmp/eval.txt")"
    awk -F, -v want="$(val eval_loss)" -v tol="$(val eval_loss_tol)" -v n="$(val eval_windows)" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { got = $col["loss"]; d = got - want; if (d < 0) d = -d
          printf "loss %.7f vs PyTorch %.7f (|diff| %.1e, bound %.1e), %d windows\n", got, want, d, tol, $col["samples"]
          ok = d <= tol && $col["samples"] == n; rows++ }
        END { exit !(rows == 1 && ok) }' "$tmp/eval.csv" > "$tmp/loss.txt"
    check $? "$name: $(cat "$tmp/loss.txt")"
    grep -q "| $(printf '%.4f' "$(val eval_loss)") |" "$tmp/eval.txt"; check $? "$name: the eval table does not show the loss"
    # greedy generation: the prompt echoed, then the continuation
    run "$(printf '%s' "$GEN" | sed "s|$ref/byte_llama.safetensors|$ckpt|")" > "$tmp/gen.txt" 2> "$tmp/gen.err"
    check $? "$name: generate failed: $(tail -2 "$tmp/gen.err")"
    head -c ${#prompt} "$tmp/gen.txt" | cmp -s - "$tmp/prompt.txt"; check $? "$name: the output does not start with the prompt"
    tail -c +$((${#prompt} + 1)) "$tmp/gen.txt" > "$tmp/cont.txt"
    same_path "$name" "$tmp/cont.txt"
done

# the examples print the continuation and a newline
for ex in generate generate_cpp; do
    run "$(printf '%s' "$EX_C" | sed "s|^./generate |\"$dir/examples/$ex\" |")" > "$tmp/ex.txt" 2> "$tmp/ex.err"
    check $? "examples/$ex failed: $(tail -2 "$tmp/ex.err")"
    head -c "$n_gen" "$tmp/ex.txt" > "$tmp/cont.txt"
    same_path "examples/$ex" "$tmp/cont.txt"
done
if [ -x /usr/bin/python3 ]; then
    pre=""   # an ASan library needs its runtime loaded before python
    if ldd "$dir/libimplicit.so" 2>/dev/null | grep -q libasan; then
        pre="LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0 "
    fi
    run "$(printf '%s' "$PY" | sed "s|^PYTHONPATH=python python3 |${pre}IMPLICIT_LIB=$dir/libimplicit.so PYTHONPATH=python /usr/bin/python3 |")" \
        > "$tmp/py.txt" 2> "$tmp/py.err"
    check $? "python/implicit.py failed: $(tail -2 "$tmp/py.err")"
    head -c "$n_gen" "$tmp/py.txt" > "$tmp/cont.txt"
    same_path "python/implicit.py" "$tmp/cont.txt"
else
    echo "skip: /usr/bin/python3 not found, python/implicit.py not run"
fi
echo "test_byte_lm: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
