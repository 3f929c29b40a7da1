from pathlib import Path

from bench.models import mlp
from compiler.ir.structural import structural_equal
from compiler.parser import parse

SEED_FILE = Path(__file__).resolve().parents[3] / "bench" / "models" / "mlp_seed001.relay"


def test_generated_text_at_batch_64_is_the_seed_file():
    generated = parse(mlp.relay(64, 800, 500, 10))
    assert structural_equal(generated["main"], parse(SEED_FILE.read_text())["main"])


def test_generated_text_differs_at_another_batch():
    generated = parse(mlp.relay(1, 800, 500, 10))
    assert not structural_equal(generated["main"], parse(SEED_FILE.read_text())["main"])
