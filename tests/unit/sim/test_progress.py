"""The long-running commands' progress bar (issue 24, "a progress bar on a terminal and quiet in
CI"): :class:`sim.progress.Progress` draws on stderr only when it is a terminal, and
``kairos evaluate`` and ``kairos train`` (PPO and ES) use it: a pseudo-terminal (``pty.openpty``)
sees the bar, a pipe gets nothing."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from sim.progress import Progress

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "data" / "lublin_256.swf.gz"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bar_on_a_stream_that_is_not_a_terminal_writes_nothing() -> None:
    stream = io.StringIO()  # isatty() is False, as for CI logs and pipes
    with Progress(10, "evaluate", "seq", stream=stream) as bar:
        for _ in range(10):
            bar.update(1, postfix="x")
    assert stream.getvalue() == ""


def test_a_pseudo_terminal_sees_done_total_rate_and_eta() -> None:
    master, slave = pty.openpty()
    clock = _Clock()
    with os.fdopen(slave, "w") as tty:
        bar = Progress(4, "evaluate", "seq", stream=tty, clock=clock)
        clock.now = 2.0
        bar.update(1)
        line = bar.line()
        for _ in range(3):
            clock.now += 2.0
            bar.update(1)
        bar.close()
    shown = _drain(master)
    assert line == "evaluate 1/4  25% 0.50 seq/s ETA 00:06 elapsed 00:02"
    assert "evaluate 4/4 100%" in shown
    assert shown.startswith("\r")
    assert shown.endswith("\n")


def _drain(master: int) -> str:
    chunks = []
    while True:
        try:
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                break
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _run(args: list[str], cwd: Path, *, tty: bool) -> tuple[int, str, str]:
    """Run ``kairos ...`` with stderr on a pseudo-terminal or a pipe; (rc, stdout, stderr)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")},
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "TERM": "dumb",
    }
    command = [sys.executable, "-m", "kairos.cli", *args]
    if not tty:
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=280, check=False
        )
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:  # read as it comes: a full terminal buffer would block the child
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    out, _ = proc.communicate(timeout=280)
    rc = proc.returncode
    return rc, out.decode(), b"".join(chunks).decode(errors="replace")


def _evaluate(tmp_path: Path) -> list[str]:
    return [
        "evaluate", "--trace", str(TRACE), "--policies", "fcfs,sjf", "--backfill", "none",
        "--sequences", "2", "--length", "64", "--seed", "1", "--json", str(tmp_path / "e.json"),
    ]  # fmt: skip


def _es(tmp_path: Path) -> list[str]:
    return [
        "train", "--algo", "es", "--trace", str(TRACE), "--backfill", "none", "--seed", "5",
        "--episode-length", "64", "--generations", "2", "--pairs", "1",
        "--windows-per-trace", "1", "--val-windows-per-trace", "1", "--val-every", "1",
        "--workers", "1", "--run-dir", str(tmp_path / "runs"),
    ]  # fmt: skip


def _ppo(tmp_path: Path) -> list[str]:
    return [
        "train", "--trace", str(TRACE), "--seed", "3", "--episode-length", "64",
        "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64",
        "--num-minibatches", "2", "--update-epochs", "1", "--bc-teacher", "f1",
        "--bc-episodes", "1", "--bc-epochs", "1",
        "--val-sequences", "1", "--val-length", "64", "--val-every", "1",
        "--run-dir", str(tmp_path / "runs"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "bar"),
    [
        pytest.param(_evaluate, "evaluate 4/4 100%", id="evaluate"),
        pytest.param(_es, "es 2/2 100%", id="train-es", marks=pytest.mark.slow),
        pytest.param(_ppo, "ppo 2/2 100%", id="train-ppo", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "pipe"])
def test_long_commands_show_a_bar_on_a_terminal_and_nothing_in_a_pipe(
    tmp_path: Path, command, bar: str, tty: bool
) -> None:
    rc, out, err = _run(command(tmp_path), tmp_path, tty=tty)
    assert rc == 0, err[-3000:]
    if tty:
        assert bar in err, err[-3000:]
        assert "\r" in err
    else:
        assert "\r" not in err, err[-3000:]
        assert bar.split()[0] + " " not in err, err[-3000:]  # no bar line at all
    assert "\r" not in out  # stdout (results, logs) never carries the bar
