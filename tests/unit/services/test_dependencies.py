"""Dependency graphs of submitted jobs and snapshots (app.services.dependencies)."""

from __future__ import annotations

from app.services.dependencies import cycle_error, find_cycle, unknown_dependencies


def test_a_long_chain_is_acyclic_without_recursion() -> None:
    chain = {f"j{i}": [f"j{i + 1}"] for i in range(20_000)}
    assert find_cycle(chain) is None


def test_the_cycle_is_given_from_its_first_job() -> None:
    graph = {"a": ["b"], "b": ["c", "x"], "c": ["a"], "d": ["a"]}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"s": ["s"]}) == ["s", "s"]


def test_shared_dependencies_are_no_cycle() -> None:
    diamond = {"top": ["l", "r"], "l": ["base"], "r": ["base"], "base": ["outside"]}
    assert find_cycle(diamond) is None


def test_unknown_dependencies_name_their_index() -> None:
    problems = unknown_dependencies({"a": ["known", "nope"]}, {"known", "a"}, {"a": "body.jobs[3]"})
    assert [(p.field, p.type) for p in problems] == [
        ("body.jobs[3].depends_on[1]", "unknown_dependency")
    ]


def test_a_long_cycle_is_shortened_in_the_message() -> None:
    cycle = [f"j{i}" for i in range(500)] + ["j0"]
    error = cycle_error(cycle, {"j0": "body.jobs[0]"})
    assert error.field == "body.jobs[0].depends_on"
    assert "(489 more)" in error.message
    assert len(error.message) < 300
