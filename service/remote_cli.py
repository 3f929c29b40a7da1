"""`relaycc remote compile|run|status|list|delete|diff`: the service's client from the shell.

    relaycc remote compile MODEL.relay --url URL [--api-key KEY] [-o OUTDIR]
    relaycc remote run ID --url URL --inputs INPUTS.npz -o OUTPUTS.npz
    relaycc remote status ID --url URL [--wait]
    relaycc remote list --url URL [--state STATE]

`--url` and `--api-key` default to RELAYCC_URL and RELAYCC_API_KEY. The module id goes to
stdout (so `ID=$(relaycc remote compile ...)` works); waiting shows a progress bar on stderr
when it is a terminal, one line per change otherwise. An error the service answers with is one
line on stderr (`MODEL.relay:LINE:COLUMN: ...` for a parse or type error) and exit status 1,
as for the local commands.

`relaycc` hands every command line starting with `remote` to `main` here; nothing of this
module (nor httpx, nor numpy) is imported for the other commands or for `relaycc --help`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from service.client import Client

STATES = ("queued", "running", "succeeded", "failed")


def main(argv: list[str]) -> int:
    """`relaycc remote ARGV...`; the exit status."""
    return run_remote(build_parser().parse_args(argv))


def build_parser() -> argparse.ArgumentParser:
    remote = argparse.ArgumentParser(prog="relaycc remote", description="Compile, run and list modules on a "
                                     "relaycc service.")
    subs = remote.add_subparsers(dest="remote_command", required=True, metavar="COMMAND")

    def sub(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = subs.add_parser(name, help=help_text)
        parser.add_argument("--url", default=os.environ.get("RELAYCC_URL"),
                            help="the service's base URL, e.g. http://127.0.0.1:8000 (default: $RELAYCC_URL)")
        parser.add_argument("--api-key", default=os.environ.get("RELAYCC_API_KEY"),
                            help="the API key, for a service that has keys (default: $RELAYCC_API_KEY)")
        return parser

    compile_cmd = sub("compile", "submit a model, wait for the build, print the module id")
    compile_cmd.add_argument("model", type=Path, metavar="MODEL.relay")
    compile_cmd.add_argument("--target", default="c", help='external codegens first, the host last (default "c")')
    compile_cmd.add_argument("--module-name", default="default", help="name used in C symbols (default: default)")
    compile_cmd.add_argument("--params", type=Path, metavar="PARAMS.npz",
                             help="arrays bound to @main's parameters as constants at compile time")
    compile_cmd.add_argument("--config", type=Path, metavar="CONFIG.json",
                             help="opt_level, pass_config, cflags, workspace_byte_alignment")
    compile_cmd.add_argument("--codegen", type=Path, action="append", default=[], metavar="CODEGEN.json",
                             help="an external codegen described in JSON, sent with its library sources (repeatable)")
    compile_cmd.add_argument("-o", "--output", type=Path, metavar="OUTDIR",
                             help="download the artifacts here once built")
    compile_cmd.add_argument("--no-wait", action="store_true", help="print the id at once, without waiting")
    compile_cmd.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                             help="how long to wait for the build (default 600)")
    compile_cmd.set_defaults(remote=_compile)

    run = sub("run", "run a built module with numpy inputs")
    run.add_argument("module_id", metavar="ID")
    run.add_argument("--inputs", type=Path, required=True, metavar="INPUTS.npz", help="the model's inputs by name")
    run.add_argument("-o", "--output", type=Path, metavar="OUTPUTS.npz", help="where to save the outputs")
    run.add_argument("--repeat", type=int, default=1, metavar="N", help="run N times; prints the latency")
    run.add_argument("--threads", type=int, metavar="N", help="threads for the model's kernels")
    run.set_defaults(remote=_run)

    status = sub("status", "print a module's status as JSON")
    status.add_argument("module_id", metavar="ID")
    status.add_argument("--wait", action="store_true", help="wait for the job to finish first")
    status.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS", help="how long to wait (default 600)")
    status.set_defaults(remote=_status)

    listing = sub("list", "list stored modules, newest first: id, state, module name, target, created")
    listing.add_argument("--state", choices=STATES, help="only modules in this state")
    listing.add_argument("--limit", type=int, metavar="N", help="at most N modules (default: all)")
    listing.set_defaults(remote=_list)

    delete = sub("delete", "delete a module")
    delete.add_argument("module_id", metavar="ID")
    delete.set_defaults(remote=_delete)

    diff = sub("diff", "print the unified diffs of two built modules (lowered IR, C, report)")
    diff.add_argument("a", metavar="ID_A")
    diff.add_argument("b", metavar="ID_B")
    diff.set_defaults(remote=_diff)
    return remote


# --- the commands --------------------------------------------------------------------------------


def _compile(args: argparse.Namespace, client: Client) -> int:
    config = _json_file(args.config) if args.config is not None else None
    for path in (args.model, args.params, *args.codegen):
        if path is not None and not path.is_file():
            raise _UserError(f"{path}: no such file")
    module = client.compile(args.model, target=args.target, module_name=args.module_name, params=args.params,
                            codegens=args.codegen, config=config)
    if not args.no_wait:
        _wait(module, args.timeout, source=str(args.model))
        if args.output is not None:
            module.download(args.output)
    print(module.id)
    return 0


def _run(args: argparse.Namespace, client: Client) -> int:
    import numpy as np

    from service.client import Module

    if not args.inputs.is_file():
        raise _UserError(f"{args.inputs}: no such file")
    try:
        with np.load(args.inputs, allow_pickle=False) as archive:
            inputs = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, AttributeError) as err:
        raise _UserError(f"{args.inputs}: cannot read arrays: {err}") from None
    module = Module(client, args.module_id)
    outputs = module.run(inputs, threads=args.threads, repeat=args.repeat)
    if args.output is not None:
        with open(args.output, "wb") as stream:
            np.savez(stream, **outputs)
    if args.repeat > 1 or args.output is None:
        print(json.dumps(module.last_latency))
    return 0


def _status(args: argparse.Namespace, client: Client) -> int:
    from service.client import Module

    module = Module(client, args.module_id)
    status = _wait(module, args.timeout, raise_failure=False) if args.wait else module.status()
    print(json.dumps(status, indent=2))
    return 0


def _list(args: argparse.Namespace, client: Client) -> int:
    for count, module in enumerate(client.modules(state=args.state)):
        if args.limit is not None and count >= args.limit:
            break
        status = module.last_status
        print(f"{module.id}  {status['state']:<9}  {status['module_name']:<16}  {status['target']:<16}  "
              f"{status['created_at']}")
    return 0


def _delete(args: argparse.Namespace, client: Client) -> int:
    from service.client import Module

    Module(client, args.module_id).delete()
    return 0


def _diff(args: argparse.Namespace, client: Client) -> int:
    for kind, diff in client.diff(args.a, args.b).items():
        if diff["changed"]:
            sys.stdout.write(diff["diff"])
            if diff.get("truncated"):
                print(f"... the {kind} diff was cut at the service's limit")
    return 0


# --- waiting with progress ------------------------------------------------------------------------


def _wait(module: Any, timeout: float, *, source: str | None = None, raise_failure: bool = True) -> dict[str, Any]:
    from service.client import ServiceError

    shown = ProgressDisplay(sys.stderr)
    try:
        return dict(module.wait(timeout, on_progress=shown.update))
    except ServiceError as err:
        if raise_failure:
            raise _located(err, source) from None
        return dict(module.last_status)
    finally:
        shown.close()


class ProgressDisplay:
    """A job's progress on `stream`: a bar redrawn in place on a terminal, a line per change
    otherwise (a log keeps every line; a bar would be one line of carriage returns)."""

    WIDTH = 30

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.tty = stream.isatty()
        self.drawn = False

    def update(self, progress: Mapping[str, Any]) -> None:
        stage = str(progress.get("stage", ""))
        done, total = progress.get("done"), progress.get("total")
        counted = isinstance(done, int) and isinstance(total, int) and total > 0
        count = f" {done}/{total}" if counted else ""
        last = f" ({progress['last_pass']})" if progress.get("last_pass") and stage == "compiling" else ""
        if not self.tty:
            print(f"{stage}{count}{last}", file=self.stream, flush=True)
            return
        filled = int(self.WIDTH * done / total) if counted else 0  # type: ignore[operator]
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        self.stream.write(f"\r\x1b[2K[{bar}] {stage}{count}{last}")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


# --- errors ------------------------------------------------------------------------------------


class _UserError(Exception):
    """A mistake on this side (a missing file): one line, exit status 1."""


def _located(err: Exception, source: str | None) -> _UserError:
    from service.client import ServiceError

    if isinstance(err, ServiceError) and err.line is not None and source is not None:
        text = f"{source}:{err.line}:{err.column}: {err.title}: {err.detail}"
        if err.source_line:
            text += f"\n  {err.source_line}"
        return _UserError(text)
    return _UserError(str(err))


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise _UserError(f"{path}: cannot read: {err.strerror}") from None
    except ValueError as err:
        raise _UserError(f"{path}: not JSON: {err}") from None
    if not isinstance(value, dict):
        raise _UserError(f"{path}: expected a JSON object")
    return value


def run_remote(args: argparse.Namespace) -> int:
    """The `remote` commands' handler: the client, the command, one line for an error."""
    import httpx

    from service.client import Client, ServiceError

    if not args.url:
        print("relaycc remote: give the service's URL with --url or RELAYCC_URL", file=sys.stderr)
        return 2
    try:
        with Client(args.url, api_key=args.api_key) as client:
            return int(args.remote(args, client))
    except ServiceError as err:
        print(_located(err, str(getattr(args, "model", None) or "") or None), file=sys.stderr)
    except _UserError as err:
        print(err, file=sys.stderr)
    except TimeoutError as err:
        print(f"relaycc remote: {err}", file=sys.stderr)
    except httpx.TransportError as err:
        print(f"relaycc remote: cannot reach {args.url}: {err}", file=sys.stderr)
    return 1
