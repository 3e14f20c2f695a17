"""The study commands: ``run``, ``status``, ``logs``, ``cancel``, ``render``, ``report``
(their arguments are in studyargs.py, which imports this module when one runs).

Each ``_cmd_*`` takes the parsed arguments and returns the exit code (0 every step shown
succeeded, 1 one did not or nothing was found); a mistake raises ``UsageError`` or one of
the library's errors, which ``main`` prints as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .._printable import printable
from ..errors import StudyBusy, StudyError
from ..handle import StepHandle
from ..render.allocation import render_allocation
from ..render.manifests import Target, render
from ..render.sshkey import key_for
from ..runrecord import read_run, retime
from ..session import Session
from ..state import StepResult, StepState
from ..steps.allocation import Allocation
from ..steps.spec import Step, StepOutput
from ..study import (
    StudyRun,
    count_origins,
    load_study,
    parse_step_file,
    parse_study,
    read_study_text,
    read_yaml,
)
from ..usage import request_versus_use
from .console import Console
from .exits import closed_pipe
from .options import UsageError, split_study_args
from .options import study_name as _study_name
from .statustable import Progress, status_table, step_record, usage_summary

__all__: list[str] = []  # studyargs.py names its commands


def _select(args: argparse.Namespace, command: str) -> str:
    """Split the positionals into the study file and the steps; return the study's name."""
    args.study_file, args.steps = split_study_args(args.words, args.study)
    return _study_name(args, command)


def _require_store(args: argparse.Namespace) -> None:
    """Refuse a Kubernetes run without an artifact store before anything starts: each step's
    pod hands its outputs and the step cache through it, so every step would fail."""
    if args.backend == "kubernetes" and not args.registry:
        raise UsageError(
            "k8sjobs run --backend kubernetes needs an artifact store: give --registry "
            "HOST:PORT/PREFIX (a registry the pods can reach), or --registry oci:/path for a "
            "fake or single-machine cluster whose pods see that path"
        )


def _session(
    args: argparse.Namespace, study: str, allocations: Sequence[Allocation] = ()
) -> Session:
    """Return the session of a study command; ``allocations`` are the study's (a run's)."""
    return Session(
        study=study,
        backend=args.backend,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        context=args.context,
        store=getattr(args, "registry", None),
        plain_http=getattr(args, "plain_http", False),
        **({"handoff_image": args.handoff_image} if hasattr(args, "handoff_image") else {}),
        log_dir=args.state_dir / "logs",
        keep_failed=getattr(args, "keep_failed", False),
        cache=not getattr(args, "no_cache", False),
        options=_local_options(args) if args.backend == "local" else _kube_options(args),
        trace_file=getattr(args, "trace", None),
        metrics_port=getattr(args, "metrics_port", None),
        allocations=allocations,
    )


def _kube_options(args: argparse.Namespace) -> dict[str, object]:
    """Return the KubernetesBackend's options from the command line (its API bounds)."""
    return {"connect_timeout": args.connect_timeout, "outage_timeout": args.outage_timeout}


def _local_options(args: argparse.Namespace) -> dict[str, object]:
    """Return the LocalBackend's options from the command line."""
    options: dict[str, object] = {"state_dir": args.state_dir}
    if getattr(args, "cpu", None) is not None:
        options["cpu"] = args.cpu
    if getattr(args, "volume", None):
        from ..local._volumedirs import parse_volume_map  # the local stack only when it runs

        options["volumes"] = parse_volume_map(",".join(args.volume), "--volume")
    return options


