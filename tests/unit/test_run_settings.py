"""precompute.settings.resolve_settings: the one place the run's settings are decided."""

from __future__ import annotations

import pytest

from headwatch.precompute.settings import RunOptions, resolve_settings


def resolve(options: RunOptions, **kw):
    args = dict(
        source="s",
        source_kind="local",
        fetch=None,
        device="cpu",
        d_head=16,
        run_tokens_per_step=None,
        source_tokens_per_step=None,
        stored_overlap_k=0,
        revisions=None,
    )
    return resolve_settings(options, **(args | kw))


def test_tokens_per_step_the_option_then_run_json_then_the_source() -> None:
    assert resolve(RunOptions(device="cpu")).tokens_per_step is None
    assert resolve(RunOptions(device="cpu"), source_tokens_per_step=2_097_152).tokens_per_step == 2_097_152
    assert resolve(RunOptions(device="cpu"), run_tokens_per_step=2048, source_tokens_per_step=2_097_152).tokens_per_step == 2048
    assert (
        resolve(
            RunOptions(device="cpu", tokens_per_step=7), run_tokens_per_step=2048, source_tokens_per_step=2_097_152
        ).tokens_per_step
        == 7
    )


def test_overlap_k_the_option_then_the_store_then_8_capped_at_d_head() -> None:
    assert resolve(RunOptions(device="cpu")).overlap_k == 8
    assert resolve(RunOptions(device="cpu"), stored_overlap_k=4).overlap_k == 4
    assert resolve(RunOptions(device="cpu", lens_options={"overlaps": {"k": 0}}), stored_overlap_k=4).overlap_k == 0
    assert resolve(RunOptions(device="cpu", lens_options={"overlaps": {"k": 64}})).overlap_k == 16


def test_matrices_keep_what_the_store_has_and_need_a_per_head_one() -> None:
    assert resolve(RunOptions(device="cpu", matrices=("qk",)), stored_matrices=("qk", "ov")).matrices == ("qk", "ov")
    with pytest.raises(ValueError, match="per-head matrix"):
        resolve(RunOptions(device="cpu", matrices=("layers",)))
