"""A load test of the HTTP API: many concurrent clients against a real `relaycc serve`.

Each client has its own API key and loops until the time is up, choosing at random: fetch a
module that is already built (a cached compile), submit a new model (a compile), run a built
module on fresh inputs and check the outputs against numpy, or read a status. Afterwards every
job that was accepted must reach a final state (none lost), and no request may have answered
5xx. `python -m tests.service.load --seconds 60 --clients 100` (what `make soak` runs) prints
the figures; tests/service/test_load.py runs it for 10 seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import ssl
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from tests.service.support import from_npz_b64, npz_b64, serving
RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  nn.relu(add(%x, %y))
}
"""
CACHED_MODELS = 3
# What a client does, with how often it does it. New compiles and runs are the expensive part:
# each starts a sandbox, and what is queued when the time is up must still finish.
ACTIONS = (("cached_compile", 35), ("run", 20), ("status", 40), ("new_compile", 5))
# The mix of the bounded run in the test suite: every kind of request, fewer expensive ones.
LIGHT_ACTIONS = (("cached_compile", 48), ("run", 1), ("status", 50), ("new_compile", 1))


@dataclass
class Figures:
    requests: int = 0
    server_errors: list[str] = field(default_factory=list)
    wrong_outputs: int = 0
    unexpected: list[str] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    accepted_jobs: set[str] = field(default_factory=set)
    lost_jobs: list[str] = field(default_factory=list)
    failed_jobs: list[str] = field(default_factory=list)

    def percentile(self, kind: str, q: float) -> float:
        values = self.latencies.get(kind) or [0.0]
        return float(np.percentile(values, q)) * 1000

    def report(self, seconds: float, clients: int) -> str:
        every = [v for values in self.latencies.values() for v in values] or [0.0]
        lines = [
            f"load: {clients} clients for {seconds:g} s: {self.requests} requests "
            f"({self.requests / seconds:.0f}/s), {len(self.server_errors)} answered 5xx, "
            f"{self.wrong_outputs} wrong outputs, {len(self.unexpected)} unexpected answers",
            f"jobs: {len(self.accepted_jobs)} accepted, {len(self.lost_jobs)} lost, {len(self.failed_jobs)} failed",
            f"latency (all): p50 {np.percentile(every, 50) * 1000:.1f} ms, p99 {np.percentile(every, 99) * 1000:.1f} ms",
        ]
        for kind, _ in ACTIONS:
            if kind in self.latencies:
                lines.append(f"  {kind}: {len(self.latencies[kind])} requests, p50 {self.percentile(kind, 50):.1f} ms, "
                             f"p99 {self.percentile(kind, 99):.1f} ms")
        return "\n".join(lines)


async def _client(
    index: int, base: str, deadline: float, built: list[str], figures: Figures, actions: tuple[tuple[str, int], ...],
    tls: ssl.SSLContext,
) -> None:
    rng = random.Random(index)
    headers = {"Authorization": f"Bearer key{index}"}
    kinds = [kind for kind, _ in actions]
    weights = [weight for _, weight in actions]
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120, verify=tls) as http:
        serial = 0
        made = 0
        # Every client gets through at least once, however slow a loaded machine makes the server,
        # and the first clients' first actions go round the kinds so that each kind is exercised
        # even when a loaded machine leaves time for only one action per client. Only the first
        # few: were every client to start that way, a quarter of them would start with a new
        # compile whatever the mix says (25 sandboxed builds of the suite's run, most of its time).
        while made == 0 or time.monotonic() < deadline:
            first_round = made == 0 and index < len(kinds)
            kind = kinds[index] if first_round else rng.choices(kinds, weights)[0]
            made += 1
            started = time.monotonic()
            if kind == "cached_compile":
                response = await http.post("/compile", json={"relay": RELAY + f"// cached {rng.randrange(CACHED_MODELS)}\n"})
                expected = {200}
            elif kind == "new_compile":
                serial += 1
                response = await http.post("/compile", json={"relay": RELAY + f"// client {index} model {serial}\n"})
                expected = {200, 202, 429}
                if response.status_code in (200, 202):
                    figures.accepted_jobs.add(response.json()["id"])
            elif kind == "run":
                x = np.asarray(rng.random() * np.arange(-3, 3, dtype="float32").reshape(2, 3), "float32")
                y = np.full((2, 3), rng.random(), "float32")
                response = await http.post(f"/modules/{rng.choice(built)}/run", json={"inputs_npz": npz_b64(x=x, y=y)})
                expected = {200, 429}
                if response.status_code == 200:
                    out = from_npz_b64(response.json()["outputs_npz"])["out0"]
                    if not np.allclose(out, np.maximum(x + y, 0)):
                        figures.wrong_outputs += 1
            else:
                response = await http.get(f"/modules/{rng.choice(built)}")
                expected = {200}
            figures.latencies[kind].append(time.monotonic() - started)
            figures.requests += 1
            if response.status_code >= 500:
                figures.server_errors.append(f"{kind}: {response.status_code} {response.text[:200]}")
            elif response.status_code not in expected:
                figures.unexpected.append(f"{kind}: {response.status_code} {response.text[:200]}")


