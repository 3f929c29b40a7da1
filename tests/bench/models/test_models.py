"""Every benchmark model, on tiny shapes: relaycc's build of its Relay text and its torch module
agree with its numpy forward (the reference every peer is checked against)."""

import numpy as np
import pytest

from bench.models import MODELS, TINY, get, resnet
from bench.worker import agreement
from compiler.driver import BuildOptions, build
from compiler.parser import parse
from compiler.passes.infer_type import InferType
from compiler.runtime.module import CompiledModule

# The ResNets take 5-15 s to build even on tiny shapes (50-odd kernels through gcc): their text is
# type-checked here and checked against the reference by every run of the benchmark itself.
BUILT = ["mlp_b1", "cnn", "transformer"]


def test_every_model_has_a_tiny_version():
    assert set(TINY) == set(MODELS)


@pytest.mark.parametrize("name", BUILT)
def test_relaycc_build_matches_numpy_forward(name, tmp_path):
    model = get(name, tiny=True)
    build(model.relay, tmp_path, BuildOptions(), model.params)
    (output,) = CompiledModule(tmp_path).run(model.inputs).outputs
    np.testing.assert_allclose(output, model.reference(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("name", "dtype"), [("resnet50", "float32"), ("resnet50_fp16", "float16")])
def test_resnet_types_in_its_dtype(name, dtype):
    model = get(name, tiny=True)
    mod = InferType()(parse(model.relay))
    ret = mod["main"].checked_type.ret_type
    assert (ret.dtype, tuple(int(d) for d in ret.shape)) == (dtype, (1, 10))
    assert {a.dtype for a in (*model.inputs.values(), *model.params.values())} == {np.dtype(dtype)}


def test_full_resnet_counts_torchvisions_flops():
    # torchvision lists ResNet-50 at 4.09 GMACs.
    assert resnet.work(resnet.plan((3, 4, 6, 3), 64), 64, 224, 1000) == 8_178_368_512


def test_float16_reference_is_float32_math_on_the_rounded_weights():
    model = get("mlp_b1", tiny=True)
    assert model.reference().dtype == np.float32


@pytest.mark.parametrize("name", list(TINY))
def test_torch_module_matches_numpy_forward(name):
    torch = pytest.importorskip("torch", reason="torch is in the bench extra (make bench installs it)")
    model = get(name, tiny=True)
    module = model.make_torch().eval()
    with torch.inference_mode():
        output = module(*(torch.from_numpy(v) for v in model.inputs.values())).float().numpy()
    ok, error = agreement(output, model.reference(), model.dtype)
    assert ok, f"largest error {error:.2e} of the output's magnitude"


def test_unknown_model_names_the_known_ones():
    with pytest.raises(KeyError, match="unknown model 'vgg'; known: mlp_b64"):
        get("vgg")
