import math

import pytest

from app.kernel import resources as res


class TestArithmetic:
    def test_add_sub_missing_names_count_as_zero(self):
        assert res.add({"cpu": 1.0}, {"mem": 2.0}) == {"cpu": 1.0, "mem": 2.0}
        assert res.sub({"cpu": 3.0}, {"cpu": 1.0, "gpu": 1.0}) == {"cpu": 2.0, "gpu": -1.0}

    def test_scale_total_dot(self):
        assert res.scale({"cpu": 2.0, "mem": 0.5}, 4) == {"cpu": 8.0, "mem": 2.0}
        assert res.total([{"cpu": 1.0}, {"cpu": 2.0, "mem": 1.0}]) == {"cpu": 3.0, "mem": 1.0}
        assert res.dot({"cpu": 2.0, "mem": 3.0}, {"cpu": 4.0, "gpu": 9.0}) == 8.0

    def test_names_and_tuples_are_sorted_and_total(self):
        names = res.resource_names({"mem": 1.0}, {"cpu": 1.0, "gpu": 0.0})
        assert names == ("cpu", "gpu", "mem")
        assert res.to_tuple({"mem": 5.0}, names) == (0.0, 0.0, 5.0)
        assert res.from_tuple((1.0, 2.0, 3.0), names) == {"cpu": 1.0, "gpu": 2.0, "mem": 3.0}


class TestFits:
    @pytest.mark.parametrize(
        ("demand", "free", "expected"),
        [
            ({"cpu": 4.0}, {"cpu": 4.0}, True),
            ({"cpu": 4.0}, {"cpu": 3.999}, False),
            ({"cpu": 0.1 + 0.2}, {"cpu": 0.3}, True),  # float noise absorbed by the epsilon
            ({"gpu": 1.0}, {"cpu": 64.0}, False),  # missing resource is zero
            ({"gpu": 0.0}, {}, True),
            ({}, {}, True),
            ({"cpu": math.nan}, {"cpu": 8.0}, False),
            ({"cpu": 1.0, "mem": 3.0}, {"cpu": 1.0, "mem": 2.0}, False),
        ],
    )
    def test_fits_table(self, demand, free, expected):
        assert res.fits(demand, free) is expected

    def test_relative_epsilon_for_large_capacities(self):
        cap = {"mem_bytes": 1e12}
        assert res.fits({"mem_bytes": 1e12 + 100.0}, cap, cap)
        assert not res.fits({"mem_bytes": 1e12 + 1e4}, cap, cap)

    @pytest.mark.parametrize(
        ("per_task", "free", "expected"),
        [
            ({"cpu": 1.0}, {"cpu": 4.0}, 4),
            ({"cpu": 0.1}, {"cpu": 0.3}, 3),
            ({"cpu": 2.0, "mem": 1.0}, {"cpu": 8.0, "mem": 3.0}, 3),
            ({"cpu": 0.0}, {"cpu": 1.0}, None),
            ({"cpu": 1.0}, {"cpu": -1.0}, 0),
        ],
    )
    def test_max_tasks(self, per_task, free, expected):
        assert res.max_tasks(per_task, free) == expected

    def test_dominant_share(self):
        assert res.dominant_share({"cpu": 2.0, "mem": 8.0}, {"cpu": 8.0, "mem": 16.0}) == 0.5
        assert res.dominant_share({"gpu": 1.0}, {"cpu": 8.0}) == math.inf
        assert res.dominant_share({}, {"cpu": 8.0}) == 0.0

    def test_validity(self):
        assert res.is_valid({"cpu": 0.0, "mem": 3.0})
        assert not res.is_valid({"cpu": -1.0})
        assert not res.is_valid({"cpu": math.nan})
        assert not res.is_valid({"cpu": math.inf})
        assert res.clamp_nonnegative({"cpu": -1.0, "mem": 2.0}) == {"cpu": 0.0, "mem": 2.0}
