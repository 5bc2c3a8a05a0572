"""implicit: run implicit (fixed-point) and explicit sequence models from Python.

A thin ctypes binding of libimplicit.so (include/implicit.h); no build step, no dependency beyond
the standard library. numpy is used when it is installed: logits come back as float32 arrays of
shape (batch, len, vocab) / (batch, vocab), otherwise as nested lists of floats.

    import implicit
    model = implicit.Model.load("runs/tiny.safetensors")
    print(model.generate("Once upon a time", max_tokens=64, temperature=0.8, top_p=0.9, seed=1))
    logits = model.logits([model.tokenizer.encode("Once upon")])       # (1, T, vocab)

The library is found by, in order: the IMPLICIT_LIB environment variable (a file path), a
libimplicit.so beside this file, the build folder of the source tree (../build), and the system's
library path (ldconfig).
"""
import ctypes
import ctypes.util
import json
import os

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None

__all__ = ["Model", "State", "Sampler", "Tokenizer", "ImplicitError", "set_threads", "version", "library_path"]


class ImplicitError(RuntimeError):
    """A failed library call: .status is the negative IM_ERR_* code, str() the library's message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _find_library():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    if os.environ.get("IMPLICIT_LIB"):
        candidates.append(os.environ["IMPLICIT_LIB"])
    candidates += [os.path.join(here, "libimplicit.so"), os.path.join(here, "..", "build", "libimplicit.so")]
    for c in candidates:
        if os.path.exists(c):
            return c
    found = ctypes.util.find_library("implicit")
    if found:
        return found
    raise OSError("libimplicit.so not found: build it with `make`, or set IMPLICIT_LIB to its path "
                  "(looked in: %s and the system library path)" % ", ".join(candidates))


library_path = _find_library()
_lib = ctypes.CDLL(library_path)

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_float_p = ctypes.POINTER(ctypes.c_float)
_c_size_p = ctypes.POINTER(ctypes.c_size_t)


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_version = _fn("im_version", ctypes.c_char_p)
_last_error = _fn("im_last_error", ctypes.c_char_p)
_free = _fn("im_free", None, ctypes.c_void_p)
_set_threads = _fn("im_set_threads", ctypes.c_int, ctypes.c_int)
_model_load_with = _fn("im_model_load_with", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                       ctypes.POINTER(ctypes.c_char_p))
_model_free = _fn("im_model_free", None, ctypes.c_void_p)
_model_vocab = _fn("im_model_vocab_size", ctypes.c_int, ctypes.c_void_p)
_model_context = _fn("im_model_context", ctypes.c_int, ctypes.c_void_p)
_model_d_model = _fn("im_model_d_model", ctypes.c_int, ctypes.c_void_p)
_model_n_layer = _fn("im_model_n_layer", ctypes.c_int, ctypes.c_void_p)
_model_n_params = _fn("im_model_n_params", ctypes.c_int64, ctypes.c_void_p)
_model_family = _fn("im_model_family", ctypes.c_char_p, ctypes.c_void_p)
_model_is_implicit = _fn("im_model_is_implicit", ctypes.c_int, ctypes.c_void_p)
_model_config = _fn("im_model_config_json", ctypes.c_char_p, ctypes.c_void_p)
_model_last_iters = _fn("im_model_last_iters", ctypes.c_double, ctypes.c_void_p)
_model_logits = _fn("im_model_logits", ctypes.c_int, ctypes.c_void_p, _c_int_p, ctypes.c_int, ctypes.c_int, _c_float_p)
_model_tokenizer = _fn("im_model_tokenizer", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
_state_create = _fn("im_state_create", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int)
_state_step = _fn("im_state_step", ctypes.c_int, ctypes.c_void_p, _c_int_p, _c_float_p)
_state_reset = _fn("im_state_reset", ctypes.c_int, ctypes.c_void_p)
_state_position = _fn("im_state_position", ctypes.c_int, ctypes.c_void_p)
_state_free = _fn("im_state_free", None, ctypes.c_void_p)
_sampler_create = _fn("im_sampler_create", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                      ctypes.c_float, ctypes.c_int, ctypes.c_float, ctypes.c_uint64)
_sampler_next = _fn("im_sampler_next", ctypes.c_int, ctypes.c_void_p, _c_float_p)
_sampler_free = _fn("im_sampler_free", None, ctypes.c_void_p)
_token_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
_generate = _fn("im_generate", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, _c_int_p, ctypes.c_size_t, ctypes.c_int,
                ctypes.c_int, _c_int_p, _c_int_p, _token_fn, ctypes.c_void_p)
_tok_load = _fn("im_tokenizer_load", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p)
_tok_free = _fn("im_tokenizer_free", None, ctypes.c_void_p)
_tok_vocab = _fn("im_tokenizer_vocab_size", ctypes.c_int, ctypes.c_void_p)
_tok_eos = _fn("im_tokenizer_eos", ctypes.c_int, ctypes.c_void_p)
_tok_encode = _fn("im_tokenizer_encode", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                  ctypes.POINTER(_c_int_p), _c_size_p)
_tok_decode = _fn("im_tokenizer_decode", ctypes.c_int, ctypes.c_void_p, _c_int_p, ctypes.c_size_t,
                  ctypes.POINTER(ctypes.c_void_p), _c_size_p)
_tok_piece = _fn("im_tokenizer_piece", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, _c_size_p)


def _check(rc):
    if rc < 0:
        raise ImplicitError(rc, _last_error().decode("utf-8", "replace"))
    return rc


def _path(p):
    return os.fsencode(p)


def version():
    """The library's version string, e.g. "0.1.0"."""
    return _version().decode()


