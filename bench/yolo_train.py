#!/usr/bin/env python3
"""YOLO training through Ultralytics' own trainer (issue 12): the same
model, data, seed and settings, once with Ultralytics' data loader
(DetectionTrainer) and once with stoker's (stoker.ultralytics.
StokerDetectionTrainer), for two seeds: the spread between Ultralytics'
own two seeds is the yardstick for the stoker/Ultralytics difference.

Builds (once, cached under bench/out/yolo_train/) a data set with
scripts/mkyolo.py --kind scenes --background photo: real photos with
solid class-coloured rectangles, 4 classes, trained and validated on the
same images (a model from scratch on a few dozen images learns little
else in minutes of CPU, and the point is whether losses and mAP climb
alike). Trains yolo11n from its yaml (no weights are downloaded) on the
CPU; each run in its own interpreter, stoker's against its own stokerd
(--workers --cores). Reads each run's results.csv: per-epoch time, train
losses, val mAP50 / mAP50-95, and the final validation of best.pt.

Writes bench/out/yolo_train/summary.json, summary.md (the table) and
curves.png (losses and mAP per epoch). A measurement, not a test.

--task segment and --task pose do it for YOLO-seg and YOLO-pose:
yolo11n-seg / yolo11n-pose from their yaml, SegmentationTrainer /
PoseTrainer against StokerSegmentationTrainer / StokerPoseTrainer, on the
scenes of bench/mkinstances.py (four objects cut out of real photos along
hand-written polygons, with three hand-written keypoints each, pasted onto
real photo backgrounds: every polygon and keypoint exact; pose's data.yaml
has kpt_shape [3, 3] and flip_idx [1, 0, 2]; cached under
bench/out/yolo_train_seg/ and yolo_train_pose/). --val train (the default,
as the detect proof) validates on the training images, --val val on the
separate validation split. Per epoch the losses and the mask (M) or pose
(P) mAP50 and mAP50-95, and the box mAP50-95. --loaders runs one side only
(e.g. Ultralytics' now, stoker's later): each run's result is kept in the
output folder and a later invocation with the same settings reports it.

--task classify does the same for YOLO-cls: yolo11n-cls from its yaml,
Ultralytics' ClassificationTrainer (its own ClassificationDataset loader)
against stoker.ultralytics.StokerClassificationTrainer, on a classify root
of real photos (scripts/mkdataset.py: 4 classes, --images a class in train/,
half that in val/; cached under bench/out/yolo_train_cls/), Ultralytics'
default classify augmentation (RandomResizedCrop, flip, randaugment,
erasing 0.4); per epoch train/loss, val/loss, top-1 and top-5.

    python3 bench/yolo_train.py [--images 48] [--imgsz 256] [--epochs 20] [--batch 8] [--seeds 0 1]
    python3 bench/yolo_train.py --task classify --images 32 --imgsz 64 --epochs 10 --batch 16
    python3 bench/yolo_train.py --task segment --images 48 --imgsz 256 --epochs 20 --batch 8 [--loaders ultralytics]
    make bench-yolo-train BENCH_YOLO_ARGS="--epochs 50"
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402  (Runner, Daemon, REPO, say)

# per task: the model's yaml, stoker's trainer, results.csv's losses and metrics
TASKS = {
    "detect": ("yolo11n.yaml", "StokerDetectionTrainer", ("train/box_loss", "train/cls_loss", "train/dfl_loss"),
               ("metrics/mAP50(B)", "metrics/mAP50-95(B)")),
    "classify": ("yolo11n-cls.yaml", "StokerClassificationTrainer", ("train/loss", "val/loss"),
                 ("metrics/accuracy_top1", "metrics/accuracy_top5")),
    "segment": ("yolo11n-seg.yaml", "StokerSegmentationTrainer",
                ("train/box_loss", "train/seg_loss", "train/cls_loss", "train/dfl_loss"),
                ("metrics/mAP50(M)", "metrics/mAP50-95(M)", "metrics/mAP50-95(B)")),
    "pose": ("yolo11n-pose.yaml", "StokerPoseTrainer",
             ("train/box_loss", "train/pose_loss", "train/kobj_loss", "train/cls_loss", "train/dfl_loss"),
             ("metrics/mAP50(P)", "metrics/mAP50-95(P)", "metrics/mAP50-95(B)")),
}
# the output folder under bench/out/ per task
OUT = {"detect": "yolo_train", "classify": "yolo_train_cls", "segment": "yolo_train_seg", "pose": "yolo_train_pose"}


def train_kwargs(a, seed, project, name):
    """Ultralytics' train() arguments, the same for both loaders."""
    # nbs=batch: an optimizer step every batch (Ultralytics' default nbs=64
    # would step once an epoch on a data set this small).
    return dict(data=a.data, epochs=a.epochs, imgsz=a.imgsz, batch=a.batch, nbs=a.batch, seed=seed, deterministic=True,
                device="cpu", workers=0, plots=False, amp=False, close_mosaic=a.close_mosaic, project=project,
                name=name, exist_ok=True, verbose=False)


