"""What the CLI says about steps that never ran, studies that do not exist, and a step whose
program is not in the image (issue 28 items 6-7)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from k8sjobs.status import pod_failure

from .test_cli_commands import FAILING, k8sjobs, study_file


def test_a_step_that_never_ran_says_why_in_status_and_logs(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    k8sjobs(tmp_path, "run", "study.yaml", check=1)
    status = k8sjobs(tmp_path, "status", "--study", "mixed", "after-bad", check=1).stdout
    row = next(line for line in status.splitlines() if line.startswith(" after-bad"))
    assert "FAILED" in row and "not run: upstream bad FAILED" in row
    everything = k8sjobs(tmp_path, "status", "study.yaml", check=1).stdout
    assert "after-bad" in everything  # listed with the others, from the run's record
    logs = k8sjobs(tmp_path, "logs", "--study", "mixed", "after-bad", check=1)
    assert logs.stderr == (
        'step "after-bad" of study "mixed" has no log: not run: upstream bad FAILED\n'
    )


def test_a_study_that_does_not_exist_is_named_with_where_it_was_looked_for(
    tmp_path: Path,
) -> None:
    said = 'no study "ghost" in .k8sjobs; run it first (k8sjobs run STUDY.yaml)\n'
    assert k8sjobs(tmp_path, "status", "--study", "ghost", check=1).stderr == said
    assert k8sjobs(tmp_path, "logs", "--study", "ghost", "a", check=1).stderr == said
    elsewhere = k8sjobs(tmp_path, "--state-dir", "/tmp/x", "status", "--study", "ghost")
    assert "in /tmp/x;" in elsewhere.stderr


def test_an_unknown_step_of_a_known_study_lists_the_steps(tmp_path: Path) -> None:
    study_file(tmp_path, FAILING)
    k8sjobs(tmp_path, "run", "study.yaml", check=1)
    for command in (["status", "study.yaml", "nope"], ["logs", "study.yaml", "nope"]):
        assert k8sjobs(tmp_path, *command, check=1).stderr == (
            'study "mixed" has no step "nope" (steps: after-bad, bad, good)\n'
        )


@pytest.mark.skipif(shutil.which("zsh") is not None, reason="needs a machine without zsh")
def test_a_shell_missing_from_the_image_is_named_in_the_result_and_the_log(
    tmp_path: Path,
) -> None:
    study_file(tmp_path, "name: zsh\nsteps:\n  - name: z\n    shell: zsh\n    script: echo hi\n")
    run = k8sjobs(tmp_path, "run", "study.yaml", check=1).stdout
    assert "command not found: the image lacks /bin/zsh (the step's shell)" in run
    status = k8sjobs(tmp_path, "status", "study.yaml", "-o", "json", check=1).stdout
    assert "/bin/zsh (the step's shell)" in status
    logs = k8sjobs(tmp_path, "logs", "study.yaml", "z", check=0)
    assert "/bin/zsh" in logs.stdout and "not found" in logs.stdout


def test_logs_of_a_failed_step_that_printed_nothing_say_how_it_ended(tmp_path: Path) -> None:
    study_file(tmp_path, "name: quiet\nsteps:\n  - name: q\n    script: exit 3\n")
    k8sjobs(tmp_path, "run", "study.yaml", check=1)
    logs = k8sjobs(tmp_path, "logs", "study.yaml", "q", check=0)
    assert logs.stdout == ""
    assert logs.stderr == (
        'step "q" printed nothing; it ended FAILED: the script exited with code 3\n'
    )


def test_a_container_that_could_not_start_gives_the_runtimes_words() -> None:
    """containerd's StartError (exit 128, no log): its message is the step's."""
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "step",
                    "state": {
                        "terminated": {
                            "exitCode": 128,
                            "reason": "StartError",
                            "message": 'failed to create containerd task: exec: "/bin/zsh": '
                            "executable file not found in $PATH",
                        }
                    },
                }
            ],
        },
    }
    reason, message, code = pod_failure(pod)
    assert (reason, code) == ("StartError", 128)
    assert message == (
        'the container could not start: failed to create containerd task: exec: "/bin/zsh": '
        "executable file not found in $PATH"
    )
