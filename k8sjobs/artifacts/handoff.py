"""The in-pod handoff: pull a step's inputs before it runs, push its outputs after it succeeds.

An output with a ``failed_reference`` (``push_outputs: always``) is pushed there when the step
fails: as much of it as exists, annotated with the exit code, never under its own reference.

``python -m k8sjobs.handoff pull --config F`` runs as the init container;
``python -m k8sjobs.handoff push --config F`` runs beside the main container, waits for its
exit-code marker, and pushes the declared outputs only when that code is 0.
``python -m k8sjobs.handoff sidecar --config F`` does both from beside a MiniCluster's Flux
runner, which has no init containers (``run_sidecar``, k8sjobs.render.minicluster). The config file
(JSON, written by render.py)::

    {"store": "<location>", "plain_http": false, "ca_file": null,
     "inputs": {"<name>": "<reference>"},
     "outputs": {"<name>": {"path": "<relative to workdir>", "reference": "<reference>",
                            "failed_reference": "<reference, optional>"}},
     "annotations": {"k": "v"}, "wait_inputs": 0}

``wait_inputs`` (seconds, optional, default 0) is how long the pull waits, over all the
inputs, for an input the store does not hold yet: ``k8sjobs render`` sets it, because
``kubectl apply`` starts a consumer's Job with its producer's, before the producer pushed. A
session leaves it off: it submits a consumer once its inputs are pushed, pinned by digest, so
a missing input there is a fault to report at once, not to wait for.

Environment: K8SJOBS_WORKDIR, K8SJOBS_INPUTS (input <name> lands in $K8SJOBS_INPUTS/<name>/),
K8SJOBS_STATUS_DIR (holds the marker ``exitcode``; ``outputs.json`` is written there), and
optionally DOCKER_CONFIG for registry credentials and K8SJOBS_PULL_MAX_BYTES /
K8SJOBS_PULL_MAX_RATIO to raise the pull's limits (copied from the step's env). In a
multi-node step every index pulls the inputs, and only index 0 (JOB_COMPLETION_INDEX) pushes
the outputs.

``run_command`` is the whole of one container's run (config, environment, output streams and
the store passed in), so the local runners can run the very same code in-process
(k8sjobs.local._handoff). The registry code is imported only when a store is opened: a
container's ``--help`` or a bad config costs no aiohttp import.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import HandoffError, RegistryError
from ._limits import PullLimits
from ._reference import pin, redact

if TYPE_CHECKING:
    from ._store import ArtifactStore


EXIT_MARKER = "exitcode"
#: The sidecar's marks for a MiniCluster's Flux runner (k8sjobs.render.minicluster.RUN_WRAPPER).
READY_MARKER = "ready"
PULL_FAILED_MARKER = "pull-failed"
PATHS_DIR = "paths"
#: Where a container that cannot pass arguments (a Flux Operator sidecar) gives them: the
#: verb, and the config's path apart (a whole path, which a local runner translates).
ARGS_ENV = "K8SJOBS_HANDOFF_ARGS"
CONFIG_ENV = "K8SJOBS_HANDOFF_CONFIG"
#: The annotation a failed step's pushed output carries: the script's exit code.
ANNOTATION_EXIT_CODE = "k8sjobs.io/exit-code"
OUTPUTS_FILE = "outputs.json"
POLL_SECONDS = 0.2
#: How often a waiting pull asks the store again for a missing input, and how often it says
#: it still waits (a log line every poll would flood the pod's log over an hour's wait).
WAIT_POLL_SECONDS = 1.0
WAIT_LOG_SECONDS = 60.0


@dataclass(frozen=True)
class Output:
    """One declared output: a path under the work dir, and where to push it."""

    path: str
    reference: str
    failed_reference: str | None = None


@dataclass(frozen=True)
class HandoffConfig:
    """The parsed handoff config file."""

    store: str
    plain_http: bool = False
    ca_file: str | None = None
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, Output] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    wait_inputs: float = 0.0


if TYPE_CHECKING:
    #: Opens the store a config names, for the length of one pull or push.
    StoreOpener = Callable[[HandoffConfig], contextlib.AbstractAsyncContextManager[ArtifactStore]]


def _safe_name(kind: str, name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise HandoffError(f'{kind} name "{name}" must be a plain file name (no "/" or "..").')
    return name


def _str_map(data: Any, key: str) -> dict[str, str]:
    value = data.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise HandoffError(f'handoff config: "{key}" must map names to strings.')
    return {str(k): v for k, v in value.items()}


def parse_config(data: Any) -> HandoffConfig:
    """Return the HandoffConfig in a decoded JSON document, or raise HandoffError."""
    if not isinstance(data, dict) or not isinstance(data.get("store"), str):
        raise HandoffError('handoff config: "store" (a store location string) is required.')
    outputs: dict[str, Output] = {}
    for name, spec in (data.get("outputs") or {}).items():
        if not isinstance(spec, dict) or not {"path", "reference"} <= spec.keys():
            raise HandoffError(f'handoff config: output "{name}" needs "path" and "reference".')
        failed = spec.get("failed_reference")
        outputs[_safe_name("output", name)] = Output(
            str(spec["path"]), str(spec["reference"]), None if failed is None else str(failed)
        )
    inputs = {_safe_name("input", k): v for k, v in _str_map(data, "inputs").items()}
    wait = data.get("wait_inputs", 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < 1e9:
        raise HandoffError(
            f'handoff config: "wait_inputs" must be a number of seconds, 0 or more (got {wait!r}).'
        )
    return HandoffConfig(
        store=data["store"],
        plain_http=bool(data.get("plain_http", False)),
        ca_file=data.get("ca_file"),
        inputs=inputs,
        outputs=outputs,
        annotations=_str_map(data, "annotations"),
        wait_inputs=float(wait),
    )


#: ``--config env:NAME`` reads the config from the variable NAME, not a file: an allocation's
#: agent runs a step's pull and push with no file of its own (allocations/pool.py).
CONFIG_FROM_ENV = "env:"


def load_config(path: str | Path, env: Mapping[str, str] = os.environ) -> HandoffConfig:
    """Read and parse the handoff config file (or ``env:NAME``, the variable NAME)."""
    text = str(path)
    if text.startswith(CONFIG_FROM_ENV):
        name = text.removeprefix(CONFIG_FROM_ENV)
        if name not in env:
            raise HandoffError(f"Handoff config {text}: the variable {name} is not set.")
        try:
            return parse_config(json.loads(env[name]))
        except ValueError as exc:
            raise HandoffError(f"Handoff config {text} is not valid JSON: {exc}.") from None
    try:
        return parse_config(json.loads(Path(path).read_text()))
    except OSError as exc:
        raise HandoffError(f"Cannot read handoff config {path}: {exc.strerror}.") from None
    except ValueError as exc:
        raise HandoffError(f"Handoff config {path} is not valid JSON: {exc}.") from None


@contextlib.asynccontextmanager
async def own_store(config: HandoffConfig) -> AsyncIterator[ArtifactStore]:
    """Open the config's store for one pull or push, and close it after (a container's way)."""
    from ._store import open_store  # the registry stack: only when there is work

    async with open_store(
        config.store, plain_http=config.plain_http, ca_file=config.ca_file
    ) as store:
        yield store


def _env_dir(env: Mapping[str, str], name: str) -> Path:
    value = env.get(name)
    if not value:
        raise HandoffError(f"Environment variable {name} is not set; the pod template sets it.")
    return Path(value)


async def _await_input(
    store: ArtifactStore, name: str, reference: str, deadline: float, bound: float, err: TextIO
) -> None:
    """Return once ``reference`` is in the store, or raise HandoffError at ``deadline``.

    Only "not there" waits (``exists`` is False for a 404 / unknown tag); any other answer
    (refused credentials, an unreachable registry after its retries) raises from ``exists``
    as the pull would. Says so when it starts waiting, then once a WAIT_LOG_SECONDS.
    """
    shown = redact(reference)
    started = time.monotonic()
    said: float | None = None
    while not await store.exists(reference):
        now = time.monotonic()
        if now >= deadline:
            raise HandoffError(
                f'input "{name}": {shown} did not appear in the store within the pull\'s bound '
                f"of {bound:g} s (wait_inputs; k8sjobs render --wait-inputs); did its producer "
                "fail, or does it need longer?"
            )
        if said is None or now - said >= WAIT_LOG_SECONDS:
            waited = "" if said is None else f" (waited {now - started:.0f} s)"
            print(
                f'k8sjobs handoff: waiting for input "{name}": {shown} is not in the store yet; '
                f"waiting up to {bound:g} s for its producer to push it{waited}",
                file=err,
                flush=True,
            )
            said = now
        await asyncio.sleep(min(WAIT_POLL_SECONDS, max(deadline - now, 0.0)))
    if said is not None:
        print(f'k8sjobs handoff: input "{name}" is there: {shown}', file=err, flush=True)


async def pull_inputs(
    config: HandoffConfig,
    inputs_dir: Path,
    env: Mapping[str, str] = os.environ,
    stores: StoreOpener = own_store,
    err: TextIO = sys.stderr,
) -> dict[str, str]:
    """Pull every input into ``inputs_dir/<name>/``, within the limits that
    K8SJOBS_PULL_MAX_BYTES / K8SJOBS_PULL_MAX_RATIO in ``env`` set; return name -> digest.

    With ``config.wait_inputs`` above 0, an input not in the store yet is waited for, up to
    that many seconds from the start of the pull (``_await_input``)."""
    try:
        limits = PullLimits.from_env(env)
    except ValueError as exc:
        raise HandoffError(str(exc)) from None
    digests: dict[str, str] = {}
    if not config.inputs:
        return digests
    deadline = time.monotonic() + config.wait_inputs
    async with stores(config) as store:
        for name, reference in config.inputs.items():
            if config.wait_inputs > 0:
                await _await_input(store, name, reference, deadline, config.wait_inputs, err)
            result = await store.pull(reference, inputs_dir / name, limits=limits)
            digests[name] = result.digest
    return digests


def read_exit_code(marker: Path) -> int | None:
    """Return the exit code in a marker file, or None while it is absent or half written."""
    try:
        text = marker.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError:
        return None  # written but not yet flushed: look again at the next poll


async def wait_for_exit_code(status_dir: Path, timeout: float | None) -> int:
    """Return the main container's exit code once its marker file appears."""
    deadline = None if timeout is None else time.monotonic() + timeout
    marker = status_dir / EXIT_MARKER
    while True:
        code = await asyncio.to_thread(read_exit_code, marker)
        if code is not None:
            return code
        if deadline is not None and time.monotonic() > deadline:
            raise HandoffError(
                f"The main container wrote no exit code to {marker} within {timeout:g} s."
            )
        await asyncio.sleep(POLL_SECONDS)


