# Kairos service image: the API, `kairos migrate` and `kairos worker`. onnxruntime only, no torch.
#
# BASE_IMAGE: any Debian-based image with Python 3.11 and its venv module. The default is the
# public one; where the engine cannot pull it, scripts/build-base-image.sh builds a stand-in
# from Debian's archive (kairos-base:bookworm) and docker-compose.yml passes it from
# KAIROS_BASE_IMAGE.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS runtime

# tests/e2e/test_compose_stack.py prunes the untagged images of earlier builds by this label
LABEL io.kairos.image=service

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/kairos \
    PATH=/opt/kairos/bin:$PATH

WORKDIR /app

RUN groupadd --system --gid 10001 kairos \
    && useradd --system --uid 10001 --gid kairos --home-dir /app --shell /usr/sbin/nologin kairos \
    && python3 -m venv "$VIRTUAL_ENV" \
    && install -d -o kairos -g kairos /var/lib/kairos/models

# Dependencies first (their own layer, rebuilt only when pyproject.toml changes), with the
# build backend, so that a change of the source reinstalls it without fetching anything. Only
# the runtime dependencies: the `train` extra (torch) is never installed in this image.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt "setuptools>=77" \
    && rm /tmp/requirements.txt

# The source. Installed in place (editable): app/db/migrate.py finds migrations/ beside app/,
# and app/shipped_models (a link to ../models) finds the shipped policies in /app/models.
# compose gives KAIROS_MODELS_DIR a shared writable volume for uploads and a site's own models.
COPY alembic.ini ./
COPY migrations ./migrations
COPY models ./models
COPY kairos ./kairos
COPY sim ./sim
COPY app ./app
RUN pip install --no-deps --no-build-isolation -e . \
    && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" \
    && python -c "from app.policy.registry import PACKAGED_MODELS as m; assert (m / 'hpc-kernel').is_dir(), m"

# The code stays root-owned and read-only to the service user.
USER kairos

ENV KAIROS_HOST=0.0.0.0 \
    KAIROS_PORT=8000 \
    KAIROS_MODELS_DIR=/var/lib/kairos/models
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('KAIROS_PORT', '8000')}/healthz\", timeout=2)"]

CMD ["kairos", "serve", "--no-migrate"]
