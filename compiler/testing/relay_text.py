"""Relay text for fuzzing the parser and the type checker: hypothesis strategies and outcomes.

Two sources of well-typed programs:
* the models of the differential generator (compiler/testing/generate.py) printed as text:
  real operator calls with attributes, shared values, tuples and `#[metadata]` sections;
* `grammar_programs`, drawn here from the grammar (tvm-facts §1.3) for the constructs the
  generator never prints: `let` with annotations, `fn` literals and closures, `if`, tuples and
  projections, calls of other `def`s, infix operators, comments and blocks.

`mutants` takes such a program and breaks it the way hostile or damaged input is broken:
tokens deleted, duplicated or swapped, numbers made huge or negative, brackets unbalanced or
stacked deep, dtypes and shapes changed, odd Unicode inserted, the text truncated, the
`#[metadata]` JSON damaged. `relay_texts` mixes the two.

The property (`outcome_of`) every text must satisfy: parsing it (which type-checks) ends in an
IRModule or a CompileError with a span, never any other exception. `isolated_outcome` runs one
text in a worker process under an address-space limit and a deadline, for the fuzz driver
(compiler/testing/fuzz_driver.py), which also counts hangs and memory overruns.
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.connection
import os
import resource
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import strategies as st

from compiler.diagnostics import CompileError, Source

# Seeds of generator models the strategies draw from: a few hundred, cached once printed, so
# that drawing a text costs nothing after warm-up and shrinking stays among small models.
GENERATED_SEEDS = range(0, 400)
MAX_GENERATED_OPS = 8

DTYPES = ("float32", "float16", "float64", "int32", "int64", "int8", "uint8", "bool")
ODD_DTYPES = (
    "float32", "int1", "float7", "bfloat16", "float32x4", "uint64", "handle", "void", "int",
    "float", "int999999999999", "floatx", "bool8", "Tensor", "int32x0", "float16x65536",
)
ODD_NUMBERS = (
    "0", "-1", "-0", "1e309f", "1e400", "-1e309f64", "3.5e38f", "1e-400f", "65520f16", "1e5f16",
    "2147483648", "2147483648i32", "-2147483649", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809i64", "99999999999999999999999999999999999999", "1" + "0" * 400,
    "0.0000000000000000000000000001f", "inff", "-inff", "1i8", "7u8", "0x10", "1_000", "1e", "1.f",
)
ODD_DIMS = ("0", "-1", "?", "1000000000000", "4611686018427387904", "9223372036854775807",
            "9223372036854775808", "18446744073709551617", "2i64", "1.5", "True", "%x")
ODD_TEXT = (
    "\x00", "\ufeff", "\u202e", "\U0001f600", "é", "\ud800", "\udfff", "\r", "\x0b", "\x0c",
    "\u2028", "\u00a0", "ｄｅｆ", "%é", "@é", "\u0301", "\x7f", "\\", "`", "'", "$", "#",
    "/*", "*/", "//", '"', "#[", "#[metadata]", "meta[", "meta[relay.Constant][99]", "%",
    "@", "->", "=>", "...", "\t" * 3,
)
OPENERS = ("(", "[", "{", "fn (", "negative(", "(%x, ", "if (True) { ", "Tensor[", "let %q = ")


# -- well-typed programs ---------------------------------------------------------------------


@functools.lru_cache(maxsize=len(GENERATED_SEEDS))
def generated_text(seed: int) -> str:
    """The generator's model of `seed` (at most MAX_GENERATED_OPS calls) as Relay text."""
    from compiler.testing.generate import GeneratorOptions, generate

    return generate(seed, GeneratorOptions(max_ops=MAX_GENERATED_OPS)).text


def generated_programs() -> st.SearchStrategy[str]:
    return st.sampled_from(GENERATED_SEEDS).map(generated_text)


@dataclass(frozen=True)
class _Scope:
    """The values an expression may use: all of tensor type `ty`; `float_kind` allows nn.relu."""

    ty: str
    names: tuple[str, ...]
    helpers: tuple[str, ...]
    float_kind: bool
    one: str
    cond: str = "%c"


