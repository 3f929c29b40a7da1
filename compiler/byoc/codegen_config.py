"""Codegen descriptions: what an external codegen takes over, how, and with which library.

A codegen is either built in (its module registers a `CodegenSpec` with `register_builtin`) or
described by a JSON document (DESIGN.md, "Target strings and external codegens"):

    {"name": "acme_npu",
     "mode": "relay_to_tir",
     "patterns": [{"name": "conv2d_bias_relu",
                   "pattern": "nn.relu(nn.bias_add(nn.conv2d(*, *), *))",
                   "symbol": "acme_conv2d_bias_relu",
                   "attrs": ["nn.conv2d.strides", "nn.conv2d.padding"]}],
     "passes": ["ConvertLayout(nn.conv2d=NHWC:OHWI)", "FoldConstant"],
     "calling_convention": "dltensor",
     "library": {"sources": ["acme.c"], "include_dirs": ["include"],
                 "libraries": ["m"], "library_dirs": []}}

* `mode`: `relay_to_tir` (default; compiler/byoc/extern_call_codegen.py: every composite becomes
  a call of its `symbol` with planned intermediate buffers) or `function_at_a_time`
  (compiler/byoc/c_source_codegen.py: each partitioned function is compiled to loops by the
  host machinery; patterns then only choose what is offloaded).
* a pattern's `symbol` defaults to its name; `attrs` name op attributes (`<op>.<attr>`) passed
  after the tensors as `int64_t` values, arrays flattened.
* paths in `library` are relative to the JSON file (`from_json_file`); the service passes the
  source texts inline instead (`from_document(doc, sources)`).

Everything is checked when the spec is built, so a bad codegen fails before anything is
compiled; each error is an `InputError` whose message starts with `codegen <name>:`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from compiler import ops
from compiler.byoc.codegen_passes import PassSpecError, parse_pass_spec
from compiler.byoc.pattern import Pattern
from compiler.byoc.pattern_text import parse_pattern
from compiler.diagnostics import CompileError, InputError, read_json_file
from compiler.ir.expr import Expr, Function

RELAY_TO_TIR = "relay_to_tir"
FUNCTION_AT_A_TIME = "function_at_a_time"
MODES = (RELAY_TO_TIR, FUNCTION_AT_A_TIME)
CALLING_CONVENTIONS = ("dltensor",)
HOST_NAMES = frozenset({"c", "llvm", "default"})

_CODEGEN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DOCUMENT_KEYS = ("name", "mode", "patterns", "passes", "calling_convention", "library")
_PATTERN_KEYS = ("name", "pattern", "symbol", "attrs")
_LIBRARY_KEYS = ("sources", "include_dirs", "libraries", "library_dirs")

# A veto on a match, given the matched root expression (TVM's pattern-table `check`).
PatternCheck = Callable[[Expr], bool]
# Bytes of scratch memory a symbol needs for one composite (given the composite function).
ScratchBytes = Callable[[Function], int]


@dataclass(frozen=True)
class AttrRef:
    """An op attribute a pattern passes to its symbol: `nn.conv2d.strides`."""

    op: str
    attr: str

    def __str__(self) -> str:
        return f"{self.op}.{self.attr}"


@dataclass(frozen=True)
class PatternSpec:
    """One pattern-table entry of a codegen.

    `check` (built-in codegens only) vetoes matches, e.g. by dtype or layout. `scratch`
    (built-in codegens only) asks the extern-call codegen for a planned scratch buffer of that
    many bytes, passed as one more DLTensor (1-D uint8) after the outputs.
    """

    name: str
    text: str
    symbol: str
    attrs: tuple[AttrRef, ...] = ()
    check: PatternCheck | None = field(default=None, compare=False)
    scratch: ScratchBytes | None = field(default=None, compare=False)

    @cached_property
    def pattern(self) -> Pattern:
        """The parsed pattern (the spec was validated, so this parses)."""
        return parse_pattern(self.text, f"<pattern {self.name}>")


@dataclass(frozen=True)
class LibrarySource:
    """A C source of a codegen's library: its name as the document gives it, its text, and
    the file it was read from (None for inline sources)."""

    name: str
    text: str
    path: Path | None = None


@dataclass(frozen=True)
class LibrarySpec:
    sources: tuple[LibrarySource, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    libraries: tuple[str, ...] = ()
    library_dirs: tuple[Path, ...] = ()

    def source_dirs(self) -> tuple[Path, ...]:
        """Directories of file-based sources, so their `#include "x.h"` still resolve when
        the sources are compiled from a copy."""
        dirs: list[Path] = []
        for s in self.sources:
            if s.path is not None and s.path.parent not in dirs:
                dirs.append(s.path.parent)
        return tuple(dirs)


@dataclass(frozen=True)
class CodegenSpec:
    name: str
    mode: str = RELAY_TO_TIR
    patterns: tuple[PatternSpec, ...] = ()
    passes: tuple[str, ...] = ()
    calling_convention: str = "dltensor"
    library: LibrarySpec = LibrarySpec()
    origin: str = field(default="<built-in>", compare=False)

    def __post_init__(self) -> None:
        _validate(self)

    # -- reading ---------------------------------------------------------------------------

    @staticmethod
    def from_json_file(path: Path | str) -> CodegenSpec:
        """The spec in a JSON file; library paths are relative to the file."""
        path = Path(path)
        doc = read_json_file(path, "codegen")
        return CodegenSpec.from_document(doc, base_dir=path.resolve().parent, origin=str(path))

    @staticmethod
    def from_document(
        doc: object,
        sources: Mapping[str, str] | None = None,
        *,
        base_dir: Path | None = None,
        origin: str = "<document>",
    ) -> CodegenSpec:
        """The spec a JSON document describes. Library sources come from `sources` (name →
        C text, as the service receives them) or else are read relative to `base_dir`."""
        if not isinstance(doc, Mapping):
            raise InputError(f"{origin}: a codegen document must be a JSON object")
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise InputError(f"{origin}: a codegen document needs a \"name\" string")
        reader = _DocumentReader(name)
        reader.known_keys(doc, _DOCUMENT_KEYS, "the document")
        mode = reader.string(doc, "mode", RELAY_TO_TIR)
        convention = reader.string(doc, "calling_convention", "dltensor")
        passes = tuple(reader.strings(doc, "passes"))
        patterns = tuple(reader.pattern(entry, k) for k, entry in enumerate(reader.list(doc, "patterns")))
        library = reader.library(doc.get("library"), sources, base_dir)
        return CodegenSpec(name, mode, patterns, passes, convention, library, origin)

    # -- using -----------------------------------------------------------------------------

    def composite_name(self, pattern: PatternSpec) -> str:
        return f"{self.name}.{pattern.name}"

    def pattern_for(self, composite: str) -> PatternSpec | None:
        """The pattern whose composites are named `composite` (`<codegen>.<pattern name>`)."""
        for p in self.patterns:
            if self.composite_name(p) == composite:
                return p
        return None

    def symbol_for(self, composite: str) -> str:
        """The symbol a composite calls: its pattern's, else the part after the first dot
        (already-partitioned input names composites `<codegen>.<symbol>`)."""
        pattern = self.pattern_for(composite)
        if pattern is not None:
            return pattern.symbol
        return composite.split(".", 1)[1] if "." in composite else composite

    def pattern_table(self) -> list[tuple[str, Pattern, PatternCheck | None]]:
        """(composite name, pattern, check) in priority order, as MergeComposite takes them."""
        return [(self.composite_name(p), p.pattern, p.check) for p in self.patterns]

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.symbol for p in self.patterns))

    def to_document(self) -> dict[str, object]:
        """The spec as a JSON document with inline library sources (for caching and the
        service); `from_document(doc, sources)` reads it back."""
        doc: dict[str, object] = {
            "name": self.name,
            "mode": self.mode,
            "patterns": [
                {"name": p.name, "pattern": p.text, "symbol": p.symbol, "attrs": [str(a) for a in p.attrs]}
                for p in self.patterns
            ],
            "passes": list(self.passes),
            "calling_convention": self.calling_convention,
            "library": {
                "sources": [s.name for s in self.library.sources],
                "include_dirs": [str(d) for d in self.library.include_dirs],
                "libraries": list(self.library.libraries),
                "library_dirs": [str(d) for d in self.library.library_dirs],
            },
        }
        return doc

    def library_texts(self) -> dict[str, str]:
        return {s.name: s.text for s in self.library.sources}


# -- validation ------------------------------------------------------------------------------


def _fail(spec_name: str, cause: str) -> InputError:
    return InputError(f"codegen {spec_name}: {cause}")


def _validate(spec: CodegenSpec) -> None:
    name = spec.name
    if not isinstance(name, str) or not _CODEGEN_NAME.match(name):
        raise InputError(f"codegen {name!r}: a codegen name is letters, digits, '_' and '-', starting with a letter")
    if name in HOST_NAMES:
        raise _fail(name, f"{name!r} is the name of a host target")
    if spec.mode not in MODES:
        raise _fail(name, f"unknown mode {spec.mode!r} (known: {', '.join(MODES)})")
    if spec.calling_convention not in CALLING_CONVENTIONS:
        raise _fail(name, f"unknown calling convention {spec.calling_convention!r} "
                          f"(known: {', '.join(CALLING_CONVENTIONS)})")
    seen: set[str] = set()
    for p in spec.patterns:
        if p.name in seen:
            raise _fail(name, f"two patterns are named {p.name!r}")
        seen.add(p.name)
        _validate_pattern(name, p)
    _validate_passes(name, spec.passes)
    library = spec.library
    seen_sources: set[str] = set()
    for s in library.sources:
        # Sources are compiled from copies named by their base names.
        base = Path(s.name).name
        if not base.endswith(".c"):
            raise _fail(name, f"library source {s.name!r} is not a .c file")
        if base in seen_sources:
            raise _fail(name, f"two library sources are named {base!r}")
        seen_sources.add(base)
    for lib in library.libraries:
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", lib):
            raise _fail(name, f"library {lib!r} is not a library name (give e.g. \"openblas\" for -lopenblas)")


def _validate_pattern(codegen: str, p: PatternSpec) -> None:
    if not p.name or not re.fullmatch(r"[A-Za-z0-9_]+", p.name):
        raise _fail(codegen, f"pattern name {p.name!r} must be letters, digits and '_'")
    if not _C_IDENT.match(p.symbol):
        raise _fail(codegen, f"pattern {p.name}: symbol {p.symbol!r} is not a C identifier")
    try:
        parse_pattern(p.text, f"<pattern {p.name}>")
    except CompileError as err:
        where = f" at column {err.column}" if err.column is not None else ""
        raise _fail(codegen, f"pattern {p.name}: {err.message}{where} in {p.text!r}") from None
    for ref in p.attrs:
        opdef = ops.lookup(ref.op)
        if opdef is None:
            raise _fail(codegen, f"pattern {p.name}: attrs names unknown operator {ref.op!r}")
        if ref.attr not in {a.name for a in opdef.attrs}:
            known = ", ".join(a.name for a in opdef.attrs) or "none"
            raise _fail(codegen, f"pattern {p.name}: operator {ref.op} has no attribute {ref.attr!r} (known: {known})")
        if not re.search(rf"(?<![\w.]){re.escape(ref.op)}\s*\(", p.text):
            raise _fail(codegen, f"pattern {p.name}: attrs names {ref}, but {ref.op} is not in the pattern")


def _validate_passes(codegen: str, passes: Sequence[str]) -> None:
    for text in passes:
        try:
            parse_pass_spec(text)
        except PassSpecError as err:
            raise _fail(codegen, f"pass {text!r}: {err}") from None


def parse_attr_ref(codegen: str, pattern: str, text: object) -> AttrRef:
    """`"nn.conv2d.strides"` → AttrRef("nn.conv2d", "strides")."""
    if not isinstance(text, str) or "." not in text:
        raise _fail(codegen, f"pattern {pattern}: attrs entry {text!r} must look like \"nn.conv2d.strides\"")
    op, attr = text.rsplit(".", 1)
    return AttrRef(op, attr)


class _DocumentReader:
    """Typed access to a codegen document; every error names the codegen."""

    def __init__(self, name: str):
        self.name = name

    def fail(self, cause: str) -> InputError:
        return _fail(self.name, cause)

    def known_keys(self, obj: Mapping[str, object], keys: Sequence[str], what: str) -> None:
        unknown = sorted(set(obj) - set(keys))
        if unknown:
            raise self.fail(f"unknown key {unknown[0]!r} in {what} (known: {', '.join(keys)})")

    def string(self, obj: Mapping[str, object], key: str, default: str) -> str:
        value = obj.get(key, default)
        if not isinstance(value, str):
            raise self.fail(f"{key!r} must be a string")
        return value

    def list(self, obj: Mapping[str, object], key: str) -> list[object]:
        value = obj.get(key, [])
        if not isinstance(value, list):
            raise self.fail(f"{key!r} must be a list")
        return value

    def strings(self, obj: Mapping[str, object], key: str) -> list[str]:
        values = self.list(obj, key)
        for v in values:
            if not isinstance(v, str):
                raise self.fail(f"{key!r} must be a list of strings")
        return [str(v) for v in values]

    def pattern(self, entry: object, index: int) -> PatternSpec:
        if not isinstance(entry, Mapping):
            raise self.fail(f"patterns[{index}] must be an object")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(f"patterns[{index}] needs a \"name\" string")
        self.known_keys(entry, _PATTERN_KEYS, f"pattern {name}")
        text = entry.get("pattern")
        if not isinstance(text, str):
            raise self.fail(f"pattern {name}: needs a \"pattern\" string")
        symbol = self.string(entry, "symbol", name)
        attrs = tuple(parse_attr_ref(self.name, name, a) for a in self.list(entry, "attrs"))
        return PatternSpec(name, text, symbol, attrs)

    def library(
        self, obj: object, sources: Mapping[str, str] | None, base_dir: Path | None
    ) -> LibrarySpec:
        if obj is None:
            return LibrarySpec()
        if not isinstance(obj, Mapping):
            raise self.fail("\"library\" must be an object")
        self.known_keys(obj, _LIBRARY_KEYS, "library")
        texts = tuple(self.source(s, sources, base_dir) for s in self.strings(obj, "sources"))
        include_dirs = tuple(self.directory(d, base_dir, "include dir") for d in self.strings(obj, "include_dirs"))
        library_dirs = tuple(self.directory(d, base_dir, "library dir") for d in self.strings(obj, "library_dirs"))
        return LibrarySpec(texts, include_dirs, tuple(self.strings(obj, "libraries")), library_dirs)

    def source(self, name: str, sources: Mapping[str, str] | None, base_dir: Path | None) -> LibrarySource:
        if sources is not None:
            text = sources.get(name)
            if text is None:
                raise self.fail(f"library source {name!r} is missing (not among the sources sent)")
            return LibrarySource(name, text)
        path = _resolve(name, base_dir)
        try:
            return LibrarySource(name, path.read_text(), path)
        except FileNotFoundError:
            raise self.fail(f"library source {name!r} not found (looked for {path})") from None
        except (OSError, UnicodeDecodeError) as err:
            raise self.fail(f"library source {name!r} cannot be read: {err}") from None

    def directory(self, name: str, base_dir: Path | None, what: str) -> Path:
        path = _resolve(name, base_dir)
        if not path.is_dir():
            raise self.fail(f"{what} {name!r} not found (looked for {path})")
        return path


def _resolve(name: str, base_dir: Path | None) -> Path:
    path = Path(name)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


# -- built-in codegens -----------------------------------------------------------------------

_BUILTINS: dict[str, CodegenSpec] = {}
# Modules that register built-in codegens when imported; `builtin()` imports them on demand so
# that loading the compiler does not load every codegen.
_BUILTIN_MODULES: dict[str, str] = {"cblas": "compiler.byoc.cblas"}


def register_builtin(spec: CodegenSpec, replace: bool = False) -> CodegenSpec:
    """Make `spec` available by name in target strings (`"<name>, c"`)."""
    if spec.name in _BUILTINS and not replace and _BUILTINS[spec.name] is not spec:
        raise ValueError(f"built-in codegen {spec.name} is already registered")
    _BUILTINS[spec.name] = spec
    return spec


def builtin(name: str) -> CodegenSpec | None:
    """The built-in codegen called `name`, or None."""
    if name not in _BUILTINS and name in _BUILTIN_MODULES:
        _load_builtin_module(name)
    return _BUILTINS.get(name)


def builtin_names() -> list[str]:
    """The names of the built-in codegens available here."""
    for name in _BUILTIN_MODULES:
        builtin(name)
    return sorted(_BUILTINS)


def _load_builtin_module(name: str) -> None:
    import importlib

    try:
        importlib.import_module(_BUILTIN_MODULES[name])
    except ModuleNotFoundError as err:
        # Only a missing module of the codegen itself means "not available here".
        if err.name is None or not _BUILTIN_MODULES[name].startswith(err.name):
            raise
