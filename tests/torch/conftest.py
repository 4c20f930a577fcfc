"""The integration tests' fixtures (real stokerd processes, real-photo data
sets), for the PyTorch tests: they run once, in `make check-torch`."""

import importlib.util
import sys
from pathlib import Path

_INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
sys.path.insert(0, str(_INTEGRATION))
_spec = importlib.util.spec_from_file_location("stoker_integration_conftest", _INTEGRATION / "conftest.py")
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)

build_dir = _conftest.build_dir
make_dataset = _conftest.make_dataset
make_yolo = _conftest.make_yolo
dataset = _conftest.dataset
daemon = _conftest.daemon
pytest_runtest_makereport = _conftest.pytest_runtest_makereport
