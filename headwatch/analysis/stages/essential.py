"""Essential dynamics: the trajectory of a model's outputs on fixed inputs, in its leading principal components
(Hoogland et al. 2024, who check the LLC's stages against it; docs/stages.md).

At every checkpoint t the model's next-token log-probabilities on a fixed sample are one vector o_t of D numbers:
``n`` sequences, at ``positions`` of each, for a fixed subset of ``k`` tokens (`token_subset`), in (sequence,
position, token) order. Stacked over checkpoints they are the (T, D) matrix O. Its principal components over
checkpoints are those of the centred matrix ``X = O - mean_t(O)``: with the thin SVD ``X = U S V^T``, the score of
checkpoint t on component j is ``U[t, j] S[j]`` (its coordinate along the j-th direction V[:, j] of output space) and
the component explains ``S[j]^2 / sum(S^2)`` of the variance. The trajectory is the path of the scores.

The path is read as Hoogland et al. read it. Its scores are first smoothed over checkpoints by a Gaussian filter
(`scipy.ndimage.gaussian_filter1d`, standard deviation `SMOOTHING` checkpoints, the ends held at the nearest value):
the path is parametrised by the checkpoint's index t, and the filter keeps the jitter of neighbouring checkpoints from
turning it. On the smoothed path x(t), with derivatives by central differences over t (`numpy.gradient`): its speed
``|x'(t)|`` (nats per checkpoint, in the stored components); its turn, the angle between ``x(t) - x(a)`` and
``x(b) - x(t)`` with a and b the checkpoints `ARC` of the path's length before and after t along it (a window in
length, not in checkpoints, since a path that halts to turn covers little ground in a few checkpoints); in the plane
of the first two components its curvature ``kappa = |x'y'' - y'x''| / (x'^2 + y'^2)^(3/2)`` and the centre of its
osculating circle, the point plus the unit normal (towards the turn) over kappa (the centres trace its evolute).

A cusp is where the path slows to a halt and sets off in another direction: a checkpoint whose speed is the least
within `WINDOW` checkpoints either side (a minimum of the speed, away from the ends; of minima closer than `ARC` of the
path's length along it, the slowest) and where the path turns by more than `TURN_DEGREES`. Each such minimum is a
turn, reported with its angle, its speed and the path's length on its shorter side; its verdict has a margin, so
that no verdict sits on the rule's edge: ``cusp`` when the angle exceeds the limit by more than `MARGIN_DEGREES`,
``near`` when it is within that margin of the limit, ``none`` below it or where a side of the path is shorter than
`ARC` of its length (the stalled end of training, whose jitter turns every way, is not read). "No cusp" is said of a
path only where no turn is a cusp or near one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.ndimage import gaussian_filter1d

from headwatch.analysis.store.lenses.essential import ESSENTIAL
from headwatch.analysis.store.lenses.essential import (
    SEQUENCES as SEQUENCES,  # sequences of each kind (evaluation text, induction probe) in the sample
)

POSITIONS = 8  # positions per sequence, evenly spaced
TOKENS = 128  # tokens of the vocabulary whose log-probabilities are kept (all of a smaller vocabulary)
COMPONENTS = 3  # principal components stored per checkpoint
WINDOW = 2  # checkpoints on each side within which a minimum of the speed is the least (a turn is over `ARC`)
TURN_DEGREES = 90.0  # the turn beyond which a speed minimum is a cusp
ARC = 0.05  # a turn is measured over this share of the path's length on either side
SMOOTHING = 1.0  # the Gaussian filter's standard deviation, in checkpoints
MARGIN_DEGREES = 15.0  # a verdict's margin on the angle
Verdict = Literal["cusp", "near", "none"]


def sample_positions(length: int, *, count: int = POSITIONS) -> np.ndarray:
    """``count`` positions of a sequence of ``length`` tokens, evenly spaced from the first position that has a
    token before it to the last that predicts one (1 .. length - 2), each once.

    Raises:
        ValueError: a sequence shorter than 3 tokens.
    """
    if length < 3:
        raise ValueError(f"sequences of {length} tokens: essential dynamics needs at least 3")
    return np.unique(np.round(np.linspace(1, length - 2, count)).astype(np.int64))


def token_subset(targets: np.ndarray, vocab_size: int, *, size: int = TOKENS) -> np.ndarray:
    """The tokens whose log-probabilities are kept, sorted: every token when the vocabulary has at most ``size``;
    else the ``size`` tokens that occur most often among ``targets`` (the sample's next tokens; ties to the lower
    id, then the lowest ids that never occur). The log-probability of a token the sample never predicts moves
    mostly with the unigram statistics; the frequent tokens are where the model's predictions change, and a fixed
    number keeps a checkpoint's bytes independent of the vocabulary (Pythia's 50,304 tokens would be 50,304
    numbers per position)."""
    if vocab_size <= size:
        return np.arange(vocab_size, dtype=np.int64)
    counts = np.bincount(np.asarray(targets, dtype=np.int64).ravel(), minlength=vocab_size)[:vocab_size]
    order = np.lexsort((np.arange(vocab_size), -counts))  # most frequent first, lower id first among equals
    return np.sort(order[:size]).astype(np.int64)


def principal_components(outputs: np.ndarray, *, components: int = COMPONENTS) -> tuple[np.ndarray, np.ndarray]:
    """The trajectory's scores on its leading principal components over checkpoints (module docstring), by
    scikit-learn's PCA (full SVD), with each component's sign fixed so that its largest-magnitude score is positive.

    Args:
        outputs: ``(T, D)`` the outputs per checkpoint, T >= 2.
        components: how many to keep (fewer when T - 1 or D is smaller).

    Returns:
        ``scores`` ``(T, K)`` float64 and ``explained`` ``(K,)`` the fraction of the variance each explains.

    Raises:
        ValueError: fewer than 2 checkpoints, or non-finite outputs.
    """
    from sklearn.decomposition import PCA

    x = np.asarray(outputs, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"outputs of shape {x.shape}: principal components over checkpoints need (T >= 2, D)")
    if not np.all(np.isfinite(x)):
        raise ValueError("outputs hold non-finite values: a checkpoint's log-probabilities diverged")
    k = min(components, x.shape[0] - 1, x.shape[1])
    pca = PCA(n_components=k, svd_solver="full")
    scores = pca.fit_transform(x)  # (T, K)
    flip = np.sign(scores[np.argmax(np.abs(scores), axis=0), np.arange(k)])
    flip[flip == 0] = 1.0
    return scores * flip, np.asarray(pca.explained_variance_ratio_, dtype=np.float64)


def smoothed(scores: np.ndarray, *, sigma: float = SMOOTHING) -> np.ndarray:
    """The path's scores ``(T, K)`` smoothed over checkpoints by a Gaussian filter of standard deviation ``sigma``
    checkpoints (`scipy.ndimage.gaussian_filter1d`, mode ``nearest``); ``sigma = 0`` returns them as they are."""
    x = np.asarray(scores, dtype=np.float64)
    if sigma < 0:
        raise ValueError(f"sigma={sigma!r}: a filter's width is 0 or more checkpoints")
    return gaussian_filter1d(x, sigma, axis=0, mode="nearest") if sigma > 0 and len(x) > 1 else x.copy()


def speed(path: np.ndarray) -> np.ndarray:
    """``|x'(t)|`` per checkpoint of a path ``(T, K)``: central differences over the checkpoint index (one-sided at
    the ends), ``(T,)``."""
    x = np.asarray(path, dtype=np.float64)
    if len(x) < 2:
        return np.zeros(len(x))
    return np.linalg.norm(np.gradient(x, axis=0), axis=1)


def curvature(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The curvature of the plane path (x(t), y(t)) and the centres of its osculating circles.

    ``kappa = |x'y'' - y'x''| / (x'^2 + y'^2)^(3/2)`` with derivatives by central differences over t; the centre is
    the point plus the unit normal towards the turn over kappa: ``(x - y' v^2 / c, y + x' v^2 / c)`` with
    ``c = x'y'' - y'x''`` and ``v^2 = x'^2 + y'^2`` (the evolute). NaN where the path stands still (kappa) or runs
    straight (the centre, at infinity).

    Returns:
        kappa, centre_x, centre_y, each ``(T,)``.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 3:
        nan = np.full(len(x), np.nan)
        return nan, nan.copy(), nan.copy()
    dx, dy = np.gradient(x), np.gradient(y)
    ddx, ddy = np.gradient(dx), np.gradient(dy)
    cross = dx * ddy - dy * ddx
    v2 = dx**2 + dy**2
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(v2 > 0, np.abs(cross) / v2**1.5, np.nan)
        cx = np.where(cross != 0, x - dy * v2 / cross, np.nan)
        cy = np.where(cross != 0, y + dx * v2 / cross, np.nan)
    return kappa, cx, cy


def turning_angles(scores: np.ndarray, *, window: int = WINDOW) -> np.ndarray:
    """Per checkpoint, the angle in degrees between ``x_t - x_{t-w}`` and ``x_{t+w} - x_t`` (NaN within w of either
    end or where a displacement is zero)."""
    x = np.asarray(scores, dtype=np.float64)
    out = np.full(len(x), np.nan)
    for t in range(window, len(x) - window):
        a, b = x[t] - x[t - window], x[t + window] - x[t]
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        if na > 0 and nb > 0:
            out[t] = np.degrees(np.arccos(np.clip(a @ b / (na * nb), -1.0, 1.0)))
    return out


def arc_turns(path: np.ndarray, *, arc: float = ARC) -> tuple[np.ndarray, np.ndarray]:
    """Per checkpoint t of a path ``(T, K)``, the angle in degrees between ``x(t) - x(a)`` and ``x(b) - x(t)``, where
    a is the last checkpoint at least ``arc`` of the path's length before t (along the path) and b the first at least
    as far after it; and the path's length on t's shorter side, as a share of its whole length. NaN angle where
    either side is shorter than ``arc`` or a displacement is zero. A window in length along the path, not in
    checkpoints: where the path slows to a halt, a window of a few checkpoints would see only the halt."""
    x = np.asarray(path, dtype=np.float64)
    n = len(x)
    hops = np.linalg.norm(np.diff(x, axis=0), axis=1) if n > 1 else np.zeros(0)
    length = np.concatenate([[0.0], np.cumsum(hops)])  # (T,) the length travelled to each checkpoint
    total = float(length[-1]) if n else 0.0
    angle = np.full(n, np.nan)
    side = np.zeros(n)
    if not total > 0:
        return angle, side
    side = np.minimum(length, total - length) / total
    for t in range(n):
        before = np.flatnonzero(length <= length[t] - arc * total)
        after = np.flatnonzero(length >= length[t] + arc * total)
        if not (len(before) and len(after)):
            continue
        u, v = x[t] - x[before[-1]], x[after[0]] - x[t]
        nu, nv = np.linalg.norm(u), np.linalg.norm(v)
        if nu > 0 and nv > 0:
            angle[t] = np.degrees(np.arccos(np.clip(u @ v / (nu * nv), -1.0, 1.0)))
    return angle, side


@dataclass(frozen=True)
class Turn:
    """A minimum of the smoothed path's speed (module docstring).

    Attributes:
        index: the checkpoint's position in the path.
        angle: the turn there, degrees, over `ARC` of the path's length either side (`arc_turns`; NaN where a side
            is shorter).
        speed: the smoothed path's speed there, nats per checkpoint.
        travel: the path's length on the shorter side of it, as a share of its whole length.
        verdict: ``cusp``, ``near`` (within the margin of the rule's edge) or ``none``.
    """

    index: int
    angle: float
    speed: float
    travel: float
    verdict: Verdict


def turns(
    scores: np.ndarray,
    *,
    sigma: float = SMOOTHING,
    window: int = WINDOW,
    turn: float = TURN_DEGREES,
    arc: float = ARC,
    margin_degrees: float = MARGIN_DEGREES,
) -> list[Turn]:
    """Every minimum of the smoothed path's speed (the least within ``window`` checkpoints either side, away from the
    ends; the slowest of those closer than ``arc`` of the path's length), with its angle, speed, travel and verdict
    (module docstring)."""
    path = smoothed(scores, sigma=sigma)
    n = len(path)
    if n <= 2 * window:
        return []
    fast = speed(path)
    angle, side = arc_turns(path, arc=arc)
    hops = np.linalg.norm(np.diff(path, axis=0), axis=1)
    length = np.concatenate([[0.0], np.cumsum(hops)])  # (T,) along the path
    minima = [t for t in range(window, n - window) if fast[t] <= fast[t - window : t + window + 1].min()]
    kept: list[int] = []
    for t in sorted(minima, key=lambda t: fast[t]):  # the slowest first; one turn per `arc` of the path's length
        if all(abs(length[t] - length[k]) >= arc * length[-1] for k in kept):
            kept.append(t)
    out = []
    for t in sorted(kept):
        if np.isfinite(angle[t]) and angle[t] > turn + margin_degrees:
            verdict: Verdict = "cusp"
        elif np.isfinite(angle[t]) and angle[t] > turn - margin_degrees:
            verdict = "near"
        else:
            verdict = "none"
        out.append(Turn(t, float(angle[t]), float(fast[t]), float(side[t]), verdict))
    return out


def cusps(scores: np.ndarray, *, window: int = WINDOW, turn: float = TURN_DEGREES) -> np.ndarray:
    """Whether each checkpoint is a cusp of the trajectory (`turns` with the verdict ``cusp``), ``(T,)`` bool."""
    out = np.zeros(len(np.asarray(scores)), dtype=bool)
    for found in turns(scores, window=window, turn=turn):
        out[found.index] = found.verdict == "cusp"
    return out


def store_trajectory(store) -> tuple[pd.DataFrame, np.ndarray] | None:  # store: analysis.store.Store
    """The trajectory a store holds (essential.parquet) as one row per step: ``step``, ``pc1``, ``pc2``, ... (as
    stored), ``smooth1``, ``smooth2``, ... (smoothed, `smoothed`), ``speed``, ``turn`` (`arc_turns`: the angle over `ARC`
    of the smoothed path's length either side along it, not over a number of checkpoints), ``kappa``, ``centre_x``,
    ``centre_y`` (in the first two smoothed components, `curvature`),
    ``verdict`` (`turns`: cusp, near or none at a minimum of the speed, empty elsewhere) and ``cusp``, all read from
    the stored scores by this module's rule (a store's stored turns and cusps may be an older rule's); and the fraction
    of variance each component explains. None without the lens's table."""

    frame = store.frame(ESSENTIAL)
    if frame is None or frame.empty:
        return None
    wide = frame.pivot(index="step", columns="component", values="score").sort_index()
    out = pd.DataFrame({"step": wide.index.to_numpy(np.int64)})
    for j in wide.columns:
        out[f"pc{int(j) + 1}"] = wide[j].to_numpy()
    scores = wide.to_numpy(np.float64)  # (T, K)
    path = smoothed(scores)
    for j in range(path.shape[1]):
        out[f"smooth{j + 1}"] = path[:, j]
    out["speed"] = speed(path)
    out["turn"] = arc_turns(path)[0]
    plane_y = path[:, 1] if path.shape[1] > 1 else np.zeros(len(path))
    out["kappa"], out["centre_x"], out["centre_y"] = curvature(path[:, 0], plane_y)
    verdict = np.full(len(out), "", dtype=object)
    for found in turns(scores):
        verdict[found.index] = found.verdict
    out["verdict"] = verdict
    out["cusp"] = verdict == "cusp"
    explained = frame.drop_duplicates("component").sort_values("component")["explained"].to_numpy()
    return out, explained
