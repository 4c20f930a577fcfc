"""The one pytest setup of every suite under tests/: tests/support/ on
sys.path (stoker_testutil: paths and helpers; stoker_fixtures: the build,
real-photo and YOLO data sets, real stokerd processes) and those fixtures,
with the hook that attaches a failing test's daemon stderr, for every
suite. A suite's own conftest.py holds only what is its own (tests/network:
the web and S3 servers; tests/packaging: where the packages are)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from stoker_fixtures import (build_dir, daemon, dataset, make_dataset, make_yolo,  # noqa: E402,F401
                             pytest_runtest_makereport)
