"""View state <-> query string: parse raw URL values against the allowed options, and encode back.

Pure functions, no streamlit: `dashboard.viewstate` feeds them ``st.query_params``
and shows the notices they return. Every parameter is matched by its string
form, so an option may be an int (``layer=3``), a string (``stat=std``) or a
bool (``logc=1``); anything not among the options falls back to the default
with a notice that quotes the bad value (cut to `MAX_QUOTED` characters) and says
what is allowed. A repeatable parameter keeps each value once (a repeated one with a
notice) and at most the number of values its widget allows, the first ones of the link.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The parameter names shared by every page (page-specific toggles add their own).
LAYER, HEAD, K, STEP, STAT, RUN = "layer", "head", "k", "step", "stat", "run"
MAX_QUOTED = 60  # characters of a bad value a notice quotes; a longer one is cut and its length given


def quote(text: str) -> str:
    """``text`` as a notice quotes it: in backticks, cut to `MAX_QUOTED` characters with its length when longer.

    ``quote("x" * 8000)`` -> ``"`xxx…` (8,000 characters)"``: a link with a huge bad value must not
    turn its notice into several screens of text.
    """
    if len(text) <= MAX_QUOTED:
        return f"`{text}`"
    return f"`{text[:MAX_QUOTED]}…` ({len(text):,} characters)"


def quote_value(name: str, raw: str) -> str:
    """``name=raw`` as a notice quotes it (`quote`; the value is what gets cut)."""
    if len(raw) <= MAX_QUOTED:
        return f"`{name}={raw}`"
    return f"`{name}={raw[:MAX_QUOTED]}…` ({len(raw):,} characters)"


def encode(value: Any) -> str:
    """One option's URL form: ``True`` -> ``"1"``, ``3`` -> ``"3"``, ``"std"`` -> ``"std"``."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _lookup(options: Sequence[Any]) -> dict[str, Any]:
    table = {encode(o): o for o in options}
    if all(isinstance(o, bool) for o in options):
        table.update({"true": True, "false": False, "on": True, "off": False})
    return table


def describe_options(options: Sequence[Any], *, limit: int = 8, fmt: Callable[[Any], str] | None = None) -> str:
    """Short human list of the allowed values: ``0 to 23`` for a run of ints, else the first few. With ``fmt`` (how
    the widget shows each option), a value or two whose label does not show it are named with their meaning after
    the rest: ``0 to 3, or -1 for every head`` (the similarity page's layers; ``-1 to 3`` left -1 unexplained)."""
    special = [o for o in options if _label_hides(o, fmt)]
    if fmt is not None and special and len(special) <= 2 and len(special) < len(options):
        regular = [o for o in options if o not in special]
        return describe_options(regular, limit=limit) + ", or " + ", ".join(f"{encode(o)} for {fmt(o)}" for o in special)
    if not options:
        return "nothing"
    if all(isinstance(o, int) and not isinstance(o, bool) for o in options):
        ints = list(options)
        if ints == list(range(ints[0], ints[0] + len(ints))) and len(ints) > 2:
            return f"{ints[0]} to {ints[-1]}"
    shown = ", ".join(encode(o) for o in options[:limit])
    return shown + (f", ... ({len(options)} in all)" if len(options) > limit else "")


@dataclass(frozen=True)
class Parsed:
    """A parameter's resolved value and, when the URL asked for something invalid, why it was ignored."""

    value: Any
    notice: str | None = None


def parse_one(
    name: str, raw: Sequence[str], options: Sequence[Any], default: Any, *, fmt: Callable[[Any], str] | None = None
) -> Parsed:
    """Resolve a single-valued parameter.

    Args:
        name: the parameter name (quoted in the notice).
        raw: every value the URL gives for it (the last one counts).
        options: allowed values.
        default: used when the URL has none or an invalid one; must be in ``options``.
        fmt: how the widget shows an option: the notice names a value whose label does not show it by its meaning
            (`describe_options`).

    Returns:
        The value and a notice when the URL's value was not allowed.
    """
    assert default in options or not options, (name, default)
    if not raw:
        return Parsed(default)
    table = _lookup(options)
    text = raw[-1].strip()
    if text in table:
        return Parsed(table[text])
    if _not_yet(name, [text], options):
        return Parsed(
            default,
            f"{quote_value(name, raw[-1])} is not in this run yet: its last checkpoint is step {options[-1]:,}. "
            f"A run still training adds later checkpoints as they are saved; showing {name}={encode(default)}.",
        )
    return Parsed(
        default,
        f"{quote_value(name, raw[-1])} is not valid here (allowed: {describe_options(options, fmt=fmt)}); "
        f"showing {name}={encode(default)}{_meaning(default, fmt)}.",
    )