def child(argv):
    """One training run (in its own interpreter): prints RESULT {json}."""
    p = argparse.ArgumentParser(prog="yolo_train.py child")
    p.add_argument("loader", choices=["ultralytics", "stoker"])
    p.add_argument("--task", choices=list(TASKS), default="detect")
    for k in ("data", "project", "name"):
        p.add_argument(f"--{k}", required=True)
    for k in ("epochs", "imgsz", "batch", "seed", "close_mosaic"):
        p.add_argument(f"--{k.replace('_', '-')}", type=int, required=True)
    a = p.parse_args(argv)
    from ultralytics import YOLO

    yaml, trainer, _, maps = TASKS[a.task]
    kw = train_kwargs(a, a.seed, a.project, a.name)
    if a.loader == "stoker":
        import stoker.ultralytics
        kw["trainer"] = getattr(stoker.ultralytics, trainer)
    t0 = time.monotonic()
    final = YOLO(yaml).train(**kw)
    wall = time.monotonic() - t0
    with open(os.path.join(a.project, a.name, "results.csv")) as f:
        rows = [{k.strip(): float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    print("RESULT " + json.dumps({"status": "ok", "wall_seconds": wall, "epochs": rows,
                                  "final": {k: float(final.results_dict[k]) for k in maps}}), flush=True)


def build_data(path, images, cores, task="detect", val="train"):
    """detect: mkyolo scenes, data.yaml; classify: an Ultralytics classify
    root (train/ and val/ ImageFolders from scripts/mkdataset.py, 4 classes
    of real photos, `images` a class in train and half that in val);
    segment, pose: bench/mkinstances.py's scenes (`images` training images,
    a third of that for validation), a data.yaml whose val is `val`'s split."""
    stamp = os.path.join(path, ".bench-complete")
    if not os.path.exists(stamp):
        shutil.rmtree(path, ignore_errors=True)
        if task in ("segment", "pose"):
            subprocess.run([run.PY, os.path.join(HERE, "mkinstances.py"), path, "--train", str(images), "--val",
                            str(max(1, images // 3))], check=True, stdout=subprocess.DEVNULL)
        elif task == "classify":
            for split, seed, n in (("train", 0, images), ("val", 1, max(1, images // 2))):
                subprocess.run([run.PY, os.path.join(run.REPO, "scripts", "mkdataset.py"), os.path.join(path, split),
                                "--classes", "4", "--per-class", str(n), "--seed", str(seed), "--min-side", "80",
                                "--max-side", "160", "--jobs", str(cores)], check=True, stdout=subprocess.DEVNULL)
        else:
            subprocess.run([run.PY, os.path.join(run.REPO, "scripts", "mkyolo.py"), path, "--kind", "scenes",
                            "--background", "photo", "--classes", "4", "--images", str(images), "--jobs",
                            str(cores)], check=True, stdout=subprocess.DEVNULL)
        open(stamp, "w").close()
    if task in ("segment", "pose"):
        root = os.path.join(path, task)
        with open(os.path.join(root, "data.yaml")) as f:
            text = f.read()
        yaml = os.path.join(root, f"data-val-{val}.yaml")
        with open(yaml, "w") as f:
            f.write(text.replace("val: images/val\n", f"val: images/{val}\n"))
        return yaml
    return path if task == "classify" else os.path.join(path, "data.yaml")


def summarize(res, task="detect"):
    """Per run: mean epoch time (epochs after the first), final losses, the
    last epoch's and best.pt's mAP; then the differences."""
    losses, maps = TASKS[task][2:]
    out = {}
    for key, r in res.items():
        if r.get("status") != "ok":
            out[key] = {"status": r.get("status"), "reason": r.get("reason")}
            continue
        ep = r["epochs"]
        times = [b["time"] - a["time"] for a, b in zip(ep, ep[1:])]
        out[key] = {"status": "ok", "wall_seconds": round(r["wall_seconds"], 1),
                    "epoch_seconds": round(sum(times) / len(times), 2) if times else None,
                    "last_epoch": {k: round(ep[-1][k], 4) for k in losses + maps},
                    "best_pt": {k: round(v, 4) for k, v in r["final"].items()}}
    return out


def table(summary, seeds, task="detect", runs=None):
    losses, maps = TASKS[task][2:]
    box = "" if task == "detect" else "(B)"  # segment and pose: the box mAP beside the mask or pose one
    short = [k.replace("train/", "").replace("metrics/", "").replace("_loss", "").replace("(B)", box)
             for k in losses + maps]
    lines = ["| run | s/epoch | " + " | ".join(short[:len(losses)]) + " | "
             + " | ".join(f"last {k}" for k in short[len(losses):]) + " | "
             + " | ".join(f"best.pt {k}" for k in short[len(losses):]) + " |",
             "|---" * (2 + len(losses) + 2 * len(maps)) + "|"]
    for key, s in summary.items():
        if s.get("status") != "ok":
            lines.append(f"| {key} | {s.get('status')}: {s.get('reason')} |")
            continue
        le, b = s["last_epoch"], s["best_pt"]
        lines.append(f"| {key} | {s['epoch_seconds']} | " + " | ".join(f"{le[k]:.3f}" for k in losses)
                     + " | " + " | ".join(f"{le[k]:.3f}" for k in maps) + " | "
                     + " | ".join(f"{b[k]:.3f}" for k in maps) + " |")
    ok = {k: s for k, s in summary.items() if s.get("status") == "ok"}
    for k in maps:
        u = [ok[f"ultralytics seed {s}"]["best_pt"][k] for s in seeds if f"ultralytics seed {s}" in ok]
        st = [ok[f"stoker seed {s}"]["best_pt"][k] for s in seeds if f"stoker seed {s}" in ok]
        if len(u) >= 2 and st:
            lo, hi = min(u), max(u)
            inside = sum(lo <= v <= hi for v in st)
            lines.append(f"\n{k} (best.pt): Ultralytics seeds {u} (spread {hi - lo:.4f}); "
                         f"stoker {st}; |mean difference| {abs(sum(st) / len(st) - sum(u) / len(u)):.4f}; "
                         f"stoker runs inside Ultralytics' range: {inside} of {len(st)}")
    return "\n".join(lines) + "\n\n" + per_epoch(runs or {}, maps[1])


def per_epoch(runs, key):
    """One row per run: `key` (a results.csv column) at each epoch."""
    ok = {k: r for k, r in runs.items() if r.get("status") == "ok"}
    if not ok:
        return ""
    n = max(len(r["epochs"]) for r in ok.values())
    lines = [f"{key} per epoch", "| run | " + " | ".join(str(i + 1) for i in range(n)) + " |", "|---" * (n + 1) + "|"]
    for name, r in ok.items():
        lines.append(f"| {name} | " + " | ".join(f"{e[key]:.3f}" for e in r["epochs"]) + " |")
    return "\n".join(lines)


def plot(res, path, task="detect"):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    losses, maps = TASKS[task][2:]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for key, r in res.items():
        if r.get("status") != "ok":
            continue
        ep = r["epochs"]
        x = [e["epoch"] for e in ep]
        style = "-" if key.startswith("stoker") else "--"
        axes[0].plot(x, [sum(e[k] for k in losses if k.startswith("train/")) for e in ep], style, label=key)
        axes[1].plot(x, [e[maps[0]] for e in ep], style, label=key)
        axes[2].plot(x, [e[maps[1]] for e in ep], style, label=key)
    for ax, t in zip(axes, ("train loss", maps[0], maps[1])):
        ax.set_title(t)
        ax.set_xlabel("epoch")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=list(TASKS), default="detect",
                   help="classify: yolo11n-cls with StokerClassificationTrainer (--images: per class); segment, "
                        "pose: yolo11n-seg / yolo11n-pose on bench/mkinstances.py's scenes")
    p.add_argument("--images", type=int, default=48)
    p.add_argument("--imgsz", type=int, default=256)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--close-mosaic", type=int, default=5)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--loaders", nargs="+", choices=["ultralytics", "stoker"], default=["ultralytics", "stoker"],
                   help="the sides to run; the other side's kept results (same settings) are reported with them")
    p.add_argument("--val", choices=["train", "val"], default="train",
                   help="segment and pose: validate on the training images (default) or the validation split")
    p.add_argument("--out")
    a = p.parse_args()
    a.out = a.out or os.path.join(HERE, "out", OUT[a.task])
    os.makedirs(a.out, exist_ok=True)
    a.data = build_data(os.path.join(a.out, "data"), a.images, a.cores, a.task, a.val)
    settings = {k: getattr(a, k) for k in ("task", "images", "imgsz", "epochs", "batch", "close_mosaic", "val")}
    tmp = tempfile.mkdtemp(prefix="stoker-yolo-train-")
    r = run.Runner(set(range(os.cpu_count())), a.out)
    # Ultralytics writes its settings here, not in the user's home, and
    # fetches nothing (no downloads, update checks or telemetry).
    r.env.setdefault("YOLO_CONFIG_DIR", os.path.join(a.out, "ultralytics-config"))
    r.env.setdefault("YOLO_OFFLINE", "1")
    res = {}
    try:
        for seed in a.seeds:
            for loader in ("ultralytics", "stoker"):
                key = f"{loader} seed {seed}"
                kept = os.path.join(a.out, f"run-{loader}-{seed}.json")
                if loader not in a.loaders:  # this side's earlier run with the same settings, if there is one
                    try:
                        with open(kept) as f:
                            old = json.load(f)
                        if old.get("settings") == settings:
                            res[key] = old["result"]
                            run.say(f"{key}: the earlier run's result ({kept})")
                    except (OSError, ValueError, KeyError):
                        pass
                    continue
                cmd = [os.path.abspath(__file__), "child", loader, "--task", a.task, "--data", a.data, "--project",
                       os.path.join(a.out, "runs"), "--name", f"{loader}-{seed}", "--epochs", str(a.epochs),
                       "--imgsz", str(a.imgsz), "--batch", str(a.batch), "--seed", str(seed),
                       "--close-mosaic", str(a.close_mosaic)]
                run.say(f"{key}: training")
                if loader == "stoker":
                    d = run.Daemon(r, tmp, a.cores, f"stoker-{seed}")
                    r.env["STOKER_SOCKET"] = d.sock
                    try:
                        res[key] = r.peer(cmd)
                    finally:
                        d.stop()
                else:
                    res[key] = r.peer(cmd)
                run.say(f"{key}: {res[key].get('status')} in {res[key].get('wall_seconds', 0):.0f}s")
                with open(kept, "w") as f:
                    json.dump({"settings": settings, "result": res[key]}, f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarize(res, a.task)
    settings.update(seeds=a.seeds, cores=a.cores, loaders=a.loaders)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"settings": settings, "summary": summary, "runs": res}, f, indent=1)
    text = table(summary, a.seeds, a.task, res)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(f"settings: {settings}\n\n{text}\n")
    print(text)
    if plot(res, os.path.join(a.out, "curves.png"), a.task):
        run.say(f"curves: {os.path.join(a.out, 'curves.png')}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
    else:
        main()
