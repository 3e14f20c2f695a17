"""Study files (errors name the line and the field) and the DAG runner on the local backend."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import tempfile
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs import Session, Step, StepOutput, StepResult, StepState, StudyError, load_study
from k8sjobs._boundedyaml import MAX_ALIASES, MAX_DEPTH, MAX_VALUES
from k8sjobs.cli.main import main
from k8sjobs.local import LocalBackend
from k8sjobs.study import (
    MAX_STEPS,
    MAX_STUDY_BYTES,
    StepRecord,
    StudyRun,
    fan_in_names,
    parse_study,
)

from .fuzz_values import any_values

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


async def test_an_on_change_that_raises_loses_no_step(tmp_path: Path) -> None:
    """The caller's display (``on_change``) failing, as a print to a closed pipe does, must
    not stop the run's record: every step still ends, and is recorded, as it ran."""
    study = parse_study(
        study_text("steps:\n  - name: a\n    script: 'true'\n  - name: b\n    script: exit 3\n"),
        base_dir=tmp_path,
    )
    calls: list[str] = []

    def broken(record: object) -> None:
        calls.append("called")
        raise BrokenPipeError(32, "Broken pipe")

    backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5)
    async with Session(study=study.name, backend=backend) as session:
        run = StudyRun(study, session, on_change=broken)
        results = await asyncio.wait_for(run.run(), 120)
    assert calls == ["called"]
    assert [(r.name, r.state) for r in results] == [
        ("a", StepState.SUCCEEDED),
        ("b", StepState.FAILED),
    ]
    assert [r.result.state for r in run.records.values()] == [r.state for r in results]


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


# --- wrong types, hostile files: located errors, never tracebacks (issue 14) -------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "steps:\n  - name: a\n    script: echo\n    depends: 1\n",
            's.yaml:5: step "a": depends: write a step name or a list of step names',
        ),
        (
            "steps:\n  - name: [a]\n    script: echo\n",
            "s.yaml:3: step 1: name: each step needs a name (['a'] is not text)",
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    inputs: [A]\n",
            's.yaml:5: step "a": inputs: write a mapping of names',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    walltime: 99999999999999999999\n",
            's.yaml:5: step "a": walltime: "99999999999999999999" is not a duration this can run',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    outputs: [x, {y: 1}]\n",
            's.yaml:5: step "a": outputs: write a mapping of names',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    parameters: {X: [[1]]}\n",
            's.yaml:5: step "a": parameters.X: write a non-empty list of plain values',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    backend: cloud\n",
            "s.yaml:5: step \"a\": backend: 'cloud' is not a backend; write one of: local",
        ),
        (
            "steps:\n  - name: a\n    script_file: [x.sh]\n",
            's.yaml:4: step "a": script_file: write a path',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    inputs: {x: {step: nope, output: o}}\n",
            's.yaml:5: step "a": inputs.x: no step is called "nope"',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    1: x\n",
            "s.yaml:5: step 1: 1 is not a field name",
        ),
        ("description: [x]\nsteps:\n  - name: a\n    script: echo\n", "s.yaml:2: description:"),
        ("1: x\nsteps: []\n", 's.yaml:2: unknown key "1"'),
        (
            "steps:\n  - name: a\n    script: echo\n    resources: {nodes: 3000000000}\n",
            's.yaml:5: step "a": resources.nodes: Input should be less than or equal to',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    inputs: {i: '::::'}\n",
            's.yaml:5: step "a": inputs: "i": "::::" is not an artifact reference',
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    env: {N: " + "9" * 5000 + "}\n",
            "s.yaml:5: not valid YAML: cannot read this value",
        ),
        (
            "steps:\n  - name: a\n    script: echo\n    env: {D: 2001-13-45}\n",
            "s.yaml:5: not valid YAML: cannot read this value",
        ),
    ],
    ids=[
        "depends-int",
        "name-list",
        "inputs-list",
        "walltime-huge",
        "outputs-list",
        "parameter-nested",
        "backend",
        "script_file-list",
        "producer-unknown",
        "key-int",
        "description",
        "study-key-int",
        "nodes-int32",
        "reference",
        "int-5000-digits",
        "date-month-13",
    ],
)
def test_wrong_types_are_located_errors(body: str, expected: str) -> None:
    message = error_of(body)
    # The YAML errors add the column (file:line:col:); the others start with file:line.
    if "not valid YAML" in expected:
        head = expected.split(": ")[0]
        assert message.startswith(head + ":"), message
        assert "cannot read this value" in message and "\n" not in message, message
    else:
        assert message.startswith(expected), message