def _output_path(workdir: Path, name: str, output: Output) -> Path:
    path = (workdir / output.path).resolve()
    if not path.is_relative_to(workdir.resolve()):
        raise HandoffError(f'Output "{name}": path "{output.path}" leaves the work dir {workdir}.')
    if not path.exists():
        raise HandoffError(f'Output "{name}": the step did not create "{output.path}" ({path}).')
    return path


def run_facts(status_dir: Path | None, code: int, env: Mapping[str, str]) -> dict[str, str]:
    """Return the lineage facts of this run an output's manifest carries: exit code, start
    (left by the run wrapper), end (now) and the backend that ran the pod."""
    facts = {
        "k8sjobs.io/exit-code": str(code),
        "k8sjobs.io/finished": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "k8sjobs.io/backend": env.get("K8SJOBS_BACKEND_KIND", "kubernetes"),
    }
    if status_dir is not None:
        with contextlib.suppress(OSError):
            started = (status_dir / "started").read_text().strip()
            if started:
                facts["k8sjobs.io/started"] = started[:40]
    return facts


async def push_outputs(
    config: HandoffConfig,
    workdir: Path,
    stores: StoreOpener = own_store,
    facts: Mapping[str, str] | None = None,
) -> dict[str, dict[str, str]]:
    """Push every declared output with ``facts`` among its annotations; return
    name -> {"reference", "digest"}."""
    paths = {
        name: await asyncio.to_thread(_output_path, workdir, name, out)
        for name, out in config.outputs.items()
    }
    results: dict[str, dict[str, str]] = {}
    if not config.outputs:
        return results
    async with stores(config) as store:
        for name, output in config.outputs.items():
            annotations = {**config.annotations, **(facts or {})}
            pushed = await store.push(output.reference, [paths[name]], annotations=annotations)
            results[name] = {"reference": output.reference, "digest": pushed.digest}
    return results


