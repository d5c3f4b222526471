"""Every ONNX model under ``MODELS_DIR``: loaded or refused (with the reason).

Two kinds of model live there (ADR 0088):

* **shipped** models, in ``<models_dir>/<name>/<version>/`` and, when the registry is given
  ``packaged`` (:data:`PACKAGED_MODELS`, the models installed with the package), in
  ``<packaged>/<name>/<version>/`` for each name ``models_dir`` has no directory of: a name is
  read from one place, ``models_dir`` first (ADR 0089). They are read-only through the API and
  visible to every tenant;
* **uploads**, in ``<models_dir>/_tenants/<owner>/<name>/<version>/``: each belongs to the tenant
  whose :func:`owner_of` is ``<owner>`` and is visible and usable by it alone. ``_tenants`` can
  never be a model's name (names start with a letter or a digit).

Inside the registry an upload is named by a *qualified* spec, ``<owner>:<name>[@<version>]``
(:func:`qualified`); no name a caller can write holds a ``:``, so a caller's name only ever
reaches shipped models. The service turns a tenant's name into the qualified spec before a
decision reaches the selector (``DecisionService.resolve_spec``), so a worker process resolves
it without knowing whose it is.

Discovery happens at startup (:meth:`PolicyRegistry.discover`); uploads
(:meth:`PolicyRegistry.prepare` then :meth:`PolicyRegistry.commit`) validate in memory, then write
the version directory atomically (a temporary sibling directory renamed into place) so a
half-written model is never discovered. Every process sharing ``MODELS_DIR`` (the API's worker
processes and replicas, ``kairos worker``) picks up what another one installed with
:meth:`PolicyRegistry.refresh`, which :func:`watching` runs every few seconds off the event loop:
a name without a version then means the same newest version in every process (ADR 0086).

Names follow ``<name>[@<version>]``; without a version the newest loaded one is meant (versions
compare naturally: ``2 < 10``, ``1.2 < 1.10``).  A name that is a heuristic is resolved by the
selector, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.background import running
from app.policy.dag_onnx import DAG_DOMAIN, DagOnnxModel, is_dag_card, load_dag_model
from app.policy.gpu_onnx import GPU_DOMAIN, GpuOnnxModel, is_gpu_card, load_gpu_model
from app.policy.onnx_policy import (
    CARD_FILE,
    MODEL_FILE,
    OnnxPolicy,
    PolicyRefusedError,
    RefusalReason,
    RuntimeOptions,
    file_sha256,
    parse_card,
)
from app.tuning.card import HeuristicCardError, is_heuristic_card, recommended_heuristic

_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}")
#: an owner directory: :func:`owner_of`'s readable form, or its hashed form
_OWNER = re.compile(r"(?:[a-z0-9_\-]|~[0-9a-f]{2}){1,128}|~~[0-9a-f]{64}")
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")

#: the directory under ``models_dir`` that holds every tenant's uploads
TENANTS_DIR = "_tenants"
#: separates the owner from the name in a qualified spec (never part of a caller's name)
OWNER_SEP = ":"
#: the deepest nesting of arrays and objects a card may have
MAX_CARD_DEPTH = 32
#: the models installed with the package (package data; in a source tree a link to the
#: top-level ``models/`` directory). Read-only: nothing is ever written there (ADR 0089).
PACKAGED_MODELS = Path(__file__).resolve().parents[1] / "shipped_models"

logger = logging.getLogger(__name__)

#: a directory's mtime is trusted as "nothing changed since" once it is this old (ns)
_SETTLED_NS = 1_000_000_000


def owner_of(tenant: str) -> str:
    """The directory (under ``_tenants``) of ``tenant``'s uploads, safe in any path.

    Lowercase letters, digits, ``_`` and ``-`` stay as they are; every other character becomes
    ``~xx`` per byte of its UTF-8 (so ``Acme`` and ``acme`` differ on a case-insensitive file
    system too). A result longer than 128 characters, or an empty one, is ``~~`` and the
    tenant's sha256 instead. Distinct tenants never share an owner."""
    readable = "".join(
        ch if ch in _PLAIN else "".join(f"~{b:02x}" for b in ch.encode()) for ch in tenant
    )
    if 0 < len(readable) <= 128:
        return readable
    return "~~" + hashlib.sha256(tenant.encode()).hexdigest()


