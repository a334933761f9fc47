"""The replicate statistics of benchmarks/llc_batched.py (issue 40 item 2): the permutation test of whether
the batched sampler's head estimates differ from devinterp's, against a brute-force enumeration."""

from __future__ import annotations

import csv
from itertools import combinations, product
from pathlib import Path

import numpy as np
import pytest

from benchmarks.llc_batched import FIELDS, estimates_by_run, heads_differ, heads_differ_paired, sampler_tokens, summarize
from headwatch.analysis.store.lenses.llc import SamplerSettings


def brute_force(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Every split of the rows into groups of len(a) and len(b), the statistic written out directly."""
    runs = np.concatenate([a, b])

    def stat(first: list[int]) -> float:
        second = [i for i in range(len(runs)) if i not in first]
        x, y = runs[first], runs[second]
        total = 0.0
        for h in range(runs.shape[1]):
            vx, vy = np.var(x[:, h], ddof=1), np.var(y[:, h], ddof=1)
            pooled = ((len(x) - 1) * vx + (len(y) - 1) * vy) / (len(x) + len(y) - 2)
            total += (np.mean(y[:, h]) - np.mean(x[:, h])) ** 2 / pooled
        return total

    observed = stat(list(range(len(a))))
    splits = [stat(list(c)) for c in combinations(range(len(runs)), len(a))]
    return observed, sum(s >= observed * (1 - 1e-12) for s in splits) / len(splits)


@pytest.mark.parametrize("shift", [0.0, 0.05, 0.5])
def test_heads_differ_is_the_exact_permutation_test(shift: float) -> None:
    rng = np.random.default_rng(7)
    centres = rng.normal(2.0, 0.4, size=16)
    a = centres + rng.normal(0, 0.05, size=(4, 16))
    b = centres + shift + rng.normal(0, 0.05, size=(4, 16))
    stat, p = heads_differ(a, b)
    ref_stat, ref_p = brute_force(a, b)
    assert stat == pytest.approx(ref_stat, rel=1e-9)
    assert p == pytest.approx(ref_p, abs=1e-12)
    if shift == 0.5:  # far beyond the runs' scatter: only the observed split and its mirror are as extreme
        assert p == pytest.approx(2 / 70)


def brute_force_paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Every way of swapping the two runs of each pair, the paired t statistics written out directly."""

    def stat(d: np.ndarray) -> float:
        total = 0.0
        for h in range(d.shape[1]):
            mean, sd = np.mean(d[:, h]), np.std(d[:, h], ddof=1)
            total += (mean / (sd / np.sqrt(len(d)))) ** 2
        return total

    observed = stat(b - a)
    signs = [np.array(s) for s in product([1.0, -1.0], repeat=len(a))]
    flipped = [stat((b - a) * s[:, None]) for s in signs]
    return observed, sum(f >= observed * (1 - 1e-12) for f in flipped) / len(flipped)


@pytest.mark.parametrize("shift", [0.0, 0.3])
def test_heads_differ_paired_is_the_exact_sign_flip_test(shift: float) -> None:
    rng = np.random.default_rng(3)
    centres = rng.normal(2.0, 0.4, size=16)
    batches = rng.normal(0, 0.1, size=(6, 16))  # what the shared batches of a seed add to both runs
    a = centres + batches + rng.normal(0, 0.05, size=(6, 16))
    b = centres + batches + shift + rng.normal(0, 0.05, size=(6, 16))
    stat, p = heads_differ_paired(a, b)
    ref_stat, ref_p = brute_force_paired(a, b)
    assert stat == pytest.approx(ref_stat, rel=1e-9)
    assert p == pytest.approx(ref_p, abs=1e-12)
    if shift:
        assert p == pytest.approx(2 / 64)


def test_estimates_by_run_orders_runs_by_seed_and_needs_two_of_each() -> None:
    def run(llc: float) -> dict[tuple[int, int], dict[str, str]]:
        return {(-1, -1): {"llc": str(10 * llc)}, (0, 0): {"llc": str(llc)}, (0, 1): {"llc": str(llc + 1)}}

    by = {("800", "devinterp", "1000"): run(2.0), ("800", "devinterp", "0"): run(1.0), ("800", "batched", "0"): run(3.0)}
    assert estimates_by_run(by, "800") is None
    by[("800", "batched", "2000")] = run(4.0)
    got = estimates_by_run(by, "800")
    assert got is not None
    llc, whole, seeds = got
    assert seeds == {"devinterp": [0, 1000], "batched": [0, 2000]}
    np.testing.assert_array_equal(llc["devinterp"], [[1.0, 2.0], [2.0, 3.0]])
    np.testing.assert_array_equal(llc["batched"], [[3.0, 4.0], [4.0, 5.0]])
    np.testing.assert_array_equal(whole["batched"], [30.0, 40.0])


def _write_rows(path: Path, fields: tuple[str, ...], cost: dict[tuple[str, str], tuple[float, float, str]]) -> None:
    """A benchmark file of two heads and the whole model per (step, path), with made-up estimates and the given
    (CPU s, wall s, GPU MB) per checkpoint."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for (step, path_name), (cpu, wall, gpu) in cost.items():
            for layer, head, llc in ((-1, -1, 40.0), (0, 0, 2.0), (0, 1, 3.0)):
                row = {"step": step, "path": path_name, "seed": 0, "layer": layer, "head": head, "llc": llc}
                row |= {"llc_std": 0.1, "init_loss": 2.0, "per_chain": "1 2", "cpu_s": cpu, "peak_rss_mb": 500}
                writer.writerow(row | {"wall_s": wall, "gpu_peak_mb": gpu})


def test_the_cost_table_adds_wall_seconds_and_gpu_memory_where_the_rows_have_them(tmp_path, capsys) -> None:
    out = tmp_path / "cuda.csv"
    cost = {("800", "devinterp"): (30.0, 90.0, "40"), ("800", "batched"): (6.0, 9.0, "900"),
            ("1400", "devinterp"): (34.0, 110.0, "41"), ("1400", "batched"): (6.0, 11.0, "910")}  # fmt: skip
    _write_rows(out, FIELDS, cost)
    assert summarize(out) == 0
    printed = capsys.readouterr().out
    assert "| 1400 | batched | 0 | 6.0 | 11.0 | 500 | 910 |" in printed
    assert "mean CPU s per checkpoint: devinterp 32.0, batched 6.0: 5.3x fewer" in printed
    assert "mean wall s per checkpoint: devinterp 100.0, batched 10.0: 10.0x fewer" in printed
    assert "peak GPU memory" in printed


def test_the_cost_table_of_rows_from_before_the_wall_column_gives_cpu_seconds_alone(tmp_path, capsys) -> None:
    out = tmp_path / "old.csv"
    old_fields = FIELDS[: FIELDS.index("wall_s")]
    _write_rows(out, old_fields, {("800", "devinterp"): (50.0, 0, ""), ("800", "batched"): (20.0, 0, "")})
    assert summarize(out) == 0
    printed = capsys.readouterr().out
    assert "| 800 | devinterp | 0 | 50.0 | 500 |" in printed
    assert "mean CPU s per checkpoint: devinterp 50.0, batched 20.0: 2.5x fewer" in printed
    assert "wall s" not in printed and "GPU" not in printed


def test_saved_sampler_sequences_that_are_not_the_stores_are_refused(tmp_path) -> None:
    saved = tmp_path / "tokens.npy"
    np.save(saved, np.zeros((8, 64), dtype=np.int64))
    with pytest.raises(SystemExit, match="sha256 differs"):
        sampler_tokens(Path("data/induction-d128"), tmp_path, SamplerSettings(), saved)
