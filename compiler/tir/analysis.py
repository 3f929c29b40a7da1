"""Facts about loop-level IR: traversal, structural equality, free variables, substitution and
the sizes a PrimFunc needs (workspace layout, I/O bytes).

Expressions are walked with an explicit stack, so a fused elementwise chain of any depth is
fine, and a node shared along several paths is visited (and rewritten) once. Statements recurse
only over loop-nest depth, which stays small; long `Seq` lists are iterated.

`workspace_layout` is the single definition of where a function's global-scope `Allocate`s
live inside its `workspace` argument: the C code generator and the size reported to the memory
planner both come from it. Those buffers are 64-byte aligned (or more, when the model asks for
more), whatever the alignment of the model's ordinary intermediates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from compiler.diagnostics import UnsupportedError
from compiler.tir.expr import (
    Binary,
    ExprLike,
    Buffer,
    CallExtern,
    Cast,
    Const,
    Intrin,
    Load,
    PrimExpr,
    Select,
    Unary,
    Var,
    as_expr,
)
from compiler.tir.stmt import (
    Allocate,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Seq,
    Stmt,
    Store,
)

# -- expressions ---------------------------------------------------------------------------------


def expr_children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """The direct sub-expressions of `e` (buffer arguments of a CallExtern are not expressions)."""
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Unary):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Intrin):
        return e.args
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, CallExtern):
        return tuple(a for a in e.args if isinstance(a, PrimExpr))
    if isinstance(e, (Const, Var)):
        return ()
    raise TypeError(f"unknown loop-level expression {type(e).__name__}")


def rebuild_expr(e: PrimExpr, kids: tuple[PrimExpr, ...]) -> PrimExpr:
    """`e` with its children replaced by `kids` (same order as `expr_children`)."""
    if isinstance(e, Binary):
        return Binary(e.op, kids[0], kids[1], e.dtype)
    if isinstance(e, Unary):
        return Unary(e.op, kids[0], e.dtype)
    if isinstance(e, Select):
        return Select(kids[0], kids[1], kids[2], e.dtype)
    if isinstance(e, Cast):
        return Cast(kids[0], e.dtype)
    if isinstance(e, Intrin):
        return Intrin(e.name, kids, e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, kids, e.dtype)
    if isinstance(e, CallExtern):
        it = iter(kids)
        return CallExtern(e.name, tuple(next(it) if isinstance(a, PrimExpr) else a for a in e.args), e.dtype)
    return e


def post_order(
    root: PrimExpr,
    done: set[int] | None = None,
    children: Callable[[PrimExpr], tuple[PrimExpr, ...]] = expr_children,
) -> Iterator[PrimExpr]:
    """Every node reachable from `root`, children before parents, each once (by identity).

    `done` holds ids of nodes to skip with their sub-graphs; yielded nodes are added to it, so
    one set shared across several roots walks their union once. The caller keeps the nodes alive
    while the set is in use (ids are only unique among live objects).
    """
    seen: set[int] = set() if done is None else done
    if id(root) in seen:
        return
    stack: list[tuple[PrimExpr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            yield node
            continue
        stack.append((node, True))
        for kid in reversed(children(node)):
            if id(kid) not in seen:
                stack.append((kid, False))


class ExprRewriter:
    """Rewrites expressions bottom-up: `rewrite(node)` sees `node` with rewritten children.

    Results are memoized by identity for the rewriter's lifetime, so sharing survives: a node
    used twice maps to one result object. Nodes whose children did not change are passed to
    `rewrite` as themselves.
    """

    def __init__(self, rewrite: Callable[[PrimExpr], PrimExpr]):
        self._rewrite = rewrite
        self._memo: dict[int, tuple[PrimExpr, PrimExpr]] = {}

    def __call__(self, root: PrimExpr) -> PrimExpr:
        memo = self._memo
        hit = memo.get(id(root))
        if hit is not None:
            return hit[1]
        stack: list[tuple[PrimExpr, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in memo:
                continue
            kids = expr_children(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(kids) if id(k) not in memo)
                continue
            new_kids = tuple(memo[id(k)][1] for k in kids)
            changed = any(a is not b for a, b in zip(kids, new_kids))
            current = rebuild_expr(node, new_kids) if changed else node
            memo[id(node)] = (node, self._rewrite(current))
        return memo[id(root)][1]


def _leaf_key(e: PrimExpr) -> tuple[object, ...]:
    """What must match between two nodes besides their children."""
    if isinstance(e, Const):
        return (Const, e.dtype, type(e.value), e.value)
    if isinstance(e, Var):
        return (Var, id(e))
    if isinstance(e, Binary):
        return (Binary, e.op, e.dtype)
    if isinstance(e, Unary):
        return (Unary, e.op, e.dtype)
    if isinstance(e, Intrin):
        return (Intrin, e.name, e.dtype, len(e.args))
    if isinstance(e, Load):
        return (Load, id(e.buffer), e.dtype, len(e.indices))
    if isinstance(e, CallExtern):
        shape = tuple(("expr",) if isinstance(a, PrimExpr) else ("buf", id(a)) if isinstance(a, Buffer)
                      else ("obj", a) for a in e.args)
        return (CallExtern, e.name, e.dtype, shape)
    return (type(e), e.dtype)


def expr_equal(a: PrimExpr, b: PrimExpr) -> bool:
    """Structural equality: same node kinds, operators, dtypes and constants; variables and
    buffers compare by identity. NaN constants are equal to each other."""
    stack = [(a, b)]
    agreed: set[tuple[int, int]] = set()
    while stack:
        x, y = stack.pop()
        if x is y or (id(x), id(y)) in agreed:
            continue
        kx, ky = _leaf_key(x), _leaf_key(y)
        if kx != ky:
            nan_pair = (isinstance(x, Const) and isinstance(y, Const) and x.dtype == y.dtype
                        and x.value != x.value and y.value != y.value)
            if not nan_pair:
                return False
        agreed.add((id(x), id(y)))
        stack.extend(zip(expr_children(x), expr_children(y)))
    return True


# -- statements ----------------------------------------------------------------------------------


def walk_stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement in `stmt`, parents before children, in program order."""
    stack = [stmt]
    while stack:
        s = stack.pop()
        yield s
        if isinstance(s, Seq):
            stack.extend(reversed(s.stmts))
        elif isinstance(s, (For, Allocate, LetStmt)):
            stack.append(s.body)
        elif isinstance(s, IfThenElse):
            if s.else_case is not None:
                stack.append(s.else_case)
            stack.append(s.then_case)


