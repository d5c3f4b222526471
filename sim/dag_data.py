"""Reading the DAG domain's data files (the parsing itself is pure: :mod:`app.domains.dag.tpch`)."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Final

from app.domains.dag.tpch import TpchLibrary, parse_tpch

__all__ = ["DEFAULT_TPCH", "load_tpch"]

#: the repository's copy of Decima's TPC-H DAGs (see data/dag/README.md)
DEFAULT_TPCH: Final = (
    Path(__file__).resolve().parents[1] / "data" / "dag" / "tpch_decima_dags.json.gz"
)


@functools.lru_cache(maxsize=4)
def load_tpch(path: Path = DEFAULT_TPCH) -> TpchLibrary:
    """The 154 DAGs of ``tpch_decima_dags.json(.gz)``, parsed once per process."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return parse_tpch(json.load(fh))
