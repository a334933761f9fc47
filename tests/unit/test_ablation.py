"""The ablation lens's batched computation against TransformerLens, and its statistics against plain loops.

The peer reference: TransformerLens's bridge over the same planted checkpoint (``TransformerBridge.boot_transformers``
on the saved folder, float64), each head mean-ablated by ``run_with_hooks`` on ``blocks.{l}.attn.hook_z`` with
``loss_per_token=True``, one forward pass per head; the lens's `ablation_pass` runs every head of a layer as a lane
of one computation. Planted GPT-2, GPT-NeoX (partial rotary, parallel residual) and Llama (grouped-query attention:
2 key/value heads for 4 query heads, RMSNorm, gated MLP, rotary) models, weights drawn large enough that every head
matters; equal within 1e-5.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from headwatch.analysis.attention.losses import icl_probe, icl_text, mean_increase, position_stats, sem, top_contexts
from headwatch.analysis.store.lenses.losses import icl_positions, probe_positions
from headwatch.families.forward import architecture, parameters
from headwatch.precompute.lenses.ablation import ablated_losses, ablation_pass, attention_over, context_steps

VOCAB, T = 40, 12


def _planted(kind: str, folder: Path) -> None:
    """A small model of ``kind`` with N(0, 0.3) weights (norm gains near 1), saved by transformers to ``folder``."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
    )

    torch.manual_seed({"gpt2": 1, "gpt_neox": 2, "llama": 3}[kind])
    model: Any
    if kind == "gpt2":
        config = GPT2Config(vocab_size=VOCAB, n_embd=24, n_layer=3, n_head=4, n_positions=32)
        model = GPT2LMHeadModel(GPT2Config(**config.to_dict() | {"resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0}))
    elif kind == "gpt_neox":
        model = GPTNeoXForCausalLM(
            GPTNeoXConfig(
                vocab_size=VOCAB, hidden_size=24, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                max_position_embeddings=32, rotary_pct=0.5, hidden_dropout=0, attention_dropout=0,
            )
        )  # fmt: skip
    else:
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=32, tie_word_embeddings=False,
            )
        )  # fmt: skip
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
            p.copy_(1 + 0.1 * torch.randn_like(p) if gain and p.dim() == 1 else 0.3 * torch.randn_like(p))
    model.save_pretrained(folder)


def _bridge(folder: Path) -> Any:
    """TransformerLens's bridge over the saved checkpoint, float64, with a word-level tokenizer of the vocabulary."""
    pytest.importorskip("transformer_lens")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0")))
    return TransformerBridge.boot_transformers(str(folder), dtype=torch.float64, device="cpu", tokenizer=tok)


def _ours(folder: Path) -> tuple[Any, dict[str, torch.Tensor]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    return architecture(model, sampler=False), parameters(model)


@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox", "llama"])
def test_mean_ablation_equals_transformer_lens_hooks_on_hook_z(kind: str, tmp_path: Path) -> None:
    _planted(kind, tmp_path / kind)
    bridge = _bridge(tmp_path / kind)
    arch, params = _ours(tmp_path / kind)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (5, T), generator=gen)
    L, H = arch.n_layers, arch.n_heads

    # the heads' mean outputs over every token, read from TransformerLens's hook_z
    seen: dict[int, torch.Tensor] = {}

    def keep(layer: int) -> Any:
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            seen[layer] = z.mean(dim=(0, 1))  # (B, T, H, d_head) -> (H, d_head)
            return z

        return hook

    bridge.run_with_hooks(ids, return_type="loss", fwd_hooks=[(f"blocks.{layer}.attn.hook_z", keep(layer)) for layer in range(L)])
    tl_means = torch.stack([seen[layer] for layer in range(L)])  # (L, H, d_head)
    # one pass: the means found in its intact pass, then the lanes (chunks of 3 lanes)
    base, ablated = ablated_losses(arch, params, ids, tl_means.float(), batch=2, logit_budget=3 * T * VOCAB)
    done = ablation_pass(arch, params, ids, batch=2, logit_budget=3 * T * VOCAB)
    assert (done.means - tl_means.detach()).abs().max() < 1e-6, (done.means - tl_means.detach()).abs().max()
    np.testing.assert_allclose(done.ablated, ablated, atol=1e-5, rtol=0)
    tl_base = bridge(ids, return_type="loss", loss_per_token=True).detach().numpy()  # (B, T - 1)
    np.testing.assert_allclose(base[:, 1:], tl_base, atol=1e-5, rtol=0)
    assert np.isnan(base[:, 0]).all() and np.isnan(ablated[..., 0]).all()
    for layer in range(L):
        for head in range(H):

            def ablate(z: torch.Tensor, hook: Any, head: int = head, layer: int = layer) -> torch.Tensor:
                z[:, :, head] = tl_means[layer, head]
                return z

            tl = (
                bridge.run_with_hooks(
                    ids, return_type="loss", loss_per_token=True, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", ablate)]
                )
                .detach()
                .numpy()
            )
            np.testing.assert_allclose(ablated[layer, head][:, 1:], tl, atol=1e-5, rtol=0, err_msg=f"L{layer} H{head}")
    # the heads matter: ablating moves the loss by far more than the tolerance
    assert np.nanmax(np.abs(ablated - base)) > 1e-2


def test_zero_ablation_equals_transformer_lens_and_attention_rows_equal_the_model_s(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    _planted("llama", tmp_path / "m")
    bridge = _bridge(tmp_path / "m")
    arch, params = _ours(tmp_path / "m")
    ids = torch.randint(0, VOCAB, (3, T), generator=torch.Generator().manual_seed(1))
    zeros = torch.zeros(arch.n_layers, arch.n_heads, arch.d_head, dtype=torch.float64)
    _, ablated = ablated_losses(arch, params, ids, zeros)

    def zero(z: torch.Tensor, hook: Any) -> torch.Tensor:
        z[:, :, 3] = 0
        return z

    tl = bridge.run_with_hooks(ids, return_type="loss", loss_per_token=True, fwd_hooks=[("blocks.1.attn.hook_z", zero)])
    np.testing.assert_allclose(ablated[1, 3][:, 1:], tl.detach().numpy(), atol=1e-5, rtol=0)

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float64, attn_implementation="eager").eval()
    alphas = model(ids, output_attentions=True).attentions  # per layer (B, H, T, T)
    wanted = {0: [(2, 1, 5)], 2: [(0, 3, 11), (2, 0, 0), (1, 2, 7)]}
    rows = attention_over(arch, params, ids, wanted)
    # the same rows read from the ablation pass's layer inputs
    kept = attention_over(arch, params, ids, wanted, ablation_pass(arch, params, ids, means=zeros, keep_inputs=True).inputs)
    assert rows.keys() == kept.keys() and len(rows) == 4
    for (layer, seq, head, query), row in rows.items():
        # transformers' Llama takes its RMSNorm in float32 even in a float64 model: agreement to about 1e-7
        np.testing.assert_allclose(row, alphas[layer][seq, head, query].detach().numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(kept[(layer, seq, head, query)], row, atol=1e-7, rtol=0)
        assert (row[query + 1 :] == 0).all()


def test_the_statistics_equal_plain_loops() -> None:
    rng = np.random.default_rng(0)
    S, P, K = 6, 10, 3
    base = rng.gamma(2.0, size=(S, P))
    base[:, 0] = np.nan
    ablated = base[None] + rng.normal(0.1, 0.3, size=(K, S, P))

    def se(values: list[float]) -> float:
        m = sum(values) / len(values)
        return (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5 / len(values) ** 0.5

    mean, err = position_stats(base)
    assert np.isclose(mean[4], sum(base[s, 4] for s in range(S)) / S) and np.isclose(err[4], se(list(base[:, 4])))
    assert np.isnan(sem(np.ones((1, 3)), axis=0)).all()

    score = icl_text(ablated, 2, 8)
    for k in range(K):
        diffs = [ablated[k, s, 8] - ablated[k, s, 2] for s in range(S)]
        assert np.isclose(score.score[k], sum(diffs) / S) and np.isclose(score.sem[k], se(diffs))

    R = P // 2
    probe = icl_probe(base, R)
    first, second = probe_positions(R)
    assert (list(first), list(second)) == ([1, 2, 3, 4], [6, 7, 8, 9])
    diffs = [np.mean([base[s, p] for p in second]) - np.mean([base[s, p] for p in first]) for s in range(S)]
    assert np.isclose(probe.score, np.mean(diffs)) and np.isclose(probe.sem, se(diffs))

    inc = mean_increase(base, ablated, range(1, P))
    for k in range(K):
        per = [np.mean([ablated[k, s, p] - base[s, p] for p in range(1, P)]) for s in range(S)]
        assert np.isclose(inc.score[k], np.mean(per)) and np.isclose(inc.sem[k], se(per))

    flat = (ablated - base[None]).reshape(K, -1)
    picked, values = top_contexts(flat, 5)
    for k in range(K):
        finite = [(v, i) for i, v in enumerate(flat[k]) if np.isfinite(v)]
        want = [i for _, i in sorted(finite, key=lambda vi: (-vi[0], vi[1]))[:5]]
        assert list(picked[k]) == want and np.allclose(values[k], flat[k, want])


def test_icl_positions_scale_olsson_s_50th_and_500th_token_of_512() -> None:
    assert icl_positions(512) == (49, 499)  # Olsson et al.'s own, 0-based
    assert icl_positions(64) == (5, 62)  # the 6th and the 63rd token
    assert icl_positions(256) == (24, 249)
    assert icl_positions(4) == (1, 3)
    with pytest.raises(ValueError, match="T >= 3"):
        icl_positions(2)


def test_context_steps_default_to_the_last_and_the_stage_boundaries() -> None:
    done = [0, 100, 200, 300, 400]
    assert context_steps(None, done, [100, 300, 350]) == [100, 300, 400]
    assert context_steps("last", done, [100]) == [400]
    assert context_steps("all", done, []) == done
    assert context_steps("0,200,999", done, [100]) == [0, 200]
    assert context_steps(None, [], [100]) == []


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_the_llama_family_s_functional_forward_equals_the_model_s_logits(kind: str) -> None:
    """Llama with grouped-query attention, and Qwen2 (its Q, K, V biases), through `families.forward` against the
    transformers model's own logits, float64."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    sizes = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
    sizes |= dict(num_key_value_heads=2, max_position_embeddings=32, tie_word_embeddings=kind == "qwen2")
    torch.manual_seed(4)
    model: Any = (LlamaForCausalLM(LlamaConfig(**sizes)) if kind == "llama" else Qwen2ForCausalLM(Qwen2Config(**sizes))).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.eval()
    arch, params = architecture(model, sampler=False), parameters(model)
    assert (kind == "qwen2") == ("model.layers.0.self_attn.q_proj.bias" in params)
    ids = torch.randint(0, VOCAB, (3, T), generator=torch.Generator().manual_seed(2))
    x = arch.embed(params, ids)
    for layer in range(arch.n_layers):
        x = arch.layer(params, layer, x)
    with torch.no_grad():
        np.testing.assert_allclose(arch.logits(params, x).numpy(), model(ids).logits.numpy(), atol=1e-5, rtol=0)


def _sdpa_flops(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
    """Operations of causal attention over shapes ``(B, H, T, d_head)``: Q K^T and the weights times V, every key."""
    b, h, t, d = query
    return 2 * 2 * b * h * t * key[2] * d


SDPA_CPU_FLOPS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flops}


@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox"])
def test_the_multiply_adds_plan_prices_are_what_the_lens_computes(kind: str, tmp_path: Path) -> None:
    """`precompute.costs.ablation_macs` (the lens without its contexts' attention pass, and the plain way) against
    torch's ``FlopCounterMode`` over the lens's own passes (a multiply-add is two operations; torch's fused causal
    attention on the CPU, which the counter does not know, counted as its two products over every key): every layer,
    and the first and the last alone (what the benchmark times)."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    from headwatch.families.registry import model_geometry, model_shape
    from headwatch.precompute.costs import ablation_macs

    _planted(kind, tmp_path / kind)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / kind).eval()
    arch, params = architecture(model, sampler=False), parameters(model)
    config = model.config.to_dict()
    geometry = model_geometry(model_shape(config), config)
    gen = torch.Generator().manual_seed(3)
    text, probe = torch.randint(0, VOCAB, (5, T), generator=gen), torch.randint(0, VOCAB, (2, T), generator=gen)
    for layers in (None, [0, arch.n_layers - 1]):
        with FlopCounterMode(display=False, custom_mapping=SDPA_CPU_FLOPS) as counted:
            means = ablation_pass(arch, params, text, batch=2, layers=layers).means
            ablated_losses(arch, params, probe, means, batch=2, layers=layers)
        lens, plain = ablation_macs(geometry, T, 5, 2, layers=layers, contexts=False)
        assert counted.get_total_flops() == pytest.approx(2 * lens, rel=1e-6), layers
        assert plain > lens


def test_the_functional_forward_refuses_what_it_does_not_implement_by_name() -> None:
    """OLMo (weightless LayerNorm, clipped Q, K, V), SmolLM3 (layers without rotary) and a sliding window are
    refused by the Llama adapter; the sampler still refuses the Llama family (a head does not own its K and V)."""
    from headwatch.analysis.errors import UnknownArchitectureError
    from headwatch.families.forward import check_config, check_functional

    assert check_functional({"model_type": "llama"}).name == "llama"
    assert check_functional({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}).name == "llama"
    for config, what in (
        ({"model_type": "olmo"}, "olmo"),
        ({"model_type": "smollm3"}, "smollm3"),
        ({"model_type": "mistral", "sliding_window": 4096}, "sliding window"),
        ({"model_type": "gemma2"}, "gemma2"),
    ):
        with pytest.raises(UnknownArchitectureError, match=what):
            check_functional(config, who="the ablation lens")
    with pytest.raises(UnknownArchitectureError, match="no forward pass for model_type 'llama'"):
        check_config({"model_type": "llama"})


def test_asked_context_steps_the_store_lacks_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    done = [0, 100, 200, 300, 400]
    with caplog.at_level(logging.WARNING, logger="precompute"):
        assert context_steps("0,200,999,1500", done, [100]) == [0, 200]
    assert "--ablation-steps: the store has no checkpoint at steps 999, 1,500 (it has 0, 100, 200, 300, 400)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="precompute"):
        assert context_steps("100,400", done, []) == [100, 400]
    assert caplog.text == ""


def test_a_tokenizer_that_does_not_load_is_a_clear_error_not_hash_ids(tmp_path: Path) -> None:
    from headwatch.precompute.evalset import EvalTextError
    from headwatch.precompute.lenses.ablation import _decoder

    with pytest.raises(EvalTextError, match=r"cannot load the evaluation set's tokenizer at .*tokenizer\.save_pretrained"):
        _decoder(str(tmp_path / "no-tokenizer-here"))


def test_the_decoder_loads_the_tokenizer_with_the_pass_kwargs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The revision and cache the source gives (`CheckpointSource.tokenizer_location`) reach from_pretrained."""
    import transformers

    from headwatch.precompute.lenses.ablation import _decoder, tokenizer_kwargs

    seen: list[tuple[str, dict]] = []

    class Tok:
        def decode(self, ids: list[int]) -> str:
            return f"<{ids[0]}>"

    def fake(location: str, **kwargs: object) -> Tok:
        seen.append((location, kwargs))
        return Tok()

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake)

    class Src:
        name = "org/model"

        def tokenizer_location(self, ref: object) -> tuple[str, dict]:
            return "org/model", {"revision": "main", "cache_dir": "/c"}

    src: Any = Src()
    refs: Any = ["ref"]
    kwargs = tokenizer_kwargs(src, refs, "org/model")
    assert dict(kwargs) == {"revision": "main", "cache_dir": "/c"}
    assert tokenizer_kwargs(src, refs, "elsewhere") == ()
    _decoder.cache_clear()
    assert _decoder("org/model", kwargs)(7) == "<7>"
    assert seen == [("org/model", {"cache_dir": "/c", "revision": "main"})]
    _decoder.cache_clear()


def test_the_losses_lens_and_the_ablation_lens_share_one_per_token_loss(tmp_path: Path) -> None:
    """One intact per-token loss path: the losses lens's `model_losses` is the ablation lens's `per_token_losses` on
    the model's logits (no second implementation), both equal to a float64 numpy log-softmax by hand."""
    from transformers import AutoModelForCausalLM

    from headwatch.precompute.lenses import losses
    from headwatch.precompute.lenses.losses import per_token_losses

    assert not hasattr(losses, "token_losses")
    _planted("gpt_neox", tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokens = np.random.default_rng(0).integers(0, VOCAB, size=(5, T))
    got = losses.model_losses(model, tokens, device="cpu", batch=2)
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(tokens)).logits
    assert np.array_equal(got, per_token_losses(logits, torch.from_numpy(tokens)).numpy(), equal_nan=True)
    z = logits.double().numpy()[:, :-1]
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    by_hand = -np.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
    assert np.isnan(got[:, 0]).all()
    np.testing.assert_allclose(got[:, 1:], by_hand, atol=1e-5)
