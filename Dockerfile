# The Sextant operator image: `docker build -t ghcr.io/sextant-dev/sextant:0.1.0 .`
# Runs `sextant operator` as the non-root user 10001 (numeric, so that runAsNonRoot can verify it) and writes nothing
# to its filesystem: the Helm chart runs it with a read-only root filesystem and every capability dropped.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/sextant
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/sextant/bin/pip install .

FROM python:${PYTHON_VERSION}-slim
RUN groupadd --gid 10001 sextant \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sextant
# Only the installed package and its dependencies: no source tree, build cache or pip cache. Owned by root, so the
# operator cannot change its own code even where the root filesystem is writable.
COPY --from=build /opt/sextant /opt/sextant
ENV PATH=/opt/sextant/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
# /healthz, /readyz, /metrics and the /v2 HTTP API.
EXPOSE 8080
ENTRYPOINT ["sextant", "operator"]
