"""Random well-typed Relay models drawn from the operator registry, for differential testing.

Every op declares its domain (compiler/ops/domain.py); the generator draws calls from those
domains and wires them into one `@main`. The draws go through a `GraphDraw`, which offers the
shapes of values the model already has whenever a domain asks for a shape, so that drawn calls
connect: an argument whose drawn type equals an existing value's type reads that value (shared
subexpressions, long chains); otherwise it becomes a new parameter of `@main` or, now and
then, a constant that FoldConstant can fold. Values nothing reads become outputs, and now and
then an intermediate value is an output as well (a tuple result with several outputs).

A model is reproducible from its seed and options alone. Inputs come with the model, drawn in
the value range the domain declared, so the interpreter and the compiled code see the same
arrays.

A model compiled for a target that names external codegens also gets chains of calls shaped
like their patterns (compiler/testing/regions.py), drawn the way their libraries take them, so
that BYOC regions form; drawn one op at a time, `nn.relu(nn.conv2d(...))` in float32 with
default layouts would be rare.

Arguments whose domain narrows their values (a positive range for `log`, indices as arrays,
non-zero divisors) are never connected to other values: nothing guarantees an arbitrary value
stays in that range. They become parameters or constants of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler import ops
from compiler.byoc.codegen_config import CodegenSpec, builtin
from compiler.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.visitor import free_vars, post_order
from compiler.ir.types import TensorType, TupleType, Type, dtype_of
from compiler.ops.domain import RandomDraw
from compiler.ops.registry import AttrError, OpDef, Sample, TypeRelationError
from compiler.parser.printer import astext
from compiler.passes.infer_type import InferType, constant_data
from compiler.testing.regions import Accepts, Link, Motif, RegionDraw, motifs, region_friendly

# Ops that move data around between the heavy ones: the shapes fusion and the memory planner
# most often get wrong, so they are drawn more often.
GLUE_OPS = frozenset({
    "reshape", "transpose", "strided_slice", "expand_dims", "squeeze", "concatenate", "split",
    "take", "nn.batch_flatten", "layout_transform", "broadcast_to", "stack", "copy",
})
HEAVY_OPS = frozenset({
    "nn.dense", "nn.conv2d", "nn.batch_matmul", "nn.matmul", "nn.max_pool2d", "nn.avg_pool2d",
    "nn.softmax", "nn.log_softmax", "nn.global_avg_pool2d",
})
# Ops SimplifyInference rewrites before fusion: compiled through their decomposition.
DECOMPOSED = frozenset({"nn.batch_norm", "nn.dropout", "nn.layer_norm"})
MAX_ELEMENTS = 1 << 14
# Draws of one call of a motif before giving the motif up.
REGION_ATTEMPTS = 40
DEFAULT_SAMPLE = Sample(())


@dataclass(frozen=True)
class GeneratorOptions:
    """What a generated model may hold. `ops` restricts the ops drawn (by name); `targets` are
    the target strings a model may be compiled for; `constant_chance` is the probability that
    an unconnected argument becomes a constant rather than a parameter.

    `codegens` are the specs of external codegens the targets name that are not built in (the
    check builds with those its model's target names). When a model's target names codegens
    with patterns, each draw is, with probability `region_chance`, a chain of calls shaped like
    one of their patterns (compiler/testing/regions.py) rather than one op. `accepts` vetoes
    the calls a codegen's library does not take although its patterns match them: it is asked
    about every call drawn (in a chain or not) of an op in the patterns of a codegen the
    model's target names."""

    min_ops: int = 1
    max_ops: int = 20
    ops: tuple[str, ...] | None = None
    targets: tuple[str, ...] = ("c",)
    opt_levels: tuple[int, ...] = (0, 3)
    connect_chance: float = 0.85
    constant_chance: float = 0.15
    extra_output_chance: float = 0.2
    max_outputs: int = 16
    codegens: tuple[CodegenSpec, ...] = ()
    region_chance: float = 0.2
    accepts: Accepts | None = None

    def codegen_specs(self, target: str) -> tuple[CodegenSpec, ...]:
        """The specs of the external codegens `target` names, given or built in (unknown
        names are left to the driver to report)."""
        given = {s.name: s for s in self.codegens}
        names = [k.strip() for k in target.split(",")][:-1]
        found = (given.get(n) or builtin(n) for n in names)
        return tuple(s for s in found if s is not None)


@dataclass
class GeneratedModel:
    """A model with its inputs and how to build it; `ops` lists the ops of its calls in order."""

    seed: int
    module: IRModule
    inputs: dict[str, np.ndarray]
    target: str
    opt_level: int
    ops: list[str] = field(default_factory=list)
    # The specs of the external codegens `target` names (to build with) and, per codegen, how
    # many pattern-shaped chains the generator drew for it.
    codegens: tuple[CodegenSpec, ...] = ()
    motifs: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return astext(self.module)


class GraphDraw(RandomDraw):
    """A RandomDraw that prefers the shapes and dtypes of values the model already has."""

    def __init__(self, rng: np.random.Generator, existing: Sequence[TensorType], prefer: float = 0.7):
        super().__init__(rng)
        self.existing = list(existing)
        self.prefer = prefer

    def shape(self, min_rank: int = 1, max_rank: int = 4, min_dim: int = 1, max_dim: int = 5) -> tuple[int, ...]:
        fitting = [
            _dims(t) for t in self.existing
            if not t.is_dynamic and min_rank <= t.ndim <= max_rank
            and all(min_dim <= d <= max_dim for d in _dims(t))
        ]
        if fitting and self.rng.random() < self.prefer:
            return fitting[int(self.rng.integers(0, len(fitting)))]
        return super().shape(min_rank, max_rank, min_dim, max_dim)

    def dtype(self, options: Sequence[str]) -> str:
        present = [t.dtype for t in self.existing if t.dtype in options]
        if present and self.rng.random() < self.prefer:
            return present[int(self.rng.integers(0, len(present)))]
        if "float32" in options and self.rng.random() < 0.6:
            return "float32"
        return super().dtype(options)


def _dims(ty: TensorType) -> tuple[int, ...]:
    return tuple(int(d) for d in ty.shape)  # type: ignore[arg-type]  # callers pass static types


def generatable_ops(names: Sequence[str] | None = None) -> list[OpDef]:
    """Ops the generator may draw: those with a domain that compile to loops (or decompose)."""
    chosen = []
    for op in ops.all_ops():
        if op.extras.get("internal") or op.domain is None or op.name.startswith("annotation."):
            continue
        # dyn.* ops draw constant shape arguments, which DynamicToStatic turns into their static
        # ops (drawn on their own); their run-time form is checked by the dynamic variants.
        if op.extras.get("static_form"):
            continue
        if names is not None and op.name not in names:
            continue
        if op.compute is None and op.reduction is None and op.kernel is None and op.name not in DECOMPOSED:
            continue
        chosen.append(op)
    return chosen


def _weight(op: OpDef) -> float:
    if op.name in GLUE_OPS:
        return 3.0
    if op.name in HEAVY_OPS:
        return 2.0
    return 1.0


def _is_default_range(sample: Sample) -> bool:
    return (sample.low, sample.high, sample.int_high) == (
        DEFAULT_SAMPLE.low, DEFAULT_SAMPLE.high, DEFAULT_SAMPLE.int_high,
    )


def random_array(ty: TensorType, sample: Sample, rng: np.random.Generator) -> np.ndarray:
    """Values of type `ty` in the sample's declared range (the same rule as the op tests)."""
    shape = _dims(ty)
    if ty.dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(ty.dtype).kind == "f":
        return np.asarray(rng.uniform(sample.low, sample.high, shape)).astype(ty.dtype)
    return np.asarray(rng.integers(0, sample.int_high, shape)).astype(ty.dtype)


class _Builder:
    """The model under construction: its parameters, its values and who reads them."""

    def __init__(self, rng: np.random.Generator, options: GeneratorOptions):
        self.rng = rng
        self.options = options
        self.motifs: dict[str, int] = {}
        # Op name -> the codegens of the target whose patterns hold it (for `accepts`).
        self.claimed: dict[str, list[str]] = {}
        self.params: list[Var] = []
        self.inputs: dict[str, np.ndarray] = {}
        self.values: list[Expr] = []  # tensor-typed values, in creation order
        self.types: dict[Expr, TensorType] = {}
        self.reads: dict[Expr, int] = {}
        self.ops: list[str] = []

    def claim(self, shapes: Sequence[Motif]) -> None:
        for motif in shapes:
            for link in motif.chain:
                owners = self.claimed.setdefault(link.op, [])
                if motif.codegen not in owners:
                    owners.append(motif.codegen)

    def library_takes(self, op: str, sample: Sample) -> bool:
        accepts = self.options.accepts
        return accepts is None or all(accepts(c, op, sample) for c in self.claimed.get(op, ()))

    def snapshot(self) -> tuple[object, ...]:
        return list(self.params), dict(self.inputs), list(self.values), dict(self.types), dict(self.reads), list(self.ops)

    def restore(self, saved: tuple[object, ...]) -> None:
        self.params, self.inputs, self.values, self.types, self.reads, self.ops = saved  # type: ignore[assignment]

    def tensor_types(self) -> list[TensorType]:
        return [self.types[v] for v in self.values]

    def add_value(self, expr: Expr, ty: TensorType) -> None:
        self.values.append(expr)
        self.types[expr] = ty
        self.reads[expr] = 0

    def argument(self, entry: object, sample: Sample, connect: bool = True) -> tuple[Expr, Type]:
        """An argument for one sample input: an existing value (when `connect`), a new
        parameter or a constant."""
        if isinstance(entry, np.ndarray):
            return Constant(entry), TensorType(entry.shape, dtype_of(entry))
        if isinstance(entry, (TupleType, tuple)):
            fields = entry.fields if isinstance(entry, TupleType) else entry
            parts = [self.argument(f, sample) for f in fields]
            return Tuple(tuple(p for p, _ in parts)), TupleType(tuple(t for _, t in parts))
        assert isinstance(entry, TensorType), f"sample input {entry!r}"
        if connect and _is_default_range(sample) and self.rng.random() < self.options.connect_chance:
            found = self.existing_value(entry)
            if found is not None:
                return found, entry
        data = random_array(entry, sample, self.rng)
        if self.rng.random() < self.options.constant_chance:
            return Constant(data), entry
        var = Var(f"x{len(self.params)}", entry)
        self.params.append(var)
        self.inputs[var.name_hint] = data
        return var, entry

    def existing_value(self, ty: TensorType) -> Expr | None:
        """A value of type `ty` made from the model's values: one of exactly that type, else
        one with as many elements reshaped, else one of that shape cast. Recent values are
        preferred, unread ones most: long chains are where fusion and planning get tested."""
        for adapt in ("same", "reshape", "cast"):
            found = [v for v in self.values if _adaptable(self.types[v], ty, adapt)]
            if not found:
                continue
            weights = np.array([(i + 1) ** 2 * (4 if self.reads[v] == 0 else 1) for i, v in enumerate(found)], float)
            picked = found[int(self.rng.choice(len(found), p=weights / weights.sum()))]
            self.reads[picked] += 1
            if adapt == "same":
                return picked
            if adapt == "reshape":
                call = Call(Op.get("reshape"), (picked,), ops.get("reshape").make_attrs({"newshape": list(_dims(ty))}))
                self.ops.append("reshape")
            else:
                call = Call(Op.get("cast"), (picked,), ops.get("cast").make_attrs({"dtype": ty.dtype}))
                self.ops.append("cast")
            self.add_value(call, ty)
            self.reads[call] += 1
            return call
        return None

    def try_call(self, op: OpDef) -> bool:
        """Draws one call of `op` and adds its results; False when the draw did not fit."""
        assert op.domain is not None
        sample = op.domain.draw(GraphDraw(self.rng, self.tensor_types()))
        if not self.library_takes(op.name, sample):
            return False
        saved = self.snapshot()
        try:
            attrs = op.make_attrs(sample.attrs)
            parts = [self.argument(entry, sample) for entry in sample.inputs]
            types = [t for _, t in parts]
            if op.extras.get("constant_args"):
                # Its type reads constant argument values (arange's length, the qnn scales).
                result = op.type_rel(types, attrs, [constant_data(p) for p, _ in parts])  # type: ignore[call-arg]  # see OpDef.extras
            else:
                result = op.type_rel(types, attrs)
        except (TypeRelationError, AttrError):
            self.restore(saved)
            return False
        if not _small_enough(result):
            self.restore(saved)
            return False
        call = Call(Op.get(op.name), tuple(p for p, _ in parts), attrs)
        self.ops.append(op.name)
        if isinstance(result, TupleType):
            for index, field_ty in enumerate(result.fields):
                if isinstance(field_ty, TensorType):
                    self.add_value(TupleGetItem(call, index), field_ty)
        else:
            assert isinstance(result, TensorType)
            self.add_value(call, result)
        return True

    def try_motif(self, motif: Motif) -> bool:
        """Draws a chain of calls shaped like `motif`'s pattern; False when a call of it could
        not be drawn the way the codegen takes it."""
        saved = self.snapshot()
        below: Expr | None = None
        below_ty: TensorType | None = None
        for link in motif.chain:
            op = ops.get(link.op)
            sample = self._region_sample(motif, link, below_ty)
            if sample is None or op.domain is None:
                self.restore(saved)
                return False
            try:
                attrs = op.make_attrs(sample.attrs)
                parts = []
                for k, entry in enumerate(sample.inputs):
                    if k == link.inner_at and below is not None:
                        parts.append((below, below_ty))
                    elif k in link.constants and isinstance(entry, TensorType):
                        parts.append((Constant(random_array(entry, sample, self.rng)), entry))
                    else:
                        # Above the first call, an operand read from the model might be
                        # computed from the chain itself (a bias reshaped from the dense below
                        # it): no region could hold that.
                        parts.append(self.argument(entry, sample, connect=below is None))
                result = op.type_rel([t for _, t in parts], attrs)
            except (TypeRelationError, AttrError):
                self.restore(saved)
                return False
            if not isinstance(result, TensorType) or not _small_enough(result):
                self.restore(saved)
                return False
            call = Call(Op.get(op.name), tuple(p for p, _ in parts), attrs)
            self.ops.append(op.name)
            if below is not None:
                self.reads[below] += 1
            self.add_value(call, result)
            below, below_ty = call, result
        self.motifs[motif.codegen] = self.motifs.get(motif.codegen, 0) + 1
        return True

    def _region_sample(self, motif: Motif, link: Link, below: TensorType | None) -> Sample | None:
        op = ops.get(link.op)
        if op.domain is None:
            return None
        for _ in range(REGION_ATTEMPTS):
            sample = op.domain.draw(RegionDraw(self.rng, below, float32=not motif.any_attrs))
            if region_friendly(motif, link, sample, below) and self.library_takes(link.op, sample):
                return sample
        return None

    def outputs(self) -> list[Expr]:
        sinks = [v for v in self.values if self.reads[v] == 0]
        chosen = sinks[-self.options.max_outputs:]
        inner = [v for v in self.values if self.reads[v] > 0 and v not in chosen]
        if inner and len(chosen) < self.options.max_outputs and self.rng.random() < self.options.extra_output_chance:
            chosen.insert(0, inner[int(self.rng.integers(0, len(inner)))])
        return chosen


def _adaptable(have: TensorType, want: TensorType, how: str) -> bool:
    if have.is_dynamic or want.is_dynamic:
        return False
    if how == "same":
        return have == want
    if how == "reshape":
        # Not through empty tensors: a 0 in newshape means "keep this dim" to reshape.
        count = math.prod(_dims(want))
        return have.dtype == want.dtype and math.prod(_dims(have)) == count > 0 and have.ndim > 0
    # Casts between floats only: a float-to-int cast makes the compiled result depend on
    # rounding differences a tolerance cannot absorb.
    return have.shape == want.shape and have.dtype.startswith("float") and want.dtype.startswith("float")


def _ops_in(body: Expr) -> list[str]:
    return [n.op.name for n in post_order(body) if isinstance(n, Call) and isinstance(n.op, Op)]


def _drawable(found: list[Motif], names: Sequence[str] | None) -> list[Motif]:
    """The motifs whose ops are all among `names` (all of them when `names` is None)."""
    return [m for m in found if names is None or all(link.op in names for link in m.chain)]


def _small_enough(ty: Type) -> bool:
    if isinstance(ty, TupleType):
        return all(_small_enough(f) for f in ty.fields)
    return isinstance(ty, TensorType) and not ty.is_dynamic and math.prod(_dims(ty)) <= MAX_ELEMENTS


def generate(seed: int, options: GeneratorOptions = GeneratorOptions()) -> GeneratedModel:
    """The model of `seed`: 1 to `max_ops` calls, typed, with its inputs."""
    rng = np.random.default_rng(seed)
    candidates = generatable_ops(options.ops)
    if not candidates:
        raise ValueError("no operator to generate from (none has a domain and loops)")
    weights = np.array([_weight(op) for op in candidates])
    weights /= weights.sum()
    builder = _Builder(rng, options)
    # The target first: it decides which codegens' patterns are drawn.
    target = options.targets[int(rng.integers(0, len(options.targets)))]
    specs = options.codegen_specs(target)
    # A codegen first, then one of its patterns: each codegen of the target gets its regions.
    shapes = [found for found in (_drawable(motifs(spec), options.ops) for spec in specs) if found]
    builder.claim([m for found in shapes for m in found])
    wanted = int(rng.integers(options.min_ops, options.max_ops + 1))
    attempts = 0
    while len(builder.ops) < wanted and attempts < wanted * 10:
        attempts += 1
        if shapes and rng.random() < options.region_chance:
            chosen = shapes[int(rng.integers(0, len(shapes)))]
            builder.try_motif(chosen[int(rng.integers(0, len(chosen)))])
            continue
        builder.try_call(candidates[int(rng.choice(len(candidates), p=weights))])
    outputs = builder.outputs()
    if not outputs:
        raise ValueError(f"seed {seed}: no call could be drawn in {attempts} attempts")
    body = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
    used = set(free_vars(body))
    params = tuple(p for p in builder.params if p in used)
    inputs = {p.name_hint: builder.inputs[p.name_hint] for p in params}
    module = InferType()(IRModule.from_expr(Function(params, body)))
    opt_level = options.opt_levels[int(rng.integers(0, len(options.opt_levels)))]
    return GeneratedModel(seed, module, inputs, target, opt_level, _ops_in(body), specs, builder.motifs)
