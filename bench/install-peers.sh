#!/bin/sh
# Install the peers `make bench` and `make bench-detect` compare stoker with, from PyPI:
#   torch + torchvision  (PyTorch DataLoader with torchvision transforms)
#   nvidia-dali-cuda120  (NVIDIA DALI; the bench uses only its CPU pipeline)
#   ultralytics          (YOLO's own training data loader, for bench/detect.py;
#                         pulls in opencv-python and pyyaml)
#   webdataset           (WebDataset's own loader, on the same tar shards)
# Each is optional: the bench prints "not installed" for a missing peer.
# The default torch wheel on x86_64 Linux pulls in the CUDA runtime wheels
# (several GB); that is fine for a benchmark machine.
#
#   bench/install-peers.sh [PYTHON]        # default: python3
set -u
PY=${1:-${PYTHON:-python3}}
status=0

pipi() {
	echo "install-peers: $PY -m pip install $*"
	"$PY" -m pip install --disable-pip-version-check "$@" || {
		echo "install-peers: FAILED: $*" >&2
		status=1
	}
}

pipi torch torchvision
pipi nvidia-dali-cuda120
pipi ultralytics
pipi webdataset

"$PY" - <<'PY'
import importlib
for m in ("torch", "torchvision", "nvidia.dali", "ultralytics", "webdataset"):
    try:
        mod = importlib.import_module(m)
        print(f"install-peers: {m} {getattr(mod, '__version__', '?')}")
    except Exception as e:  # noqa: BLE001 - report any import failure
        print(f"install-peers: {m} NOT importable: {e}")
PY
exit $status
