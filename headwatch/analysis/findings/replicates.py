"""Which runs are replicates of a run, as the Timeline, the Trajectory map and ``headwatch report`` all ask it: runs of
the same recipe with another seed. A replication verdict is asked of those runs only; a run of another size or on
another corpus is another experiment, not a second try of this one.

The recipe is what ``run.json`` records of a run trained here, less the seed (`analysis.store.meta.Meta.recipe`);
a run not trained here has none, and only the user can name its replicates (``headwatch report --replicate``).
Pure: takes opened stores, returns names and sentences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headwatch.analysis.store import Store

SHOWN_DIFFERENCES = 4  # the recipe's differing settings named in a sentence


def recipe_differences(a: dict[str, Any], b: dict[str, Any], *, prefix: str = "") -> list[str]:
    """The settings (dotted, ``model.d_model``) in which two recipes (`Meta.recipe`) differ, sorted."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += recipe_differences(x, y, prefix=f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}")
    return out


def is_replicate(store: Store, other: Store) -> bool:
    """Whether ``other`` is a replicate of ``store``: both trained here with the same recipe and different seeds."""
    mine, theirs = store.meta.recipe, other.meta.recipe
    return mine is not None and mine == theirs and store.meta.seed != other.meta.seed


def replicates_of(store: Store, others: Mapping[str, Store]) -> list[str]:
    """The names of the ``others`` that are replicates of ``store`` (`is_replicate`), in their order."""
    return [name for name, other in others.items() if is_replicate(store, other)]


def relation_text(store: Store, other: Store) -> str:
    """What ``other`` is to ``store`` in a few words: ``the same recipe, seed 2``; ``another recipe (model.d_model,
    model.d_mlp, ...)``; ``no recorded recipe``."""
    mine, theirs = store.meta.recipe, other.meta.recipe
    if mine is None or theirs is None:
        return "no recorded recipe (not trained here)" if theirs is None else "this run has no recorded recipe"
    if mine == theirs:
        if store.meta.seed == other.meta.seed:
            return f"the same recipe and the same seed ({other.meta.seed}): a copy, not a replicate"
        return f"the same recipe, seed {other.meta.seed}"
    differ = recipe_differences(mine, theirs)
    more = f", and {len(differ) - SHOWN_DIFFERENCES} more" if len(differ) > SHOWN_DIFFERENCES else ""
    return f"another recipe ({', '.join(differ[:SHOWN_DIFFERENCES])}{more})"


def replicate_hint(store: Store, name: str, *, where: str = "among the runs") -> str:
    """What to do when ``store`` (shown as ``name``) has no replicate ``where`` it was looked for: the commands that
    train the same recipe with another seed and make its store, or, for a run not trained here, how to name one."""
    seed = store.meta.seed
    if seed is None:
        return (
            f"`{name}` was not trained here (its meta.json records no run.json), so no run can be recognised as its "
            "replicate: name a run of the same recipe with another seed with `headwatch report STORE --replicate OTHER`."
        )
    new = 2 if seed != 2 else 3
    return (
        f"No replicate of `{name}` is {where}: a run of the same recipe (meta.json `training.config`) with another "
        f"seed. Train one with `headwatch train --out runs/{name}-seed{new} --seed {new}` and this run's other options "
        f"as its `training.config` records them (the shipped recipes: `bash scripts/induction-runs.sh train SIZE {new}` "
        f"then `bash scripts/induction-runs.sh store SIZE {new}` for the induction runs, `SEED={new} bash "
        "scripts/reference-run.sh` for the plain-text run), make its store with this store's lenses (`headwatch "
        "precompute --source RUN --out STORE`) and put it beside this one (the dashboard's data folder), or name one "
        "with `headwatch report STORE --replicate OTHER`."
    )
