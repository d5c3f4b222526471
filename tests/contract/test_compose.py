"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

Every command the stack runs must exist in this project: the ``kairos`` console script and its
subcommands (with the options the compose file passes), the migrations Alembic would run, every
path the Dockerfile copies, every ``KAIROS_*`` variable as a setting. ``docker compose config``
runs too, where a Docker CLI with the compose plugin is installed (skipped otherwise).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from configparser import ConfigParser
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

import kairos.cli
from app import cli as app_cli
from app.settings import Settings
from app.ui.settings import UISettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"
LONG_RUNNING = ("postgres", "redis", "api", "worker")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    if command is None:
        return []
    return command.split() if isinstance(command, str) else [str(part) for part in command]


def _interpolate_defaults(text: str) -> str:
    """``${VAR:-default}`` -> ``default`` (what compose substitutes with an empty environment)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", text)


class TestServices:
    def test_the_stack_is_complete(self, services):
        assert {"postgres", "redis", "migrate", "api", "worker"} <= set(services)

    def test_postgres_healthcheck_is_pg_isready(self, services):
        test = " ".join(services["postgres"]["healthcheck"]["test"])
        assert "pg_isready" in test

    def test_redis_healthcheck_is_redis_cli_ping(self, services):
        assert services["redis"]["healthcheck"]["test"][-2:] == ["redis-cli", "ping"]

    @pytest.mark.parametrize("name", LONG_RUNNING)
    def test_long_running_services_have_healthchecks_and_restart(self, services, name):
        service = services[name]
        assert service["healthcheck"]["test"], name
        assert not service["healthcheck"].get("disable", False)
        assert service.get("restart") == "unless-stopped"

    def test_migrate_is_one_shot_and_waits_for_postgres(self, services):
        migrate = services["migrate"]
        assert _command(migrate) == ["kairos", "migrate"]
        assert migrate.get("restart") == "no"
        assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"

    @pytest.mark.parametrize("name", ["api", "worker"])
    def test_api_and_worker_wait_for_backends_and_migration(self, services, name):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"

    def test_depends_on_names_existing_services(self, services):
        for name, service in services.items():
            for dependency in service.get("depends_on", {}):
                assert dependency in services, f"{name} depends on unknown {dependency}"

    def test_api_runs_several_uvicorn_workers(self, services):
        command = [_interpolate_defaults(part) for part in _command(services["api"])]
        workers = int(command[command.index("--workers") + 1])
        assert workers >= 2
        assert "--no-migrate" in command  # the migrate service owns the schema

    def test_worker_replicas(self, services):
        replicas = int(_interpolate_defaults(str(services["worker"]["deploy"]["replicas"])))
        assert replicas >= 2
        assert _command(services["worker"]) == ["kairos", "worker"]

    def test_kairos_services_build_this_dockerfile(self, services):
        for name in ("migrate", "api", "worker"):
            build = services[name]["build"]
            assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE

    def test_api_healthcheck_hits_readyz(self, services):
        test = " ".join(services["api"]["healthcheck"]["test"])
        assert "/readyz" in test


class TestCommandsExist:
    def test_kairos_is_a_console_script(self, pyproject):
        assert pyproject["project"]["scripts"]["kairos"] == "kairos.cli:main"

    def test_every_kairos_subcommand_exists(self, services):
        for name, service in services.items():
            command = _command(service)
            if not command or command[0] != "kairos":
                continue
            subcommand = command[1]
            assert subcommand in kairos.cli.COMMANDS, f"{name}: kairos {subcommand}"
            module = kairos.cli.COMMANDS[subcommand][0]
            if module == "app.cli":
                assert subcommand in app_cli.COMMANDS, f"{name}: app.cli lacks {subcommand}"

    @pytest.mark.parametrize("name", ["api", "migrate", "worker"])
    def test_options_passed_are_accepted(self, services, name):
        command = [_interpolate_defaults(part) for part in _command(services[name])]
        options = [part for part in command[2:] if part.startswith("--")]
        if not options:
            return
        result = subprocess.run(
            [sys.executable, "-m", "kairos", command[1], "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        for option in options:
            assert option in result.stdout, f"kairos {command[1]} has no {option}"

    def test_uvicorn_factory_targets_resolve(self, services):
        for service in services.values():
            command = _command(service)
            if "--factory" in command:
                module, _, attr = command[command.index("--factory") + 1].partition(":")
                imported = __import__(module, fromlist=[attr])
                assert callable(getattr(imported, attr))

    def test_migrations_exist(self):
        config = ConfigParser()
        config.read(ROOT / "alembic.ini")
        location = ROOT / config["alembic"]["script_location"]
        assert (location / "env.py").is_file()
        assert list((location / "versions").glob("*.py")), "no migration revisions"


class TestEnvironment:
    def test_kairos_variables_are_settings(self, compose):
        anchors = [compose.get("x-kairos-env", {})] + [
            s.get("environment", {}) for s in compose["services"].values()
        ]
        fields = set(Settings.model_fields) | set(UISettings.model_fields)
        for env in anchors:
            for key in env if isinstance(env, dict) else []:
                if key.startswith("KAIROS_"):
                    assert key.removeprefix("KAIROS_") in fields, f"{key} is not a setting"

    def test_every_interpolated_variable_is_documented(self):
        used = set(re.findall(r"\$\{([A-Z0-9_]+)", COMPOSE.read_text()))
        documented = set(re.findall(r"^([A-Z0-9_]+)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
        assert used <= documented, f"undocumented in .env.example: {sorted(used - documented)}"


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE.read_text()


class TestDockerfile:
    def test_base_image_user_healthcheck(self, dockerfile):
        # the base is a build argument; its default is the public image a user would pull
        assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", dockerfile, re.MULTILINE)
        (base,) = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
        assert base == "${BASE_IMAGE}"
        users = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
        assert users, "no USER"
        assert users[-1] not in {"root", "0"}
        assert re.search(r"^HEALTHCHECK ", dockerfile, re.MULTILINE)

    def test_no_torch(self, dockerfile, pyproject):
        assert "torch" not in " ".join(pyproject["project"]["dependencies"])
        install_lines = [line for line in dockerfile.splitlines() if "pip install" in line]
        assert install_lines
        assert not any("[train]" in line or "torch" in line for line in install_lines)

    def test_copied_paths_are_tracked_and_not_ignored(self, dockerfile):
        """Every COPY source exists in a fresh clone (git-tracked), not only in this checkout."""
        ignored = {
            line.strip()
            for line in (ROOT / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        }
        for line in re.findall(r"^COPY (.+)$", dockerfile, re.MULTILINE):
            sources = [part for part in line.split()[:-1] if not part.startswith("--")]
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: missing"
                if (ROOT / ".git").exists():
                    tracked = subprocess.run(
                        ["git", "ls-files", "--", source],
                        capture_output=True,
                        text=True,
                        cwd=ROOT,
                        check=True,
                        timeout=30,
                    ).stdout
                    assert tracked.strip(), f"COPY {source}: nothing tracked by git there"
                assert source not in ignored, f"COPY {source}: excluded by .dockerignore"

    def test_no_frontend_pulled_by_syntax_line(self, dockerfile):
        """A ``# syntax=`` line makes BuildKit pull a frontend image: offline builds fail."""
        assert not re.search(r"^# *syntax=", dockerfile, re.MULTILINE)

    def test_the_venv_works_on_any_debian_python(self, dockerfile):
        """Debian's python3 refuses system-wide pip installs (PEP 668): a venv on the PATH."""
        assert "python3 -m venv" in dockerfile
        assert re.search(r"PATH=/opt/kairos/bin:\$PATH", dockerfile)

    def test_the_shipped_models_are_in_the_image(self, dockerfile):
        assert re.search(r"^COPY models \./models$", dockerfile, re.MULTILINE)

    def test_cmd_is_a_kairos_command(self, dockerfile):
        (cmd,) = re.findall(r"^CMD (.+)$", dockerfile, re.MULTILINE)
        parts = yaml.safe_load(cmd)
        assert parts[0] == "kairos"
        assert parts[1] in kairos.cli.COMMANDS


