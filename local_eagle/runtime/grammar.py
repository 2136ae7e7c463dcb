"""Constrained output: JSON, JSON schemas, Lark grammars and regexes over the GGUF's own vocabulary (llguidance).

Three objects, from the request to the token loop (docs/structured.md):

- :class:`GrammarSpec`, what a request asks for (Ollama's ``format``, OpenAI's ``response_format``, the CLI's
  ``--format json`` / ``--json-schema`` / ``--grammar`` / ``--regex``): plain data, checked without a model, sent
  over the runner's JSON wire as :meth:`GrammarSpec.to_dict`;
- :class:`Grammar`, a spec compiled against one model's vocabulary by :func:`compile_grammar` (the vocabulary's
  llguidance tokenizer is built once per model and kept; that takes about 2.5 s on a 262K vocabulary);
- :class:`Constraint`, one generation's place in the grammar (:meth:`Grammar.matcher`): the tokens allowed next
  as a bit mask, consuming, validating and rolling back tokens, copies for tree branches, the tokens the grammar
  forces, and whether it is complete.

Masks are over the target's ``n_vocab``: token ``t`` is allowed when bit ``t % 32`` of word ``t // 32`` of
:meth:`Constraint.bitmask` is set. llguidance drops the GIL while it computes one, so a mask can be computed in
another thread while llama.cpp decodes.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.runtime import jsontext

if TYPE_CHECKING:
    import llguidance

    from local_eagle.llamacpp.model import Model

KINDS = ("json", "json_schema", "lark", "regex")
"""json: any JSON object (Ollama's ``format: "json"``, OpenAI's ``json_object``); json_schema: a JSON schema;
lark: a grammar in llguidance's Lark syntax; regex: a regular expression the whole output matches."""

JSON_STYLE = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}
"""How JSON is written under a constraint: on one line, as Python's ``json.dumps`` writes it (``{"a": 1, "b": [2,
3]}``). Fixed separators make a schema's keys and punctuation forced tokens (drafted without a drafter call, certain
to be accepted), and a small model cannot write whitespace for ever, as it can where any run of it is allowed
(llguidance's default)."""

_JSON_OPTIONS: Any = JSON_STYLE
_MAX_REASON = 300
MAX_SOURCE_CHARS = 1 << 20
"""The longest grammar source (a schema as JSON text, a Lark grammar, a regex) a spec may have: llguidance's own
lexer limit refuses an enum of about 100,000 values (1.3 MB) after half a second of work; past this length a spec is
refused before any. OpenAI's structured outputs allow far less (120,000 characters of names and values)."""


class GrammarError(LocalEagleError):
    """A grammar or schema llguidance refuses, or a token the grammar does not allow; one line."""


def _one_line(text: str) -> str:
    line = " ".join(str(text).replace("<non-verbose/>", "").split())  # llguidance's marker of its short form
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 3] + "..."


def _llg() -> Any:
    try:
        import llguidance
    except ImportError as e:  # pragma: no cover - a core dependency
        raise GrammarError(f"constrained output needs the package llguidance ({e}); pip install llguidance") from None
    return llguidance


