"""What the Weight matrices page computes before it draws: one role's rows of ``layers.parquet``, their values per
(step, layer) at the run's checkpoints, the depth panel's fixed x range, and the singular values and per-layer
values as tidy tables. Pure (no streamlit); `views.weights.page` calls it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.layers import LAYER_ROLES, LAYERS


def layer_matrices(store: Store) -> pd.DataFrame | None:
    """The store's whole-layer matrices (``layers.parquet``, the columns the page draws); None when it has none.

    Raises:
        StoreError: ``layers.parquet`` is unreadable.
    """
    return store.frame(LAYERS, columns=["rows", "cols", "std", "sv", "frob_norm", "mp_spikes", "alpha"])


@dataclass(frozen=True)
class Contents:
    """What a run's ``layers.parquet`` holds: its roles (in `LAYER_ROLES` order), steps and layers, ascending."""

    roles: list[str]
    steps: list[int]
    layers: list[int]


def contents(table: pd.DataFrame) -> Contents:
    """The roles, steps and layers of ``layers.parquet`` rows."""
    return Contents(
        roles=[r for r in LAYER_ROLES if r in set(table["role"])],
        steps=sorted(int(s) for s in table["step"].unique()),
        layers=sorted(int(x) for x in table["layer"].unique()),
    )


@dataclass(frozen=True)
class Role:
    """One role's rows (every layer and step) and the weight's shape as stored."""

    rows: pd.DataFrame
    n_rows: int
    n_cols: int

    @property
    def shape(self) -> str:
        """``1,024 x 4,096``."""
        return f"{self.n_rows:,} x {self.n_cols:,}"

    def of_layer(self, layer: int) -> pd.DataFrame:
        """The rows of one layer, by step."""
        return self.rows[self.rows["layer"] == layer].sort_values("step")

    def at_step(self, step: int) -> pd.DataFrame:
        """The rows of one step, by layer."""
        return self.rows[self.rows["step"] == step].sort_values("layer")

    def depth_x_max(self) -> float:
        """The depth panel's x range, fixed over the run: 1.04 x the largest singular value in the law's units,
        s / (sigma sqrt(n)) with n the longer side (2 when no row has a positive sigma)."""
        n = max(self.n_rows, self.n_cols)
        x_all = [np.asarray(v) / (sd * np.sqrt(n)) for v, sd in zip(self.rows["sv"], self.rows["std"], strict=True) if sd > 0]
        return 1.04 * max(float(np.max(x)) for x in x_all) if x_all else 2.0


def role(table: pd.DataFrame, name: str) -> Role:
    """The rows of role ``name`` (the table has some)."""
    rows = table[table["role"] == name]
    return Role(rows=rows, n_rows=int(rows["rows"].iloc[0]), n_cols=int(rows["cols"].iloc[0]))


def known_steps(steps: list[int], store_steps) -> list[int]:
    """The steps of ``steps`` (those with layer rows) that are among the run's checkpoints ``store_steps`` (the time
    axis's), in order."""
    have = set(int(x) for x in store_steps)
    return [s for s in steps if s in have]


def per_layer(rows: pd.DataFrame, steps: list[int], layers: list[int], column: str) -> np.ndarray:
    """``(len(steps), len(layers))`` values of ``column`` of one role's rows; NaN where a (step, layer) has none."""
    out = np.full((len(steps), len(layers)), np.nan)
    pos = {s: i for i, s in enumerate(steps)}
    for s, lay, value in zip(rows["step"], rows["layer"], rows[column], strict=True):
        if int(s) in pos:
            out[pos[int(s)], layers.index(int(lay))] = value
    return out


def per_layer_csv(run: str, role: str, statistic: str, steps: list[int], layers: list[int], values: np.ndarray) -> pd.DataFrame:
    """A (step, layer) table of one role's values as tidy rows."""
    return pd.DataFrame(
        {
            "run": run,
            "role": role,
            "statistic": statistic,
            "step": np.repeat(np.asarray(steps, dtype=np.int64), len(layers)),
            "layer": np.tile(np.asarray(layers, dtype=np.int64), len(steps)),
            "value": values.ravel(),
        }
    )


def sv_csv(run: str, role: str, rows: pd.DataFrame) -> pd.DataFrame:
    """Every singular value of the given ``layers.parquet`` rows as tidy rows (run, role, layer, step, index, value)."""
    parts = [
        pd.DataFrame(
            {
                "run": run,
                "role": role,
                "layer": int(r.layer),
                "step": int(r.step),
                "statistic": "sv",
                "index": np.arange(len(r.sv)),
                "value": np.asarray(r.sv, dtype=np.float64),
            }
        )
        for r in rows.itertuples(index=False)
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
