"""Lower one fused primitive Relay function to one loop-level PrimFunc.

Each op contributes only its own loops (compiler/tir/compute.py); fusion falls out of how the
pieces are connected:

* an op with a `compute` becomes a *view*: a loader that computes an element on demand from its
  inputs' loaders. Chains of elementwise/injective ops are therefore computed inline in whatever
  loop finally stores them, with no temporary buffers. Loads are deferred and expanded with a
  work stack (chains of any depth, no deep recursion), and a node read twice at one index is
  one shared expression (the C emitter binds it to a local).
* an op with a `reduction` or a `kernel` (an *anchor*) is materialized: it writes a buffer.
  When the function's output is an elementwise/broadcast chain over an anchor whose shape equals
  the output's, the anchor writes the output directly and the chain becomes its *epilogue*
  (conv2d + bias_add + relu is one loop nest). An anchor that is itself an output writes it
  directly. Otherwise it writes a workspace temporary that later loaders read.
* outputs that are views (tuple-valued ops such as split contribute one per field) get one loop
  nest each that stores the view.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from compiler import ops
from compiler.backend.batch_loop import batch_loop, batch_rows_only, move_to_row, stand_in
from compiler.backend.symbolic_shapes import SymbolicShapes, has_dynamic_types, shapes_equal
from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from compiler.ir.types import TensorType, TupleType, Type, flatten_tensor_types
from compiler.ir.visitor import post_order
from compiler.ops.registry import OpDef, OpPattern
from compiler.passes.fusion_input_casts import half_cast_source
from compiler.tir import expr as te
from compiler.tir import partial_reduce
from compiler.tir.analysis import expr_children, rebuild_expr, substitute
from compiler.tir.compute import Index, KernelContext, Reduction, TensorView
from compiler.tir.dtypes import max_value, min_value
from compiler.tir.injective_loops import Loop, store_nest
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, PrimFunc, Stmt, Store, seq

View = TensorView | tuple  # a tensor view, or a tuple of views for tuple-typed nodes

# Below this many output elements an elementwise loop nest runs on one core. Such loops are
# memory-bound: at two threads, [96..768, 256] float32 subtracts and transposes ran 0.5-1.1x
# their one-thread time (per-call minimum over 300 runs, `relaycc run --threads`), the fork/join
# and the other core's cache holding half of the operands eating what the second core brings.
PARALLEL_MIN_ELEMENTS = 1 << 18
# A reduction is parallel from this many elements read (and at least 64 results): means of
# 24,576 and 32,768 elements ran 0.76x and 0.94x their one-thread time at two threads, of 196,608
# 1.8x; a few microseconds either way below this, and one fork/join fewer per layer_norm.
PARALLEL_MIN_REDUCED = 1 << 16
PARALLEL_MIN_RESULTS = 64


def parallel_axis(shape: Sequence[te.PrimExpr | int]) -> int | None:
    """The axis of `shape` to run in parallel: the outermost one not of extent 1 (an OpenMP loop
    of one iteration runs the whole nest on one core, as [1, C, H, W] tensors had it), or None."""
    for k, extent in enumerate(shape):
        if not (isinstance(extent, int) and extent == 1):
            return k
    return None


def c_identifier(name: str) -> str:
    ident = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return ident if ident and not ident[0].isdigit() else f"v{ident}"


def static_shape(ty: TensorType, what: str) -> tuple[int, ...]:
    if ty.is_dynamic:
        raise UnsupportedError(
            f"{what} has dynamic shape {ty}: compiling `?` dimensions to C is not supported yet "
            "(`relaycc lower` and `relaycc interpret` take them)")
    return tuple(int(d) for d in ty.shape)  # type: ignore[arg-type]  # static: checked above


def buffer_shape(ty: TensorType, what: str) -> tuple[int | te.PrimExpr, ...]:
    """The dims of a buffer holding a value of (symbolic) type `ty`: ints, or expressions of
    the kernel's dim variables."""
    if ty.is_dynamic:
        return static_shape(ty, what)  # raises: a `?` the symbolic types did not resolve
    return tuple(d if isinstance(d, te.PrimExpr) else int(d) for d in ty.shape)  # type: ignore[arg-type]  # ints or exprs


def _is_static(shape: Sequence[object]) -> bool:
    return all(isinstance(d, int) for d in shape)


@dataclass(frozen=True)
class _Output:
    """One flattened output tensor: `node`'s value, or the field at `path` of its tuple value."""

    node: Expr
    path: tuple[int, ...] = ()


@dataclass
class _Plan:
    """Which anchors write a function output directly, with which chain as epilogue."""

    fused_into_output: dict[Call, int]  # anchor -> output index