@st.composite
def _expression(draw: st.DrawFn, scope: _Scope, depth: int) -> str:
    leaf = depth <= 0 or draw(st.integers(0, 3)) == 0
    if leaf:
        return draw(st.sampled_from(scope.names))
    sub = _expression(scope, depth - 1)
    form = draw(st.sampled_from(
        ("binary", "infix", "negative", "relu", "tuple", "if", "closure", "helper", "block", "let")
    ))
    if form == "binary":
        op = draw(st.sampled_from(("add", "subtract", "multiply", "maximum", "minimum")))
        # A scalar constant broadcasts against the tensor type.
        return f"{op}({draw(sub)}, {draw(sub | st.just(scope.one))})"
    if form == "infix":
        return f"({draw(sub)} {draw(st.sampled_from(('+', '-', '*')))} {draw(sub)})"
    if form == "negative" or (form == "relu" and not scope.float_kind):
        return f"negative({draw(sub)})" if scope.ty.find("uint") < 0 and "bool" not in scope.ty else draw(sub)
    if form == "relu":
        return f"nn.relu({draw(sub)})"
    if form == "tuple":
        fields = draw(st.lists(sub, min_size=1, max_size=3))
        index = draw(st.integers(0, len(fields) - 1))
        comma = "," if len(fields) == 1 else ""
        return f"({', '.join(fields)}{comma}).{index}"
    if form == "if":
        return f"if ({draw(st.sampled_from(('True', 'False', scope.cond)))}) {{ {draw(sub)} }} else {{ {draw(sub)} }}"
    if form == "closure":
        name = f"%p{depth}"
        inner = _Scope(scope.ty, scope.names + (name,), scope.helpers, scope.float_kind, scope.one, scope.cond)
        body = draw(_expression(inner, depth - 1))
        return f"(fn ({name}: {scope.ty}) -> {scope.ty} {{ {body} }})({draw(sub)})"
    if form == "helper" and scope.helpers:
        return f"{draw(st.sampled_from(scope.helpers))}({draw(sub)})"
    if form == "let":
        name = f"%l{depth}"
        inner = _Scope(scope.ty, scope.names + (name,), scope.helpers, scope.float_kind, scope.one, scope.cond)
        annotation = f": {scope.ty}" if draw(st.booleans()) else ""
        return f"{{ let {name}{annotation} = {draw(sub)}; {draw(_expression(inner, depth - 1))} }}"
    return f"{{ {draw(sub)} }}"


@st.composite
def grammar_programs(draw: st.DrawFn) -> str:
    """A well-typed module over one tensor type: helpers, `@main`, lets, closures, ifs, tuples."""
    dtype = draw(st.sampled_from(("float32", "float16", "float64", "int32", "int64", "int8")))
    shape = draw(st.lists(st.integers(1, 4), max_size=3))
    ty = f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 and draw(st.booleans()) else ''}), {dtype}]"
    if not shape and draw(st.booleans()):
        ty = dtype
    one = {"float32": "1f", "float16": "1f16", "float64": "1f64", "int32": "1", "int64": "1i64",
           "int8": 'cast(1, dtype="int8")'}[dtype]
    float_kind = dtype.startswith("float")
    lines = ['#[version = "0.0.5"]']
    helpers: list[str] = []
    for k in range(draw(st.integers(0, 2))):
        scope = _Scope(ty, ("%a",), tuple(helpers), float_kind, one, cond="True")
        body = draw(_expression(scope, 2))
        lines.append(f"def @h{k}(%a: {ty}) -> {ty} {{\n  {body}\n}}")
        helpers.append(f"@h{k}")
    params = [f"%x: {ty}", f"%y: {ty}", "%c: bool"]
    scope = _Scope(ty, ("%x", "%y"), tuple(helpers), float_kind, one)
    body_lines = []
    names = ["%x", "%y"]
    for i in range(draw(st.integers(0, 4))):
        value = draw(_expression(_Scope(ty, tuple(names), tuple(helpers), float_kind, one), 2))
        if draw(st.booleans()):
            body_lines.append(f"  %{i} = {value};")
            names.append(f"%{i}")
        else:
            comment = draw(st.sampled_from(("", f" /* ty={ty} */", " // a comment\n ")))
            body_lines.append(f"  let %v{i}{comment} = {value};")
            names.append(f"%v{i}")
    scope = _Scope(ty, tuple(names), tuple(helpers), float_kind, one)
    result = draw(_expression(scope, 3))
    lines.append(f"def @main({', '.join(params)}) -> {ty} {{\n" + "\n".join(body_lines + [f"  {result}"]) + "\n}")
    return "\n".join(lines) + "\n"


def well_typed_programs() -> st.SearchStrategy[str]:
    return generated_programs() | grammar_programs()


# -- mutations -------------------------------------------------------------------------------


