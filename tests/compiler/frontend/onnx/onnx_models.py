"""Building small ONNX models in tests, and running them three ways: onnxruntime (the
reference), our interpreter on the imported module (cheap, for per-op checks) and our
compiled C (for whole models)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from compiler.driver import BuildOptions, export, lower
from compiler.frontend.onnx import from_onnx
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

# onnxruntime 1.30 reads IR versions up to 13; onnx 1.23's helper writes a newer one.
IR_VERSION = 10

_ELEM = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "int32": TensorProto.INT32,
         "bool": TensorProto.BOOL, "float64": TensorProto.DOUBLE, "uint8": TensorProto.UINT8,
         "int8": TensorProto.INT8, "float16": TensorProto.FLOAT16}


def tensor(name: str, dtype: str, shape: Sequence[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _ELEM[dtype], shape)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes), "test", list(inputs), list(outputs),
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m)
    return m


def single_node(op_type: str, inputs: Mapping[str, np.ndarray], n_out: int = 1,
                initializers: Mapping[str, np.ndarray] | None = None, opset: int = 17,
                input_names: Sequence[str] | None = None, **attrs: object) -> onnx.ModelProto:
    """A model of one node; graph inputs (and initializers) in the node's input order."""
    names = list(input_names) if input_names is not None else [*inputs, *(initializers or {})]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    infos = [tensor(k, str(v.dtype), v.shape) for k, v in inputs.items()]
    out_infos = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    graph = helper.make_graph(
        [node], "test", infos, out_infos,
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = IR_VERSION
    # The outputs' types as ONNX's shape inference gives them (onnxruntime wants them).
    inferred = onnx.shape_inference.infer_shapes(m)
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for output in m.graph.output:
        if output.name in known and known[output.name].type.tensor_type.elem_type:
            output.CopyFrom(known[output.name])
    return m


def run_ort(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def relay_feeds(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> tuple[object, dict[str, np.ndarray]]:
    imported = from_onnx(m)
    by_onnx = {onnx_name: relay for relay, onnx_name in imported.onnx_names.items()}
    return imported, {by_onnx.get(k, k): v for k, v in feeds.items()}


def interpret(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    imported, named = relay_feeds(m, feeds)
    return run_main(imported.module, named)  # type: ignore[attr-defined]


def compile_and_run(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], outdir: Path) -> list[np.ndarray]:
    imported, named = relay_feeds(m, feeds)
    compiled = lower(imported.module, BuildOptions(), onnx_names=imported.onnx_names)  # type: ignore[attr-defined]
    export(compiled, outdir, "")
    return CompiledModule(outdir).run(named).outputs


def assert_matches_ort(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], rtol: float = 1e-5,
                       atol: float = 1e-6) -> None:
    """The interpreter on the imported model agrees with onnxruntime."""
    want = run_ort(m, feeds)
    got = interpret(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
