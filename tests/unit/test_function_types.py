"""analysis.attention.function_types: the measurable-effect rule, the frequent n-grams and base rate against a brute-force
count, the binomial tail against scipy, and the multigram rule on planted heads where it must hold and where it must
not."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from headwatch.analysis.attention.function_types import (
    ALPHA,
    COVERAGE,
    FLOOR,
    K_SE,
    binomial_tail,
    function_type_frames,
    intern,
    lookup,
    measurable,
    measurable_level,
    multigram_rule,
    ngram_counts,
)

PHRASES = ["good night ", "thou art "]
LETTERS = "bcfjkmpqvwxyz"  # not in the phrases


def planted_text(seed: int, length: int) -> str:
    """Set phrases among random letters: their n-grams are the text's most frequent ones."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while sum(len(piece) for piece in out) < length:
        if rng.random() < 0.85:
            out.append(PHRASES[rng.integers(len(PHRASES))])
        else:
            out.append("".join(rng.choice(list(LETTERS), size=5)))
    return "".join(out)[:length]


def brute_frequent(segments: list[list[int]], n: int, coverage: float) -> dict[tuple[int, ...], int]:
    counts = Counter(tuple(s[i : i + n]) for s in segments for i in range(len(s) - n + 1))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    total, kept, out = sum(counts.values()), 0, {}
    for gram, count in ranked:
        if kept >= coverage * total - 1e-9:
            break
        out[gram] = count
        kept += count
    return out


def test_the_measurable_level_and_its_hysteresis() -> None:
    sem = np.array([0.001, 0.01, np.nan])
    assert measurable_level(sem).tolist()[:2] == [FLOOR, K_SE * 0.01] and np.isnan(measurable_level(sem)[2])
    # one head, effects over checkpoints with a standard error of 0.002: the level is the floor, 0.01
    increase = np.array([0.002, 0.012, 0.008, 0.005, 0.02, np.nan])[:, None]
    level, above, holds = measurable(increase, np.full_like(increase, 0.002))
    assert np.allclose(level, FLOOR)
    assert above[:, 0].tolist() == [False, True, False, False, True, False]
    # in at 0.012, kept at 0.008 (>= 2/3 x 0.01), out at 0.005, in again at 0.02, nothing at NaN
    assert holds[:, 0].tolist() == [False, True, True, False, True, False]
    # a large effect with a larger error does not count: 0.05 < 3 x 0.02
    _, above, _ = measurable(np.array([[0.05]]), np.array([[0.02]]))
    assert not above.any()


def test_frequent_ngrams_and_base_rate_against_brute_force() -> None:
    index: dict[str, int] = {}
    segments = [intern(list(planted_text(seed, 600)), index) for seed in range(3)]
    counts = ngram_counts(segments)
    lists = [s.tolist() for s in segments]
    for n in (2, 3, 4):
        assert counts.frequent[n] == brute_frequent(lists, n, COVERAGE), n
        assert counts.distinct[n] == len({tuple(s[i : i + n]) for s in lists for i in range(len(s) - n + 1)})
    # base rate: the share of tokens (each with one before it) whose n-gram ending there is frequent for some n
    explained = total = 0
    for s in lists:
        for p in range(1, len(s)):
            total += 1
            explained += any(p >= n - 1 and tuple(s[p - n + 1 : p + 1]) in counts.frequent[n] for n in (2, 3, 4))
    assert counts.base_rate == pytest.approx(explained / total, abs=1e-12)
    assert counts.tokens == 1800
    # codes too large to pack four into an int64 take np.unique's row path: the same n-grams
    shift = 1 << 20
    wide = ngram_counts([s + shift for s in segments])
    for n in (2, 3, 4):
        assert {tuple(c - shift for c in g): k for g, k in wide.frequent[n].items()} == counts.frequent[n]
    assert wide.base_rate == counts.base_rate
    # the phrases' n-grams are the frequent ones; the random letters' are not
    assert counts.explained_order(lookup(list("thou a"), index))[0] == 4
    assert counts.explained_order(lookup(list("qxzjb"), index)) == (0, 0)
    assert counts.explained_order(lookup(list("€x"), index)) == (0, 0)  # a token the sample never had
    with pytest.raises(ValueError, match="at least 2"):
        ngram_counts(segments, orders=(1, 2))
    with pytest.raises(ValueError, match="no 2-gram"):
        ngram_counts([np.array([1])])


@pytest.mark.parametrize(("k", "m", "p"), [(0, 20, 0.5), (15, 20, 0.5), (20, 20, 0.9), (3, 20, 0.01), (21, 20, 0.5)])
def test_the_binomial_tail_is_scipys(k: int, m: int, p: float) -> None:
    assert binomial_tail(k, m, p) == pytest.approx(float(stats.binom.sf(k - 1, m, p)), rel=1e-12, abs=1e-300)