class TestImagesFromEnvironment:
    """Every image the stack builds on or runs comes from a variable whose default is the
    public image; scripts/build-base-image.sh sets the variables to its local stand-ins."""

    DEFAULTS: ClassVar[dict[str, str]] = {
        "KAIROS_BASE_IMAGE": "python:3.11-slim",
        "KAIROS_POSTGRES_IMAGE": "postgres:16-alpine",
        "KAIROS_REDIS_IMAGE": "redis:7-alpine",
    }

    def test_compose_takes_the_images_from_variables(self, services):
        assert services["postgres"]["image"] == "${KAIROS_POSTGRES_IMAGE:-postgres:16-alpine}"
        assert services["redis"]["image"] == "${KAIROS_REDIS_IMAGE:-redis:7-alpine}"
        for name in ("migrate", "api", "worker"):
            args = services[name]["build"]["args"]
            assert args["BASE_IMAGE"] == "${KAIROS_BASE_IMAGE:-python:3.11-slim}", name

    def test_env_example_keeps_the_public_defaults(self):
        documented = dict(re.findall(r"^([A-Z0-9_]+)=(.*)$", ENV_EXAMPLE.read_text(), re.MULTILINE))
        for key, value in self.DEFAULTS.items():
            assert documented[key] == value, key

    def test_the_script_sets_each_variable(self):
        script = (ROOT / "scripts" / "build-base-image.sh").read_text()
        for key in self.DEFAULTS:
            assert key in script, key
        for value in self.DEFAULTS.values():
            assert value in script, value  # --auto keeps the public images when they pull

    @pytest.mark.parametrize("name", ["postgres", "redis"])
    def test_local_service_images_build_on_the_base(self, name):
        dockerfile = (ROOT / "docker" / name / "Dockerfile").read_text()
        assert re.search(r"^ARG BASE_IMAGE=kairos-base:", dockerfile, re.MULTILINE)
        assert re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE) == ["${BASE_IMAGE}"]
        assert "apt-get install" in dockerfile
        (copied,) = re.findall(r"^COPY (\S+) ", dockerfile, re.MULTILINE)
        assert os.access(ROOT / "docker" / name / copied, os.X_OK), copied

    def test_scripts_parse(self):
        for script in [
            ROOT / "scripts" / "build-base-image.sh",
            ROOT / "docker" / "postgres" / "entrypoint.sh",
            ROOT / "docker" / "redis" / "entrypoint.sh",
        ]:
            shell = "bash" if script.read_text().startswith("#!/usr/bin/env bash") else "sh"
            result = subprocess.run(
                [shell, "-n", str(script)], capture_output=True, text=True, check=False, timeout=30
            )
            assert result.returncode == 0, (script, result.stderr)
        assert os.access(ROOT / "scripts" / "build-base-image.sh", os.X_OK)

    def test_script_help_names_its_options(self):
        result = subprocess.run(
            [str(ROOT / "scripts" / "build-base-image.sh"), "--help"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert result.returncode == 0, result.stderr
        assert "--env-file" in result.stdout
        assert "KAIROS_BASE_CACHE" in result.stdout


def _docker_compose() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_config():
    compose_cli = _docker_compose()
    if compose_cli is None:
        pytest.skip("no Docker CLI with compose on this machine")
    result = subprocess.run(
        [*compose_cli, "-f", str(COMPOSE), "--env-file", str(ENV_EXAMPLE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_docker_compose_config_takes_local_images_from_the_environment():
    compose_cli = _docker_compose()
    if compose_cli is None:
        pytest.skip("no Docker CLI with compose on this machine")
    local = {
        "KAIROS_BASE_IMAGE": "kairos-base:bookworm",
        "KAIROS_POSTGRES_IMAGE": "kairos-postgres:bookworm",
        "KAIROS_REDIS_IMAGE": "kairos-redis:bookworm",
    }
    result = subprocess.run(
        [*compose_cli, "-f", str(COMPOSE), "--env-file", str(ENV_EXAMPLE), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
        env={**os.environ, **local},
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["services"]["postgres"]["image"] == local["KAIROS_POSTGRES_IMAGE"]
    assert config["services"]["redis"]["image"] == local["KAIROS_REDIS_IMAGE"]
    for name in ("migrate", "api", "worker"):
        assert config["services"][name]["build"]["args"]["BASE_IMAGE"] == local["KAIROS_BASE_IMAGE"]