def read_push_report(text: str) -> dict[str, str]:
    """Return ``{output: "repository@sha256:..."}`` from what the push container reported.

    ``run_push`` writes ``{name: {"reference", "digest"}}`` to ``outputs.json`` and prints it
    as its last line; this reads either (the Kubernetes backend has the container's log, the
    local backend the file). The last line that is a JSON object is the report; an entry
    without a reference and a digest is skipped; no report gives ``{}``.
    """
    for line in reversed(text.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        return {
            name: pin(str(item["reference"]), str(item["digest"]))
            for name, item in data.items()
            if isinstance(item, dict) and item.get("reference") and item.get("digest")
        }
    return {}


async def push_failed_outputs(
    config: HandoffConfig, workdir: Path, code: int, err: TextIO, stores: StoreOpener = own_store
) -> dict[str, dict[str, str]]:
    """Push what exists of the outputs that have a failed_reference; return as push_outputs.

    For debugging a failed step: a missing output is reported on ``err`` and skipped, and
    each pushed one is annotated with the exit code.
    """
    paths: dict[str, Path] = {}
    for name, out in config.outputs.items():
        if out.failed_reference is None:
            continue
        try:
            paths[name] = await asyncio.to_thread(_output_path, workdir, name, out)
        except HandoffError as exc:
            print(f"k8sjobs handoff: {exc} Not pushed.", file=err)
    results: dict[str, dict[str, str]] = {}
    if not paths:
        return results
    annotations = {**config.annotations, ANNOTATION_EXIT_CODE: str(code)}
    async with stores(config) as store:
        for name, path in paths.items():
            reference = str(config.outputs[name].failed_reference)
            pushed = await store.push(reference, [path], annotations=annotations)
            results[name] = {"reference": reference, "digest": pushed.digest}
    return results


async def run_push(
    config: HandoffConfig,
    timeout: float | None,
    env: Mapping[str, str] = os.environ,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    stores: StoreOpener = own_store,
    exit_code: Callable[[], Awaitable[int | None]] | None = None,
) -> int:
    """Wait for the main container; push outputs on success; return the process exit code.

    On failure, outputs with a ``failed_reference`` are pushed there (push_outputs: always).

    ``exit_code`` replaces the wait for the marker where the caller knows when the main
    container ended (the local runners); it returns None when the step left no marker.
    """
    index = env.get("JOB_COMPLETION_INDEX", "0")
    if index != "0":  # a multi-node step: its outputs are index 0's, pushed once
        # Not waiting first: a worker's main container (sshd) never leaves an exit code.
        print(f"k8sjobs handoff: index {index}; index 0 pushes the outputs.", file=err)
        return 0
    status_dir = _env_dir(env, "K8SJOBS_STATUS_DIR")
    code = await (exit_code() if exit_code is not None else wait_for_exit_code(status_dir, timeout))
    if code is None:
        print("k8sjobs handoff: the step wrote no exit code; no outputs pushed.", file=err)
        return 0
    if code != 0 and not any(o.failed_reference for o in config.outputs.values()):
        print(f"k8sjobs handoff: the step exited with {code}; no outputs pushed.", file=err)
        return 0
    workdir = _env_dir(env, "K8SJOBS_WORKDIR")
    if code != 0:
        print(f"k8sjobs handoff: the step exited with {code}; pushing as failed.", file=err)
        results = await push_failed_outputs(config, workdir, code, err, stores)
    else:
        facts = await asyncio.to_thread(run_facts, status_dir, code, env)
        results = await push_outputs(config, workdir, stores, facts)
    report = json.dumps(results, sort_keys=True)
    await asyncio.to_thread(_mark, status_dir / OUTPUTS_FILE, report)
    print(report, file=out, flush=True)
    return 0


async def run_pull(
    config: HandoffConfig,
    env: Mapping[str, str] = os.environ,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    stores: StoreOpener = own_store,
) -> int:
    """Pull every input; return the process exit code."""
    digests = await pull_inputs(config, _env_dir(env, "K8SJOBS_INPUTS"), env, stores, err)
    print(json.dumps(digests, sort_keys=True), file=out, flush=True)
    return 0


def _prepare_shared(config: HandoffConfig, env: Mapping[str, str]) -> Path:
    """Make the shared volume's directories and the outputs' path files; return the status dir.

    Open to every user (the Flux runner's user is the image's, not the sidecar's). One file
    per output holds its path, so the runner's shell reads any path as it is.
    """
    status_dir = _env_dir(env, "K8SJOBS_STATUS_DIR")
    paths = status_dir / PATHS_DIR
    for directory in (
        _env_dir(env, "K8SJOBS_WORKDIR"),
        _env_dir(env, "K8SJOBS_INPUTS"),
        status_dir,
        paths,
    ):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o777)
    for name, output in config.outputs.items():
        (paths / name).write_text(output.path)
    return status_dir


