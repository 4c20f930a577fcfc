"""The integration tests' fixtures (real stokerd processes, YOLO data sets),
for Ultralytics' trainer fed by stoker: they run once, in `make
check-ultralytics`. Ultralytics is kept off the network and out of the
user's home."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import shared_fixtures  # noqa: E402

shared_fixtures.export(globals())

# Before ultralytics is imported: its settings file goes in the build tree,
# and nothing is downloaded, checked for updates or reported (the test
# machines have no internet).
os.environ.setdefault("YOLO_CONFIG_DIR", str(BUILD / "ultralytics-config"))  # noqa: F821 (exported)
os.environ["YOLO_OFFLINE"] = "1"
