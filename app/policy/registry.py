"""Every ONNX model under ``MODELS_DIR``: loaded or refused (with the reason).

Discovery happens at startup (:meth:`PolicyRegistry.discover`); uploads
(:meth:`PolicyRegistry.install`) validate in memory, then write the version directory atomically
(a temporary sibling directory renamed into place) so a half-written model is never discovered.
Every process sharing ``MODELS_DIR`` (the API's worker processes and replicas, ``kairos
worker``) picks up what another one installed with :meth:`PolicyRegistry.refresh`, which
:func:`watching` runs every few seconds off the event loop: a name without a version then means
the same newest version in every process (ADR 0086).

Names follow ``<name>[@<version>]``; without a version the newest loaded one is meant (versions
compare naturally: ``2 < 10``, ``1.2 < 1.10``).  A name that is a heuristic is resolved by the
selector, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.background import running
from app.policy.onnx_policy import (
    CARD_FILE,
    MODEL_FILE,
    OnnxPolicy,
    PolicyRefusedError,
    RefusalReason,
    RuntimeOptions,
    file_sha256,
)

_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")

logger = logging.getLogger(__name__)

#: a directory's mtime is trusted as "nothing changed since" once it is this old (ns)
_SETTLED_NS = 1_000_000_000


def _named_dirs(parent: Path) -> list[Path]:
    """The subdirectories of ``parent`` named like a model or a version, sorted (none when it is
    not a directory; staging directories start with a dot)."""
    if not parent.is_dir():
        return []
    return sorted(
        p
        for p in parent.iterdir()
        if p.is_dir() and not p.name.startswith(".") and _SEGMENT.match(p.name)
    )


class ModelExistsError(Exception):
    """``install`` of a name@version that is already there."""


@dataclass(slots=True)
class ModelEntry:
    name: str
    version: str
    path: Path
    policy: OnnxPolicy | None
    reason: RefusalReason | None = None
    message: str | None = None
    sha256: str | None = None
    card: dict[str, Any] | None = field(default=None)

    @property
    def loaded(self) -> bool:
        return self.policy is not None

    @property
    def domain(self) -> str | None:
        if self.card is not None and isinstance(self.card.get("domain"), str):
            return str(self.card["domain"])
        return None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "kind": "onnx",
            "domain": self.domain,
            "sha256": self.sha256,
            "card": self.card,
            "loaded": self.loaded,
        }
        if self.reason is not None:
            out["refused"] = {"reason": self.reason.value, "message": self.message}
        return out


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order: numeric parts compare as numbers and sort before text parts."""
    parts = re.split(r"[._\-]", version)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def split_name(spec: str) -> tuple[str, str | None]:
    name, sep, version = spec.partition("@")
    return name, (version if sep else None)