@dataclass(frozen=True)
class GrammarSpec:
    """A request's constraint: ``kind`` (one of :data:`KINDS`) and ``source`` (the schema as JSON text, the Lark
    grammar, the regex; empty for ``json``). Hashable, so compiled grammars can be kept by spec."""

    kind: str
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise GrammarError(f"grammar kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.source, str):
            raise GrammarError(f"grammar source must be text, got {type(self.source).__name__}")

    # constructors ---------------------------------------------------------------------------------------------

    @classmethod
    def json_object(cls) -> GrammarSpec:
        return cls("json")

    @classmethod
    def json_schema(cls, schema: Any, field: str = "schema") -> GrammarSpec:
        """A JSON schema (a dict, or its JSON text), checked by llguidance without a vocabulary."""
        if isinstance(schema, str):
            try:
                schema = jsontext.loads(schema, field)
            except jsontext.JSONTextError as e:
                raise GrammarError(str(e)) from None
        if isinstance(schema, bool):  # JSON Schema's true/false
            raise GrammarError(f"{field} must be a JSON schema object, got {json.dumps(schema)}")
        if not isinstance(schema, dict):
            raise GrammarError(f"{field} must be a JSON schema object, got {type(schema).__name__}")
        if jsontext.longer_than(schema, MAX_SOURCE_CHARS):  # before the work: json.dumps holds the GIL throughout
            raise GrammarError(f"{field} is more than {MAX_SOURCE_CHARS} characters long as JSON, the most a "
                               "grammar may have")  # fmt: skip
        spec = cls("json_schema", json.dumps(schema, ensure_ascii=False))
        spec.check(field)
        return spec

    @classmethod
    def lark(cls, source: str, field: str = "grammar") -> GrammarSpec:
        spec = cls("lark", source)
        spec.check(field)
        return spec

    @classmethod
    def regex(cls, source: str, field: str = "regex") -> GrammarSpec:
        spec = cls("regex", source)
        spec.check(field)
        return spec

    @classmethod
    def from_ollama_format(cls, value: Any, field: str = "format") -> GrammarSpec | None:
        """Ollama's ``format``: ``"json"``, a JSON schema object, or nothing (null, ``""``)."""
        if value is None or value == "":
            return None
        if value == "json":
            return cls.json_object()
        if isinstance(value, dict):
            return cls.json_schema(value, field)
        shown = json.dumps(value)[:60]
        raise GrammarError(f'{field} must be "json" or a JSON schema object, got {shown}')

    @classmethod
    def from_openai_response_format(cls, value: Any, field: str = "response_format") -> GrammarSpec | None:
        """OpenAI's ``response_format``: ``{"type": "text"}`` (None), ``{"type": "json_object"}``, or
        ``{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}``. The output
        follows the schema whether ``strict`` is true or not (OpenAI keeps to it only when it is)."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise GrammarError(f"{field} must be an object with a type")
        kind = value.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return cls.json_object()
        if kind != "json_schema":
            raise GrammarError(f"{field}.type must be 'text', 'json_object' or 'json_schema', got {json.dumps(kind)}")
        js = value.get("json_schema")
        if not isinstance(js, dict):
            raise GrammarError(f"{field}.json_schema must be an object with a name and a schema")
        name = js.get("name")
        if name is not None and not isinstance(name, str):
            raise GrammarError(f"{field}.json_schema.name must be a string")
        strict = js.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise GrammarError(f"{field}.json_schema.strict must be true or false")
        if js.get("schema") is None:  # OpenAI: the schema is optional; without one, any JSON object
            return cls.json_object()
        return cls.json_schema(js["schema"], f"{field}.json_schema.schema")

    # the grammar ----------------------------------------------------------------------------------------------

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema (``{"type": "object"}`` for ``json``); None for Lark and regex."""
        if self.kind == "json":
            return {"type": "object"}
        if self.kind == "json_schema":
            return json.loads(self.source)
        return None

    def llguidance_grammar(self, field: str = "schema") -> str:
        """The grammar in llguidance's own serialised form. A schema is read as llama.cpp reads it
        (:mod:`local_eagle.runtime.schema_lark`: no key its ``properties`` do not name unless
        ``additionalProperties`` allows it, numbers of at most 16 + 16 digits), after llguidance has checked it;
        a schema it cannot read raises, naming ``field``."""
        m = _llg().LLMatcher
        if self.kind in ("json", "json_schema"):
            from local_eagle.runtime.schema_lark import schema_to_lark

            self._check_schema(field)
            return m.grammar_from_lark(schema_to_lark(self.schema or {}, JSON_STYLE))
        if self.kind == "lark":
            return m.grammar_from_lark(self.source)
        return m.grammar_from_regex(self.source)

    def _check_schema(self, field: str) -> None:
        """The schema as llguidance reads it, checked: its reasons (``Unimplemented keys``, ``Unsatisfiable
        schema``) are the ones a user can act on."""
        m = _llg().LLMatcher
        try:
            plain = m.grammar_from_json_schema(self.schema, defaults=_JSON_OPTIONS)
        except (ValueError, OverflowError) as e:  # an integer past 64 bits: "not JSON serializable"
            raise GrammarError(f"{field}: {_one_line(str(e))}") from None
        reason = m.validate_grammar(plain)
        if reason:
            raise GrammarError(f"{field}: {_one_line(reason)}")

    def check(self, field: str | None = None) -> None:
        """llguidance's validation without a model's vocabulary: a bad schema, grammar or regex raises, naming
        ``field``. Then a dry run over a vocabulary of single bytes (:func:`dry_run`): a grammar that validates can
        still fail once it runs (a required recursive ``$ref`` forces output without end: "Too many items"; a
        ``pattern`` of ``x{4294967295}`` builds a lexer too big), and that must be the request's 400, found before
        it reaches a model, not a failed generation."""
        name = field or self.kind
        if len(self.source) > MAX_SOURCE_CHARS:
            raise GrammarError(f"{name} is {len(self.source)} characters long, more than the {MAX_SOURCE_CHARS} a "
                               "grammar may have")  # fmt: skip
        grammar = self.llguidance_grammar(name)
        reason = _llg().LLMatcher.validate_grammar(grammar)
        if reason:
            raise GrammarError(f"{name}: {_one_line(reason)}")
        reason = dry_run(grammar)
        if reason:
            raise GrammarError(f"{name} cannot be followed: {_one_line(reason)}")

    # the runner's wire ----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GrammarSpec:
        return cls(str(d["kind"]), str(d.get("source", "")))

    def describe(self) -> str:
        """A few words for logs and stats: ``json``, ``json_schema``, ``lark``, ``regex``."""
        return self.kind


def dry_run(grammar: str) -> str | None:
    """Why ``grammar`` (llguidance's serialised form) fails once it runs, or None: a matcher over a vocabulary of
    the 256 bytes, its forced start consumed and the next mask computed, as a generation's first step does. The
    forced start is where a grammar with no free choice fails (a required recursion forces text for ever); llguidance
    bounds the work (its parser limits), and a byte vocabulary keeps it small and the same for every model."""
    llg = _llg()
    m = llg.LLMatcher(_byte_tokenizer(), grammar, log_level=0, limits=llg.LLParserLimits(verbose_errors=False))
    if not m.is_error():
        forced = m.compute_ff_tokens()
        if forced and not m.is_error():
            m.consume_tokens(forced)
        if not m.is_error():
            m.compute_bitmask()
    return m.get_error() if m.is_error() else None


class _Bytes:
    """A ``TokenizerWrapper`` of the 256 bytes and an end token: the vocabulary of :func:`dry_run`."""

    is_tokenizer_wrapper = True

    def __init__(self) -> None:
        self.tokens = [bytes([b]) for b in range(256)] + [b"\xff<end>"]
        self.eos_token_id = 256
        self.bos_token_id = None
        self.special_token_ids: list[int] = []

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else bytes(text))


