"""``k8sjobs run --volume NAME=DIR`` maps a study's claims to directories of this machine."""

from __future__ import annotations

from pathlib import Path

from ..cli.test_cli_commands import k8sjobs, study_file

STUDY = """\
name: mapped
steps:
  - name: write
    env: {OUT: /out}
    volumes: [{name: out, claim: results, mount_path: /out}]
    script: echo written > "$OUT/f"
"""


def test_run_maps_a_claim_to_the_directory_given(tmp_path: Path) -> None:
    study_file(tmp_path, STUDY)
    target = tmp_path / "elsewhere"
    target.mkdir()
    k8sjobs(tmp_path, "run", "study.yaml", "--volume", f"results={target}", check=0)
    assert (target / "f").read_text() == "written\n"
    assert not (tmp_path / ".k8sjobs" / "claims").exists()


def test_run_without_a_mapping_keeps_the_claim_in_the_state_dir(tmp_path: Path) -> None:
    study_file(tmp_path, STUDY)
    k8sjobs(tmp_path, "run", "study.yaml", check=0)
    assert (tmp_path / ".k8sjobs/claims/default/results/f").read_text() == "written\n"


def test_a_malformed_volume_mapping_exits_2_naming_the_flag(tmp_path: Path) -> None:
    study_file(tmp_path, STUDY)
    done = k8sjobs(tmp_path, "run", "study.yaml", "--volume", "results", check=2)
    assert done.stderr.startswith('error: --volume: "results" is not name=/directory')
