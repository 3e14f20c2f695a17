"""The conventions of kubectl and argo users (issue 28 items 1-3): --version, -v/-q, a study
named by its file or --study everywhere, global options before or after the command,
``status -o json|yaml|wide`` and ``--watch``, exit codes in the help."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from k8sjobs import __version__
from k8sjobs.cli.main import build_parser, main

from ..waiting import wait_until_sync
from .test_cli_commands import FAILING, k8sjobs, start, study_file

CHAIN = """
name: chain
steps:
  - name: first
    script: echo one
  - name: second
    depends: [first]
    script: echo two
"""

# A step that runs until the test creates the file "go" next to the study.
GATED = """
name: gated
steps:
  - name: gate
    script: while [ ! -e {go} ]; do sleep 0.05; done; echo opened
"""


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    assert k8sjobs(tmp_path, "--version", check=0).stdout == f"k8sjobs {__version__}\n"


def test_verbose_says_what_a_run_waits_for_and_quiet_says_nothing(tmp_path: Path) -> None:
    study_file(tmp_path, CHAIN)
    loud = k8sjobs(tmp_path, "run", "study.yaml", "-v", check=0).stderr
    assert 'k8sjobs.study: step "second" waits for first' in loud
    assert 'step "first" submitted to the local backend' in loud
    # -v before the command counts too; -q wins over nothing: no log lines at all.
    again = k8sjobs(tmp_path, "-v", "run", "--replace", "study.yaml", check=0).stderr
    assert 'step "second" waits for first' in again
    assert k8sjobs(tmp_path, "run", "--replace", "-q", "study.yaml", check=0).stderr == ""
    assert k8sjobs(tmp_path, "run", "--replace", "study.yaml", check=0).stderr == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "hpc", "--backend", "kubernetes", "status", "--study", "s"],
        ["status", "--study", "s", "-n", "hpc", "--backend", "kubernetes"],
        [
            "--namespace",
            "x",
            "status",
            "--study",
            "s",
            "--namespace",
            "hpc",
            "--backend=kubernetes",
        ],
    ],
)
def test_global_options_work_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.namespace, args.backend, args.study) == ("hpc", "kubernetes", "s")


def test_state_dir_after_the_command_is_the_same_as_before(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    k8sjobs(tmp_path, "run", "study.yaml", "--state-dir", "elsewhere", check=1)
    assert not (tmp_path / ".k8sjobs").exists()
    k8sjobs(tmp_path, "status", "--study", "mixed", "--state-dir", "elsewhere", check=1)
    k8sjobs(tmp_path, "--state-dir", "elsewhere", "status", "--study", "mixed", check=1)


@pytest.mark.parametrize(
    "command",
    ["run", "status", "logs", "cancel", "render", "rbac"],
)
def test_dash_n_works_wherever_a_namespace_does(command: str) -> None:
    words = {"run": ["s.yaml"], "render": ["s.yaml"], "logs": ["s.yaml", "a"]}
    args = build_parser().parse_args([command, *words.get(command, []), "-n", "hpc"])
    assert args.namespace == "hpc"


def test_every_command_takes_the_study_file_or_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands run in this process (the real ``main``): fourteen interpreters that
    each import the package took most of the test's bound on a loaded machine."""
    study_file(tmp_path, FAILING)
    monkeypatch.chdir(tmp_path)

    def k8s(*args: str, check: int) -> str:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == check, out + err
        return out if check != 2 else err

    k8s("run", "study.yaml", check=1)
    by_file = k8s("status", "study.yaml", check=1)
    assert by_file == k8s("status", "--study", "mixed", check=1)
    assert k8s("status", "study.yaml", "good", check=0).count("│") == 4
    assert k8s("logs", "study.yaml", "bad", check=0) == "about to fail\n"
    assert k8s("logs", "--study", "mixed", "bad", check=0) == "about to fail\n"
    assert "nothing running" in k8s("cancel", "study.yaml", check=0)
    k8s("report", "study.yaml", "-o", "a.html", check=0)
    k8s("report", "--study", "mixed", "-o", "b.html", check=0)
    k8s("report", "mixed", "-o", "c.html", check=0)
    for made in ("a.html", "b.html", "c.html"):
        assert "Study mixed" in (tmp_path / made).read_text()
    # -o - is stdout, as for any tool that writes a file (it wrote a file named "-")
    assert "Study mixed" in k8s("report", "mixed", "-o", "-", check=0)
    assert not (tmp_path / "-").exists()
    # run names its study the same way: --study (or its old name, --name) over the file's.
    k8s("run", "study.yaml", "--study", "renamed", check=1)
    assert "bad" in k8s("status", "--study", "renamed", check=1)
    # Neither: one line saying both ways.
    assert k8s("status", check=2) == (
        "error: k8sjobs status: name the study: its file (k8sjobs status study.yaml) "
        "or --study NAME\n"
    )


