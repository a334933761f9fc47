"""The forward-pass lens against independent references: analytic values of hand-built models.

Every model is made here with transformers (offline): a GPT-NeoX whose query projections
are zero (uniform causal attention), a GPT-2 whose head is wired to attend to the previous
position, a two-layer GPT-2 with an induction circuit built by hand, and random ones. The
expected numbers are computed in the tests from their definitions (docs/design-notes.md section 8),
never by the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from headwatch.analysis.attention.patterns import AttentionSums, induction_scores, js_divergence
from headwatch.precompute.evalset import EvalTextError, make_eval_set
from headwatch.precompute.lenses.attention import AttentionJob, forward_statistics


def eval_set(vocab: int, n: int, t: int, seed: int = 0):
    ids = np.random.default_rng(seed).integers(0, vocab, size=n * t * 2)
    return make_eval_set(ids, n=n, t=t, vocab_size=vocab, text="random", text_sha256="x", tokenizer="ids")


def neox(layers: int = 2, heads: int = 4, hidden: int = 64, vocab: int = 64, seed: int = 0):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    config = GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        rotary_pct=0.25,
        attn_implementation="eager",
    )
    return GPTNeoXForCausalLM(config).eval()


def stats_of(model, es, layers, heads):
    return forward_statistics(model, AttentionJob(es, batch=3), n_layers=layers, n_heads=heads)


# ---------------------------------------------------------------- uniform attention


def test_zero_query_projection_gives_the_uniform_causal_values() -> None:
    layers, heads, t = 2, 4, 24
    model = neox(layers, heads)
    d_head = 64 // heads
    with torch.no_grad():
        for layer in model.gpt_neox.layers:
            qkv = layer.attention.query_key_value  # rows (heads, 3, d_head): q, k, v per head
            w = qkv.weight.view(heads, 3, d_head, -1)
            b = qkv.bias.view(heads, 3, d_head)
            w[:, 0] = 0.0
            b[:, 0] = 0.0
    es = eval_set(64, 5, t)
    s = stats_of(model, es, layers, heads)
    i = np.arange(1, t + 1, dtype=np.float64)  # 1-based query positions
    entropy = np.mean(np.log2(i))
    span = np.mean((i - 1) / 2)
    sink = np.mean(1 / i)
    prev = np.mean(1 / i[1:])
    np.testing.assert_allclose(s["entropy"], entropy, rtol=1e-5)
    np.testing.assert_allclose(s["entropy_std"], np.std(np.log2(i)), rtol=1e-4)
    np.testing.assert_allclose(s["span"], span, rtol=1e-5)
    np.testing.assert_allclose(s["sink"], sink, rtol=1e-5)
    np.testing.assert_allclose(s["prev_token"], prev, rtol=1e-5)
    r = es.info.induction_repeat
    baseline = np.mean([1 / (r + k) for k in range(1, r)])
    np.testing.assert_allclose(s["induction"], baseline, rtol=1e-5)
    np.testing.assert_allclose(s["jsd"], 0.0, atol=1e-9)  # every layer attends alike


# ---------------------------------------------------------------- hand-built GPT-2 heads


def zero_mean_codes(n: int, dim: int, seed: int) -> np.ndarray:
    """``n`` orthonormal vectors of ``dim`` dimensions, each summing to zero (so LayerNorm only rescales)."""
    g = np.random.default_rng(seed).standard_normal((dim, n))
    g -= g.mean(axis=0, keepdims=True)
    q, _ = np.linalg.qr(g)  # columns orthonormal, in the zero-mean subspace
    return q.T[:n]


def gpt2(n_layer: int, d: int, heads: int, vocab: int, positions: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab,
        n_positions=positions,
        n_embd=d,
        n_layer=n_layer,
        n_head=heads,
        attn_implementation="eager",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.transformer.h.parameters():
            p.zero_()
        for block in model.transformer.h:
            block.ln_1.weight.fill_(1.0)
            block.ln_2.weight.fill_(1.0)
    return model


def test_a_previous_token_head_scores_one_with_entropy_near_zero() -> None:
    t, d, heads, vocab = 16, 64, 2, 32
    d_head = d // heads
    model = gpt2(1, d, heads, vocab, t)
    pos = zero_mean_codes(t, d, seed=1)  # (T, d): position i's residual vector direction
    codes = np.eye(d_head)[:t]  # head 0's key code of each position
    shifted = np.vstack([np.zeros(d_head), codes[:-1]])  # query of i looks for the code of i - 1
    w_k = pos.T @ codes  # x_i @ w_k = code_i, since pos has orthonormal rows
    w_q = 400.0 * pos.T @ shifted  # scores 400/sqrt(d_head) apart: softmax is one-hot to float32 precision
    with torch.no_grad():
        model.transformer.wte.weight.zero_()
        model.transformer.wpe.weight.copy_(torch.tensor(pos * math.sqrt(d), dtype=torch.float32))  # LayerNorm keeps it
        attn = model.transformer.h[0].attn.c_attn.weight  # (d, 3d): q | k | v columns, head 0 first
        attn[:, 0:d_head] = torch.tensor(w_q, dtype=torch.float32) / math.sqrt(d)
        attn[:, d : d + d_head] = torch.tensor(w_k, dtype=torch.float32) / math.sqrt(d)
    es = eval_set(vocab, 4, t)
    s = stats_of(model, es, 1, heads)
    assert s["prev_token"][0, 0] == pytest.approx(1.0, abs=1e-4)
    # query 1 has one key (entropy 0); every other query puts all its mass on i - 1
    assert s["entropy"][0, 0] == pytest.approx(0.0, abs=1e-3)
    assert s["span"][0, 0] == pytest.approx((t - 1) / t, abs=1e-3)  # distance 1 for i > 1, 0 for i = 1
    i = np.arange(1, t + 1)
    assert s["entropy"][0, 1] == pytest.approx(np.mean(np.log2(i)), rel=1e-5)  # head 1: zero query, uniform


def test_a_hand_built_induction_circuit_scores_near_one_and_a_random_model_near_uniform() -> None:
    t, vocab = 32, 200
    tok_block, pos_block = 256, 64
    d = 2 * tok_block + pos_block  # residual: [token | position | previous token]
    heads = 2  # d_head 288: head 0 has room for a 256-dimensional token code
    model = gpt2(2, d, heads, vocab, t)
    tok = zero_mean_codes(vocab, tok_block, seed=2)  # (V, 256)
    pos = zero_mean_codes(t, pos_block, seed=3)  # (T, 64)
    T0, P0, R0 = slice(0, tok_block), slice(tok_block, tok_block + pos_block), slice(tok_block + pos_block, d)
    scale = 60.0
    with torch.no_grad():
        wte = torch.zeros(vocab, d)
        wte[:, T0] = torch.tensor(tok, dtype=torch.float32)
        wpe = torch.zeros(t, d)
        wpe[:, P0] = torch.tensor(pos, dtype=torch.float32)
        model.transformer.wte.weight.copy_(wte)
        model.transformer.wpe.weight.copy_(wpe)
        # layer 0, head 0: query of i = position code of i - 1, key = position code; value = token
        # block; output into the previous-token block.
        c0 = model.transformer.h[0].attn.c_attn.weight  # (d, 3d)
        shift = np.vstack([np.zeros(pos_block), pos[:-1]])  # (T, 64): code of i - 1 (none for i = 1)
        c0[P0, 0:pos_block] = scale * torch.tensor(pos.T @ shift, dtype=torch.float32)
        c0[P0, d : d + pos_block] = torch.eye(pos_block)
        c0[T0, 2 * d : 2 * d + tok_block] = torch.eye(tok_block)
        proj0 = model.transformer.h[0].attn.c_proj.weight  # (d, d): head output -> residual
        proj0[0:tok_block, R0] = torch.eye(tok_block)
        # layer 1, head 0: query = current token, key = previous token block
        c1 = model.transformer.h[1].attn.c_attn.weight
        c1[T0, 0:tok_block] = scale * torch.eye(tok_block)
        c1[R0, d : d + tok_block] = torch.eye(tok_block)
    es = eval_set(vocab, 2, t)
    s = stats_of(model, es, 2, heads)
    assert s["prev_token"][0, 0] > 0.99
    assert s["induction"][1, 0] > 0.9
    r = es.info.induction_repeat
    baseline = np.mean([1 / (r + k) for k in range(1, r)])
    assert s["induction"][1, 1] == pytest.approx(baseline, rel=1e-5)  # head 1 has a zero query
    rand = neox(2, 4, vocab=vocab, seed=5)
    rs = stats_of(rand, es, 2, 4)
    np.testing.assert_allclose(rs["induction"], baseline, rtol=0.3)


# ---------------------------------------------------------------- the loss, the math, the eval set


def test_the_loss_equals_the_models_own_labels_loss() -> None:
    model = neox(seed=3)
    es = eval_set(64, 5, 20, seed=4)
    s = stats_of(model, es, 2, 4)
    ids = torch.from_numpy(es.tokens)
    with torch.no_grad():
        expected = float(model(input_ids=ids, labels=ids).loss)
    assert s["loss"] == pytest.approx(expected, rel=1e-5)
    assert s["tokens"] == 5 * 19


def random_attention(b: int, h: int, t: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, h, t, t, generator=g, dtype=torch.float64) * 2
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_attention_sums_match_plain_loops(dtype) -> None:
    b, h, t = 3, 2, 7
    alpha = random_attention(b, h, t, seed=1).to(dtype)
    sums = AttentionSums(1, h, t)
    sums.add(0, alpha)
    sums.next_batch(b)
    got = sums.head_statistics()
    a = alpha.double().numpy()
    tol = 1e-10 if dtype == torch.float64 else 3e-3
    for head in range(h):
        ent, span, sink, prev = [], [], [], []
        for seq in range(b):
            for i in range(t):
                row = a[seq, head, i, : i + 1]
                ent.append(-sum(p * math.log2(p) for p in row if p > 0))
                span.append(sum(row[j] * (i - j) for j in range(i + 1)))
                sink.append(row[0])
                if i > 0:
                    prev.append(row[i - 1])
        assert float(got["entropy"][0, head]) == pytest.approx(np.mean(ent), abs=tol)
        assert float(got["entropy_std"][0, head]) == pytest.approx(np.std(ent), abs=max(tol, 1e-7))
        assert float(got["span"][0, head]) == pytest.approx(np.mean(span), abs=tol)
        assert float(got["sink"][0, head]) == pytest.approx(np.mean(sink), abs=tol)
        assert float(got["prev_token"][0, head]) == pytest.approx(np.mean(prev), abs=tol)
    p = sums.offset_distributions()[0].numpy()
    expected = np.zeros(t)
    for i in range(t):
        for j in range(i + 1):
            expected[i - j] += a[:, :, i, j].sum()
    np.testing.assert_allclose(p, expected / (b * h * t), atol=tol)
    assert p.sum() == pytest.approx(1.0, abs=1e-9 if dtype == torch.float64 else 1e-3)


def test_js_divergence_matches_its_definition() -> None:
    p = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0], [0.2, 0.3, 0.5]])
    got = js_divergence(torch.tensor(p)).numpy()

    def kl(x, y):
        return sum(a * math.log2(a / b) for a, b in zip(x, y, strict=True) if a > 0)

    for a in range(3):
        for b in range(3):
            m = (p[a] + p[b]) / 2
            assert got[a, b] == pytest.approx(0.5 * kl(p[a], m) + 0.5 * kl(p[b], m), abs=1e-12)
    assert got[0, 1] == pytest.approx(1.0)  # disjoint supports: 1 bit


def test_induction_scores_read_the_token_after_the_first_occurrence() -> None:
    r = 4
    alpha = torch.zeros(1, 1, 2 * r, 2 * r)
    for i in range(2 * r):
        alpha[0, 0, i, 0] = 1.0
    for k in range(1, r):  # 1-based: R + k -> k + 1
        alpha[0, 0, r + k - 1] = 0.0
        alpha[0, 0, r + k - 1, k] = 1.0
    assert float(induction_scores(alpha, r)[0]) == pytest.approx(1.0)


def test_the_eval_set_is_seeded_windows_and_refuses_short_texts() -> None:
    ids = np.arange(1000)
    a = make_eval_set(ids, n=4, t=16, vocab_size=1000, text="x", text_sha256="s", tokenizer="t")
    b = make_eval_set(ids, n=4, t=16, vocab_size=1000, text="x", text_sha256="s", tokenizer="t")
    assert np.array_equal(a.tokens, b.tokens) and a.info == b.info
    assert a.tokens.shape == (4, 16)
    firsts = a.tokens[:, 0]
    assert (firsts % 16 == 0).all() and len(set(firsts.tolist())) == 4  # distinct non-overlapping windows
    assert all(np.array_equal(row, np.arange(row[0], row[0] + 16)) for row in a.tokens)
    r = a.info.induction_repeat
    assert r == 8 and np.array_equal(a.induction[:, :r], a.induction[:, r:])
    with pytest.raises(EvalTextError, match="fewer than N x T"):
        make_eval_set(ids[:63], n=4, t=16, vocab_size=1000, text="x", text_sha256="s", tokenizer="t")
    with pytest.raises(EvalTextError, match="vocabulary"):
        make_eval_set(ids, n=4, t=16, vocab_size=10, text="x", text_sha256="s", tokenizer="t")