def set_threads(n):
    """OpenMP / BLAS threads for every later call of the process (n >= 1)."""
    _check(_set_threads(int(n)))


def _ids_array(ids):
    ids = [int(i) for i in ids]
    return (ctypes.c_int * max(len(ids), 1))(*ids), len(ids)


def _shape(buf, *dims):
    """float buffer -> numpy array of shape dims (a copy), or nested lists."""
    if _np is not None:
        return _np.ctypeslib.as_array(buf).reshape(dims).copy()
    flat = list(buf)

    def nest(off, d):
        if len(d) == 1:
            return flat[off:off + d[0]]
        step = 1
        for x in d[1:]:
            step *= x
        return [nest(off + i * step, d[1:]) for i in range(d[0])]
    return nest(0, list(dims))


class _Handle:
    """An object of the library: self._h, released once by close() (also on garbage collection)."""
    _h = None

    def _release(self, h):
        raise NotImplementedError

    def close(self):
        if self._h:
            self._release(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the binding may already be gone
            pass


class Tokenizer(_Handle):
    """Text <-> token ids: "byte", a .bpe file of `implicit tokenizer train`, or a tokenizer.json."""

    def __init__(self, handle):
        self._h = handle

    @classmethod
    def load(cls, spec):
        h = ctypes.c_void_p()
        _check(_tok_load(ctypes.byref(h), _path(spec)))
        return cls(h)

    @property
    def vocab_size(self):
        return _check(_tok_vocab(self._h))

    @property
    def eos(self):
        """The end-of-text id, or -1 if the tokenizer has none."""
        return _tok_eos(self._h)

    def encode(self, text):
        """str (UTF-8) or bytes -> list of ids."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids, n = _c_int_p(), ctypes.c_size_t()
        _check(_tok_encode(self._h, data, len(data), ctypes.byref(ids), ctypes.byref(n)))
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            _free(ids)

    def decode_bytes(self, ids):
        arr, n = _ids_array(ids)
        text, length = ctypes.c_void_p(), ctypes.c_size_t()
        _check(_tok_decode(self._h, arr, n, ctypes.byref(text), ctypes.byref(length)))
        try:
            return ctypes.string_at(text, length.value)
        finally:
            _free(text)

    def decode(self, ids):
        """ids -> str (bytes that are not UTF-8 become U+FFFD; decode_bytes keeps them)."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def piece(self, token):
        """The bytes of one id (may be part of a multi-byte UTF-8 character)."""
        n = ctypes.c_size_t()
        p = _tok_piece(self._h, int(token), ctypes.byref(n))
        if not p:
            _check(-4)
        return ctypes.string_at(p, n.value)

    def _release(self, h):
        _tok_free(h)


class Sampler(_Handle):
    """Next-token sampling as `implicit generate` does it: temperature (0 = greedy), top_k, top_p, seed."""

    def __init__(self, vocab_size, temperature=1.0, top_k=0, top_p=1.0, seed=0):
        self._h = ctypes.c_void_p()
        self.vocab_size = int(vocab_size)
        _check(_sampler_create(ctypes.byref(self._h), self.vocab_size, float(temperature), int(top_k), float(top_p),
                               int(seed)))

    def next(self, logits):
        """The id drawn from logits (a sequence of >= vocab_size floats)."""
        if isinstance(logits, ctypes.Array):
            buf = logits
        else:
            vals = logits.tolist() if hasattr(logits, "tolist") else list(logits)
            if len(vals) < self.vocab_size:
                raise ValueError("%d logits for a vocabulary of %d" % (len(vals), self.vocab_size))
            buf = (ctypes.c_float * len(vals))(*vals)
        return _check(_sampler_next(self._h, ctypes.cast(buf, _c_float_p)))

    def _release(self, h):
        _sampler_free(h)


class State(_Handle):
    """Token-by-token state of a model: `batch` rows, each fed one id per step."""

    def __init__(self, model, batch=1):
        self.model, self.batch = model, int(batch)
        self._h = ctypes.c_void_p()
        _check(_state_create(ctypes.byref(self._h), model._h, self.batch))
        self._buf = (ctypes.c_float * (self.batch * model.vocab_size))()

    def _step_raw(self, ids):
        arr, n = _ids_array(ids)
        if n != self.batch:
            raise ValueError("a step takes %d ids (one per row), got %d" % (self.batch, n))
        _check(_state_step(self._h, arr, self._buf))
        return self._buf

    def step(self, ids):
        """Feed one id per row (an int for batch 1) -> logits (batch, vocab), or (vocab,) for an int."""
        single = isinstance(ids, int)
        buf = self._step_raw([ids] if single else ids)
        out = _shape(buf, self.batch, self.model.vocab_size)
        return out[0] if single else out

    def reset(self):
        _check(_state_reset(self._h))

    @property
    def position(self):
        return _check(_state_position(self._h))

    def _release(self, h):
        _state_free(h)


class Model(_Handle):
    """A loaded checkpoint: Model.load(path), then logits / step / generate."""

    def __init__(self, handle, path):
        self._h, self.path = handle, path
        self._tokenizer = None
        self._state = None

    @classmethod
    def load(cls, path, **overrides):
        """Load a checkpoint; keyword arguments are evaluation-time model keys applied before the model
        is built, as `implicit generate --max_seq_len 4096` (max_seq_len, eval_seq_f_max_iter, f_tol, ...);
        config=FILE gives a model config to weights that carry none, as `--config FILE`."""
        h = ctypes.c_void_p()
        kv = []
        for k, v in overrides.items():
            kv += [str(k).encode(), str(v).encode()]
        arr = (ctypes.c_char_p * (len(kv) + 1))(*(kv + [None]))
        _check(_model_load_with(ctypes.byref(h), _path(path), arr))
        return cls(h, path)

    vocab_size = property(lambda self: _check(_model_vocab(self._h)))
    context = property(lambda self: _check(_model_context(self._h)), doc="max_seq_len (KV-cache capacity)")
    d_model = property(lambda self: _check(_model_d_model(self._h)))
    n_layer = property(lambda self: _check(_model_n_layer(self._h)))
    n_params = property(lambda self: _check(_model_n_params(self._h)))
    family = property(lambda self: _model_family(self._h).decode())
    is_implicit = property(lambda self: bool(_check(_model_is_implicit(self._h))))
    config = property(lambda self: json.loads(_model_config(self._h).decode()), doc="the model config as a dict")
    last_iters = property(lambda self: _model_last_iters(self._h),
                          doc="mean solver f-evaluations per token of the last call (0 for explicit models)")

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer (the one its run used, else byte)."""
        if self._tokenizer is None:
            h = ctypes.c_void_p()
            _check(_model_tokenizer(ctypes.byref(h), self._h))
            self._tokenizer = Tokenizer(h)
        return self._tokenizer

    def logits(self, ids):
        """ids: a list of ids (one sequence) -> (len, vocab); a list of equal-length lists -> (batch, len, vocab).
        Every row starts at position 0; the computation is the parallel (training-time) forward."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        single = len(ids) > 0 and not isinstance(ids[0], (list, tuple))
        rows = [list(ids)] if single else [list(r) for r in ids]
        if not rows or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError("logits takes one sequence or a batch of sequences of one length")
        B, T, V = len(rows), len(rows[0]), self.vocab_size
        arr, _ = _ids_array([i for r in rows for i in r])
        buf = (ctypes.c_float * (B * T * V))()
        _check(_model_logits(self._h, arr, B, T, buf))
        out = _shape(buf, B, T, V)
        return out[0] if single else out

    def state(self, batch=1):
        """A new State (a model holds one live state at a time: close the previous one first)."""
        if self._state is not None:
            self._state.close()
            self._state = None
        return State(self, batch)

    def step(self, token):
        """Feed one id to the model's own batch-1 state -> logits (vocab,) of the next token; reset() restarts."""
        if self._state is None:
            self._state = State(self, 1)
        return self._state.step(int(token))

    def reset(self):
        if self._state is not None:
            self._state.reset()

    def generate_ids(self, prompt, max_tokens=256, temperature=1.0, top_k=0, top_p=1.0, seed=0, stop=None,
                     stop_at_eos=True):
        """Ids drawn after `prompt` (a str, or a list of ids), as `implicit generate` draws them: the prompt is
        fed token by token, each drawn id fed back; an end-of-text id ends it (not returned) when stop_at_eos,
        and so does the text `stop` once it appears (its ids are returned)."""
        tok = self.tokenizer
        ids = tok.encode(prompt) if isinstance(prompt, (str, bytes)) else [int(i) for i in prompt]
        if not ids:
            if tok.eos < 0:
                raise ImplicitError(-4, "the prompt is empty and the tokenizer has no end-of-text token to start from")
            ids = [tok.eos]
        stop_bytes = stop.encode("utf-8") if isinstance(stop, str) else stop
        text = [b""]

        def on_token(ctx, token):   # the stop string ends it after the id that completes it
            text[0] += tok.piece(token)
            return int(stop_bytes in text[0])

        if self._state is not None:   # im_generate runs on the model's one state
            self._state.close()
            self._state = None
        sampler = Sampler(tok.vocab_size, temperature, top_k, top_p, seed)
        arr, n = _ids_array(ids)
        out = (ctypes.c_int * max(int(max_tokens), 1))()
        n_out = ctypes.c_int(0)
        callback = _token_fn(on_token) if stop_bytes else _token_fn()
        try:
            _check(_generate(self._h, sampler._h, arr, n, int(max_tokens), tok.eos if stop_at_eos else -1, out,
                             ctypes.byref(n_out), callback, None))
            return list(out[:n_out.value])
        finally:
            sampler.close()

    def generate(self, prompt, max_tokens=256, temperature=1.0, top_k=0, top_p=1.0, seed=0, stop=None,
                 stop_at_eos=True):
        """The text generated after `prompt` (str), cut before `stop` if that string appears."""
        ids = self.generate_ids(prompt, max_tokens, temperature, top_k, top_p, seed, stop, stop_at_eos)
        text = self.tokenizer.decode_bytes(ids)
        if stop:
            cut = text.find(stop.encode("utf-8"))
            if cut >= 0:
                text = text[:cut]
        return text.decode("utf-8", "replace")

    def _release(self, h):
        for child in (self._state, self._tokenizer):
            if child is not None:
                child.close()
        self._state = self._tokenizer = None
        _model_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
