"""Which policy names decide a cluster of a domain: one rule for cluster definitions, stateful
rounds and ``/v1/decide`` bodies of every domain.

A policy for a domain is one of the domain's heuristics (``name`` or ``name@<its version>``) or a
model the tenant may use (shipped, or its own upload) whose card names the domain. A fallback is
always one of the domain's heuristics.
"""

from __future__ import annotations

from app.domains import DEFAULT_DOMAIN, get_domain
from app.kernel.errors import UnknownHeuristicError
from app.services.decision import DecisionService, split_policy
from app.services.errors import ErrorItem
from app.settings import Settings

__all__ = ["check_fallback_name", "check_policy_name", "default_policy", "is_domain_heuristic"]


def is_domain_heuristic(domain: str, name: str) -> bool:
    """``name`` is one of ``domain``'s heuristics, unversioned or at its version (not hpc:
    :meth:`DecisionService.is_heuristic` answers for hpc)."""
    base, version = split_policy(name)
    try:
        heuristic = get_domain(domain).heuristic(base.strip().lower())
    except UnknownHeuristicError:
        return False
    ref = getattr(heuristic, "ref", None)
    own = getattr(ref, "version", None)
    return version is None or own is None or version == own


def check_policy_name(
    field: str, name: str, domain: str, decisions: DecisionService, tenant: str | None
) -> ErrorItem | None:
    """``None`` when ``name`` decides ``domain`` clusters for ``tenant``, else the error item."""
    if domain == DEFAULT_DOMAIN:
        if not decisions.knows(name, tenant):
            return ErrorItem(field, f"unknown policy {name!r}", "unknown")
        if decisions.is_heuristic(name):
            return None
    elif is_domain_heuristic(domain, name):
        return None
    info = decisions.get_policy(name, tenant)
    if info is None or info.builtin_heuristic:  # the catalogue's heuristics are hpc's
        return ErrorItem(field, f"unknown {domain} policy {name!r}", "unknown")
    if info.domain not in (domain, "any"):
        return ErrorItem(
            field, f"policy {name!r} decides {info.domain} clusters, not {domain}", "domain"
        )
    return None


def check_fallback_name(
    field: str, name: str, domain: str, decisions: DecisionService
) -> ErrorItem | None:
    """``None`` when ``name`` is one of ``domain``'s heuristics, else the error item."""
    heuristic = (
        decisions.is_heuristic(name)
        if domain == DEFAULT_DOMAIN
        else is_domain_heuristic(domain, name)
    )
    if heuristic:
        return None
    return ErrorItem(field, f"{name!r} is not a {domain} heuristic", "unknown")


def default_policy(
    domain: str, backfill: str, decisions: DecisionService, settings: Settings, tenant: str | None
) -> str:
    """The policy of a cluster or decide body that names none: for hpc the backfilling mode's
    default; for another domain its shipped learned default when that model is installed, else
    the domain's default fallback heuristic."""
    if domain == DEFAULT_DOMAIN:
        return settings.default_policy_for(backfill)
    preferred = settings.default_domain_policy(domain)
    if preferred is not None and (
        check_policy_name("body.policy", preferred, domain, decisions, tenant) is None
    ):
        return preferred
    return get_domain(domain).default_fallback
