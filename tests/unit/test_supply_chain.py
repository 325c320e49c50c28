"""The images' supply chain (issue 28, Low): both Dockerfiles start from a base image pinned by digest, install only
packages pinned with their hashes from the committed requirements.lock (pip --require-hashes), which `make lock`
makes from pyproject.toml reproducibly; and the runner image's code belongs to root, not to the user 10001 it runs as.

No image is built here (no container runtime in the tests): these read the files the build reads."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.harness import repo_root

ROOT = repo_root()
DOCKERFILES = ("Dockerfile", "Dockerfile.runner")
LOCK = ROOT / "requirements.lock"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / name).read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
        pending = ""
    return out


def stages(name: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each stage's base image (global ARG defaults substituted) and its instructions."""
    args: dict[str, str] = {}
    out: list[tuple[str, list[tuple[str, str]]]] = []
    for word, rest in instructions(name):
        if word == "ARG" and not out:
            key, _, default = rest.partition("=")
            args[key] = default
        elif word == "FROM":
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], rest.split()[0])
            out.append((image, []))
        elif out:
            out[-1][1].append((word, rest))
    return out


def locked() -> dict[str, tuple[Version, str, list[str]]]:
    """requirements.lock: canonical name → (pinned version, marker, sha256 hashes)."""
    text = LOCK.read_text()
    out: dict[str, tuple[Version, str, list[str]]] = {}
    for block in re.split(r"\n(?=\S)", text):
        if block.startswith("#"):
            continue
        head = block.splitlines()[0].rstrip(" \\")
        requirement = Requirement(head)
        (spec,) = requirement.specifier  # exactly one pin: name==version
        assert spec.operator == "==", head
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
        out[canonicalize_name(requirement.name)] = (Version(spec.version), str(requirement.marker or ""), hashes)
    return out


def test_every_base_image_is_pinned_by_digest_and_both_images_share_it():
    bases = {}
    for name in DOCKERFILES:
        images = [image for image, _ in stages(name)]
        assert len(images) == 2, (name, images)  # build, then the image itself
        for image in images:
            assert image.startswith("python:3.11") and DIGEST.search(image), f"{name}: FROM {image} is not pinned"
        bases[name] = set(images)
    assert bases["Dockerfile"] == bases["Dockerfile.runner"] and len(bases["Dockerfile"]) == 1, bases


def test_the_images_install_only_hashed_pinned_packages_from_the_lock():
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!requirements.lock" in ignored, "the build context must hold the lock"
    for name in DOCKERFILES:
        build = stages(name)[0][1]
        runs = [rest for word, rest in build if word == "RUN" and " install " in rest]
        # The lock with --require-hashes (pip refuses an unpinned or unhashed line, and every dependency not in it);
        # then sextant itself with neither dependencies nor an index nor an isolated build (whose setuptools would
        # be fetched unhashed): the lock's setuptools builds it, offline.
        assert runs == ["/opt/sextant/bin/pip install --require-hashes --no-deps -r requirements.lock",
                        "/opt/sextant/bin/pip install --no-deps --no-build-isolation --no-index ."], (name, runs)
        copies = [rest for word, rest in build if word == "COPY"]
        assert copies.index("requirements.lock ./") < copies.index("operator ./operator"), name


def test_the_lock_pins_every_dependency_of_pyproject_with_hashes():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lock = locked()
    assert len(lock) > 20  # the dependencies' own dependencies too
    for name, (version, _, hashes) in lock.items():
        assert hashes, f"{name}=={version} has no --hash"
    wanted = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    wanted += [Requirement(r) for r in pyproject["build-system"]["requires"]]  # built with --no-build-isolation
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{requirement} is not in requirements.lock: run `make lock`"
        version, marker, _ = lock[name]
        assert requirement.specifier.contains(version, prereleases=True), \
            f"requirements.lock pins {name}=={version}, pyproject.toml wants {requirement}: run `make lock`"
        assert marker == str(requirement.marker or ""), (name, marker)


def test_the_lock_is_made_by_a_documented_reproducible_command():
    assert LOCK.read_text().startswith("# This file was autogenerated by uv via the following command:\n"
                                       "#    make lock\n")
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^lock:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "Makefile has no lock target"
    command = " ".join(recipe[1].replace("\\\n", " ").split())
    assert re.search(r"^UV_VERSION \?= \d+\.\d+\.\d+$", makefile, re.M) and "uv==$(UV_VERSION)" in command
    assert re.search(r"^LOCK_DATE \?= \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", makefile, re.M)
    for part in ("uv pip compile", "pyproject.toml hack/lock-build.in", "--universal", "--python-version 3.11",
                 "--generate-hashes", "--exclude-newer $(LOCK_DATE)", "-o requirements.lock"):
        assert part in command, part
    assert (ROOT / "hack" / "lock-build.in").read_text().count("setuptools") >= 1


def test_the_runner_images_code_is_roots_not_the_users_it_runs_as():
    for name in DOCKERFILES:
        final = stages(name)[-1][1]
        for word, rest in final:
            # COPY and ADD leave root the owner unless told otherwise; nothing may hand the code to the user.
            assert "--chown" not in rest, f"{name}: {word} {rest}"
            if word == "RUN":
                assert not re.search(r"\bch(own|mod)\b", rest), f"{name}: RUN {rest}"
        assert ("COPY", "--from=build /opt/sextant /opt/sextant") in final, name
        assert [rest for word, rest in final if word == "USER"][-1] == "10001:10001", name
    # What a handler image built on the runner does: install and copy as root, run as 10001.
    readme = (ROOT / "README.md").read_text()
    snippet = readme[readme.index("FROM ghcr.io/sextant-dev/sextant-runner:0.1.0"):]
    snippet = snippet[:snippet.index("```")].splitlines()
    assert snippet.index("USER root") < snippet.index("RUN pip install -r requirements.txt") < \
        snippet.index("USER 10001"), snippet
