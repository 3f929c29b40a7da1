"""Match patterns for InferType: the types of the variables they bind, and exhaustiveness.

`PatternTyper.check(match, data_type)` unifies each clause's pattern with the matched value's
type (`Cons(%h, %t)` against `List[float32]` gives %h: float32 and %t: List[float32]).
`missing_case(match)` finds a value shape no clause handles (`Nil`, `Cons(_, Nil)`, ...), which
TVM reports for a complete `match` (`match?` may leave cases out).
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.diagnostics import TypeCheckError
from compiler.ir.expr import (
    Constructor,
    Expr,
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Var,
    pattern_vars,
)
from compiler.ir.module import IRModule
from compiler.ir.types import IncompleteType, TupleType, Type, TypeCall, TypeVar, substitute
from compiler.passes.type_solver import Solver


class PatternTyper:
    def __init__(self, mod: IRModule, solver: Solver, value_type: Callable[[Expr], Type]):
        self.mod = mod
        self.solver = solver
        self.value_type = value_type
        self.owner: dict[Var, Match] = {}
        self.var_types: dict[Var, Type] = {}
        self.checked: set[Match] = set()

    def owners(self, match: Match) -> None:
        for clause in match.clauses:
            for var in pattern_vars(clause.lhs):
                self.owner[var] = match

    def var_type(self, var: Var) -> Type | None:
        """The type of a variable bound by a pattern, or None for other variables."""
        match = self.owner.get(var)
        if match is None:
            return None
        # The walk types a match's data before the variables its patterns bind.
        self.check(match, self.value_type(match.data))
        return self.var_types[var]

    def check(self, match: Match, data_type: Type) -> None:
        if match in self.checked:
            return
        self.checked.add(match)
        for clause in match.clauses:
            self.pattern(clause.lhs, data_type, match)

    def pattern(self, pattern: Pattern, ty: Type, match: Match) -> None:
        span = getattr(pattern, "span", None) or match.span
        if isinstance(pattern, PatternWildcard):
            return
        if isinstance(pattern, PatternVar):
            var = pattern.var
            if var.type_annotation is not None and not self.solver.unify(var.type_annotation, ty):
                shown = self.solver.resolve(ty)
                raise TypeCheckError(
                    f"pattern variable %{var.name_hint} is annotated {var.type_annotation} "
                    f"but the value it matches has type {shown}",
                    span,
                )
            self.var_types[var] = var.type_annotation or ty
            return
        if isinstance(pattern, PatternTuple):
            fields = tuple(IncompleteType() for _ in pattern.patterns)
            if not self.solver.unify(TupleType(fields), ty):
                shown = self.solver.resolve(ty)
                raise TypeCheckError(
                    f"a {len(fields)}-tuple pattern cannot match a value of type {shown}", span
                )
            for sub, field in zip(pattern.patterns, fields):
                self.pattern(sub, field, match)
            return
        assert isinstance(pattern, PatternConstructor)
        ctor = pattern.constructor
        data = self.mod.type_definitions.get(ctor.type_name)
        if data is None:
            raise TypeCheckError(f"constructor {ctor.name} is not defined in this module", span)
        fresh: dict[TypeVar, Type] = {p: IncompleteType() for p in data.type_params}
        expected = TypeCall(data.name, tuple(fresh[p] for p in data.type_params))
        if not self.solver.unify(expected, ty):
            shown = self.solver.resolve(ty)
            raise TypeCheckError(
                f"pattern {ctor.name} matches values of type {data.name}, not {shown}", span
            )
        for sub, field_type in zip(pattern.patterns, ctor.inputs):
            self.pattern(sub, substitute(field_type, fresh), match)


# ----------------------------------------------------------------------------------------------
# Exhaustiveness: the classic pattern-matrix check, rows being the clauses' patterns.

_ANY = PatternWildcard()


def missing_case(match: Match, mod: IRModule | None = None) -> str | None:
    """A value shape no clause of `match` handles, as pattern text, or None when all are."""
    rows = [[clause.lhs] for clause in match.clauses]
    found = _missing(rows, 1, mod)
    return None if found is None else found[0]


def _is_catch_all(p: Pattern) -> bool:
    return isinstance(p, (PatternWildcard, PatternVar))


def _missing(rows: list[list[Pattern]], width: int, mod: IRModule | None) -> list[str] | None:
    """Text for each of `width` columns of a case no row covers, or None if the rows cover all."""
    if width == 0:
        return None if rows else []
    heads = [row[0] for row in rows]
    constructors = [p for p in heads if isinstance(p, PatternConstructor)]
    tuples = [p for p in heads if isinstance(p, PatternTuple)]
    if constructors:
        siblings = _siblings(constructors[0], mod)
        for ctor in siblings:
            arity = len(ctor.inputs)
            specialized = []
            for row in rows:
                head = row[0]
                if _is_catch_all(head):
                    specialized.append([_ANY] * arity + row[1:])
                elif isinstance(head, PatternConstructor) and head.constructor.name == ctor.name:
                    specialized.append(list(head.patterns) + row[1:])
            found = _missing(specialized, arity + width - 1, mod)
            if found is not None:
                fields = found[:arity]
                text = f"{ctor.name}({', '.join(fields)})" if arity else ctor.name
                return [text] + found[arity:]
        return None
    if tuples:
        arity = len(tuples[0].patterns)
        specialized = []
        for row in rows:
            head = row[0]
            if _is_catch_all(head):
                specialized.append([_ANY] * arity + row[1:])
            elif isinstance(head, PatternTuple):
                specialized.append(list(head.patterns) + row[1:])
        found = _missing(specialized, arity + width - 1, mod)
        if found is None:
            return None
        return ["(" + ", ".join(found[:arity]) + ("," if arity == 1 else "") + ")"] + found[arity:]
    found = _missing([row[1:] for row in rows], width - 1, mod)
    return None if found is None else ["_"] + found


def _siblings(pattern: PatternConstructor, mod: IRModule | None) -> list[Constructor]:
    """Every constructor of the type `pattern`'s constructor belongs to, in definition order."""
    ctor = pattern.constructor
    if mod is not None and ctor.type_name in mod.type_definitions:
        return list(mod.type_definitions[ctor.type_name].constructors)
    return [ctor]
