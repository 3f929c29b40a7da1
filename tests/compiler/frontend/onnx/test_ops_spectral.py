"""compiler.frontend.onnx.ops_spectral: DFT against numpy's FFT."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import interpret, single_node

RNG = np.random.default_rng(3)
REAL = RNG.standard_normal((2, 8, 3, 1)).astype("float32")
COMPLEX = RNG.standard_normal((2, 8, 3, 2)).astype("float32")


def _complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1]


def _parts(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def test_forward_dft_of_a_real_signal_along_axis_two() -> None:
    (got,) = interpret(single_node("DFT", {"x": REAL}, opset=19, axis=2), {"x": REAL})
    np.testing.assert_allclose(got, _parts(np.fft.fft(REAL[..., 0], axis=2)), atol=1e-5)


def test_inverse_dft_of_a_complex_spectrum() -> None:
    (got,) = interpret(single_node("DFT", {"x": COMPLEX}, opset=19, axis=1, inverse=1), {"x": COMPLEX})
    np.testing.assert_allclose(got, _parts(np.fft.ifft(_complex(COMPLEX), axis=1)), atol=1e-6)


def test_onesided_forward_and_inverse_are_rfft_and_irfft() -> None:
    (half,) = interpret(single_node("DFT", {"x": REAL}, opset=19, axis=1, onesided=1), {"x": REAL})
    np.testing.assert_allclose(half, _parts(np.fft.rfft(REAL[..., 0], axis=1)), atol=1e-5)
    (back,) = interpret(single_node("DFT", {"x": half}, opset=19, axis=1, onesided=1, inverse=1), {"x": half})
    np.testing.assert_allclose(back[..., 0], REAL[..., 0], atol=1e-5)


@pytest.mark.parametrize("length", [5, 12])
def test_dft_length_truncates_or_zero_pads_the_signal(length: int) -> None:
    m = single_node("DFT", {"x": COMPLEX}, initializers={"n": np.array(length), "axis": np.array(1)},
                    input_names=["x", "n", "axis"], opset=20)
    (got,) = interpret(m, {"x": COMPLEX})
    np.testing.assert_allclose(got, _parts(np.fft.fft(_complex(COMPLEX), n=length, axis=1)), atol=1e-5)


def test_dft_along_the_complex_axis_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="DFT .*the last axis holds the real and imaginary parts"):
        from_onnx(single_node("DFT", {"x": REAL}, opset=19, axis=-1))