def _label_hides(value: Any, fmt: Callable[[Any], str] | None) -> bool:
    """Whether the widget's label for ``value`` (``fmt``) does not show the value itself (-1 shown as "every head")."""
    return fmt is not None and encode(value) not in fmt(value).replace(",", "")


def _meaning(value: Any, fmt: Callable[[Any], str] | None) -> str:
    """`` (every head)`` after a value whose label does not show it (`describe_options`), else nothing."""
    return f" ({fmt(value)})" if fmt is not None and _label_hides(value, fmt) else ""


def _not_yet(name: str, texts: Sequence[str], options: Sequence[Any]) -> bool:
    """Whether every one of ``texts`` is a step later than the run's last checkpoint (a link made from a
    run further along, or ahead of a run that still trains)."""
    if name != STEP or not options or not all(isinstance(o, int) and not isinstance(o, bool) for o in options):
        return False
    try:
        return all(int(t.strip()) > max(options) for t in texts)
    except ValueError:
        return False


def parse_many(
    name: str,
    raw: Sequence[str],
    options: Sequence[Any],
    default: Sequence[Any],
    *,
    hint: str | None = None,
    most: int | None = None,
    left_out: Mapping[str, str] | None = None,
) -> Parsed:
    """Resolve a repeatable parameter (``step=64&step=1000``): keep the valid values, in option order.

    Invalid values are dropped with a notice (``hint``, what to do about them, appended); if none is
    valid the default list is used. A value the link gives more than once is kept once, and the notice
    says so. With ``most``, only the first ``most`` valid values of the link are kept (a widget's
    ``max_selections``) and the notice names the rest. ``left_out``: values (as the URL spells them) that
    are not options here for a reason the notice gives (the page's own run among the runs joined with it,
    ``"is this page's own run"``); each is dropped and the link's other values are kept.
    """
    if not raw:
        return Parsed(list(default))
    table = _lookup(options)
    left_out = left_out or {}
    good: list[Any] = []
    repeated: dict[str, int] = {}  # a valid value given more than once -> how often
    for r in raw:
        if r.strip() in table:
            if table[r.strip()] in good:
                repeated[encode(table[r.strip()])] = repeated.get(encode(table[r.strip()]), 1) + 1
            else:
                good.append(table[r.strip()])
    dropped = good[most:] if most is not None else []
    good = good[:most] if most is not None else good
    left = list(dict.fromkeys(r.strip() for r in raw if r.strip() not in table and r.strip() in left_out))
    bad = [r for r in raw if r.strip() not in table and r.strip() not in left_out]
    value = [o for o in options if o in good] or list(default)
    notes = []
    if bad:
        what = ", ".join(quote_value(name, b) for b in bad[:5]) + (" ..." if len(bad) > 5 else "")
        tail = "ignored" if good else f"showing the default {name if name.endswith('s') else name + 's'}"
        if _not_yet(name, bad, options):
            notes.append(
                f"{what} not in this run yet: its last checkpoint is step {max(options):,}. A run still training adds "
                f"later checkpoints as they are saved; {tail}."
            )
        else:
            notes.append(f"{what} not valid here (allowed: {describe_options(options)}); {tail}." + (f" {hint}" if hint else ""))
    notes += [f"{quote_value(name, r)} {left_out[r]}." for r in left]
    if repeated:
        what = ", ".join(f"{quote_value(name, r)} ({n} times)" for r, n in list(repeated.items())[:5])
        notes.append(f"The link repeats {what}{' ...' if len(repeated) > 5 else ''}: each is shown once.")
    if dropped:
        what = ", ".join(quote_value(name, encode(d)) for d in dropped[:5]) + (" ..." if len(dropped) > 5 else "")
        notes.append(f"At most {most} values of `{name}` fit here: keeping the link's first {most}, leaving out {what}.")
    return Parsed(value, " ".join(notes) or None)


def query_string(params: dict[str, Any]) -> str:
    """``{"layer": 3, "step": [0, 64]}`` -> ``layer=3&step=0&step=64`` (values URL-quoted)."""
    from urllib.parse import quote

    parts = []
    for name, value in params.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        parts += [f"{quote(name)}={quote(encode(v), safe='')}" for v in values]
    return "&".join(parts)
