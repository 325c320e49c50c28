# The Sextant operator image: `docker build -t ghcr.io/sextant-dev/sextant:0.1.0 .`
# Runs `sextant operator` as the non-root user 10001 (numeric, so that runAsNonRoot can verify it) and writes nothing
# to its filesystem: the Helm chart runs it with a read-only root filesystem and every capability dropped.
#
# Supply chain: the base image is pinned by digest (PYTHON_IMAGE; the tag is for the reader, the digest decides), and
# every Python package comes from requirements.lock with its hashes (`make lock` writes it from pyproject.toml):
# pip --require-hashes refuses anything unpinned or unhashed, and sextant itself is built with the locked setuptools,
# offline. To move the base: `docker buildx imagetools inspect python:3.11-slim` (or `crane digest`) prints the
# index digest; set it here and in Dockerfile.runner (tests/unit/test_supply_chain.py checks both agree).
ARG PYTHON_IMAGE=python:3.11.14-slim@sha256:c8271b1f627d0068857dce5b53e14a9558603b527e46f1f901722f935b786a39

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/sextant
WORKDIR /src
COPY requirements.lock ./
RUN /opt/sextant/bin/pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/sextant/bin/pip install --no-deps --no-build-isolation --no-index .

FROM ${PYTHON_IMAGE}
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