def qualified(owner: str, spec: str) -> str:
    """The registry's spec of ``spec`` (``name[@version]``) among ``owner``'s uploads (``""``:
    the shipped models)."""
    return f"{owner}{OWNER_SEP}{spec}" if owner else spec


def split_spec(spec: str) -> tuple[str, str, str | None]:
    """``(owner, name, version)`` of a registry spec; the owner is ``""`` for a shipped one."""
    owner, sep, rest = spec.partition(OWNER_SEP)
    if not sep:
        owner, rest = "", spec
    name, version = split_name(rest)
    return owner, name, version


def _valid_spec(owner: str, name: str, version: str | None) -> bool:
    return (
        (not owner or _OWNER.fullmatch(owner) is not None)
        and _SEGMENT.fullmatch(name) is not None
        and (version is None or _SEGMENT.fullmatch(version) is not None)
    )


def _named_dirs(parent: Path) -> list[Path]:
    """The subdirectories of ``parent`` named like a model or a version, sorted (none when it is
    not a directory; staging directories start with a dot)."""
    if not parent.is_dir():
        return []
    return sorted(
        p
        for p in parent.iterdir()
        if p.is_dir() and not p.name.startswith(".") and _SEGMENT.fullmatch(p.name)
    )


class ModelExistsError(Exception):
    """``install`` of a name@version that is already there."""


class ReservedNameError(Exception):
    """An upload named like a shipped model or a heuristic (either would be shadowed)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the name {name!r} is reserved: a shipped model or heuristic has it")
        self.name = name


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
    #: :func:`owner_of` of the tenant whose upload this is; ``""``: a shipped model
    owner: str = ""
    #: the model of a ``"domain": "gpu"`` card (:mod:`app.policy.gpu_onnx`); ``policy`` is then
    #: ``None`` (it decides GPU clusters only) and ``message`` says so
    gpu: GpuOnnxModel | None = None
    #: the heuristic a heuristic card recommends (``kairos tune``'s output when a heuristic
    #: won, :mod:`app.tuning.card`): the entry decides as that heuristic; ``policy`` is ``None``
    heuristic: str | None = None
    #: the model of a ``"domain": "dag"`` card (:mod:`app.policy.dag_onnx`); ``policy`` is then
    #: ``None`` (it decides DAG clusters only) and ``message`` says so
    dag: DagOnnxModel | None = None

    @property
    def loaded(self) -> bool:
        return (
            self.policy is not None
            or self.gpu is not None
            or self.heuristic is not None
            or self.dag is not None
        )

    @property
    def spec(self) -> str:
        """The registry's spec of this exact version (qualified for an upload)."""
        return qualified(self.owner, f"{self.name}@{self.version}")

    @property
    def domain(self) -> str | None:
        if self.card is not None and isinstance(self.card.get("domain"), str):
            return str(self.card["domain"])
        return None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "kind": "heuristic" if self.heuristic is not None else "onnx",
            "domain": self.domain,
            "sha256": self.sha256,
            "card": self.card,
            "loaded": self.loaded,
        }
        if self.reason is not None:
            out["refused"] = {"reason": self.reason.value, "message": self.message}
        return out