_byte_tokenizer_lock = threading.Lock()
_byte_tokenizers: list[Any] = []


def _byte_tokenizer() -> llguidance.LLTokenizer:
    with _byte_tokenizer_lock:
        if not _byte_tokenizers:
            _byte_tokenizers.append(_llg().LLTokenizer(_Bytes(), eos_token=[256]))
        return _byte_tokenizers[0]


# the vocabulary, once per model ---------------------------------------------------------------------------------

_tokenizers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_tokenizers_lock = threading.Lock()


def end_tokens(model: Model) -> list[int]:
    """The model's end-of-generation tokens (EOS, Gemma's ``<end_of_turn>``, ...): the grammar allows any of them
    once it is complete."""
    from local_eagle.llamacpp.lib import C

    ids = [t for t in range(model.n_vocab) if C.llama_vocab_is_eog(model.vocab, t)]
    if not ids:
        eos = int(C.llama_vocab_eos(model.vocab))
        ids = [eos] if 0 <= eos < model.n_vocab else []
    return ids


def tokenizer_for(model: Model) -> llguidance.LLTokenizer:
    """The llguidance tokenizer over ``model``'s vocabulary (every piece, special ones marked, llama.cpp's own
    tokenize for strings the grammar names), built on first use and kept as long as the model lives. Calling it
    when a model is loaded (in a thread: it is ctypes work, one call a token) takes the cost off the first request."""
    with _tokenizers_lock:
        tok = _tokenizers.get(model)
        if tok is None:
            ends = end_tokens(model)
            if not ends:
                raise GrammarError(f"{model.path.name}: the vocabulary has no end-of-generation token")
            tok = _build_tokenizer(model, ends)
            _tokenizers[model] = tok
        return tok