async def _cmd_run(args: argparse.Namespace) -> int:
    study = load_study(args.study_file, name=args.study)
    _require_store(args)
    console = Console(soft_wrap=True, highlight=False)
    names = [s.name for s in study.steps]
    # A reader that leaves (| head) stops the run as Ctrl-C does: its steps are cancelled
    # and its record kept, where a driver dying of the closed pipe would leave them LOST.
    main = asyncio.current_task()
    assert main is not None
    live = console.is_terminal and not args.plain
    display = Progress(names, console, live=live, on_reader_left=main.cancel)
    async with _session(args, study.name, study.allocations) as session:
        url = session.observer.metrics_url if session.observer is not None else None
        if url is not None:
            print(f"metrics: {url}", flush=True)
        health = getattr(session.backends.get("kubernetes"), "health", None)
        if health is not None:  # an unreachable API server is said above the steps
            health.add_listener(lambda h: display.notice(h.notice()))
        run = StudyRun(
            study,
            session,
            max_parallel=args.max_parallel,
            on_change=lambda record: display.update(_as_seen(record)),
            replace=args.replace,
            rerun=True if args.rerun_all else [n for a in args.rerun for n in a.split(",") if n],
        )
        run.record_to(args.state_dir / "runs")  # refused here if another driver runs it
        refused = False
        try:
            with display:
                results = await run.run()
        except StudyBusy:
            refused = True  # no step was sent: the study's records stay as they were
            run.discard()
            raise
        except asyncio.CancelledError:
            if not display.reader_left:
                raise
            main.uncancel()
        finally:
            if not refused:
                path = run.save(args.state_dir / "runs")
                requested = {name: r.requested for name, r in run.records.items()}
                seen = [r.seen() for r in run.records.values()]
                display.summary(seen, study.name, path, requested)
                if not display.reader_left:
                    print(count_origins(r.origin for r in run.records.values()), flush=True)
    if display.reader_left:
        return closed_pipe()
    return 0 if all(r.ok for r in results) else 1


async def _attach(args: argparse.Namespace, study: str) -> tuple[Session, list[Any]]:
    session = _session(args, study)
    try:
        await session.start()
        handles = await session.attach(study)
    except BaseException:
        await session.aclose()
        raise
    return session, handles


async def _cmd_status(args: argparse.Namespace) -> int:
    study = _select(args, "status")
    session, handles = await _attach(args, study)
    try:
        run = read_run(args.state_dir / "runs", study)
        if run is not None and run.get("damaged"):  # the steps found are shown all the same
            print(printable(run["damaged"]), file=sys.stderr)
        handles = [*handles, *_reused(session, study, handles, run)]
        results, events = _results(args, study, handles, run)
        if args.steps:
            results = [r for r in results if r.name in args.steps]
            events = {n: e for n, e in events.items() if n in args.steps}
            if _unknown_step(args, study, results, args.steps, handles):
                return 1
        if not results:
            _no_study(args, study)
            return 1
        natives = {h.name: h.backend.native_of(h).id for h in handles if _native(h)}
        _print_status(args.output, study, results, events, run, natives)
        if args.watch:
            watched = await _watch(session, args, study, handles)
            results = [*[h.result for h in watched], *_unrun(results, watched)]
        return 0 if all(r.ok for r in results) else 1
    finally:
        await session.aclose()


def _native(handle: Any) -> bool:
    from ..observe.native import NativeSource

    return isinstance(handle.backend, NativeSource)


def _print_tsv(
    results: Sequence[StepResult], origins: dict[str, str], natives: dict[str, str]
) -> None:
    """Print the trace file's header and a row per step (submit and wait are the run's)."""
    from ..observe.tracefile import header, row_of_result

    rows = [
        row_of_result(r, native_id=natives.get(r.name, ""), origin=origins.get(r.name, ""))
        for r in results
    ]
    sys.stdout.write(header() + "".join(rows))
    sys.stdout.flush()


def _reused(
    session: Session, study: str, found: Sequence[Any], run: dict[str, Any] | None
) -> list[StepHandle]:
    """Return handles for the steps the last run reused that no backend object stands for
    (a result recorded by another study or an older run): ``status`` shows what ``run`` did."""
    if run is None:
        return []
    known = {h.name for h in found}
    backend = next(iter(session.backends.values()))
    handles = []
    for step in run.get("steps") or []:
        if step.get("origin") != "reused" or step.get("name") in known:
            continue
        handle = StepHandle(
            name=step["name"], study=study, object_name="", namespace="", backend=backend
        )
        handle.report(
            StepResult(
                name=step["name"],
                state=StepState.SUCCEEDED,
                reason=str(step.get("reason") or "Cached"),
                message=str(step.get("message") or ""),
                exit_code=step.get("exit_code"),
                outputs=dict(step.get("outputs") or {}),
            )
        )
        handles.append(handle)
    return handles


