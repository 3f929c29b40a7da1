"""The C interface of an AOT-compiled module: `include/tvmgen_<name>.h`.

The header follows the layout of TVM's `interface-api="c"` header (tvm-facts §6): one size
macro per input and output, `struct tvmgen_<name>_inputs` / `_outputs` holding one `void*` per
tensor, the workspace and constant pool sizes, and the entry `tvmgen_<name>_run`. We add
`tvmgen_<name>_run_with_workspace` for callers that bring their own workspace, which is what
makes concurrent runs possible.

Tensor names go through `c_name`: every character that is not a letter or digit becomes `_`
(TVM's SanitizeName); a name that would still not be a C identifier (leading digit, keyword)
gets an extra `_`. The module name is only sanitized: it always follows `tvmgen_`. Two
tensors whose struct fields or size macros would collide are an error, as in TVM, rather than
a silently renamed field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from compiler.diagnostics import Span, UnsupportedError

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline "
    "int long register restrict return short signed sizeof static struct switch typedef union "
    "unsigned void volatile while _Bool _Complex _Imaginary bool true false".split()
)


def result_names(count: int) -> list[str]:
    """The names a user sees for the results of @main (DESIGN.md's contract): `out0, out1, ...`
    in the order of @main's result, tuples flattened, a single result too. metadata.json's
    `interface.outputs[].name`, `relaycc run`/`interpret`, `inspect` and the service's run
    endpoint all use them."""
    return [f"out{i}" for i in range(count)]


def output_names(count: int, tuple_result: bool) -> list[str]:
    """The struct fields of the results in the header, TVM's AOT interface's: a single tensor
    result is `output`; the leaves of a tuple result (nested tuples flattened, a 1-tuple
    included) are `output0, output1, ...`. metadata.json lists them as `c_name`."""
    if count == 1 and not tuple_result:
        return ["output"]
    return [f"output{i}" for i in range(count)]


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of the compiled module.

    `name` is what users see: a parameter of @main without `%`, or `out<i>` for a result;
    `c_name` the field of the inputs/outputs struct (a sanitized parameter name, or TVM's
    `output` / `output<i>` for a result); `bytes` the size of its dense buffer.
    """

    name: str
    c_name: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int


def sanitize(name: str) -> str:
    """TVM's SanitizeName: every character that is not a letter or digit becomes `_`."""
    return re.sub(r"[^0-9A-Za-z]", "_", name)


def c_name(name: str) -> str:
    """A tensor name as a struct field: sanitized, and made a valid identifier if it starts
    with a digit (or is empty) or is a C keyword."""
    ident = sanitize(name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident
    if ident in C_KEYWORDS:
        ident += "_"
    return ident


def c_prefix(module_name: str) -> str:
    """`tvmgen_<name>`, the prefix of every global symbol of the module."""
    return f"tvmgen_{sanitize(module_name)}"


def macro_prefix(module_name: str) -> str:
    return c_prefix(module_name).upper()


def check_names(
    module_name: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    spans: Sequence[Span | None] = (),
) -> None:
    """Raise when two tensors share a struct field or a macro, or a size macro collides with
    the module's WORKSPACE / CONSTANT_POOL macros. `spans` locate the inputs, if known."""
    for group, what in ((inputs, "input"), (outputs, "output")):
        fields: dict[str, str] = {}
        for i, t in enumerate(group):
            other = fields.get(t.c_name)
            if other is not None:
                span = spans[i] if what == "input" and i < len(spans) else None
                raise UnsupportedError(
                    f"{what}s '{other}' and '{t.name}' both become '{t.c_name}' in the C interface", span
                )
            fields[t.c_name] = t.name
    prefix = macro_prefix(module_name)
    macros = {
        f"{prefix}_WORKSPACE_SIZE": "the workspace size",
        f"{prefix}_WORKSPACE_ALIGNMENT": "the workspace alignment",
        f"{prefix}_CONSTANT_POOL_SIZE": "the constant pool size",
    }
    for i, t in enumerate([*inputs, *outputs]):
        macro = size_macro(module_name, t)
        other = macros.get(macro)
        if other is not None:
            span = spans[i] if i < len(inputs) and i < len(spans) else None
            raise UnsupportedError(f"tensor '{t.name}' and {other} both define the C macro {macro}", span)
        macros[macro] = f"tensor '{t.name}'"


def size_macro(module_name: str, tensor: TensorInfo) -> str:
    return f"{macro_prefix(module_name)}_{tensor.c_name.upper()}_SIZE"


def _describe(t: TensorInfo) -> str:
    return f"{t.dtype}[{', '.join(str(d) for d in t.shape)}]"


def _struct(name: str, tensors: Sequence[TensorInfo]) -> list[str]:
    lines = [f"struct {name} {{"]
    lines += [f"  void* {t.c_name};" for t in tensors]
    if not tensors:
        # C has no empty structs; a placeholder keeps the type usable.
        lines.append("  void* unused_;")
    lines.append("};")
    return lines


def declarations(
    module_name: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    workspace_bytes: int,
    workspace_alignment: int,
    constant_bytes: int,
) -> list[str]:
    """The header's declarations without guards: macros, structs and entry points. cffi's
    `cdef` accepts exactly this text."""
    prefix, macros = c_prefix(module_name), macro_prefix(module_name)
    lines: list[str] = []
    for kind, group in (("input", inputs), ("output", outputs)):
        for t in group:
            lines.append(f"/* {kind} {t.name}: {_describe(t)} */")
            lines.append(f"#define {size_macro(module_name, t)} {t.bytes}")
    lines.append("")
    lines += _struct(f"{prefix}_inputs", inputs)
    lines.append("")
    lines += _struct(f"{prefix}_outputs", outputs)
    lines += [
        "",
        f"#define {macros}_WORKSPACE_SIZE {workspace_bytes}",
        f"#define {macros}_WORKSPACE_ALIGNMENT {workspace_alignment}",
        f"#define {macros}_CONSTANT_POOL_SIZE {constant_bytes}",
        "",
        run_prototype(module_name) + ";",
        run_with_workspace_prototype(module_name) + ";",
    ]
    return lines


def run_prototype(module_name: str) -> str:
    prefix = c_prefix(module_name)
    return f"int32_t {prefix}_run(struct {prefix}_inputs* inputs, struct {prefix}_outputs* outputs)"


def run_with_workspace_prototype(module_name: str) -> str:
    prefix = c_prefix(module_name)
    return (f"int32_t {prefix}_run_with_workspace(struct {prefix}_inputs* inputs, "
            f"struct {prefix}_outputs* outputs, uint8_t* workspace)")


def header_name(module_name: str) -> str:
    return f"{c_prefix(module_name)}.h"


def emit_header(
    module_name: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    workspace_bytes: int,
    workspace_alignment: int,
    constant_bytes: int,
) -> str:
    """The text of `include/tvmgen_<name>.h`."""
    prefix, macros = c_prefix(module_name), macro_prefix(module_name)
    guard = f"{macros}_H_"
    intro = [
        f"/* C interface of the module \"{module_name}\", compiled ahead of time by relaycc.",
        " *",
        f" * Point the fields of struct {prefix}_inputs and struct {prefix}_outputs at dense,",
        " * row-major buffers of the sizes below (in bytes) and call",
        f" * {prefix}_run(). It returns 0 on success and -1 when a kernel failed.",
        " *",
        f" * {prefix}_run() keeps its intermediate tensors in a static workspace inside the",
        " * library, so it is NOT reentrant: two threads must not run the module at the same time.",
        f" * For concurrent runs give each thread its own workspace of {macros}_WORKSPACE_SIZE",
        f" * bytes aligned to {macros}_WORKSPACE_ALIGNMENT bytes and call",
        f" * {prefix}_run_with_workspace() instead.",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
    ]
    outro = [
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif  /* {guard} */",
        "",
    ]
    body = declarations(module_name, inputs, outputs, workspace_bytes, workspace_alignment, constant_bytes)
    return "\n".join(intro + body + outro)


def cffi_cdef(
    module_name: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    workspace_bytes: int,
    workspace_alignment: int,
    constant_bytes: int,
) -> str:
    """The header's declarations in the form cffi's `FFI.cdef` parses (no guards, no comments)."""
    lines = declarations(module_name, inputs, outputs, workspace_bytes, workspace_alignment, constant_bytes)
    return "\n".join(line for line in lines if not line.startswith("/*")) + "\n"


# The declarations cffi needs to call the DLTensor entry of a module with `?` dims, here beside
# the static ones so that loading a built module does not import the compiler.
CFFI_DLPACK = """typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct { void* data; DLDevice device; int32_t ndim; DLDataType dtype; int64_t* shape; int64_t* strides;
                 uint64_t byte_offset; } DLTensor;
"""


def dynamic_declarations(module_name: str, inputs: list[TensorInfo], outputs: list[TensorInfo]) -> list[str]:
    prefix = c_prefix(module_name)
    lines: list[str] = []
    for kind, group in (("inputs", inputs), ("outputs", outputs)):
        lines.append(f"struct {prefix}_{kind} {{")
        lines += [f"  DLTensor* {t.c_name};" for t in group] or ["  DLTensor* unused_;"]
        lines += ["};", ""]
    lines += [
        f"int32_t {prefix}_run(struct {prefix}_inputs* inputs, struct {prefix}_outputs* outputs);",
        f"void {prefix}_free(void* data);",
        f"void {prefix}_release(void);",
    ]
    return lines


def dynamic_cffi_cdef(module_name: str, inputs: list[TensorInfo], outputs: list[TensorInfo]) -> str:
    return CFFI_DLPACK + "\n".join(dynamic_declarations(module_name, inputs, outputs)) + "\n"
