"""The integration tests' fixtures (real stokerd processes, real-photo data
sets), for the batch-op tests: they run once, in `make check-batchops`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import shared_fixtures  # noqa: E402

shared_fixtures.export(globals())