def stmt_exprs(s: Stmt) -> tuple[PrimExpr, ...]:
    """The expressions a statement itself holds (not those of nested statements). Python
    numbers that builders left in statement fields (`Store(b, (0,), 1.0)`) come back as Consts."""
    if isinstance(s, For):
        fields: tuple[ExprLike, ...] = (s.begin, s.extent)
    elif isinstance(s, Store):
        fields = (*s.indices, s.value)
    elif isinstance(s, LetStmt):
        fields = (s.value,)
    elif isinstance(s, IfThenElse):
        fields = (s.cond,)
    elif isinstance(s, Evaluate):
        fields = (s.value,)
    else:
        fields = ()
    return tuple(as_expr(f) for f in fields)


def map_stmt(stmt: Stmt, fexpr_: Callable[[PrimExpr], PrimExpr]) -> Stmt:
    """`stmt` with every expression replaced by `fexpr(expr)`; unchanged parts are reused.
    Python numbers in statement fields are turned into Consts first."""

    def fexpr(e: ExprLike) -> PrimExpr:
        return fexpr_(as_expr(e))

    if isinstance(stmt, Seq):
        items = tuple(map_stmt(s, fexpr_) for s in stmt.stmts)
        return stmt if all(a is b for a, b in zip(items, stmt.stmts)) else Seq(items)
    if isinstance(stmt, For):
        begin, extent, body = fexpr(stmt.begin), fexpr(stmt.extent), map_stmt(stmt.body, fexpr_)
        if begin is stmt.begin and extent is stmt.extent and body is stmt.body:
            return stmt
        return For(stmt.var, begin, extent, body, stmt.kind)
    if isinstance(stmt, Store):
        indices = tuple(fexpr(i) for i in stmt.indices)
        value = fexpr(stmt.value)
        if value is stmt.value and all(a is b for a, b in zip(indices, stmt.indices)):
            return stmt
        return Store(stmt.buffer, indices, value)
    if isinstance(stmt, Allocate):
        body = map_stmt(stmt.body, fexpr_)
        return stmt if body is stmt.body else Allocate(stmt.buffer, body)
    if isinstance(stmt, LetStmt):
        value, body = fexpr(stmt.value), map_stmt(stmt.body, fexpr_)
        return stmt if value is stmt.value and body is stmt.body else LetStmt(stmt.var, value, body)
    if isinstance(stmt, IfThenElse):
        cond, then = fexpr(stmt.cond), map_stmt(stmt.then_case, fexpr_)
        other = None if stmt.else_case is None else map_stmt(stmt.else_case, fexpr_)
        if cond is stmt.cond and then is stmt.then_case and other is stmt.else_case:
            return stmt
        return IfThenElse(cond, then, other)
    if isinstance(stmt, Evaluate):
        value = fexpr(stmt.value)
        return stmt if value is stmt.value else Evaluate(value)
    raise TypeError(f"unknown loop-level statement {type(stmt).__name__}")


