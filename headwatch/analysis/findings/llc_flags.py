"""Whether a run's refined-LLC estimates can be trusted, as the Refined LLC page and ``headwatch report`` both say it:
how many estimates hold each flag of `analysis.llc.diagnostics` (a negative estimate is ``negative``, never
``converged``), and what the negative ones mean and what to change.

Pure: takes the flags `analysis.llc.diagnostics.store_flags` gives, returns counts and sentences.
"""

from __future__ import annotations

import numpy as np

from headwatch.analysis.llc.diagnostics import FLAGS, NEGATIVE_NOTE


def flag_totals(heads: np.ndarray, model: np.ndarray) -> dict[str, int]:
    """How many estimates, heads and whole model together, hold each flag.

    Args:
        heads: ``(E, n_layers, n_heads)`` the heads' flags (``""``: no estimate or no diagnostics).
        model: ``(E,)`` the whole model's.

    Returns:
        Every flag of `FLAGS`, in its order, with its count (0 included).
    """
    given = [str(f) for f in np.concatenate([np.asarray(heads, dtype=object).ravel(), np.asarray(model, dtype=object)])]
    return {f: sum(g == f for g in given) for f in FLAGS}


def flag_totals_text(heads: np.ndarray, model: np.ndarray, *, explain: bool = True) -> str:
    """The flags over every estimate of a run in one sentence, then what the negative ones mean and what to change
    (`NEGATIVE_NOTE`) when there are any: ``850 estimates (16 heads and the whole model at 50 checkpoints): 685
    converged, 57 still rising, 32 still falling, 26 negative. ...``.

    Args:
        heads, model: as `flag_totals`, over the checkpoints with estimates.
        explain: add what the negative estimates mean and what to change (the page says it in its warnings).
    """
    counts = flag_totals(heads, model)
    n = sum(counts.values())
    listed = ", ".join(f"{c:,} {f}" for f, c in counts.items() if c) or "none flagged"
    e, n_layers, n_heads = np.asarray(heads).shape
    at = f"{e} checkpoint" + ("" if e == 1 else "s")
    text = f"{n:,} estimates ({n_layers * n_heads} heads and the whole model at {at}): {listed}."
    if counts["negative"]:
        one = counts["negative"] == 1
        them = "The negative estimate" if one else f"The {counts['negative']:,} negative estimates"
        text += (
            f" {them}: {NEGATIVE_NOTE.removeprefix('negative: ')}."
            if explain
            else f" {them} {'is' if one else 'are'} never counted as converged, however flat {'its' if one else 'their'} traces."
        )
    return text
