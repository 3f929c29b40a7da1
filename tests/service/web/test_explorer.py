"""The explorer page in Debian's Chromium (headless, driven by Playwright) against a real
`relaycc serve`: seed 001's partitioned perceptron compiled with the toy_cg_thflow codegen
document and its C, its stages shown pane by pane, a syntax error marked at its line, a run,
the module list and a diff. Screenshots go to test-artifacts/explorer/.

One server and one browser for the module; each test opens its own page.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.support import MODELS, ROOT, Server, serving

playwright_sync = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (`make install` does)"),
]

SEED001 = MODELS / "seed001_mlp_partitioned.relay"
CODEGEN = MODELS.parent / "codegens" / "toy_cg_thflow"
EXTERN = "tvmgen_default_toy_cg_thflow_main_0"
SHOTS = ROOT / "test-artifacts" / "explorer"
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # User C (the codegen's library) is allowed, as it is with API keys; a short start delay
    # makes the progress events reliably seen.
    with serving(tmp_path_factory.mktemp("explorer") / "store", workers=2, allow_user_c="true",
                 job_start_delay_seconds="0.3") as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: object, server: Server) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1500, "height": 950})  # type: ignore[attr-defined]
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.requested = []  # every URL the page asks for, to check it asks only the service
    page.on("request", lambda request: page.requested.append(request.url))
    page.goto(server.base + "/")
    page.wait_for_selector("#host option", state="attached")
    # Every text the progress label shows, as it changes.
    page.evaluate("""() => { window.stages = [];
        new MutationObserver(() => window.stages.push(document.getElementById('stage').textContent))
          .observe(document.getElementById('stage'), {childList: true, subtree: true, characterData: true}); }""")
    yield page
    context.close()


def shot(page: object, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def tab(page: object, name: str) -> None:
    page.click(f"#tabs button[data-tab='{name}']")  # type: ignore[attr-defined]


def compile_seed001(page: object, module_name: str = "default", relay: str | None = None) -> None:
    page.fill("#relay", relay if relay is not None else SEED001.read_text())  # type: ignore[attr-defined]
    page.fill("#module-name", module_name)  # type: ignore[attr-defined]
    page.set_input_files("#codegen-files", [str(CODEGEN / "toy_cg_thflow.json"),  # type: ignore[attr-defined]
                                            str(CODEGEN / "toy_cg_thflow.c")])
    page.wait_for_selector("#codegen-docs:has-text('toy_cg_thflow')")  # type: ignore[attr-defined]
    page.click("#compile")  # type: ignore[attr-defined]


def built(page: object, module_name: str = "default") -> None:
    compile_seed001(page, module_name)
    # The module names its functions itself (it comes partitioned), whatever the module name.
    page.wait_for_selector(f"#status:has-text('({module_name}, toy_cg_thflow, c)')")  # type: ignore[attr-defined]
    page.wait_for_selector(f"#lowered a.callee[data-callee='{EXTERN}']")  # type: ignore[attr-defined]


def test_seed001_shows_extern_call_memory_plan_partition_and_c(page: object) -> None:
    built(page)

    stages = page.evaluate("window.stages")  # type: ignore[attr-defined]
    # The events stream polls the job's status a few times a second, so a C build quicker than a
    # poll shows no stage of its own (tests/service/jobs/test_work.py sees every stage); those
    # shown keep the job's order.
    order = ["submitting", "starting", "compiling", "building C", "storing artifacts", "done"]
    ranks = [next(k for k, name in enumerate(order) if s.startswith(name)) for s in stages]
    assert any(s.startswith("compiling") for s in stages) and ranks == sorted(ranks) and ranks[-1] == 5, stages
    assert page.get_attribute("#progress", "value") == page.get_attribute("#progress", "max")  # type: ignore[attr-defined]
    page.click(f"a.callee[data-callee='{EXTERN}']")  # type: ignore[attr-defined]
    info = page.inner_text("#call-info")  # type: ignore[attr-defined]
    assert EXTERN in info and "extern" in info and '"Compiler": "toy_cg_thflow"' in info
    after = page.locator("#lowered .focused ~ .line").all_inner_texts()  # type: ignore[attr-defined]
    assert any("call_extern('dense_bias_relu'" in line for line in after)  # the PrimFunc it links to
    shot(page, "lowered")

    tab(page, "Memory")
    page.hover("rect.buffer[data-buffer='workspace_0']")  # type: ignore[attr-defined]
    hover = page.inner_text("#memory-hover")  # type: ignore[attr-defined]
    assert "workspace_0: 1.0 KiB at offset 0" in hover and f"{EXTERN}/buf0" in hover
    shot(page, "memory")

    tab(page, "Partition")
    node = page.locator("#partition g.node[data-target='toy_cg_thflow']")  # type: ignore[attr-defined]
    assert node.count() == 1
    assert "dense_bias_relu()" in node.text_content() and "dense_bias()" in node.text_content()
    assert page.locator("#partition g.node[data-target='input']").count() == 5  # type: ignore[attr-defined]
    shot(page, "partition")

    tab(page, "C")
    page.select_option("#c-file", "src/toy_cg_thflow_extern_calls.c")  # type: ignore[attr-defined]
    page.wait_for_selector("#c-text:has-text('dense_bias_relu(&i0')")  # type: ignore[attr-defined]
    shot(page, "c")

    tab(page, "Passes")
    passes = page.locator("#pass-list li").all_inner_texts()  # type: ignore[attr-defined]
    assert passes[-1] == "LowerTE" and any(p.startswith("FuseOps") for p in passes)
    assert "call_lowered(@" in page.inner_text("#pass-text")  # type: ignore[attr-defined]
    page.click("#pass-list li:has-text('InferType') >> nth=0")  # type: ignore[attr-defined]
    assert "call_lowered" not in page.inner_text("#pass-text")  # type: ignore[attr-defined]

    tab(page, "Report")
    report = json.loads(page.inner_text("#report"))  # type: ignore[attr-defined]
    assert report["calls"][0]["callee"] == EXTERN


def test_a_syntax_error_is_marked_at_its_line(page: object) -> None:
    lines = SEED001.read_text().splitlines()
    broken_line = next(i for i, line in enumerate(lines) if "@tvmgen_default_toy_cg_thflow_main_0(%x" in line)
    lines[broken_line] = lines[broken_line].replace("(%x, %w1", "(%x %w1")
    lines.insert(1, '// <b id="injected">markup in the model is shown as text</b>')
    broken_line += 1
    compile_seed001(page, relay="\n".join(lines) + "\n")

    marked = page.wait_for_selector(".error-line")  # type: ignore[attr-defined]
    assert marked.get_attribute("data-line") == str(broken_line + 1)
    assert "%x %w1" in marked.inner_text()
    assert "^" in page.inner_text(".caret-line")  # type: ignore[attr-defined]
    assert page.locator("#injected").count() == 0  # type: ignore[attr-defined]
    assert '<b id="injected">' in page.inner_text("#source-view")  # type: ignore[attr-defined]
    assert "line" in page.inner_text("#status")  # type: ignore[attr-defined]
    shot(page, "syntax-error")


def test_running_the_module_shows_outputs_and_the_kernel_profile(page: object) -> None:
    built(page)
    tab(page, "Run")
    page.click("#run")  # type: ignore[attr-defined]

    output = page.wait_for_selector(".output[data-output='out0']")  # type: ignore[attr-defined]
    assert "float32[8, 10]" in output.inner_text()
    row = page.inner_text(".kernel-row")  # type: ignore[attr-defined]
    assert EXTERN in row
    assert "generated inputs" in page.inner_text("#run-status")  # type: ignore[attr-defined]
    shot(page, "run")


def test_modules_are_listed_and_two_diffed(page: object) -> None:
    built(page)  # found in the store when another test built it already
    built(page, "second")
    tab(page, "Modules")
    page.wait_for_selector("#module-table tr.module-row >> nth=1")  # type: ignore[attr-defined]
    rows = page.locator("#module-table tr.module-row")  # type: ignore[attr-defined]
    names = [rows.nth(i).locator("td").nth(2).inner_text() for i in range(rows.count())]
    assert names[:2] == ["second", "default"]  # newest first

    rows.nth(0).locator(".pick").check()
    rows.nth(1).locator(".pick").check()
    page.click("#diff-modules")  # type: ignore[attr-defined]

    c_diff = page.wait_for_selector(".diff-part[data-part='c']")  # type: ignore[attr-defined]
    assert "changed" in c_diff.inner_text() and "tvmgen_second" in c_diff.inner_text()
    shot(page, "modules-diff")


def test_the_page_asks_no_host_but_the_service(page: object, server: Server) -> None:
    built(page)
    for name in ("Memory", "Partition", "C", "Passes", "Modules", "Run"):
        tab(page, name)
    page.click("#run")  # type: ignore[attr-defined]
    page.wait_for_selector(".output")  # type: ignore[attr-defined]
    page.goto(server.base + "/docs")  # type: ignore[attr-defined]
    page.wait_for_selector(".swagger-ui .opblock >> nth=0")  # type: ignore[attr-defined]

    elsewhere = [url for url in page.requested if not url.startswith(server.base + "/")]  # type: ignore[attr-defined]
    assert page.requested and not elsewhere, elsewhere  # type: ignore[attr-defined]
