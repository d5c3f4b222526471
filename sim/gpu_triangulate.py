"""Regenerate ``data/gpu/pollux/traces/<app>/delaunay.csv``: qhull's Delaunay triangulation of
each application's N-D throughput points (:func:`app.domains.gpu.pollux.nd_points`).

The points are degenerate (a grid: many cospherical vertices), so the triangulation is not
unique and interpolated values inside a degenerate cell depend on qhull's choice; the file
fixes that choice (scipy's ``Delaunay`` with its defaults, as the artifact's
``LinearNDInterpolator``), with what scipy's point location walks on: the neighbours, the lifted
facets' plane equations, the paraboloid scale and shift, and which simplices are flat.

Needs scipy, which the project does not depend on::

    pip install --target /tmp/scipy scipy
    PYTHONPATH=/tmp/scipy .venv/bin/python -m sim.gpu_triangulate
"""

from __future__ import annotations

import sys

import numpy as np

from app.domains.gpu.pollux import APP_SETTINGS, nd_points
from sim.gpu_data import DELAUNAY_CSV, POLLUX_DIR, load_tables


def main() -> int:
    from scipy.spatial import Delaunay  # type: ignore[import-not-found,import-untyped,unused-ignore]

    for name in sorted(APP_SETTINGS):
        points, _ = nd_points(load_tables(name))
        tri = Delaunay(points)
        flat = np.isnan(tri.transform[:, 0, 0])
        lines = [
            f"# paraboloid_scale={float(tri.paraboloid_scale)!r} "
            f"paraboloid_shift={float(tri.paraboloid_shift)!r}",
            "v0,v1,v2,v3,n0,n1,n2,n3,e0,e1,e2,e3,e4,flat",
        ]
        for i in range(len(tri.simplices)):
            cells = [str(int(v)) for v in tri.simplices[i]]
            cells += [str(int(v)) for v in tri.neighbors[i]]
            cells += [repr(float(v)) for v in tri.equations[i]]
            cells.append("1" if flat[i] else "0")
            lines.append(",".join(cells))
        out = POLLUX_DIR / "traces" / name / DELAUNAY_CSV
        out.write_text("\n".join(lines) + "\n")
        print(f"{name}: {len(points)} points, {len(tri.simplices)} simplices -> {out}")  # noqa: T201
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