@given(
    st.lists(st.sampled_from(["env", "script", "name", "inputs", "x y", "1"]), min_size=1),
    st.integers(0, 6),
    st.sampled_from(["top", "step", "nested"]),
)
@settings(max_examples=150, deadline=None)
def test_a_key_written_twice_in_any_mapping_is_refused_at_its_line(
    keys: list[str], where: int, level: str
) -> None:
    """Any mapping of the file (the study, a step, a step's env) holding one key twice is
    refused naming file:line of the second, never loaded with the first silently lost."""
    repeated = keys[where % len(keys)]
    written = [*keys, repeated] if keys.count(repeated) == 1 else keys
    indent = {"top": "", "step": "    ", "nested": "      "}[level]
    head = {"top": "", "step": "steps:\n  - z: 0\n", "nested": "steps:\n  - x:\n"}[level]
    body = head + "".join(f"{indent}{key!r}: 1\n" for key in written)
    duplicates = [i for i, key in enumerate(written) if written.index(key) != i]
    line = head.count("\n") + duplicates[0] + 1
    with pytest.raises(StudyError) as caught:
        parse_study(body, source="s.yaml")
    message = str(caught.value)
    assert message.startswith(f"s.yaml:{line}:"), (body, message)
    assert "written twice" in message and "\n" not in message, message


@pytest.mark.parametrize(
    "text",
    ["steps: [a\n", "a: b: c\n", "steps:\n  - name: a\n\tscript: x\n", "x: 'open\n", "{"],
)
def test_any_yaml_syntax_error_is_file_line_col_on_one_line(text: str) -> None:
    with pytest.raises(StudyError) as caught:
        parse_study(text, source="s.yaml")
    message = str(caught.value)
    assert re.match(r"s\.yaml:\d+:\d+: \S", message) and "\n" not in message, message


def test_depends_may_name_one_step_as_text() -> None:
    study = parse_study(
        study_text(
            """
            steps:
              - name: prep
                script: echo
              - name: run
                script: echo
                depends: prep
            """
        )
    )
    assert study.depends["run"] == ("prep",)


@pytest.mark.parametrize(
    ("body", "first", "second"),
    [
        (
            """
            steps:
              - name: "b[X=1]"
                script: echo
              - name: b
                parameters: {X: [1, 2]}
                script: echo
            """,
            'step "b[X=1]" (s.yaml:3)',
            'step "b" with parameters X=1 (s.yaml:6)',
        ),
        (
            """
            steps:
              - name: b
                parameters: {X: [1, "1"]}
                script: echo
            """,
            'step "b" with parameters X=1 (s.yaml:4) and step "b"',
            "X=1 (s.yaml:4)",
        ),
    ],
    ids=["plain-name", "same-value-twice"],
)
def test_names_made_by_parameters_must_stay_unique(body: str, first: str, second: str) -> None:
    # Kept, the second silently replaced the first: one step never ran, the run succeeded.
    message = error_of(body)
    assert 'two steps are called "b[X=1]"' in message, message
    assert first in message and second in message, message
    assert "rename one" in message


def test_parameters_past_the_step_limit_are_refused_before_expanding() -> None:
    values = list(range(100))
    message = error_of(
        f"steps:\n  - name: a\n    script: echo\n    parameters: {{A: {values}, B: {values}, "
        f"C: {values}}}\n"
    )
    assert message.startswith(
        f's.yaml:5: step "a": parameters: 1000000 combinations, more than the {MAX_STEPS}'
    )


def test_a_long_chain_of_steps_loads() -> None:
    # The cycle check walked the DAG recursively: a chain of 2000 steps was a RecursionError.
    lines = ["steps:"]
    for i in range(2000):
        lines += [f"  - name: s{i}", "    script: echo"]
        lines += [f"    depends: s{i - 1}"] if i else []
    study = parse_study("\n".join(lines))
    assert study.depends["s1999"] == ("s1998",)


BILLION_LAUGHS = """\
name: lol
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
steps: [{name: x, script: echo, env: {E: *i}}]
"""


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        (BILLION_LAUGHS, 7, f"more than {MAX_VALUES} values once its aliases"),
        ("steps:\n  - " + "[" * 200 + "]" * 200 + "\n", 2, f"nests deeper than {MAX_DEPTH} levels"),
        ("a: &a [x, *a]\n", 1, "the alias *a is inside its own anchor"),
        (
            "x: &x 1\ny: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n",
            2,
            f"more than {MAX_ALIASES} aliases",
        ),
    ],
    ids=["billion-laughs", "deep", "recursive", "aliases"],
)
def test_hostile_yaml_fails_fast_with_file_and_line(text: str, line: int, why: str) -> None:
    with pytest.raises(StudyError) as caught:
        parse_study(text, source="s.yaml")
    assert str(caught.value).startswith(f"s.yaml:{line}: "), caught.value
    assert why in str(caught.value)