def _mark_pull_failed(env: Mapping[str, str]) -> None:
    """Leave the pull-failed mark for the Flux runner (exit code 1, as the container's)."""
    status = env.get("K8SJOBS_STATUS_DIR")
    if status:
        Path(status).mkdir(parents=True, exist_ok=True)
        _mark(Path(status) / PULL_FAILED_MARKER, "1")


def _mark(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a full volume stays no fuller
        raise


async def run_sidecar(
    config: HandoffConfig,
    timeout: float | None,
    env: Mapping[str, str] = os.environ,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    stores: StoreOpener = own_store,
) -> int:
    """Hand a MiniCluster step's artifacts over from beside its Flux runner.

    On the lead pod (index 0): pull the inputs onto the shared volume and mark it ready (or
    mark the pull failed, so the runner stops waiting), then push as ``run_push`` does once
    the runner has left its exit code. The other pods have nothing to hand over.
    """
    index = env.get("JOB_COMPLETION_INDEX", "0")
    if index != "0":
        print(f"k8sjobs handoff: index {index}; the lead broker's pod hands over.", file=err)
        return 0
    status_dir = await asyncio.to_thread(_prepare_shared, config, env)
    await run_pull(config, env, out=out, err=err, stores=stores)  # run_command marks a failure
    await asyncio.to_thread(_mark, status_dir / READY_MARKER, "")
    return await run_push(config, timeout, env, out=out, err=err, stores=stores)


async def run_command(
    command: str,
    config_path: str | Path,
    env: Mapping[str, str],
    *,
    timeout: float | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    stores: StoreOpener = own_store,
    exit_code: Callable[[], Awaitable[int | None]] | None = None,
) -> int:
    """Run ``pull`` or ``push`` as the container would; return its exit code.

    An error is one line on ``err`` and exit code 1, as the container reports it.
    """
    try:
        config = await asyncio.to_thread(load_config, config_path, env)
        if command == "pull":
            return await run_pull(config, env, out=out, err=err, stores=stores)
        if command == "sidecar":
            return await run_sidecar(config, timeout, env, out=out, err=err, stores=stores)
        return await run_push(
            config, timeout, env, out=out, err=err, stores=stores, exit_code=exit_code
        )
    except (RegistryError, OSError) as exc:
        # An OSError is the volume's (full, read-only): as much the step's failure as a
        # registry's, and as much due one line naming the path and the cause.
        message = str(exc) if isinstance(exc, RegistryError) else _os_failure(exc)
        print(f"k8sjobs handoff {command}: {message}", file=err, flush=True)
        await asyncio.to_thread(_leave_message, env, message)
        if command == "sidecar":  # the Flux runner waits for the inputs: tell it
            with contextlib.suppress(OSError):
                await asyncio.to_thread(_mark_pull_failed, env)
        return 1
    except BaseException:
        if command == "sidecar":  # a crash too, or the runner waits its whole bound
            with contextlib.suppress(OSError):
                await asyncio.shield(asyncio.to_thread(_mark_pull_failed, env))
        raise


#: Where the handoff leaves its one-line error (the pod's terminationMessagePath): set by the
#: local runner; in a container the kubelet's /dev/termination-log, when it exists.
TERMINATION_LOG_ENV = "K8SJOBS_TERMINATION_LOG"
_TERMINATION_LOG = "/dev/termination-log"


def _leave_message(env: Mapping[str, str], message: str) -> None:
    """Write ``message`` as the container's termination message, so the step's own message
    says why it failed from the Pod watch, without a log read. Never raises: the exit code
    and the log still say it."""
    path = env.get(TERMINATION_LOG_ENV) or (
        _TERMINATION_LOG if os.path.exists(_TERMINATION_LOG) else ""
    )
    if path:
        with contextlib.suppress(OSError), open(path, "w") as file:
            file.write(message[:4000] + "\n")


def _os_failure(exc: OSError) -> str:
    """Return the one line an OSError outside a pull's target is reported as."""
    from ._transfer import target_failure

    return target_failure("writing the shared volume", Path(exc.filename or "?"), exc)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``python -m k8sjobs.handoff``."""
    parser = argparse.ArgumentParser(
        prog="python -m k8sjobs.handoff", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    pull = sub.add_parser("pull", help="pull the step's inputs (init container)")
    pull.add_argument("--config", required=True, help="path of the handoff JSON config")
    push = sub.add_parser("push", help="wait for the step, then push its outputs")
    push.add_argument("--config", required=True, help="path of the handoff JSON config")
    push.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait for the exit marker"
    )
    push.add_argument(
        "--exit-code",
        type=int,
        default=None,
        help="the step's exit code, when the caller knows it (no marker is waited for)",
    )
    sidecar = sub.add_parser(
        "sidecar", help="pull, mark the inputs ready, wait, push (a MiniCluster's lead pod)"
    )
    sidecar.add_argument("--config", required=True, help="path of the handoff JSON config")
    sidecar.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait for the exit marker"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the handoff command line; return its exit code (errors: one line on stderr).

    Without arguments, they come from $K8SJOBS_HANDOFF_ARGS (split at white space): a Flux
    Operator container runs the image's entrypoint alone (k8sjobs.render.minicluster).
    """
    if argv is None and len(sys.argv) == 1 and os.environ.get(ARGS_ENV):
        argv = os.environ[ARGS_ENV].split()
        if os.environ.get(CONFIG_ENV):
            argv += ["--config", os.environ[CONFIG_ENV]]
    args = build_parser().parse_args(argv)
    timeout = getattr(args, "timeout", None)
    known: int | None = getattr(args, "exit_code", None)

    async def exit_code() -> int | None:
        return known

    try:
        return asyncio.run(
            run_command(
                args.command,
                args.config,
                os.environ,
                timeout=timeout,
                exit_code=exit_code if known is not None else None,
            )
        )
    except KeyboardInterrupt:
        return 130
