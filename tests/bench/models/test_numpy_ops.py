import math

import numpy as np

from bench.models import numpy_ops as npo


def direct_conv2d(x, w, stride, pad):
    """The definition, one output element at a time."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, width = x.shape
    oc, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (width - kw) // stride + 1
    out = np.zeros((n, oc, oh, ow), np.float64)
    for o in range(oc):
        for i in range(oh):
            for j in range(ow):
                window = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, o, i, j] = (window * w[o]).sum(axis=(1, 2, 3))
    return out


def test_conv2d_matches_the_definition_with_stride_and_padding():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 3, 9, 9)), rng.standard_normal((4, 3, 3, 3))
    for stride, pad in ((1, 1), (2, 1), (2, 0)):
        np.testing.assert_allclose(npo.conv2d(x, w, stride, pad), direct_conv2d(x, w, stride, pad), rtol=1e-12)


def test_pointwise_conv2d_with_stride_subsamples():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 4, 8, 8)), rng.standard_normal((6, 4, 1, 1))
    np.testing.assert_allclose(npo.conv2d(x, w, 2, 0), direct_conv2d(x, w, 2, 0), rtol=1e-12)


def test_max_pool2d_pads_with_minus_infinity():
    x = -np.ones((1, 1, 4, 4))
    assert (npo.max_pool2d(x, 3, 2, 1) == -1).all()


def test_erf_is_within_its_published_bound():
    xs = np.linspace(-4, 4, 801)
    exact = np.array([math.erf(v) for v in xs])
    assert np.abs(npo.erf(xs) - exact).max() < 1.5e-7


def test_layer_norm_normalizes_the_last_axis():
    x = np.random.default_rng(2).standard_normal((3, 16))
    y = npo.layer_norm(x, np.ones(16), np.zeros(16), eps=0.0)
    np.testing.assert_allclose(y.mean(axis=-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.std(axis=-1), 1, rtol=1e-12)
