"""analysis.attention.head_types: the uniform-attention nulls against brute force, the thresholds, and the hysteresis and
emergence rule on synthetic score curves with known crossings and noise."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from headwatch.analysis.attention.head_types import (
    emergence_index,
    first_index,
    head_type_frames,
    hysteresis,
    type_counts,
    type_rules,
    types_held,
    uniform_nulls,
)
from headwatch.analysis.attention.patterns import AttentionSums, induction_scores, uniform_induction_baseline
from headwatch.analysis.store.lenses.types import ATTENTION_TYPES, HEAD_EMERGENCE, HEAD_TYPES_TABLE


def uniform_causal(t: int, dtype=np.float64) -> np.ndarray:
    """The (T, T) attention of a head that spreads each query's mass evenly over the keys it may see."""
    mask = np.tril(np.ones((t, t), dtype=dtype))
    return mask / mask.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(("t", "r"), [(4, 2), (7, 3), (32, 16), (256, 128)])
def test_the_nulls_are_uniform_attention_averaged_as_the_forward_lens_averages(t: int, r: int) -> None:
    b = 3  # sequences: every one gives the same value, the mean over them changes nothing
    alpha = np.broadcast_to(uniform_causal(t), (b, 1, t, t))  # (B, H, T, T)
    # by hand, as analysis.attention.patterns documents: a_{i,i-1} over i = 2..T; a_{i,1} over every i
    prev = sum(alpha[s, 0, i, i - 1] for s in range(b) for i in range(1, t)) / (b * (t - 1))
    sink = sum(alpha[s, 0, i, 0] for s in range(b) for i in range(t)) / (b * t)
    probe = np.broadcast_to(uniform_causal(2 * r), (b, 1, 2 * r, 2 * r))
    # a_{R+k, k+1} (1-based) for k = 1..R-1: 0-based row R+k-1, column k
    ind = sum(probe[s, 0, r + k - 1, k] for s in range(b) for k in range(1, r)) / (b * (r - 1))
    # a_{i,i} over i = 2..T (a_11 = 1 for every head, left out)
    current = sum(alpha[s, 0, i, i] for s in range(b) for i in range(1, t)) / (b * (t - 1))
    nulls = uniform_nulls(t, r)
    assert nulls == pytest.approx({"previous_token": prev, "sink": sink, "induction": ind, "current_token": current}, rel=1e-12)
    # and the forward lens's own code on the same matrices (float32 input, as a model returns it)
    sums = AttentionSums(1, 1, t)
    sums.add(0, torch.from_numpy(np.ascontiguousarray(alpha, dtype=np.float32)))
    sums.next_batch(b)
    stats = sums.head_statistics()
    assert float(stats["prev_token"][0, 0]) == pytest.approx(nulls["previous_token"], rel=1e-6)
    assert float(stats["sink"][0, 0]) == pytest.approx(nulls["sink"], rel=1e-6)
    assert float(stats["current_token"][0, 0]) == pytest.approx(nulls["current_token"], rel=1e-6)
    lens = induction_scores(torch.from_numpy(np.ascontiguousarray(probe, dtype=np.float32)), r)
    assert float(lens[0]) == pytest.approx(nulls["induction"], rel=1e-6)
    assert nulls["induction"] == pytest.approx(uniform_induction_baseline(r), rel=1e-12)


def test_the_shipped_runs_nulls_and_thresholds() -> None:
    # T = 256, R = 128: H_256 = 6.1243... (ln 256 + gamma + 1/512 - ...)
    h256 = float(np.sum(1 / np.arange(1, 257)))
    nulls = uniform_nulls(256, 128)
    assert nulls["previous_token"] == pytest.approx((h256 - 1) / 255) and nulls["sink"] == pytest.approx(h256 / 256)
    assert 0.0200 < nulls["previous_token"] < 0.0202 and 0.0239 < nulls["sink"] < 0.0240
    assert nulls["induction"] == pytest.approx(np.log(2) / 128, rel=0.01)  # (H_255 - H_128)/127 ~ ln 2 / R
    rules = type_rules(256, 128)
    assert {r.threshold for r in rules.values()} == {0.3} and all(r.exit == pytest.approx(0.2) for r in rules.values())
    short = type_rules(32, 16)  # the ratio binds: 5 x null above 0.3
    assert short["previous_token"].threshold == pytest.approx(5 * uniform_nulls(32, 16)["previous_token"])
    assert short["induction"].threshold == 0.3
    with pytest.raises(ValueError, match="at least 2"):
        uniform_nulls(1, 4)
    with pytest.raises(ValueError, match="ratio"):
        type_rules(32, 16, ratio=0.5)


