"""GPU checks of the Python binding with PyTorch (tests/gpu/run.sh):

  python3 tests/gpu/torch_check.py SOCKET DATASET

- device="cuda:0" batches reach torch as CUDA tensors without a copy (the
  tensor's data_ptr is the device ring's slot) and equal the CPU path's;
- ordering on a non-default torch stream (Loader(stream=...));
- stoker.torch.Loader(device="cuda:0"): CUDA tensors in the CPU layer's
  layouts, ordered on torch's current stream;
- pin_memory=True: the ring is page-locked, torch sees pinned memory, and a
  non_blocking copy from it is right.
Prints PASS/FAIL lines; exits 1 if any failed.
"""

import sys
import traceback
import warnings

import numpy as np
import torch

import stoker

SOCK, DATA = sys.argv[1], sys.argv[2]
COMMON = dict(socket=SOCK, batch_size=16, image_size=64, seed=21, prefetch=3)
failed = []


def check(name):
    def wrap(fn):
        try:
            detail = fn()
            print(f"PASS torch-{name}: {detail}", flush=True)
        except Exception:  # noqa: BLE001 - report every failure and go on
            failed.append(name)
            print(f"FAIL torch-{name}:\n{traceback.format_exc()}", flush=True)
        return fn
    return wrap


@check("zero-copy")
def _():
    n = 0
    for dtype in ("float32", "float16", "uint8"):
        with stoker.Loader(DATA, device="cuda:0", dtype=dtype, **COMMON) as dev, \
                stoker.Loader(DATA, dtype=dtype, **COMMON) as host:
            assert dev.device == "cuda:0" and host.device == "cpu"
            for bd, bh in zip(dev, host):
                cai = bd.images.__cuda_array_interface__
                t = torch.as_tensor(bd.images, device="cuda:0")
                assert t.is_cuda and t.data_ptr() == cai["data"][0], "torch copied the batch"
                assert tuple(t.shape) == bh.images.shape and str(t.dtype).endswith(np.dtype(dtype).name)
                assert torch.equal(t.cpu(), torch.from_numpy(np.array(bh.images))), f"batch {bh.index} differs"
                assert np.array_equal(bd.labels, bh.labels) and np.array_equal(bd.indices, bh.indices)
                n += 1
    return f"{n} batches (float32, float16, uint8) as CUDA tensors without a copy, equal to the CPU path"


@check("stream")
def _():
    s = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(s):
        with stoker.Loader(DATA, device="cuda:0", dtype="float32", stream=s.cuda_stream, **COMMON) as dev:
            for b in dev:
                # Complete when handed out: consumers need not wait on any stream.
                assert b.images.__cuda_array_interface__["stream"] is None
                sums.append(torch.as_tensor(b.images, device="cuda:0").double().sum().item())
    with stoker.Loader(DATA, dtype="float32", **COMMON) as host:
        ref = [np.asarray(b.images, dtype=np.float64).sum() for b in host]
    assert np.allclose(sums, ref, rtol=0, atol=1e-6), (sums[:3], ref[:3])
    return f"{len(sums)} batches released on a side stream"


@check("torch-layer")
def _():
    import stoker.torch
    n = 0
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # batches follow torch's current stream
        with stoker.torch.Loader(DATA, device="cuda:0", dtype="uint8", rank=0, world_size=1, **COMMON) as dev, \
                stoker.torch.Loader(DATA, dtype="uint8", rank=0, world_size=1, **COMMON) as host:
            for (xd, yd), (xh, yh) in zip(dev, host):
                assert xd.is_cuda and xd.is_contiguous(memory_format=torch.channels_last)
                assert not yd.is_cuda and torch.equal(yd, yh)
                assert torch.equal(xd.cpu(), xh), "device batch differs from the host one"
                n += 1
    return f"{n} uint8 batches as channels_last CUDA tensors on a side stream, equal to the CPU layer's"


@check("pin-memory")
def _():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.from_numpy on a read-only view
        torch.cuda.synchronize()  # pin_memory pins in the current context (torch's): never makes one
        with stoker.Loader(DATA, dtype="uint8", pin_memory="required", **COMMON) as ld:
            assert ld.pinned
            copy = torch.cuda.Stream()
            for b in ld:
                t = torch.from_numpy(b.images)
                assert t.is_pinned(), "torch does not see the ring as pinned"
                with torch.cuda.stream(copy):
                    g = t.cuda(non_blocking=True)
                copy.synchronize()  # before the slot goes back to the daemon
                assert torch.equal(g.cpu(), t)
    return "ring page-locked; non_blocking copies from it are right"


sys.exit(1 if failed else 0)
