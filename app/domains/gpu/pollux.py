"""The Pollux artifact's job model (spec section 3.2): measured throughput, statistical efficiency
and epoch progress of the six applications (bert, cifar10, deepspeech2, imagenet, ncf, yolov3).

Pure: an :class:`Application` is built from the parsed tables (:func:`parse_csv`); the files are
read by the caller (``sim.gpu_data``).  Invariants, all of them needed for the exact
reproduction of the artifact's per-job JCTs:

* a placement is the tuple of GPUs per used node *in allocation order*; its throughput is read
  at its lexicographically smallest rotation, as a decimal id;
* an id present in ``placements.csv`` is interpolated linearly in the local batch size with the
  bracket ``[x[i-1], x[i]]``, ``i`` = the left insertion index clipped to ``[1, n-1]`` (so an
  exact hit on ``x[i]`` is computed from ``x[i-1]``, as scipy's ``interp1d`` does);
* any other id is interpolated linearly over (nodes capped at 16, replicas, local batch) on a
  fixed Delaunay triangulation of the points ``per-(nodes, replicas, local_bsz) means of
  placements.csv, in key order, then the rows of scalability.csv in file order``; the
  triangulation is data (``delaunay.csv``, computed once by qhull), not recomputed here;
* the efficiency uses the effective batch ``B' = R * m * (s + 1)``, never the nominal ``B``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "APP_SETTINGS",
    "AppTables",
    "Application",
    "BatchChoice",
    "DelaunayData",
    "Triangulation",
    "batch_split",
    "consolidated_shape",
    "parse_csv",
]

FloatArray = npt.NDArray[np.float64]

#: per application: (max_epochs, max local batch size override or None)
APP_SETTINGS: Mapping[str, tuple[int, int | None]] = {
    "bert": (2, None),
    "cifar10": (100, None),
    "ncf": (10, None),
    "imagenet": (90, None),
    "deepspeech2": (80, None),
    "yolov3": (50, 8),
}

#: the N-D interpolation caps the node count here
MAX_INTERP_NODES = 16
#: global batch sizes an adaptive job considers (AdaptDL's ``np.geomspace`` default)
ADAPTIVE_BATCH_POINTS = 50
#: scipy's find_simplex tolerance (100 * DBL_EPSILON)
_SIMPLEX_EPS = 100.0 * float(np.finfo(np.float64).eps)


def parse_csv(text: str) -> dict[str, list[float]]:
    """Columns of a numeric CSV with a header row."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    cols: dict[str, list[float]] = {h: [] for h in header}
    for row in reader:
        if not row:
            continue
        for h, v in zip(header, row, strict=True):
            cols[h].append(float(v))
    return cols


@dataclass(frozen=True, slots=True)
class AppTables:
    """One application's parsed tables: ``placements`` (placement, local_bsz, step_time,
    sync_time), ``scalability`` (num_nodes, num_replicas, local_bsz, step_time, sync_time),
    ``validation`` (global batch size -> progress, iteration, metric, grad_sqr, grad_var) and
    ``delaunay`` (the triangulation of :func:`nd_points`)."""

    name: str
    placements: Mapping[str, Sequence[float]]
    scalability: Mapping[str, Sequence[float]]
    validation: Mapping[int, Mapping[str, Sequence[float]]]
    delaunay: DelaunayData | None = None


