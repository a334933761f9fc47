"""``headwatch llc-calibrate`` on a small byte-level GPT-NeoX run made here.

The command's tables are checked against each other and against the rule's arithmetic redone
here: each setting's estimate is n beta times the mean rise of its chains' stored traces over the
loss at w*, a step size large enough to blow up the chains is reported as diverged (not as a
failure of the sweep), and a bad head or step is one error line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.integration.conftest import REPO
from tests.integration.test_forward_lens import byte_run

SMALL = ("--chains", "2", "--draws", "8", "--sequences", "4", "--batch-size", "2", "--eval-sequences", "4", "--eval-length", "32")


def calibrate(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "headwatch", "llc-calibrate", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return byte_run(tmp_path_factory.mktemp("calibrate"), [0, 4], hidden=32, layers=2, heads=2)


def test_the_sweep_writes_traces_figure_and_flags_by_the_rule(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "cal"
    done = calibrate(
        str(run), "--step", "4", "--head", "1.0", "--out", str(out), "--lr", "1e-4,1e-3,1e3", "--nbeta", "10,30", *SMALL
    )
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out / "calibration.csv")
    assert len(table) == 3 * 2 and set(table["lr"]) == {1e-4, 1e-3, 1e3} and set(table["n_beta"]) == {10.0, 30.0}
    traces = pd.read_csv(out / "traces.csv")
    assert len(traces) == 6 * 2 * 8
    for _, row in table[table["lr"] < 1].iterrows():
        mine = traces[(traces["lr"] == row["lr"]) & (traces["n_beta"] == row["n_beta"])]
        per_chain = [row["n_beta"] * (g["loss"].mean() - row["init_loss"]) for _, g in mine.groupby("chain")]
        assert row["llc"] == pytest.approx(np.mean(per_chain), rel=1e-5)
        assert row["llc_std"] == pytest.approx(np.std(per_chain), rel=1e-4, abs=1e-9)
        assert row["flag"] in ("converged", "still rising", "still falling", "negative")
        assert (row["flag"] == "negative") == (row["llc"] < 0)  # issue 62: a negative estimate is never converged
    assert set(table[table["lr"] == 1e3]["flag"]) == {"diverged"}
    assert (out / "calibration.png").stat().st_size > 10_000 and (out / "calibration.svg").read_text().startswith("<?xml")
    assert "recommended: --llc-lr" in done.stdout or "no setting converged with a positive estimate" in done.stdout


def test_bad_heads_and_steps_are_one_error_line(run: Path, tmp_path: Path) -> None:
    head = calibrate(str(run), "--step", "4", "--head", "5.0", "--out", str(tmp_path / "a"), *SMALL)
    assert head.returncode == 2 and "--head 5.0: the model has 2 layers x 2 heads" in head.stderr
    step = calibrate(str(run), "--step", "3", "--out", str(tmp_path / "b"), *SMALL)
    assert step.returncode == 2 and "no checkpoint at step 3 (its steps: 0, 4)" in step.stderr
    assert "Traceback" not in step.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("flag, value", [("--eval-sequences", "0"), ("--eval-length", "3"), ("--eval-sequences", "x")])
def test_both_commands_refuse_the_same_evaluation_set_sizes(flag: str, value: str, capsys) -> None:
    """The evaluation-set options are one definition (`precompute.evalset.add_arguments`): precompute and
    llc-calibrate refuse 0 sequences and fewer than 4 tokens alike (llc-calibrate once accepted 0), and take the
    same defaults."""
    from headwatch.precompute.__main__ import parse_args as precompute_args
    from headwatch.precompute.llc_calibrate import parse_args as calibrate_args

    commands = {
        "precompute": (precompute_args, ["--source", "s", "--out", "o"]),
        "llc-calibrate": (calibrate_args, ["s", "--step", "0", "--out", "o"]),
    }
    for parse, argv in commands.values():
        with pytest.raises(SystemExit) as exit_:
            parse([*argv, flag, value])
        assert exit_.value.code == 2
        assert f"argument {flag}" in capsys.readouterr().err
    defaults = [(a.eval_text, a.eval_sequences, a.eval_length) for a in (p(argv) for p, argv in commands.values())]
    assert defaults == [(None, 32, 256)] * 2


def test_llc_data_samples_on_the_named_distribution_as_the_lens_does(run: Path, tmp_path: Path) -> None:
    """``--llc-data repeats``: the sweep's loss at w* is the lens's under the same distribution and sampler settings
    (llc.parquet ``init_loss`` of the same head and step, written by ``python -m headwatch.precompute``), and not the
    one on text; more than one distribution is one error line."""
    import pyarrow.parquet as pq

    from tests.integration.conftest import run_cli

    cal = {}
    for data in ("repeats", "text"):
        out = tmp_path / data
        done = calibrate(
            str(run),
            "--step",
            "4",
            "--head",
            "1.0",
            "--out",
            str(out),
            "--lr",
            "1e-3",
            "--nbeta",
            "30",
            "--llc-data",
            data,
            *SMALL,
        )
        assert done.returncode == 0, done.stderr
        cal[data] = float(pd.read_csv(out / "calibration.csv")["init_loss"].iloc[0])
    store = tmp_path / "store"
    llc_cli = ("--llc-chains", "2", "--llc-draws", "8", "--llc-sequences", "4", "--llc-batch-size", "2", "--llc-burnin", "0")
    sizes = ("--eval-sequences", "4", "--eval-length", "32")
    done = run_cli(
        "--source",
        str(run),
        "--out",
        str(store),
        "--lenses",
        "llc",
        "--llc-steps",
        "4",
        "--llc-data",
        "repeats,text",
        *llc_cli,
        *sizes,
    )
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(store / "llc.parquet").to_pandas()
    for data in ("repeats", "text"):
        lens = rows[(rows["step"] == 4) & (rows["data"] == data) & (rows["layer"] == 1) & (rows["head"] == 0)]
        assert float(lens["init_loss"].iloc[0]) == pytest.approx(cal[data], rel=1e-5)
    assert cal["repeats"] != pytest.approx(cal["text"], rel=1e-3)
    two = calibrate(str(run), "--step", "4", "--out", str(tmp_path / "two"), "--llc-data", "text,repeats", *SMALL)
    assert two.returncode == 2 and "llc-calibrate samples on one distribution" in two.stderr
    assert "Traceback" not in two.stderr
