#!/bin/sh
# test_browser: the HTML report of a short training run, rendered by a real browser (headless
# Chromium): the page loads without errors and without asking for anything outside itself, every
# panel this run must have is an <svg> in the rendered DOM with drawn data, and a screenshot of it
# is not blank (a small page of our own decodes the PNG in the browser and counts its colours).
# `make` installs this script as BUILD/test_browser beside the binary. Without chromium it says
# so on a "skip" line and checks nothing (CI installs chromium: .ci/run). About 10-15 s.
dir=$(cd "$(dirname "$0")" && pwd)
imp="$dir/implicit"
pass=0; fail=0
check() {   # check CONDITION-EXIT-STATUS MESSAGE
    if [ "$1" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL test_browser: $2"; fi
}
# IMPLICIT_BROWSER=skip: not run (CI renders once, in one of its builds); =require: a missing
# chromium is a failure, not a skip (CI)
browser=$(command -v chromium || command -v chromium-browser || true)
if [ "${IMPLICIT_BROWSER:-}" = skip ]; then
    echo "skip test_browser: IMPLICIT_BROWSER=skip"
    echo "test_browser: 0 passed, 0 failed"
    exit 0
fi
if [ -z "$browser" ]; then
    if [ "${IMPLICIT_BROWSER:-}" = require ]; then
        echo "FAIL test_browser: chromium is not installed and IMPLICIT_BROWSER=require"
        echo "test_browser: 0 passed, 1 failed"
        exit 1
    fi
    echo "skip test_browser: chromium is not installed here (apt-get install chromium); CI installs it"
    echo "test_browser: 0 passed, 0 failed"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a short run of an implicit model: solver diagnostics, a curriculum, evaluations in both modes
"$imp" train --model implicit_mamba2 --d_model 8 --n_layer 1 --task word --group S3 --train_len 8 --eval_lens 8,16 \
    --steps 20 --log_every 2 --eval_every 10 --ckpt_every 10 --eval_samples 8 --eval_mode both --batch 4 \
    --threads 1 --progress none --out "$tmp/run" > "$tmp/train.txt" 2>&1
check $? "training run failed: $(tail -3 "$tmp/train.txt")"
page="$tmp/run/report.html"
test -s "$page"; check $? "the run wrote no report.html"

render() {   # the browser, headless, with a profile of its own; no GPU, no sandbox (CI runs as root)
    timeout 60 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
        --user-data-dir="$tmp/profile" --enable-logging=stderr --v=0 "$@"
}
render --dump-dom "file://$page" > "$tmp/dom.html" 2> "$tmp/dom.err"
check $? "chromium --dump-dom failed: $(tail -3 "$tmp/dom.err")"
grep -q '</html>' "$tmp/dom.html"; check $? "the rendered DOM is not a whole page"
# no console messages (there is no script), no failed loads, nothing requested from outside
! grep -E 'CONSOLE|Uncaught|net::ERR|Failed to load' "$tmp/dom.err" > "$tmp/errs.txt"
check $? "the page logged errors: $(head -3 "$tmp/errs.txt")"
! grep -Eq '<script|<link|<img|<iframe|@import|url\(|src=' "$tmp/dom.html"
check $? "the page refers to something outside itself"
for id in loss-step loss-time acc-step acc-time lr grad-norm tok-s solver-iters solver-res eval-steps eval-len \
          eval-p eval-iters hist duality; do
    # the panel's <svg> element as rendered; its data: a path of two or more points, or bars
    tr -d '\n' < "$tmp/dom.html" | sed "s/.*id=\"panel-$id\"/id=\"panel-$id\"/; s/<\/svg>.*//" > "$tmp/panel.svg"
    if grep -q "id=\"panel-$id\"" "$tmp/panel.svg"; then
        grep -Eq '<path d="M[0-9.]+ [0-9.]+L|<rect x="[0-9.]+" y="[0-9.]+" width="[0-9.]+" height="[1-9]' "$tmp/panel.svg"
        check $? "panel $id has no drawn data"
    else
        check 1 "panel $id is missing from the rendered page"
    fi
done
render --screenshot="$tmp/shot.png" --window-size=1280,2000 "file://$page" > /dev/null 2> "$tmp/shot.err"
check $? "chromium --screenshot failed: $(tail -3 "$tmp/shot.err")"
# decode the screenshot in the browser: its size, non-white pixels and distinct colours
{
    printf '<!DOCTYPE html><html><body><pre id="out">not decoded</pre><script>\n'
    printf 'var im = new Image();\nim.onload = function () {\n'
    printf '  var c = document.createElement("canvas"); c.width = im.width; c.height = im.height;\n'
    printf '  var g = c.getContext("2d"); g.drawImage(im, 0, 0);\n'
    printf '  var d = g.getImageData(0, 0, c.width, c.height).data, ink = 0, seen = {}, colours = 0;\n'
    printf '  for (var i = 0; i < d.length; i += 4) {\n'
    printf '    if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) ink++;\n'
    printf '    var k = d[i] << 16 | d[i + 1] << 8 | d[i + 2]; if (!seen[k]) { seen[k] = 1; colours++; }\n'
    printf '  }\n  document.getElementById("out").textContent = "size " + c.width + " " + c.height + " ink " + ink + " colours " + colours;\n'
    printf '};\nim.src = "data:image/png;base64,'
    base64 -w0 "$tmp/shot.png"
    printf '";\n</script></body></html>\n'
} > "$tmp/decode.html"
render --dump-dom --virtual-time-budget=10000 "file://$tmp/decode.html" > "$tmp/decoded.html" 2> /dev/null
stats=$(sed -n 's/.*<pre id="out">\([^<]*\)<\/pre>.*/\1/p' "$tmp/decoded.html")
set -- $stats
[ "$1" = size ] && [ "$2" -eq 1280 ] && [ "$3" -eq 2000 ]; check $? "screenshot not decoded as 1280x2000: '$stats'"
# a blank page is one colour and no ink; the report has axes, text and curves in several colours
[ "${5:-0}" -gt 64000 ] && [ "${7:-0}" -ge 16 ]; check $? "the screenshot looks blank: '$stats'"
echo "test_browser: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
