"""The refined-LLC computation: the SGLD estimate of each head's local learning coefficient, devinterp's estimator.

For a checkpoint w* and the per-token loss L_n on the sampler's sequences, devinterp estimates

    llc = n beta (E[L_n(w)] - L_n(w*))

the expectation over SGLD draws from the localized tempered posterior
``exp(-n beta L_n(w) - gamma/2 ||w - w*||^2)`` (docs/design-notes.md section 9). The weight-refined LLC
of a head moves only that head's parameters (devinterp's
``weight_restrictions.create_param_masks(model, "l{layer}h{head}")``: for GPT-NeoX the head's
interleaved Q, K, V rows of ``query_key_value`` with their biases, and its d_head input columns of
``attention.dense``); every other parameter stays at w*. The whole-model LLC moves every parameter.

Per chain, ``llc_c = n beta (mean_t L_t - L(w*))`` with ``L_t`` the loss of SGLD step t on its batch
(devinterp's ``loss_trace``), the steps after the burn-in, and ``L(w*)`` devinterp's ``init_loss``
over one pass of the sequences; the row keeps the mean and standard deviation over chains. With
burn-in 0 this is devinterp's own ``llc_per_chain``. Every chain sees the same batches, in the same
order, so a number of draws that is a multiple of ``sequences / batch_size`` weighs every batch
equally in both terms.

The loss L_n is taken on each distribution ``--llc-data`` names (`precompute.llc_data`: the run's training
distribution by default, where the estimate is the weight-refined LLC; held-out text, the probe's repeats, code or a
user's file, where it is data-refined); each distribution's rows carry its name (``data``) and meta.json ``llc.data``
its sequences' sha256, so one store holds several side by side and a rerun under another adds its rows.

`SamplerSettings` holds every setting; they are recorded in ``meta.json`` ``llc`` and must be the
same for every checkpoint of a store (`precompute.job.run` refuses another set). Two implementations sample
it (``--llc-implementation``, meta.json ``llc.implementation``, one per store): ``batched``, the default
(`precompute.lenses.llc_sampler`: every head of a layer and its chains in one computation, the layers
below computed once, nothing written to disk; its answers against devinterp's in docs/precompute.md),
and ``devinterp`` (`estimate_llc`, one ``llc`` call per estimate, the reference the tests compare with),
whose samples (per-token losses, a zarr folder per estimate) go to a scratch folder removed after each.

`LlcComputation.fill` computes one checkpoint at a time by `checkpoint_llc_of` where the run's executor runs
checkpoints (`precompute.job.context.TaskExecutor.each`): in the driver under ``--executor local``, one Ray task
per checkpoint under ``--executor ray``; the driver alone commits, one checkpoint at a time in step order.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from tqdm.auto import tqdm

from headwatch.analysis.errors import CheckpointError, StoreError, UnknownArchitectureError
from headwatch.analysis.llc.diagnostics import chain_diagnostics
from headwatch.analysis.store import Meta
from headwatch.analysis.store.lenses.llc import (
    LLC,
    LLC_CHAINS,
    LLC_DATA_COLUMN,
    LLC_LENS,
    LLC_MODEL,
    STORED_BEFORE_DATA,
    LlcImplementation,
    LlcOptions,
    SamplerSettings,
    data_records,
)
from headwatch.families.forward import Architecture, Params, architecture, check_config, parameters
from headwatch.families.registry import FAMILIES, language_config
from headwatch.precompute.evalset import EvalSet
from headwatch.precompute.job.context import CHECKPOINT_ERRORS, BaseComputation, ComputationSetup, RunContext, lens_device
from headwatch.precompute.lenses.attention import load_model
from headwatch.precompute.lenses.llc_sampler import Traces, checkpoint_traces
from headwatch.precompute.llc_data import LlcData, resolve_llc_data, tokens_sha256
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource

log = logging.getLogger("precompute")

# The model types whose head mask is devinterp's and is checked by tests/integration/test_llc.py (their adapters'
# `devinterp_head_mask`).
HEAD_MASK_FAMILIES = tuple(t for family in FAMILIES if family.devinterp_head_mask for t in family.model_types)

# meta.json llc.noise: where each implementation's SGLD noise comes from (the estimates of one store share one).
IMPLEMENTATION_NOISE = {
    "batched": "per (layer, head, chain) a torch.Generator seeded by precompute.lenses.llc_sampler.lane_seed "
    "(numpy SeedSequence([seed, layer + 1, head + 1, chain])), one standard normal per moved parameter per step",
    "devinterp": "devinterp's: per chain the global generator seeded seed + chain",
}

# Checkpoints estimated when --llc-steps is not given: this many (fewer if the run has fewer), log-spaced in step.
DEFAULT_LLC_CHECKPOINTS = 8

# The folder of devinterp's samples inside a scratch folder (`LlcJob.scratch`).
SAMPLES_FOLDER = "llc-samples"


@dataclass(frozen=True)
class LlcJob:
    """What the computation needs besides the checkpoint (the same for every checkpoint of a run).

    Attributes:
        data: the distributions the SGLD loss is taken on, each with its ``(sequences, T)`` int64 sequences
            (`precompute.llc_data`).
        sampler: the SGLD settings.
        scratch: where devinterp's samples are written (one folder per estimate, removed after it).
        device: ``cpu`` or ``cuda``.
        implementation: ``batched`` (`precompute.lenses.llc_sampler`) or ``devinterp`` (`estimate_llc`).
    """

    data: tuple[LlcData, ...]
    sampler: SamplerSettings
    scratch: Path
    device: str = "cpu"
    implementation: LlcImplementation = "batched"


def sampler_sequences(eval_set: EvalSet, sampler: SamplerSettings) -> np.ndarray:
    """The ``sampler.sequences`` of the store's N evaluation sequences the sampler uses, evenly spaced.

    Raises:
        ValueError: more sequences asked for than the evaluation set has.
    """
    n = len(eval_set.tokens)
    if sampler.sequences > n:
        raise ValueError(
            f"--llc-sequences {sampler.sequences} exceeds the {n} evaluation sequences; lower it or raise --eval-sequences"
        )
    pick = np.arange(sampler.sequences) * n // sampler.sequences
    return np.ascontiguousarray(eval_set.tokens[pick])


def check_family(config: dict[str, Any]) -> None:
    """Refuse, before anything is written, a family whose head mask is not known here.

    Raises:
        UnknownArchitectureError: ``model_type`` is not in `HEAD_MASK_FAMILIES`.
    """
    model_type = config.get("model_type")
    if model_type not in HEAD_MASK_FAMILIES:
        raise UnknownArchitectureError(
            f"--lenses llc: no per-head weight mask for model_type {model_type!r} (known: "
            f"{', '.join(HEAD_MASK_FAMILIES)}); run without llc, or check devinterp's mask for the family and declare it "
            "in its adapter (headwatch/families/)"
        )


def head_masks(model: torch.nn.Module, layer: int, head: int) -> dict[str, torch.Tensor | None]:
    """devinterp's parameter masks for one head (``create_param_masks(model, "l{layer}h{head}")``).

    Raises:
        UnknownArchitectureError: the family is not in `HEAD_MASK_FAMILIES`.
    """
    from devinterp.slt.weight_restrictions import create_param_masks

    check_family({"model_type": getattr(model.config, "model_type", None)})
    return create_param_masks(model, f"l{layer}h{head}")


def head_parameter_count(arch: Architecture, params: Params, layer: int, head: int) -> int:
    """How many parameters the batched sampler moves for one head (its Q, K, V rows and biases, its O columns)."""
    return sum(w.numel() for w in arch.head(params, layer, head).values())


def masked_parameters(model: torch.nn.Module, masks: dict[str, torch.Tensor | None] | None) -> int:
    """How many parameters ``masks`` lets the sampler move (all of them for None)."""
    params = dict(model.named_parameters())
    if masks is None:
        return sum(p.numel() for p in params.values())
    return sum(params[n].numel() if m is None else int(m.sum()) for n, m in masks.items())


@dataclass(frozen=True)
class Estimate:
    """One LLC estimate.

    Attributes:
        llc: mean over chains of the per-chain estimates.
        llc_std: their standard deviation over chains (population, as devinterp's ``llc_std``).
        init_loss: the loss at w* (nats/token).
        per_chain: ``(chains,)`` the per-chain estimates.
        trace: ``(chains, burnin + draws)`` devinterp's per-step mean loss.
        devinterp_llc: devinterp's own ``llc_mean`` (every step averaged, burn-in included).
    """

    llc: float
    llc_std: float
    init_loss: float
    per_chain: np.ndarray
    trace: np.ndarray
    devinterp_llc: float


@contextlib.contextmanager
def _quiet_chains() -> Iterator[None]:
    """devinterp draws a progress bar per chain and runs a full garbage collection before and after
    each (0.3 s each in a process that has imported transformers and datasets, 12% of a small
    estimate); the computation draws its own bar and holds one model, so both are switched off here."""
    from devinterp.slt import sampler
    from tqdm.auto import trange

    original = sampler.trange, sampler._gc_and_empty_cache
    sampler.trange = functools.partial(trange, disable=True)
    sampler._gc_and_empty_cache = lambda: None
    try:
        yield
    finally:
        sampler.trange, sampler._gc_and_empty_cache = original


def estimate_llc(
    model: torch.nn.Module,
    tokens: np.ndarray,
    masks: dict[str, torch.Tensor | None] | None,
    sampler: SamplerSettings,
    *,
    scratch: Path,
    device: str = "cpu",
) -> Estimate:
    """devinterp's LLC estimate at the model's weights, moving only the parameters ``masks`` selects.

    Args:
        model: the checkpoint (left as it is: devinterp samples a copy per chain).
        tokens: ``(sequences, T)`` int64 token ids.
        masks: devinterp ``ParamMasks`` (None: every parameter).
        sampler: the SGLD settings.
        scratch: a folder for devinterp's samples (a sub-folder is made and removed).
        device: where to sample.

    Raises:
        CheckpointError: a chain diverged (non-finite loss) or the estimate is not finite.
    """
    from datasets import Dataset
    from devinterp.slt.llc import llc

    dataset = Dataset.from_dict({"input_ids": np.asarray(tokens, dtype=np.int64)}).with_format("torch")
    scratch.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="llc-", dir=scratch))
    try:
        with warnings.catch_warnings(record=True) as caught, _quiet_chains():
            warnings.simplefilter("always")
            result = llc(
                model,
                dataset,
                {},
                param_masks=masks,
                **sampler.devinterp_arguments(),
                device=device,
                output_path=folder / "samples.zarr",
            ).load()
        failed = [str(w.message) for w in caught if "Chain failed" in str(w.message)]
        trace = np.asarray(result.loss_trace.values, dtype=np.float64)  # (chains, burnin + draws)
        init_loss = float(result.init_loss)
        devinterp_llc = float(result.llc_mean)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if failed:
        raise CheckpointError(f"SGLD diverged ({failed[0]}); lower --llc-lr or raise --llc-localization")
    per_chain = sampler.n_beta * (trace[:, sampler.burnin :].mean(axis=1) - init_loss)  # (chains,)
    if not np.all(np.isfinite(per_chain)):
        raise CheckpointError("the LLC estimate is not finite; lower --llc-lr or raise --llc-localization")
    return Estimate(float(per_chain.mean()), float(per_chain.std()), init_loss, per_chain, trace, devinterp_llc)


def estimates_from_traces(traces: Traces, sampler: SamplerSettings) -> list[tuple[int, int, Estimate]]:
    """The (layer, head, estimate) of every estimate in the batched sampler's ``traces`` (the whole
    model's with layer = head = -1), by the estimator of `estimate_llc`: per chain
    ``n_beta (mean over the steps after burn-in - init_loss)``, their mean and population std."""
    by_target: dict[tuple[int, int], list[int]] = {}
    for i, lane in enumerate(traces.lanes):
        by_target.setdefault((lane.layer, lane.head), []).append(i)
    out = []
    for (layer, head), rows in by_target.items():
        rows = sorted(rows, key=lambda i: traces.lanes[i].chain)
        trace = traces.trace[rows]  # (chains, burnin + draws)
        per_chain = sampler.n_beta * (trace[:, sampler.burnin :].mean(axis=1) - traces.init_loss)
        every_step = sampler.n_beta * (trace.mean() - traces.init_loss)
        est = Estimate(float(per_chain.mean()), float(per_chain.std()), traces.init_loss, per_chain, trace, every_step)
        out.append((layer, head, est))
    return out


def checkpoint_llc(
    folder: Path,
    step: int,
    job: LlcJob,
    *,
    n_layers: int,
    n_heads: int,
    data: Sequence[LlcData] | None = None,
    on_estimate: Callable[[], None] | None = None,
) -> tuple[dict[str, pa.Table], dict[str, float]]:
    """Every head's refined LLC and the whole model's at the checkpoint in ``folder``, under each distribution.

    Args:
        folder: a ``save_pretrained`` folder.
        step: its training step.
        job: the computation's distributions and settings.
        n_layers, n_heads: the run's model.
        data: the distributions to estimate under (default: all of ``job.data``).
        on_estimate: called after each estimate (the progress bar).

    Returns:
        Its ``llc.parquet`` and ``llc_chains.parquet`` rows (sorted; the whole-model row has layer = head = -1), and
        the seconds each distribution took, by name.

    Raises:
        CheckpointError: it cannot be loaded, or an estimate diverged.
        UnknownArchitectureError: no head mask for its family.
    """
    started = time.monotonic()
    model = load_model(folder, device=job.device, attn_implementation="sdpa")
    tables: list[dict[str, pa.Table]] = []
    seconds: dict[str, float] = {}
    try:
        for i, dist in enumerate(job.data if data is None else data):
            if i:
                started = time.monotonic()
            rows = checkpoint_estimates(model, dist.tokens, job, n_layers=n_layers, n_heads=n_heads, on_estimate=on_estimate)
            tables.append(llc_rows(step, rows, burnin=job.sampler.burnin, batches=job.sampler.batches, data=dist.name))
            seconds[dist.name] = time.monotonic() - started
    finally:
        del model
    merged = {spec.name: spec.sorted(pa.concat_tables([t[spec.name] for t in tables])) for spec in (LLC, LLC_CHAINS)}
    return merged, seconds


def checkpoint_llc_of(
    src: CheckpointSource,
    ref: CheckpointRef,
    data: Sequence[LlcData],
    *,
    scratch: Path,
    progress: Callable[[], None] | None,
    job: LlcJob,
    n_layers: int,
    n_heads: int,
) -> tuple[dict[str, pa.Table], dict[str, float]]:
    """`checkpoint_llc` of the checkpoint ``ref`` of ``src`` under ``data``: one checkpoint's work of
    `LlcComputation.fill`, wherever the run's executor runs it (`precompute.job.context.TaskExecutor.each`), with
    devinterp's samples under ``scratch`` (where it runs) and ``progress`` called after each estimate.

    Raises:
        CheckpointError, CheckpointNotFoundError: the checkpoint cannot be read or loaded, or an estimate diverged.
        UnknownArchitectureError: no head mask for its family.
    """
    job = replace(job, scratch=scratch / SAMPLES_FOLDER)
    with src.checkpoint_folder(ref) as folder:
        return checkpoint_llc(folder, ref.step, job, n_layers=n_layers, n_heads=n_heads, data=data, on_estimate=progress)


def checkpoint_estimates(
    model: torch.nn.Module,
    tokens: np.ndarray,
    job: LlcJob,
    *,
    n_layers: int,
    n_heads: int,
    on_estimate: Callable[[], None] | None = None,
) -> list[tuple[int, int, Estimate, int]]:
    """Every head's estimate and the whole model's at ``model``'s weights with the SGLD loss taken on ``tokens``
    (``(sequences, T)`` int64), by ``job.implementation``: (layer, head, estimate, parameters moved) tuples."""
    rows: list[tuple[int, int, Estimate, int]] = []
    if job.implementation == "batched":

        def done(count: int) -> None:
            for _ in range(count if on_estimate is not None else 0):
                on_estimate()  # type: ignore[misc]  # not None here

        traces = checkpoint_traces(model, tokens, job.sampler, device=job.device, on_layer=done)
        arch, params = architecture(model), parameters(model)
        for layer, head, est in estimates_from_traces(traces, job.sampler):
            # the parameters the lane moved: as many as devinterp's head mask lets move (tests/integration/
            # test_llc_sampler.py), counted without devinterp, which the batched path does not need
            moved = masked_parameters(model, None) if layer == LLC_MODEL else head_parameter_count(arch, params, layer, head)
            rows.append((layer, head, est, moved))
    else:
        targets = [(LLC_MODEL, LLC_MODEL)] + [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
        for layer, head in targets:
            masks = None if layer == LLC_MODEL else head_masks(model, layer, head)
            est = estimate_llc(model, tokens, masks, job.sampler, scratch=job.scratch, device=job.device)
            rows.append((layer, head, est, masked_parameters(model, masks)))
            if on_estimate is not None:
                on_estimate()
    return rows


def llc_rows(
    step: int, rows: list[tuple[int, int, Estimate, int]], *, burnin: int = 0, batches: int = 1, data: str = STORED_BEFORE_DATA
) -> dict[str, pa.Table]:
    """One checkpoint's ``llc.parquet`` and ``llc_chains.parquet`` rows under the distribution ``data``, by table
    name, from its (layer, head, estimate, parameters) tuples; ``burnin``: the sampler's, left out of the
    diagnostics; ``batches``: its steps per pass over the sequences, the unit the diagnostics' halves are made of."""
    table = pa.table(
        {
            "step": pa.array([step] * len(rows), pa.int64()),
            "data": pa.array([data] * len(rows), pa.string()),
            "layer": pa.array([r[0] for r in rows], pa.int32()),
            "head": pa.array([r[1] for r in rows], pa.int32()),
            "llc": pa.array([r[2].llc for r in rows], pa.float64()),
            "llc_std": pa.array([r[2].llc_std for r in rows], pa.float64()),
            "init_loss": pa.array([r[2].init_loss for r in rows], pa.float64()),
            "params": pa.array([r[3] for r in rows], pa.int64()),
        },
        schema=LLC.schema,
    )
    chains: dict[str, list] = {name: [] for name in LLC_CHAINS.schema.names}
    for layer, head, est, _ in rows:
        diag = chain_diagnostics(est.trace, burnin, batches=batches)
        for c in range(len(est.per_chain)):
            for name, value in (
                ("step", step),
                ("data", data),
                ("layer", layer),
                ("head", head),
                ("chain", c),
                ("llc", float(est.per_chain[c])),
                ("first_half", float(diag.first_half[c])),
                ("second_half", float(diag.second_half[c])),
                ("slope", float(diag.slope[c])),
                ("half_se", float(diag.half_se[c])),
                ("trace", est.trace[c].astype(np.float32)),
            ):
                chains[name].append(value)
    chain_table = pa.table(
        {name: pa.array(values, LLC_CHAINS.schema.field(name).type) for name, values in chains.items()}, schema=LLC_CHAINS.schema
    )
    return {LLC.name: LLC.sorted(table), LLC_CHAINS.name: LLC_CHAINS.sorted(chain_table)}


def default_llc_steps(steps: list[int], count: int = DEFAULT_LLC_CHECKPOINTS) -> list[int]:
    """About ``count`` of ``steps``, evenly spaced in log(step), the first and the last always included.

    Step 0 (when present) is taken as is; the other ``count - 1`` take, for each point of an even
    grid in log(step) between the smallest positive step and the last, the nearest step not yet
    taken, so a schedule dense at the start (Pythia's 1, 2, 4, ..., 512, 1000, 2000, ...) still
    gives ``count`` distinct steps.
    """
    steps = sorted(set(int(s) for s in steps))
    if len(steps) <= count:
        return steps
    chosen = [0] if steps[0] == 0 else []
    positive = [s for s in steps if s > 0]
    x = np.log(np.asarray(positive, dtype=np.float64))
    for target in np.linspace(x[0], x[-1], count - len(chosen)):
        order = np.argsort(np.abs(x - target), kind="stable")
        chosen.append(next(positive[i] for i in order if positive[i] not in chosen))
    return sorted(chosen)


def settings_differences(stored: dict[str, Any], sampler: SamplerSettings, implementation: str) -> list[str]:
    """How a store's meta.json ``llc`` record differs from ``sampler`` and ``implementation``, in words (empty: the
    same); what `LlcComputation.check_store` refuses, and ``headwatch plan`` with it."""
    was, now = dict(stored.get("sampler") or {}), sampler.as_meta()
    diffs = [f"{k} {was.get(k)!r} (now {now.get(k)!r})" for k in now if was.get(k) != now.get(k)]
    was_impl = stored.get("implementation", "devinterp")  # stores made before the batched sampler
    if was_impl != implementation:
        diffs.append(f"implementation {was_impl!r} (now {implementation!r}; pass --llc-implementation {was_impl})")
    return diffs


def parse_llc_steps(value: str | None, available: list[int]) -> list[int]:
    """``--llc-steps`` (``all``, or comma-separated steps; None: `default_llc_steps`) against the store's steps.

    Raises:
        ValueError: a step that is not a number, or not a checkpoint with statistics.
    """
    if value is None:
        return default_llc_steps(available)
    if value.strip() == "all":
        return sorted(available)
    try:
        steps = sorted({int(s) for s in value.split(",") if s.strip()})
    except ValueError:
        raise ValueError(f"--llc-steps {value!r}: give 'all' or comma-separated step numbers") from None
    missing = [s for s in steps if s not in set(available)]
    if missing or not steps:
        raise ValueError(
            f"--llc-steps {value!r}: steps {missing or 'none'} are not checkpoints with statistics "
            f"in this run ({', '.join(map(str, sorted(available)[:12]))}{', ...' if len(available) > 12 else ''})"
        )
    return steps


def devinterp_version() -> str:
    try:
        return metadata.version("devinterp")
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def sampler_record(implementation: str) -> dict[str, str]:
    """meta.json ``llc``'s fields on who sampled: the implementation, its noise and, only when devinterp sampled,
    devinterp's version (the batched sampler runs without devinterp installed, so its version says nothing of the
    estimates)."""
    record = {"implementation": implementation, "noise": IMPLEMENTATION_NOISE[implementation]}
    if implementation == "devinterp":
        record["devinterp"] = devinterp_version()
    return record


class LlcComputation(BaseComputation):
    """The refined-LLC lens: after the pass over the checkpoints, estimates every head's refined LLC
    (and the whole model's) at the checkpoints ``--llc-steps`` chooses that lack them, one commit per
    checkpoint. Refuses, before anything is written, a family without a known head mask, steps the
    run does not have, or more sampler sequences than the evaluation set holds; and a store whose
    estimates were made under other sampler settings or sequences."""

    lens = LLC_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        super().__init__(setup)
        plan, eval_set = setup.plan, setup.eval_set
        assert eval_set is not None, "the refined LLC needs the evaluation sequences"
        check_family(plan.model.config)
        self.options: LlcOptions = setup.options.lens_options_for(self.lens.name)
        if self.options.implementation == "batched":
            try:
                check_config(plan.model.config)
            except UnknownArchitectureError as exc:
                raise UnknownArchitectureError(f"--lenses llc: {exc}; pass --llc-implementation devinterp") from None
        parse_llc_steps(self.options.steps, [r.step for r in plan.todo])
        sampler = self.options.sampler
        self.eval_set = eval_set
        self.text_tokens = sampler_sequences(eval_set, sampler)
        local = Path(setup.source) if Path(setup.source).is_dir() else None
        data = resolve_llc_data(
            self.options,
            eval_set=eval_set,
            text_tokens=self.text_tokens,
            run_info=plan.src.run_info(),
            run_folder=local,
            tokenizer_at=plan.src.tokenizer_location(plan.todo[0]) if plan.todo else (plan.src.name, {}),
            vocab_size=int(language_config(plan.model.config).get("vocab_size") or 0),
        )
        self.job = LlcJob(
            data,
            sampler,
            setup.scratch / SAMPLES_FOLDER,
            device=lens_device(setup.options),
            implementation=self.options.implementation,
        )

    def record(self) -> dict[str, Any]:
        """meta.json ``llc``: everything an estimate depends on (compared by `check_store`): the sampler, the
        evaluation text's sequences (``evaluation``), and per distribution its sequences (``data``, `data_records`)."""
        info, job = self.eval_set.info, self.job
        return {
            "sampler": job.sampler.as_meta(),
            "evaluation": {
                "text": info.text,
                "text_sha256": info.text_sha256,
                "tokenizer": info.tokenizer,
                "n_sequences": info.n_sequences,
                "seq_len": info.seq_len,
                "seed": info.seed,
                "sequences": len(self.text_tokens),
                "tokens_sha256": tokens_sha256(self.text_tokens),
            },
            "restriction": "devinterp weight_restrictions.create_param_masks(model, 'l<layer>h<head>'): the head's "
            "interleaved Q, K, V rows (and biases) of query_key_value and its columns of attention.dense; "
            "the whole-model row moves every parameter",
            "estimator": "n_beta * (mean over chain steps after burn-in of the per-step SGLD loss (devinterp's loss_trace) "
            "- init_loss), mean and std over chains",
            **sampler_record(job.implementation),
            "device": job.device,
            "seconds": {},
            "data": {},
        }

    def check_store(self, out: Path, stored: Meta | None) -> None:
        """Refuse to add refined LLCs estimated under other sampler settings or sequences than the store's."""
        job = self.job
        if stored is None or stored.llc is None:
            return
        diffs = settings_differences(stored.llc, job.sampler, job.implementation)
        held = data_records(stored.llc)
        for dist in job.data:
            was_tokens = (held.get(dist.name) or {}).get("tokens_sha256")
            if dist.name in held and was_tokens != dist.tokens_sha256:
                diffs.append(
                    f"the sequences of --llc-data {dist.name} (sha256 {str(was_tokens)[:12]}, now {dist.tokens_sha256[:12]}: "
                    "the same name for other data; give them another name, NAME=FILE, or write to a new --out)"
                )
        if diffs:
            raise StoreError(
                f"store {str(out)!r} has refined LLCs estimated with other settings: {'; '.join(diffs)}. Estimates "
                "are comparable only under the same settings: pass the stored --llc-* options and --eval-text, "
                "or write to a new --out"
            )

    def fill(self, run: RunContext) -> None:
        """Estimate the refined LLCs of the chosen checkpoints that lack them, one commit per checkpoint."""
        plan, state, job = run.plan, run.state, self.job
        chosen = parse_llc_steps(self.options.steps, state.meta.state_steps) if state.meta.state_steps else []
        todo = {
            step: lacking
            for step in chosen
            if (lacking := [d for d in job.data if step not in state.steps_with(LLC.name, where={LLC_DATA_COLUMN: d.name})])
        }
        missing = sorted(todo)
        if not missing:
            return
        if state.meta.llc is None:
            state.meta.llc = self.record()
        llc = state.meta.llc
        held = data_records(llc)  # a store written before distributions were named: its estimates are on text
        llc["data"] = {**held, **{d.name: {**d.record, "seconds": (held.get(d.name) or {}).get("seconds", {})} for d in job.data}}
        llc["steps"] = sorted(set(llc.get("steps") or []) | set(chosen))
        per_step = plan.shape.n_layers * plan.shape.n_heads + 1
        log.info(
            "refined LLC: %d checkpoints x %d estimates under %s (%d SGLD steps each)",
            len(missing),
            per_step,
            ", ".join(d.name for d in job.data),
            job.sampler.forward_backward,
        )
        plan.src.stop.clear()
        bar = tqdm(
            total=sum(len(d) for d in todo.values()) * per_step,
            desc="refined LLC",
            unit="estimate",
            disable=not run.progress,
            dynamic_ncols=True,
        )
        compute = functools.partial(checkpoint_llc_of, job=job, n_layers=plan.shape.n_layers, n_heads=plan.shape.n_heads)
        work = [(plan.ref(state.meta.entry(step)), tuple(todo[step])) for step in missing]
        results = run.executor.each(compute, work, device=job.device, progress=lambda: bar.update(1))
        left_out = []
        with contextlib.closing(results):
            for ref, result in results:
                step, done = ref.step, bar.n
                try:
                    rows, seconds = result()
                except CHECKPOINT_ERRORS as exc:
                    log.warning("%s: refined LLC failed (%s); left out", ref.revision, exc)
                    left_out.append(step)
                    continue
                finally:
                    # the checkpoint's estimates not yet counted: a failed one's rest, or a Ray task's (it reports
                    # only its result; in this process `progress` counts each as it is made)
                    bar.update(done + len(todo[step]) * per_step - bar.n)
                state.put(rows)
                for name, took in seconds.items():
                    llc["data"][name].setdefault("seconds", {})[str(step)] = round(took, 1)
                # every distribution's seconds at the checkpoint together
                llc.setdefault("seconds", {})[str(step)] = round(
                    sum(float((r.get("seconds") or {}).get(str(step), 0.0)) for r in llc["data"].values()), 1
                )
                state.commit(heads=False)
                run.report.lenses.setdefault(self.lens.name, []).append(step)
                bar.set_postfix_str(ref.revision)
        bar.close()
        if job.scratch.exists():
            shutil.rmtree(job.scratch, ignore_errors=True)
        if left_out:
            run.report.notes.append(
                f"note: {len(left_out)} checkpoints have no refined LLC (steps {left_out[:5]}): see the warnings "
                "above; rerun to retry them"
            )