def _origins(run: dict[str, Any] | None) -> dict[str, str]:
    """Return each step's origin in the last run (ran, reused, adopted, not run)."""
    if run is None:
        return {}
    return {str(s["name"]): str(s["origin"]) for s in run.get("steps") or [] if "origin" in s}


def _results(
    args: argparse.Namespace, study: str, handles: Sequence[Any], run: dict[str, Any] | None
) -> tuple[list[StepResult], dict[str, list[str]]]:
    """Return every step to show (those found, then those of the last run that never ran)
    and each found step's events."""
    # The run record's driver times where the backend's are whole seconds (Kubernetes).
    found = [retime(h.result, run) for h in handles]
    names = {r.name for r in found}
    never = [r for name, r in _recorded(args, study).items() if name not in names]
    return [*found, *never], {h.name: _events(h) for h in handles}


def _unrun(results: Sequence[StepResult], handles: Sequence[Any]) -> list[StepResult]:
    names = {h.name for h in handles}
    return [r for r in results if r.name not in names]


def _recorded(args: argparse.Namespace, study: str) -> dict[str, StepResult]:
    """Return the steps of ``study``'s last recorded run, by name (none when not recorded).

    A step that never started (its upstream failed, the run stopped first) has no Job or
    process to find, only this record: "not run: upstream X failed".
    """
    run = read_run(args.state_dir / "runs", study)
    if run is None:
        return {}
    return {
        s["name"]: StepResult(
            name=s["name"],
            state=StepState(s["state"]),
            reason=s.get("reason") or "",
            message=s.get("message") or "",
            log_file=s.get("log_file") if isinstance(s.get("log_file"), str) else None,
        )
        for s in run.get("steps", ())
        if s.get("state") in StepState.__members__
    }


def _unknown_step(
    args: argparse.Namespace,
    study: str,
    results: Sequence[StepResult],
    wanted: Sequence[str],
    handles: Sequence[Any],
) -> bool:
    """Say so, listing the steps it has, when the study has no step of a name asked for."""
    known = {r.name for r in results}
    unknown = [n for n in wanted if n not in known]
    every = sorted({h.name for h in handles} | set(_recorded(args, study)))
    if unknown and every:
        print(
            f'study "{study}" has no step "{unknown[0]}" (steps: {", ".join(every)})',
            file=sys.stderr,
        )
        return True
    return False


def _no_study(args: argparse.Namespace, study: str) -> None:
    """Say that nothing of ``study`` is there: no step found, no run recorded."""
    where = (
        f"{args.state_dir}"
        if args.backend == "local"
        else f"namespace {args.namespace or 'of the kubeconfig context'} (nor a run "
        f"recorded in {args.state_dir})"
    )
    print(f'no study "{study}" in {where}; run it first (k8sjobs run STUDY.yaml)', file=sys.stderr)


