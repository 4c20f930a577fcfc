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

# Everything it defines, fixtures and helpers (`from conftest import Daemon`
# finds them here too when pytest collects both directories at once).
globals().update({k: v for k, v in vars(_conftest).items() if not k.startswith("__")})