def _token_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each token of a text that lexes (a well-typed program does)."""
    from compiler.parser.tokenizer import tokenize

    lexed = tokenize(Source("<mutant>", text))
    return [(t.offset, t.offset + len(t.text), t.kind) for t in lexed.tokens if t.kind not in ("eof", "metadata")]


@st.composite
def _mutate_once(draw: st.DrawFn, text: str) -> str:
    kinds = ["delete", "duplicate", "swap", "number", "bracket", "deep", "deep type", "dtype", "dim",
             "unicode", "truncate", "repeat", "splice"]
    if "#[metadata]" in text:
        kinds.append("metadata")
    kind = draw(st.sampled_from(kinds))
    try:
        spans = _token_spans(text)
    except CompileError:
        spans = []
    if not spans or kind == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    def pick() -> tuple[int, int, str]:
        return spans[draw(st.integers(0, len(spans) - 1))]
    start, end, token_kind = pick()
    if kind == "delete":
        return text[:start] + text[end:]
    if kind == "duplicate":
        return text[:end] + " " + text[start:end] + text[end:]
    if kind == "swap":
        other_start, other_end, _ = pick()
        (a, b), (c, d) = sorted([(start, end), (other_start, other_end)])
        if b > c:
            return text
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    if kind == "number":
        numbers = [s for s in spans if s[2] == "number"] or spans
        start, end, _ = numbers[draw(st.integers(0, len(numbers) - 1))]
        return text[:start] + draw(st.sampled_from(ODD_NUMBERS)) + text[end:]
    if kind == "bracket":
        brackets = [s for s in spans if s[2] in "()[]{}"] or spans
        start, end, _ = brackets[draw(st.integers(0, len(brackets) - 1))]
        replacement = draw(st.sampled_from(("", "(", ")", "[", "]", "{", "}", "((", "))")))
        return text[:start] + replacement + text[end:]
    if kind == "deep":
        opener = draw(st.sampled_from(OPENERS))
        count = draw(st.sampled_from((2, 100, 499, 501, 2000)))
        return text[:start] + opener * count + text[start:]
    if kind == "deep type":
        # A dtype wrapped in balanced tuple or function types, up to as deep as the parser allows:
        # the type checker then unifies, joins and prints types that deep.
        words = [s for s in spans if text[s[0]:s[1]] in DTYPES] or spans
        start, end, _ = words[draw(st.integers(0, len(words) - 1))]
        opening, closing = draw(st.sampled_from((("(", ",)"), ("fn () -> ", ""), ("(", ", float32)"))))
        depth = draw(st.sampled_from((1, 10, 490)))
        return text[:start] + opening * depth + text[start:end] + closing * depth + text[end:]
    if kind == "dtype":
        words = [s for s in spans if text[s[0]:s[1]] in DTYPES] or spans
        start, end, _ = words[draw(st.integers(0, len(words) - 1))]
        return text[:start] + draw(st.sampled_from(ODD_DTYPES + DTYPES)) + text[end:]
    if kind == "dim":
        where = text.find("Tensor[(")
        if where < 0:
            return text[:start] + draw(st.sampled_from(ODD_DIMS)) + text[end:]
        inside = where + len("Tensor[(")
        dims = ", ".join(draw(st.lists(st.sampled_from(ODD_DIMS), min_size=0, max_size=4)))
        close = text.find(")", inside)
        return text[:inside] + dims + text[close if close >= 0 else inside:]
    if kind == "unicode":
        offset = draw(st.integers(0, len(text)))
        odd = draw(st.sampled_from(ODD_TEXT) | st.text(min_size=1, max_size=3))
        return text[:offset] + odd + text[offset:]
    if kind == "repeat":
        other_start, other_end, _ = pick()
        a, b = sorted((start, other_end if other_end > start else end))
        times = draw(st.sampled_from((2, 3, 10)))
        return text[:b] + text[a:b] * (times - 1) + text[b:]
    if kind == "splice":
        other = draw(generated_programs())
        cut = draw(st.integers(0, len(other)))
        return text[:start] + other[cut : cut + draw(st.integers(1, 200))] + text[end:]
    # metadata: damage the JSON after `#[metadata]`.
    head, _, section = text.partition("#[metadata]")
    damage = draw(st.sampled_from(("truncate", "root", "b64", "index", "key", "garbage", "empty", "type")))
    if damage == "truncate":
        section = section[: draw(st.integers(0, len(section)))]
    elif damage == "root":
        section = section.replace('"root": 1', f'"root": {draw(st.sampled_from(("0", "-1", "99", "null", "[]")))}')
    elif damage == "b64":
        section = section.replace('"P6G0', draw(st.sampled_from(('"', '"!!!!', '"P6G1', '"AAAA', '"P6G0P6G0'))), 1)
    elif damage == "index":
        section = section.replace('"data": "0"', f'"data": "{draw(st.sampled_from(("5", "-1", "x", "99999999999999999999")))}"')
    elif damage == "key":
        section = section.replace('"relay.Constant"', '"relay.Const"', 1)
    elif damage == "type":
        section = section.replace('"type_key": "Array"', '"type_key": "Map"', 1)
    elif damage == "empty":
        section = "{}"
    else:
        offset = draw(st.integers(0, len(section)))
        section = section[:offset] + draw(st.sampled_from(("{", "}", "[", "]", ",", ":", '"', "null", "1e999"))) + section[offset:]
    return head + "#[metadata]" + section


@st.composite
def mutants(draw: st.DrawFn, programs: st.SearchStrategy[str] | None = None) -> str:
    """A well-typed program with one to four mutations applied."""
    text = draw(programs if programs is not None else well_typed_programs())
    for _ in range(draw(st.integers(1, 4))):
        text = draw(_mutate_once(text))
    return text


def relay_texts() -> st.SearchStrategy[str]:
    """Well-typed programs (a quarter of the draws) and their mutants."""
    return st.one_of(well_typed_programs(), mutants(), mutants(), mutants())


# -- the property ----------------------------------------------------------------------------

MODULE = "module"
LOCATED_ERROR = "located error"
UNLOCATED_ERROR = "error without a location"
CRASH = "crash"
HANG = "hang"
MEMORY = "memory overrun"
CLEAN = (MODULE, LOCATED_ERROR)


@dataclass(frozen=True)
class Outcome:
    """How parsing (and type-checking) one input ended: `kind` is one of the names above."""

    kind: str
    detail: str = ""

    @property
    def clean(self) -> bool:
        return self.kind in CLEAN


def outcome_of(data: str | bytes, source_name: str = "<fuzz>") -> Outcome:
    """Parse and type-check `data` (bytes are decoded as a file would be) in this process."""
    from compiler.parser import parse, parse_bytes

    try:
        if isinstance(data, bytes):
            parse_bytes(data, source_name)
        else:
            parse(data, source_name)
    except CompileError as err:
        if err.span is None:
            return Outcome(UNLOCATED_ERROR, f"{type(err).__name__}: {err.message}")
        return Outcome(LOCATED_ERROR, err.one_line())
    except MemoryError:
        return Outcome(MEMORY, "MemoryError")
    except Exception as err:  # noqa: BLE001  any other exception is the finding
        frames = traceback.extract_tb(err.__traceback__)
        where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
        return Outcome(CRASH, f"{type(err).__name__}: {str(err)[:300]} ({where})")
    return Outcome(MODULE)


# -- isolation: a worker process with an address-space limit, and a deadline -----------------

DEFAULT_MEMORY_LIMIT = 2 << 30
DEFAULT_DEADLINE = 20.0


def _worker(
    connection: multiprocessing.connection.Connection, memory_limit: int, check: Callable[[str | bytes], Outcome]
) -> None:
    # The limit is on top of what the worker already maps (the forked interpreter, numpy, ...),
    # so that it means the same under pytest as in the fuzz driver.
    limit = mapped_bytes() + memory_limit
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            data = connection.recv()
        except EOFError:
            return
        try:
            outcome = check(data)
        except MemoryError:
            outcome = Outcome(MEMORY, "MemoryError")
        connection.send(outcome)


def mapped_bytes() -> int:
    """This process's address space in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except OSError:
        return 0