def _print_status(
    output: str,
    study: str,
    results: Sequence[StepResult],
    events: dict[str, list[str]],
    run: dict[str, Any] | None = None,
    natives: dict[str, str] | None = None,
) -> None:
    origins = _origins(run)
    recorded = {s["name"]: s.get("requested") for s in (run or {}).get("steps") or ()}
    if output == "tsv":
        _print_tsv(results, origins, natives or {})
        return
    if output in ("json", "yaml"):
        steps = [
            {
                **step_record(r),
                **({"requested": recorded[r.name]} if recorded.get(r.name) else {}),
                **({"origin": origins[r.name]} if r.name in origins else {}),
                "events": events.get(r.name, []),
            }
            for r in results
        ]
        _print_document(output, {"study": study, "steps": steps})
        return
    _console().print(status_table(results, wide=output == "wide"))
    if output == "wide":  # requested against used, where either is known
        for r in results:
            versus = request_versus_use(recorded.get(r.name), r.usage) if r.usage else ""
            if versus:
                print(printable(f"  {r.name}: {versus}"))
    used = usage_summary(results, recorded)
    if used:
        print(used)
    _print_outputs(results)
    shown = [origins[r.name] for r in results if r.name in origins]
    driver = (run or {}).get("driver") or {}
    if driver.get("alive"):  # the record is a run still going: say so, and what it did so far
        who = f"pid {driver.get('pid')} on {driver.get('host')}"
        print(printable(f"a run is going (its driver: {who}); so far: {count_origins(shown)}"))
    elif "reused" in shown or "adopted" in shown:  # where the backend's view is not the run's
        print("last run: " + count_origins(shown))
    for name, described in events.items():  # each failed, evicted or deleted pod, its cost
        for line in described:
            print(printable(f"  {name}: {line}"))


def _print_outputs(results: Sequence[StepResult]) -> None:
    """Print each pushed output's reference, the name to pull it by or read it in another
    study: ``STEP.OUTPUT: REF`` (also ``outputs`` in ``-o json``)."""
    refs = [(r.name, key, ref) for r in results for key, ref in r.outputs.items()]
    if refs:
        print("outputs (k8sjobs artifact pull REF; k8sjobs lineage REF):")
    for name, key, ref in refs:
        print(printable(f"  {name}.{key}: {ref}"))


def _as_seen(record: Any) -> StepResult:
    """Return a step's result as ``run`` prints it: an adopted end says it was adopted."""
    result: StepResult = record.seen()
    if result.state.terminal and record.origin == "adopted":
        why = result.message or result.reason
        return result.evolve(message=f"adopted from an earlier run; {why}" if why else "adopted")
    return result


def _console() -> Console:
    """Return the console of a table: a terminal's width, or unbounded (one line a step) when
    piped, so that scripts can grep it."""
    console = Console(soft_wrap=True)
    return console if console.is_terminal else Console(soft_wrap=True, width=100_000)


def _events(handle: Any) -> list[str]:
    """Return what happened to the step's pods; a wait that cleared is history, and a mount
    of its own ConfigMap (made just after its Job) is shown only while the step waits for it
    past ``status.CONFIGMAP_WINDOW``."""
    cleared = handle.result.state not in (StepState.PENDING, StepState.PREEMPTED)
    # Within its window the judge reads that mount as the step's start, not a wait: neither.
    expected = cleared or handle.result.reason == "ContainerCreating"
    return [
        event.describe(cleared=cleared)
        for event in handle.events
        if not (expected and event.expected_of(handle.object_name))
    ]


def _print_document(output: str, document: dict[str, Any]) -> None:
    if output == "json":
        print(json.dumps(document, indent=2), flush=True)
    else:
        sys.stdout.write("---\n" + yaml.safe_dump(document, sort_keys=False))
        sys.stdout.flush()


async def _watch(
    session: Session, args: argparse.Namespace, study: str, handles: Sequence[Any]
) -> list[Any]:
    """Print each change (a row, or a document) until every step shown has ended; return
    the handles, current.

    A Kubernetes handle is kept current by the backend's watch; the local backend's records
    of another driver's run are files, read again every ``_POLL`` seconds (and new steps of
    the run join the watch as they are recorded).
    """
    changed = asyncio.Event()
    shown = {h.name: h.result for h in handles}
    live = {h.name: h for h in handles}
    poll = args.backend == "local"
    for handle in handles:
        handle.add_listener(lambda _h: changed.set())
    while not all(h.done for h in live.values()):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_POLL if poll else None):
                await changed.wait()
        changed.clear()
        if poll:
            found = await session.attach(study)
            live.update({h.name: h for h in found if not args.steps or h.name in args.steps})
        for handle in live.values():
            result = handle.result
            if shown.get(handle.name) == result:
                continue
            shown[handle.name] = result
            if args.output in ("json", "yaml"):
                _print_document(args.output, {"study": study, "steps": [step_record(result)]})
            else:
                table = status_table([result], wide=args.output == "wide")
                table.show_header = False
                _console().print(table)
    return list(live.values())


