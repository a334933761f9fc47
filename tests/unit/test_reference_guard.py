"""The reference-store tests cannot skip silently: a shipped store without a table fails them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SHIPPED_DATA, require_table


def test_a_shipped_store_without_a_table_fails() -> None:
    with pytest.raises(pytest.fail.Exception, match="the shipped store"):
        require_table(False, SHIPPED_DATA / "shakespeare-pythia-6x8", "no llc.parquet")


def test_a_users_store_without_a_table_skips(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match=r"no llc\.parquet"):
        require_table(False, tmp_path / "mine", "no llc.parquet")


def test_a_present_table_passes() -> None:
    require_table(True, SHIPPED_DATA / "shakespeare-pythia-6x8", "unused")