def test_hysteresis_and_emergence_on_a_hand_worked_curve() -> None:
    scores = np.array([0.1, 0.35, 0.25, 0.15, 0.31, 0.22, 0.29, 0.4])[:, None]
    holds = hysteresis(scores, enter=0.3, exit=0.2)
    assert holds[:, 0].tolist() == [False, True, True, False, True, True, True, True]
    assert emergence_index(holds).tolist() == [4] and first_index(scores >= 0.3).tolist() == [1]
    assert emergence_index(np.ones((3, 2), bool)).tolist() == [0, 0]
    assert emergence_index(np.array([[True], [False]])).tolist() == [-1]
    assert emergence_index(np.zeros((0, 2), bool)).tolist() == [-1, -1]
    assert hysteresis(np.array([[np.nan], [0.5]]), enter=0.3, exit=0.2)[:, 0].tolist() == [False, True]
    with pytest.raises(ValueError, match="exit level"):
        hysteresis(scores, enter=0.2, exit=0.3)


def test_emergence_at_known_crossings_without_flicker_under_noise() -> None:
    rng = np.random.default_rng(0)
    steps = np.arange(0, 2000, 10)  # 200 checkpoints
    crossings = np.array([300, 700, 1200, 1650])  # where each clean curve passes 0.3
    # a sigmoid from 0.1 to 0.5, 0.3 at its midpoint, over about 100 steps; checkpoint noise sigma 0.02 (about
    # the shipped runs' checkpoint-to-checkpoint change, docs/head-types.md)
    clean = 0.1 + 0.4 / (1 + np.exp(-(steps[:, None] - crossings[None, :]) / 25.0))  # (S, 4)
    heads = 50
    noisy = clean[:, :, None] + 0.02 * rng.standard_normal((len(steps), len(crossings), heads))  # (S, 4, 50)
    holds = hysteresis(noisy, enter=0.3, exit=0.2)
    # no flicker: once held, held to the end (the exit level is 5 sigma below the plateau's start)
    assert (np.diff(holds.astype(int), axis=0) >= 0).all()
    emerged = steps[emergence_index(holds)]  # (4, 50)
    assert np.abs(emerged - crossings[:, None]).max() <= 60  # within a few checkpoints of the clean crossing
    assert np.abs(np.median(emerged, axis=1) - crossings).max() <= 10
    # without hysteresis the same curves flicker: the test could fail
    plain = noisy >= 0.3
    assert (np.diff(plain.astype(int), axis=0) < 0).any()
    # a head that rises and falls back below the exit level holds nothing at the end
    bump = 0.1 + 0.4 * np.exp(-(((steps - 800) / 150.0) ** 2)) + 0.02 * rng.standard_normal(len(steps))
    bump_holds = hysteresis(bump[:, None], enter=0.3, exit=0.2)
    assert emergence_index(bump_holds).tolist() == [-1] and first_index(bump[:, None] >= 0.3)[0] >= 0


