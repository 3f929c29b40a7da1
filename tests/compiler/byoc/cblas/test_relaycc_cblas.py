"""The cblas codegen's C library, called directly: DLTensors built with cffi over numpy arrays,
results compared with numpy, and every kind of bad argument answered with its error code."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cffi
import numpy as np
import pytest

from compiler.byoc.cblas import LIBRARY_SOURCE
from compiler.backend.dlpack import HEADER_NAME, HEADER_TEXT
from compiler.runtime.build import build_shared_library

OK, NULL_TENSOR, BAD_DTYPE, BAD_RANK, BAD_SHAPE, NOT_CONTIGUOUS, BAD_ATTR, SMALL_SCRATCH = range(8)

# DLPack's layout, spelled for cffi (which reads no preprocessor lines), and the kernels.
CDEF = """
typedef struct { int device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
} DLTensor;
int32_t relaycc_cblas_dense(DLTensor*, DLTensor*, DLTensor*);
int32_t relaycc_cblas_dense_bias(DLTensor*, DLTensor*, DLTensor*, DLTensor*);
int32_t relaycc_cblas_dense_bias_relu(DLTensor*, DLTensor*, DLTensor*, DLTensor*);
int32_t relaycc_cblas_batch_matmul(DLTensor*, DLTensor*, DLTensor*, int64_t, int64_t);
int32_t relaycc_cblas_conv2d(DLTensor*, DLTensor*, DLTensor*, DLTensor*,
                             int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
int32_t relaycc_cblas_conv2d_bias(DLTensor*, DLTensor*, DLTensor*, DLTensor*, DLTensor*,
                                  int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
int32_t relaycc_cblas_conv2d_bias_relu(DLTensor*, DLTensor*, DLTensor*, DLTensor*, DLTensor*,
                                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
"""
_TYPE_CODES = {"i": 0, "u": 1, "f": 2}


class Kernels:
    """The built library; `call` turns numpy arrays into DLTensor pointers and passes ints on."""

    def __init__(self, path: Path):
        self.ffi = cffi.FFI()
        self.ffi.cdef(CDEF)
        self.lib = self.ffi.dlopen(str(path))

    def tensor(self, array: np.ndarray, keep: list[object], strides: Sequence[int] | None = None,
               byte_offset: int = 0) -> object:
        t = self.ffi.new("DLTensor*")
        shape = self.ffi.new("int64_t[]", list(array.shape) or [0])
        keep += [t, shape, array]
        t.data = self.ffi.cast("void*", array.ctypes.data)
        t.device.device_type, t.device.device_id = 1, 0
        t.ndim = array.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = _TYPE_CODES[array.dtype.kind], array.dtype.itemsize * 8, 1
        t.shape = shape
        if strides is not None:
            owned = self.ffi.new("int64_t[]", list(strides))
            keep.append(owned)
            t.strides = owned
        t.byte_offset = byte_offset
        return t

    def call(self, name: str, *args: np.ndarray | int | None) -> int:
        keep: list[object] = []
        converted = [
            self.ffi.NULL if a is None else a if isinstance(a, int) else self.tensor(a, keep) for a in args
        ]
        return getattr(self.lib, f"relaycc_cblas_{name}")(*converted)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    directory = tmp_path_factory.mktemp("cblas")
    (directory / HEADER_NAME).write_text(HEADER_TEXT)
    path = build_shared_library([LIBRARY_SOURCE], directory / "librelaycc_cblas.so", include_dirs=[directory],
                                libraries=["openblas"])
    return Kernels(path)


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def conv2d_reference(x: np.ndarray, w: np.ndarray, strides: tuple[int, int], padding: tuple[int, int, int, int],
                     dilation: tuple[int, int]) -> np.ndarray:
    """NCHW x OIHW, padding (top, left, bottom, right), accumulated in float64."""
    top, left, bottom, right = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    kh, kw = w.shape[2:]
    sh, sw = strides
    dh, dw = dilation
    oh = (xp.shape[2] - ((kh - 1) * dh + 1)) // sh + 1
    ow = (xp.shape[3] - ((kw - 1) * dw + 1)) // sw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky * dh : ky * dh + (oh - 1) * sh + 1 : sh, kx * dw : kx * dw + (ow - 1) * sw + 1 : sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx])
    return out.astype(np.float32)


def scratch_for(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The im2col scratch one image needs: C*KH*KW x OH*OW floats, as bytes."""
    return np.zeros(x.shape[1] * w.shape[2] * w.shape[3] * out.shape[2] * out.shape[3] * 4, np.uint8)


# --- dense ----------------------------------------------------------------------------------


@pytest.mark.parametrize("data_shape, units", [((5, 7), 3), ((2, 4, 6), 5), ((7,), 4), ((1, 1), 1)])
def test_dense_multiplies_by_the_transposed_weight(kernels: Kernels, data_shape: tuple[int, ...], units: int) -> None:
    rng = np.random.default_rng(0)
    x, w = rand(rng, *data_shape), rand(rng, units, data_shape[-1])
    out = np.full((*data_shape[:-1], units), np.nan, np.float32)
    assert kernels.call("dense", x, w, out) == OK
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)


def test_dense_bias_adds_the_bias_to_every_row(kernels: Kernels) -> None:
    rng = np.random.default_rng(1)
    x, w, b = rand(rng, 6, 9), rand(rng, 4, 9), rand(rng, 4)
    out = np.empty((6, 4), np.float32)
    assert kernels.call("dense_bias", x, w, b, out) == OK
    np.testing.assert_allclose(out, x @ w.T + b, rtol=1e-5, atol=1e-5)


def test_dense_bias_relu_clamps_after_the_bias(kernels: Kernels) -> None:
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, 3, 2, 8), rand(rng, 16, 8), rand(rng, 16)
    out = np.empty((3, 2, 16), np.float32)
    assert kernels.call("dense_bias_relu", x, w, b, out) == OK
    expected = np.maximum(x @ w.T + b, 0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert (out == 0).any() and (out > 0).any()


def test_dense_with_an_empty_reduction_gives_the_bias(kernels: Kernels) -> None:
    x, w, b = np.zeros((3, 0), np.float32), np.zeros((2, 0), np.float32), np.array([1.5, -2], np.float32)
    out = np.full((3, 2), np.nan, np.float32)
    assert kernels.call("dense_bias_relu", x, w, b, out) == OK
    np.testing.assert_array_equal(out, [[1.5, 0]] * 3)


# --- batch_matmul ---------------------------------------------------------------------------


@pytest.mark.parametrize("transpose_a", [0, 1])
@pytest.mark.parametrize("transpose_b", [0, 1])
@pytest.mark.parametrize("batch_a, batch_b", [(3, 3), (1, 3), (3, 1)])
def test_batch_matmul_transposes_and_broadcasts_like_numpy(
    kernels: Kernels, transpose_a: int, transpose_b: int, batch_a: int, batch_b: int
) -> None:
    rng = np.random.default_rng(3)
    m, k, n = 4, 5, 6
    a = rand(rng, batch_a, *((k, m) if transpose_a else (m, k)))
    b = rand(rng, batch_b, *((n, k) if transpose_b else (k, n)))
    out = np.full((max(batch_a, batch_b), m, n), np.nan, np.float32)
    assert kernels.call("batch_matmul", a, b, out, transpose_a, transpose_b) == OK
    lhs = a.transpose(0, 2, 1) if transpose_a else a
    rhs = b.transpose(0, 2, 1) if transpose_b else b
    np.testing.assert_allclose(out, lhs @ rhs, rtol=1e-5, atol=1e-5)


def test_batch_matmul_rejects_batches_that_do_not_broadcast(kernels: Kernels) -> None:
    a, b = np.zeros((2, 3, 4), np.float32), np.zeros((3, 4, 5), np.float32)
    assert kernels.call("batch_matmul", a, b, np.zeros((3, 3, 5), np.float32), 0, 0) == BAD_SHAPE


def test_batch_matmul_rejects_transpose_flags_other_than_0_and_1(kernels: Kernels) -> None:
    a, b, out = np.zeros((1, 3, 4), np.float32), np.zeros((1, 4, 5), np.float32), np.zeros((1, 3, 5), np.float32)
    assert kernels.call("batch_matmul", a, b, out, 2, 0) == BAD_ATTR


# --- conv2d ---------------------------------------------------------------------------------

CONV_CASES = [
    # data shape, weight shape, strides, padding (top, left, bottom, right), dilation
    ((2, 3, 9, 9), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 2, 10, 11), (3, 2, 3, 2), (2, 3), (0, 2, 1, 0), (1, 1)),
    ((1, 4, 12, 12), (2, 4, 3, 3), (1, 2), (2, 2, 2, 2), (2, 3)),
    ((2, 5, 6, 7), (8, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 3, 7, 7), (2, 3, 1, 1), (2, 2), (1, 0, 0, 1), (1, 1)),
]


@pytest.mark.parametrize("data_shape, weight_shape, strides, padding, dilation", CONV_CASES)
def test_conv2d_matches_a_direct_convolution(
    kernels: Kernels, data_shape: tuple[int, ...], weight_shape: tuple[int, ...], strides: tuple[int, int],
    padding: tuple[int, int, int, int], dilation: tuple[int, int],
) -> None:
    rng = np.random.default_rng(4)
    x, w = rand(rng, *data_shape), rand(rng, *weight_shape)
    expected = conv2d_reference(x, w, strides, padding, dilation)
    out = np.full(expected.shape, np.nan, np.float32)
    status = kernels.call("conv2d", x, w, out, scratch_for(x, w, out), *strides, *padding, *dilation)
    assert status == OK
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("relu", [False, True])
def test_conv2d_bias_adds_one_bias_per_output_channel(kernels: Kernels, relu: bool) -> None:
    rng = np.random.default_rng(5)
    x, w, b = rand(rng, 2, 3, 8, 8), rand(rng, 5, 3, 3, 3), rand(rng, 5)
    expected = conv2d_reference(x, w, (1, 1), (1, 1, 1, 1), (1, 1)) + b[:, None, None]
    if relu:
        expected = np.maximum(expected, 0)
    out = np.full(expected.shape, np.nan, np.float32)
    name = "conv2d_bias_relu" if relu else "conv2d_bias"
    assert kernels.call(name, x, w, b, out, scratch_for(x, w, out), 1, 1, 1, 1, 1, 1, 1, 1) == OK
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_pointwise_conv2d_reads_the_image_without_scratch(kernels: Kernels) -> None:
    rng = np.random.default_rng(6)
    x, w = rand(rng, 1, 4, 5, 5), rand(rng, 3, 4, 1, 1)
    out = np.empty((1, 3, 5, 5), np.float32)
    assert kernels.call("conv2d", x, w, out, np.zeros(0, np.uint8), 1, 1, 0, 0, 0, 0, 1, 1) == OK
    np.testing.assert_allclose(out, np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]), rtol=1e-5, atol=1e-5)


