from app.kernel import resources as res


def test_to_tuple_follows_the_names_and_counts_a_missing_name_as_zero() -> None:
    names = ("cpu", "gpu", "mem")
    assert res.to_tuple({"mem": 5.0, "cpu": 1}, names) == (1.0, 0.0, 5.0)
    assert all(isinstance(v, float) for v in res.to_tuple({"cpu": 1}, names))
