"""Reading the DAG domain's data files (the parsing itself is pure: :mod:`app.domains.dag.tpch`)."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Final

import numpy as np

from app.domains.dag.decima import DecimaWeights
from app.domains.dag.tpch import TpchLibrary, parse_tpch

__all__ = ["DEFAULT_DECIMA", "DEFAULT_TPCH", "load_decima", "load_tpch"]

#: the repository's copy of Decima's TPC-H DAGs (see data/dag/README.md)
DEFAULT_TPCH: Final = (
    Path(__file__).resolve().parents[1] / "data" / "dag" / "tpch_decima_dags.json.gz"
)

#: spark-sched-sim's shipped Decima weights as float32 arrays (``training/dag_export.py``)
DEFAULT_DECIMA: Final = DEFAULT_TPCH.parent / "spark_sched_sim_decima.npz"


@functools.lru_cache(maxsize=4)
def load_decima(path: Path = DEFAULT_DECIMA) -> DecimaWeights:
    with np.load(path) as npz:
        return DecimaWeights({k: npz[k].astype(np.float32) for k in npz.files})


@functools.lru_cache(maxsize=4)
def load_tpch(path: Path = DEFAULT_TPCH) -> TpchLibrary:
    """The 154 DAGs of ``tpch_decima_dags.json(.gz)``, parsed once per process."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return parse_tpch(json.load(fh))
