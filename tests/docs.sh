#!/bin/sh
# docs.sh: the documentation stays usable. The README stays a user guide of at most 20 kB (the long
# material lives in docs/), and every relative link in README.md and docs/**/*.md points at a file
# or folder that exists. Prints `docs: N passed, N failed` for tests/run.sh.
cd "$(dirname "$0")/.." || exit 2
pass=0; fail=0
size=$(wc -c < README.md)
if [ "$size" -le 20000 ]; then pass=$((pass+1)); else
    echo "FAIL docs: README.md is $size bytes, above 20000 (move the detail into docs/)"; fail=$((fail+1)); fi
for f in README.md $(find docs -name '*.md' | sort); do
    dir=$(dirname "$f")
    # ](target) of markdown links and images, without #anchors; skip web links and pure anchors
    for t in $(grep -o '](\([^)#]*\)[^)]*)' "$f" | sed 's/^](\([^)#]*\).*/\1/' | grep -v '^[a-z]*:' | grep -v '^$'); do
        if [ -e "$dir/$t" ]; then pass=$((pass+1)); else
            echo "FAIL docs: $f links to $t, which does not exist"; fail=$((fail+1)); fi
    done
done
echo "docs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
