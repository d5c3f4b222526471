"""``kairos train`` covers every domain: ``--domain`` and ``--algo`` pick the trainer, the rest of
the command line is that trainer's; an unknown domain or algorithm is refused by name."""

from __future__ import annotations

import pytest

from training import cli


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["--domain", "dag", "--help"], "training.dag_ppo"),
        (["--domain=dag", "--algo", "es", "--help"], "training.dag_es"),
        (["--domain", "gpu", "--help"], "training.gpu_ppo"),
        (["--algo=es", "--domain", "gpu", "--help"], "training.gpu_es"),
        (["--help"], "kairos train"),
    ],
)
def test_each_domain_and_algorithm_reaches_its_trainer(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["train", *argv])
    assert done.value.code == 0
    assert usage in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--domain", "quantum"], "unknown --domain 'quantum'"),
        (["--domain", "gpu", "--algo", "sgd"], "unknown --algo 'sgd'"),
    ],
)
def test_an_unknown_domain_or_algorithm_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        cli.main(["train", *argv])