def test_study_file_past_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * (MAX_STUDY_BYTES // 10 + 1))
    with pytest.raises(StudyError, match=f"larger than {MAX_STUDY_BYTES} bytes"):
        load_study(path)


def test_non_utf8_study_file_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: s\nsteps:\n  - name: caf\xe9\n    script: echo\n")
    with pytest.raises(StudyError) as caught:
        load_study(path)
    assert str(caught.value) == (
        f"{path}:3: not UTF-8 text (byte 0xe9 at column 14); save the study file as UTF-8"
    )


def test_non_utf8_script_file_names_step_and_both_files(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_bytes(b"echo ok\necho \xff\n")
    (tmp_path / "s.yaml").write_text("steps:\n  - name: a\n    script_file: run.sh\n")
    with pytest.raises(StudyError) as caught:
        load_study(tmp_path / "s.yaml")
    assert str(caught.value) == (
        f'{tmp_path / "s.yaml"}:3: step "a": script_file: {tmp_path / "run.sh"}:2: not UTF-8 '
        "text (byte 0xff at column 6); save the script file as UTF-8"
    )


# Fuzzing: any YAML value in any field of a study (and any text as a study) either loads or
# raises StudyError naming the file. Anything else is a traceback for the user.
_FIELDS = [*sorted(Step.model_fields), "script_file", "depends", "parameters", "backend"]
_values = any_values(
    words=["a", "b", "a.out", "b.x", "::::", "1h", "4Gi", "$(LAUNCHER)[2n]", "local", "s.yaml.sh"],
    keys=st.one_of(st.sampled_from(_FIELDS), st.text(max_size=6)),
)
_plausible = {
    "depends": st.one_of(st.sampled_from(["a", "b"]), st.lists(st.sampled_from(["a", "b", "c"]))),
    "inputs": st.dictionaries(
        st.sampled_from(["i", "x"]), st.sampled_from(["a.out", "b.out", "r/x:1", "::::"])
    ),
    "outputs": st.dictionaries(st.sampled_from(["out"]), st.sampled_from(["o.txt", "../x"])),
    "parameters": st.dictionaries(
        st.sampled_from(["X", "Y"]), st.lists(st.one_of(st.integers(0, 2), st.text(max_size=3)))
    ),
}
_steps = st.builds(
    lambda name, fields: {"name": name, "script": "echo", **fields},
    st.one_of(st.sampled_from(["a", "b", "c", "b[X=1]"]), _values),
    st.dictionaries(
        st.sampled_from(_FIELDS),
        st.one_of(_values, *_plausible.values()),
        max_size=4,
    ),
)
_studies = st.fixed_dictionaries(
    {"steps": st.one_of(st.lists(_steps, min_size=1, max_size=4), _values)},
    optional={"name": _values, "defaults": _values, "description": _values},
)


@given(_studies)
@settings(max_examples=400, deadline=None)
def test_any_study_document_loads_or_is_a_study_error(document: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        (Path(folder) / "s.yaml.sh").write_bytes(b"echo \xff\n")
        try:
            load_study(path)
        except StudyError as exc:
            assert str(exc).startswith(str(path)), exc
        # The command line says the same with exit code 2, never a traceback (exit 1).
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--state-dir", folder, "render", str(path), "--registry", "oci:/r"])
        assert code in (0, 2), err.getvalue()
        assert (code == 2) == err.getvalue().startswith("error: "), err.getvalue()


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_any_text_loads_or_is_a_study_error(text: str) -> None:
    try:
        parse_study(text, source="s.yaml")
    except StudyError as exc:
        assert str(exc).startswith("s.yaml"), exc


def test_a_record_times_whole_second_results_on_the_drivers_clock() -> None:
    """Whole-second stamps (the Kubernetes API's) give way to the runner's own, finer ones;
    finer stamps (the local backend's) and an adopted step's are kept."""
    t0 = datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)
    seen_at, ended_at = t0 + timedelta(seconds=0.21), t0 + timedelta(seconds=0.55)
    whole = StepResult(
        name="s", state=StepState.SUCCEEDED, started_at=t0, finished_at=t0 + timedelta(seconds=1)
    )
    record = StepRecord(whole, running_at=seen_at, ended_at=ended_at)
    assert record.seen().took() == "340ms" and whole.took() == "1s"
    running = StepRecord(
        whole.evolve(state=StepState.RUNNING, finished_at=None), running_at=seen_at
    )
    assert running.seen().started_at == seen_at
    fine = whole.evolve(started_at=t0 + timedelta(microseconds=5))
    assert StepRecord(fine, running_at=seen_at, ended_at=ended_at).seen() is fine
    assert StepRecord(whole, running_at=seen_at, ended_at=ended_at, adopted=True).seen() is whole


# --- names generated for a fan-in are always valid (issue 34 item 18) --------------------


_INPUT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,127}$")


@settings(max_examples=300, deadline=None)
@given(
    key=st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,127}", fullmatch=True),
    param=st.from_regex(r"[-._a-zA-Z][-._a-zA-Z0-9]{0,40}", fullmatch=True),
    values=st.lists(st.text(max_size=200), min_size=1, max_size=6, unique=True),
)
def test_any_parameter_values_fan_in_as_valid_distinct_names(
    key: str, param: str, values: list[str]
) -> None:
    names = fan_in_names(key, [{param: v} for v in values])
    assert all(_INPUT_NAME.match(n) for n in names), names
    assert len(set(names)) == len(values)


