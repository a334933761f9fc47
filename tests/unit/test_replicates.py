"""Which runs are replicates (issue 62 item 1): the same training recipe with another seed, read from what ``run.json``
recorded in ``meta.json`` ``training`` (`analysis.store.meta.Meta.recipe`, `analysis.findings.replicates`), on the
shipped stores and on small synthetic ones whose recorded training differs in one setting at a time."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.synthetic_store import write_synthetic_store
from headwatch.analysis.findings.association import Asked, JudgedAssociation, open_question_text
from headwatch.analysis.findings.replicates import (
    is_replicate,
    recipe_differences,
    relation_text,
    replicate_hint,
    replicates_of,
)
from headwatch.analysis.store import open_store
from headwatch.analysis.trajectories.significance import Decision, Judged
from headwatch.analysis.trajectories.type_association import Association, replication
from tests.conftest import SHIPPED_DATA

SHIPPED = {p.name: p for p in sorted(SHIPPED_DATA.iterdir()) if (p / "meta.json").is_file()}


def _recorded(path: Path) -> dict:
    """meta.json's ``training`` read as JSON, not through the store's reader."""
    return json.loads((path / "meta.json").read_text())["training"]


def test_the_shipped_replicates_are_the_two_seeds_of_d128_and_of_the_plain_text_run() -> None:
    """By hand from meta.json: the two d128 runs' recorded configs differ only in their seed, as do the two plain-text
    runs'; the other sizes differ in the model's shape. The finder says the same, and nothing else."""
    a, b = _recorded(SHIPPED["induction-d128"]), _recorded(SHIPPED["induction-d128-seed2"])
    assert (a["seed"], b["seed"]) == (1234, 2)
    # the software the runs were trained with is no part of the recipe (a run retrained on another torch build is the
    # same recipe), nor the model's config as transformers writes it
    settings = ("seed", "software", "transformers_config")
    assert {k: v for k, v in a["config"].items() if k not in settings} == {
        k: v for k, v in b["config"].items() if k not in settings
    }
    assert _recorded(SHIPPED["induction-d64"])["config"]["model"]["d_model"] == 64
    stores = {name: open_store(path) for name, path in SHIPPED.items()}
    found = {name: replicates_of(store, {n: s for n, s in stores.items() if n != name}) for name, store in stores.items()}
    assert found == {
        "induction-d128": ["induction-d128-seed2"],
        "induction-d128-seed2": ["induction-d128"],
        "induction-d256": [],
        "induction-d512": [],
        "induction-d64": [],
        "shakespeare-pythia-6x8": ["shakespeare-pythia-6x8-seed2"],
        "shakespeare-pythia-6x8-seed2": ["shakespeare-pythia-6x8"],
    }
    d128 = stores["induction-d128"]
    assert relation_text(d128, stores["induction-d128-seed2"]) == "the same recipe, seed 2"
    assert relation_text(d128, stores["induction-d256"]) == "another recipe (model.d_head, model.d_mlp, model.d_model)"
    assert relation_text(d128, d128) == "the same recipe and the same seed (1234): a copy, not a replicate"


def _training(seed: int = 1234, **changes) -> dict:
    """A ``run.json`` record as ``headwatch train`` writes it (the shipped d128's), with ``changes`` by dotted key."""
    record = copy.deepcopy(_recorded(SHIPPED["induction-d128"]))
    record["seed"] = record["config"]["seed"] = seed
    for key, value in changes.items():
        *path, last = key.split(".")
        at = record
        for part in path:
            at = at[part]
        at[last] = value
    return record


def _store(path: Path, training: dict | None) -> Path:
    write_synthetic_store(path, n_layers=2, n_heads=2, d_head=8, d_model=32, n_checkpoints=4, training=training is not None)
    if training is not None:
        meta = json.loads((path / "meta.json").read_text())
        meta["training"] = training
        (path / "meta.json").write_text(json.dumps(meta))
    return path


@pytest.mark.parametrize(
    "changes, replicate",
    [
        ({"seed": 7, "config.seed": 7}, True),  # the seed alone
        ({"seed": 7, "config.seed": 7, "config.software.torch": "2.0", "device": "cuda"}, True),  # not the recipe
        ({"seed": 7, "config.seed": 7, "config.transformers_config.transformers_version": "4.0"}, True),
        ({}, False),  # the same seed: the same run
        ({"seed": 7, "config.seed": 7, "config.optim.max_lr": 3e-3}, False),
        ({"seed": 7, "config.seed": 7, "config.repeats.share": 0.0}, False),
        ({"seed": 7, "config.seed": 7, "corpus.sha256": "0" * 64}, False),
    ],
)
def test_a_replicate_differs_in_its_seed_alone(tmp_path: Path, changes: dict, replicate: bool) -> None:
    base = open_store(_store(tmp_path / "base", _training()))
    other = open_store(_store(tmp_path / "other", _training(**{k: v for k, v in changes.items()})))
    assert is_replicate(base, other) is replicate and is_replicate(other, base) is replicate
    assert replicates_of(base, {"other": other}) == (["other"] if replicate else [])


def test_the_recipes_differences_are_named_by_their_settings() -> None:
    a = {"model": {"d_model": 128, "n_heads": 8}, "steps": 4000, "corpus": "x"}
    b = {"model": {"d_model": 256, "n_heads": 8}, "steps": 4000, "corpus": "y", "extra": 1}
    assert recipe_differences(a, b) == ["corpus", "extra", "model.d_model"]
    assert recipe_differences(a, copy.deepcopy(a)) == []


def test_a_run_not_trained_here_has_no_replicate_and_the_hint_says_how_to_name_one(tmp_path: Path) -> None:
    hub = open_store(_store(tmp_path / "hub", None))
    trained = open_store(_store(tmp_path / "trained", _training()))
    assert hub.meta.recipe is None and hub.meta.seed is None
    assert not is_replicate(hub, open_store(_store(tmp_path / "hub2", None)))
    assert relation_text(trained, hub) == "no recorded recipe (not trained here)"
    hint = replicate_hint(hub, "hub")
    assert "not trained here" in hint and "--replicate" in hint
    hint = replicate_hint(trained, "trained")
    assert "`headwatch train --out runs/trained-seed2 --seed 2`" in hint and "SEED=2 bash scripts/reference-run.sh" in hint
    assert "bash scripts/induction-runs.sh train SIZE 2" in hint
    seed2 = open_store(_store(tmp_path / "seed2", _training(seed=2)))
    assert "--seed 3" in replicate_hint(seed2, "seed2")  # another seed than its own


def _tested(decision: Decision, p: float = 0.001) -> JudgedAssociation:
    """A statistic of one run whose p over heads was judged ``decision`` (after Holm, `analysis.trajectories.significance`)."""
    judged = Judged(p=p, se=0.0003, adjusted=3 * p, low=2 * p, high=4 * p, family=3, decision=decision)
    association = Association(
        ami=0.3, p_value=p, p_within_layers=p, permutations=9999, clusters=3, silhouette=0.3, types=2, heads=16
    )
    return JudgedAssociation(association, judged, judged, np.zeros(16, dtype=int), np.full(16, "none"), 100)


def test_replication_is_associated_in_every_run_and_undecided_only_where_it_could_go_either_way() -> None:
    """Issue 62's rule, three-valued as the decisions are: associated in every run replicates; no association shown in
    any run does not, whatever an undecided run would turn out to be; otherwise an undecided run leaves it undecided."""
    assert replication(["associated", "associated"]) == "replicates"
    assert replication(["associated", "undecided"]) == "undecided"
    assert replication(["undecided", "associated", "associated"]) == "undecided"
    assert replication(["associated", "not shown"]) == "not shown"
    assert replication(["not shown", "undecided"]) == "not shown"  # no outcome of the undecided run can make it hold
    assert replication(["associated", None]) == "not testable"
    assert replication(["not shown", None]) == "not shown"
    with pytest.raises(ValueError, match="at least one run"):
        replication([])


def test_the_paragraph_asks_replication_of_the_replicates_only_and_names_them() -> None:
    """Associated (after Holm) here and in the replicate replicates; no association shown in the replicate does not;
    undecided there leaves it undecided; one no replicate has is not asked; other runs are named apart, and their
    figures never enter the verdict."""
    asked = [
        Asked("D_KL of W_QK", _tested("associated"), {"run-seed2": _tested("associated")}),
        Asked("σ of W_QK", _tested("associated"), {"run-seed2": _tested("not shown", 0.4)}),
        Asked("S of W_QK", _tested("associated"), {"run-seed2": _tested("undecided", 0.006)}),
        Asked("H of W_QK", _tested("not shown", 0.2), {"run-seed2": _tested("undecided", 0.006)}),
        Asked("rLLC", _tested("associated"), {}),
    ]
    text = open_question_text(asked, replicates=["run-seed2"], other_runs=["run-d64"], hint="HINT")
    assert (
        "Replication, asked of this run's replicate `run-seed2` (the same recipe, another seed), read from each run's "
        "decision over heads after Holm's correction. Replicates: D_KL of W_QK. No replication shown: σ of W_QK (no "
        "association shown in `run-seed2`); H of W_QK (no association shown in this run). Undecided: S of W_QK "
        "(undecided in `run-seed2`). Not asked of a replicate (none has it): rLLC."
    ) in text
    assert "The other runs with head types (`run-d64`) are not replicates of this run" in text and "HINT" not in text
    none = open_question_text(asked[1:2], replicates=["run-seed2"])
    assert none.endswith(
        "No replication shown: σ of W_QK (no association shown in `run-seed2`). No association is shown to replicate."
    )
    alone = open_question_text(asked, other_runs=["run-d64"], hint="HINT")
    assert "Whether these associations replicate is not asked. HINT" in alone and "Replication, asked" not in alone
