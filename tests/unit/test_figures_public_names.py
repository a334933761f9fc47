"""The dashboard's figure modules use each other's public names only: a helper another module imports (the stage
bands' shapes and labels of `dashboard.figures.timeline`, drawn by `dashboard.figures.errors`) has no leading
underscore. Read from the modules' syntax trees."""

from __future__ import annotations

import ast
from pathlib import Path

FIGURES = Path(__file__).resolve().parents[2] / "headwatch" / "dashboard" / "figures"


def test_no_figure_module_imports_a_private_name_of_another() -> None:
    private = []
    for path in sorted(FIGURES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("headwatch."):
                private += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not private, private


def test_the_stage_bands_are_public_in_the_timeline_figure() -> None:
    from headwatch.dashboard.figures import errors, timeline

    assert errors.stage_shapes is timeline.stage_shapes and errors.stage_labels is timeline.stage_labels
