#!/bin/sh
# layering.sh: the folders of src/ depend on each other one way only. Reads every `#include "..."`
# line under src/ and cli/ and fails on an include of a folder that is not below the includer.
#
#   core → kernels → layers → fixedpoint → models → train → api → cli
#   core → io → tok → data → train          (io is also used by models)
# (api is the public C API over the library; the CLI uses the modules directly, not the api)
#
# A folder may include itself and the folders listed for it below, with no exception: the
# Fixed-Point RNN layers are fixed points themselves, but they describe their map with
# core/fpmap.h and are handed the solve by their caller (a model), so layers never include
# fixedpoint.
# Prints `layering: N passed, N failed` for tests/run.sh; exits non-zero on a violation.
cd "$(dirname "$0")/.." || exit 2

allowed() {  # allowed FOLDER -> the folders FOLDER may include
    case $1 in
    core) echo "" ;;
    kernels) echo "core" ;;
    io) echo "core" ;;
    layers) echo "core kernels" ;;
    fixedpoint) echo "core kernels" ;;
    models) echo "core kernels io layers fixedpoint" ;;
    tok) echo "core io" ;;
    data) echo "core io tok" ;;
    train) echo "core kernels io layers fixedpoint models tok data" ;;
    api) echo "core kernels io layers fixedpoint models tok data train" ;;
    cli) echo "core kernels io layers fixedpoint models tok data train" ;;
    *) echo "?" ;;
    esac
}

pass=0; fail=0
files=$(find src cli -name '*.[ch]' | sort)
for f in $files; do
    case $f in
    cli/*) from=cli ;;
    src/*) from=$(echo "$f" | cut -d/ -f2) ;;
    esac
    ok_list=$(allowed "$from")
    if [ "$ok_list" = "?" ]; then
        echo "FAIL layering: $f is in src/$from/, which has no place in the order (add it to tests/layering.sh and the README's Layout)"
        fail=$((fail+1)); continue
    fi
    dir=$(dirname "$f")
    # the quoted includes, resolved against the including file's folder
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        path=$(realpath -m --relative-to=. "$dir/$inc")
        case $path in
        src/*/*) to=$(echo "$path" | cut -d/ -f2) ;;
        cli/*) to=cli ;;
        *) continue ;;   # include/, tests/: public headers and harnesses are outside the order
        esac
        [ "$to" = "$from" ] && { pass=$((pass+1)); continue; }
        if echo " $ok_list " | grep -q " $to "; then
            pass=$((pass+1))
        else
            echo "FAIL layering: $f ($from) includes $path ($to), which is not below it"
            fail=$((fail+1))
        fi
    done
done
echo "layering: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