def _var_rewriter(mapping: Mapping[Var, PrimExpr]) -> ExprRewriter:
    return ExprRewriter(lambda e: mapping.get(e, e) if isinstance(e, Var) else e)


def substitute(node: Stmt | PrimExpr, mapping: Mapping[Var, PrimExpr]) -> Stmt | PrimExpr:
    """Replace variables by expressions everywhere in `node` (buffer shapes are left alone).

    Returns `node` itself when no mapped variable occurs in it.
    """
    if isinstance(node, PrimExpr):
        return _var_rewriter(mapping)(node) if mapping else node
    return substitute_stmt(node, mapping)


def substitute_stmt(stmt: Stmt, mapping: Mapping[Var, PrimExpr]) -> Stmt:
    """`substitute` for a statement, typed as one."""
    return map_stmt(stmt, _var_rewriter(mapping)) if mapping else stmt


def _shape_vars(buffer: Buffer) -> list[PrimExpr]:
    return [d for d in buffer.shape if isinstance(d, PrimExpr)]


def free_vars(node: Stmt | PrimExpr) -> list[Var]:
    """Variables used in `node` but not bound by a loop or let inside it, in order of first use.

    Variables in the shapes of the buffers `node` reads, writes or allocates count as used: the
    row-major address arithmetic needs them.
    """
    roots: list[PrimExpr] = []
    bound: set[int] = set()
    if isinstance(node, PrimExpr):
        roots.append(node)
    else:
        for s in walk_stmts(node):
            if isinstance(s, For):
                bound.add(id(s.var))
            elif isinstance(s, LetStmt):
                bound.add(id(s.var))
            elif isinstance(s, Store):
                roots.extend(_shape_vars(s.buffer))
            elif isinstance(s, Allocate):
                roots.extend(_shape_vars(s.buffer))
            roots.extend(stmt_exprs(s))
    found: list[Var] = []
    done: set[int] = set()
    pending = list(reversed(roots))
    shapes_seen: set[int] = set()
    while pending:
        root = pending.pop()
        for e in post_order(root, done):
            if isinstance(e, Var) and id(e) not in bound:
                found.append(e)
            elif isinstance(e, Load) and id(e.buffer) not in shapes_seen:
                shapes_seen.add(id(e.buffer))
                pending.extend(reversed(_shape_vars(e.buffer)))
    return found


# -- PrimFunc facts ------------------------------------------------------------------------------


def _round_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


KERNEL_WORKSPACE_ALIGNMENT = 64


def kernel_workspace_alignment(alignment: int) -> int:
    """The alignment of the buffers inside a kernel's workspace for a model whose ordinary
    intermediates are `alignment`-aligned: at least 64 bytes, a cache line, because packed
    panels that straddle cache lines make conv2d about a fifth slower."""
    if alignment <= 0:
        raise ValueError(f"workspace alignment must be positive, got {alignment}")
    return max(KERNEL_WORKSPACE_ALIGNMENT, alignment)


def workspace_layout(func: PrimFunc, alignment: int = 16) -> dict[Buffer, int]:
    """Byte offset of each global-scope Allocate of `func` inside its workspace argument.

    Buffers are laid out one after another in program order, each starting at a multiple of
    `kernel_workspace_alignment(alignment)` (`alignment` is the model's workspace alignment).
    A global allocation of dynamic size cannot be placed statically and is rejected.
    """
    step = kernel_workspace_alignment(alignment)
    layout: dict[Buffer, int] = {}
    offset = 0
    for s in walk_stmts(func.body):
        if isinstance(s, Allocate) and s.buffer.scope == "global" and s.buffer not in layout:
            if not s.buffer.is_static:
                raise UnsupportedError(
                    f"function {func.name}: workspace buffer {s.buffer.name} has a dynamic size")
            layout[s.buffer] = offset
            offset += _round_up(s.buffer.nbytes(), step)
    return layout


def workspace_bytes(func: PrimFunc, alignment: int = 16) -> int:
    """Size of the workspace argument `func` needs (0 when it has no global Allocate), for a
    workspace that starts at a multiple of `kernel_workspace_alignment(alignment)`."""
    step = kernel_workspace_alignment(alignment)
    return sum(_round_up(buffer.nbytes(), step) for buffer in workspace_layout(func, alignment))


def io_bytes(func: PrimFunc) -> int:
    """Bytes of the function's buffer parameters. Parameters with dynamic shapes contribute
    nothing: their size is only known at run time."""
    return sum(p.nbytes() for p in func.params if p.is_static)


def uses_parallel(func: PrimFunc) -> bool:
    """Whether any loop of `func` is an OpenMP parallel loop."""
    return any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(func.body))
