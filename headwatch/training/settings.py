"""Every hyperparameter of a training run in one place; the defaults are the reference run.

`RunSettings` is what ``python -m headwatch.training`` builds from its command line and what
``run.json["config"]`` records, so a store can always be traced back to the exact
run that produced it. Defaults follow Pythia (AdamW betas 0.9/0.95, weight decay
0.01, gradient clipping 1.0, 1% warmup, cosine decay to 10% of the peak rate)
scaled down to a run that trains on a CPU (how long it takes: docs/reference-run.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

RepeatContent = Literal["random", "text"]
REPEAT_CONTENTS: tuple[str, ...] = get_args(RepeatContent)
Arch = Literal["gpt_neox", "gpt2"]
ARCHS: tuple[str, ...] = get_args(Arch)


@dataclass(frozen=True)
class ModelSettings:
    """Architecture and shape of the model (vocabulary fixed at 256 bytes).

    ``arch``: ``gpt_neox`` (the default: Pythia's architecture and init, rotary positions) or
    ``gpt2`` (GPT-2's architecture and its own init: learned absolute position embeddings,
    sequential attention then MLP, tied input and output embeddings; ``rotary_pct`` and
    ``rotary_base`` do not apply). See `training.model`.
    """

    arch: Arch = "gpt_neox"
    n_layers: int = 6
    n_heads: int = 8
    d_model: int = 256
    d_mlp: int = 1024
    context: int = 256  # tokens per training sequence, also max_position_embeddings
    rotary_pct: float = 0.25
    rotary_base: float = 10000.0

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")


@dataclass(frozen=True)
class OptimSettings:
    """AdamW with linear warmup and cosine decay (see `training.schedule`)."""

    steps: int = 1536
    batch_size: int = 8
    max_lr: float = 1e-3
    min_lr_ratio: float = 0.1  # the rate decays to max_lr * min_lr_ratio at the last step
    warmup_frac: float = 0.01  # warmup steps = max(1, round(warmup_frac * steps))
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.01  # on weight matrices and embeddings; not on biases or LayerNorms
    grad_clip: float = 1.0

    @property
    def warmup(self) -> int:
        return max(1, round(self.warmup_frac * self.steps))


@dataclass(frozen=True)
class RepeatSettings:
    """How many training sequences carry a repeated span, and what it is (`training.repeats`).

    The default, ``share = 0``, is plain text: the reference run. With ``share > 0`` the
    training data is no longer Shakespeare alone; the validation loss is still measured on
    unmodified text (see `docs/induction-recipe.md` for what that means for conclusions).
    """

    share: float = 0.0  # probability that a training sequence carries one repeated span (per pass)
    min_span: int = 32  # span length in tokens, uniform in min_span .. max_span
    max_span: int = 128
    content: RepeatContent = "random"  # random bytes (0..255), or the text's own bytes
    spans: int = 1  # passes of `training.repeats.insert_repeats` per batch: up to this many repeats per sequence

    def __post_init__(self) -> None:
        if self.spans < 1:
            raise ValueError(f"spans must be at least 1, got {self.spans}")
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"repeat share must be in [0, 1], got {self.share}")
        if not 1 <= self.min_span <= self.max_span:
            raise ValueError(f"need 1 <= min_span <= max_span, got {self.min_span} and {self.max_span}")
        if self.content not in REPEAT_CONTENTS:
            raise ValueError(f"repeat content must be one of {REPEAT_CONTENTS}, got {self.content!r}")


@dataclass(frozen=True)
class RunSettings:
    """A whole run: model, optimiser, checkpoints, evaluation and corpus split.

    Attributes:
        repeats: the share of training sequences with a repeated span (none by default).
        checkpoint_every: spacing of checkpoints after step 512 (`training.schedule`).
        dense_from, dense_to, dense_every: a window of extra checkpoints, every
            ``dense_every`` steps (0: none), where a phenomenon forms (`training.schedule`).
        eval_batches: batches of ``batch_size`` sequences, at fixed positions, on which
            train and validation loss are measured at every checkpoint.
        val_fraction: share of every work held out for validation.
        seed: fixes the initial weights and the order of training batches.
    """

    model: ModelSettings = field(default_factory=ModelSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    repeats: RepeatSettings = field(default_factory=RepeatSettings)
    checkpoint_every: int = 32  # 0, 1, 2, ..., 512, then 544, 576, ..., 1536: 43 checkpoints
    dense_from: int = 0  # plus every dense_every steps from dense_from to dense_to (none by default)
    dense_to: int = 0
    dense_every: int = 0
    eval_batches: int = 4
    val_fraction: float = 0.05
    seed: int = 1234

    @property
    def tokens_per_step(self) -> int:
        return self.optim.batch_size * self.model.context

    def as_record(self) -> dict[str, Any]:
        """JSON-ready dict of every setting, derived sizes included."""
        record = asdict(self)
        record["model"]["d_head"] = self.model.d_head
        record["model"]["vocab_size"] = 256
        record["model"]["init"] = "pythia" if self.model.arch == "gpt_neox" else "gpt2"
        record["optim"]["warmup_steps"] = self.optim.warmup
        record["tokens_per_step"] = self.tokens_per_step
        return record


def settings_from_record(config: dict[str, Any]) -> RunSettings:
    """The `RunSettings` a ``run.json["config"]`` records (`RunSettings.as_record`; its derived sizes ignored).

    Raises:
        ValueError: the record lacks the model, optimiser or repeat settings (a run.json not written by
            `training.train`), or holds a value the settings refuse.
    """
    missing = [k for k in ("model", "optim") if not isinstance(config.get(k), dict)]
    if missing:
        raise ValueError(f"run.json config records no {' or '.join(missing)} settings: not a run trained by headwatch.training")

    def pick(cls: Any, record: dict[str, Any]) -> Any:
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})

    top = {
        f.name: config[f.name] for f in fields(RunSettings) if f.name in config and f.name not in ("model", "optim", "repeats")
    }
    return RunSettings(
        model=pick(ModelSettings, config["model"]),
        optim=pick(OptimSettings, config["optim"]),
        repeats=pick(RepeatSettings, config.get("repeats") or {}),
        **top,
    )