def _build_tokenizer(model: Model, ends: list[int]) -> llguidance.LLTokenizer:
    """llguidance's tokenizer over the project's bindings: each token's piece (special ones included), control
    tokens (and user-defined ones written ``<...>``) marked special by a leading 0xFF, and llama.cpp's own
    ``llama_tokenize`` for the text a grammar forces, checked against those pieces (:class:`_CheckedTokenize`).

    Not ``LLTokenizer.from_llamacpp``: that trusts ``llama_tokenize``, and where its tokens do not spell the text
    (a SentencePiece vocabulary without a lone ``▁`` writes a space as the bytes of ``▁``) llguidance
    forces a token by a one-token mask that its own consume then refuses."""
    import ctypes

    from local_eagle.llamacpp.lib import C

    control, user_defined, byte = 1 << 3, 1 << 4, 1 << 5  # LLAMA_TOKEN_ATTR_CONTROL, _USER_DEFINED, _BYTE
    size = 16 * 1024
    buffer = ctypes.create_string_buffer(size + 1)
    to_piece, get_attr, vocab = C.llama_token_to_piece, C.llama_vocab_get_attr, model.vocab
    pieces: list[bytes] = []
    byte_tokens: list[int] = []
    for t in range(model.n_vocab):
        n = to_piece(vocab, t, buffer, size, 0, True)
        if n < 0:
            raise GrammarError(f"{model.path.name}: token {t}'s piece is longer than {size} bytes")
        piece = ctypes.string_at(buffer, n)
        attr = get_attr(vocab, t)
        if attr & control or (attr & user_defined and piece.startswith(b"<") and piece.endswith(b">")):
            piece = b"\xff" + piece
        if attr & byte:
            byte_tokens.append(t)
        pieces.append(piece)
    bos = int(C.llama_vocab_bos(vocab))
    wrapper = _CheckedTokenize(vocab, pieces, ends[0], bos if 0 <= bos < model.n_vocab else None, byte_tokens)
    return _llg().LLTokenizer(wrapper, eos_token=ends)


