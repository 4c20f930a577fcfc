"""The integration tests' fixtures (real stokerd processes, real-photo data
sets) for test directories that run in make targets of their own
(tests/torch, tests/detect_parity): their conftest.py calls export(globals())."""

import importlib.util
import os
import sys
from pathlib import Path

_INTEGRATION = Path(__file__).resolve().parent


def export(namespace):
    """Put everything the integration conftest defines, fixtures and helpers,
    into `namespace` (so `from conftest import Daemon` finds them there too
    when pytest collects several directories at once)."""
    if str(_INTEGRATION) not in sys.path:
        sys.path.insert(0, str(_INTEGRATION))
    spec = importlib.util.spec_from_file_location("stoker_integration_conftest", _INTEGRATION / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    namespace.update({k: v for k, v in vars(conftest).items() if not k.startswith("__")})


def ultralytics_offline(build):
    """Before ultralytics is imported: its settings file goes in the build
    tree `build`, not the user's home, and nothing is downloaded, checked
    for updates or reported (the test machines have no internet)."""
    os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(build) / "ultralytics-config"))
    os.environ["YOLO_OFFLINE"] = "1"
