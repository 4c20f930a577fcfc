"""stoker.torch's GPU options where there is no GPU (make check): device=
is refused with the reason and leaves the daemon serving, pin_memory=True
falls back to pageable tensors with a warning. On a GPU, tests/gpu/run.sh
checks the real thing (zero-copy CUDA tensors, streams, pinned copies)."""

import errno
import warnings

import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from stoker_testutil import cuda_driver_present  # noqa: E402

SMALL = dict(image_size=64, batch_size=8, rank=0, world_size=1)



pytestmark = pytest.mark.skipif(cuda_driver_present(), reason="a CUDA driver is here: tests/gpu/run.sh covers it")


def test_device_refused_with_the_reason(daemon, dataset):
    d = daemon()
    with pytest.raises(stoker.StokerError) as e:
        stoker.torch.Loader(dataset, socket=d.socket, device="cuda:0", dtype="float16", **SMALL)
    assert e.value.errno == errno.ENODEV and ("no CUDA driver" in str(e.value) or "without CUDA" in str(e.value))
    with stoker.torch.Loader(dataset, socket=d.socket, **SMALL) as ld:
        assert ld.device == "cpu"
        assert sum(len(b[1]) for b in ld) == ld.samples_per_epoch


def test_pin_memory_falls_back_with_a_warning(daemon, dataset):
    d = daemon()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with stoker.torch.Loader(dataset, socket=d.socket, pin_memory=True, **SMALL) as ld:
            assert not ld.pinned
            images, labels = next(iter(ld))
            assert images.device.type == "cpu" and not images.is_pinned()
    assert any("pin_memory" in str(x.message) for x in w if issubclass(x.category, RuntimeWarning))
