#!/usr/bin/env python3
"""Letterbox parity with Ultralytics' validator (issue 12): how far stoker's
evaluation batches are from Ultralytics' own, pixel by pixel, and what the
exact mode costs.

Builds (cached under bench/out/parity/) a real-photo YOLO data set with
scripts/mkyolo.py --kind photos (long sides 480..1600, so load_image shrinks
most images by 1-2.5x at 640), starts a stokerd, and for each resample mode
(cv2: full decode + OpenCV's INTER_LINEAR arithmetic, the letterbox
default; antialias: DCT-reduced decode + the Pillow-style filter) reads the
data set as rectangular validation batches (rect=True, stride 32, pad 0.5)
and compares every image with what Ultralytics' YOLODataset(augment=False,
rect=True) gives for the same file: mean and max absolute difference per
pixel (over the whole letterboxed image), and whether shapes, ratio_pad and
boxes agree. Then times one epoch of each mode (images/s, one run, same
daemon, best of --repeat) with the square letterbox. Writes
bench/out/detect_parity.json. A measurement, not a test.

    python3 bench/detect_parity.py [--images 200] [--imgsz 640] [--workers N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.environ.get("STOKER_BUILD", os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
os.environ.setdefault("STOKER_BUILD", BUILD)

import stoker  # noqa: E402


def dataset(n):
    out = os.path.join(HERE, "out", "parity", f"photos{n}")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        subprocess.run([sys.executable, os.path.join(REPO, "scripts", "mkyolo.py"), out, "--kind", "photos",
                        "--images", str(n), "--seed", "12", "--min-side", "480", "--max-side", "1600"],
                       check=True, stdout=subprocess.DEVNULL)
    return os.path.join(out, "images", "train")


def ultralytics_dataset(path, imgsz, batch):
    from ultralytics.cfg import get_cfg
    from ultralytics.data.dataset import YOLODataset
    from ultralytics.utils import DEFAULT_CFG

    return YOLODataset(img_path=path, imgsz=imgsz, augment=False, hyp=get_cfg(DEFAULT_CFG), rect=True,
                       batch_size=batch, stride=32, pad=0.5,
                       data={"names": {i: str(i) for i in range(80)}, "nc": 80, "channels": 3})


def compare(sock, path, ds, imgsz, batch, resample):
    index = {f: i for i, f in enumerate(ds.im_files)}
    means, maxes, meta_ok, boxes_ok = [], [], 0, 0
    with stoker.Loader(path, socket=sock, task="detect", transform="letterbox", image_size=imgsz,
                       batch_size=batch, rect=True, resample=resample) as ld:
        for b in ld:
            for i, p in enumerate(ld.sample_paths(b.indices)):
                u = ds[index[p]]
                ref = u["img"].numpy().transpose(1, 2, 0)          # RGB, HWC
                d = np.abs(ref.astype(np.int16) - b.images[i].astype(np.int16))
                means.append(float(d.mean()))
                maxes.append(int(d.max()))
                rp = u["ratio_pad"]
                meta_ok += (tuple(u["ori_shape"]) == tuple(b.shapes[i, :2]) and
                            tuple(u["resized_shape"]) == b.images.shape[1:3] and
                            rp == ((b.ratio_pad[i, 0], b.ratio_pad[i, 1]), (b.ratio_pad[i, 2], b.ratio_pad[i, 3])))
                sb = b.boxes[b.boxes[:, 0] == i][:, 2:]
                ub = u["bboxes"].numpy()
                boxes_ok += ub.shape == sb.shape and bool(np.allclose(ub, sb, atol=1e-5))
    return dict(images=len(means), mean_abs=float(np.mean(means)), worst_image_mean_abs=float(np.max(means)),
                max_abs=int(np.max(maxes)), images_exact=int(sum(m == 0 for m in maxes)),
                metadata_equal=int(meta_ok), boxes_equal=int(boxes_ok))


def throughput(sock, path, imgsz, batch, resample, repeat):
    best = 0.0
    for _ in range(repeat):
        with stoker.Loader(path, socket=sock, task="detect", transform="letterbox", image_size=imgsz,
                           batch_size=batch, shuffle=False, resample=resample, prefetch=4) as ld:
            n, t0 = 0, time.perf_counter()
            for b in ld:
                n += len(b.indices)
            best = max(best, n / (time.perf_counter() - t0))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    path = dataset(args.images)
    ds = ultralytics_dataset(path, args.imgsz, args.batch)
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "s.sock")
        d = subprocess.Popen([os.path.join(BUILD, "stokerd"), "--socket", sock, "--workers", str(args.workers),
                              "--log-level", "warning"])
        try:
            for _ in range(200):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            res = {"images": args.images, "imgsz": args.imgsz, "workers": args.workers}
            for mode in ("cv2", "antialias"):
                res[mode] = compare(sock, path, ds, args.imgsz, args.batch, mode)
            for mode in ("cv2", "antialias"):
                res[mode]["images_per_second"] = throughput(sock, path, args.imgsz, args.batch, mode, args.repeat)
        finally:
            d.terminate()
            d.wait()
    print(f"{args.images} photos, imgsz {args.imgsz}, rect val batches vs Ultralytics' YOLODataset:")
    print(f"{'resample':10} {'mean|d|':>8} {'worst img':>9} {'max|d|':>6} {'exact':>6} {'meta=':>6} "
          f"{'boxes=':>6} {'img/s':>7}")
    for mode in ("cv2", "antialias"):
        r = res[mode]
        print(f"{mode:10} {r['mean_abs']:8.3f} {r['worst_image_mean_abs']:9.3f} {r['max_abs']:6d} "
              f"{r['images_exact']:6d} {r['metadata_equal']:6d} {r['boxes_equal']:6d} {r['images_per_second']:7.0f}")
    print(f"cv2 / antialias throughput: {res['cv2']['images_per_second'] / res['antialias']['images_per_second']:.2f}")
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", "detect_parity.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