def test_a_value_spelling_another_values_hashed_name_still_gets_its_own_name() -> None:
    (hashed,) = fan_in_names("parts", [{"S": "A"}])
    spelled = hashed.removeprefix("parts-s-")
    names = fan_in_names("parts", [{"S": "A"}, {"S": spelled}])
    assert len(set(names)) == 2 and all(_INPUT_NAME.match(n) for n in names)


def test_plain_values_keep_their_readable_names() -> None:
    assert fan_in_names("parts", [{"SHARD": "0"}, {"SHARD": "1"}]) == [
        "parts-shard-0",
        "parts-shard-1",
    ]


@pytest.mark.parametrize("values", [["Alpha", "beta"], ["HG002", "HG003"], ["x y", "z"]])
async def test_a_fan_in_over_values_no_name_allows_runs(tmp_path: Path, values: list[str]) -> None:
    body = f"""
        steps:
          - name: make
            parameters: {{SAMPLE: {values!r}}}
            script: echo "$SAMPLE" > out.txt
            outputs: {{out: out.txt}}
          - name: gather
            inputs: {{parts: make.out}}
            script: cat $K8SJOBS_INPUTS/parts-*/out.txt | sort > {tmp_path}/gathered
        """
    run, results = await run_study(tmp_path, body)
    assert all(r.ok for r in results.values()), results
    names = sorted(run.study.step("gather").inputs)
    assert all(_INPUT_NAME.match(n) for n in names) and len(names) == len(values)
    assert (tmp_path / "gathered").read_text().splitlines() == sorted(values)


@pytest.mark.parametrize("second", ["*k", "image", "'image'"])
def test_a_key_written_twice_through_an_alias_is_refused_too(second: str) -> None:
    """An alias used as a key is the anchored node itself, so the same alias written twice
    ('*k : a' then '*k : b') was one node seen twice and was loaded keeping the last."""
    body = f"x: &k image\nsteps:\n  - *k : a\n    {second} : b\n"
    with pytest.raises(StudyError) as caught:
        parse_study(body, source="s.yaml")
    # a second alias is named at its anchor's line (an alias node keeps the anchor's mark)
    line = 1 if second == "*k" else 4
    assert str(caught.value).startswith(f"s.yaml:{line}:"), str(caught.value)
    assert "written twice" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # A key whose value is a block below it was placed at its value's first line.
        ("step:\n  - name: a\n    script: echo\n", 's.yaml:2: unknown key "step"'),
        ("stepz:\n\n\n  - name: a\n", 's.yaml:2: unknown key "stepz"'),
        # YAML reads these keys as null, a boolean and a number: said as the file wrote them.
        ("null: x\nsteps: []\n", 's.yaml:2: unknown key "null"'),
        ("~: x\nsteps: []\n", 's.yaml:2: unknown key "null"'),
        ("true: x\nsteps: []\n", 's.yaml:2: unknown key "true"'),
        ("steps:\n  - name: a\n    script: echo\n    true: 1\n", "s.yaml:5: step 1: true is"),
        ("steps:\n  - name: a\n    null: 1\n", "s.yaml:4: step 1: null is not a field name"),
    ],
    ids=["block-value", "blank-lines", "null", "tilde", "true", "step-true", "step-null"],
)
def test_an_unknown_key_is_placed_at_its_own_line_as_the_file_writes_it(
    body: str, expected: str
) -> None:
    message = error_of(body)
    assert message.startswith(expected), message
    assert "None" not in message and "True" not in message, message


def test_a_mistyped_study_key_names_the_key_meant() -> None:
    """``step:`` listed the study's keys only; a step's key at the top says where it goes."""
    assert error_of("step:\n  - name: a\n    script: echo\n").endswith('did you mean "steps"?')
    alone = error_of("script: echo hi\n")  # one step's file, given to run
    assert alone.startswith('s.yaml:2: unknown key "script"'), alone
    assert "a study lists its steps under steps:" in alone and "did you mean" not in alone
    misplaced = error_of("image: x\nsteps:\n  - name: a\n    script: echo\n")
    assert misplaced.endswith('"image" is a step\'s key: put it in a step, or in defaults:')