class _CheckedTokenize:
    """llama.cpp's ``llama_tokenize`` as llguidance's ``TokenizerWrapper`` calls it, kept to tokens whose pieces
    spell the text.

    llguidance turns the bytes a grammar forces into tokens with this, masks all but the first of them, and then
    checks every token it consumes against the pieces. Where llama.cpp's tokens spell something else (SentencePiece
    escapes a space as ``▁`` and, when ``▁`` is no token of its own, falls back to its three UTF-8
    bytes, whose pieces are those bytes, not a space), the mask and consume disagree and a token the mask allows
    cannot be consumed. Here llama.cpp's tokens are kept as far as they spell the text; from where they stop, one
    token of the longest piece that does (a whole piece before a byte token), then llama.cpp again on the rest.

    Holds the vocabulary's pointer, not the model: the tokenizer is kept per model in a weak dictionary.
    """

    is_tokenizer_wrapper = True  # what llguidance.LLTokenizer looks for

    def __init__(self, vocab: Any, pieces: list[bytes], eos: int, bos: int | None, byte_tokens: list[int]) -> None:
        self.tokens = pieces
        self.eos_token_id = eos
        self.bos_token_id = bos
        self.special_token_ids: list[int] = []  # marked by 0xFF in their pieces already
        self._vocab = vocab
        ids: dict[bytes, int] = {}
        is_byte = set(byte_tokens)
        whole = (t for t in range(len(pieces)) if t not in is_byte)
        for t in [*byte_tokens, *whole]:  # a whole piece wins over the byte token that spells it
            piece = pieces[t]
            if piece and piece[0] != 0xFF:
                ids[piece] = t
        self._ids = ids
        self._longest = max(map(len, ids), default=1)
        self._sentinel = b""
        self._sentinel_ids: list[int] = []
        if self._spell(self._llama(b"a")) != b"a":  # a space put in front of the text (SentencePiece)
            self._sentinel, self._sentinel_ids = self._find_sentinel()

    def __call__(self, text: str | bytes) -> list[int]:
        """The tokens of ``text`` (llguidance passes the valid UTF-8 prefix of its bytes as a str); never raises
        (llguidance panics on an exception), so a failure falls back to the pieces alone."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        try:
            return self._tokenize(data)
        except Exception:  # llguidance cannot take an exception back
            return self._greedy(data)

    def _tokenize(self, data: bytes) -> list[int]:
        out: list[int] = []
        while data:
            ids = self._strip_sentinel(self._llama(self._sentinel + data))
            pos = kept = 0
            for t in ids:
                piece = self.tokens[t] if 0 <= t < len(self.tokens) else None
                if not piece or not data.startswith(piece, pos):
                    break
                pos, kept = pos + len(piece), kept + 1
            out += ids[:kept]
            if pos == len(data):
                break
            token, n = self._longest_piece(data, pos)
            if token is not None:
                out.append(token)
            data = data[pos + n :]  # a byte no piece spells is skipped, as llguidance's greedy tokenize does
        return out

    def _greedy(self, data: bytes) -> list[int]:
        out: list[int] = []
        pos = 0
        while pos < len(data):
            token, n = self._longest_piece(data, pos)
            if token is not None:
                out.append(token)
            pos += n
        return out

    def _longest_piece(self, data: bytes, pos: int) -> tuple[int | None, int]:
        """The token of the longest piece ``data`` has at ``pos`` and its length; ``(None, 1)`` where none does."""
        for n in range(min(self._longest, len(data) - pos), 0, -1):
            token = self._ids.get(data[pos : pos + n])
            if token is not None:
                return token, n
        return None, 1

    def _spell(self, ids: list[int]) -> bytes:
        return b"".join(self.tokens[t] for t in ids if 0 <= t < len(self.tokens))

    def _llama(self, data: bytes) -> list[int]:
        from local_eagle.llamacpp.model import tokenize_bytes

        return tokenize_bytes(self._vocab, data).tolist()

    def _strip_sentinel(self, ids: list[int]) -> list[int]:
        k = len(self._sentinel_ids)
        if not k:
            return ids
        return ids[k:] if ids[:k] == self._sentinel_ids else []  # not as expected: the pieces take over

    def _find_sentinel(self) -> tuple[bytes, list[int]]:
        """A control byte whose token starts no other piece (nor one after a space): llama.cpp writes its space
        prefix in front of it, and the text after it is tokenized as it stands. Nothing where none is."""
        starts: set[int] = set()
        for piece in self._ids:
            if len(piece) > 1:
                starts.add(piece[0])
                if piece[0] == 0x20:
                    starts.add(piece[1])
        for b in range(1, 32):
            sentinel = bytes([b])
            if sentinel not in self._ids or b in starts:
                continue
            ids = self._llama(sentinel)
            after = self._llama(sentinel + b"a")
            if after[: len(ids)] == ids and self._spell(after[len(ids) :]) == b"a":
                return sentinel, ids
        return b"", []


# a compiled grammar -----------------------------------------------------------------------------------------------


class Grammar:
    """A spec compiled against one model's vocabulary; :meth:`matcher` starts a generation's constraint."""

    def __init__(self, spec: GrammarSpec, tokenizer: llguidance.LLTokenizer, grammar: str, n_vocab: int) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.n_vocab = n_vocab
        self.n_words = (n_vocab + 31) // 32
        self.end_tokens: list[int] = list(tokenizer.eos_tokens)

    def matcher(self) -> Constraint:
        llg = _llg()
        m = llg.LLMatcher(self.tokenizer, self.grammar, log_level=0, limits=llg.LLParserLimits(verbose_errors=False))
        if m.is_error():
            raise GrammarError(f"{self.spec.kind}: {_one_line(m.get_error())}")
        return Constraint(self, m)


def compile_grammar(model: Model, spec: GrammarSpec) -> Grammar:
    """``spec`` over ``model``'s vocabulary, checked: a schema or grammar llguidance refuses, or one that no
    sequence of this vocabulary's tokens can start, raises :class:`GrammarError` with llguidance's reason."""
    tok = tokenizer_for(model)
    text = spec.llguidance_grammar()
    reason = _llg().LLMatcher.validate_grammar(text, tok)
    if reason:
        raise GrammarError(f"{spec.kind}: {_one_line(reason)}")
    grammar = Grammar(spec, tok, text, model.n_vocab)
    first = grammar.matcher()
    try:
        startable = first.accepting() or bool(first.bitmask().any())
    except GrammarError:
        startable = False
    if not startable:
        raise GrammarError(f"{spec.kind}: no sequence of {model.path.name}'s tokens satisfies it")
    return grammar


# one generation's constraint --------------------------------------------------------------------------------------


class Constraint:
    """One generation's place in a grammar. Not thread safe; :meth:`copy` gives a branch its own.

    ``bitmask`` is computed for the current state on demand and kept until the state changes (``consume``,
    ``rollback``), so ``allows``, ``mask`` and ``apply`` after it cost no grammar work.
    """

    def __init__(self, grammar: Grammar, matcher: llguidance.LLMatcher) -> None:
        self.grammar = grammar
        self._m = matcher
        self._bits = np.zeros(grammar.n_words, dtype=np.int32)
        self._fresh = False
        self._ends = frozenset(grammar.end_tokens)
        self._steps = 0  # tokens llguidance consumed and not rolled back
        self.ended = False  # an end token was consumed: the output is complete

    # masks ---------------------------------------------------------------------------------------------------

    def bitmask(self, out: np.ndarray | None = None) -> np.ndarray:
        """The tokens allowed next, one bit each: int32 words, ``(n_vocab + 31) // 32`` of them. With ``out``
        (C-contiguous int32 of that length, e.g. a row of a batch's mask array) written there and returned;
        otherwise the constraint's own buffer (valid until the state changes). After an end token, no bit is set."""
        if not self._fresh:
            if self.ended:
                self._bits[...] = 0
            else:
                self._m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
                self._check()
            self._fresh = True
        if out is None:
            return self._bits
        out[...] = self._bits
        return out

    def allows(self, token: int) -> bool:
        """Whether ``token`` is allowed next (one bit of the mask: greedy decoding can check the unconstrained
        argmax first and mask the row only when the grammar refuses it)."""
        t = int(token)
        if not 0 <= t < self.grammar.n_vocab:
            return False
        return bool((int(self.bitmask()[t >> 5]) >> (t & 31)) & 1)

    def mask(self, out: np.ndarray | None = None) -> np.ndarray:
        """The tokens allowed next as a bool array over the target's vocabulary (``out``: bool, n_vocab)."""
        bits = np.unpackbits(self.bitmask().view(np.uint8), bitorder="little", count=self.grammar.n_vocab)
        if out is None:
            return bits.view(bool)
        out[...] = bits.view(bool)
        return out

    def allowed(self) -> np.ndarray:
        """The allowed tokens' ids, ascending (int64)."""
        return np.flatnonzero(self.mask())

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` (float32, n_vocab, or a longer row: tokens past the vocabulary are refused too) with -inf
        wherever the grammar refuses the token; in place, and returned. Touches only the smaller of the allowed
        and refused sets (a JSON key allows a few tokens, a string's content most of them)."""
        n = self.grammar.n_vocab
        ok = self.mask()
        allowed = np.flatnonzero(ok)
        if len(logits) > n:
            logits[n:] = -np.inf
        if 2 * len(allowed) < n:
            kept = logits[allowed]
            logits[:n] = -np.inf
            logits[allowed] = kept
        else:
            logits[np.flatnonzero(~ok)] = -np.inf
        return logits

    # moving through the grammar -----------------------------------------------------------------------------

    def _split(self, ids: list[int]) -> tuple[list[int], bool]:
        """``ids`` up to the first end token, and whether one follows them (what comes after it never counts)."""
        ends = self._ends
        for i, t in enumerate(ids):
            if t in ends:
                return ids[:i], True
        return ids, False

    def validate(self, tokens: Any) -> int:
        """How many of ``tokens``, from the first, the grammar allows in a row from here (an end token counts
        where the grammar is complete; nothing after it does). The state does not change."""
        ids = [int(t) for t in tokens]
        if not ids or self.ended:
            return 0
        body, end = self._split(ids)
        n = int(self._m.validate_tokens(body)) if body else 0
        if n == len(body) and end:
            if body:
                self._m.consume_tokens(body)
            n += int(self._m.is_accepting() and not self._m.is_error())
            if body:
                self._m.rollback(len(body))
        return n

    def consume(self, tokens: Any) -> None:
        """Move past ``tokens`` (one id or several; an end token ends the constraint: nothing is allowed after it);
        a token the grammar does not allow raises :class:`GrammarError` and leaves the state where it was."""
        ids = [int(tokens)] if np.isscalar(tokens) else [int(t) for t in tokens]
        if not ids:
            return
        n = self.validate(ids)
        if n < len(ids):
            shown = self.grammar.tokenizer.dbg_tokens([ids[n]]) if 0 <= ids[n] < self.grammar.n_vocab else "?"
            raise GrammarError(f"token {ids[n]} ({shown}) is not allowed by the {self.grammar.spec.kind} grammar here")
        body, end = self._split(ids)
        if body and not self._m.consume_tokens(body):
            self._check()
        self._steps += len(body)
        self.ended = end
        self._fresh = False

    @property
    def consumed(self) -> int:
        """Tokens consumed and not rolled back (an end token included)."""
        return self._steps + int(self.ended)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` consumed tokens."""
        if n <= 0:
            return
        if n > self.consumed:
            raise GrammarError(f"cannot roll back {n} tokens: only {self.consumed} consumed")
        if self.ended:
            self.ended = False
            n -= 1
        if n and not self._m.rollback(n):
            self._check()
        self._steps -= n
        self._fresh = False

    def copy(self) -> Constraint:
        """An independent constraint at the same place (a draft tree's branch)."""
        c = Constraint(self.grammar, self._m.deep_copy())
        c._steps, c.ended = self._steps, self.ended
        if self._fresh:
            c._bits[...] = self._bits
            c._fresh = True
        return c

    def forced(self) -> list[int]:
        """The tokens the grammar forces next, in order (a schema's fixed keys and punctuation); often empty.
        Consuming them is the only way on, so they can join a draft without a drafter call. When only an end
        token is left (:meth:`stopped`) it is not listed: the caller ends the generation with its own."""
        if self.ended or self._m.is_stopped():
            return []
        return [int(t) for t in self._m.compute_ff_tokens()]

    def masks_along(self, tokens: Any, out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """The bit masks a chain's verification needs: row 0 here, row ``i`` after ``tokens[:i]``, as far as the
        grammar allows them. Returns ``(masks, n_valid)``: ``masks`` is int32 ``(len(tokens) + 1, n_words)``
        (``out`` if given); rows ``0 .. n_valid`` are written (a row after an end token allows nothing), later
        rows are left as they were. The state does not change."""
        ids = [int(t) for t in tokens]
        rows = len(ids) + 1
        if out is None:
            out = np.zeros((rows, self.grammar.n_words), dtype=np.int32)
        if out.shape[0] < rows or out.shape[1] != self.grammar.n_words or out.dtype != np.int32:
            raise ValueError(f"masks_along needs an int32 array of at least {rows} rows of {self.grammar.n_words}")
        self.bitmask(out[0])
        n_valid = self.validate(ids)
        body, _ = self._split(ids[:n_valid])
        done = 0
        try:
            for i, t in enumerate(body):
                if not self._m.consume_token(t):
                    self._check()
                done += 1
                self._m.unsafe_compute_mask_ptr(out[i + 1].ctypes.data, out[i + 1].nbytes)
        finally:
            if done:
                self._m.rollback(done)
        if n_valid > len(body):
            out[n_valid] = 0
        return out, n_valid

    # where the generation stands ------------------------------------------------------------------------------

    def accepting(self) -> bool:
        """The output so far is complete as it is: an end token is allowed (the generation may end here)."""
        return self.ended or bool(self._m.is_accepting())

    def stopped(self) -> bool:
        """The grammar allows nothing more but an end token (or one was consumed): the generation must end."""
        return self.ended or bool(self._m.is_stopped())

    def error(self) -> str | None:
        return self._m.get_error() or None

    def _check(self) -> None:
        if self._m.is_error():
            raise GrammarError(f"{self.grammar.spec.kind} grammar: {_one_line(self._m.get_error())}")