def test_status_output_json_and_yaml_hold_every_field(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    k8sjobs(tmp_path, "run", "study.yaml", check=1)
    document = json.loads(k8sjobs(tmp_path, "status", "study.yaml", "-o", "json", check=1).stdout)
    assert document["study"] == "mixed"
    steps = {s["name"]: s for s in document["steps"]}
    assert set(steps) == {"good", "bad", "after-bad"}  # after-bad: from the run's record
    assert steps["after-bad"]["message"] == "not run: upstream bad FAILED"
    assert steps["bad"]["state"] == "FAILED"
    assert steps["bad"]["exit_code"] == 7
    assert steps["good"]["exit_code"] == 0
    assert steps["good"]["duration"] >= 0
    assert steps["bad"]["started_at"] and steps["bad"]["log_file"]
    assert set(steps["bad"]) >= {"reason", "message", "pods", "outputs", "events", "usage"}
    assert steps["good"]["usage"]["source"] == "rusage"  # what it used, with why any is missing
    assert steps["good"]["usage"]["memory_peak"] > 0 and "requested" in steps["good"]
    in_yaml = yaml.safe_load(k8sjobs(tmp_path, "status", "study.yaml", "-o", "yaml").stdout)
    assert in_yaml == document


def test_status_output_wide_adds_columns(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    k8sjobs(tmp_path, "run", "study.yaml", check=1)
    narrow = k8sjobs(tmp_path, "status", "study.yaml", check=1).stdout.splitlines()[0]
    wide = k8sjobs(tmp_path, "status", "study.yaml", "-o", "wide", check=1).stdout
    assert narrow.split() == ["step", "┃", "state", "┃", "duration", "┃", "used", "┃", "reason"]
    header = [cell.strip() for cell in wide.splitlines()[0].split("┃")]
    assert header == [
        "step",
        "state",
        "duration",
        "used",
        "reason",
        "exit",
        "started",
        "pods",
        "log",
    ]
    bad = next(line for line in wide.splitlines() if line.startswith(" bad "))
    assert [cell.strip() for cell in bad.split("│")][5] == "7"
    assert "mem " in [cell.strip() for cell in bad.split("│")][3]  # what it used
    assert bad.rstrip().endswith("step.log")  # piped: one line a step, never wrapped


def test_status_watch_prints_each_change_until_the_steps_end(tmp_path: Path) -> None:
    go = tmp_path / "go"
    study_file(tmp_path, GATED.format(go=go))
    run = start(tmp_path, "run", "study.yaml", "--plain")
    try:
        wait_until_sync(
            lambda: "RUNNING" in k8sjobs(tmp_path, "status", "study.yaml").stdout,
            "the gated step runs",
        )
        watch = start(tmp_path, "status", "study.yaml", "--watch", "-o", "json")
        assert watch.stdout is not None
        first = _read_document(watch.stdout)
        assert [s["state"] for s in first["steps"]] == ["RUNNING"]
        go.touch()
        later = _read_document(watch.stdout)
        assert [(s["name"], s["state"]) for s in later["steps"]] == [("gate", "SUCCEEDED")]
        rest, _ = watch.communicate(timeout=30)
        assert watch.returncode == 0, rest
    finally:
        go.touch()
        run.communicate(timeout=30)
    assert run.returncode == 0


def _read_document(stream: IO[str]) -> Any:
    """Read one indented JSON document (it ends with a "}" at the start of a line)."""
    lines: list[str] = []
    while True:
        line = stream.readline()
        assert line, "the watch ended early: " + "".join(lines)
        lines.append(line)
        if line == "}\n":
            return json.loads("".join(lines))


@pytest.mark.parametrize("command", [[], ["run"], ["status"], ["logs"], ["artifact", "pull"]])
def test_help_documents_the_exit_codes(tmp_path: Path, command: list[str]) -> None:
    shown = k8sjobs(tmp_path, *command, "--help", check=0).stdout
    assert "exit codes:" in shown
    assert "2    bad input" in shown


def test_exit_codes_in_the_help_are_those_of_the_docs() -> None:
    from k8sjobs.cli.main import EXIT_CODES

    docs = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    for line in EXIT_CODES.splitlines()[1:]:
        code = line.split()[0]
        assert f"| {code} |" in docs, code


OVERSIZED = """\
name: sizes
steps:
  - name: greedy
    script: echo small
    resources: {memory: 2Gi}
"""


def test_status_says_what_each_step_used_against_what_it_asked(tmp_path: Path) -> None:
    study_file(tmp_path, OVERSIZED)
    run = k8sjobs(tmp_path, "run", "study.yaml", check=0).stdout
    assert re.search(r"^usage: \S+ of CPU over 1 step\(s\)$", run, re.MULTILINE), run
    assert "asked for far more than used: greedy: mem 2Gi req, " in run
    wide = k8sjobs(tmp_path, "status", "study.yaml", "-o", "wide", check=0).stdout
    assert re.search(r"^  greedy: mem 2Gi req, [\d.]+Mi peak", wide, re.MULTILINE), wide


SLASHED = """
name: slash
steps:
  - name: a/b
    script: echo from-ab
  - name: s
    parameters: {F: [data/a.csv, x/y/z]}
    script: echo from-$F
"""


def test_a_step_name_holding_a_slash_is_reached_with_study_or_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any step name with "/" (written, or made from a parameter value) is a step for logs
    and status, by --study or after the study file, never taken as a study file itself."""
    (tmp_path / "study.yaml").write_text(SLASHED)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "study.yaml"]) == 0
    for name, said in (("a/b", "from-ab"), ("s[F=data/a.csv]", "from-data/a.csv")):
        for how in (["--study", "slash"], ["study.yaml"]):
            capsys.readouterr()
            assert main(["logs", *how, name]) == 0, capsys.readouterr()
            assert capsys.readouterr().out == f"{said}\n"
            assert main(["status", *how, name]) == 0
            assert name in capsys.readouterr().out
