#!/usr/bin/env python3
"""The recipe training proof: a torchvision model trained with torchvision's
ResNet-50 v2 recipe's data side through torchvision's DataLoader and through
stoker, the same seeds, and their per-epoch curves compared.

    STOKER_BUILD=build PYTHONPATH=client/python nice -n 10 python3 bench/recipe_proof.py \\
        [--model resnet18] [--size 48] [--epochs 12] [--seeds 1,2] [--json OUT.json]
    python3 bench/recipe_proof.py --report OUT.json [MORE.json]   # the tables and criterion of saved runs

The recipe (references/classification, ResNet-50 v2): RandomResizedCrop,
RandomHorizontalFlip, TrivialAugmentWide, PILToTensor, ToDtype(float32),
Normalize, RandomErasing(0.1); per batch RandomChoice([MixUp(0.2),
CutMix(1.0)]); CrossEntropyLoss(label_smoothing=0.1); repeated augmentation
(--reps, the recipe's 4). The DataLoader: ImageFolder (PIL) with that
Compose, the references' RASampler (world size 1, every sample selected as
stoker's aug_selected_round=0), the batch op in collate_fn as train.py does.
stoker: stoker.torch.Loader with the same torchvision objects. The model:
torchvision.models.<--model>(num_classes=C) from the seed's initialisation
(the same for both loaders), SGD (momentum 0.9, weight decay 2e-5), cosine
learning rate per step, one CPU thread. Evaluation (the same code for both):
the validation ImageFolder resized to size / 0.875 and centre-cropped, its
loss (no smoothing) and top-1 after every epoch.

The data: real photos (data/photos, their NOTICE.md) turned into two
ImageFolders by scripts/mkdataset.py (train --seed 0, validation --seed 1:
other crops of the same photos), class k = photo k.

The criterion (docs/transforms.md): at each epoch e and for each metric
(training loss, validation loss, validation top-1), the mean of stoker's
runs must lie in the DataLoader runs' range widened by k * sd_e: sd_e is
the run-to-run standard deviation at e, pooled within the loaders over every
run the report holds (--report with several JSONs: all their runs), and k is
set so that a loader equal to the DataLoader leaves the band at one (metric,
epoch) point with probability 0.05 / (3 * epochs) when sd is known (normal
runs; Monte Carlo): at most 5 % over the whole curve (Bonferroni). With two
seeds each k = 2.83. Each JSON (one invocation: two seeds each) is judged
alone, and all of them together.
Also printed: the mean over epochs of |stoker's mean - the DataLoader's
mean| against the mean within-loader seed range, and Welch's t-test on the
runs' curves averaged over the epochs.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
METRICS = ("train_loss", "val_loss", "val_top1")


def recipe(size):
    import torch
    from torchvision.transforms import v2
    return v2.Compose([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(),
                       v2.TrivialAugmentWide(), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD), v2.RandomErasing(0.1)])


def batch_op(classes):
    from torchvision.transforms import v2
    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=classes), v2.CutMix(alpha=1.0, num_classes=classes)])


class RASampler:
    """torchvision references/classification/sampler.py's RASampler on one
    rank (shuffled with the seed and epoch), every sample selected (stoker's
    aug_selected_round=0; the reference's 256-rounding would select nothing
    of a data set under 256 samples)."""

    def __init__(self, n, reps, seed):
        self.n, self.reps, self.seed, self.epoch = n, reps, seed, 0

    def __iter__(self):
        import torch
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        idx = [i for i in torch.randperm(self.n, generator=g).tolist() for _ in range(self.reps)]
        return iter(idx[: self.n])

    def __len__(self):
        return self.n


def make_data(out, classes, per_class, val_per_class, min_side, max_side):
    """(train root, validation root) built from data/photos."""
    mk = os.path.join(REPO, "scripts", "mkdataset.py")
    roots = []
    for name, seed, n in (("train", 0, per_class), ("val", 1, val_per_class)):
        root = os.path.join(out, name)
        subprocess.run([sys.executable, mk, root, "--classes", str(classes), "--per-class", str(n), "--seed",
                        str(seed), "--min-side", str(min_side), "--max-side", str(max_side), "--jobs", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        roots.append(root)
    return roots


def eval_set(root, size):
    """The validation ImageFolder as tensors: Resize(size / 0.875), CenterCrop, Normalize."""
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2
    t = v2.Compose([v2.Resize(int(round(size / 0.875)), antialias=True), v2.CenterCrop(size), v2.PILToTensor(),
                    v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    ds = datasets.ImageFolder(root, transform=t)
    xs, ys = zip(*[ds[i] for i in range(len(ds))])
    return torch.stack(xs), torch.tensor(ys)


def make_model(name, classes):
    import torch
    import torchvision
    if name == "cnn":  # the short check's: three conv layers with batch norm
        def block(i, o):
            return [torch.nn.Conv2d(i, o, 3, padding=1, bias=False), torch.nn.BatchNorm2d(o), torch.nn.ReLU()]
        return torch.nn.Sequential(*block(3, 16), torch.nn.MaxPool2d(2), *block(16, 32), torch.nn.MaxPool2d(2),
                                   *block(32, 64), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                   torch.nn.Linear(64, classes))
    return getattr(torchvision.models, name)(num_classes=classes)


def train(model, classes, batches_of_epoch, steps_per_epoch, epochs, seed, lr, evalset):
    """Per-epoch curves {train_loss, val_loss, val_top1} of one run."""
    import torch
    torch.manual_seed(seed)
    net = make_model(model, classes)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=2e-5)
    # the references' linear warm-up (from lr * 0.01, here over the first epoch), then cosine per step
    warm = steps_per_epoch
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=warm),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch - warm)], milestones=[warm])
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    xs, ys = evalset
    curves = {k: [] for k in METRICS}
    for epoch in range(epochs):
        net.train()
        total, n = 0.0, 0
        for images, targets in batches_of_epoch(epoch):
            loss = loss_fn(net(images.float()), targets.float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total, n = total + loss.item() * len(images), n + len(images)
        net.eval()
        with torch.no_grad():
            logits = torch.cat([net(xs[i:i + 64]) for i in range(0, len(xs), 64)])
        curves["train_loss"].append(total / n)
        curves["val_loss"].append(torch.nn.functional.cross_entropy(logits, ys).item())
        curves["val_top1"].append((logits.argmax(1) == ys).float().mean().item())
    return curves


def torchvision_run(root, a, classes, seed, evalset):
    import torch
    from torchvision import datasets
    torch.manual_seed(seed)
    ds = datasets.ImageFolder(root, transform=recipe(a.size))
    sampler = RASampler(len(ds), a.reps, seed)
    mix = batch_op(classes)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=sampler, drop_last=True,
                                         num_workers=a.loader_workers, persistent_workers=a.loader_workers > 0,
                                         collate_fn=lambda b: mix(*torch.utils.data.default_collate(b)))

    def epoch(e):
        sampler.epoch = e
        return loader

    return train(a.model, classes, epoch, len(loader), a.epochs, seed, a.lr, evalset)


def stoker_run(root, sock, a, classes, seed, evalset):
    import stoker.torch
    with stoker.torch.Loader(root, socket=sock, batch_size=a.batch_size, seed=seed, transform=recipe(a.size),
                             batch_transform=batch_op(classes), aug_repeats=a.reps, aug_selected_round=0,
                             drop_last=True, dct_scaling=False) as ld:
        def epoch(e):
            ld.set_epoch(e)
            return ld

        return train(a.model, classes, epoch, len(ld), a.epochs, seed, a.lr, evalset)


def outside_band(ref, got, metric, factor, floor):
    """The criterion: at each epoch e the DataLoader runs' band is
    [min - factor * w, max + factor * w] with w = max(their range at e,
    floor); the epochs (1-based) where the mean of stoker's runs lies outside
    it, as (epoch, stoker's mean, lo, hi)."""
    out = []
    for e in range(len(ref[0][metric])):
        r = [x[metric][e] for x in ref]
        g = sum(x[metric][e] for x in got) / len(got)
        w = max(max(r) - min(r), floor)
        lo, hi = min(r) - factor * w, max(r) + factor * w
        if not lo <= g <= hi:
            out.append((e + 1, round(g, 4), round(lo, 4), round(hi, 4)))
    return out


def run_sd(runs, metric):
    """Per epoch, the run-to-run standard deviation pooled within the
    loaders (each loader's runs about its own mean; needs two runs of one)."""
    out = []
    for e in range(len(runs[0][metric])):
        ss, df = 0.0, 0
        for loader in ("torchvision", "stoker"):
            xs = [r[metric][e] for r in runs if r["loader"] == loader]
            if len(xs) > 1:
                mean = sum(xs) / len(xs)
                ss += sum((x - mean) ** 2 for x in xs)
                df += len(xs) - 1
        out.append(math.sqrt(ss / df) if df else math.nan)
    return out


def band_k(n_ref, n_got, points, alpha=0.05, draws=400_000):
    """k such that the mean of n_got normal runs leaves [min - k sd, max + k sd]
    of n_ref runs of the same loader with probability alpha / points (sd
    known; Monte Carlo with a fixed seed)."""
    import numpy as np
    g = np.random.default_rng(0)
    x = g.standard_normal((draws, n_ref))
    y = g.standard_normal((draws, n_got)).mean(1)
    # the excess beyond the range, in sd: leaving the band is excess > k
    excess = np.maximum(x.min(1) - y, y - x.max(1))
    return float(np.quantile(excess, 1 - alpha / points))


def compare(ref, got, sd=None, k=None):
    """The criterion for each metric (sd: per metric and epoch, default from
    these runs; k: default band_k), the mean over epochs of |stoker's mean -
    the DataLoader's mean| against the mean within-loader seed range, and
    Welch's t on the runs' curves averaged over the epochs."""
    out = {}
    epochs = len(ref[0][METRICS[0]])
    if k is None:
        k = band_k(len(ref), len(got), len(METRICS) * epochs)
    for m in METRICS:
        r = [c[m] for c in ref]
        g = [c[m] for c in got]
        s = sd[m] if sd else run_sd(ref + got, m)
        outside = []
        for e in range(epochs):
            mean = sum(x[e] for x in g) / len(g)
            lo, hi = min(x[e] for x in r) - k * s[e], max(x[e] for x in r) + k * s[e]
            if not lo <= mean <= hi:
                outside.append((e + 1, round(mean, 4), round(lo, 4), round(hi, 4)))
        rng_ref = [max(x[e] for x in r) - min(x[e] for x in r) for e in range(epochs)]
        rng_got = [max(x[e] for x in g) - min(x[e] for x in g) for e in range(epochs)]
        gap = sum(abs(sum(x[e] for x in g) / len(g) - sum(x[e] for x in r) / len(r)) for e in range(epochs)) / epochs
        spread = sum(rng_ref[e] + rng_got[e] for e in range(epochs)) / (2 * epochs)
        avg_r = [sum(x) / epochs for x in r]
        avg_g = [sum(x) / epochs for x in g]
        out[m] = {"k": k, "outside": outside, "mean_gap": gap, "mean_seed_range": spread,
                  "gap_over_range": gap / spread if spread > 0 else math.inf,
                  "curve_mean": [sum(avg_r) / len(r), sum(avg_g) / len(g)], "welch": welch(avg_r, avg_g)}
    return out


def welch(a, b):
    """Welch's t and its two-sided p (scipy) of two samples, or None."""
    try:
        from scipy import stats
    except ImportError:
        return None
    if len(a) < 2 or len(b) < 2:
        return None
    t = stats.ttest_ind(b, a, equal_var=False)
    return [round(float(t.statistic), 3), round(float(t.pvalue), 4)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--per-class", type=int, default=40)
    ap.add_argument("--val-per-class", type=int, default=16)
    ap.add_argument("--min-side", type=int, default=64)
    ap.add_argument("--max-side", type=int, default=112)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--workers", type=int, default=1, help="stokerd's workers")
    ap.add_argument("--loader-workers", type=int, default=1, help="the DataLoader's num_workers")
    ap.add_argument("--data", help="a directory to build the data sets in (default: a scratch one)")
    ap.add_argument("--json", help="write the runs and the comparison here")
    ap.add_argument("--report", metavar="JSON", nargs="+",
                    help="only print the tables and the criterion of saved runs (several: their runs together)")
    a = ap.parse_args()
    if a.report:
        groups = []
        for path in a.report:
            with open(path) as f:
                groups.append((path, json.load(f)["runs"]))
        report(groups)
        return
    import torch
    from cpu_per_image import scratch_daemon
    torch.set_num_threads(1)
    seeds = [int(s) for s in a.seeds.split(",")]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        train_root, val_root = make_data(a.data or tmp, a.classes, a.per_class, a.val_per_class, a.min_side,
                                         a.max_side)
        evalset = eval_set(val_root, a.size)
        runs = []
        for s in seeds:
            runs.append({"loader": "torchvision", "seed": s,
                         **torchvision_run(train_root, a, a.classes, s, evalset)})
            print(f"torchvision seed {s}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
        with scratch_daemon(a.workers) as (sock, _):
            for s in seeds:
                runs.append({"loader": "stoker", "seed": s, **stoker_run(train_root, sock, a, a.classes, s, evalset)})
                print(f"stoker seed {s}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    ref = [r for r in runs if r["loader"] == "torchvision"]
    got = [r for r in runs if r["loader"] == "stoker"]
    config = {k: v for k, v in vars(a).items() if k not in ("json", "data", "report")}
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"config": config, "runs": runs, "criterion": compare(ref, got),
                       "seconds": round(time.monotonic() - t0)}, f, indent=1)
    report([(a.json or "this run", runs)])


def report(groups):
    """The tables of all the runs, then the criterion for each group (one
    invocation: two seeds each) and for all together, sd from all."""
    runs = sorted((r for _, rs in groups for r in rs), key=lambda r: (r["loader"] != "torchvision", r["seed"]))
    epochs = len(runs[0][METRICS[0]])
    for m in METRICS:
        print(f"\n{m}\n| epoch | " + " | ".join(f"{r['loader']} {r['seed']}" for r in runs) + " |")
        print("|---" * (len(runs) + 1) + "|")
        for e in range(epochs):
            print(f"| {e + 1} | " + " | ".join(f"{r[m][e]:.3f}" for r in runs) + " |")
    sd = {m: run_sd(runs, m) for m in METRICS}
    print("\nrun-to-run sd (pooled within the loaders, all runs): " +
          "; ".join(f"{m} " + " ".join(f"{v:.3f}" for v in sd[m]) for m in METRICS))
    if len(groups) > 1:
        groups = groups + [("all", runs)]
    for name, rs in groups:
        ref = [r for r in rs if r["loader"] == "torchvision"]
        got = [r for r in rs if r["loader"] == "stoker"]
        print(f"\n{name}: DataLoader seeds {[r['seed'] for r in ref]}, stoker seeds {[r['seed'] for r in got]}")
        for m, v in compare(ref, got, sd).items():
            print(f"{m}: stoker's mean outside the DataLoader's range +- {v['k']:.2f} sd at {len(v['outside'])} of "
                  f"{epochs} epochs {v['outside']}; mean |gap of means| {v['mean_gap']:.4f}, mean seed range "
                  f"{v['mean_seed_range']:.4f}, ratio {v['gap_over_range']:.2f}; averaged over the epochs "
                  f"DataLoader {v['curve_mean'][0]:.4f}, stoker {v['curve_mean'][1]:.4f}, Welch (t, p) {v['welch']}")


if __name__ == "__main__":
    main()
