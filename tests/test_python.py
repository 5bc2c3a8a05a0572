"""test_python.py: python/implicit.py against the C API and the CLI (run by tests/test_lib.c).

    test_python.py CKPT REF.bin PROMPT CLI.txt

REF.bin (written by test_lib through the C API): int32 B, T, V; int32 ids (B, T); float32 parallel
logits (B, T, V); float32 step logits of row 0 (T, V). CLI.txt: what `implicit generate CKPT
--prompt PROMPT --max_tokens 24 --temperature 0.8 --top_p 0.9 --seed 3 --echo 0` printed.
Prints `python: N passed, N failed`; exits 1 on a failure.
"""
import array
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import implicit  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL test_python.py: %s" % what)


def flat(x):
    if hasattr(x, "ravel"):
        return [float(v) for v in x.ravel()]
    if isinstance(x, list) and x and not isinstance(x[0], float):
        return [v for row in x for v in flat(row)]
    return [float(v) for v in x]


def max_abs_diff(a, b):
    a, b = flat(a), flat(b)
    assert len(a) == len(b), (len(a), len(b))
    return max(abs(x - y) for x, y in zip(a, b))


ckpt, ref_path, prompt, cli_path = sys.argv[1:5]
with open(ref_path, "rb") as f:
    B, T, V = struct.unpack("3i", f.read(12))
    ids = array.array("i")
    ids.frombytes(f.read(4 * B * T))
    ref_par = array.array("f")
    ref_par.frombytes(f.read(4 * B * T * V))
    ref_step = array.array("f")
    ref_step.frombytes(f.read(4 * T * V))
rows = [list(ids[b * T:(b + 1) * T]) for b in range(B)]
scale = max(abs(v) for v in ref_par)
# The same kernels run on the same inputs in one thread, so the results should agree to the bit; the
# bound allows four roundings of the largest logit (float32 unit roundoff 2^-24) in case a kernel
# splits a sum differently for another caller.
same_tol = 4 * 2.0 ** -24 * scale
implicit.set_threads(1)
m = implicit.Model.load(ckpt)
# Step vs parallel: another summation order through every layer: the bound `implicit smoke` holds
# explicit families to (1e-4 of the largest logit); implicit models solve both to the relative
# residual f_tol = 1e-7 of the test's checkpoint, held to 1e-3 as tests/test_implicit.c does.
order_tol = (1e-3 if m.is_implicit else 1e-4) * scale
check(m.vocab_size == V, "vocab %d vs %d" % (m.vocab_size, V))
check(m.config["vocab_size"] == V and m.family == m.config["model"], "config dict")
par = m.logits(rows)
check(len(par) == B and len(par[0]) == T and len(par[0][0]) == V, "logits shape")
d = max_abs_diff(par, ref_par)
check(d <= same_tol, "parallel logits vs the C API: max diff %.3g > %.3g" % (d, same_tol))
one = m.logits(rows[0])
check(max_abs_diff(one, ref_par[:T * V]) <= order_tol, "one sequence = row 0 of the batch")
steps = [m.step(t) for t in rows[0]]
d = max_abs_diff(steps, ref_step)
check(d <= same_tol, "step logits vs the C API: max diff %.3g > %.3g" % (d, same_tol))
d = max_abs_diff(steps, ref_par[:T * V])
check(d <= order_tol, "step vs parallel: max diff %.3g > %.3g" % (d, order_tol))
m.reset()
check(max_abs_diff(m.step(rows[0][0]), ref_step[:V]) <= same_tol, "reset, then the first step again")
st = m.state(batch=B)
for t in range(T):
    out = st.step([rows[b][t] for b in range(B)])
check(st.position == T and max_abs_diff(out[1], ref_par[((B - 1) * T + T - 1) * V:B * T * V]) <= order_tol,
      "a batch state's last row")
st.close()

# without numpy: nested lists of the same numbers
saved, implicit._np = implicit._np, None
lists = m.logits(rows)
implicit._np = saved
check(isinstance(lists, list) and max_abs_diff(lists, ref_par) <= same_tol, "logits as lists (no numpy)")

# generation: the CLI's text for the same seed and settings
with open(cli_path, "rb") as f:
    cli = f.read()
ids_gen = m.generate_ids(prompt, max_tokens=24, temperature=0.8, top_p=0.9, seed=3)
got = m.tokenizer.decode_bytes(ids_gen)
check(got == cli, "generate vs the CLI: %r vs %r" % (got, cli))
check(m.generate(prompt, max_tokens=24, temperature=0.8, top_p=0.9, seed=3) == cli.decode("utf-8", "replace"),
      "generate() text")
other = m.tokenizer.decode_bytes(m.generate_ids(prompt, max_tokens=24, temperature=0.8, top_p=0.9, seed=4))
check(other != cli, "another seed, another text")
# a stop string (the first ASCII character after the first byte) ends the text before it
stops = [i for i in range(1, len(cli)) if 32 <= cli[i] < 127]
if stops:
    c = cli[stops[0]:stops[0] + 1]
    cut = m.generate(prompt, max_tokens=24, temperature=0.8, top_p=0.9, seed=3, stop=c.decode())
    check(cut == cli[:cli.index(c)].decode("utf-8", "replace"), "stop %r: %r" % (c, cut))

tok = m.tokenizer
text = "the fog rolled in"
check(tok.decode(tok.encode(text)) == text, "decode(encode(s)) == s")
check(b"".join(tok.piece(i) for i in tok.encode(text)) == text.encode(), "pieces")

# bad input raises ImplicitError with the library's message, never crashes
try:
    implicit.Model.load(os.path.join(os.path.dirname(ref_path), "missing.safetensors"))
    check(False, "a missing checkpoint loaded")
except implicit.ImplicitError as e:
    check(e.status < 0 and "missing.safetensors" in str(e), "missing file: %s" % e)
for bad in ([V], [-1]):
    try:
        m.logits(bad)
        check(False, "id %d accepted" % bad[0])
    except implicit.ImplicitError as e:
        check(e.status == -4, "id %d: %s" % (bad[0], e))
try:
    m.step(V)
    check(False, "step id V accepted")
except implicit.ImplicitError as e:
    check("out of range" in str(e), "step id V: %s" % e)
try:
    implicit.Sampler(V, temperature=-1)
    check(False, "temperature -1 accepted")
except implicit.ImplicitError:
    check(True, "")
m.close()
m.close()

# other tools' checkpoints: a Hugging Face folder, bare weights with config= (`--config FILE`)
with implicit.Model.load("tests/ref/interop/hf_mamba2") as hf:
    x = hf.logits([1, 2, 3])
    check(hf.family == "mamba2" and len(x) == 3 and len(x[0]) == hf.vocab_size, "HF folder")
bare = os.path.join(os.path.dirname(ref_path), "bare.safetensors")
if os.path.exists(bare):
    with implicit.Model.load(bare, config="tests/ref/interop/ref_llama/config.json", max_seq_len=64) as b:
        check(b.family == "llama" and b.context == 64, "bare weights + config=")

print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
