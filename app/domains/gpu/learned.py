"""A learned GPU policy: a per-job scorer whose scores order the admission walk of
:func:`app.domains.gpu.decide.decide` (spec section 8.1).

:class:`ScoredPolicy` is pure: it holds a ``score(obs, mask) -> scores`` callable injected from
outside (an ONNX session in the service, a numpy or torch forward pass in training), the
encoding constants and the candidate window. ``decide()`` walks its rows preemptively: highest
score first (ties by arrival, then id), a job admitted if it fits the GPUs not yet claimed
(skipped otherwise), a running row not admitted preempted. Masked-out rows wait; running jobs
beyond the window keep their GPUs, pending ones beyond it wait.

A score callable that returns the wrong shape, or a non-finite score on an unmasked row, makes
:meth:`ScoredPolicy.rank` raise :class:`PolicyOutputError` (the caller falls back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from app.domains.gpu.encoding import (
    DEFAULT_WINDOW,
    BoolArray,
    EncodingConstants,
    FloatArray,
    encode,
)
from app.domains.gpu.heuristics import Mode
from app.domains.gpu.types import ClusterSnapshot, GpuJob, PolicyRef
from app.kernel.errors import DomainError

__all__ = ["PolicyOutputError", "Ranking", "ScoreFn", "ScoredPolicy"]

#: ``(obs[k, F], mask[k]) -> scores[k]`` (float; higher is admitted first)
ScoreFn = Callable[[FloatArray, BoolArray], npt.NDArray[np.floating[Any]]]


class PolicyOutputError(DomainError):
    """The scorer's output cannot order the rows (wrong shape or non-finite scores)."""


@dataclass(frozen=True, slots=True)
class Ranking:
    """One snapshot's admission order: ``order`` (unmasked rows, best first), ``masked``
    (rows that can never run here), ``overflow`` (jobs beyond the window) and each row's
    score by job id."""

    order: tuple[GpuJob, ...]
    masked: tuple[GpuJob, ...]
    overflow: tuple[GpuJob, ...]
    scores: dict[str, float]


@dataclass(frozen=True, slots=True)
class ScoredPolicy:
    """A learned policy :func:`~app.domains.gpu.decide.decide` accepts beside a heuristic."""

    name: str
    version: str
    score: ScoreFn = field(compare=False)
    constants: EncodingConstants = field(default_factory=EncodingConstants)
    window: int = DEFAULT_WINDOW
    kind: str = "onnx"
    mode: Mode = Mode.KEY
    #: the admission walk of a learned policy is preemptive greedy with skip
    preemptive: bool = True
    block: bool = False

    @property
    def ref(self) -> PolicyRef:
        return PolicyRef(self.name, self.version, self.kind)

    def rank(self, state: ClusterSnapshot) -> Ranking:
        enc = encode(state, self.constants, self.window)
        if not enc.jobs:
            return Ranking((), (), enc.overflow, {})
        raw = np.asarray(self.score(enc.obs, enc.mask), dtype=np.float64)
        if raw.shape != (len(enc.jobs),):
            raise PolicyOutputError(
                f"{self.name}: scores of shape {raw.shape}, expected ({len(enc.jobs)},)"
            )
        bad = enc.mask & ~np.isfinite(raw)
        if bad.any():
            jid = enc.jobs[int(np.flatnonzero(bad)[0])].id
            raise PolicyOutputError(f"{self.name}: non-finite score for job {jid!r}")
        scores = {j.id: float(raw[k]) for k, j in enumerate(enc.jobs) if enc.mask[k]}
        live = [j for k, j in enumerate(enc.jobs) if enc.mask[k]]
        live.sort(key=lambda j: (-scores[j.id], j.arrival, j.id))
        masked = tuple(j for k, j in enumerate(enc.jobs) if not enc.mask[k])
        return Ranking(tuple(live), masked, enc.overflow, scores)
