"""IRModule: global definitions by GlobalVar, looked up by name.

A definition is a Relay `Function` or, after lowering, a loop-level `PrimFunc` (compiler.tir);
the module does not care which. Modules are treated as values: passes return new modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import ClassVar

from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import Constructor, Function, GlobalVar, TypeData


class IRModule:
    def __init__(
        self,
        functions: Mapping[GlobalVar, object] | None = None,
        attrs: Mapping[str, object] | None = None,
        type_definitions: Mapping[str, TypeData] | None = None,
    ):
        self._by_var: dict[GlobalVar, object] = {}
        self._by_name: dict[str, GlobalVar] = {}
        self.attrs: dict[str, object] = dict(attrs or {})
        # Algebraic data types by name (`type List[A] {...}`), in definition order.
        self.type_definitions: dict[str, TypeData] = dict(type_definitions or {})
        for gv, func in (functions or {}).items():
            self.add(gv, func)

    @staticmethod
    def from_expr(func: Function, name: str = "main") -> IRModule:
        return IRModule({GlobalVar(name): func})

    def get_global_var(self, name: str) -> GlobalVar:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no global @{name} in module") from None

    def has(self, name: str) -> bool:
        return name in self._by_name

    def add(self, gv: GlobalVar, func: object, replace: bool = True) -> GlobalVar:
        """Bind `gv` to `func`. A different GlobalVar object with an existing name is refused."""
        existing = self._by_name.get(gv.name_hint)
        if existing is not None and existing is not gv:
            raise ValueError(f"duplicate global @{gv.name_hint}")
        if existing is not None and not replace:
            raise ValueError(f"global @{gv.name_hint} is already defined")
        self._by_name[gv.name_hint] = gv
        self._by_var[gv] = func
        return gv

    def remove(self, gv: GlobalVar) -> None:
        del self._by_var[gv]
        del self._by_name[gv.name_hint]

    def fresh_global(self, name: str) -> GlobalVar:
        """A GlobalVar named `name`, or `name_1`, `name_2`, ... if taken."""
        candidate, n = name, 0
        while candidate in self._by_name:
            n += 1
            candidate = f"{name}_{n}"
        return GlobalVar(candidate)

    def __getitem__(self, key: str | GlobalVar) -> object:
        gv = key if isinstance(key, GlobalVar) else self.get_global_var(key)
        return self._by_var[gv]

    def __contains__(self, key: str | GlobalVar) -> bool:
        if isinstance(key, GlobalVar):
            return key in self._by_var
        return key in self._by_name

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(sorted(self._by_var, key=lambda gv: gv.name_hint))

    def __len__(self) -> int:
        return len(self._by_var)

    def items(self) -> list[tuple[GlobalVar, object]]:
        """(GlobalVar, definition) pairs sorted by name, the order the printer uses."""
        return [(gv, self._by_var[gv]) for gv in self]

    def functions(self) -> list[tuple[GlobalVar, Function]]:
        """Only the Relay functions, sorted by name."""
        return [(gv, f) for gv, f in self.items() if isinstance(f, Function)]

    @property
    def main(self) -> Function:
        if "main" not in self._by_name:
            # Valid Relay (TVM parses it too), but nothing to compile, inspect or run: a user's
            # error, located at the first definition, not a KeyError.
            defined = [f for _, f in self.functions()]
            names = ", ".join(f"@{gv.name_hint}" for gv, _ in self.functions()) or "nothing"
            raise UnsupportedError(f"the module has no @main (it defines {names}); relaycc compiles, "
                                   "inspects and runs @main", defined[0].span if defined else None)
        func = self["main"]
        if not isinstance(func, Function):
            raise TypeError("@main is not a Relay function")
        return func

    def type_definition(self, name: str) -> TypeData:
        try:
            return self.type_definitions[name]
        except KeyError:
            raise KeyError(f"no type {name} in module") from None

    def constructor(self, name: str) -> Constructor | None:
        for data in self.type_definitions.values():
            found = data.constructor(name)
            if found is not None:
                return found
        return None

    def copy(self) -> IRModule:
        return IRModule(dict(self._by_var), self.attrs, self.type_definitions)

    def with_function(self, gv: GlobalVar, func: object) -> IRModule:
        mod = self.copy()
        mod.add(gv, func)
        return mod

    def __repr__(self) -> str:
        names = [*self.type_definitions, *("@" + gv.name_hint for gv in self)]
        return f"IRModule({', '.join(names)})"

    # The text format (compiler.parser.printer) installs itself here when imported; the IR
    # does not depend on it.
    text_printer: ClassVar[Callable[[IRModule], str] | None] = None

    def astext(self) -> str:
        """The module as Relay text (needs compiler.parser, which every parse has imported)."""
        printer = IRModule.text_printer
        if printer is None:
            raise RuntimeError("import compiler.parser to print modules as Relay text")
        return printer(self)

    def __str__(self) -> str:
        return self.astext() if IRModule.text_printer is not None else repr(self)
