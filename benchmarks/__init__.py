"""Speed benchmarks (``make bench`` = ``python -m benchmarks``).

Every module here with a ``main(argv: list[str]) -> int`` is one benchmark; each prints its
figures with ratios against a baseline measured in the same run.
"""