@dataclass(frozen=True, slots=True)
class PreparedModel:
    """An upload validated in memory by :meth:`PolicyRegistry.prepare`, not written yet: an hpc
    model (``policy``), or the model of a ``"domain": "gpu"`` (``gpu``) or ``"domain": "dag"``
    (``dag``) card; exactly one of the three is set."""

    owner: str
    name: str
    version: str
    policy: OnnxPolicy | None
    model: bytes
    card: bytes
    gpu: GpuOnnxModel | None = None
    dag: DagOnnxModel | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.model).hexdigest()

    @property
    def domain(self) -> str:
        """The card's domain (``gpu``, ``dag``, or an hpc card's own)."""
        if self.gpu is not None:
            return GPU_DOMAIN
        if self.dag is not None:
            return DAG_DOMAIN
        assert self.policy is not None
        return self.policy.card.domain


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order: numeric parts compare as numbers and sort before text parts."""
    parts = re.split(r"[._\-]", version)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def split_name(spec: str) -> tuple[str, str | None]:
    name, sep, version = spec.partition("@")
    return name, (version if sep else None)


def _nesting(value: Any, limit: int) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar: 0), counted without
    recursion and at most to ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Collection[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_card_depth(card: bytes) -> None:
    """Refuse (``invalid_card``) a card whose arrays and objects nest deeper than
    :data:`MAX_CARD_DEPTH`; a card that is not JSON at all is left for ``parse_card`` to refuse."""
    too_deep = PolicyRefusedError(
        RefusalReason.INVALID_CARD, f"card.json nests deeper than {MAX_CARD_DEPTH} levels"
    )
    try:
        raw = json.loads(card)
    except RecursionError:
        raise too_deep from None
    except ValueError:
        return
    if _nesting(raw, MAX_CARD_DEPTH) > MAX_CARD_DEPTH:
        raise too_deep


def _read_card(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or _nesting(raw, MAX_CARD_DEPTH) > MAX_CARD_DEPTH:
        return None
    return raw


def _heuristic_entry(
    owner: str, name: str, version: str, directory: Path, card: dict[str, Any]
) -> ModelEntry:
    """The entry of a heuristic card: it decides as the heuristic it recommends, or is refused
    (``invalid_card``) naming what the card lacks."""
    try:
        heuristic = recommended_heuristic(card)
    except HeuristicCardError as exc:
        reason, message = RefusalReason.INVALID_CARD, str(exc)
        return ModelEntry(name, version, directory, None, reason, message, None, card, owner)
    return ModelEntry(
        name, version, directory, None, None, None, None, card, owner, heuristic=heuristic
    )


def _upload_domain(card: bytes) -> str | None:
    """``"gpu"`` or ``"dag"`` when an uploaded card says that domain; ``None`` for any other card
    (an hpc one, or one :func:`parse_card` refuses). A heuristic card is refused
    (``invalid_card``): the registry would load it as its heuristic, not as the uploaded model."""
    try:
        raw = json.loads(card)
    except (ValueError, RecursionError):
        return None
    if isinstance(raw, dict) and is_heuristic_card(raw):
        raise PolicyRefusedError(
            RefusalReason.INVALID_CARD,
            "card kind is 'heuristic': an upload is an ONNX model, its card of kind 'onnx'",
        )
    if is_gpu_card(raw):
        return GPU_DOMAIN
    if is_dag_card(raw):
        return DAG_DOMAIN
    return None


def _card_name(card: bytes) -> tuple[str, str]:
    """The ``name`` and ``version`` of a gpu or dag card (JSON, an object: :func:`_upload_domain`
    said so); ``invalid_card`` when either is not a non-empty string."""
    raw = json.loads(card)
    name, version = raw.get("name"), raw.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
        raise PolicyRefusedError(
            RefusalReason.INVALID_CARD, "card.json needs string name and version"
        )
    return name, version


def _committed_entry(prepared: PreparedModel, target: Path) -> ModelEntry:
    """The entry of ``prepared`` written to ``target``: the same one :meth:`PolicyRegistry.discover`
    makes of that directory."""
    name, version, owner = prepared.name, prepared.version, prepared.owner
    if prepared.gpu is not None:
        gpu = dataclasses.replace(prepared.gpu, path=target)
        note = "a gpu-domain model: it decides GPU clusters only"
        return ModelEntry(
            name, version, target, None, None, note, gpu.sha256, dict(gpu.card), owner, gpu=gpu
        )
    if prepared.dag is not None:
        dag = dataclasses.replace(prepared.dag, path=target)
        note = "a dag-domain model: it decides DAG clusters only"
        return ModelEntry(
            name, version, target, None, None, note, dag.sha256, dict(dag.card), owner, dag=dag
        )
    policy = prepared.policy
    assert policy is not None
    policy.path = target
    return ModelEntry(
        name,
        version,
        target,
        policy,
        sha256=policy.sha256,
        card=dict(policy.card.raw),
        owner=owner,
    )


def _same_dir(one: Path, other: Path) -> bool:
    try:
        return one.resolve() == other.resolve()
    except OSError:
        return False


class PolicyRegistry:
    """Thread-safe map ``(owner, name, version) -> ModelEntry``.

    ``models_dir`` holds the shipped models of this deployment and every upload; ``packaged``
    (read, never written) adds the shipped models of each name ``models_dir`` has no directory
    of."""

    def __init__(
        self,
        models_dir: Path,
        options: RuntimeOptions | None = None,
        *,
        packaged: Path | None = None,
    ) -> None:
        self.models_dir = models_dir
        #: ``None`` when not given or when it is ``models_dir`` itself (a checkout's ``models``)
        self.packaged = None if packaged is None or _same_dir(packaged, models_dir) else packaged
        self.options = options or RuntimeOptions()
        self._entries: dict[tuple[str, str, str], ModelEntry] = {}
        self._misses: dict[str, float] = {}
        self._lock = threading.Lock()
        #: bumped (under the lock) whenever an entry is added or the directory rescanned, so
        #: callers may cache what they derive from :meth:`entries`
        self.generation = 0
        #: each (owner, name) directory's mtime when :meth:`refresh` last read it
        self._stamps: dict[tuple[str, str], int] = {}
        #: the names whose entries were read from ``packaged``
        self._packaged_names: set[str] = set()

    # ------------------------------------------------------------------ layout

    def base(self, owner: str) -> Path:
        """The directory of ``owner``'s name directories (``""``: the shipped ones)."""
        return self.models_dir / TENANTS_DIR / owner if owner else self.models_dir

    def _owners(self) -> list[str]:
        tenants = self.models_dir / TENANTS_DIR
        found = [
            p.name for p in (sorted(tenants.iterdir()) if tenants.is_dir() else []) if p.is_dir()
        ]
        return ["", *(o for o in found if _OWNER.fullmatch(o))]

    def shipped_dirs(self) -> list[Path]:
        """Where the shipped models are read: a name from the first that has its directory."""
        return [self.models_dir] if self.packaged is None else [self.models_dir, self.packaged]

    def _packaged_dirs(self) -> list[Path]:
        """The package's name directories that ``models_dir`` does not shadow."""
        if self.packaged is None:
            return []
        return [d for d in _named_dirs(self.packaged) if not (self.models_dir / d.name).is_dir()]

    def _model_dirs(self) -> Iterator[tuple[str, Path]]:
        """``models_dir``'s name directories (shipped, then each owner's uploads)."""
        for owner in self._owners():
            for model_dir in _named_dirs(self.base(owner)):
                yield owner, model_dir

    # ------------------------------------------------------------------ loading

    def _load(self, owner: str, name: str, version: str, directory: Path) -> ModelEntry:
        model_path = directory / MODEL_FILE
        sha = file_sha256(model_path) if model_path.is_file() else None
        card = _read_card(directory / CARD_FILE)
        if card is not None and is_heuristic_card(card):
            return _heuristic_entry(owner, name, version, directory, card)
        if card is not None and is_gpu_card(card):
            return self._load_gpu(owner, name, version, directory, card, sha)
        if card is not None and is_dag_card(card):
            return self._load_dag(owner, name, version, directory, card, sha)
        try:
            policy = OnnxPolicy.load(directory, options=self.options)
        except PolicyRefusedError as exc:
            return ModelEntry(
                name, version, directory, None, exc.reason, exc.message, sha, card, owner
            )
        return ModelEntry(name, version, directory, policy, None, None, policy.sha256, card, owner)

    def _load_gpu(
        self,
        owner: str,
        name: str,
        version: str,
        directory: Path,
        card: dict[str, Any],
        sha: str | None,
    ) -> ModelEntry:
        if sha is None:
            missing = f"{directory} lacks {MODEL_FILE}"
            return ModelEntry(
                name,
                version,
                directory,
                None,
                RefusalReason.MODEL_MISSING,
                missing,
                None,
                card,
                owner,
            )
        try:
            gpu = load_gpu_model(
                (directory / MODEL_FILE).read_bytes(),
                (directory / CARD_FILE).read_bytes(),
                options=self.options,
                path=directory,
            )
        except PolicyRefusedError as exc:
            return ModelEntry(
                name, version, directory, None, exc.reason, exc.message, sha, card, owner
            )
        note = "a gpu-domain model: it decides GPU clusters only"
        return ModelEntry(
            name, version, directory, None, None, note, gpu.sha256, card, owner, gpu=gpu
        )

    def _load_dag(
        self,
        owner: str,
        name: str,
        version: str,
        directory: Path,
        card: dict[str, Any],
        sha: str | None,
    ) -> ModelEntry:
        if sha is None:
            missing = f"{directory} lacks {MODEL_FILE}"
            return ModelEntry(
                name, version, directory, None, RefusalReason.MODEL_MISSING, missing, None, card,
                owner,
            )  # fmt: skip
        try:
            dag = load_dag_model(
                (directory / MODEL_FILE).read_bytes(),
                (directory / CARD_FILE).read_bytes(),
                options=self.options,
                path=directory,
            )
        except PolicyRefusedError as exc:
            return ModelEntry(
                name, version, directory, None, exc.reason, exc.message, sha, card, owner
            )
        note = "a dag-domain model: it decides DAG clusters only"
        return ModelEntry(
            name, version, directory, None, None, note, dag.sha256, card, owner, dag=dag
        )

    def discover(self) -> list[ModelEntry]:
        """(Re)scan ``packaged`` and ``models_dir``; returns every entry, loaded or refused."""
        found: dict[tuple[str, str, str], ModelEntry] = {}
        packaged = self._packaged_dirs()
        for owner, model_dir in [*self._model_dirs(), *(("", d) for d in packaged)]:
            for version_dir in _named_dirs(model_dir):
                entry = self._load(owner, model_dir.name, version_dir.name, version_dir)
                found[(owner, entry.name, entry.version)] = entry
        with self._lock:
            self._entries = found
            self._packaged_names = {d.name for d in packaged}
            self.generation += 1
        return self.entries()

    def shipped_names(self) -> set[str]:
        """The lowercased names of the shipped models, known or only on disk yet."""
        with self._lock:
            known = {n.lower() for (o, n, _) in self._entries if not o}
        on_disk = (p.name.lower() for d in self.shipped_dirs() for p in _named_dirs(d))
        return known | set(on_disk)

    def prepare(
        self,
        model: bytes,
        card: bytes,
        *,
        tenant: str | None = None,
        reserved: Collection[str] = (),
    ) -> PreparedModel:
        """Validate an upload in memory: ``tenant``'s (``None``: a shipped model).

        The card's ``domain`` picks the checks, those a model of that domain gets when it is
        discovered: ``"gpu"`` :func:`~app.policy.gpu_onnx.load_gpu_model`'s, ``"dag"``
        :func:`~app.policy.dag_onnx.load_dag_model`'s, any other :class:`OnnxPolicy`'s (an hpc
        model). A tenant's upload may not take a shipped model's name nor one of ``reserved``
        (lowercased; compared without regard to case). Raises :class:`PolicyRefusedError`,
        :class:`ReservedNameError` or :class:`ModelExistsError`; nothing is written.
        """
        check_card_depth(card)
        domain = _upload_domain(card)
        if domain is None:
            parsed = parse_card(card)
            name, version = parsed.name, parsed.version
        else:
            name, version = _card_name(card)
        if not _SEGMENT.fullmatch(name) or not _SEGMENT.fullmatch(version):
            raise PolicyRefusedError(
                RefusalReason.INVALID_CARD, f"name {name!r} / version {version!r} not allowed"
            )
        owner = "" if tenant is None else owner_of(tenant)
        if owner and (name.lower() in reserved or name.lower() in self.shipped_names()):
            raise ReservedNameError(name)
        self._check_absent(owner, name, version)
        if domain == GPU_DOMAIN:
            gpu = load_gpu_model(model, card, options=self.options)
            return PreparedModel(owner, name, version, None, model, card, gpu=gpu)
        if domain == DAG_DOMAIN:
            dag = load_dag_model(model, card, options=self.options)
            return PreparedModel(owner, name, version, None, model, card, dag=dag)
        policy = OnnxPolicy.from_bytes(model, card, options=self.options)
        return PreparedModel(owner, name, version, policy, model, card)

    def _check_absent(self, owner: str, name: str, version: str) -> None:
        target = self.base(owner) / name / version
        with self._lock:
            known = (owner, name, version) in self._entries
        if known or target.exists():
            raise ModelExistsError(f"{name}@{version} already exists")

    def commit(self, prepared: PreparedModel) -> ModelEntry:
        """Write a prepared upload to its version directory, atomically.

        Raises :class:`ModelExistsError` when that name@version appeared meanwhile."""
        owner, name, version = prepared.owner, prepared.name, prepared.version
        target = self.base(owner) / name / version
        with self._lock:
            if target.exists() or (owner, name, version) in self._entries:
                raise ModelExistsError(f"{name}@{version} already exists")
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=target.parent))
            try:
                for filename, data in ((MODEL_FILE, prepared.model), (CARD_FILE, prepared.card)):
                    with (staging / filename).open("wb") as handle:
                        handle.write(data)
                        handle.flush()
                        os.fsync(handle.fileno())
                os.rename(staging, target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            entry = _committed_entry(prepared, target)
            self._entries[(owner, name, version)] = entry
            self.generation += 1
        return entry

    def install(
        self,
        model: bytes,
        card: bytes,
        *,
        tenant: str | None = None,
        reserved: Collection[str] = (),
    ) -> ModelEntry:
        """:meth:`prepare` and :meth:`commit` in one: ``<models_dir>/<name>/<version>/`` for a
        shipped model, ``<models_dir>/_tenants/<owner>/<name>/<version>/`` for ``tenant``'s."""
        return self.commit(self.prepare(model, card, tenant=tenant, reserved=reserved))

    def refresh(self) -> list[ModelEntry]:
        """Load the versions another process installed since the last look: a name directory
        (shipped or a tenant's) whose mtime changed (a version renamed into it) is listed
        again, and each version not known yet is loaded (or refused). Known entries stay as
        they are. Returns the new ones.

        One ``stat`` per name while nothing changed; run it off the event loop (loading a model
        takes tens of milliseconds). Nothing installs into the package: a name ``models_dir``
        gains shadows the package's versions of it from then on."""
        added: list[ModelEntry] = []
        for owner, model_dir in self._model_dirs():
            try:  # the stamp before the listing: a rename after it shows next time
                stamp = model_dir.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            where = (owner, model_dir.name)
            if self._stamps.get(where) == stamp:
                continue
            if not owner:
                self._unshadow(model_dir.name)
            for version_dir in _named_dirs(model_dir):
                key = (owner, model_dir.name, version_dir.name)
                with self._lock:
                    known = key in self._entries
                if known:
                    continue
                entry = self._load(owner, model_dir.name, version_dir.name, version_dir)
                with self._lock:
                    if key not in self._entries:
                        self._entries[key] = entry
                        self.generation += 1
                        added.append(entry)
            # a stamp from the last second may be shared by a rename still to come within the
            # file system's clock tick: look again next time rather than miss that version
            if time.time_ns() - stamp > _SETTLED_NS:
                self._stamps[where] = stamp
        return added

    def _unshadow(self, name: str) -> None:
        """Forget the package's versions of ``name`` (``models_dir`` has its directory now)."""
        with self._lock:
            if name not in self._packaged_names:
                return
            self._packaged_names.discard(name)
            for key in [k for k in self._entries if k[0] == "" and k[1] == name]:
                del self._entries[key]
            self.generation += 1

    # ------------------------------------------------------------------ lookup

    def entries(self) -> list[ModelEntry]:
        with self._lock:
            items = list(self._entries.values())
        return sorted(items, key=lambda e: (e.owner, e.name, version_key(e.version)))

    def versions(self, name: str, owner: str = "") -> list[ModelEntry]:
        return [e for e in self.entries() if e.owner == owner and e.name == name]

    def find(self, spec: str) -> ModelEntry | None:
        """The entry for ``name@version``, or for ``name`` the newest loaded (else newest) one;
        ``spec`` is qualified (:func:`qualified`) for an upload."""
        owner, name, version = split_spec(spec)
        with self._lock:
            if version is not None:
                return self._entries.get((owner, name, version))
            candidates = [e for (o, n, _), e in self._entries.items() if o == owner and n == name]
        if not candidates:
            return None
        loaded = [e for e in candidates if e.loaded]
        pool = loaded or candidates
        return max(pool, key=lambda e: version_key(e.version))

    def find_or_load(self, spec: str, *, retry_after_s: float = 5.0) -> ModelEntry | None:
        """:meth:`find`, else look on disk for a model installed since startup (by another
        process sharing ``MODELS_DIR``, e.g. an upload to the API seen by a worker).

        A miss is re-checked on disk at most every ``retry_after_s`` seconds per spec.
        """
        entry = self.find(spec)
        if entry is not None:
            return entry
        owner, name, version = split_spec(spec)
        if not _valid_spec(owner, name, version):
            return None
        now = time.monotonic()
        with self._lock:
            if now - self._misses.get(spec, -math.inf) < retry_after_s:
                return None
            self._misses[spec] = now
        homes = self.shipped_dirs() if not owner else [self.base(owner)]
        model_dir = next((h / name for h in homes if (h / name).is_dir()), None)
        if model_dir is None:
            return None
        if not owner and model_dir.parent == self.models_dir:
            self._unshadow(name)
        elif not owner:
            with self._lock:
                self._packaged_names.add(name)
        self._load_versions(owner, name, model_dir, version)
        return self.find(spec)

    def _load_versions(self, owner: str, name: str, model_dir: Path, version: str | None) -> None:
        versions = [version] if version is not None else [p.name for p in model_dir.iterdir()]
        for v in versions:
            directory = model_dir / v
            if not directory.is_dir() or not _SEGMENT.fullmatch(v) or v.startswith("."):
                continue
            with self._lock:
                if (owner, name, v) in self._entries:
                    continue
            loaded = self._load(owner, name, v, directory)
            with self._lock:
                if (owner, name, v) not in self._entries:
                    self._entries[(owner, name, v)] = loaded
                    self.generation += 1


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
                logger.info("policy %s installed elsewhere: %s", entry.spec, state)

    async with running(watch(), "kairos-models-watch"):
        yield