def test_head_type_frames_have_the_tables_columns_and_the_rule() -> None:
    steps = np.array([0, 10, 20, 40])
    rules = type_rules(32, 16)
    rng = np.random.default_rng(1)
    scores = {r.score: rng.uniform(0, 0.2, (4, 2, 3)) for r in rules.values()}
    scores["prev_token"][:, 1, 2] = [0.1, 0.6, 0.45, 0.7]  # enters at 10 (>= 0.493), stays above exit 0.329
    scores["induction"][:, 0, 0] = [0.35, 0.1, 0.32, 0.31]  # in at 0, out at 10, in again from 20
    types, emergence = head_type_frames(steps, scores, rules)
    assert pa.Table.from_pandas(types, schema=HEAD_TYPES_TABLE.schema, preserve_index=False).num_rows == 4 * 6 * 4
    assert pa.Table.from_pandas(emergence, schema=HEAD_EMERGENCE.schema, preserve_index=False).num_rows == 6 * 4
    assert list(types.columns) == HEAD_TYPES_TABLE.schema.names and list(emergence.columns) == HEAD_EMERGENCE.schema.names
    row = emergence[(emergence["layer"] == 1) & (emergence["head"] == 2) & (emergence["type"] == "previous_token")].iloc[0]
    assert row["emergence_step"] == 10 and row["first_step"] == 10 and row["peak_step"] == 40 and row["final_score"] == 0.7
    row = emergence[(emergence["layer"] == 0) & (emergence["head"] == 0) & (emergence["type"] == "induction")].iloc[0]
    assert row["emergence_step"] == 20 and row["first_step"] == 0 and row["peak_score"] == 0.35
    none = emergence[(emergence["layer"] == 0) & (emergence["head"] == 1) & (emergence["type"] == "sink")].iloc[0]
    assert none["emergence_step"] is pd_na() and none["first_step"] is pd_na()
    prev = types[(types["type"] == "previous_token") & (types["layer"] == 1) & (types["head"] == 2)]
    assert prev["holds"].tolist() == [False, True, True, True]
    assert np.allclose(prev["ratio"], prev["score"] / uniform_nulls(32, 16)["previous_token"])
    held = types_held(types, 20)
    assert held.set_index(["layer", "head"]).loc[(1, 2), "types"] == "previous_token"
    assert held.set_index(["layer", "head"]).loc[(0, 0), "types"].startswith("induction")
    counts = type_counts(types)
    assert set(counts["type"]) == set(ATTENTION_TYPES) and len(counts) == 4 * 4
    # a store without one score is typed for the others only
    three = {name: rule for name, rule in rules.items() if name != "current_token"}
    types3, emergence3 = head_type_frames(steps, {k: v for k, v in scores.items() if k != "current_token"}, three)
    assert set(types3["type"]) == set(three) and len(emergence3) == 6 * 3
    with pytest.raises(ValueError, match="non-finite"):
        head_type_frames(steps, {**scores, "sink": np.full((4, 2, 3), np.nan)}, rules)
    with pytest.raises(ValueError, match="ascending"):
        head_type_frames(steps[::-1], scores, rules)


def pd_na():
    import pandas as pd

    return pd.NA


def test_the_current_token_score_against_brute_force_on_planted_attention() -> None:
    """Random causal attention with a planted self-attending head: `AttentionSums`'s current-token score equals the
    mean of a_{i,i} over queries i = 2..T and sequences taken in numpy, and the planted head clears the threshold."""
    rng = np.random.default_rng(3)
    b, h, t = 5, 3, 12
    logits = rng.standard_normal((b, h, t, t))
    logits[:, 1] += 6.0 * np.eye(t)  # head 1 attends to itself
    logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
    alpha = np.exp(logits - logits.max(-1, keepdims=True))
    alpha /= alpha.sum(-1, keepdims=True)
    sums = AttentionSums(1, h, t)
    for lo in (0, 2):  # two batches: the running sums
        hi = b if lo else 2
        sums.add(0, torch.from_numpy(alpha[lo:hi]))
        sums.next_batch(hi - lo)
    stats = sums.head_statistics()
    brute = np.array([np.mean([alpha[s, k, i, i] for s in range(b) for i in range(1, t)]) for k in range(h)])
    assert stats["current_token"][0].numpy() == pytest.approx(brute, rel=1e-12)
    rule = type_rules(t, t // 2)["current_token"]
    assert brute[1] > rule.threshold > max(brute[0], brute[2])
    # the self-attention of the first query (always 1) is not in the score: a pure sink head scores 0
    sink = np.zeros((1, 1, t, t))
    sink[..., 0] = 1.0
    only = AttentionSums(1, 1, t)
    only.add(0, torch.from_numpy(sink))
    only.next_batch(1)
    assert float(only.head_statistics()["current_token"][0, 0]) == 0.0
