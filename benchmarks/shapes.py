"""Model shapes the benchmarks time, as transformers configs (imported where a benchmark needs transformers)."""

from __future__ import annotations

from typing import Any


def pythia_160m_config() -> Any:
    """Pythia-160M's shape (GPT-NeoX: 12 layers of 12 heads, d_model 768, rotary on a quarter of each head,
    the 50,304-token vocabulary): a `transformers.GPTNeoXConfig`, its weights left to the caller's seed."""
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=50304,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=2048,
        rotary_pct=0.25,
    )
