"""Relay passes. Each pass is one module named after it."""

from compiler.passes.pass_infra import Pass, PassContext, PassTimer, Sequential  # noqa: F401
