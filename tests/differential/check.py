"""One generated model, checked every way it can be: the differential oracle.

* print, then parse: the same module;
* the reference interpreter runs it;
* the compiled library runs it and agrees with the interpreter: integer and bool outputs bit
  for bit, float outputs within a tolerance that allows for a chain of rounded operations;
* the memory plan passes the independent checker (plan_check.py).

The outcome is `matched`, `mismatched` (a silent wrong answer: the bug class this exists for)
or `crashed` (a stage raised: the stage and the error are kept).
"""

from __future__ import annotations

import re
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compiler import ops
from compiler.diagnostics import CompileError, InputError, UnsupportedError
from compiler.driver import BuildOptions, export, lower
from compiler.ir.expr import Call, Function, Op, Tuple
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType, TupleType
from compiler.ir.visitor import post_order
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule
from compiler.testing.generate import GeneratedModel
from compiler.testing.shrink import intermediate_values
from tests.differential.plan_check import plan_problems

# Float outputs: relative to max(1, |expected|) per element. A model is a chain of up to 60
# rounded operations whose errors the interpreter (float64 inside each op) does not make.
# float16 keeps 11 bits, and TVM (like us) accumulates float16 products in float16: a dot
# product of 65 terms is off by a few percent of its terms' scale (fuzz-diff seed 201928).
RTOL = {"float16": 5e-2, "float32": 2e-4, "float64": 1e-9}
# Step functions of floats and where they jump: an argument within the float tolerance of a
# jump may land on either side of it, and the result then differs by one step.
STEP_OPS = {"floor": 0.0, "ceil": 0.0, "trunc": 0.0, "round": 0.5, "sign": None}


@dataclass
class Outcome:
    kind: str  # matched | mismatched | crashed
    stage: str = ""
    message: str = ""
    fusion_kinds: list[str] = field(default_factory=list)
    plan_checked: bool = False
    # Per external codegen, the functions it took over (its BYOC regions).
    regions: dict[str, int] = field(default_factory=dict)
    # The same model with a `?` first dim on its first input (every DYNAMIC_EVERY-th seed):
    # "matched", "refused" (a located UnsupportedError or a run-time shape refusal: the
    # dynamic path does not take it yet) or "" when not tried or not typeable.
    dynamic: str = ""

    def __str__(self) -> str:
        return f"{self.kind} at {self.stage}: {self.message}" if self.stage else self.kind


def weakest_float(mod: IRModule) -> str | None:
    """The least precise float dtype of any value in @main: an error made there (one ulp of a
    float32 acosh) survives a later cast to float64, so it sets the tolerance of every output."""
    main = mod[mod.get_global_var("main")]
    dtypes = {
        t.dtype for node in post_order(main) if node.has_type
        for t in _tensor_types(node.checked_type) if t.dtype in RTOL
    }
    return max(dtypes, key=lambda d: RTOL[d], default=None)


def _tensor_types(ty: object) -> list[TensorType]:
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _tensor_types(f)]
    return []


