"""From the head's classes at the <timestamp> slots to one (start, end) in ms per unit.

The raw times (class x segment time) are not always in order. The repair, as the reference does it: keep the
longest non-decreasing subsequence (ties: the earliest predecessor, the first longest end) as the trusted times;
an untrusted run of one or two takes the nearer trusted neighbour (the left one on a tie, the only one at an
edge); a longer run is spread evenly between its two neighbours (or copies the only one). Values are truncated to
whole ms. The result never decreases.
"""

from __future__ import annotations

import itertools

import numpy as np


def trusted(values: list[float]) -> list[bool]:
    """Membership in the longest non-decreasing subsequence, with the reference's tie-breaking: each value extends
    the earliest of the longest runs it can follow, and the first of the longest runs is kept. Plain Python: a call
    holds ~30 values, where numpy's per-call cost is most of the time (the aligner thread holds the GIL meanwhile)."""
    n = len(values)
    if all(a <= b for a, b in itertools.pairwise(values)):  # in order (the usual case): the whole sequence
        return [True] * n
    length = [1] * n
    parent = [-1] * n
    for i in range(1, n):
        v, best, at = values[i], 0, -1
        for j in range(i):
            if values[j] <= v and length[j] > best:
                best, at = length[j], j
        if at >= 0:
            length[i], parent[i] = best + 1, at
    keep = [False] * n
    i = length.index(max(length)) if n else -1
    while i != -1:
        keep[i] = True
        i = parent[i]
    return keep


def trusted_ref(values: list[float]) -> list[bool]:
    """trusted as numpy prefix scans (the plain form it is tested against)."""
    n = len(values)
    data = np.asarray(values, dtype=np.float64)
    length = np.ones(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        best = np.where(data[:i] <= data[i], length[:i], 0)
        j = int(best.argmax())  # the earliest j with the longest run ending there
        if best[j] + 1 > 1:
            length[i], parent[i] = best[j] + 1, j
    keep = [False] * n
    i = int(length.argmax()) if n else -1
    while i != -1:
        keep[i] = True
        i = int(parent[i])
    return keep


def repair(values: list[float]) -> list[int]:
    keep = trusted(values)
    out = list(values)
    n, i = len(values), 0
    while i < n:
        if keep[i]:
            i += 1
            continue
        j = i
        while j < n and not keep[j]:
            j += 1
        left = out[i - 1] if i > 0 else None  # trusted (keep[i - 1]), or index 0 is trusted
        right = out[j] if j < n else None
        for k in range(i, j):
            if left is None or right is None:
                out[k] = left if right is None else right  # type: ignore[assignment]
            elif j - i <= 2:
                out[k] = left if k - (i - 1) <= j - k else right
            else:
                out[k] = left + (right - left) / (j - i + 1) * (k - i + 1)
        i = j
    return [int(v) for v in out]


def unit_times(classes: list[int], segment_ms: float) -> list[tuple[int, int]]:
    """classes at the 2 x units <timestamp> slots -> (start_ms, end_ms) per unit."""
    if len(classes) % 2:
        raise ValueError(f"{len(classes)} timestamp slots: expected two per unit")
    fixed = repair([c * segment_ms for c in classes])
    return [(fixed[2 * u], fixed[2 * u + 1]) for u in range(len(fixed) // 2)]