_POLL = 0.5


async def _cmd_cancel(args: argparse.Namespace) -> int:
    study = _select(args, "cancel")
    session, handles = await _attach(args, study)
    try:
        if args.steps:
            handles = [h for h in handles if h.name in args.steps]
        live = [h for h in handles if not h.done]
        await asyncio.gather(*(h.cancel() for h in live))
        for handle in live:
            print(f"{handle.name}: cancelled")
        if not live:
            print(f'study "{study}": nothing running to cancel')
        return 0
    finally:
        await session.aclose()


async def _cmd_logs(args: argparse.Namespace) -> int:
    study = _select(args, "logs")
    if len(args.steps) != 1:
        raise UsageError(
            "k8sjobs logs: name one step: k8sjobs logs [STUDY.yaml] STEP "
            f"(got {len(args.steps)}: {' '.join(args.steps) or 'none'})"
        )
    step = args.steps[0]
    session, handles = await _attach(args, study)
    try:
        found = [h for h in handles if h.name == step]
        if found:
            if not await _print_log(found[0], args):
                _say_why_empty(found[0].result)
            return 0
        recorded = _recorded(args, study)
        kept = _kept_log(args, recorded.get(step))
        if kept is not None:
            sys.stdout.write(kept)
            return 0
        if step in recorded:
            why = recorded[step].message or recorded[step].reason or str(recorded[step].state)
            print(printable(f'step "{step}" of study "{study}" has no log: {why}'), file=sys.stderr)
        elif not handles and not recorded:
            _no_study(args, study)
        else:
            names = ", ".join(sorted({h.name for h in handles} | set(recorded)))
            print(
                printable(f'study "{study}" has no step "{step}" (steps: {names})'), file=sys.stderr
            )
        return 1
    finally:
        await session.aclose()


def _kept_log(args: argparse.Namespace, result: StepResult | None) -> str | None:
    """Return the log the driver kept of a recorded step (one run in an allocation has no
    Job or process left to ask), its last ``--tail`` lines; None where none was kept.

    Only a file under the state directory's logs is read: the record is a file on disk."""
    if result is None or not result.log_file:
        return None
    path = Path(result.log_file)
    logs = (args.state_dir / "logs").resolve()
    try:
        if not path.resolve().is_relative_to(logs):
            return None
        with path.open("rb") as f:
            text = f.read(_KEPT_LOG_LIMIT).decode("utf-8", "replace")
    except OSError:
        return None
    from ..allocations.pool import tail_lines  # only a step in an allocation keeps one

    return tail_lines(text, args.tail)


#: The most of a kept log ``logs`` reads (the agent sends 64 KiB of a step's log at most).
_KEPT_LOG_LIMIT = 1 << 20


def _say_why_empty(result: StepResult) -> None:
    """Say on stderr why a step that ended badly left no log: a shell or program missing
    from the image fails before it can print (the cause is in the result, not the log)."""
    if result.state.terminal and not result.ok:
        why = result.message or result.reason
        print(
            printable(f'step "{result.name}" printed nothing; it ended {result.state}: {why}'),
            file=sys.stderr,
        )


async def _print_log(handle: Any, args: argparse.Namespace) -> int:
    """Write the step's log to stdout, in bounded chunks where the backend can stream it;
    return how much was written."""
    written = 0
    chunks = getattr(handle.backend, "log_chunks", None)  # the local backend's log files
    if chunks is None:
        if args.follow:
            async for line in handle.stream_logs(container=args.container):
                print(line, flush=True)
                written += len(line) + 1
        else:
            text = await handle.logs(container=args.container, tail=args.tail, index=args.index)
            sys.stdout.write(text)
            written = len(text)
        return written
    sys.stdout.flush()
    out = sys.stdout.buffer
    stream = chunks(
        handle, container=args.container, tail=args.tail, follow=args.follow, index=args.index
    )
    async for chunk in stream:
        out.write(chunk)
        written += len(chunk)
        if args.follow:
            out.flush()
    out.flush()
    return written


