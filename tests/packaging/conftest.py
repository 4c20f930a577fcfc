"""Fixtures of the packaging checks (make check-packaging, make check-image):
the integration suite's data sets and daemons, plus where `make deb` left
the packages and `make image` the image."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import shared_fixtures  # noqa: E402

shared_fixtures.export(globals())

from stoker_testutil import REPO  # noqa: E402

VERSION = (REPO / "VERSION").read_text().strip()


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