class IsolatedParser:
    """Parses inputs (`check`, outcome_of by default) in a forked worker whose RLIMIT_AS lets
    it map `memory_limit` bytes more than it had when forked; an input that takes longer than
    `deadline` seconds is a hang (the worker is killed and replaced), one that raises
    MemoryError or kills the worker is a memory overrun."""

    def __init__(
        self,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        deadline: float = DEFAULT_DEADLINE,
        check: Callable[[str | bytes], Outcome] | None = None,
    ):
        self.memory_limit = memory_limit
        self.deadline = deadline
        self.check = check or outcome_of
        self.context = multiprocessing.get_context("fork")
        self.process: multiprocessing.process.BaseProcess | None = None
        self.connection: multiprocessing.connection.Connection | None = None

    def start(self) -> None:
        parent, child = self.context.Pipe()
        self.process = self.context.Process(
            target=_worker, args=(child, self.memory_limit, self.check), daemon=True
        )
        self.process.start()
        child.close()
        self.connection = parent

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()
            assert self.connection is not None
            self.connection.close()
        self.process = self.connection = None

    def __enter__(self) -> IsolatedParser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def outcome(self, data: str | bytes) -> Outcome:
        if self.process is None or not self.process.is_alive():
            self.stop()
            self.start()
        assert self.connection is not None and self.process is not None
        try:
            self.connection.send(data)
            if not self.connection.poll(self.deadline):
                self.stop()
                return Outcome(HANG, f"no result within {self.deadline:g} s")
            result: Outcome = self.connection.recv()
        except (EOFError, OSError) as err:
            code = self.process.exitcode if self.process is not None else None
            self.stop()
            return Outcome(MEMORY, f"the worker died ({type(err).__name__}, exit code {code})")
        if result.kind == MEMORY:
            self.stop()  # a MemoryError may leave the worker in a bad state
        return result


