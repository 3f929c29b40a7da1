"""ConvertLayout: compute nn.conv2d in the data and kernel layouts a backend asks for.

Before: a typed module. `desired_layouts` maps an operator (only `nn.conv2d` is convertible) to
its data layout and, optionally, its kernel layout: `{"nn.conv2d": ("NHWC", "OHWI")}`. Data
layouts are NCHW / NHWC; kernel layouts OIHW / HWIO / OHWI / HWOI / ...; a missing kernel
layout or "default" means OIHW for NCHW data and HWIO for NHWC data.

After (typed): every nn.conv2d whose layouts differ from the desired ones runs in the desired
layouts, with `layout_transform`s that bring its data and weight in and its result back. The new
layout is carried forward through operators that do not care about it, so two converted
convolutions in a row need no transform between them:
* one-input elementwise operators without axis attributes (relu, clip, cast, ...);
* `nn.bias_add`, whose axis follows the channel to its new position;
* two-input broadcasting operators whose other operand is a scalar or has the full 4-D shape
  (that operand is transformed too).
Every other use sees the original layout again (a transform back is inserted once per value),
and so does the function's result, so a function's type never changes. Transforms of constant
weights become constants in the new layout when FoldConstant runs afterwards.

Composite functions (`Composite` attribute) are converted as a unit: a parameter that feeds a
converted conv2d takes the new layout and the transform moves to the call's argument, and a
result left in the new layout is returned in it and converted back outside. The transforms thus
go around the composite call, never into it, so an external library implementing the composite
receives its tensors in the layout it asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from compiler import ops
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Expr, Function, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.visitor import post_order, rebuild
from compiler.ops.layout import parse_layout, transform_shape
from compiler.ops.registry import OpPattern
from compiler.passes.fusion_graph import closed_function
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext
from compiler.passes.simplify_inference import op_call

CONV2D = "nn.conv2d"
CONVERTIBLE = (CONV2D,)
DATA_LAYOUTS = ("NCHW", "NHWC")
DEFAULT_KERNEL = {"NCHW": "OIHW", "NHWC": "HWIO"}
# Attributes that tie an operator to a particular axis: such ops never carry a new layout.
_AXIS_ATTRS = frozenset({"axis", "axes", "layout", "data_layout", "out_layout", "newshape", "shape"})


def check_layouts(op: str, layouts: tuple[str, ...]) -> tuple[str, str]:
    """The (data, kernel) layouts for `op` from a desired-layouts entry, or ValueError."""
    if op not in CONVERTIBLE:
        raise ValueError(f"ConvertLayout cannot convert {op!r} (convertible: {', '.join(CONVERTIBLE)})")
    if not 1 <= len(layouts) <= 2:
        raise ValueError(f"ConvertLayout for {op} takes a data layout and optionally a kernel layout")
    data = layouts[0]
    if data not in DATA_LAYOUTS:
        raise ValueError(f"ConvertLayout: data layout {data!r} for {op} is not one of {', '.join(DATA_LAYOUTS)}")
    kernel = layouts[1] if len(layouts) == 2 and layouts[1] != "default" else DEFAULT_KERNEL[data]
    if len(kernel) != 4 or sorted(kernel) != sorted("OIHW"):
        raise ValueError(f"ConvertLayout: kernel layout {kernel!r} for {op} is not a permutation of OIHW")
    return data, kernel


@dataclass(frozen=True)
class ConvertLayout(Pass):
    name: ClassVar[str] = "ConvertLayout"
    opt_level: ClassVar[int] = 3
    desired_layouts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Normalized to (data, kernel) pairs, so a bad entry fails when the pass is made.
        checked = {op: check_layouts(op, tuple(layouts)) for op, layouts in self.desired_layouts.items()}
        object.__setattr__(self, "desired_layouts", checked)

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if not self.desired_layouts:
            return mod
        data, kernel = self.desired_layouts[CONV2D]
        mod = InferType().run(mod, ctx)
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            if closed_function(func):
                continue
            new = _LayoutRewriter(data, kernel).function(func)
            if new is not func:
                out.add(gv, new)
                changed = True
        return InferType().run(out, ctx) if changed else mod

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.desired_layouts.items())))


@dataclass(frozen=True)
class _Pending:
    """A value computed in layout `current` whose original form is in layout `original`."""

    current: str
    original: str


def _tensor_type(expr: Expr) -> TensorType | None:
    ty = expr.checked_type if expr.has_type else None
    return ty if isinstance(ty, TensorType) else None


def _transform(expr: Expr, src: str, dst: str) -> Expr:
    return op_call("layout_transform", expr, src_layout=src, dst_layout=dst)


def _axis_free(name: str) -> bool:
    opdef = ops.lookup(name)
    return opdef is not None and not any(a.name in _AXIS_ATTRS for a in opdef.attrs)


class _LayoutRewriter:
    """Rewrites one function body. `new[n]` is node n rewritten; `pending[n]` says when that
    rewritten value is in another layout than n's."""

    def __init__(self, data_layout: str, kernel_layout: str):
        self.data_layout = data_layout
        self.kernel_layout = kernel_layout
        self.new: dict[Expr, Expr] = {}
        self.pending: dict[Expr, _Pending] = {}
        self.restored: dict[Expr, Expr] = {}

    # -- entry points ------------------------------------------------------------------------

    def function(self, func: Function) -> Function:
        self.body(func.body)
        restored = self.original(func.body)
        if restored is func.body:
            return func
        return Function(func.params, restored, func.ret_type, func.attrs, func.span)

    def body(self, root: Expr) -> Expr:
        for node in post_order(root, seen=self.new, descend=lambda n: not isinstance(n, Function)):
            self.visit(node)
        return self.new[root]

    # -- values in a given layout ------------------------------------------------------------

    def original(self, node: Expr) -> Expr:
        """`node`'s rewritten value in its original layout."""
        pending = self.pending.get(node)
        if pending is None:
            return self.new[node]
        restored = self.restored.get(node)
        if restored is None:
            restored = self.restored[node] = _transform(self.new[node], pending.current, pending.original)
        return restored

    def in_layout(self, node: Expr, want: str, original: str) -> Expr:
        pending = self.pending.get(node)
        if pending is not None and pending.current == want:
            return self.new[node]
        if want == original:
            return self.original(node)
        return _transform(self.original(node), original, want)

    # -- nodes -------------------------------------------------------------------------------

    def visit(self, node: Expr) -> None:
        if isinstance(node, Call):
            self.call(node)
        elif isinstance(node, Function):
            self.new[node] = node  # composites are rewritten at their call sites
        else:
            self.new[node] = rebuild(node, self.original)

    def call(self, call: Call) -> None:
        op = call.op
        if isinstance(op, Op):
            name = op.name
            if name == CONV2D and self.conv2d(call):
                return
            if self.propagate(call, name):
                return
        elif isinstance(op, Function) and "Composite" in op.attrs and self.composite(call, op):
            return
        self.new[call] = rebuild(call, self.original)

    def conv2d(self, call: Call) -> bool:
        attrs = call.attrs
        data_layout, kernel_layout = str(attrs["data_layout"]), str(attrs["kernel_layout"])
        out_layout = str(attrs["out_layout"] or data_layout)
        if (data_layout, kernel_layout) == (self.data_layout, self.kernel_layout):
            return False
        if data_layout not in DATA_LAYOUTS or out_layout not in DATA_LAYOUTS:
            return False  # blocked layouts such as NCHW4c are left alone
        data = self.in_layout(call.args[0], self.data_layout, data_layout)
        weight = self.in_layout(call.args[1], self.kernel_layout, kernel_layout)
        new_attrs = Attrs({**attrs, "data_layout": self.data_layout, "kernel_layout": self.kernel_layout,
                           "out_layout": ""})
        self.new[call] = Call(call.op, (data, weight), new_attrs, call.span)
        if self.data_layout != out_layout:
            self.pending[call] = _Pending(self.data_layout, out_layout)
        return True

    def propagate(self, call: Call, name: str) -> bool:
        """Carry a pending layout through an operator that allows it."""
        carried = [self.pending[a] for a in call.args if a in self.pending]
        if not carried:
            return False
        pending = carried[0]
        opdef = ops.lookup(name)
        if opdef is None:
            return False
        if name == "nn.bias_add" and call.args[0] in self.pending:
            return self.bias_add(call, self.pending[call.args[0]])
        if not _axis_free(name) or opdef.pattern > OpPattern.BROADCAST:
            return False
        if len(call.args) == 1:
            self.new[call] = Call(call.op, (self.new[call.args[0]],), call.attrs, call.span)
            self.pending[call] = pending
            return True
        if len(call.args) != 2:
            return False
        result = _tensor_type(call)
        if result is None or result.ndim != len(pending.current):
            return False
        args = []
        for arg in call.args:
            ty = _tensor_type(arg)
            if arg in self.pending:
                if self.pending[arg] != pending:
                    return False
                args.append(self.new[arg])
            elif ty is not None and (ty.ndim == 0 or all(d == 1 for d in ty.shape)):
                args.append(self.new[arg])
            elif ty is not None and ty.shape == result.shape:
                args.append(self.in_layout(arg, pending.current, pending.original))
            else:
                return False
        self.new[call] = Call(call.op, tuple(args), call.attrs, call.span)
        self.pending[call] = pending
        return True

    def bias_add(self, call: Call, pending: _Pending) -> bool:
        data_type = _tensor_type(call.args[0])
        if data_type is None:
            return False
        axis = int(call.attrs["axis"])
        axis = axis + data_type.ndim if axis < 0 else axis
        letter = pending.original[axis]
        new_attrs = call.attrs.with_attr("axis", pending.current.index(letter))
        self.new[call] = Call(call.op, (self.new[call.args[0]], self.original(call.args[1])), new_attrs, call.span)
        self.pending[call] = pending
        return True

    def composite(self, call: Call, func: Function) -> bool:
        wanted = self.composite_param_layouts(func)
        if not wanted:
            return False
        inner = _LayoutRewriter(self.data_layout, self.kernel_layout)
        params: list[Var] = []
        args: list[Expr] = []
        for param, arg in zip(func.params, call.args):
            layouts = wanted.get(param)
            ty = param.type_annotation or _tensor_type(param)
            if layouts is None or not isinstance(ty, TensorType):
                inner.new[param] = param
                params.append(param)
                args.append(self.original(arg))
                continue
            want, original = layouts
            shape = transform_shape(ty.shape, parse_layout(original, CONV2D), parse_layout(want, CONV2D), CONV2D)
            new_param = Var(param.name_hint, TensorType(shape, ty.dtype), param.span)
            inner.new[param] = new_param
            inner.pending[param] = _Pending(want, original)
            params.append(new_param)
            args.append(self.in_layout(arg, want, original))
        body = inner.body(func.body)
        result = inner.pending.get(func.body)
        new_func = Function(tuple(params), body, None, func.attrs, func.span)
        self.new[call] = Call(new_func, tuple(args), call.attrs, call.span)
        if result is not None:
            self.pending[call] = result
        return True

    def composite_param_layouts(self, func: Function) -> dict[Var, tuple[str, str]]:
        """Parameters of `func` used directly as the data or weight of a conv2d that will be
        converted: (desired layout, original layout) for each."""
        wanted: dict[Var, tuple[str, str]] = {}
        params = set(func.params)
        for node in post_order(func.body, descend=lambda n: not isinstance(n, Function)):
            if not (isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == CONV2D):
                continue
            data_layout, kernel_layout = str(node.attrs["data_layout"]), str(node.attrs["kernel_layout"])
            if (data_layout, kernel_layout) == (self.data_layout, self.kernel_layout):
                continue
            if data_layout not in DATA_LAYOUTS:
                continue
            data, weight = node.args
            if isinstance(data, Var) and data in params:
                wanted.setdefault(data, (self.data_layout, data_layout))
            if isinstance(weight, Var) and weight in params:
                wanted.setdefault(weight, (self.kernel_layout, kernel_layout))
        return wanted