def test_conv2d_refuses_a_scratch_buffer_too_small_for_im2col(kernels: Kernels) -> None:
    x, w = np.ones((1, 2, 4, 4), np.float32), np.ones((1, 2, 3, 3), np.float32)
    out = np.full((1, 1, 2, 2), 7, np.float32)
    scratch = scratch_for(x, w, out)
    assert kernels.call("conv2d", x, w, out, scratch[:-1], 1, 1, 0, 0, 0, 0, 1, 1) == SMALL_SCRATCH
    assert kernels.call("conv2d", x, w, out, scratch.view(np.int8), 1, 1, 0, 0, 0, 0, 1, 1) == BAD_DTYPE
    assert (out == 7).all()


@pytest.mark.parametrize("attrs", [(0, 1, 0, 0, 0, 0, 1, 1), (1, 1, -1, 0, 0, 0, 1, 1), (1, 1, 0, 0, 0, 0, 1, 0)])
def test_conv2d_rejects_nonpositive_strides_and_dilation_and_negative_padding(
    kernels: Kernels, attrs: tuple[int, ...]
) -> None:
    x, w, out = np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 3, 3), np.float32), np.zeros((1, 1, 2, 2), np.float32)
    assert kernels.call("conv2d", x, w, out, np.zeros(1024, np.uint8), *attrs) == BAD_ATTR