# -- the hostile corpus ----------------------------------------------------------------------

HEADER = '#[version = "0.0.5"]\n'
LET_BINDINGS_IN_SUITE = 10**5
LET_BINDINGS_UNDER_MAKE_FUZZ = 10**6


def nested(opening: str, inner: str, closing: str, depth: int) -> str:
    return opening * depth + inner + closing * depth


def let_chain(count: int) -> str:
    """A module whose @main is `count` let bindings, one a line."""
    lines = [HEADER + "def @main(%x: Tensor[(2), float32]) {", "  let %v0 = add(%x, 1f);"]
    lines += [f"  let %v{i} = add(%v{i - 1}, %x);" for i in range(1, count)]
    lines += [f"  %v{count - 1}", "}"]
    return "\n".join(lines)


def metadata_module(section: str, reference: str = "meta[relay.Constant][0]") -> str:
    return HEADER + f"def @main() {{\n  {reference}\n}}\n#[metadata]\n" + section


def hostile_corpus(full: bool = False) -> dict[str, str | bytes]:
    """Named hostile inputs: tests/compiler/parser/test_hostile_text.py gives each one's exact
    outcome. `full` (`make fuzz`) has 10^6 let bindings instead of 10^5 (about 100 s and 2.7 GB
    to parse and type-check; 10^5 take a tenth) and adds a 4 MiB line of 322,000 bindings."""
    let_bindings = LET_BINDINGS_UNDER_MAKE_FUZZ if full else LET_BINDINGS_IN_SUITE
    from compiler.parser.metadata import encode_metadata

    import numpy as np

    good_section = encode_metadata([np.arange(3, dtype="float32")])
    corpus: dict[str, str | bytes] = {
        "parentheses": HEADER + "def @main(%x: float32) {\n  " + nested("(", "%x", ")", 50_000) + "\n}",
        "calls": HEADER + "def @main(%x: float32) {\n  " + nested("negative(", "%x", ")", 50_000) + "\n}",
        "let bindings": let_chain(let_bindings),
        "shape product overflowing int64": HEADER
        + "def @main(%x: Tensor[(4294967296, 4294967296, 4294967296), float32]) {\n  add(%x, 1f)\n}",
        "a trillion elements": HEADER + "def @main(%x: Tensor[(1000000, 1000000), float32]) {\n  add(%x, 1f)\n}",
        "huge integer literal": HEADER + "def @main() {\n  " + "9" * 100_000 + "\n}",
        "integer literal above int64": HEADER + "def @main() {\n  9223372036854775808i64\n}",
        "huge float literal": HEADER + "def @main() {\n  1e999999f64\n}",
        "float literal of a million digits": HEADER + "def @main() {\n  " + "9" * 10**6 + ".5f\n}",
        "metadata not JSON": metadata_module("{ nope"),
        "metadata truncated": metadata_module(good_section[: len(good_section) // 2]),
        "metadata missing entry": metadata_module(good_section, "meta[relay.Constant][1]"),
        "metadata missing key": metadata_module(good_section.replace('"relay.Constant"', '"relay.Other"', 1)),
        "metadata nested deeply": metadata_module("[" * 100_000),
        "non-UTF-8 bytes": (HEADER + "def @main(%x: float32) {\n  %x \xff\xfe\n}").encode("latin-1"),
        "4 MiB single line naming an undefined variable": HEADER + "def @main(%x: float32) { %" + "a" * (4 << 20) + " }",
        "4 MiB single line inside a comment": HEADER + "def @main(%x: float32) { /* " + "x" * (4 << 20) + " */ %x }",
    }
    if full:
        corpus["4 MiB single line of bindings"] = (
            HEADER + "def @main(%x: float32) { " + "add(%x, 1f); " * ((4 << 20) // 13) + "%x }"
        )
    return corpus
