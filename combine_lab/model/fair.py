"""Fair shares and grouped scans: the array primitives :mod:`.replay` prices stage 1 and stage 2
with (docs/timing-model.md#3-costs). Senders on a shared limit progress at equal shares, so a
sender that has moved X bytes cannot be done before the limit moved ``sum(min(bytes_k, X))``;
the scans run per core (a group) over its chunks in loop order. Every function takes and returns
arrays: one call per step, never one per row."""

from __future__ import annotations

import numpy as np


def group_scan(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` (float [n] or [K, n], along the last axis) restarting at each
    new ``group`` (int [n], sorted ascending); -inf entries come out below 0 (every time here is
    >= 0, so they never win a max with one)."""
    if values.shape[-1] == 0:
        return values
    finite = np.isfinite(values)
    lo = np.minimum(np.where(finite, values, np.inf).min(axis=-1, keepdims=True), 0.0) - 1.0
    hi = np.maximum(np.where(finite, values, -np.inf).max(axis=-1, keepdims=True), 0.0)
    lo, hi = np.where(np.isfinite(lo), lo, -1.0), np.where(np.isfinite(hi), hi, 0.0)
    lift = (hi - lo + 1.0) * group  # a later group always starts above every earlier value
    return np.maximum.accumulate(np.where(finite, values, lo) + lift, axis=-1) - lift


def grouped_cumsum(group: np.ndarray, values: np.ndarray, firsts: np.ndarray | None = None) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` (float [n] or [K, n], along the last axis)
    restarting at each new ``group`` (int [n], sorted); ``firsts``: where each group starts, if
    known (:func:`starts`)."""
    c = np.cumsum(values, axis=-1)
    if not c.shape[-1]:
        return c
    firsts = starts(group) if firsts is None else firsts
    lengths = np.diff(np.append(firsts, len(group)))
    return c - np.repeat(c[..., firsts] - values[..., firsts], lengths, axis=-1)


def starts(group: np.ndarray) -> np.ndarray:
    """int [groups]: where each run of equal values of ``group`` (sorted) starts."""
    return np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(group) else np.zeros(0, dtype=np.int64)


def fair_moved(owner: np.ndarray, totals: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each query i: sum over the senders k of PE ``owner[i]`` of ``min(totals[owner, k], x[i])``.
    ``totals``: float [pes, senders] bytes each sender moves in all."""
    P, K = totals.shape
    srt = np.sort(totals, axis=1)
    pre = np.concatenate([np.zeros((P, 1)), np.cumsum(srt, axis=1)], axis=1)
    span = float(srt.max(initial=0.0)) + 1.0
    flat = (np.arange(P)[:, None] * span + srt).ravel()
    below = np.searchsorted(flat, owner * span + x, side="right") - owner * K  # senders with totals <= x
    return pre[owner, below] + (K - below) * x


class SparseFair:
    """:func:`fair_moved` over senders listed sparsely: sender i of group ``group[i]`` (int [n])
    moves ``totals[i]`` bytes in all (float [n]); ``groups``: how many groups. Called with queries
    (group int [q], x float [q]): for each, the sum over that group's senders of min(total, x)."""

    def __init__(self, group: np.ndarray, totals: np.ndarray, groups: int):
        order = np.lexsort((totals, group))
        self.g, t = group[order], totals[order]
        self.span = float(t.max(initial=0.0)) + 1.0
        self.key = self.g * self.span + t
        self.csum = np.concatenate([[0.0], np.cumsum(t)])
        self.start = np.searchsorted(self.g, np.arange(groups), side="left")
        self.end = np.searchsorted(self.g, np.arange(groups), side="right")

    def __call__(self, qg: np.ndarray, x: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.key, qg * self.span + x, side="right")
        pos = np.clip(pos, self.start[qg], self.end[qg])
        return self.csum[pos] - self.csum[self.start[qg]] + (self.end[qg] - pos) * x


def fair_work(owner: np.ndarray, calls: np.ndarray, per_call: np.ndarray):
    """A function of queries x: for each i, the sum over the senders k of PE ``owner[i]`` of
    ``min(calls[owner, k], x[i]) * per_call[owner, k]``: the engines' work when every core has had
    up to x of its calls served, each core's calls counted at their average cost (``per_call``:
    float [pes, senders]). Sorted once, asked at every SDMA quiet."""
    P, K = calls.shape
    order = np.argsort(calls, axis=1, kind="stable")
    srt = np.take_along_axis(calls, order, axis=1)
    w = np.take_along_axis(per_call, order, axis=1)
    pre = np.concatenate([np.zeros((P, 1)), np.cumsum(srt * w, axis=1)], axis=1)
    suf = np.concatenate([np.cumsum(w[:, ::-1], axis=1)[:, ::-1], np.zeros((P, 1))], axis=1)
    span = float(srt.max(initial=0.0)) + 1.0
    flat = (np.arange(P)[:, None] * span + srt).ravel()

    def at(x: np.ndarray, who: np.ndarray | None = None) -> np.ndarray:
        """``who``: the PE of each query (default ``owner``, one query per sender)."""
        who = owner if who is None else who
        below = np.searchsorted(flat, who * span + x, side="right") - who * K
        return pre[who, below] + x * suf[who, below]
    return at
