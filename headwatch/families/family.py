"""What a model family's adapter declares, and the shape a checkpoint of any family is read into.

A family is one adapter: a subclass of `Family` in its own module of ``headwatch/families/`` (`gpt_neox`, `gpt2`,
`llama`), listed once in `families.registry`, which declares together

- its **tensor names and slicing**: the attention tensors each per-head product reads (`Family.attention`,
  `Family.matrix_roles`) and how they are cut into the one per-head layout ``(n_heads, d_head, d_model)``
  (`Family.qk`, `Family.ov`; run by `families.extract`);
- its **block layout**: every 2-D weight of a block, by role (`Family.blocks`; read by `families.blocks`);
- its **cost geometry**: the MLP, residual and key/value heads the cost counts see (`Family.geometry`);
- its **forward pass**, where it has one (`Family.functional_forward` and the declarations below it, which the
  functional forward of `families.forward` reads: the ablation lens runs it; `Family.batched_forward` where the
  refined-LLC sampler may also move one head's weights per lane); a family without one says so, and the lenses
  that need it refuse its checkpoints by name.

Everything here is torch-free: the slicing only indexes and reshapes the tensors it is given (``Tensor`` below is
a ``torch.Tensor`` at run time), so the registry, ``headwatch info`` and ``headwatch plan`` read the families
without importing torch.

A family that normalises queries and keys (QK-norm) lists the norms' gains among its ``qk`` roles
(`Family.matrix_roles`, with their patterns in `Family.attention`) and folds them into W_Q and W_K in its
`Family.qk`, which receives every tensor of those roles for one layer; values and outputs likewise in `Family.ov`.
The convention (docs/design-notes.md section 7): the gains are folded (`scale_rows`: W_QK = (g_q * W_Q)^T (g_k * W_K),
an output norm's gains into W_O's rows), the per-token RMS factors are left out, as 1/sqrt(d_head) and the rotary
embedding are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from headwatch.analysis.errors import CheckpointError
from headwatch.families.geometry import Geometry

# A torch.Tensor at run time; the declarations only index and reshape what they are given, and import no torch.
Tensor = Any
Params = dict[str, Tensor]

# role -> tensor-name pattern (`tensor_pattern`), and per-head product -> the roles it reads
Patterns = Mapping[str, re.Pattern[str]]
Roles = Mapping[str, tuple[str, ...]]

# Per-head products a store can hold: W_QK = W_Q^T W_K and W_OV = W_O[:, h] W_V,h.
HEAD_MATRICES = ("qk", "ov")


def tensor_pattern(name: str) -> re.Pattern[str]:
    """A checkpoint tensor's name with any module prefix (``gpt_neox.``, ``transformer.``, ``model.`` or none), so
    that both ``*ForCausalLM`` and base-model checkpoints match; ``name`` is a regex whose group 1 is the layer."""
    return re.compile(r"^(?:.*\.)?" + name + "$")


@dataclass(frozen=True)
class ModelShape:
    """What extraction needs to know about a model, read from its ``config.json`` (`families.registry.model_shape`).

    Attributes:
        family: the adapter's name (`Family.name`), which ``meta.json`` records.
        model_type: the config's ``model_type``.
    """

    family: str
    model_type: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int

    def as_meta(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "model_type": self.model_type,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "d_model": self.d_model,
            "d_head": self.d_head,
        }


def check_shape(t: Tensor, expected: tuple[int, ...], what: str) -> None:
    """Refuse a tensor whose shape is not what ``config.json`` implies.

    Raises:
        CheckpointError: naming the tensor, its shape and the expected one.
    """
    if tuple(t.shape) != expected:
        raise CheckpointError(f"{what} has shape {tuple(t.shape)}, expected {expected} from config.json")


def scale_rows(weight: Tensor, gain: Tensor) -> Tensor:
    """``diag(gain) @ weight``: a norm's gains folded into the rows of the projection it normalises (a gain per
    output coordinate of ``weight``, ``(rows, cols)``, ``gain`` ``(rows,)``), computed in float32 at least (a
    float64 checkpoint stays float64), so that a bf16 or fp16 checkpoint's product is not rounded to its dtype."""
    if weight.dtype.itemsize < 4:
        weight = weight.float()
    if gain.dtype.itemsize < 4:
        gain = gain.float()
    return gain[:, None] * weight