async def _drain(base: str, figures: Figures, seconds: float) -> None:
    """Wait for every accepted job to finish; what is still in flight after `seconds` is lost."""
    deadline = time.monotonic() + seconds
    pending = set(figures.accepted_jobs)
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key0"}, timeout=30) as http:
        while pending and time.monotonic() < deadline:
            for module_id in list(pending):
                status = (await http.get(f"/modules/{module_id}")).json()
                if status["state"] == "succeeded":
                    pending.discard(module_id)
                elif status["state"] == "failed":
                    pending.discard(module_id)
                    figures.failed_jobs.append(f"{module_id}: {status['error']}")
            await asyncio.sleep(0.2)
    figures.lost_jobs = sorted(pending)


async def _warm_up(base: str) -> list[str]:
    async def build(http: httpx.AsyncClient, model: int) -> str:
        response = await http.post("/compile?wait=60", json={"relay": RELAY + f"// cached {model}\n"})
        module_id = str(response.json()["id"])
        while (status := (await http.get(f"/modules/{module_id}")).json())["state"] in ("queued", "running"):
            await asyncio.sleep(0.1)
        if status["state"] != "succeeded":
            raise RuntimeError(f"warm-up compile failed: {status['error']}")
        return module_id

    # Submitted together, so that the server's workers build them side by side.
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key0"}, timeout=120) as http:
        return list(await asyncio.gather(*(build(http, model) for model in range(CACHED_MODELS))))


def api_keys(clients: int) -> str:
    """RELAYCC_API_KEYS with one key per client: the per-client job limit applies to each."""
    return ",".join(f"key{i}" for i in range(clients))


def run_load(
    base: str, *, seconds: float, clients: int, drain_seconds: float = 120.0,
    actions: tuple[tuple[str, int], ...] = ACTIONS,
) -> Figures:
    async def main() -> Figures:
        figures = Figures()
        built = await _warm_up(base)
        deadline = time.monotonic() + seconds
        # One TLS context for every client: the server speaks plain HTTP, and each client loading
        # the CA bundle for its own context took 50 ms of CPU (5 s for a hundred clients).
        tls = ssl.create_default_context()
        await asyncio.gather(*(_client(i, base, deadline, built, figures, actions, tls) for i in range(clients)))
        await _drain(base, figures, drain_seconds)
        return figures

    return asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="relaycc-soak-") as tmp:
        with serving(Path(tmp) / "store", workers=args.workers, api_keys=api_keys(args.clients)) as server:
            figures = run_load(server.base, seconds=args.seconds, clients=args.clients)
    print(time.strftime("%Y-%m-%d"), figures.report(args.seconds, args.clients))
    for line in figures.server_errors[:10] + figures.unexpected[:10] + figures.failed_jobs[:10]:
        print("  ", line)
    bad = figures.server_errors or figures.lost_jobs or figures.wrong_outputs or figures.failed_jobs or figures.unexpected
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
