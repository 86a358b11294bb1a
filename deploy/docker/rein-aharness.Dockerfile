# syntax=docker/dockerfile:1
# rein-aharness: the worker loop (`run`) and its close-outbox operator commands.
# Build from the repository root:
#   docker build -f deploy/docker/rein-aharness.Dockerfile -t rein-aharness:0.1.0 .
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
RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --no-dev --no-editable --no-install-workspace --package rein-aharness
# Then the sources of the members rein-aharness needs (never activity-core's).
# The shared packages' wheels carry their README and LICENSE (their pyproject names them).
COPY packages/contracts/README.md packages/contracts/LICENSE packages/contracts/
COPY packages/contracts/src packages/contracts/src
COPY packages/evidence/README.md packages/evidence/LICENSE packages/evidence/
COPY packages/evidence/src packages/evidence/src
COPY packages/runtime/src packages/runtime/src
COPY services/rein-aharness/src services/rein-aharness/src
RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --no-dev --no-editable --package rein-aharness

FROM python:3.11.14-slim-bookworm AS runtime
# git is a runtime need (the worker works in git worktrees of the target repositories);
# pip/setuptools/wheel are installers, not runtime needs; the venv has none of them.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && python -m pip uninstall --yes --quiet pip setuptools wheel \
    && groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin app \
    && install --directory --owner=10001 --group=10001 --mode=0700 /var/lib/rein-aharness
COPY --from=build /opt/venv /opt/venv
# The durable close outbox lives under the state dir: mount a persistent volume here.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    REIN_AHARNESS_STATE_DIR=/var/lib/rein-aharness
VOLUME ["/var/lib/rein-aharness"]
USER 10001:10001
WORKDIR /tmp
# Healthy = the close outbox is usable and holds nothing pending or quarantined.
# `close-outbox status` exits 1/3/4 for pending/quarantined/unusable; Docker reserves
# exit codes other than 0 and 1, hence `|| exit 1`.
HEALTHCHECK --interval=60s --timeout=10s --start-period=30s --retries=3 \
    CMD ["/bin/sh", "-c", "rein-aharness close-outbox status > /dev/null || exit 1"]
ENTRYPOINT ["rein-aharness"]
CMD ["run"]
