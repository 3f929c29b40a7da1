"""Relay IR: types, expressions, modules, traversal."""

from compiler.ir.attrs import EMPTY_ATTRS, Attrs  # noqa: F401
from compiler.ir.expr import (  # noqa: F401
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
    const,
)
from compiler.ir.module import IRModule  # noqa: F401
from compiler.ir.types import ANY, AnyDim, FuncType, TensorType, TupleType, Type  # noqa: F401
