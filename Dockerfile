# syntax=docker/dockerfile:1
# Kairos service image: the API, `kairos migrate` and `kairos worker`. onnxruntime only, no torch.
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

RUN groupadd --system --gid 10001 kairos \
    && useradd --system --uid 10001 --gid kairos --home-dir /app --shell /usr/sbin/nologin kairos

# Dependencies first (their own layer, rebuilt only when pyproject.toml changes). Only the
# runtime dependencies: the `train` extra (torch) is never installed in this image.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The source. Installed in place (editable): app/db/migrate.py finds migrations/ beside app/.
COPY alembic.ini ./
COPY migrations ./migrations
COPY kairos ./kairos
COPY sim ./sim
COPY app ./app
# Trained policies are not baked in: compose mounts ./models read-only at /app/models (add or swap a
# policy without rebuilding); without a mount the service runs its heuristics.
RUN mkdir -p /app/models \
    && pip install --no-deps -e . \
    && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"

# The code stays root-owned and read-only to the service user.
USER kairos

ENV KAIROS_HOST=0.0.0.0 \
    KAIROS_PORT=8000 \
    KAIROS_MODELS_DIR=/app/models
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('KAIROS_PORT', '8000')}/healthz\", timeout=2)"]

CMD ["kairos", "serve", "--no-migrate"]
