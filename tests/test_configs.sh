#!/bin/sh
# test_configs: every config the project ships (configs/*.json) is one a user can run as it is:
# `implicit train CONFIG` accepts it (model, task and train keys valid together) and takes one
# step, with the evaluation cut to two samples of length 4 so the check stays fast (~0.2 s a
# config). Also that a config with an unknown key, a bad value or a broken JSON file is refused
# with the offending key or position named, before anything is written; and that a key two tables
# share reaches each (--seed: the task's data seed; --train.seed: the initialisation seed). `make` installs this
# script as BUILD/test_configs beside the binary; tests/run.sh runs it from the repository root.
dir=$(cd "$(dirname "$0")" && pwd)
imp="$dir/implicit"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL test_configs: $*"; fail=$((fail+1)); }
quick="--steps 1 --eval_every 0 --eval_samples 2 --eval_lens 4 --gap_samples 0 --report 0 --threads 1 --progress none"
n=0
for c in configs/*.json; do
    name=$(basename "$c" .json)
    n=$((n+1))
    if "$imp" train "$c" $quick --out "$tmp/$name" > "$tmp/$name.log" 2>&1 && [ -f "$tmp/$name/model.safetensors" ]; then ok
    else bad "$c does not train: $(tail -n 3 "$tmp/$name.log")"; fi
done
[ "$n" -ge 20 ] && ok || bad "only $n configs found in configs/"
# refusals: a non-zero exit, the key or the JSON position named, no checkpoint written
refuse() {   # refuse NAME JSON WANT
    printf '%s\n' "$2" > "$tmp/$1.json"
    out=$("$imp" train "$tmp/$1.json" $quick --out "$tmp/r_$1" 2>&1); rc=$?
    if [ "$rc" -ne 0 ] && echo "$out" | grep -q -- "$3" && [ ! -e "$tmp/r_$1/model.safetensors" ]; then ok
    else bad "$1: rc $rc, wanted '$3' in: $out"; fi
}
refuse unknown_key '{"model": {"model": "mamba2", "d_modle": 64}, "task": {"task": "word"}}' "d_modle"
refuse bad_value '{"model": {"model": "mamba2"}, "task": {"task": "word", "len_curriculum": "64:10"}}' "len_curriculum"
refuse bad_json '{"model": {"model": "mamba2",, }}' "json\|JSON"
# a key two tables share: --seed is the task's (data) seed, --train.seed the initialisation's
if "$imp" train configs/demo.json $quick --seed 3 --train.seed 5 --out "$tmp/seeds" > "$tmp/seeds.log" 2>&1; then
    cfg=$(tr -d '\n' < "$tmp/seeds/config.json")
    task=$(echo "$cfg" | sed 's/.*"task": {\([^}]*\)}.*/\1/'); train=$(echo "$cfg" | sed 's/.*"train": {\([^}]*\)}.*/\1/')
    if echo "$task" | grep -q '"seed": 3' && echo "$train" | grep -q '"seed": 5'; then ok
    else bad "--seed 3 --train.seed 5: task {$task} train {$train}"; fi
else bad "--train.seed: $(tail -n 2 "$tmp/seeds.log")"; fi
echo "test_configs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
