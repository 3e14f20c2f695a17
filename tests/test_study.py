"""Study files (errors name the line and the field) and the DAG runner on the local backend."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from k8sjobs import Session, StepOutput, StepResult, StepState, StudyError, load_study
from k8sjobs.local import LocalBackend
from k8sjobs.study import StudyRun, parse_study

PIPELINE = Path(__file__).parent.parent / "examples" / "pipeline" / "study.yaml"


def study_text(body: str) -> str:
    return "name: s\n" + textwrap.dedent(body).lstrip("\n")


def error_of(body: str, base_dir: Path = Path(".")) -> str:
    with pytest.raises(StudyError) as caught:
        parse_study(study_text(body), source="s.yaml", base_dir=base_dir)
    return str(caught.value)


# --- errors point to the line and the field -----------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            """
            steps:
              - name: a
                script: echo
                resources: {memory: 12 gigs}
            """,
            's.yaml:5: step "a": resources.memory: "12 gigs" is not a Kubernetes quantity',
        ),
        (
            """
            steps:
              - name: a
                scirpt: echo
            """,
            's.yaml:4: step "a": scirpt: "scirpt" is not a field of Step; did you mean "script"?',
        ),
        (
            """
            defaults:
              resources: {memory: lots}
            steps:
              - name: a
                script: echo
            """,
            's.yaml:3: step "a": resources.memory: "lots" is not a Kubernetes quantity',
        ),
        (
            """
            steps:
              - name: a
                script: echo
              - name: b
                script: echo
                depends: [aa]
            """,
            's.yaml:7: step "b": depends: no step is called "aa"; did you mean "a"?',
        ),
        (
            """
            steps:
              - name: a
                script: echo
                depends: [b]
              - name: b
                script: echo
                depends: [a]
            """,
            's.yaml:5: step "a": depends: the steps depend on each other in a cycle: a -> b -> a',
        ),
        (
            """
            steps:
              - name: a
                script_file: nope.sh
            """,
            's.yaml:4: step "a": script_file: cannot read nope.sh: No such file or directory',
        ),
        (
            """
            steps:
              - name: a
                script: echo
              - name: a
                script: echo
            """,
            's.yaml:5: step "a": name: another step is already called "a" (s.yaml:3)',
        ),
        (
            """
            steps:
              - name: a
                script: echo
                outputs: {out: o.txt}
              - name: b
                script: echo
                inputs: {x: a.ot}
            """,
            's.yaml:8: step "b": inputs.x: step "a" has no output "ot" (its outputs: out)',
        ),
        (
            """
            steps:
              - name: a
                script: echo
                inputs: {x: prodcue.data}
            """,
            's.yaml:5: step "a": inputs.x: no step is called "prodcue"',
        ),
        (
            """
            stesp: []
            """,
            's.yaml:2: unknown key "stesp"',
        ),
    ],
    ids=[
        "memory",
        "typo",
        "defaults",
        "depends",
        "cycle",
        "script_file",
        "duplicate",
        "output",
        "producer",
        "study-key",
    ],
)
def test_error_names_line_and_field(body: str, expected: str) -> None:
    assert error_of(body).startswith(expected)


def test_every_bad_step_is_reported_at_once() -> None:
    message = error_of(
        """
        steps:
          - name: a
            script: echo
            walltme: 5m
          - name: b
            script: echo
            retries: -1
        """
    )
    assert 's.yaml:5: step "a": walltme' in message
    assert 's.yaml:8: step "b": retries' in message


def test_script_file_is_read_relative_to_the_study(tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("echo from a file\n")
    (tmp_path / "s.yaml").write_text(study_text("steps:\n  - name: a\n    script_file: job.sh\n"))
    assert load_study(tmp_path / "s.yaml").step("a").script == "echo from a file\n"


# --- expansion ----------------------------------------------------------------------------


def test_sweep_expands_one_step_per_value_with_env_and_fan_in() -> None:
    study = load_study(PIPELINE)
    names = [s.name for s in study.steps]
    shards = [f"transform[SHARD={i}]" for i in range(3)]
    assert names == ["produce", *shards, "aggregate"]
    assert [study.step(n).env["SHARD"] for n in shards] == ["0", "1", "2"]
    assert "SHARD=" not in study.step(shards[0]).script  # env, not text substitution
    assert study.step("aggregate").inputs == {
        f"parts-shard-{i}": StepOutput(step=n, output="part") for i, n in enumerate(shards)
    }
    assert study.depends["aggregate"] == tuple(shards)
    assert study.depends[shards[1]] == ("produce",)


def test_two_parameters_expand_to_their_product() -> None:
    study = parse_study(
        study_text(
            """
            steps:
              - name: sim
                parameters: {T: [300, 310], P: [1]}
                script: echo $T $P
            """
        )
    )
    assert [s.name for s in study.steps] == ["sim[P=1,T=300]", "sim[P=1,T=310]"]


# --- running ------------------------------------------------------------------------------


def files(folder: Path, pattern: str) -> dict[str, str]:
    """Return the text of the files matching ``pattern`` in ``folder``, by name."""
    return {p.name: p.read_text() for p in sorted(folder.glob(pattern))}


async def run_study(
    tmp_path: Path, body: str, *, max_parallel: int | None = None, cpu: float = 8
) -> tuple[StudyRun, dict[str, StepResult]]:
    """Run the study text on a fresh local backend; return the run and results by step."""
    study = parse_study(study_text(body), base_dir=tmp_path)
    backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5, cpu=cpu)
    async with Session(study=study.name, backend=backend) as session:
        run = StudyRun(study, session, max_parallel=max_parallel)
        results = await run.run()
    return run, {r.name: r for r in results}


async def test_failure_stops_dependents_and_not_independent_branches(tmp_path: Path) -> None:
    body = f"""
        steps:
          - name: broken
            script: exit 5
          - name: after
            depends: [broken]
            script: touch {tmp_path}/after-ran
          - name: later
            depends: [after]
            script: touch {tmp_path}/later-ran
          - name: other
            script: sleep 0.2; touch {tmp_path}/other-ran
        """
    _, results = await run_study(tmp_path, body)
    states = {name: (r.state, r.reason) for name, r in results.items()}
    assert states == {
        "broken": (StepState.FAILED, "ExitCode"),
        "after": (StepState.FAILED, "DependencyFailed"),
        "later": (StepState.FAILED, "DependencyFailed"),
        "other": (StepState.SUCCEEDED, "Completed"),
    }
    assert "broken FAILED" in results["after"].message
    assert "after FAILED" in results["later"].message
    assert list(files(tmp_path, "*-ran")) == ["other-ran"]


async def test_sweep_runs_each_value_with_its_env(tmp_path: Path) -> None:
    body = f"""
        steps:
          - name: sweep
            parameters: {{N: [1, 2, 3]}}
            script: echo $N > {tmp_path}/out-$N
        """
    _, results = await run_study(tmp_path, body)
    assert all(r.ok for r in results.values())
    assert files(tmp_path, "out-*") == {f"out-{n}": f"{n}\n" for n in (1, 2, 3)}


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """Return the most spans open at once (the most open at any span's start)."""
    return max(sum(a <= start < b for a, b in spans) for start, _ in spans)


async def test_max_parallel_bounds_running_steps(tmp_path: Path) -> None:
    spans = tmp_path / "spans"
    spans.mkdir()
    body = f"""
        steps:
          - name: w
            parameters: {{I: [1, 2, 3, 4, 5]}}
            script: s=$(date +%s.%N); sleep 0.3; echo $s $(date +%s.%N) > {spans}/$I
        """
    run, results = await run_study(tmp_path, body, max_parallel=2)
    assert all(r.ok for r in results.values())
    times = [(float(a), float(b)) for a, b in (p.read_text().split() for p in spans.iterdir())]
    assert max_overlap(times) == 2
    timeline = run.timeline()
    assert [s["state"] for s in timeline["steps"]] == ["SUCCEEDED"] * 5
    assert all(s["queued"] <= s["started"] + 1 for s in timeline["steps"])


# --- the same study on the local backend and on the fake cluster --------------------------

SAME_STUDY = """
name: same
defaults:
  walltime: 1m
  resources: {cores_per_task: 1, memory: 256Mi}
steps:
  - name: produce
    shell: python
    script_file: produce.py
    outputs: {samples: samples.csv}
  - name: transform
    parameters: {SHARD: [0, 1]}
    inputs: {samples: produce.samples}
    script_file: transform.sh
    shell: bash
    outputs: {part: part.csv}
  - name: aggregate
    shell: python
    inputs: {parts: transform.part}
    script_file: aggregate.py
    outputs: {summary: summary.txt}
  - name: broken
    script: echo broken; exit 4
  - name: after-broken
    depends: [broken]
    script: echo never
"""


async def run_same_study(
    session: Session,
) -> tuple[dict[str, tuple[StepState, str, int | None]], str]:
    """Return each step's (state, reason, exit code), and the aggregate's log."""
    study = parse_study(SAME_STUDY, base_dir=PIPELINE.parent)
    results = await StudyRun(study, session).run()
    outcome = {r.name: (r.state, r.reason, r.exit_code) for r in results}
    return outcome, await session.handles["aggregate"].logs()


async def test_same_study_same_outcome_locally_and_on_the_fake_cluster(tmp_path: Path) -> None:
    from k8sjobs.testing import ControllerConfig, FakeCluster

    backend = LocalBackend(state_dir=tmp_path / "local", kill_grace=0.5)
    async with Session(study="same", backend=backend) as session:
        local = await run_same_study(session)
    (tmp_path / "cluster").mkdir()
    timings = ControllerConfig(batch_period=0.05, backoff_base=0.2, backoff_max=2.0)
    async with (
        FakeCluster("execute", directory=tmp_path / "cluster", controller=timings) as cluster,
        Session(
            study="same",
            backend="kubernetes",
            kubeconfig=cluster.kubeconfig_path,
            store=f"oci:{tmp_path / 'artifacts'}",
            log_dir=tmp_path / "logs",
        ) as session,
    ):
        on_cluster = await run_same_study(session)
    assert local == on_cluster
    outcome, aggregate_log = local
    assert outcome["aggregate"] == (StepState.SUCCEEDED, "Completed", 0)
    assert outcome["broken"] == (StepState.FAILED, "ExitCode", 4)
    assert outcome["after-broken"] == (StepState.FAILED, "DependencyFailed", None)
    assert aggregate_log.startswith("rows=2000 mean_square=")
