"""The integration tests' fixtures (real stokerd processes, YOLO data sets),
for the comparisons with Ultralytics itself: they run once, in
`make check-detect-parity`. Ultralytics is kept off the network and out of the
user's home."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import shared_fixtures  # noqa: E402

shared_fixtures.export(globals())
shared_fixtures.ultralytics_offline(BUILD)  # noqa: F821 (exported)
