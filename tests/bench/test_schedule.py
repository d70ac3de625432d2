"""Workloads and the length rule, Poisson schedules and the capacity search (no server)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from voxgate.gateway.bench import workload
from voxgate.gateway.bench.arrivals import poisson_arrivals
from voxgate.gateway.bench.capacity import in_slo, search_doubling, search_rates


def test_length_rule_matches_the_workload_readme() -> None:
    assert workload.frame_budget("one two three four five six seven eight") == 37  # 12.5 * 0.37 * 8 = 37.0
    assert workload.budget_ms("one two three four five six seven eight") == 37 * 80
    assert workload.frame_budget(" ".join(["w"] * 56)) == 259  # a passage of 56 words: 20.7 s
    assert workload.frame_budget("") == 1


def test_workloads_load_with_expected_sizes() -> None:
    sentences = workload.Workload.load("sentences")
    passages = workload.Workload.load("passages")
    assert len(sentences.texts) == 720 and len(passages.texts) == 102
    info = sentences.describe()
    assert 7.5 < info["words_mean"] < 8.5 and info["words_min"] == 5 and info["words_max"] == 12
    assert passages.describe()["words_min"] >= 45 and passages.describe()["words_max"] <= 65
    assert sentences.max_audio_ms(0) == workload.budget_ms(sentences.texts[0])
    assert workload.Workload.load("sentences", length_rule=False).max_audio_ms(0) is None
    order = sentences.order(seed=3)
    assert sorted(order) == list(range(720)) and order == sentences.order(seed=3) != sentences.order(seed=4)


def test_shipped_workload_copy_equals_the_shared_one() -> None:
    shipped = Path(workload.__file__).parent / "workloads"
    shared = Path(workload.__file__).resolve().parents[2].parent / "shared" / "workloads"
    if not shared.is_dir():
        pytest.skip("no shared/workloads beside the checkout")
    for name in workload.FILES.values():
        digest = [hashlib.sha256((d / name).read_bytes()).hexdigest() for d in (shipped, shared)]
        assert digest[0] == digest[1], name


def test_workload_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("Hello there.\n\nGeneral Kenobi.\n")
    w = workload.Workload.load(str(path))
    assert w.texts == ["Hello there.", "General Kenobi."] and w.name == "mine"
    with pytest.raises(FileNotFoundError):
        workload.Workload.load(str(tmp_path / "missing.txt"))


def test_poisson_arrivals_are_reproducible_and_have_the_right_rate() -> None:
    a = poisson_arrivals(rate=50.0, duration_s=200.0, seed=1)
    assert a == poisson_arrivals(rate=50.0, duration_s=200.0, seed=1)
    assert a != poisson_arrivals(rate=50.0, duration_s=200.0, seed=2)
    assert all(0 <= t < 200.0 for t in a) and a == sorted(a)
    assert abs(len(a) - 10_000) < 4 * 100  # Poisson count: mean 10000, sd 100
    gaps = np.diff(a)
    assert abs(gaps.mean() - 0.02) < 0.001 and abs(gaps.std() - 0.02) < 0.001  # exponential: sd = mean


def test_in_slo_boundaries() -> None:
    assert in_slo(0.200, 0.0)
    assert not in_slo(0.2001, 0.0)
    assert in_slo(0.1, 0.0099)
    assert not in_slo(0.1, 0.010)
    assert not in_slo(None, 0.0)
    assert not in_slo(0.1, 0.0, ok=False)


def capacity_curve(knee: float):  # share in SLO falls below 90 % above the knee
    calls: list[float] = []

    def measure(rate: float) -> float:
        calls.append(rate)
        return 0.99 if rate <= knee else 0.5

    return measure, calls


def test_search_over_a_rate_list() -> None:
    measure, calls = capacity_curve(knee=6.0)
    result = search_rates(measure, [8, 2, 4, 6])
    assert calls == [2, 4, 6, 8] and result.capacity == 6


def test_doubling_then_bisection_finds_the_knee() -> None:
    measure, calls = capacity_curve(knee=11.0)
    result = search_doubling(measure, start=1, max_rate=100, refine=3)
    assert calls[:5] == [1, 2, 4, 8, 16]
    assert calls[5:] == [12.0, 10.0, 11.0]
    assert result.capacity == 11.0


def test_doubling_stops_at_the_maximum_and_when_nothing_passes() -> None:
    measure, calls = capacity_curve(knee=1000)
    assert search_doubling(measure, start=3, max_rate=10).capacity == 10 and calls == [3, 6, 10]
    measure, calls = capacity_curve(knee=0.1)
    result = search_doubling(measure, start=1, max_rate=10, refine=1)
    assert calls == [1, 0.5] and result.capacity is None