def test_conv2d_rejects_an_output_of_the_wrong_spatial_size(kernels: Kernels) -> None:
    x, w = np.ones((1, 1, 6, 6), np.float32), np.ones((1, 1, 3, 3), np.float32)
    out = np.zeros((1, 1, 4, 4), np.float32)  # stride 2 gives 2 x 2
    assert kernels.call("conv2d", x, w, out, np.zeros(4096, np.uint8), 2, 2, 0, 0, 0, 0, 1, 1) == BAD_SHAPE


# --- argument checks ------------------------------------------------------------------------


def test_kernels_reject_bad_tensors_before_writing_the_output(kernels: Kernels) -> None:
    x, w, b = np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), np.ones(4, np.float32)
    out = np.full((2, 4), 9, np.float32)
    assert kernels.call("dense", x.astype(np.float64), w, out) == BAD_DTYPE
    assert kernels.call("dense", x, w.reshape(4, 3, 1), out) == BAD_RANK
    assert kernels.call("dense", x, np.ones((4, 2), np.float32), out) == BAD_SHAPE
    assert kernels.call("dense", x, w, np.ones((3, 4), np.float32)) == BAD_SHAPE
    assert kernels.call("dense_bias", x, w, np.ones(5, np.float32), out) == BAD_SHAPE
    assert kernels.call("dense_bias", x, w, None, out) == NULL_TENSOR
    assert kernels.call("dense", x, None, out) == NULL_TENSOR
    assert kernels.call("conv2d_bias", np.ones((1, 2, 4, 4), np.float32), np.ones((1, 3, 3, 3), np.float32), b,
                        np.zeros((1, 1, 2, 2), np.float32), np.zeros(4096, np.uint8), 1, 1, 0, 0, 0, 0, 1, 1) == BAD_SHAPE
    assert (out == 9).all()


