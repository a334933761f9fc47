"""``headwatch plan`` on a small local suite made in tmp_path: the checkpoints it lists, and the
bytes it reports against a count made here from the safetensors headers (read by hand: an 8-byte
little-endian length, then the JSON header with each tensor's data_offsets)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from headwatch.cli import main
from tests.integration.conftest import REPO, make_suite, run_cli

STEPS = [0, 1, 2, 4, 8]


def header_bytes(file: Path) -> dict[str, tuple[int, int]]:
    """Tensor name -> (bytes, number of dimensions), from the raw safetensors header."""
    with file.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    return {k: (v["data_offsets"][1] - v["data_offsets"][0], len(v["shape"])) for k, v in header.items() if k != "__metadata__"}


def plan_numbers(out: str) -> dict[str, int]:
    per = re.search(r"bytes to read per checkpoint: .*\(([\d,]+) B", out)
    total = re.search(r"bytes to read in all: .*\(([\d,]+) B of tensors(?:, ([\d,]+) B hashed)?\)", out)
    assert per is not None and total is not None, out
    return {
        "per": int(per.group(1).replace(",", "")),
        "tensors": int(total.group(1).replace(",", "")),
        "hashed": int((total.group(2) or "0").replace(",", "")),
    }


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    return make_suite(tmp_path_factory.mktemp("plan") / "tiny", STEPS)


def test_plan_lists_the_checkpoints_and_the_geometry(suite, capsys):
    assert main(["plan", str(suite), "--every", "2"]) == 0
    out = capsys.readouterr().out
    assert "checkpoints: 4 selected, steps 0 to 8" in out  # 0, 2, 4, 8
    assert "gpt_neox, 2 layers x 4 heads, d_model 64, d_head 16" in out
    for name in ("QK_SECONDS_1_4B", "OV_SECONDS_1_4B", "LAYERS_SECONDS_1_4B"):
        assert name in out


def test_plan_prices_the_composition_scores_by_head_pairs(suite, capsys):
    """2 layers x 4 heads, d_head 16, d_model 64: 16 cross-layer pairs against Pythia-1.4B's 70,656 at
    d_head 128, d_model 2048 (time); 16 pairs at COMPOSITION_BYTES_PER_PAIR (store)."""
    from headwatch.analysis.store.lenses.composition import COMPOSITION_LENS

    assert main(["plan", str(suite), "--lenses", "composition"]) == 0
    out = capsys.readouterr().out
    scale = (16 * 16**2 * 64) / (70_656 * 128**2 * 2048)
    line = next(line for line in out.splitlines() if "COMPOSITION_SECONDS_1_4B" in line)
    assert f"x {scale:.3g} (cross-layer head pairs" in line
    assert COMPOSITION_LENS.store_bytes is not None
    assert f"composition.parquet {COMPOSITION_LENS.store_bytes.bytes} B per pair" in out
    without = main(["plan", str(suite)]) == 0 and capsys.readouterr().out
    assert "COMPOSITION_SECONDS_1_4B" not in without


def test_plan_prices_the_head_similarity_by_all_pairs_of_heads(suite, capsys):
    """2 layers x 4 heads, d_head 16, d_model 64: 28 unordered pairs of heads against Pythia-1.4B's 73,536
    at d_head 128, d_model 2048 (time); 28 pairs at SIMILARITY_BYTES_PER_PAIR (store)."""
    from headwatch.analysis.store.lenses.similarity import SIMILARITY_LENS

    assert main(["plan", str(suite), "--lenses", "similarity"]) == 0
    out = capsys.readouterr().out
    scale = (28 * 16**2 * 64) / (73_536 * 128**2 * 2048)
    line = next(line for line in out.splitlines() if "SIMILARITY_SECONDS_1_4B" in line)
    assert f"x {scale:.3g} (pairs of heads" in line
    assert SIMILARITY_LENS.store_bytes is not None
    bytes_per_pair = SIMILARITY_LENS.store_bytes.bytes
    assert f"similarity.parquet and ultrametricity.parquet {bytes_per_pair} B per unordered pair" in out


def test_plan_prices_the_essential_dynamics_per_checkpoint(suite, capsys):
    """The essential-dynamics lens keeps a fixed sample per checkpoint, whatever the model's size: its bytes
    are counted once per checkpoint, and its seconds with the forward passes of its 8 sequences."""
    from headwatch.analysis.store.lenses.essential import ESSENTIAL_LENS

    assert main(["plan", str(suite), "--lenses", "essential", "--eval-length", "64"]) == 0
    out = capsys.readouterr().out
    assert ESSENTIAL_LENS.store_bytes is not None
    assert f"essential_outputs.parquet {ESSENTIAL_LENS.store_bytes.bytes} B per checkpoint" in out
    assert "ESSENTIAL_SECONDS_160M" in out and "(forward passes of 8 sequences of 64 tokens" in out
    assert main(["plan", str(suite), "--lenses", "attention", "--eval-length", "64", "--eval-sequences", "24"]) == 0
    assert "(forward passes of 32 sequences of 64 tokens" in capsys.readouterr().out  # 24 and the 8 of the probe


@pytest.mark.parametrize(
    "matrices, wanted",
    [
        ("qk", lambda name, ndim: name.endswith("attention.query_key_value.weight")),
        ("qk,ov", lambda name, ndim: re.search(r"attention\.(query_key_value|dense)\.weight$", name) is not None),
        ("qk,ov,layers", lambda name, ndim: re.match(r"gpt_neox\.layers\.\d+\.", name) is not None and ndim == 2),
    ],
)
def test_plan_bytes_match_the_safetensors_headers(suite, matrices, wanted, capsys):
    assert main(["plan", str(suite), "--matrices", matrices]) == 0
    got = plan_numbers(capsys.readouterr().out)
    per_checkpoint = []
    hashed = 0
    for step in STEPS:
        files = sorted((suite / f"step{step}").glob("*.safetensors"))
        sizes = {k: v for f in files for k, v in header_bytes(f).items()}
        per_checkpoint.append(sum(b for name, (b, ndim) in sizes.items() if wanted(name, ndim)))
        hashed += sum(f.stat().st_size for f in files)
    assert per_checkpoint[0] > 0
    assert got == {"per": per_checkpoint[0], "tensors": sum(per_checkpoint), "hashed": hashed}


def test_plan_against_an_existing_store(suite, tmp_path, capsys):
    store = tmp_path / "store"
    done = run_cli("--source", str(suite), "--out", str(store), "--revisions", "step0,step1", "--matrices", "qk")
    assert done.returncode == 0, done.stderr
    assert main(["plan", str(suite), "--out", str(store), "--lenses", "attention", "--eval-length", "64"]) == 0
    out = capsys.readouterr().out
    assert f"store {store}: 2 checkpoints, matrices qk" in out
    assert "to compute: 3 checkpoints (2 already in the store)" in out
    assert "adds ov rows" in out and "adds the layer matrices (layers.parquet)" in out
    assert "FORWARD_SECONDS_160M" in out
    assert "adds the forward lens (attention.parquet, layer_divergence.parquet, eval_loss.parquet)" in out and re.search(
        r"attention .* per checkpoint x 5 =", out
    )  # old ones too
    assert main(["info", str(store)]) == 0
    assert "checkpoints: 2, steps 0 to 1" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--matrices", "xx"], ["--every", "0"], ["--revisions", "nostep"]])
def test_plan_bad_options_exit_2(suite, argv, capsys):
    assert main(["plan", str(suite), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]


def test_plan_missing_source_exits_2(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nothing here")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_the_docs_table_of_figures_is_the_registry_s() -> None:
    """docs/cli.md "Figures `plan` uses" lists every recorded seconds figure (the per-head matrices' and each
    lens's) with its value, and every store-size figure's bytes, as the registry has them."""
    from headwatch.analysis.store.lenses import LENSES
    from headwatch.precompute import costs

    text = (REPO / "docs" / "cli.md").read_text()
    table = text.split("## Figures `plan` uses", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[2].strip().strip("`"): line.split("|")[3].strip() for line in table.splitlines() if "_SECONDS" in line
    }
    figures = [costs.QK_SECONDS, costs.OV_SECONDS] + [lens.seconds for lens in LENSES if lens.seconds]
    assert rows == {figure.name: str(figure.seconds) for figure in figures}
    sizes = [costs.HEADS_BYTES] + [lens.store_bytes for lens in LENSES if lens.store_bytes]
    for size in sizes:
        assert f"{size.bytes} B per" in table, size.files


def _llc_line(out: str) -> tuple[float, float, int, str]:
    """The rLLC's line of a plan: its seconds per checkpoint (as printed, 0.1 s), its scale factor (3 digits), its
    count of checkpoints and the whole line."""
    line = next(line for line in out.splitlines() if line.strip().startswith("llc "))
    m = re.search(r"llc \S+\s+([\d.]+) (s|min|h) per checkpoint x (\d+)", line)
    f = re.search(r"x ([\d.e+-]+) \(the rLLC's multiply-adds", line)
    assert m is not None and f is not None, line
    seconds = float(m.group(1)) * {"s": 1, "min": 60, "h": 3600}[m.group(2)]
    return seconds, float(f.group(1)), int(m.group(3)), line


def test_plan_prices_the_refined_llc_at_its_steps_its_sampler_and_its_sequence_length(suite, capsys):
    """The rLLC is priced per checkpoint from what the run would sample (`precompute.costs.llc_work`: chains x
    (burn-in + draws) steps of batch-size sequences of --eval-length tokens) and counted at --llc-steps."""
    from headwatch.analysis.store.lenses.llc import LLC_LENS

    assert LLC_LENS.seconds is not None
    assert main(["plan", str(suite), "--lenses", "llc", "--llc-steps", "all", "--eval-length", "16"]) == 0
    seconds, factor, count, line = _llc_line(capsys.readouterr().out)
    assert count == len(STEPS) and "(--llc-steps all, " in line and "576 SGLD steps of 16 tokens" in line
    assert seconds == pytest.approx(LLC_LENS.seconds.seconds * factor, abs=0.05)
    # twice the steps per chain: twice the work; two checkpoints named
    argv = ["plan", str(suite), "--lenses", "llc", "--llc-steps", "0,8", "--eval-length", "16", "--llc-draws", "240"]
    assert main(argv) == 0
    _, doubled, count, line = _llc_line(capsys.readouterr().out)
    assert count == 2 and "(--llc-steps 0,8, " in line and "1152 SGLD steps of 16 tokens" in line
    assert doubled / factor == pytest.approx(2, rel=0.01)
    # four times the tokens: more than four times the work (attention's products grow with the square of the
    # length); no --llc-steps: every checkpoint of a run of five (about 8, log-spaced)
    assert main(["plan", str(suite), "--lenses", "llc", "--eval-length", "64"]) == 0
    _, longer, count, line = _llc_line(capsys.readouterr().out)
    assert count == len(STEPS) and "about 8, log-spaced" in line and "576 SGLD steps of 64 tokens" in line
    assert longer > 4 * factor


def test_plan_counts_the_refined_llc_a_store_lacks_as_the_run_chooses_them(tmp_path, capsys):
    """Against a store with estimates at steps 0 and 4 of a run of four: the run estimates the --llc-steps among
    every checkpoint of the store that lack estimates, and refuses other sampler settings; plan says the same."""
    from tests.integration.test_forward_lens import byte_run

    run = byte_run(tmp_path, [0, 1, 2, 4], hidden=32, layers=2, heads=2)
    store = tmp_path / "store"
    llc = ["--eval-sequences", "4", "--eval-length", "32", "--lenses", "llc", "--llc-draws", "2", "--llc-chains", "2"]
    llc += ["--llc-burnin", "0", "--llc-sequences", "4"]
    done = run_cli("--source", str(run), "--out", str(store), *llc, "--llc-steps", "0,4")
    assert done.returncode == 0, done.stderr
    for steps, want in (("all", 2), ("2", 1), ("0,4", 0)):
        assert main(["plan", str(run), "--out", str(store), *llc, "--llc-steps", steps]) == 0
        _, _, count, line = _llc_line(capsys.readouterr().out)
        assert count == want, (steps, line)
        assert line.strip().startswith("llc text")  # its run.json does not say how it was trained: held-out text
    # each distribution priced on its own line, counted at the checkpoints lacking estimates under it
    assert main(["plan", str(run), "--out", str(store), *llc, "--llc-steps", "all", "--llc-data", "text,repeats"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("llc ")]
    assert [line.split()[1] for line in lines] == ["text", "repeats"]
    assert [int(re.search(r"per checkpoint x (\d+)", line).group(1)) for line in lines] == [2, 4]
    # only step 4 selected: "all" is every state of the store after the pass (the run's choice), less 0 and 4
    assert main(["plan", str(run), "--out", str(store), "--revisions", "step4", *llc, "--llc-steps", "all"]) == 0
    assert _llc_line(capsys.readouterr().out)[2] == 2
    for other, says in ((["--llc-chains", "3"], "chains 2 (now 3)"), (["--llc-steps", "1,9"], "not checkpoints")):
        assert main(["plan", str(run), "--out", str(store), *llc, *other]) == 2
        assert says in capsys.readouterr().err
    argv = ["--source", str(run), "--out", str(store), *llc, "--llc-chains", "3"]  # the run refuses the same
    refused = run_cli(*argv)
    assert refused.returncode == 2 and "chains 2 (now 3)" in refused.stderr


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--llc-chains", "8"], "add --lenses llc"),
        (["--lenses", "llc", "--eval-length", "64", "--llc-sequences", "40"], "exceeds the 32 evaluation sequences"),
        (["--lenses", "llc", "--eval-length", "64", "--llc-steps", "3"], "not checkpoints"),
        (["--lenses", "llc", "--eval-length", "64", "--llc-chains", "1"], "--llc-chains 1"),
        (["--lenses", "llc"], "--eval-length 256 is longer than the model's context (64 positions)"),
    ],
)
def test_plan_refuses_llc_options_the_run_would_refuse(suite, argv, says, capsys):
    assert main(["plan", str(suite), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_the_refined_llc_pages_plan_command_runs_as_written(tmp_path, capsys, monkeypatch):
    """The Refined LLC page of a store without refined LLCs gives the command that prices adding them: run as
    written in the folder the job ran in (the store's recorded source, its path from there and its evaluation
    length), it prices the rLLC at the store's checkpoints."""
    import shlex

    from headwatch.analysis.store import open_store
    from headwatch.dashboard.views.llc.data import missing_note
    from tests.integration.test_forward_lens import byte_run

    run = byte_run(tmp_path, [0, 1, 2, 4, 8])
    out = tmp_path / "store"
    done = run_cli("--source", str(run), "--out", str(out), "--lenses", "attention", "--eval-length", "32")
    assert done.returncode == 0, done.stderr
    store = open_store(out)
    note = missing_note(source=store.meta.source[0], store="store", eval_length=store.meta.forward.seq_len, shipped=False)
    command = re.search(r"`(headwatch plan [^`]+)`", note)
    assert command is not None, note
    argv = shlex.split(command.group(1))
    assert argv[:3] == ["headwatch", "plan", "run"] and "--out store" in command.group(1)  # the run folder beside it
    monkeypatch.chdir(tmp_path)
    assert main(argv[1:]) == 0
    seconds, _, count, _ = _llc_line(capsys.readouterr().out)
    assert count == 5 and seconds > 0  # every checkpoint of five: the default steps, "about 8"


def test_plan_says_which_olmo2_training_run_it_reads(tmp_path, capsys):
    """Folders named like OLMo 2's branches (an unprefixed early one, stage 1, two stage-2 ingredients whose steps
    restart): the plan reads the stage-1 run and names the others; --revisions picks an ingredient."""
    folder = make_suite(tmp_path / "olmo2", [0, 1, 2, 3])
    names = ["step0-tokens0B", "stage1-step10-tokens1B", "stage2-ingredient1-step0-tokens0B", "stage2-ingredient2-step0-tokens0B"]
    for step, name in zip([0, 1, 2, 3], names, strict=True):
        (folder / f"step{step}").rename(folder / name)
    assert main(["plan", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "checkpoints: 2 selected, steps 0 to 10" in out
    assert "training run read: stage1; the source also has stage2-ingredient1 (1 checkpoints), stage2-ingredient2" in out
    assert main(["plan", str(folder), "--revisions", "stage2-ingredient2-step0-tokens0B"]) == 0
    out = capsys.readouterr().out
    assert "checkpoints: 1 selected, steps 0 to 0" in out and "training run read: stage2-ingredient2;" in out
