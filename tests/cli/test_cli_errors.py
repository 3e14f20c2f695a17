"""Every command, fed wrong types, absent files and bad values, answers in one ``error:`` line
in the CLI's words with exit code 2, never a traceback (issue 28 item 5).

The sweep runs the real ``main`` in this process (a traceback would fail the test as an
exception); ``test_the_sweep_covers_every_command`` fails when a command is added without
cases here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from k8sjobs.cli.main import build_parser, main

STUDY = "name: s\nsteps:\n  - name: a\n    script: echo hi\n"

# Each command (as words), and argument lists that are a user's mistake. "{dir}" is a
# folder holding s.yaml (a good study), bad.kubeconfig ("clusters: 3"), notyaml (": [").
KUBE = ["--backend", "kubernetes"]
# run's kubeconfig cases name a store: without one, run is refused before the kubeconfig.
RUN_KUBE = [*KUBE, "--registry", "oci:/r"]
SWEEP: dict[str, list[list[str]]] = {
    "run": [
        ["{dir}/absent.yaml"],
        ["{dir}"],
        ["{dir}/s.yaml", "--max-parallel", "x"],
        ["{dir}/s.yaml", "--max-parallel", "0"],
        ["{dir}/s.yaml", "--max-parallel", "-3"],
        ["{dir}/s.yaml", "--cpu", "0"],
        ["{dir}/s.yaml", "--cpu", "lots"],
        ["{dir}/s.yaml", "--cpu", "nan"],
        ["{dir}/s.yaml", "--backend", "slurm"],
        ["{dir}/s.yaml", "--volume", "results"],
        ["{dir}/s.yaml", "--no-such-option"],
        ["{dir}/s.yaml", *RUN_KUBE, "--kubeconfig", "{dir}/absent"],
        ["{dir}/s.yaml", *RUN_KUBE, "--kubeconfig", "{dir}/bad.kubeconfig"],
        ["{dir}/s.yaml", *RUN_KUBE, "--kubeconfig", "{dir}/notyaml"],
        ["{dir}/s.yaml", *RUN_KUBE, "--kubeconfig", "{dir}/s.yaml"],
        ["{dir}/s.yaml", *KUBE],
        ["{dir}/s.yaml", *KUBE, "--kubeconfig", "{dir}/absent"],
    ],
    "status": [
        [],
        ["{dir}/absent.yaml"],
        ["--study", "s", "-o", "xml"],
        ["--study", "s", *KUBE, "--kubeconfig", "{dir}/absent"],
        ["--study", "s", *KUBE, "--kubeconfig", "{dir}/bad.kubeconfig"],
    ],
    "logs": [
        [],
        ["{dir}/s.yaml"],
        ["{dir}/s.yaml", "a", "b"],
        ["{dir}/s.yaml", "a", "--tail", "x"],
        ["{dir}/s.yaml", "a", "--tail", "-1"],
        ["{dir}/absent.yaml", "a"],
        ["--study", "s", "a", *KUBE, "--kubeconfig", "{dir}/notyaml"],
    ],
    "cancel": [
        [],
        ["{dir}/absent.yaml"],
        ["--study", "s", *KUBE, "--kubeconfig", "{dir}/bad.kubeconfig"],
    ],
    "render": [
        [],
        ["{dir}/absent.yaml"],
        ["{dir}"],
        ["{dir}/s.yaml", "-n", "Bad_Namespace"],
        ["{dir}/notyaml"],
    ],
    "report": [
        [],
        ["{dir}/absent.yaml"],
        ["{dir}/notyaml.yaml"],
    ],
    "artifact push": [
        [],
        ["s/a:v1", "{dir}/absent"],
        ["s/a:v1", "{dir}/s.yaml", "--compression", "zip"],
        ["::", "{dir}/s.yaml"],
        ["s/a:v1", "{dir}/s.yaml", "--store", "http://registry.example"],
        ["s/a:v1", "{dir}/s.yaml", "--annotation", "novalue"],
    ],
    "artifact pull": [
        ["s/a:v1", "--max-bytes", "lots"],
        ["s/a:v1", "--max-ratio", "x"],
        ["::"],
    ],
    "artifact tags": [[], ["s/a", "--store", "oci:"]],
    "artifact rm": [[], ["::"]],
    "cache ls": [["--store", "oci:"], ["--store", "http://registry.example"]],
    "cache clear": [["--store", "oci:"], ["extra"]],
    "lineage": [
        [],
        ["::"],
        ["s/a:v1", "--format", "xml"],
        ["s/a:v1", "--store", "oci:"],
        ["s/a:v1", "--store", "http://r.example"],
    ],
    "rbac": [[], ["-n", "Bad_Namespace"], ["-n", "hpc", "--service-account", "Bad_Name"]],
    "image build": [
        [],
        ["--push", "r.example/h:1", "--platform", "beos"],
        ["--push", "not a reference"],
    ],
    "image commands": [[], ["r.example/h:1", "--platform", "beos"]],
}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "s.yaml").write_text(STUDY)
    (tmp_path / "bad.kubeconfig").write_text("apiVersion: v1\nclusters: 3\n")
    (tmp_path / "notyaml").write_text(": [\n")
    (tmp_path / "notyaml.yaml").write_text(": [\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path


def _cases() -> list[tuple[str, list[str]]]:
    return [(command, argv) for command, cases in SWEEP.items() for argv in cases]


@pytest.mark.parametrize(("command", "argv"), _cases())
def test_a_mistake_is_one_error_line_and_exit_2(
    command: str, argv: list[str], folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = [*command.split(), *(a.replace("{dir}", str(folder)) for a in argv)]
    try:
        code = main(words)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for api_word in ("kubeconfig=", "plain_http", "max_parallel", "Capacity(", "Semaphore"):
        assert api_word not in err, err


def _leaves(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _leaves(sub, f"{prefix} {name}".strip())
    return found or [prefix]


def test_the_sweep_covers_every_command() -> None:
    assert sorted(_leaves(build_parser())) == sorted(SWEEP)


def test_errors_name_the_cli_option_not_the_api_parameter(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["run", "s.yaml", *RUN_KUBE, "--kubeconfig", "absent"])
    assert capsys.readouterr().err == "error: kubeconfig absent: no such file.\n"
    main(["status", "--study", "s", *KUBE])  # no KUBECONFIG, no ~/.kube/config here
    err = capsys.readouterr().err
    assert "give --kubeconfig FILE (or run on this machine: --backend local)" in err
    main(["artifact", "tags", "s/a", "--store", "http://registry.example"])
    assert "give --plain-http" in capsys.readouterr().err
    main(["run", "s.yaml", *RUN_KUBE, "--kubeconfig", "bad.kubeconfig"])
    assert capsys.readouterr().err.startswith(
        "error: kubeconfig bad.kubeconfig is malformed: a field has the wrong shape"
    )


@pytest.mark.parametrize("kubeconfig", [[], ["--kubeconfig", "absent"], ["--kubeconfig", "s.yaml"]])
def test_a_kubernetes_run_without_any_store_is_refused_before_anything_starts(
    folder: Path, capsys: pytest.CaptureFixture[str], kubeconfig: list[str]
) -> None:
    """Whatever the cluster (none, unreadable), no store is refused first, with exit 2, naming
    --registry and the oci:/path form, and nothing of the run is written."""
    code = main(["--state-dir", str(folder / "state"), "run", "s.yaml", *KUBE, *kubeconfig])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--registry" in err and "--registry oci:/path" in err and err.count("\n") == 1, err
    assert not (folder / "state").exists()