def compare(
    actual: list[np.ndarray],
    expected: list[np.ndarray],
    weakest: str | None = None,
    from_floats: frozenset[int] = frozenset(),
    near_steps: dict[int, np.ndarray] | None = None,
) -> str | None:
    """Why the compiled outputs differ from the interpreter's, or None. Float outputs are
    compared at the tolerance of their own dtype or of `weakest`, whichever is looser.
    Integer outputs are compared bit for bit, except those in `from_floats` (computed from
    float values through argmax, a comparison, a cast...): a near-tie that rounding decides
    differently may flip one element in a hundred of those (fuzz-diff seed 202570).
    `near_steps[k]` marks the elements of output `k` (a step function of a float value) whose
    argument lies within the tolerance of a jump: those may differ by one step (fuzz-diff seed
    1000060: floor of a float16 log_softmax of -3e-5, which float16 arithmetic makes 0)."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, interpreter has {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        e = np.asarray(e)
        if a.dtype != e.dtype or a.shape != e.shape:
            return f"output {k}: {a.dtype}{list(a.shape)}, interpreter {e.dtype}{list(e.shape)}"
        if a.dtype.kind != "f":
            bad = np.flatnonzero(a.reshape(-1) != e.reshape(-1))
            if k in from_floats and bad.size <= max(1, a.size // 100):
                continue
        else:
            a64, e64 = a.astype(np.float64), e.astype(np.float64)
            with np.errstate(invalid="ignore"):
                rtol = max(RTOL[str(a.dtype)], RTOL.get(weakest or "", 0.0))
                close = np.abs(a64 - e64) <= rtol * np.maximum(np.abs(e64), 1.0)
            # Infinities and NaNs match only themselves (inf - inf is within any tolerance).
            close &= np.isfinite(a64) & np.isfinite(e64)
            close |= (np.isnan(a64) & np.isnan(e64)) | (a64 == e64)
            # Near the top of the dtype's range the compiled code's narrower accumulators may
            # overflow where the float64 reference stays finite: an infinity of the right sign.
            huge = float(np.finfo(a.dtype).max) / 256
            with np.errstate(invalid="ignore"):
                close |= np.isinf(a64) & (np.sign(a64) == np.sign(e64)) & (np.abs(e64) > huge)
            if near_steps and k in near_steps:
                with np.errstate(invalid="ignore"):
                    close |= near_steps[k] & (np.abs(a64 - e64) <= 1.0)
            bad = np.flatnonzero(~close.reshape(-1))
        if bad.size:
            i = int(bad[0])
            return (f"output {k}: {bad.size} of {a.size} elements differ; first at flat index {i}: "
                    f"compiled {a.reshape(-1)[i]!r}, interpreter {e.reshape(-1)[i]!r}")
    return None


def check(model: GeneratedModel, workdir: Path) -> Outcome:
    stage = "print/parse"
    try:
        text = model.text
        reparsed = parse(text, f"seed{model.seed}.relay")
        if not structural_equal(reparsed, model.module):
            return Outcome("mismatched", stage, "printing then parsing gives a different module")
        stage = "interpret"
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            expected = run_main(model.module, model.inputs)
        stage = "compile"
        options = BuildOptions(target=model.target, opt_level=model.opt_level, module_name="fuzz",
                               codegens=model.codegens)
        compiled = lower(model.module, options)
        assert compiled.aot is not None
        kinds = fusion_kinds(compiled.source)
        regions = region_counts(compiled.source)
        problems = plan_problems(compiled.aot)
        if problems:
            return Outcome("mismatched", "memory plan", "; ".join(problems[:3]), kinds, True, regions)
        export(compiled, workdir, text)
        stage = "run"
        actual = CompiledModule(workdir).run(model.inputs).outputs
    except Exception as err:  # noqa: BLE001  every failure of any stage is a finding
        last = traceback.extract_tb(err.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno}"
        return Outcome("crashed", stage, f"{type(err).__name__}: {err} ({where})")
    weakest = weakest_float(model.module)
    difference = compare(actual, expected, weakest, integers_from_floats(model.module),
                         steps_near_jumps(model, weakest) if _has_step_outputs(model.module) else None)
    if difference and near_overflow(model):
        # A value at the edge of its dtype's range (the lowest float a max_pool window with no
        # input yields, an exp of exp) overflows float32 sums the float64 reference keeps: the
        # float outputs say nothing then; the others must still match.
        floats = [a.dtype.kind == "f" for a in actual]
        difference = compare([a for a, f in zip(actual, floats) if not f],
                             [np.asarray(e) for e, f in zip(expected, floats) if not f])
        if not difference:
            return Outcome("matched", "", "float outputs not compared: values near overflow", kinds, True, regions)
    if difference:
        return Outcome("mismatched", "compare", difference, kinds, True, regions)
    if model.seed % DYNAMIC_EVERY == 0:
        dynamic = check_dynamic_variant(model, workdir / "dynamic", expected)
        if isinstance(dynamic, Outcome):
            return dynamic
        return Outcome("matched", "", "", kinds, True, regions, dynamic)
    return Outcome("matched", "", "", kinds, True, regions)


DYNAMIC_EVERY = 3
_MAIN_PARAMS = re.compile(r"^def @main\((.*?)\)( -> .*)? \{$", re.MULTILINE)


def dynamic_text(text: str) -> str | None:
    """`text` with the first dim of @main's first tensor input written `?` (and @main's
    declared result left to inference), or None when no input has a dim."""
    match = _MAIN_PARAMS.search(text)
    if match is None:
        return None
    # Only the first tensor input: the others are often weights, whose `?` dims no kernel takes.
    params, count = re.subn(r"Tensor\[\((\d+)(,|\))", r"Tensor[(?\2", match.group(1), count=1)
    if not count:
        return None
    return text[:match.start()] + f"def @main({params}) {{" + text[match.end():]


def check_dynamic_variant(model: GeneratedModel, workdir: Path, expected: list[np.ndarray]) -> Outcome | str:
    """Compile the model again with `?` input dims and run it on the same inputs: a wrong
    answer or a crash is a finding (an Outcome); the dynamic path refusing the model is not."""
    text = dynamic_text(model.text)
    if text is None:
        return ""
    try:
        module = parse(text, f"seed{model.seed}-dynamic.relay")
    except CompileError:
        return ""  # an op whose type relation needs the static dims (TVM's too)
    stage = "dynamic compile"
    try:
        options = BuildOptions(target=model.target, opt_level=model.opt_level, module_name="fuzz",
                               codegens=model.codegens)
        export(lower(module, options), workdir, text)
        stage = "dynamic run"
        actual = CompiledModule(workdir).run(model.inputs).outputs
    except UnsupportedError as err:
        return f"refused: {err.message}"
    except InputError as err:
        if "returned -5" in str(err):
            return "refused: -5"  # shapes a kernel was built for differently: refused at run time
        return Outcome("crashed", stage, f"InputError: {err}")
    except Exception as err:  # noqa: BLE001  every failure of any stage is a finding
        last = traceback.extract_tb(err.__traceback__)[-1]
        return Outcome("crashed", stage, f"{type(err).__name__}: {err} ({Path(last.filename).name}:{last.lineno})")
    weakest = weakest_float(model.module)
    difference = compare(actual, expected, weakest, integers_from_floats(model.module),
                         steps_near_jumps(model, weakest) if _has_step_outputs(model.module) else None)
    if difference and not near_overflow(model):
        return Outcome("mismatched", "dynamic compare", difference)
    return "matched"


def integers_from_floats(mod: IRModule) -> frozenset[int]:
    """Positions of @main's integer or bool results that depend on a float value."""
    main = mod[mod.get_global_var("main")]
    body = main.body
    results = list(body.fields) if isinstance(body, Tuple) else [body]
    tainted = set()
    for k, result in enumerate(results):
        ty = result.checked_type
        if isinstance(ty, TensorType) and not ty.dtype.startswith("float") and any(
            t.dtype.startswith("float")
            for node in post_order(result) if node.has_type for t in _tensor_types(node.checked_type)
        ):
            tainted.add(k)
    return frozenset(tainted)