class PrimitiveLowering:
    def __init__(self, func: Function, name: str, ctx: KernelContext | None = None):
        self.func = func
        self.name = name
        self.ctx = ctx or KernelContext()
        self.params: list[te.Buffer] = []
        self.outputs: list[te.Buffer] = []
        self.temps: list[te.Buffer] = []
        self.stmts: list[Stmt] = []
        self.materialized: dict[Expr, TensorView] = {}
        # id -> (node, node with every _Deferred expanded); nodes kept alive for their ids.
        self._resolved: dict[int, tuple[te.PrimExpr, te.PrimExpr]] = {}
        self.shapes: SymbolicShapes | None = None

    # -- entry --------------------------------------------------------------------------

    def lower(self) -> PrimFunc:
        try:
            return self._lower()
        except UnsupportedError:
            raise
        except (AssertionError, TypeError, ValueError, ops.TypeRelationError) as err:
            if self.shapes is None:
                raise  # static shapes: a bug, not a limit
            # Ops whose loops predate `?` dims assume int extents somewhere; that is a limit of
            # the op, to be reported like the others (te_compiler locates it at the first
            # dynamic call), not a crash.
            raise UnsupportedError(
                f"an op of this fused function cannot take `?` dims yet ({type(err).__name__}"
                f"{': ' + str(err) if str(err) else ''})") from err

    def _lower(self) -> PrimFunc:
        func = self.func
        if has_dynamic_types(func):
            # `?` dims: the kernel takes them as scalars and computes every other dim from them.
            self.shapes = SymbolicShapes.of(func, [c_identifier(p.name_hint) for p in func.params], self.ctx.fresh)
        param_views: dict[Expr, View] = {}
        for p in func.params:
            param_views[p] = self._param_view(c_identifier(p.name_hint), self._type(p))

        ret_types = flatten_tensor_types(self._type(func.body))
        outputs = self._output_nodes(func.body)
        for i, ty in enumerate(ret_types):
            base = "T_" + _op_suffix(outputs[i].node) if len(ret_types) == 1 else f"output{i}"
            self.outputs.append(te.Buffer(self.ctx.fresh(base), buffer_shape(ty, "result"), ty.dtype))

        nodes = [n for n in post_order(func.body, descend=lambda n: not isinstance(n, Function))]
        plan = self._plan(nodes, outputs)
        # Outputs already written by an anchor's loop nest; the others get a loop nest storing
        # their view at the end.
        written: set[int] = set()

        # Materialize anchors in topological order; each sees views built from the current
        # materializations, so a later anchor reads an earlier anchor's buffer.
        for node in nodes:
            if not self._is_anchor(node) or node in self.materialized:
                continue
            assert isinstance(node, Call)
            direct = next(
                (i for i, o in enumerate(outputs) if o.node is node and not o.path and i not in written), None
            )
            if isinstance(node.checked_type, TupleType):
                # A tuple-valued kernel (topk) writes one buffer per field: the function's
                # output where that field is one, a temporary otherwise.
                self.materialized[node] = self._emit_tuple_anchor(node, outputs, written, param_views)
            elif node in plan.fused_into_output:
                index = plan.fused_into_output[node]
                out_node = outputs[index].node
                self._emit_anchor(node, self.outputs[index], param_views, out_node)
                # The output buffer holds the chain's result, not the anchor's: only the chain's
                # last node may be read from it (the plan checked nobody else reads the rest).
                self.materialized[out_node] = TensorView.of_buffer(self.outputs[index])
                written.add(index)
            elif direct is not None:
                # An anchor that is itself an output is stored there; later readers read it back.
                self._emit_anchor(node, self.outputs[direct], param_views, None)
                self.materialized[node] = TensorView.of_buffer(self.outputs[direct])
                written.add(direct)
            else:
                ty = self._type(node)
                assert isinstance(ty, TensorType)
                temp = self._temp(f"T_{_op_suffix(node)}", buffer_shape(ty, "intermediate"), ty.dtype, node)
                self._emit_anchor(node, temp, param_views, None)
                self.materialized[node] = TensorView.of_buffer(temp)

        views = self._views(param_views, {})
        for i, (out, buf) in enumerate(zip(outputs, self.outputs)):
            if i in written:
                continue
            view = views[out.node]
            for field_index in out.path:
                assert isinstance(view, tuple)
                view = view[field_index]
            assert isinstance(view, TensorView)
            self.stmts.append(self._store_loop(buf, view.load))

        body = seq(*self.stmts) if self.stmts else seq()
        for temp in reversed(self.temps):
            body = Allocate(temp, body)
        return PrimFunc(
            self.name,
            tuple(self.params + self.outputs),
            body,
            num_inputs=len(self.params),
            scalar_params=tuple(self.shapes.scalars) if self.shapes else (),
            attrs=func.attrs.without("Primitive").with_attr("global_symbol", self.name),
            func_type=func.checked_type,
            # Dim parameters the kernel takes to be equal (see SymbolicShapes.equal_scalars).
            extra=self.shapes.checks() if self.shapes else {},
        )

    def _param_view(self, name: str, ty: Type) -> View:
        """Buffers for a parameter; a tuple parameter is one buffer per field, in order (the
        executor passes a tuple argument's fields flattened the same way)."""
        if isinstance(ty, TupleType):
            return tuple(self._param_view(f"{name}_{i}", f) for i, f in enumerate(ty.fields))
        if not isinstance(ty, TensorType):
            raise UnsupportedError(f"primitive parameter %{name} of type {ty} is not a tensor or tuple")
        buf = self._data_buffer(name) or te.Buffer(self.ctx.fresh(name), buffer_shape(ty, f"%{name}"), ty.dtype)
        self.params.append(buf)
        return TensorView.of_buffer(buf)

    def _data_buffer(self, name: str) -> te.Buffer | None:
        """The buffer a data-dependent shape rule already reads for the parameter `name`."""
        if self.shapes is None:
            return None
        return next((b for p, b in self.shapes.data_buffers.items() if self.shapes.param_names[p] == name), None)

    # -- planning -----------------------------------------------------------------------

    @staticmethod
    def _output_nodes(body: Expr) -> list[_Output]:
        """Where each flattened output tensor comes from, in the order of the result type."""
        out: list[_Output] = []
        stack = [body]
        while stack:
            node = stack.pop()
            if isinstance(node, Tuple):
                stack.extend(reversed(node.fields))
            else:
                # A tuple-valued op (split) contributes each of its fields.
                out.extend(_Output(node, path) for path in _tensor_paths(node.checked_type))
        return out

    @staticmethod
    def _opdef(node: Expr) -> OpDef | None:
        if isinstance(node, Call) and isinstance(node.op, Op):
            return ops.get(node.op.name)
        return None

    def _is_anchor(self, node: Expr) -> bool:
        opdef = self._opdef(node)
        return opdef is not None and opdef.compute is None

    def _plan(self, nodes: Sequence[Expr], outputs: Sequence[_Output]) -> _Plan:
        users: dict[Expr, list[Expr]] = {}
        for node in nodes:
            for child in _value_children(node):
                users.setdefault(child, []).append(node)
        out_nodes = {o.node for o in outputs}
        fused: dict[Call, int] = {}
        for index, out in enumerate(outputs):
            if out.path:
                continue
            anchor = self._epilogue_anchor(out.node, users, out_nodes)
            if anchor is not None and anchor is not out.node and anchor not in fused:
                fused[anchor] = index
        return _Plan(fused)

    def _epilogue_anchor(self, out: Expr, users: dict[Expr, list[Expr]], out_nodes: set[Expr]) -> Call | None:
        """The anchor whose kernel can store `out` directly with the chain as its epilogue.

        For a reduction anchor only the shapes must agree: the chain may change the dtype (mean
        then cast), since the reduction accumulates in its own dtype and the epilogue converts.
        """
        out_ty = self._type(out)
        chain: set[Expr] = set()
        anchor: Call | None = None
        stack = [out]
        while stack:
            node = stack.pop()
            if node in chain:
                continue
            opdef = self._opdef(node)
            if opdef is None:
                if isinstance(node, (Var, Constant)):
                    continue
                return None
            if opdef.compute is None:
                if anchor is not None and anchor is not node:
                    return None  # two anchors in one chain: keep them apart
                if not shapes_equal(self._type(node), out_ty):
                    return None
                # Kernels compute in their output buffer's dtype, so only a reduction (which
                # accumulates in its own dtype) or a kernel that casts at its store may have a
                # dtype-changing epilogue.
                if opdef.kernel is not None and _dtype(node) != _dtype(out) and not self._casts_at_store(opdef, node):
                    return None
                anchor = node  # type: ignore[assignment]  # opdef is not None: a Call
                continue
            if opdef.pattern > OpPattern.BROADCAST:
                return None
            chain.add(node)
            stack.extend(_value_children(node))
        if anchor is None or (anchor is not out and not chain):
            return None
        # Every use of the anchor must stay inside the chain, where it is read at the output
        # index: the epilogue replaces those reads by the kernel's value.
        for user in users.get(anchor, []):
            if user not in chain:
                return None
            if not self._reads_at_output_index(user, anchor, out_ty):
                return None
        # Values inside the chain exist only in registers; nothing outside may need them.
        for node in chain:
            if node is not out and (node in out_nodes or any(u not in chain for u in users.get(node, []))):
                return None
        if anchor is not out and anchor in out_nodes:
            return None
        return anchor

    def _casts_at_store(self, opdef: OpDef, node: Expr) -> bool:
        test = opdef.extras.get("casts_at_store")
        return (callable(test) and isinstance(node, Call) and self.shapes is None
                and bool(test(self.ctx, node.attrs, [self._type(a) for a in node.args], self._type(node))))

    def _reads_at_output_index(self, user: Expr, anchor: Expr, out_ty: Type) -> bool:
        """True when `user` (an elementwise/broadcast op) reads `anchor` at its own output index."""
        return (isinstance(user, Call) and shapes_equal(self._type(user), out_ty)
                and shapes_equal(self._type(anchor), out_ty))

    # -- types and buffers -----------------------------------------------------------------

    def _type(self, node: Expr) -> Type:
        """`node`'s type, with the kernel's dim expressions where the function has `?` dims."""
        return self.shapes.type_of(node) if self.shapes is not None else node.checked_type

    def _temp(self, base: str, shape: tuple[int | te.PrimExpr, ...], dtype: str, node: Expr | None) -> te.Buffer:
        # Temporaries live in the kernel's workspace, whose size the caller knows before the
        # call; one of `?` shape the kernel takes from the heap for its run.
        temp = te.Buffer(self.ctx.fresh(base), shape, dtype, "global" if _is_static(shape) else "heap")
        self.temps.append(temp)
        return temp

    def _batch_rows(self, opdef: OpDef, node: Call, inputs: Sequence[TensorView],
                    out: te.Buffer | tuple[te.Buffer, ...]) -> te.PrimExpr | None:
        """The run-time batch, when it is the kernel's only unknown dim and the op's rows are
        independent along it (compiler/backend/batch_loop.py). A tuple result's fields all
        carry the batch."""
        rows = opdef.extras.get("batch_rows")
        outs = out if isinstance(out, tuple) else (out,)
        if rows is None or opdef.extras.get("dynamic_extents") or all(o.is_static for o in outs):
            return None
        if not rows(node.attrs, len(outs[0].shape)):  # type: ignore[operator]  # a predicate
            return None
        return batch_rows_only(inputs, outs)

    def _kernel_per_row(
        self, opdef: OpDef, node: Call, inputs: Sequence[TensorView], out: te.Buffer | tuple[te.Buffer, ...],
        out_type: Type, epilogue: Callable[[te.PrimExpr, Index], te.PrimExpr], batch: te.PrimExpr,
    ) -> Stmt:
        # 64-bit: the row's offset has no bound the index arithmetic could show fits in 32
        # bits, and int32 arithmetic that may wrap is cast at every step, which keeps gcc from
        # vectorizing the kernel's loops (ResNet-50's max pool per image: 3.9x its static time).
        row = te.Var(self.ctx.fresh("row"), "int64")
        real: dict[te.Buffer, te.Buffer] = {}
        views: list[TensorView] = []
        for view in inputs:
            if view.buffer is None or view.buffer.is_static:
                views.append(view)
                continue
            one = stand_in(view.buffer, self.ctx.fresh(f"{view.buffer.name}_row"))
            real[one] = view.buffer
            views.append(replace(TensorView.of_buffer(one), data=view.data))
        out_rows = []
        for buffer in out if isinstance(out, tuple) else (out,):
            out_rows.append(stand_in(buffer, self.ctx.fresh(f"{buffer.name}_row")))
            real[out_rows[-1]] = buffer

        def row_of(ty: Type) -> Type:
            if isinstance(ty, TupleType):
                return TupleType(tuple(row_of(f) for f in ty.fields))
            assert isinstance(ty, TensorType)
            return TensorType((1, *ty.shape[1:]), ty.dtype)

        stmt = opdef.kernel(  # type: ignore[misc]  # checked by the caller
            self.ctx, views, tuple(out_rows) if isinstance(out, tuple) else out_rows[0], node.attrs,
            row_of(out_type), lambda value, idx: epilogue(value, (row + idx[0], *idx[1:])),
        )
        assert isinstance(stmt, Stmt)
        return batch_loop(row, batch, move_to_row(stmt, real, row))

    def _dynamic_form(
        self, opdef: OpDef, node: Call, inputs: Sequence[TensorView], kernel_inputs: Sequence[TensorView],
        out: te.Buffer, out_type: Type, epilogue: Callable[[te.PrimExpr, Index], te.PrimExpr],
    ) -> Stmt | None:
        """A kernel reached by `?` dims other than a batch: its form for run-time extents
        (`extras["dynamic_kernel"]`, conv2d's tiled product over chunks of pixels), else the op
        as a plain reduction (`extras["dynamic_reduction"]`: conv2d's other cases and the 2-D
        pools); None when the op has neither for this call."""
        kernel = opdef.extras.get("dynamic_kernel")
        if kernel is not None:
            stmt = kernel(self.ctx, kernel_inputs, out, node.attrs, out_type, epilogue)  # type: ignore[operator]  # see OpDef.extras
            if stmt is not None:
                return stmt  # type: ignore[no-any-return]  # a Stmt
        make = opdef.extras.get("dynamic_reduction")
        reduction = make(inputs, node.attrs, out_type) if make is not None else None  # type: ignore[operator]  # see OpDef.extras
        return None if reduction is None else self._reduction_loop(reduction, out, epilogue)

    def _require_static_kernel(self, node: Call, inputs: Sequence[TensorView], outputs: Sequence[te.Buffer]) -> None:
        """Hand-tiled kernels (conv, pools, ...) specialize on their extents; those declaring
        `extras["dynamic_extents"]` (dense, matmul, batch_matmul) also take `?` dims."""
        if ops.get(node.op.name).extras.get("dynamic_extents"):  # type: ignore[union-attr]  # anchors are op calls
            return
        shapes = [v.shape for v in inputs] + [b.shape for b in outputs]
        if not all(_is_static(s) for s in shapes):
            raise UnsupportedError(
                f"{node.op.name}: its kernel needs static shapes, and `?` dims reach it",  # type: ignore[union-attr]
                node.span)

    # -- views --------------------------------------------------------------------------

    def _views(self, param_views: dict[Expr, View], overrides: dict[Expr, View]) -> dict[Expr, View]:
        views: dict[Expr, View] = dict(param_views)
        views.update(self.materialized)
        views.update(overrides)
        for node in post_order(self.func.body, descend=lambda n: not isinstance(n, Function)):
            if node in views:
                continue
            if isinstance(node, Constant):
                views[node] = _constant_view(node)
            elif any(c not in views for c in _value_children(node)):
                # Reads an anchor that is not materialized yet (or one fused away): no view now.
                continue
            elif isinstance(node, Tuple):
                views[node] = tuple(views[f] for f in node.fields)
            elif isinstance(node, TupleGetItem):
                value = views[node.tuple_value]
                assert isinstance(value, tuple)
                views[node] = value[node.index]
            elif isinstance(node, Call) and isinstance(node.op, Op):
                opdef = ops.get(node.op.name)
                if opdef.compute is None:
                    continue  # an anchor not materialized yet: nothing may read it before
                views[node] = _compute_view(opdef, node, self._type(node), [views[a] for a in node.args])
            elif isinstance(node, Op):
                continue
            elif isinstance(node, Var):
                raise UnsupportedError(f"free variable %{node.name_hint} inside a primitive function")
            else:
                raise UnsupportedError(f"{type(node).__name__} inside a primitive function cannot be lowered")
        return views

    def _resolve(self, root: te.PrimExpr) -> te.PrimExpr:
        """`root` with every deferred element replaced by its expansion, walking iteratively."""
        memo = self._resolved

        def kids_of(node: te.PrimExpr) -> tuple[te.PrimExpr, ...]:
            return (node.expansion(),) if isinstance(node, _Deferred) else expr_children(node)

        stack: list[tuple[te.PrimExpr, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in memo:
                continue
            kids = kids_of(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(kids) if id(k) not in memo)
                continue
            new_kids = tuple(memo[id(k)][1] for k in kids)
            if isinstance(node, _Deferred):
                memo[id(node)] = (node, new_kids[0])
            elif any(a is not b for a, b in zip(kids, new_kids)):
                memo[id(node)] = (node, rebuild_expr(node, new_kids))
            else:
                memo[id(node)] = (node, node)
        return memo[id(root)][1]

    # -- emission -----------------------------------------------------------------------

    def _emit_anchor(
        self, node: Call, out: te.Buffer, param_views: dict[Expr, View], out_node: Expr | None
    ) -> None:
        opdef = ops.get(node.op.name)  # type: ignore[union-attr]  # anchors are op calls
        views = self._views(param_views, {})
        inputs = [views[a] for a in node.args]
        epilogue = self._epilogue(node, out_node, param_views)
        out_type = self._type(node)
        if opdef.kernel is not None:
            widened = self._widened_inputs(opdef, node, views)
            kernel_inputs = [widened.get(k) or self._materialize_input(v) for k, v in enumerate(inputs)]
            batch = self._batch_rows(opdef, node, kernel_inputs, out)
            dynamic = batch is None and not (out.is_static and all(_is_static(v.shape) for v in kernel_inputs))
            if batch is not None:
                stmt = self._kernel_per_row(opdef, node, kernel_inputs, out, out_type, epilogue, batch)
            elif dynamic and (found := self._dynamic_form(opdef, node, inputs, kernel_inputs, out, out_type,
                                                          epilogue)) is not None:
                stmt = found
            else:
                self._require_static_kernel(node, kernel_inputs, (out,))
                stmt = opdef.kernel(self.ctx, kernel_inputs, out, node.attrs, out_type, epilogue)
        elif opdef.reduction is not None:
            reduction = opdef.reduction(inputs, node.attrs, out_type)
            stmt = self._reduction_loop(reduction, out, epilogue)
        else:
            raise UnsupportedError(f"operator {opdef.name} has no loop lowering yet")
        assert isinstance(stmt, Stmt)
        self.stmts.append(stmt)

    def _widened_inputs(self, opdef: OpDef, node: Call, views: dict[Expr, View]) -> dict[int, TensorView]:
        """The float16 tensors a kernel reads in place of its float32 inputs that are casts of
        them (`extras["widened_inputs"]`), by input index: the kernel widens as it reads, so
        the cast writes no float32 copy."""
        test = opdef.extras.get("widened_inputs")
        if test is None:
            return {}
        arg_types = [self._type(a) for a in node.args]
        found: dict[int, TensorView] = {}
        for k in test(self.ctx, node.attrs, arg_types, self._type(node)):  # type: ignore[operator]  # see OpDef.extras
            source = half_cast_source(node.args[k])
            view = views.get(source) if source is not None else None
            if isinstance(view, TensorView) and view.buffer is not None:
                found[k] = view
        return found

    def _emit_tuple_anchor(
        self, node: Call, outputs: Sequence[_Output], written: set[int], param_views: dict[Expr, View]
    ) -> tuple[TensorView, ...]:
        """Emit a kernel whose result is a tuple of tensors; its `out` is a tuple of buffers."""
        ty = self._type(node)
        assert isinstance(ty, TupleType)
        buffers: list[te.Buffer] = []
        for k, field_ty in enumerate(ty.fields):
            if not isinstance(field_ty, TensorType):
                raise UnsupportedError(f"{_op_suffix(node)}: a nested tuple result cannot be lowered")
            index = next(
                (i for i, o in enumerate(outputs) if o.node is node and o.path == (k,) and i not in written),
                None,
            )
            if index is not None:
                written.add(index)
                buffers.append(self.outputs[index])
                continue
            buffers.append(self._temp(f"T_{_op_suffix(node)}", buffer_shape(field_ty, "intermediate"), field_ty.dtype, node))
        opdef = ops.get(node.op.name)  # type: ignore[union-attr]  # anchors are op calls
        if opdef.kernel is None:
            raise UnsupportedError(f"operator {opdef.name} has a tuple result but no kernel")
        views = self._views(param_views, {})
        inputs = [self._materialize_input(views[a]) for a in node.args]
        batch = self._batch_rows(opdef, node, inputs, tuple(buffers))
        if batch is not None:
            stmt = self._kernel_per_row(opdef, node, inputs, tuple(buffers), ty, lambda value, idx: value, batch)
        else:
            self._require_static_kernel(node, inputs, buffers)
            stmt = opdef.kernel(self.ctx, inputs, tuple(buffers), node.attrs, ty, lambda value, idx: value)
        assert isinstance(stmt, Stmt)
        self.stmts.append(stmt)
        return tuple(TensorView.of_buffer(b) for b in buffers)

    def _epilogue(
        self, anchor: Call, out_node: Expr | None, param_views: dict[Expr, View]
    ) -> Callable[[te.PrimExpr, Index], te.PrimExpr]:
        if out_node is None or out_node is anchor:
            return lambda value, idx: value
        anchor_ty = self._type(anchor)
        assert isinstance(anchor_ty, TensorType)

        def epilogue(value: te.PrimExpr, idx: Index) -> te.PrimExpr:
            # The chain reads the anchor only at the output index (the plan checked), so the
            # anchor's view may answer every read with the value being stored. Fresh views per
            # call: their memoized loads must not carry one call's value into the next.
            scalar = TensorView(anchor_ty.shape, anchor_ty.dtype, lambda _: value)  # type: ignore[arg-type]  # static shape
            out_view = self._views(param_views, {anchor: scalar})[out_node]
            assert isinstance(out_view, TensorView)
            return self._resolve(out_view.load(tuple(idx)))

        return epilogue

    def _materialize_input(self, view: View) -> TensorView:
        """Kernels read real buffers; a computed input is stored into a temporary first."""
        if not isinstance(view, TensorView):
            raise UnsupportedError("a kernel input is a tuple")
        if view.buffer is not None:
            return view
        if view.data is not None and view.ndim > 0:
            return view  # a constant argument read by value (`extras["constant_args"]`), never loaded
        temp = self._temp("T_input", tuple(view.shape), view.dtype, None)
        self.stmts.append(self._store_loop(temp, view.load))
        return replace(TensorView.of_buffer(temp), data=view.data)

    def _store_loop(self, out: te.Buffer, load: Callable[[Index], te.PrimExpr]) -> Stmt:
        shape = out.shape
        if not shape:
            return Store(out, (), te.cast(out.dtype, self._resolve(load(()))))
        names = [self.ctx.fresh(f"ax{i}") for i in range(len(shape))]
        idx_vars = [te.Var(n, "int32") for n in names]
        store = Store(out, tuple(idx_vars), te.cast(out.dtype, self._resolve(load(tuple(idx_vars)))))
        total = out.num_elements
        big = self.ctx.parallel and isinstance(total, int) and total >= PARALLEL_MIN_ELEMENTS
        # The innermost axis stays serial: it is the one the C compiler vectorizes.
        at = parallel_axis(shape[:-1]) if big else None
        kinds = [ForKind.PARALLEL if k == at else ForKind.SERIAL for k in range(len(shape))]
        if all(isinstance(d, int) for d in shape):
            return store_nest([Loop(v, int(d), kind) for v, d, kind in zip(idx_vars, shape, kinds)], store)
        body: Stmt = store
        for k in reversed(range(len(shape))):
            body = For(idx_vars[k], te.const(0), te.as_expr(shape[k]), body, kinds[k])
        return body

    def _reduction_loop(
        self, red: Reduction, out: te.Buffer, epilogue: Callable[[te.PrimExpr, Index], te.PrimExpr]
    ) -> Stmt:
        out_vars = [self.ctx.var(f"ax{i}") for i in range(len(out.shape))]
        red_vars = [self.ctx.var(f"k{i}") for i in range(len(red.extents))]
        acc = te.Buffer(self.ctx.fresh("acc"), (1,), red.dtype, scope="local")
        value = self._resolve(red.body(tuple(out_vars), tuple(red_vars)))
        arg_reduce = red.combiner in ("argmax", "argmin")
        if arg_reduce:
            best = te.Buffer(self.ctx.fresh("best"), (1,), value.dtype, scope="local")
            flat = te.const(0)
            for v, e in zip(red_vars, red.extents):
                flat = flat * e + v
            better = _arg_better(red.combiner, value, best[0], red.select_last)
            # The index first: both stores test `better` against the best value seen so far.
            update: Stmt = seq(
                Store(acc, (te.const(0),), te.select(better, te.cast(red.dtype, flat), acc[0])),
                Store(best, (te.const(0),), te.select(better, value, best[0])),
            )
            init = seq(
                Store(best, (te.const(0),), te.const(_init_value(red.combiner, value.dtype), value.dtype)),
                Store(acc, (te.const(0),), te.const(0, red.dtype)),
            )
        else:
            update = Store(acc, (te.const(0),), _combine(red.combiner, acc[0], te.cast(red.dtype, value)))
            init = Store(acc, (te.const(0),), te.const(_init_value(red.combiner, red.dtype), red.dtype))
        width = 0 if arg_reduce or not red_vars else self._partials(red, value, red_vars[-1])
        extents = red.extents
        if width:
            # The innermost reduce axis as vector loops over `width` partial accumulators.
            acc = te.Buffer(acc.name, (width,), red.dtype, scope="local")
            inner, extent = red_vars[-1], red.extents[-1]
            assert isinstance(extent, int)
            cast_value = te.cast(red.dtype, value)

            def combine(a: te.PrimExpr, b: te.PrimExpr) -> te.PrimExpr:
                return _combine(red.combiner, a, b)

            init = partial_reduce.init_partials(
                self.ctx, acc, width, te.const(_init_value(red.combiner, red.dtype), red.dtype))
            update = partial_reduce.accumulate(
                self.ctx, acc, width, extent, lambda k: substitute(cast_value, {inner: k}), combine)
            red_vars, extents = red_vars[:-1], extents[:-1]
        for v, e in reversed(list(zip(red_vars, extents))):
            update = For(v, te.const(0), te.as_expr(e), update)
        if width:
            update = seq(update, partial_reduce.fold_partials(self.ctx, acc, width, combine))
        result: te.PrimExpr = acc[0]
        if red.finalize is not None:
            result = red.finalize(result, tuple(out_vars))
        store = Store(out, tuple(out_vars), te.cast(out.dtype, self._resolve(epilogue(result, tuple(out_vars)))))
        body: Stmt = seq(init, update, store)
        if arg_reduce:
            body = Allocate(best, body)
        body = Allocate(acc, body)
        total = out.num_elements
        reduced = total
        for extent in red.extents:
            reduced = reduced * extent if isinstance(reduced, int) and isinstance(extent, int) else None
        big = (self.ctx.parallel and isinstance(total, int) and total >= PARALLEL_MIN_RESULTS
               and (reduced is None or reduced >= PARALLEL_MIN_REDUCED))

        def nest(at: int | None) -> Stmt:
            nested = body
            for k in reversed(range(len(out_vars))):
                kind = ForKind.PARALLEL if k == at else ForKind.SERIAL
                nested = For(out_vars[k], te.const(0), te.as_expr(out.shape[k]), nested, kind)
            return nested

        at = parallel_axis(out.shape)
        if self.ctx.parallel and not isinstance(total, int) and at is not None:
            # A result of `?` size: whether it is worth a second thread is known only at run
            # time (a convolution over an image of any size takes this form), so both nests
            # are emitted and the sizes choose.
            work = te.as_expr(total)
            for extent in red.extents:
                work = work * extent
            worth = te.logical_and(te.as_expr(total) >= PARALLEL_MIN_RESULTS, work >= PARALLEL_MIN_REDUCED)
            return IfThenElse(worth, nest(at), nest(None))
        return nest(at if big else None)

    def _partials(self, red: Reduction, value: te.PrimExpr, inner: te.Var) -> int:
        """The number of partial accumulators for `red`, or 0 to reduce in order: sums, max and
        min along a static axis of at least two blocks whose loads are contiguous along it."""
        width = partial_reduce.partial_width(self.ctx)
        extent = red.extents[-1]
        if red.combiner not in _PARTIAL_COMBINERS or red.dtype not in _PARTIAL_DTYPES:
            return 0
        if not isinstance(extent, int) or extent < 2 * width:
            return 0
        return width if partial_reduce.unit_stride(value, inner) else 0


_PARTIAL_COMBINERS = ("sum", "max", "min")
# float16 sums keep their order: they round at every step, and reordering moves them visibly.
_PARTIAL_DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _value_children(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Tuple):
        return node.fields
    if isinstance(node, TupleGetItem):
        return (node.tuple_value,)
    return ()


def _dtype(node: Expr) -> str | None:
    ty = node.checked_type
    return ty.dtype if isinstance(ty, TensorType) else None


def _tensor_paths(ty: Type) -> list[tuple[int, ...]]:
    """The field paths of every tensor in `ty`, flattened in order; [()] for a tensor."""
    if not isinstance(ty, TupleType):
        return [()]
    return [(i, *rest) for i, field in enumerate(ty.fields) for rest in _tensor_paths(field)]


def _op_suffix(node: Expr) -> str:
    if isinstance(node, Call) and isinstance(node.op, Op):
        return node.op.name.split(".")[-1]
    return "out"


def _constant_view(node: Constant) -> TensorView:
    ty = node.tensor_type
    if ty.ndim != 0:
        # Only ops that read constant arguments at lowering time (`extras["constant_args"]`)
        # keep a non-scalar constant in their body (see FuseOps); they use `data`, never loads.
        def unsupported(idx: Index) -> te.PrimExpr:
            raise UnsupportedError(
                "a non-scalar constant inside a primitive function; FuseOps passes those as parameters"
            )

        return TensorView(tuple(int(d) for d in node.data.shape), ty.dtype, unsupported, data=node.data)
    value = node.data.item()
    return TensorView((), ty.dtype, lambda idx: te.Const(value, ty.dtype), data=node.data)


class _Deferred(te.PrimExpr):
    """An element of a computed view, expanded later by `PrimitiveLowering._resolve`.

    A computed view's load returns one of these instead of calling the op's compute at once, so
    a consumer's compute never calls into its producers' computes: expanding a fused chain is a
    loop over a work stack, not Python recursion as deep as the chain. Never leaves this module.
    """

    def __init__(self, expand: Callable[[], te.PrimExpr], dtype: str):
        self.dtype = dtype
        self._expand: Callable[[], te.PrimExpr] | None = expand
        self._value: te.PrimExpr | None = None

    def expansion(self) -> te.PrimExpr:
        if self._value is None:
            assert self._expand is not None
            self._value = self._expand()
            self._expand = None
        return self._value


def _deferred_loader(dtype: str, compute: Callable[[Index], te.PrimExpr]) -> Callable[[Index], te.PrimExpr]:
    """Loads of a computed view: deferred, and the same object for repeated reads of one index.

    A node read twice at one index (a diamond, x * x) then appears once in the expression DAG
    instead of being rebuilt per path, which would grow exponentially along chains of diamonds
    (the C emitter binds shared nodes to locals). Index expressions are compared by identity
    (loop variables), constants by value.
    """
    memo: dict[tuple[object, ...], tuple[Index, _Deferred]] = {}

    def load(idx: Index) -> te.PrimExpr:
        key = tuple((e.value, e.dtype) if isinstance(e, te.Const) else id(e) for e in idx)
        hit = memo.get(key)
        if hit is None:
            index = tuple(idx)
            # The index is kept alive with the entry, so the ids in the key stay unique.
            hit = memo[key] = (index, _Deferred(lambda: compute(index), dtype))
        return hit[1]

    return load


def _compute_view(opdef: OpDef, node: Call, out_type: Type, inputs: list[View]) -> View:
    compute = opdef.compute
    assert compute is not None
    if isinstance(out_type, TupleType):
        views = []
        for i, field in enumerate(out_type.fields):
            assert isinstance(field, TensorType)
            load = _deferred_loader(
                field.dtype, lambda idx, i=i: compute(idx, inputs, node.attrs, out_type, out_index=i)
            )
            views.append(TensorView(field.shape, field.dtype, load))  # type: ignore[arg-type]  # static shapes
        return tuple(views)
    assert isinstance(out_type, TensorType)
    load = _deferred_loader(out_type.dtype, lambda idx: compute(idx, inputs, node.attrs, out_type))
    return TensorView(out_type.shape, out_type.dtype, load)  # type: ignore[arg-type]  # static shapes


def _init_value(combiner: str, dtype: str) -> float | int:
    if combiner in ("sum",):
        return 0.0 if dtype.startswith("float") else 0
    if combiner == "prod":
        return 1.0 if dtype.startswith("float") else 1
    if combiner in ("max", "argmax"):
        return min_value(dtype)
    if combiner in ("min", "argmin"):
        return max_value(dtype)
    raise UnsupportedError(f"unknown reduction combiner {combiner}")


def _combine(combiner: str, acc: te.PrimExpr, value: te.PrimExpr) -> te.PrimExpr:
    if combiner == "sum":
        return acc + value
    if combiner == "prod":
        return acc * value
    if combiner == "max":
        return te.maximum(acc, value)
    if combiner == "min":
        return te.minimum(acc, value)
    raise UnsupportedError(f"unknown reduction combiner {combiner}")


def _arg_better(combiner: str, value: te.PrimExpr, best: te.PrimExpr, select_last: bool) -> te.PrimExpr:
    if combiner == "argmax":
        return value >= best if select_last else value > best
    return value <= best if select_last else value < best


def lower_primitive(func: Function, name: str, ctx: KernelContext | None = None) -> PrimFunc:
    """The PrimFunc named `name` computing the typed primitive function `func`."""
    return PrimitiveLowering(func, name, ctx).lower()
