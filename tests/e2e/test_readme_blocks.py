"""The README's offline code blocks, run as written in the environment its own set-up builds.

Convention: a fenced code block in README.md runs here when the line before it (blank lines
aside) is an HTML comment

* ``<!-- readme-test -->``: the block runs by itself (in the checkout, with ``bash -e`` for a
  ``bash`` block and the checkout's ``.venv/bin/python`` for a ``python`` block);
* ``<!-- readme-test: server -->``: the block talks to the server ``make run`` started.

Blocks without a marker are not run: the set-up itself (``make run``, ``make test``), ones that
need other servers or run for hours (training). Every marked block runs, in README order.

The environment is the README's: the tracked files (``git ls-files``, as a fresh clone has them,
with the working tree's contents) are copied into a temporary directory, and ``make run`` there
builds ``.venv``, migrates and serves. The server listens on a free port instead of 8000 (the
blocks' ``127.0.0.1:8000`` is rewritten to it), and ``/tmp/`` in a block is a temporary directory.
The README's prose commands a block depends on run as the README says before it: the SDK's
``pip install -e clients/python``. :mod:`tests.e2e.test_walkthrough` checks the walkthrough's
answers one by one; this test checks that every marked block runs as written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKER = re.compile(r"^<!--\s*readme-test(?::\s*(?P<kind>[\w-]+))?\s*-->$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")


@dataclass(frozen=True)
class Block:
    index: int  # among the README's fenced blocks, from 0
    lang: str
    needs_server: bool
    code: str


def readme_blocks(text: str) -> list[Block]:
    """The marked fenced blocks of ``text``, in order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    marker: str | None = None
    index, i = 0, 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            end = i + 1
            while not lines[end].startswith("```"):
                end += 1
            if marker is not None:
                assert marker in ("", "server"), f"unknown readme-test kind {marker!r}"
                code = "\n".join(lines[i + 1 : end]) + "\n"
                blocks.append(Block(index, fence["lang"], marker == "server", code))
            index += 1
            marker = None
            i = end + 1
            continue
        found = MARKER.match(line.strip())
        if found:
            marker = found["kind"] or ""
        elif line.strip():
            marker = None  # a marker belongs to the block right after it
        i += 1
    return blocks


def test_the_convention_is_parsed() -> None:
    text = "a\n<!-- readme-test -->\n\n```bash\necho 1\n```\n```bash\nno\n```\n"
    text += "<!-- readme-test: server -->\n```python\nprint(2)\n```\n"
    text += "<!-- readme-test -->\nprose in between\n```\n```\n"
    assert readme_blocks(text) == [
        Block(0, "bash", False, "echo 1\n"),
        Block(2, "python", True, "print(2)\n"),
    ]


def _clean_env(port: int) -> dict[str, str]:
    """The user's shell: no virtual environment, no project path, nothing of Kairos' set."""
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    drop = ("KAIROS_", "VIRTUAL_ENV", "PYTHONPATH", "PYTEST_", "COV_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PATH=os.pathsep.join(path), KAIROS_PORT=str(port), KAIROS_HOST="127.0.0.1")
    return env


def _copy_tracked_files(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree: a clone of it would not have it either
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)


@dataclass
class Checkout:
    path: Path
    port: int
    env: dict[str, str]
    scratch: Path

    def localise(self, code: str) -> str:
        code = code.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        return code.replace("/tmp/", f"{self.scratch}/")

    def run(self, args: list[str], *, input_text: str | None = None, timeout: float = 400) -> str:
        done = subprocess.run(
            args,
            cwd=self.path,
            env=self.env,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checkout]:
    base = tmp_path_factory.mktemp("readme")
    path, scratch = base / "kairos", base / "scratch"
    scratch.mkdir()
    _copy_tracked_files(path)
    port = free_port()
    env = _clean_env(port)
    log = base / "make-run.log"
    with log.open("wb") as out:
        # the README's set-up command: venv + install + migrate + serve
        proc = subprocess.Popen(
            ["make", "run"], cwd=path, env=env, stdout=out, stderr=out, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 600  # a fresh venv: pip installs every dependency
        while True:
            assert proc.poll() is None, log.read_text()[-5000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"make run did not serve:\n{log.read_text()}"
            time.sleep(0.5)
        yield Checkout(path, port, env, scratch)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make and the kairos serve it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    startup = log.read_text()
    assert "alembic.runtime.plugins" not in startup  # issue 24, item 10: make run is quiet
    assert "deprecated" not in startup.lower()  # setuptools' project.license table, once


# a fresh venv (every dependency installed by pip) and the evaluate example: minutes, not seconds
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_marked_readme_block_runs_as_written(checkout: Checkout) -> None:
    blocks = readme_blocks(README.read_text())
    # the walkthrough's five, the SDK's quick start and the evaluate example at least
    assert len([b for b in blocks if b.needs_server]) >= 6, blocks
    assert any(not b.needs_server for b in blocks), blocks
    sdk_installed = False
    for block in blocks:
        code = checkout.localise(block.code)
        if block.lang == "bash":
            out = checkout.run(["bash", "-e", "-o", "pipefail", "-c", code])
            if block.needs_server:  # curl -s: a refused request still exits 0
                _assert_answers_are_not_errors(block, out)
        elif block.lang == "python":
            if "kairos_client" in code and not sdk_installed:
                # the README's Python SDK section: `pip install -e clients/python`
                checkout.run([".venv/bin/pip", "install", "--quiet", "-e", "clients/python"])
                sdk_installed = True
            out = checkout.run([".venv/bin/python", "-"], input_text=code)
        else:
            raise AssertionError(f"block {block.index}: no way to run a {block.lang!r} block")
    evaluation = checkout.scratch / "eval.json"
    if "--json /tmp/eval.json" in README.read_text():
        assert json.loads(evaluation.read_text())  # the evaluate example wrote its rows
        assert any((checkout.scratch / "eval-report").iterdir())


def _assert_answers_are_not_errors(block: Block, out: str) -> None:
    decoder = json.JSONDecoder()
    text, pos, answers = out.strip(), 0, 0
    while pos < len(text):
        value, end = decoder.raw_decode(text, pos)
        assert not (isinstance(value, dict) and "error" in value), (block.index, value)
        answers += 1
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    assert answers == block.code.count("curl "), (block.index, out)