def test_strided_tensors_must_describe_row_major_memory(kernels: Kernels) -> None:
    rng = np.random.default_rng(7)
    x, w = rand(rng, 2, 3), rand(rng, 4, 3)
    out = np.empty((2, 4), np.float32)
    keep: list[object] = []
    compact = kernels.tensor(x, keep, strides=[3, 1])
    transposed = kernels.tensor(x, keep, strides=[1, 2])
    weight, result = kernels.tensor(w, keep), kernels.tensor(out, keep)
    assert kernels.lib.relaycc_cblas_dense(transposed, weight, result) == NOT_CONTIGUOUS
    assert kernels.lib.relaycc_cblas_dense(compact, weight, result) == OK
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)


def test_byte_offset_moves_the_first_element(kernels: Kernels) -> None:
    rng = np.random.default_rng(8)
    storage, w = rand(rng, 1 + 2 * 3), rand(rng, 4, 3)
    out = np.empty((2, 4), np.float32)
    keep: list[object] = []
    x = kernels.tensor(storage[:6].reshape(2, 3), keep, byte_offset=4)
    assert kernels.lib.relaycc_cblas_dense(x, kernels.tensor(w, keep), kernels.tensor(out, keep)) == OK
    np.testing.assert_allclose(out, storage[1:].reshape(2, 3) @ w.T, rtol=1e-5, atol=1e-5)


def test_library_calls_sgemm_from_openblas(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / HEADER_NAME).write_text(HEADER_TEXT)
    path = build_shared_library([LIBRARY_SOURCE], tmp_path / "libc.so", include_dirs=[tmp_path], libraries=["openblas"])
    symbols = subprocess.run(["nm", "-D", str(path)], capture_output=True, text=True, check=True).stdout
    assert " U cblas_sgemm" in symbols
    needed = subprocess.run(["objdump", "-p", str(path)], capture_output=True, text=True, check=True).stdout
    assert "libopenblas" in needed


def test_empty_tensors_may_have_no_memory(kernels: Kernels) -> None:
    # fuzz-diff seed 7574: a dense of an empty batch got a NULL data pointer for its 0-byte
    # tensors (DLPack allows it) and failed the whole run.
    keep: list[object] = []
    x, w = kernels.tensor(np.zeros((0, 1, 1), np.float32), keep), kernels.tensor(np.ones((20, 1), np.float32), keep)
    out = kernels.tensor(np.zeros((0, 1, 20), np.float32), keep)
    x.data = out.data = kernels.ffi.NULL
    assert kernels.lib.relaycc_cblas_dense(x, w, out) == OK
    a = kernels.tensor(np.zeros((0, 2, 3), np.float32), keep)
    b = kernels.tensor(np.zeros((0, 3, 4), np.float32), keep)
    c = kernels.tensor(np.zeros((0, 2, 4), np.float32), keep)
    a.data = b.data = c.data = kernels.ffi.NULL
    assert kernels.lib.relaycc_cblas_batch_matmul(a, b, c, 0, 0) == OK
    # A NULL pointer for a tensor that has elements is still refused.
    full = kernels.tensor(np.ones((2, 1), np.float32), keep)
    full.data = kernels.ffi.NULL
    assert kernels.lib.relaycc_cblas_dense(full, w, kernels.tensor(np.zeros((2, 20), np.float32), keep)) == NULL_TENSOR
