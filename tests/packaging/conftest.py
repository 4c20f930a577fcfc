"""Fixtures of the packaging checks (make check-packaging, make check-image),
beside the data sets and daemons of tests/conftest.py: where `make deb` left
the packages and `make image` the image."""

import os
from pathlib import Path

import pytest

from stoker_testutil import REPO, VERSION


@pytest.fixture(scope="session")
def deb_dir():
    d = Path(os.environ.get("STOKER_DEB_DIR") or REPO / "build" / "deb")
    debs = sorted(d.glob("*.deb"))
    if not debs:
        pytest.fail(f"no .deb in {d}: run make deb (or set STOKER_DEB_DIR)")
    return d


@pytest.fixture(scope="session")
def image_dir():
    d = Path(os.environ.get("STOKER_IMAGE_DIR") or REPO / "build" / "image")
    if not (d / f"stoker-{VERSION}.oci.tar").exists():
        pytest.fail(f"no stoker-{VERSION}.oci.tar in {d}: run make image (or set STOKER_IMAGE_DIR)")
    return d
