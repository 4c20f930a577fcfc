#!/usr/bin/env python3
"""stoker end to end through the Python binding, against a running stokerd.

    peer_stoker.py --socket PATH --dataset DIR [--dtype uint8|float32]
                   [--transform random_resized_crop|center_crop] [--dct-scaling true|false] ...

Every batch is really taken (released and the next one received) and a
small slice of it is read, as a trainer would hand it on; no full copy.
"""

import errno
import sys

from _common import epoch_reader, log_to_stderr, measure, peer_arguments, result, unavailable


def main():
    p = peer_arguments()
    p.add_argument("--socket", required=True)
    p.add_argument("--dtype", default="uint8", choices=["uint8", "float32"])
    p.add_argument("--transform", default="random_resized_crop", choices=["random_resized_crop", "center_crop"])
    p.add_argument("--dct-scaling", choices=["default", "true", "false"], default="default",
                   help="decode large crops at a DCT reduction (default: the transform's own choice)")
    p.add_argument("--order", default="samples", choices=["samples", "shards"],
                   help="tar shard data sets: sample order (random access) or shard order")
    a = p.parse_args()
    log = log_to_stderr(f"stoker {a.dtype}")

    try:
        import stoker
    except ImportError as e:
        unavailable("not installed", f"import stoker: {e} (run make; PYTHONPATH=client/python)")

    kw = dict(dataset=a.dataset, socket=a.socket, batch_size=a.batch_size, image_size=a.image_size,
              transform=a.transform, seed=0)
    if a.dct_scaling != "default":
        kw["dct_scaling"] = a.dct_scaling == "true"
    if a.dtype != "uint8":
        kw["dtype"] = a.dtype
    if a.order != "samples":
        kw["order"] = a.order
    try:
        loader = stoker.Loader(**kw)
    except TypeError as e:  # the binding has no dtype argument yet
        unavailable("not available", f"stoker.Loader(dtype={a.dtype!r}): {e}")
    except stoker.StokerError as e:
        if a.dtype != "uint8" and e.errno == errno.EINVAL:
            unavailable("not available", f"stoker.Loader(dtype={a.dtype!r}): {e}")
        raise

    want_shape = ((a.image_size, a.image_size, 3) if a.dtype == "uint8"
                  else (3, a.image_size, a.image_size))
    seen = {}

    read_epoch = epoch_reader(loader, loader.samples_per_epoch, seen)

    def run_epoch(epoch):
        loader.set_epoch(epoch)
        return read_epoch(epoch)

    with loader:
        r = measure(run_epoch, a.epochs, a.min_seconds, log)
        try:  # the daemon's view while still attached: ring and cache bytes
            st = stoker.stats(socket=a.socket)
            r["daemon_stats"] = {k: st.get(k) for k in ("ring_bytes", "memory_budget_bytes", "worker_busy",
                                                        "samples_decoded", "samples_copied", "decode_errors")}
            r["daemon_stats"]["cache_bytes"] = (st.get("cache") or {}).get("bytes")
        except (stoker.StokerError, ValueError) as e:
            r["daemon_stats"] = {"error": str(e)}
    if seen.get("dtype") != a.dtype or tuple(seen.get("shape", ())) != want_shape:
        unavailable("not available", f"asked for {a.dtype} {want_shape}, got {seen}")
    r.update(batch_size=a.batch_size, output=seen)
    result(**r)


if __name__ == "__main__":
    sys.exit(main())
