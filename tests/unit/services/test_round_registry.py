"""Every domain the core registers is served by one round module, reached through
:mod:`app.services.rounds` (the API and the dispatch name no domain; the import contracts hold
that)."""

from __future__ import annotations

import inspect

import pytest

from app.domains import domain_names
from app.services import rounds
from app.services.errors import ConflictError


def test_every_registered_domain_has_a_round_and_a_decide() -> None:
    assert set(rounds.served_domains()) == set(domain_names())
    for domain in domain_names():
        schedule = rounds.round_function(domain)
        decide = rounds.decide_function(domain)
        assert inspect.iscoroutinefunction(schedule), domain
        assert inspect.iscoroutinefunction(decide), domain
        # the round module of a domain is its own, not another domain's
        assert schedule.__module__ == decide.__module__ == f"app.services.{domain}_rounds"


def test_the_rounds_share_one_signature() -> None:
    shapes = {
        (
            tuple(inspect.signature(rounds.round_function(d)).parameters),
            tuple(inspect.signature(rounds.decide_function(d)).parameters),
        )
        for d in domain_names()
    }
    assert shapes == {
        (
            ("ctx", "cluster", "body", "decisions", "settings", "request_id"),
            ("tenant", "body", "decisions", "writer", "settings", "request_id", "store"),
        )
    }


def test_an_unknown_domain_is_a_conflict_naming_it() -> None:
    with pytest.raises(ConflictError, match="'zz'"):
        rounds.round_function("zz")
    with pytest.raises(ConflictError, match="'zz'"):
        rounds.decide_function("zz")
