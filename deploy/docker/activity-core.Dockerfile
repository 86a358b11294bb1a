# syntax=docker/dockerfile:1
# activity-core: the HTTP API / ops UI, `migrate`, `sync-definitions` and `temporal-worker`.
# The production install set: no `local` extra (embedded PostgreSQL, Temporal CLI; local
# runs only), so a deployment sets ACTIVITY_CORE_DATABASE_URL and TEMPORAL_ADDRESS.
# Build from the repository root:
#   docker build -f deploy/docker/activity-core.Dockerfile -t activity-core:0.1.0 .
# deploy/tests/test_image_install.py replays the COPY and `uv sync` lines of the build
# stage in a scratch directory, so edit them in the same simple form (one command per RUN).

FROM ghcr.io/astral-sh/uv:0.13.9 AS uv

FROM python:3.11.14-slim-bookworm AS build
COPY --from=uv /uv /usr/local/bin/uv
# --no-editable installs the workspace members as built wheels into /opt/venv, so the
# final stage needs the venv only, not /src. Bytecode is compiled here because the
# runtime filesystem is read-only.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=python3.11 \
    UV_PROJECT_ENVIRONMENT=/opt/venv
WORKDIR /src
# Third-party dependencies first: this layer is reused until uv.lock or a pyproject changes.
COPY uv.lock pyproject.toml ./
COPY packages/contracts/pyproject.toml packages/contracts/
COPY packages/evidence/pyproject.toml packages/evidence/
COPY packages/runtime/pyproject.toml packages/runtime/
COPY services/activity-core/pyproject.toml services/activity-core/
COPY services/rein-aharness/pyproject.toml services/rein-aharness/
RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --no-dev --no-editable --no-install-workspace --package activity-core
# Then the sources of the members activity-core needs (never rein-aharness's).
# The shared packages' wheels carry their README and LICENSE (their pyproject names them).
COPY packages/contracts/README.md packages/contracts/LICENSE packages/contracts/
COPY packages/contracts/src packages/contracts/src
COPY packages/evidence/README.md packages/evidence/LICENSE packages/evidence/
COPY packages/evidence/src packages/evidence/src
COPY packages/runtime/src packages/runtime/src
COPY services/activity-core/src services/activity-core/src
RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --no-dev --no-editable --package activity-core

FROM python:3.11.14-slim-bookworm AS runtime
# git is a runtime need: the API indexes uploaded changes bundles and derives the change
# view with it, and the Temporal worker's publication fetches, unbundles and pushes.
# pip/setuptools/wheel are installers, not runtime needs; the venv has none of them.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && python -m pip uninstall --yes --quiet pip setuptools wheel \
    && groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin app
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
# Liveness of `serve` only (the same image runs migrate / temporal-worker: disable the
# check there, e.g. `docker run --no-healthcheck`; Kubernetes ignores HEALTHCHECK).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["activity-core"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