def test_the_multigram_rule_on_planted_heads() -> None:
    index: dict[str, int] = {}
    sample = [intern(list(planted_text(seed, 4000)), index) for seed in range(4)]
    counts = ngram_counts(sample)
    assert 0.2 < counts.base_rate < 0.9
    held_out = planted_text(99, 4000)
    codes = lookup(list(held_out), index)
    # a planted multigram head: its top contexts end inside the set phrases (the target continues "thou a" -> "r")
    ends = [i for i in range(8, len(held_out)) if held_out[i - 3 : i + 1] in {"thou", "hou ", "ou a", "u ar"}][:20]
    assert len(ends) == 20
    positive = np.array([counts.explained_order(codes[e - 7 : e + 1])[0] > 0 for e in ends])
    decision = multigram_rule(positive, counts.base_rate)
    assert decision.share == 1.0 and decision.p_value <= ALPHA and decision.multigram
    # a head whose contexts end in the random letters: not a multigram head
    letters = [i for i in range(8, len(held_out)) if set(held_out[i - 4 : i + 1]) <= set(LETTERS)]
    negative = np.array([counts.explained_order(codes[e - 7 : e + 1])[0] > 0 for e in letters[:20]])
    assert not multigram_rule(negative, counts.base_rate).multigram
    # a head whose contexts are the text's own tokens at random: explained at about the base rate, not more
    rng = np.random.default_rng(5)
    for _ in range(20):
        picks = rng.choice(np.arange(8, len(held_out)), size=20, replace=False)
        chance = np.array([counts.explained_order(codes[e - 7 : e + 1])[0] > 0 for e in picks])
        assert chance.mean() < counts.base_rate + 0.35
    at_base = np.zeros(20, bool)
    at_base[: int(np.ceil(counts.base_rate * 20))] = True
    assert not multigram_rule(at_base, counts.base_rate).multigram
    # at least half explained is needed even where the base rate is tiny
    few = np.zeros(20, bool)
    few[:9] = True
    assert multigram_rule(few, 0.01).p_value < ALPHA and not multigram_rule(few, 0.01).multigram
    with pytest.raises(ValueError, match="base rate"):
        multigram_rule(few, 1.5)


def test_function_types_on_planted_heads() -> None:
    steps = np.array([0, 100, 200, 300])
    s, n_layers, n_heads = 4, 1, 5
    increase = np.zeros((s, n_layers, n_heads))
    sem = np.full((s, n_layers, n_heads), 0.001)
    increase[:, 0, 0] = [0.0, 0.05, 0.06, 0.07]  # a multigram head from step 100
    increase[:, 0, 1] = [0.0, 0.05, 0.06, 0.07]  # the same effect, contexts not n-grams: other
    increase[:, 0, 2] = [0.0, 0.05, 0.06, 0.07]  # the same effect, but an attention type: neither
    increase[:, 0, 3] = [0.0, 0.005, 0.005, 0.005]  # below the floor: neither
    increase[:, 0, 4] = [0.0, 0.05, 0.06, 0.07]
    sem[:, 0, 4] = 0.03  # within 3 standard errors of zero: neither
    context_index = np.array([1, 3])  # contexts kept at steps 100 and 300
    untyped = np.ones((2, n_layers, n_heads), bool)
    untyped[:, 0, 2] = False
    multigram = np.zeros((2, n_layers, n_heads), bool)
    multigram[:, 0, [0, 2, 3, 4]] = True
    types, emergence = function_type_frames(steps, increase, sem, context_index, untyped, multigram)
    names = [frame["type"].iloc[0] for frame in types]
    assert names == ["multigram", "other"]
    held = {name: frame[frame["holds"]] for name, frame in zip(names, types, strict=True)}
    assert set(held["multigram"]["head"]) == {0} and set(held["multigram"]["step"]) == {100, 300}
    assert set(held["other"]["head"]) == {1}
    emerged = {name: frame.dropna(subset=["emergence_step"]) for name, frame in zip(names, emergence, strict=True)}
    assert emerged["multigram"][["head", "emergence_step"]].values.tolist() == [[0, 100]]
    assert emerged["other"][["head", "emergence_step"]].values.tolist() == [[1, 100]]
    multi = types[0]
    assert set(multi["step"]) == {100, 300}  # rows at the checkpoints with contexts only
    assert np.allclose(multi["null"], np.maximum(FLOOR, K_SE * sem[[1, 3]].reshape(-1)))
    with pytest.raises(ValueError, match="ascending"):
        function_type_frames(steps, increase, sem, np.array([3, 1]), untyped, multigram)


def test_byte_tokens_are_compared_as_the_ablation_lens_writes_them() -> None:
    from headwatch.precompute.evalset import BYTE_TOKENIZER
    from headwatch.precompute.lenses.ablation import _decoder
    from headwatch.precompute.ngrams import token_text

    theirs = _decoder(BYTE_TOKENIZER)
    assert [token_text(i) for i in range(256)] == [theirs(i) for i in range(256)]
    assert len({token_text(i) for i in range(256)}) == 256  # every byte its own text


def test_a_head_with_too_few_text_contexts_is_not_judged() -> None:
    from headwatch.analysis.attention.function_types import MIN_TEXT_CONTEXTS

    # 4 of 4 explained at a base rate of a half: tail 0.0625 > ALPHA, and under the minimum anyway
    small = multigram_rule(np.ones(MIN_TEXT_CONTEXTS - 1, bool), 0.01)
    assert small.too_few and not small.multigram and small.contexts == MIN_TEXT_CONTEXTS - 1
    enough = multigram_rule(np.ones(MIN_TEXT_CONTEXTS, bool), 0.5)
    assert not enough.too_few and enough.multigram and enough.p_value == pytest.approx(0.5**MIN_TEXT_CONTEXTS)
    assert binomial_tail(4, 4, 0.5) > ALPHA  # why the minimum is 5
