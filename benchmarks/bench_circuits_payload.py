"""The bytes the Circuits page's composition matrix sends to the browser: its figure as `st.plotly_chart` encodes it.

    python -m benchmarks.bench_circuits_payload --store data/shakespeare-pythia-6x8

The matrix is built as `dashboard.views.circuits.page.matrix_panel` builds it (K-composition over the
random-heads mean, every step with composition rows, opened at the last), then encoded with ``plotly.io.to_json``
(what Streamlit puts in the page's message). Printed: the figure's bytes, and how many are the base traces, the
frames and the layout. Results: docs/dashboard.md ("One panel at a time", the Circuits bullet).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import plotly.io as pio
from plotly.io.json import to_json_plotly

from headwatch.analysis.findings.paths import types_at
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.composition import COMPOSITION
from headwatch.dashboard.views.circuits import data
from headwatch.dashboard.views.circuits import figures as figs

STORE = Path(__file__).resolve().parents[1] / "data" / "shakespeare-pythia-6x8"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", type=Path, default=STORE)
    parser.add_argument("--kind", default="k", choices=["q", "k", "v"])
    args = parser.parse_args()
    store = open_store(args.store)
    steps = data.composition_steps(store)
    divisor = ((store.meta.composition or {}).get("baseline") or {}).get(args.kind) or 1.0
    at = data.rows_of(store, steps)
    matrix = data.pair_matrix(store.require(COMPOSITION, args.kind)[at]) / divisor  # (S, N targets, N sources)
    paths = data.ringed_paths(store, steps, at)
    fig = figs.composition_animation(
        matrix,
        steps=steps,
        start=len(steps) - 1,
        n_heads=store.n_heads,
        kind=args.kind,
        unit=figs.KIND_NAMES[args.kind],
        paths=paths,
        types=types_at(store, steps),
        divisor=divisor,
        title=store.path.name,
    )
    total = len(pio.to_json(fig, validate=False).encode())
    parts = {k: len(to_json_plotly(v).encode()) for k, v in fig.to_plotly_json().items()}
    print(
        f"{store.path.name}: {total:,} bytes ({len(fig.frames)} frames; "
        + ", ".join(f"{k} {v:,}" for k, v in parts.items())
        + ")"
    )


if __name__ == "__main__":
    main()
