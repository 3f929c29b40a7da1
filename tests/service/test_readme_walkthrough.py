"""Runs every ```sh block of the README's HTTP walk-through against a live `relaycc serve`, in
one shell, so the README cannot drift from the service again."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.service.support import serving

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### Walk-through"


def walkthrough_blocks(readme: str) -> list[str]:
    start = readme.index(HEADING) + len(HEADING)
    end = readme.find("\n#", start)
    section = readme[start:end if end >= 0 else None]
    return re.findall(r"^```sh\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


def test_the_walkthrough_has_the_blocks_a_reader_needs() -> None:
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())

    script = "\n".join(blocks)
    assert len(blocks) >= 3
    assert re.search(r"^ID=\$\(.*jq", script, re.MULTILINE | re.DOTALL)
    assert ".interface.inputs" in script and "/run" in script


@pytest.mark.skipif(shutil.which("jq") is None or shutil.which("curl") is None,
                    reason="jq and curl are needed (`make install` installs them)")
def test_every_block_of_the_readme_walkthrough_runs_against_a_live_server(tmp_path: Path) -> None:
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())
    work = tmp_path / "work"
    work.mkdir()
    (work / "tests").symlink_to(ROOT / "tests")  # the README runs from the repository's root
    # One shell for all blocks, as a reader pastes them one after another; each block stops
    # the script at its first failing command.
    script = "set -euo pipefail\n" + "\n".join(f"echo '--- block {i}'\n{block}" for i, block in enumerate(blocks))
    with serving(tmp_path / "store", workers=1) as server:
        result = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True, timeout=180,
                                env={"PATH": "/usr/bin:/bin", "URL": server.base})

    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    out = result.stdout
    assert f"--- block {len(blocks) - 1}" in out
    assert '"state":"succeeded"' in out.replace(" ", "") or '"state": "succeeded"' in out
    assert '{"name":"x","shape":[8,64],"dtype":"float32"}' in out
    assert '"outputs":{"out0":{"dtype":"float32","shape":[8,10]}}' in out
    assert 'relaycc_jobs{state="succeeded"} 1.0' in out
    assert (work / "libdefault.so").read_bytes()[:4] == b"\x7fELF"