def _read_card(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


class PolicyRegistry:
    """Thread-safe map ``(name, version) -> ModelEntry``."""

    def __init__(self, models_dir: Path, options: RuntimeOptions | None = None) -> None:
        self.models_dir = models_dir
        self.options = options or RuntimeOptions()
        self._entries: dict[tuple[str, str], ModelEntry] = {}
        self._misses: dict[str, float] = {}
        self._lock = threading.Lock()
        #: bumped (under the lock) whenever an entry is added or the directory rescanned, so
        #: callers may cache what they derive from :meth:`entries`
        self.generation = 0
        #: each name directory's mtime when :meth:`refresh` last read it
        self._stamps: dict[str, int] = {}

    # ------------------------------------------------------------------ loading

    def _load(self, name: str, version: str, directory: Path) -> ModelEntry:
        model_path = directory / MODEL_FILE
        sha = file_sha256(model_path) if model_path.is_file() else None
        card = _read_card(directory / CARD_FILE)
        try:
            policy = OnnxPolicy.load(directory, options=self.options)
        except PolicyRefusedError as exc:
            return ModelEntry(name, version, directory, None, exc.reason, exc.message, sha, card)
        return ModelEntry(name, version, directory, policy, None, None, policy.sha256, card)

    def discover(self) -> list[ModelEntry]:
        """(Re)scan ``models_dir``; returns every entry, loaded or refused."""
        found: dict[tuple[str, str], ModelEntry] = {}
        for model_dir in _named_dirs(self.models_dir):
            for version_dir in _named_dirs(model_dir):
                entry = self._load(model_dir.name, version_dir.name, version_dir)
                found[(entry.name, entry.version)] = entry
        with self._lock:
            self._entries = found
            self.generation += 1
        return self.entries()

    def install(self, model: bytes, card: bytes) -> ModelEntry:
        """Validate an upload and write it to ``<models_dir>/<name>/<version>/``.

        Raises :class:`PolicyRefusedError` (nothing written) or :class:`ModelExistsError`.
        """
        policy = OnnxPolicy.from_bytes(model, card, options=self.options)
        name, version = policy.card.name, policy.card.version
        if not _SEGMENT.match(name) or not _SEGMENT.match(version):
            raise PolicyRefusedError(
                RefusalReason.INVALID_CARD, f"name {name!r} / version {version!r} not allowed"
            )
        target = self.models_dir / name / version
        with self._lock:
            if target.exists() or (name, version) in self._entries:
                raise ModelExistsError(f"{name}@{version} already exists")
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=target.parent))
            try:
                for filename, data in ((MODEL_FILE, model), (CARD_FILE, card)):
                    with (staging / filename).open("wb") as handle:
                        handle.write(data)
                        handle.flush()
                        os.fsync(handle.fileno())
                os.rename(staging, target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            policy.path = target
            entry = ModelEntry(
                name, version, target, policy, sha256=policy.sha256, card=dict(policy.card.raw)
            )
            self._entries[(name, version)] = entry
            self.generation += 1
        return entry

    def refresh(self) -> list[ModelEntry]:
        """Load the versions another process installed since the last look: a name directory
        whose mtime changed (a version renamed into it) is listed again, and each version not
        known yet is loaded (or refused). Known entries stay as they are. Returns the new ones.

        One ``stat`` per name while nothing changed; run it off the event loop (loading a model
        takes tens of milliseconds)."""
        added: list[ModelEntry] = []
        for model_dir in _named_dirs(self.models_dir):
            try:  # the stamp before the listing: a rename after it shows next time
                stamp = model_dir.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            if self._stamps.get(model_dir.name) == stamp:
                continue
            for version_dir in _named_dirs(model_dir):
                version = version_dir.name
                key = (model_dir.name, version)
                with self._lock:
                    known = key in self._entries
                if known:
                    continue
                entry = self._load(model_dir.name, version, version_dir)
                with self._lock:
                    if key not in self._entries:
                        self._entries[key] = entry
                        self.generation += 1
                        added.append(entry)
            # a stamp from the last second may be shared by a rename still to come within the
            # file system's clock tick: look again next time rather than miss that version
            if time.time_ns() - stamp > _SETTLED_NS:
                self._stamps[model_dir.name] = stamp
        return added

    # ------------------------------------------------------------------ lookup

    def entries(self) -> list[ModelEntry]:
        with self._lock:
            items = list(self._entries.values())
        return sorted(items, key=lambda e: (e.name, version_key(e.version)))

    def versions(self, name: str) -> list[ModelEntry]:
        return [e for e in self.entries() if e.name == name]

    def find(self, spec: str) -> ModelEntry | None:
        """The entry for ``name@version``, or for ``name`` the newest loaded (else newest) one."""
        name, version = split_name(spec)
        with self._lock:
            if version is not None:
                return self._entries.get((name, version))
            candidates = [e for (n, _), e in self._entries.items() if n == name]
        if not candidates:
            return None
        loaded = [e for e in candidates if e.loaded]
        pool = loaded or candidates
        return max(pool, key=lambda e: version_key(e.version))

    def find_or_load(self, spec: str, *, retry_after_s: float = 5.0) -> ModelEntry | None:
        """:meth:`find`, else look on disk for a model installed since startup (by another
        process sharing ``MODELS_DIR``, e.g. an upload to the API seen by a worker).

        A miss is re-checked on disk at most every ``retry_after_s`` seconds per name.
        """
        entry = self.find(spec)
        if entry is not None:
            return entry
        name, version = split_name(spec)
        if not _SEGMENT.match(name) or (version is not None and not _SEGMENT.match(version)):
            return None
        now = time.monotonic()
        with self._lock:
            if now - self._misses.get(spec, -math.inf) < retry_after_s:
                return None
            self._misses[spec] = now
        model_dir = self.models_dir / name
        if not model_dir.is_dir():
            return None
        versions = [version] if version is not None else [p.name for p in model_dir.iterdir()]
        for v in versions:
            directory = model_dir / v
            if not directory.is_dir() or not _SEGMENT.match(v) or v.startswith("."):
                continue
            loaded = self._load(name, v, directory)
            with self._lock:
                if (name, v) not in self._entries:
                    self._entries[(name, v)] = loaded
                    self.generation += 1
        return self.find(spec)

    def names(self) -> Iterable[str]:
        return sorted({e.name for e in self.entries()})


@contextlib.asynccontextmanager
async def watching(registry: PolicyRegistry, interval_s: float) -> AsyncIterator[None]:
    """While the block runs, :meth:`PolicyRegistry.refresh` every ``interval_s`` seconds in a
    thread, logging what it loads (nothing when ``interval_s`` is 0)."""
    if interval_s <= 0:
        yield
        return

    async def watch() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                added = await asyncio.to_thread(registry.refresh)
            except OSError:  # a directory that vanished mid-scan: the next look sees it whole
                logger.warning("rescanning %s failed", registry.models_dir, exc_info=True)
                continue
            for entry in added:
                state = "loaded" if entry.loaded else f"refused ({entry.reason}: {entry.message})"
                logger.info(
                    "policy %s@%s installed elsewhere: %s", entry.name, entry.version, state
                )

    async with running(watch(), "kairos-models-watch"):
        yield
