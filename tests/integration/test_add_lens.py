"""A lens added from this module alone: its declaration (table, meta.json record, option, cost figures) and its
computation.

The lens (``knorms``: the Frobenius norm of each head's W_K, times ``--knorms-scale``) is declared here as a lens's
declaration module declares it, computed by a class as a lens's computation module computes it, and joins the lenses
for the test with `precompute.lenses.computations.joined`. Nothing outside this module names it; a real run through
the command line (in this process, where it has joined) computes it, the store holds its table and its record,
``headwatch info`` lists it with its figures, and ``headwatch plan`` prices it. The numbers are checked against the
checkpoints' own safetensors files, read with numpy.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from safetensors.numpy import load_file

from headwatch.analysis.store import RecordType, open_store, read_meta
from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses import LENSES, RECORDS, TABLES
from headwatch.analysis.store.lenses.declaration import Lens, Option, Seconds, StoreBytes
from headwatch.cli import main as headwatch
from headwatch.families.family import ModelShape
from headwatch.precompute.__main__ import main as precompute
from headwatch.precompute.job.context import BaseComputation, ComputationSetup, RunContext
from headwatch.precompute.job.factors import checked_factors
from headwatch.precompute.lenses.computations import COMPUTATIONS, joined
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.source import CheckpointSource, Fetched
from tests.integration.conftest import make_suite

# ------------------------------------------------------------------ the lens's declaration

K_NORMS = TableSpec(
    name="k_norms",
    file="k_norms.parquet",
    row="one row per (step, layer, head)",
    about="A test lens: the Frobenius norm of each head's W_K, scaled.",
    schema=schema_of({"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "k_frob": pa.float64()}),
    docs={"step": "step", "layer": "layer", "head": "head", "k_frob": "scale x ||W_K,h||_F"},
    sort=("step", "layer", "head"),
)
K_NORMS_RECORD = RecordType("knorms", "how k_norms.parquet was made (scale)")


@dataclass(frozen=True)
class KNormsOptions:
    scale: float = 1.0


def knorms_options(values: Mapping[str, Any]) -> KNormsOptions:
    return KNormsOptions(scale=values.get("scale", 1.0))


K_NORMS_LENS = Lens(
    name="knorms",
    title="W_K norms",
    summary="scale x ||W_K,h||_F per head",
    tables=(K_NORMS,),
    asked_by="--lenses",
    needs=("tensors",),
    record=K_NORMS_RECORD,
    options=(Option("--knorms-scale", "scale", float, "S", "what the norms are multiplied by", 1.0),),
    make_options=knorms_options,
    seconds=Seconds("KNORMS_SECONDS_1_4B", 2.5, "heads", "not measured: a test's figure"),
    store_bytes=StoreBytes((K_NORMS,), 20.0, "head_matrices", "head and matrix", "not measured: a test's figure"),
)


# ------------------------------------------------------------------ its computation


@dataclass(frozen=True)
class KNormsJob:
    scale: float

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        assert fetched.tensors is not None, "the lens needs the checkpoint's tensors"
        w_k = checked_factors(shape, fetched.tensors, ("qk",))["qk"][1]  # (n_layers, n_heads, d_head, d_model)
        norms = self.scale * w_k.double().flatten(2).norm(dim=2).numpy()  # (n_layers, n_heads)
        n_layers, n_heads = norms.shape
        rows = {
            "step": pa.array(np.full(n_layers * n_heads, fetched.ref.step, dtype=np.int64)),
            "layer": pa.array(np.repeat(np.arange(n_layers, dtype=np.int32), n_heads)),
            "head": pa.array(np.tile(np.arange(n_heads, dtype=np.int32), n_layers)),
            "k_frob": pa.array(norms.reshape(-1)),
        }
        return {K_NORMS.name: pa.table(rows, schema=K_NORMS.schema)}


class KNormsComputation(BaseComputation):
    lens = K_NORMS_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        super().__init__(setup)
        self.scale = setup.options.lens_options_for(self.lens.name).scale
        self.pass_job = KNormsJob(self.scale)

    def begin(self, run: RunContext) -> None:
        run.state.meta.set_record(K_NORMS_RECORD.key, {"scale": self.scale, "norm": "Frobenius"})


@pytest.fixture
def knorms() -> Iterator[Lens]:
    with joined(KNormsComputation) as lens:
        yield lens


def brute_force_k_norms(folder: Path, n_heads: int) -> np.ndarray:
    """||W_K,h||_F from the checkpoint's safetensors file: GPT-NeoX interleaves Q, K, V per head in
    ``query_key_value`` (rows h*3*d_head + d_head .. h*3*d_head + 2*d_head are head h's keys)."""
    weights = load_file(folder / "model.safetensors")
    names = sorted(
        (k for k in weights if k.endswith("attention.query_key_value.weight")),
        key=lambda k: int(k.split(".layers.")[1].split(".")[0]),
    )
    out = []
    for name in names:
        qkv = weights[name].astype(np.float64)
        d_head = qkv.shape[0] // (3 * n_heads)
        out.append([np.linalg.norm(qkv[h * 3 * d_head + d_head : h * 3 * d_head + 2 * d_head]) for h in range(n_heads)])
    return np.array(out)


# ------------------------------------------------------------------ the run, the store, info and plan


def test_a_lens_from_one_test_module_is_run_stored_listed_and_priced(knorms, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HEADWATCH_EMBEDDINGS", "0")
    assert K_NORMS.name in TABLES and K_NORMS_RECORD.key in RECORDS
    suite = make_suite(tmp_path / "suite", [0, 1, 4])
    out = tmp_path / "store"
    argv = ["--source", str(suite), "--out", str(out), "--device", "cpu", "--no-progress", "--matrices", "qk"]
    assert precompute([*argv, "--lenses", "knorms", "--knorms-scale", "2.5"]) == 0
    capsys.readouterr()

    # the store: its table, against the weights; its record, after the built-in ones in meta.json
    store = open_store(out)
    values = store.dense(K_NORMS, "k_frob")  # (steps, layers, heads)
    assert values is not None and values.shape == (3, 2, 4)
    for i, step in enumerate([0, 1, 4]):
        np.testing.assert_allclose(values[i], 2.5 * brute_force_k_norms(suite / f"step{step}", 4), rtol=1e-6)
    assert store.meta.records["knorms"] == {"scale": 2.5, "norm": "Frobenius"} == store.meta.knorms
    raw = json.loads((out / "meta.json").read_text())
    assert list(raw)[-1] == "knorms" and raw["knorms"] == {"scale": 2.5, "norm": "Frobenius"}

    # headwatch info: the lens, its checkpoints, its record and its figures
    assert headwatch(["info", str(out)]) == 0
    info = capsys.readouterr().out
    assert "  knorms      3 checkpoints; meta.json 'knorms' records how" in info
    assert "  knorms      KNORMS_SECONDS_1_4B = 2.5 s; k_norms.parquet 20.0 B per head and matrix" in info

    # headwatch plan: the lens among --lenses, priced from its figure, its bytes in the store's growth
    assert headwatch(["plan", str(suite), "--matrices", "qk", "--lenses", "knorms"]) == 0
    plan = capsys.readouterr().out
    scale = (2 * 4 * 64**2) / (24 * 16 * 2048**2)  # layers x heads x d_model^2 against Pythia-1.4B's
    line = next(line for line in plan.splitlines() if "KNORMS_SECONDS_1_4B" in line)
    assert line.split()[0] == "knorms" and f"x {scale:.3g} (layers x heads" in line
    assert "k_norms.parquet 20.0 B per head and matrix" in plan
    assert headwatch(["plan", str(suite), "--matrices", "qk"]) == 0
    assert "KNORMS" not in capsys.readouterr().out

    # without the lens option's lens, the option is refused like any lens's
    assert precompute([*argv, "--knorms-scale", "3"]) == 2
    assert "--knorms-scale are for the W_K norms: add --lenses knorms" in capsys.readouterr().err


def test_a_lens_that_left_leaves_no_trace_and_its_record_survives(tmp_path: Path, monkeypatch) -> None:
    """Once the lens has left (the end of its ``with`` block), the store format, the records and the command line
    are as before, and a store that has its record reads and writes it back as the file has it."""
    monkeypatch.setenv("HEADWATCH_EMBEDDINGS", "0")
    suite = make_suite(tmp_path / "suite", [0, 1, 4])
    out = tmp_path / "store"
    argv = ["--source", str(suite), "--out", str(out), "--device", "cpu", "--no-progress", "--matrices", "qk"]
    with joined(KNormsComputation):
        assert precompute([*argv, "--revisions", "step0,step1", "--lenses", "knorms"]) == 0
    table = (out / K_NORMS.file).read_bytes()
    assert "knorms" not in LENSES.by_name and "knorms" not in COMPUTATIONS
    assert K_NORMS.name not in TABLES and "knorms" not in RECORDS
    meta = read_meta(out)
    assert meta.extra["knorms"] == {"scale": 1.0, "norm": "Frobenius"} and "knorms" not in meta.records
    with pytest.raises(SystemExit):
        precompute([*argv, "--lenses", "knorms"])
    assert precompute(argv) == 0  # step 4 is new: meta.json is written again, the unknown record with it
    raw = json.loads((out / "meta.json").read_text())
    assert [c["step"] for c in raw["checkpoints"]] == [0, 1, 4]
    assert list(raw)[-1] == "knorms" and raw["knorms"] == {"scale": 1.0, "norm": "Frobenius"}
    assert (out / K_NORMS.file).read_bytes() == table  # a table of no declared lens is kept as it is


def _module_state() -> dict[tuple[object, ...], object]:
    """Every global of every loaded headwatch module (what it is bound to), and a copy of each dict or list among them."""
    state: dict[tuple[object, ...], object] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "headwatch" or name.startswith("headwatch.")):
            continue
        for key, value in vars(module).items():
            state[(name, key)] = id(value)
            if isinstance(value, (dict, list)):
                state[(name, key, id(value))] = repr(value)
    return state


def test_joining_a_lens_rebinds_no_global_and_writes_only_the_lenses_own_tables() -> None:
    """Adding the test lens takes its declaration and its computation, written in this module, and nothing else:
    joining rebinds no module global of headwatch and changes no table but the lenses' own (the declarations'
    `analysis.store.lenses.LENSES`, whose `TABLES` and `RECORDS` are its mappings, and the computations'
    `COMPUTATIONS`); the choices of the command line, the store format and the records follow from those."""
    import headwatch.analysis.store.lenses as lenses
    import headwatch.precompute.lenses.computations as computations

    owned = {id(LENSES.tables), id(LENSES.records), id(computations.COMPUTATIONS)}
    before = _module_state()
    with joined(KNormsComputation) as lens:
        during = _module_state()
        assert lens is K_NORMS_LENS and lenses.TABLES is LENSES.tables and lenses.RECORDS is LENSES.records
        assert TABLES["k_norms"] is K_NORMS and RECORDS["knorms"] is K_NORMS_RECORD
        assert computations.COMPUTATIONS["knorms"] is KNormsComputation and "knorms" in LENSES.choices
    changed = {key for key in before if during.get(key) != before[key]}
    assert changed, "the lens did not join"
    others = sorted(key[:2] for key in changed if len(key) != 3 or key[2] not in owned)
    assert not others, f"joining a lens rebound or changed {others} beside the lenses' own tables"
    assert _module_state() == before, "leaving did not undo the join"
