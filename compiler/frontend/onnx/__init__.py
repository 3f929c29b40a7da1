"""ONNX → IRModule (`relaycc import`, `relaycc compile MODEL.onnx`).

Importing this package imports `onnx`; the driver and the CLI's other commands never do."""

from compiler.frontend.onnx.importer import ImportResult, from_onnx, load_model  # noqa: F401