@dataclass(frozen=True)
class ForwardConfig:
    """What the functional forward reads from a transformers config besides the parameters (`Family.forward_config`).

    Attributes:
        eps: the layer norms' epsilon.
        activation: the MLP's activation, a transformers ``ACT2FN`` name.
        parallel_residual: ``x + attn(ln1 x) + mlp(ln2 x)`` (else ``h = x + attn(ln1 x); h + mlp(ln2 h)``).
        d_head: a head's width where the config sets it apart from d_model / n_heads (None: d_model / n_heads).
        n_kv_heads: key/value heads under grouped-query attention (None: as many as the query heads).
    """

    n_layers: int
    n_heads: int
    d_model: int
    eps: float
    activation: str
    parallel_residual: bool
    d_head: int | None = None
    n_kv_heads: int | None = None


class Family:
    """One model family's adapter: a subclass sets the class attributes and methods below, and its module holds one
    instance, listed in `families.registry.FAMILIES`.

    Attributes:
        name: what ``meta.json``'s ``model.family`` records (``gpt_neox``).
        model_types: the ``config.json`` ``model_type`` values this adapter reads, each in one family only.
        attention: attention tensor role -> name pattern (`tensor_pattern`), in the order a layer's tensors are read.
        matrix_roles: per-head product (`HEAD_MATRICES`) -> the roles it reads, in the argument order of `qk` / `ov`.
        blocks: block role (`analysis.store.format.LAYER_ROLES`) -> name pattern, in display order.
        gated_mlp: three MLP matrices (gate, up, down) rather than two, as the cost counts see them.
        folded_norms: which norms' gains `qk` / `ov` fold into the factors (docs/design-notes.md section 3), as the
            dashboard's model card and a published store's card say it; empty: none, the raw weights.
        neutral_gain: the value of a folded norm gain (a 1-D attention tensor) at which the fold leaves the factors
            as they are: 1 for a gain w, 0 for Gemma's 1 + w (the byte-range reader probes the layout with it).
        devinterp_head_mask: devinterp's ``create_param_masks(model, "l{layer}h{head}")`` moves exactly one head of
            this family (tests/integration/test_llc.py); the refined LLC's ``devinterp`` implementation needs it.
        functional_forward: the functional forward of `families.forward` reads this family (the declarations under
            "the functional forward" below); without it the ablation lens refuses the family by name.
        batched_forward: the batched refined-LLC sampler may move one head's weights per lane through that forward
            (a head owns its Q, K, V rows: no grouped-query attention); without it the sampler refuses the family.
    """

    name: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]
    attention: ClassVar[Patterns]
    matrix_roles: ClassVar[Roles]
    blocks: ClassVar[Patterns]
    gated_mlp: ClassVar[bool] = False
    folded_norms: ClassVar[str] = ""
    neutral_gain: ClassVar[float] = 1.0
    devinterp_head_mask: ClassVar[bool] = False
    functional_forward: ClassVar[bool] = False
    batched_forward: ClassVar[bool] = False

    # ------------------------------------------------------------------ names and slicing

    def text_config(self, config: Mapping[str, Any]) -> Mapping[str, Any]:
        """The part of ``config.json`` the language model's sizes are read from (`families.registry.model_shape`,
        `geometry`, `families.registry.language_config` for the vocabulary and the context): the config itself; a
        family whose multimodal checkpoints nest the language model's config (``text_config``) returns that, with the
        defaults transformers fills in for the sizes it omits."""
        return config

    def kv_heads(self, config: Mapping[str, Any], n_heads: int) -> int:
        """Key/value heads (fewer than ``n_heads`` under grouped-query attention): as many as the query heads."""
        return n_heads

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        """One layer's ``(W_Q, W_K)``, each ``(n_heads, d_head, d_model)``, from its ``matrix_roles["qk"]`` tensors:
        the model's own per-head query (before rotary embedding, without bias) is ``q_h = x @ W_Q[h].T``.

        Raises:
            CheckpointError: a tensor has the wrong shape (`check_shape`).
        """
        raise NotImplementedError

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        """One layer's ``(W_O^T, W_V)``, each ``(n_heads, d_head, d_model)``, from its ``matrix_roles["ov"]``
        tensors: ``W_OV,h = W_O^T[h].T @ W_V[h]``.

        Raises:
            CheckpointError: a tensor has the wrong shape (`check_shape`).
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ cost geometry

    def parallel_residual(self, config: Mapping[str, Any]) -> bool:
        """Whether the MLP reads the block's input rather than the attention's output: sequential."""
        return False

    def geometry(self, shape: Any, config: Mapping[str, Any]) -> Geometry:
        """The model's `Geometry` from its shape (`ModelShape`, or any object with its sizes) and config: the MLP's
        width (``intermediate_size``, ``n_inner``, else 4 d_model), the vocabulary, `parallel_residual`,
        `gated_mlp`, its key/value heads."""
        d_mlp = config.get("intermediate_size") or config.get("n_inner") or 4 * shape.d_model
        return Geometry(
            n_layers=shape.n_layers,
            n_heads=shape.n_heads,
            d_model=shape.d_model,
            d_mlp=int(d_mlp),
            vocab=int(config.get("vocab_size") or 0),
            parallel=self.parallel_residual(config),
            gated=self.gated_mlp,
            kv_heads=getattr(shape, "n_kv_heads", None) or config.get("num_key_value_heads"),
        )

    # ------------------------------------------------------------------ the functional forward (`families.forward`)
    # Read only where `functional_forward` is set. Parameter names are those of the causal LM's ``named_parameters()``.

    # the config's dropout probabilities (devinterp samples in train mode, where they apply; the forward has none)
    dropouts: ClassVar[tuple[str, ...]] = ()
    # a layer's parameters' prefix (``{layer}`` formatted), its two norms' names after it, the final norm's name
    layer_prefix: ClassVar[str]
    attention_norm: ClassVar[str]
    mlp_norm: ClassVar[str]
    final_norm: ClassVar[str]
    # the norms: LayerNorm (``.weight`` and ``.bias``) or RMSNorm (``.weight`` only: x / sqrt(mean x^2 + eps) * w)
    rms_norm: ClassVar[bool] = False
    # the MLP's input and output projections after the layer prefix (``.weight``, and ``.bias`` where the checkpoint
    # has one), stored as Conv1D ``(in, out)`` (``x W + b``) or as ``nn.Linear`` ``(out, in)``; a gated MLP
    # (`gated_mlp`) names three, gate, up and down: ``down(act(gate x) * up x)``
    mlp_projections: ClassVar[tuple[str, ...]]
    conv1d: ClassVar[bool] = False
    # the token embedding, the learned position embedding (None: none), the unembedding when it is not tied (the
    # first of these names the parameters have)
    token_embedding: ClassVar[str]
    position_embedding: ClassVar[str | None] = None
    unembedding: ClassVar[tuple[str, ...]] = ("lm_head.weight",)

    def check_forward(self, config: Mapping[str, Any]) -> None:
        """Refuse a config option the functional forward does not implement (dropout is refused for every family).

        Raises:
            UnknownArchitectureError: naming the option.
        """

    def forward_config(self, config: Any) -> ForwardConfig:
        """The `ForwardConfig` of a transformers config object."""
        raise NotImplementedError

    def rotary_embedding(self, model: Any) -> Any:
        """The causal LM's rotary-embedding module, called as ``(x, positions) -> (cos, sin)``; None: no rotary
        embedding (positions are learned)."""
        return None

    def head_parameter_names(self, layer: int) -> tuple[str, ...]:
        """The parameters that hold a head of ``layer`` (devinterp's mask keys, in its order)."""
        raise NotImplementedError

    def attention_weights(self, params: Params, layer: int, n_heads: int, d_head: int, d_model: int) -> Params:
        """Every head's attention weights of ``layer`` in the functional forward's per-head layout
        (`families.forward`: ``W_q, W_k, W_v, b_q, b_k, b_v, W_o, b_o``)."""
        raise NotImplementedError