def nd_points(tables: AppTables) -> tuple[FloatArray, FloatArray]:
    """The N-D interpolation's points ``(nodes, replicas, local_bsz)`` and values
    ``(step_time, sync_time)``, in the order the triangulation indexes them."""
    groups: dict[tuple[float, float, float], list[tuple[float, float]]] = {}
    p = tables.placements
    for pid, bsz, step, sync in zip(
        p["placement"], p["local_bsz"], p["step_time"], p["sync_time"], strict=True
    ):
        digits = str(int(pid))
        key = (float(len(digits)), float(sum(int(d) for d in digits)), bsz)
        groups.setdefault(key, []).append((step, sync))
    xs: list[tuple[float, float, float]] = []
    ys: list[tuple[float, float]] = []
    for key in sorted(groups):
        vals = groups[key]
        xs.append(key)
        step_sum = sync_sum = 0.0
        for step, sync in vals:  # plain left-to-right sums, as the artifact's group mean
            step_sum += step
            sync_sum += sync
        ys.append((step_sum / len(vals), sync_sum / len(vals)))
    s = tables.scalability
    for row in zip(
        s["num_nodes"],
        s["num_replicas"],
        s["local_bsz"],
        s["step_time"],
        s["sync_time"],
        strict=True,
    ):
        xs.append((row[0], row[1], row[2]))
        ys.append((row[3], row[4]))
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class DelaunayData:
    """A triangulation as qhull gave it: per simplex its vertices, neighbours (-1: none), the
    lifted facet's plane equation and whether it is flat; the paraboloid lift's scale and
    shift."""

    simplices: Sequence[Sequence[int]]
    neighbors: Sequence[Sequence[int]]
    equations: Sequence[Sequence[float]]
    flat: Sequence[bool]
    paraboloid_scale: float
    paraboloid_shift: float


