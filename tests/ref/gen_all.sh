#!/bin/sh
# Regenerates every reference file in tests/ref/ and re-runs each generator's self-checks
# (gradchecks, step == full scan, KV-cache == full pass, explicit LSTM == nn.LSTM, file round trip;
# implicit: weight norm, one-f gradcheck, residual monotone, phantom -> IFT, sequential == simultaneous).
# Needs Debian's python3-torch (PyTorch 1.13) on /usr/bin/python3; override with PYTHON=...
# Usage (from anywhere): sh tests/ref/gen_all.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
cd "$here"
for g in gen_mamba2.py gen_llama.py gen_lstm.py gen_implicit.py gen_mamba1.py gen_mixer.py gen_deltanet.py \
         gen_fp_mamba.py gen_fp_interop.py gen_interop.py gen_byte_lm.py; do
    echo "== $g"
    "$PYTHON" "$g"
done
sha256sum ./*.safetensors ./interop/*.safetensors ./interop/*/*
