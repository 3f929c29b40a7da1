"""IRSnapshots records the printed module after every pass of a real build, once per change."""

from compiler.driver import BuildOptions, lower
from compiler.parser import parse
from compiler.passes.ir_snapshots import IRSnapshots
from compiler.passes.pass_infra import PassTimer

RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  nn.relu(add(%x, %y))
}
"""


def test_snapshots_follow_the_pipeline_and_show_fusion_and_lowering() -> None:
    snapshots, timer = IRSnapshots(), PassTimer()
    lower(parse(RELAY), BuildOptions(), instruments=(snapshots, timer))

    assert [r["pass"] for r in snapshots.records] == [name for name, _ in timer.records]
    by_pass = {r["pass"]: r for r in snapshots.records}
    fused = by_pass["FuseOps"]["text"]
    assert isinstance(fused, str) and "Primitive=1" in fused and "call_lowered" not in fused
    lowered = by_pass["LowerTE"]["text"]
    assert isinstance(lowered, str) and "call_lowered(@tvmgen_default_fused_add_nn_relu" in lowered


def test_a_pass_that_changes_nothing_is_recorded_without_text() -> None:
    snapshots = IRSnapshots()
    lower(parse(RELAY), BuildOptions(), instruments=(snapshots,))

    unchanged = [r for r in snapshots.records if not r["changed"]]
    assert unchanged, [r["pass"] for r in snapshots.records]
    assert all(r["text"] is None for r in unchanged)
    assert all(isinstance(r["text"], str) for r in snapshots.records if r["changed"])
    assert snapshots.records[0]["changed"]  # the first pass has nothing before it
