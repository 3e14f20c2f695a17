"""The usage line, its figures and why they are missing, and a study's summary (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.usage import (
    Usage,
    format_bytes,
    format_usage_line,
    parse_usage,
    request_versus_use,
    split_message,
    summarize_usage,
)

GI = 1024**3


def test_a_line_round_trips_through_parse() -> None:
    line = format_usage_line(
        "rusage", wall_seconds=2.5, cpu_seconds=1.25, memory_peak=123, devices=("0", "1")
    )
    usage = parse_usage(line)
    assert (usage.wall_seconds, usage.cpu_seconds, usage.memory_peak) == (2.5, 1.25, 123)
    assert usage.devices == ("0", "1") and usage.source == "rusage"
    assert Usage.from_json(usage.to_json()) == usage


def test_unknown_words_and_bad_numbers_are_not_figures() -> None:
    usage = parse_usage("k8sjobs-usage v1 src=cgroup2 cpu_us=12x mem_peak=5 future=1")
    assert usage.cpu_seconds is None and usage.memory_peak == 5
    assert "cpu.stat" in usage.missing["cpu_seconds"]


def test_the_usage_line_leaves_the_rest_of_the_message() -> None:
    own, line = split_message("WorkerSetupFailed: no sshd\nk8sjobs-usage v1 src=none")
    assert own == "WorkerSetupFailed: no sshd" and line == "k8sjobs-usage v1 src=none"
    assert split_message("just words") == ("just words", None)


def test_bytes_read_as_kubernetes_quantities() -> None:
    assert [format_bytes(n) for n in (512, 200 * 1024**2, 8 * GI, 1.2 * GI)] == [
        "512",
        "200Mi",
        "8Gi",
        "1.2Gi",
    ]


def test_requested_against_used() -> None:
    usage = Usage(wall_seconds=10.0, cpu_seconds=9.0, memory_peak=int(1.2 * GI))
    assert request_versus_use({"memory": 8 * GI, "cpu": 4}, usage) == (
        "mem 8Gi req, 1.2Gi peak; cpu 4 req, 0.9 used"
    )
    assert request_versus_use({"memory": 8 * GI}, None) == "mem 8Gi req, ?"
    assert request_versus_use(None, None) == ""


def test_requested_against_used_says_what_a_step_made_of_its_gpus() -> None:
    usage = Usage(
        wall_seconds=10.0, gpu_seconds=8.0, gpu_memory_peak=int(1.2 * GI), devices=("a", "b")
    )
    assert request_versus_use(None, usage) == "gpu 2 device(s), 40% busy, 1.2Gi peak"
    unsampled = Usage(wall_seconds=10.0, devices=("a",))
    assert request_versus_use(None, unsampled) == ""


def test_the_summary_counts_cpu_hours_and_names_the_oversized() -> None:
    small = Usage(wall_seconds=3600.0, cpu_seconds=3600.0, memory_peak=GI)
    summary = summarize_usage(
        [
            ("fits", {"memory": 2 * GI, "cpu": 1}, small),
            ("huge", {"memory": 16 * GI, "cpu": 1}, small),
            ("idle", {"memory": None, "cpu": 8}, small),
            ("never", {"memory": GI, "cpu": 1}, None),
        ]
    )
    assert summary.cpu_hours == 3.0 and (summary.measured, summary.unmeasured) == (3, 1)
    assert [o.split(":")[0] for o in summary.oversized] == ["huge", "idle"]
    assert summary.describe().splitlines()[0] == (
        "usage: 3 CPU hours over 3 step(s) (1 without figures)"
    )
    small_run = summarize_usage([("a", None, Usage(wall_seconds=1.0, cpu_seconds=0.25))])
    assert small_run.describe() == "usage: 250ms of CPU over 1 step(s)"
    assert small_run.describe() == ("usage: 250ms of CPU over 1 step(s)")


@given(
    wall_ms=st.integers(0, 10**9),
    cpu_us=st.integers(0, 10**13),
    cores=st.integers(1, 512),
    peak=st.integers(0, 2**45),
    node=st.integers(1, 2**45),
)
def test_a_figure_impossible_for_one_container_is_missing_never_shown(
    wall_ms: int, cpu_us: int, cores: int, peak: int, node: int
) -> None:
    line = (
        f"k8sjobs-usage v1 src=cgroup2 wall_ms={wall_ms} cpu_us={cpu_us} mem_peak={peak} "
        f"cores={cores} node_mem={node}"
    )
    usage = parse_usage(line)
    if cpu_us / 1e6 > (wall_ms / 1e3 + 0.05) * cores:
        assert usage.cpu_seconds is None
        assert "impossible for the step" in usage.missing["cpu_seconds"]
    else:
        assert usage.cpu_seconds == cpu_us * 1e-6
    if peak > node:
        assert usage.memory_peak is None
        assert "above the node's" in usage.missing["memory_peak"]
    else:
        assert usage.memory_peak == peak


def test_the_node_s_totals_for_an_8_second_sleep_are_not_the_step_s() -> None:
    # What a wrapper in the node's root cgroup read for `sleep 8`: cpu 2h 52m, 11.1Gi peak.
    line = (
        "k8sjobs-usage v1 src=cgroup2 wall_ms=8000 cpu_us=10320000000 mem_peak=11918534246 "
        f"cores=2 node_mem={8 * GI}"
    )
    usage = parse_usage(line)
    assert usage.cpu_seconds is None and usage.memory_peak is None
    assert usage.wall_seconds == 8.0
