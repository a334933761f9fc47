"""What the Random-matrix lab computes before it draws (`views.lab.data`), against known values."""

from __future__ import annotations

import plotly.graph_objects as go

from headwatch.analysis.store import open_store
from headwatch.dashboard.views.lab import data as lab


def test_without_a_run_the_lab_opens_at_its_defaults() -> None:
    offer = lab.offer(None)
    assert (offer.d_model0, offer.heads0, offer.sigma0, offer.run_sigma0) == (512, 8, 0.02, None)
    assert offer.d_models == lab.D_MODELS and offer.n_heads == lab.N_HEADS and offer.sigmas == lab.SIGMAS


def test_a_run_adds_its_own_shape_to_the_offer(store_path) -> None:
    offer = lab.offer(open_store(store_path))  # d_model 64, d_head 16 (tests/app/conftest.py)
    assert (offer.d_model0, offer.heads0) == (64, 4)
    assert 64 in offer.d_models and 4 in offer.n_heads and offer.sigma0 in offer.sigmas


def test_trace_csv_holds_every_trace_with_its_points() -> None:
    fig = go.Figure([go.Scatter(x=[1, 2], y=[3, 4], name="a"), go.Bar(x=[0], y=[9], name="b")])
    table = lab.trace_csv(fig, "setting")
    assert table["series"].tolist() == ["a", "a", "b"] and table["value"].tolist() == [3, 4, 9]
    assert set(table["setting"]) == {"setting"}