def _step_outputs(mod: IRModule) -> dict[int, Call]:
    """@main's results that are a step function (STEP_OPS) of a float value."""
    body = mod[mod.get_global_var("main")].body
    results = list(body.fields) if isinstance(body, Tuple) else [body]
    return {
        k: r for k, r in enumerate(results)
        if isinstance(r, Call) and isinstance(r.op, Op) and r.op.name in STEP_OPS
        and isinstance(r.checked_type, TensorType) and r.checked_type.dtype in RTOL
    }


def _has_step_outputs(mod: IRModule) -> bool:
    return bool(_step_outputs(mod))


def steps_near_jumps(model: GeneratedModel, weakest: str | None) -> dict[int, np.ndarray]:
    """For each result that is a step function of a float value, which of its elements have
    an argument (as the interpreter computes it) within the float tolerance of a jump."""
    outputs = _step_outputs(model.module)
    values = intermediate_values(model)
    near: dict[int, np.ndarray] = {}
    for k, call in outputs.items():
        arg = call.args[0]
        x = values.get(arg, model.inputs.get(getattr(arg, "name_hint", ""), None))
        if x is None:
            continue
        x = np.asarray(x, dtype=np.float64)
        rtol = max(RTOL[call.checked_type.dtype], RTOL.get(weakest or "", 0.0))  # type: ignore[union-attr]
        offset = STEP_OPS[call.op.name]  # type: ignore[union-attr]
        with np.errstate(invalid="ignore"):
            jump = np.zeros_like(x) if offset is None else np.round(x - offset) + offset
            near[k] = np.abs(x - jump) <= rtol * np.maximum(np.abs(x), 1.0)
    return near


def near_overflow(model: GeneratedModel) -> bool:
    """Whether some float value of the model, as the interpreter computes it, is infinite or
    within a factor 256 of its dtype's largest value (NaNs alone are not overflow)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        values = [*intermediate_values(model).values(), *model.inputs.values()]
    for value in values:
        if value.dtype.kind == "f" and value.size:
            huge = float(np.finfo(value.dtype).max) / 256
            magnitude = np.abs(value[~np.isnan(value)])
            if magnitude.size and float(magnitude.max()) > huge:
                return True
    return False


def fusion_kinds(mod: IRModule) -> list[str]:
    """Each primitive function as the pattern kinds of its ops, strongest first
    ("OUT_ELEMWISE_FUSABLE+ELEMWISE"): which kinds of fusion the model exercised."""
    kinds = []
    for _, func in mod.items():
        if not isinstance(func, Function):
            continue
        for node in post_order(func):
            if isinstance(node, Function) and node.attrs.get("Primitive"):
                patterns = {
                    ops.get(call.op.name).pattern for call in post_order(node.body)
                    if isinstance(call, Call) and isinstance(call.op, Op)
                }
                kinds.append("+".join(p.name for p in sorted(patterns, reverse=True)))
    return kinds


def region_counts(mod: IRModule) -> dict[str, int]:
    """Per external codegen, how many functions of the built module it owns (`Compiler`)."""
    counts: dict[str, int] = {}
    for _, func in mod.items():
        compiler = getattr(func, "attrs", {}).get("Compiler")
        if isinstance(func, Function) and isinstance(compiler, str):
            counts[compiler] = counts.get(compiler, 0) + 1
    return counts