class Triangulation:
    """Piecewise-linear interpolation on a fixed triangulation, with scipy's point location.

    The triangulation of a degenerate point set is not conforming (two simplices may split a
    shared square face by different diagonals), so a point on such a face has two values; the
    one returned is the one of the simplex scipy's search reaches: a walk on the lifted facets
    from simplex 0 to the closest plane, then a directed barycentric walk, then a brute-force
    scan (tolerances ``100 * DBL_EPSILON`` and its square root), all reproduced here.
    """

    def __init__(self, points: FloatArray, values: FloatArray, tri: DelaunayData) -> None:
        self.points = points
        self.values = values
        self.ndim = ndim = points.shape[1]
        self.simplices = np.asarray(tri.simplices, dtype=np.intp)
        self.neighbors: list[list[int]] = np.asarray(tri.neighbors, dtype=np.intp).tolist()
        self.equations: list[list[float]] = np.asarray(tri.equations, dtype=np.float64).tolist()
        self.scale = tri.paraboloid_scale
        self.shift = tri.paraboloid_shift
        self.lo = points.min(axis=0).tolist()
        self.hi = points.max(axis=0).tolist()
        verts = points[self.simplices]  # (S, ndim+1, ndim)
        last = verts[:, ndim, :]
        cols = np.transpose(verts[:, :ndim, :] - last[:, None, :], (0, 2, 1))
        flat = np.asarray(tri.flat, dtype=bool)
        safe = cols.copy()
        safe[flat] = np.eye(ndim)
        inv = np.linalg.inv(safe)
        inv[flat] = np.nan
        self.transforms: list[list[list[float]]] = inv.tolist()
        self.origins: list[list[float]] = last.tolist()
        self.flat: list[bool] = flat.tolist()

    def _coord(self, s: int, x: Sequence[float], i: int, c: list[float]) -> None:
        ndim = self.ndim
        if i == ndim:
            v = 1.0
            for j in range(ndim):
                v -= c[j]
            c[ndim] = v
            return
        t = self.transforms[s][i]
        r = self.origins[s]
        v = 0.0
        for j in range(ndim):
            v += t[j] * (x[j] - r[j])
        c[i] = v

    def _coords(self, s: int, x: Sequence[float]) -> list[float]:
        c = [0.0] * (self.ndim + 1)
        for i in range(self.ndim + 1):
            self._coord(s, x, i, c)
        return c

    def _distplane(self, s: int, z: Sequence[float]) -> float:
        eq = self.equations[s]
        dist: float = eq[self.ndim + 1]
        for k in range(self.ndim + 1):
            dist += eq[k] * z[k]
        return dist

    def _inside(self, c: Sequence[float], eps: float) -> bool:
        return all(-eps <= v <= 1.0 + eps for v in c)

    def _bruteforce(self, x: Sequence[float], eps: float, eps_broad: float) -> int:
        ndim = self.ndim
        for s in range(len(self.simplices)):
            if not self.flat[s]:
                if self._inside(self._coords(s, x), eps):
                    return s
                continue
            for k in range(ndim + 1):
                nb = self.neighbors[s][k]
                if nb == -1 or self.flat[nb]:
                    continue
                c = self._coords(nb, x)
                ok = True
                for m in range(ndim + 1):
                    low = -eps_broad if self.neighbors[nb][m] == s else -eps
                    if not low <= c[m] <= 1.0 + eps:
                        ok = False
                        break
                if ok:
                    return nb
        return -1

    def _directed(self, x: Sequence[float], start: int, eps: float, eps_broad: float) -> int:
        ndim = self.ndim
        s = start
        c = [0.0] * (ndim + 1)
        for _ in range(1 + len(self.simplices) // 4):
            if s == -1:
                return -1
            inside = 1
            for k in range(ndim + 1):
                self._coord(s, x, k, c)
                if c[k] < -eps:
                    m = self.neighbors[s][k]
                    if m == -1:
                        return -1
                    s = m
                    inside = -1
                    break
                if not c[k] <= 1.0 + eps:  # outside, or NaN (a flat simplex)
                    inside = 0
            if inside == -1:
                continue
            if inside == 1:
                return s
            return self._bruteforce(x, eps, eps_broad)
        return self._bruteforce(x, eps, eps_broad)

    def find_simplex(self, x: Sequence[float]) -> int:
        eps = _SIMPLEX_EPS
        eps_broad = math.sqrt(float(np.finfo(np.float64).eps))
        ndim = self.ndim
        if any(x[i] < self.lo[i] - eps or x[i] > self.hi[i] + eps for i in range(ndim)):
            return -1
        z = [0.0] * (ndim + 1)
        for i in range(ndim):
            z[i] = x[i]
            z[ndim] += x[i] ** 2
        z[ndim] *= self.scale
        z[ndim] += self.shift
        s = 0
        best = self._distplane(s, z)
        changed = True
        while changed:
            if best > 0:
                break
            changed = False
            for k in range(ndim + 1):
                nb = self.neighbors[s][k]
                if nb == -1:
                    continue
                dist = self._distplane(nb, z)
                if dist > best + eps * (1.0 + abs(best)):
                    s = nb
                    best = dist
                    changed = True
        return self._directed(x, s, eps, eps_broad)

    def __call__(self, x: Sequence[float]) -> tuple[float, float]:
        s = self.find_simplex(x)
        if s < 0:
            raise ValueError(f"point {list(x)} outside the measured throughput table")
        c = self._coords(s, x)
        out = [0.0] * self.values.shape[1]
        for j in range(self.ndim + 1):
            row = self.values[self.simplices[s, j]]
            for k in range(len(out)):
                out[k] = out[k] + c[j] * float(row[k])
        return out[0], out[1]


def consolidated_shape(replicas: int, per_node: int = 4) -> tuple[int, ...]:
    """Nodes filled in turn: 6 replicas on 4-GPU nodes -> (4, 2)."""
    shape: list[int] = []
    while sum(shape) < replicas:
        shape.append(min(replicas - sum(shape), per_node))
    return tuple(shape)


def batch_split(
    app: Application, batch_size: float, replicas: int, *, force_accum_single: bool
) -> tuple[int, int]:
    """``(atomic batch m, accumulation steps s)`` for a fixed global batch on ``replicas``.

    ``force_accum_single``: with one replica, ``s >= 1`` (the job model does it only when the
    batch exceeds the initial batch size; Optimus's predictor always)."""
    local = math.ceil(batch_size / replicas - 1e-8)
    accum = math.ceil(local / app.max_local_bsz - 1e-8) - 1
    if replicas == 1 and force_accum_single:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    count = replicas * (accum + 1)
    atomic = min(atomic, int(app.max_batch_size / count))
    return atomic, accum


@dataclass(frozen=True, slots=True)
class BatchChoice:
    """An adaptive job's batch for one placement and epoch: the goodput it reaches (progress
    units per second), the atomic batch ``m`` and the accumulation steps ``s``."""

    goodput: float
    atomic_bsz: int
    accum_steps: int


class Application:
    """One application's measured model (section 3.2)."""

    def __init__(self, tables: AppTables) -> None:
        self.name = tables.name
        max_epochs, max_local_override = APP_SETTINGS[tables.name]
        self.validation = dict(sorted(tables.validation.items()))
        self._bsz = list(self.validation)
        self.init_batch_size = self._bsz[0]
        self.max_batch_size = self._bsz[-1]
        local = tables.placements["local_bsz"]
        self.min_local_bsz = int(min(local))
        self.max_local_bsz = max_local_override or int(max(local))
        self.max_epochs = max_epochs
        self.completion_epoch = max_epochs - 1
        by_id: dict[int, list[tuple[float, float, float]]] = {}
        p = tables.placements
        for pid, bsz, step, sync in zip(
            p["placement"], p["local_bsz"], p["step_time"], p["sync_time"], strict=True
        ):
            by_id.setdefault(int(pid), []).append((bsz, step, sync))
        self._placements: dict[int, tuple[FloatArray, FloatArray]] = {}
        for pid, rows in by_id.items():
            rows.sort(key=lambda r: r[0])
            xs = np.array([r[0] for r in rows])
            ys = np.array([[r[1], r[2]] for r in rows])
            self._placements[pid] = (xs, ys)
        self._tables = tables
        self._nd: Triangulation | None = None
        self._tp_memo: dict[tuple[tuple[int, ...], int], tuple[float, float]] = {}
        self._progress_memo: dict[int, float] = {}
        self._batch_memo: dict[tuple[tuple[int, ...], int], BatchChoice | None] = {}

    def _triangulation(self) -> Triangulation:
        if self._nd is None:
            if self._tables.delaunay is None:
                raise ValueError(f"{self.name}: no triangulation for the N-D throughput table")
            pts, vals = nd_points(self._tables)
            self._nd = Triangulation(pts, vals, self._tables.delaunay)
        return self._nd

    def throughput(self, placement: Sequence[int], local_bsz: int) -> tuple[float, float]:
        """``(step_time, sync_time)`` in seconds for ``placement`` (GPUs per node, allocation
        order) at atomic batch ``local_bsz``."""
        shape = tuple(g for g in placement if g)
        key = (shape, local_bsz)
        hit = self._tp_memo.get(key)
        if hit is not None:
            return hit
        rot = min(shape[i:] + shape[:i] for i in range(len(shape)))
        pid = int("".join(map(str, rot)))
        table = self._placements.get(pid)
        if table is not None:
            xs, ys = table
            if not xs[0] <= local_bsz <= xs[-1]:
                raise ValueError(f"{self.name}: local batch {local_bsz} outside {pid}'s table")
            i = int(np.searchsorted(xs, local_bsz, side="left"))
            i = min(max(i, 1), len(xs) - 1)
            x_lo, x_hi = xs[i - 1], xs[i]
            slope = (ys[i] - ys[i - 1]) / (x_hi - x_lo)
            val = slope * (local_bsz - x_lo) + ys[i - 1]
            out = (float(val[0]), float(val[1]))
        else:
            nodes = min(len(shape), MAX_INTERP_NODES)
            out = self._triangulation()([float(nodes), float(sum(shape)), float(local_bsz)])
        self._tp_memo[key] = out
        return out

    def _bracket(self, batch_size: float) -> tuple[int, int]:
        lower = upper = None
        for b in self._bsz:
            if b <= batch_size:
                lower = b
            if b >= batch_size:
                upper = b
                break
        if lower is None or upper is None:
            raise ValueError(f"{self.name}: batch size {batch_size} outside {self._bsz}")
        return lower, upper

    def _interp(self, column: str, batch_size: float, epoch: int) -> float:
        lo, hi = self._bracket(batch_size)
        lo_v = self.validation[lo][column][epoch]
        hi_v = self.validation[hi][column][epoch]
        if lo == hi:
            return lo_v
        return ((batch_size - lo) * hi_v + (hi - batch_size) * lo_v) / (hi - lo)

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """``(grad_sqr, grad_var)`` during ``epoch`` at ``batch_size``."""
        return self._interp("grad_sqr", batch_size, epoch), self._interp(
            "grad_var", batch_size, epoch
        )

    def iteration(self, batch_size: float, epoch: int) -> float:
        """Iterations done after completing ``epoch`` at ``batch_size``."""
        return self._interp("iteration", batch_size, epoch)

    def progress(self, epoch: int) -> float:
        """Progress (b0-equivalent iterations) needed to finish ``epoch - 1``."""
        if epoch == 0:
            return 0.0
        hit = self._progress_memo.get(epoch)
        if hit is None:
            hit = min(v["progress"][epoch - 1] for v in self.validation.values())
            self._progress_memo[epoch] = hit
        return hit

    def iteration_time(self, replicas: int, batch_size: int, *, optimus: bool) -> float:
        """Seconds per iteration at the consolidated shape for ``replicas``, global batch
        ``batch_size`` (``optimus``: Optimus's predictor, ``s >= 1`` on one replica)."""
        force = optimus or batch_size > self.init_batch_size
        atomic, accum = batch_split(self, batch_size, replicas, force_accum_single=force)
        step, sync = self.throughput(consolidated_shape(replicas), atomic)
        return step + (step - sync) * accum

    def goodput(
        self, placement: Sequence[int], atomic_bsz: int, accum_steps: int, epoch: int
    ) -> float:
        """Progress units per second on ``placement`` at atomic batch ``m`` with ``s``
        accumulation steps during ``epoch``: ``gain(B') / T`` of section 3.2."""
        shape = tuple(g for g in placement if g)
        batch = sum(shape) * atomic_bsz * (accum_steps + 1)
        step, sync = self.throughput(shape, atomic_bsz)
        grad_sqr, grad_var = self.grad_stats(batch, epoch)
        scale = batch / self.init_batch_size
        gain = (grad_var + grad_sqr) / (grad_var / scale + grad_sqr)
        return gain / (step + (step - sync) * accum_steps)

    def best_batch(self, placement: Sequence[int], epoch: int) -> BatchChoice | None:
        """The batch an adaptive (Pollux-style) job runs on ``placement`` during ``epoch``.

        AdaptDL's search: ``ADAPTIVE_BATCH_POINTS`` global batch sizes on a geometric grid from
        ``max(b0, R * min local)`` to the largest validated batch, each split as
        :func:`batch_split` does (the fewest accumulation steps that fit the largest local
        batch), and the split of highest goodput wins (the smaller batch on ties).  It reads
        the measured tables, not a model fitted online as Pollux's jobs do; ``None`` when no
        batch fits (``R * min local`` above the largest batch)."""
        shape = tuple(g for g in placement if g)
        epoch = min(epoch, self.completion_epoch)
        key = (shape, epoch)
        if key in self._batch_memo:
            return self._batch_memo[key]
        replicas = sum(shape)
        low = max(self.init_batch_size, replicas * self.min_local_bsz)
        best: BatchChoice | None = None
        if low <= self.max_batch_size:
            seen: set[tuple[int, int]] = set()
            for b in np.geomspace(low, self.max_batch_size, ADAPTIVE_BATCH_POINTS):
                atomic, accum = batch_split(self, float(b), replicas, force_accum_single=False)
                atomic = max(atomic, self.min_local_bsz)
                too_big = replicas * atomic * (accum + 1) > self.max_batch_size
                if too_big or (atomic, accum) in seen:
                    continue
                seen.add((atomic, accum))
                try:
                    gp = self.goodput(shape, atomic, accum, epoch)
                except ValueError:
                    continue
                if best is None or gp > best.goodput:
                    best = BatchChoice(gp, atomic, accum)
        self._batch_memo[key] = best
        return best