def _unordered(
    steps: Sequence[Step], depends: Mapping[str, Sequence[str]], waits: bool
) -> list[tuple[str, list[str]]]:
    """Return each step with the steps it waits for that a rendered pull cannot wait for:
    every one when the pull does not wait, else those it takes no input from."""
    producers = {
        step.name: {src.step for src in step.inputs.values() if isinstance(src, StepOutput)}
        for step in steps
    }
    found = []
    for name, deps in depends.items():
        left = [d for d in deps if not waits or d not in producers.get(name, set())]
        if left:
            found.append((name, left))
    return found


def _cmd_render(args: argparse.Namespace) -> int:
    text = read_study_text(args.file)  # bounded and UTF-8, as for a run
    data, lines = read_yaml(text, str(args.file))
    allocations: Sequence[Allocation]
    if isinstance(data, dict) and "steps" in data:
        study = parse_study(text, base_dir=args.file.parent, source=str(args.file), name=args.study)
        steps, name, allocations = list(study.steps), study.name, study.allocations
        unordered = _unordered(study.steps, study.depends, args.wait_inputs > 0)
        if unordered and not args.unordered:
            step, deps = unordered[0]
            how = (
                "a pull waits only for inputs (--wait-inputs), and it takes none from them"
                if args.wait_inputs > 0
                else "--wait-inputs 0 lets its pull start before they pushed"
            )
            raise UsageError(
                f'k8sjobs render: step "{step}" of {args.file} waits for {", ".join(deps)}, '
                f"but kubectl apply starts every Job at once and {how}; run the study with "
                "k8sjobs run --backend kubernetes, which submits each step when its upstream "
                "succeeded, or give --unordered to print the objects anyway"
            )
    elif isinstance(data, dict):
        steps, name = [parse_step_file(data, lines, str(args.file))], args.study or "default"
        allocations = ()
    else:
        raise StudyError(f"{args.file}: a step file is a mapping of step fields (name, script)")
    target = Target(
        study=name,
        namespace=args.namespace or "default",
        store=args.registry,
        plain_http=args.plain_http,
        handoff_image=args.handoff_image,
        wait_inputs=args.wait_inputs,
    )
    # The allocations' objects first: their pods wait for the steps sent to them.
    held = [render_allocation(a, target) for a in allocations]
    # A multi-node step gets a fresh key pair in its Secret, as when a Session submits it.
    rendered = (render(step, target, ssh_key=key_for(step)) for step in steps)
    sys.stdout.write("---\n".join(m.to_yaml() for m in itertools.chain(held, rendered)))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from ..runrecord import read_runs, record_paths
    from .report import report_html

    args.study_file = None
    if args.name is not None:
        path = Path(args.name)
        if args.name.endswith((".yaml", ".yml")) or path.is_file():
            args.study_file = path
        elif args.study is None:
            args.study = args.name
    name = _study_name(args, "report")
    runs = args.state_dir / "runs"
    recorded = read_runs(runs, name)
    if not recorded:
        print(f'no recorded run of study "{name}" in {runs}; run it first', file=sys.stderr)
        return 1
    for run in recorded:
        if run.get("damaged"):
            print(printable(run["damaged"]), file=sys.stderr)
    record, journal = record_paths(runs, name)
    source = journal if "driver" in recorded[0] else record
    html = report_html(recorded, source=str(source))
    if str(args.output) == "-":  # as every tool that writes a file takes it: stdout
        sys.stdout.write(html)
        return 0
    # Beside the record by default: the state directory, never the directory it ran from.
    output = args.output or record.with_suffix(".html")
    try:
        output.write_text(html)
    except BrokenPipeError:
        raise  # -o /dev/stdout whose reader left: the command ends quietly, as for -o -
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise UsageError(f"report: cannot write {output}: {why}; choose another -o FILE") from None
    print(f"wrote {output}")
    return 0
