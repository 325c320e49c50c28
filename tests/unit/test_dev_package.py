"""`sextant dev` works from an installed wheel: the control plane's build script and the kwok Stages are package
data of sextant.dev.localcluster (not files of the checkout), and hack/build-controlplane.sh still runs the script."""

from __future__ import annotations

import importlib.resources
import os
import subprocess
import tomllib
from pathlib import Path

import yaml

from sextant.dev import localcluster

DATA = ("build-controlplane.sh", "kwok-stages.yaml")


def test_the_build_script_and_the_stages_are_package_data():
    files = importlib.resources.files("sextant.dev.localcluster")
    assert all(files.joinpath(name).is_file() for name in DATA)
    assert localcluster.BUILD_SCRIPT == Path(str(files.joinpath("build-controlplane.sh")))
    assert localcluster.DEFAULT_STAGES == Path(str(files.joinpath("kwok-stages.yaml")))
    stages = [d for d in yaml.safe_load_all(localcluster.DEFAULT_STAGES.read_text()) if d]
    assert stages and all(d["kind"] == "Stage" for d in stages)


def test_the_wheel_takes_them_along():
    pyproject = tomllib.loads((localcluster.REPO_ROOT / "pyproject.toml").read_text())
    assert sorted(pyproject["tool"]["setuptools"]["package-data"]["sextant.dev.localcluster"]) == sorted(DATA)


def fake_cache(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A cache that already holds (fake) binaries of versions nobody builds: the script finds them, builds nothing."""
    env = {**os.environ, "SEXTANT_CACHE": str(tmp_path), "K8S_VERSION": "v0.0.1", "ETCD_VERSION": "v0.0.2",
           "KWOK_VERSION": "v0.0.3"}
    bindir = tmp_path / "controlplane-k8s-v0.0.1-etcd-v0.0.2-kwok-v0.0.3-resume" / "bin"
    bindir.mkdir(parents=True)
    for name in localcluster.BINARIES:
        (bindir / name).write_text("#!/bin/sh\n")
        (bindir / name).chmod(0o755)
    return env, bindir


def test_the_packaged_script_runs_outside_a_checkout(tmp_path, monkeypatch):
    env, bindir = fake_cache(tmp_path)
    for key in ("SEXTANT_CACHE", "K8S_VERSION", "ETCD_VERSION", "KWOK_VERSION"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.delenv("SEXTANT_TEST_BINDIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert localcluster.build_controlplane(quiet=True) == bindir


def test_the_checkouts_hack_script_runs_the_packaged_one(tmp_path):
    env, bindir = fake_cache(tmp_path)
    proc = subprocess.run([str(localcluster.REPO_ROOT / "hack" / "build-controlplane.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(bindir)


def test_make_run_says_it_builds_only_when_it_would(tmp_path, monkeypatch):
    """`make run`'s "(first time: builds it, ~8 min)" only when the cache lacks a binary; the check builds nothing."""
    env, bindir = fake_cache(tmp_path / "full")
    monkeypatch.delenv("SEXTANT_TEST_BINDIR", raising=False)
    for key in ("K8S_VERSION", "ETCD_VERSION", "KWOK_VERSION"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("SEXTANT_CACHE", env["SEXTANT_CACHE"])
    assert localcluster.controlplane_built()
    (bindir / "kwokctl").unlink()
    assert not localcluster.controlplane_built()
    monkeypatch.setenv("SEXTANT_CACHE", str(tmp_path / "empty"))
    assert not localcluster.controlplane_built()
    assert not (tmp_path / "empty").exists() or not any((tmp_path / "empty").rglob("*/bin"))  # nothing built
