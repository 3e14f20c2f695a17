"""A mini MuMMI: a Python driver that keeps the machine busy with short simulations.

MuMMI (the Multiscale Machine-learned Modeling Infrastructure) couples a macro model that
proposes candidate "patches" with many short simulations of the most interesting ones, and
feeds what the simulations find back into its choice of what to simulate next. This driver
does the same on a small scale:

- a macro model (here a seeded random generator) proposes candidate patches;
- the driver keeps ``--slots`` simulations in flight, submitting a new one as soon as one
  ends (the backend's slot scheduler guarantees the machine is never oversubscribed);
- each simulation's result is analysed as it completes (``Session.as_completed``), and the
  analysis steers the next choice: candidates near the lowest energy found so far go first.

    python examples/mummi_driver.py                  # 12 simulations, 4 at a time, local
    python examples/mummi_driver.py --sims 40 --slots 8
    python examples/mummi_driver.py --backend kubernetes --namespace hpc
    python examples/mummi_driver.py --metrics-port 9464 --trace sims.tsv   # for dashboards

On the local backend it runs in a few seconds with no cluster.

Watched the way a days-long run is (docs/observability.md): ``--metrics-port`` serves
Prometheus metrics (steps by state, ended by result, durations, queue waits, cache hits),
``--trace`` writes a row per simulation as it ends, and with ``OTEL_EXPORTER_OTLP_ENDPOINT``
set (and k8sjobs[otel] installed) each wave is a span of the driver's whose children are its
simulations' spans, so a trace viewer shows the loop as it steered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

from k8sjobs import Resources, Session, Step, StepHandle, StepResult
from k8sjobs.local import LocalBackend

# The "simulation": a few hundred milliseconds of work whose energy depends on the patch.
SIMULATION = """\
import json, math, os, time
x, y = float(os.environ["PATCH_X"]), float(os.environ["PATCH_Y"])
time.sleep(0.2 + 0.1 * (abs(x) % 1))
energy = (x - 1.5) ** 2 + (y + 0.5) ** 2 + 0.3 * math.sin(5 * x) * math.cos(5 * y)
print(json.dumps({"patch": os.environ["PATCH_ID"], "energy": round(energy, 4)}))
"""


@dataclass
class MacroModel:
    """Proposes patches; prefers the neighbourhood of the best energy seen so far."""

    rng: random.Random = field(default_factory=lambda: random.Random(7))
    best: tuple[float, float, float] | None = None  # (energy, x, y)
    proposed: int = 0

    def propose(self) -> tuple[str, float, float]:
        self.proposed += 1
        if self.best is None or self.rng.random() < 0.3:  # explore
            x, y = self.rng.uniform(-3, 3), self.rng.uniform(-3, 3)
        else:  # exploit: perturb the best patch found so far
            _, bx, by = self.best
            x, y = bx + self.rng.gauss(0, 0.4), by + self.rng.gauss(0, 0.4)
        return f"patch-{self.proposed:04d}", round(x, 3), round(y, 3)

    def learn(self, energy: float, x: float, y: float) -> bool:
        """Take one simulation's result into account; return whether it is a new best."""
        if self.best is None or energy < self.best[0]:
            self.best = (energy, x, y)
            return True
        return False


def simulation(patch: str, x: float, y: float) -> Step:
    return Step(
        name=f"sim-{patch}",
        shell="python",
        script=SIMULATION,
        env={"PATCH_ID": patch, "PATCH_X": str(x), "PATCH_Y": str(y)},
        resources=Resources(cores_per_task=1, memory="128Mi"),
        walltime="1m",
    )


Span = Callable[[str], AbstractContextManager[Any]]


def _no_span(name: str) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


async def drive(session: Session, sims: int, slots: int, span: Span = _no_span) -> MacroModel:
    """Run ``sims`` simulations, ``slots`` at a time; return the macro model it taught.

    Each simulation that ends is analysed at once and replaced by a new one, chosen with
    what the analysis taught the model, so the slots stay full. The replacements form the
    next wave, whose results are read as they complete once this wave is done.
    """
    model = MacroModel()
    patches: dict[str, tuple[float, float]] = {}

    async def submit() -> StepHandle:
        patch, x, y = model.propose()
        patches[f"sim-{patch}"] = (x, y)
        return await session.submit(simulation(patch, x, y))

    with span("wave 1"):  # the steps submitted inside a span are its children
        wave = [await submit() for _ in range(min(slots, sims))]
    number = 1
    while wave:
        next_wave = []
        number += 1
        with span(f"wave {number}"):
            async for handle in session.as_completed(wave):
                analyse(handle.name, handle.result, await handle.logs(), model, patches)
                if model.proposed < sims:  # feed new work as a slot frees up
                    next_wave.append(await submit())
        wave = next_wave
    return model


def tracing() -> tuple[Any, Span]:
    """Return a tracer provider and the driver's span maker, when OTLP is configured
    (``OTEL_EXPORTER_OTLP_ENDPOINT``) and k8sjobs[otel] installed; else (None, no spans)."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None, _no_span
    try:
        from k8sjobs.observe.otel import env_tracer_provider
    except ImportError:
        return None, _no_span
    provider = env_tracer_provider()
    tracer = provider.get_tracer("mummi-mini")
    return provider, lambda name: tracer.start_as_current_span(name)


def analyse(
    name: str,
    result: StepResult,
    log: str,
    model: MacroModel,
    patches: dict[str, tuple[float, float]],
) -> None:
    """Read a simulation's energy from its output and teach it to the model."""
    if not result.ok:
        print(result.describe(), flush=True)
        return
    energy = json.loads(log.strip().splitlines()[-1])["energy"]
    x, y = patches[name]
    mark = "  new best" if model.learn(energy, x, y) else ""
    print(f"{name} ({x:+.2f}, {y:+.2f}) energy {energy:8.4f}{mark}", flush=True)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=12, help="simulations to run (default 12)")
    parser.add_argument("--slots", type=int, default=4, help="simulations at once (default 4)")
    parser.add_argument("--backend", choices=("local", "kubernetes"), default="local")
    parser.add_argument("--namespace", default=None)
    parser.add_argument("--state-dir", help="local backend state (default: a fresh temp dir)")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    parser.add_argument("--trace", help="write a row per simulation to this file as it ends")
    args = parser.parse_args(argv)
    provider, span = tracing()
    with tempfile.TemporaryDirectory(prefix="mummi-") as scratch:
        backend: Literal["kubernetes"] | LocalBackend = "kubernetes"
        if args.backend == "local":  # as many cores as slots: the scheduler keeps it at that
            backend = LocalBackend(state_dir=args.state_dir or scratch, cpu=args.slots)
        session = Session(
            study="mummi-mini",
            backend=backend,
            namespace=args.namespace,
            tracer_provider=provider,
            metrics_port=args.metrics_port,
            trace_file=args.trace,
        )
        async with session as s:
            if s.observer is not None and s.observer.metrics_url:
                print(f"metrics: {s.observer.metrics_url}", flush=True)
            model = await drive(s, args.sims, args.slots, span)
            results = await s.gather()
    if model.best is not None:
        energy, x, y = model.best
        print(f"best patch of {len(results)} simulations: ({x:+.2f}, {y:+.2f}) energy {energy}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
