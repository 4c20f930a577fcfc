#!/usr/bin/env python3
"""The short recipe proof's first epoch over many seeds: the validation
top-1, validation loss and training loss after epoch 1 of
tests/batchops/test_proof.py's setup (the 3-layer CNN at 32 px, 4 x 16
training photos' crops, 4 x 8 validation crops, 2 repeats, batch 16, the
ResNet-50 v2 data recipe), once through torchvision's DataLoader and once
through stoker per seed, and their means compared (Welch's t).

    STOKER_BUILD=build PYTHONPATH=client/python nice -n 10 python3 bench/recipe_first_epoch.py \\
        [--seeds 1-96] [--no-batch-op] [--json OUT.json]

--no-batch-op drops RandomChoice(MixUp, CutMix) on both sides (one-hot
targets), to see whether a difference comes from the batch op. Each seed
runs two epochs (the cosine schedule needs a second) and reports the first.
docs/transforms.md ("The first epoch") quotes it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import recipe_proof  # noqa: E402

CLASSES = 4


def one_hot_run(loader_epochs, steps, seed, args, evalset):
    return recipe_proof.train(args.model, CLASSES, loader_epochs, steps, args.epochs, seed, args.lr, evalset)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1-96", help="FIRST-LAST")
    ap.add_argument("--no-batch-op", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import stoker.torch
    from scipy import stats
    from torchvision import datasets
    from cpu_per_image import scratch_daemon

    first, last = (int(v) for v in a.seeds.split("-"))
    args = types.SimpleNamespace(model="cnn", size=32, batch_size=16, epochs=2, reps=2, lr=0.05, loader_workers=0)
    torch.set_num_threads(1)
    out = {"torchvision": [], "stoker": []}
    with tempfile.TemporaryDirectory() as tmp:
        roots = []
        for name, n, seed in (("train", 16, 0), ("val", 8, 1)):
            roots.append(os.path.join(tmp, name))
            subprocess.run([sys.executable, os.path.join(HERE, "..", "scripts", "mkdataset.py"), roots[-1],
                            "--classes", str(CLASSES), "--per-class", str(n), "--seed", str(seed)], check=True,
                           stdout=subprocess.DEVNULL)
        root, evalset = roots[0], recipe_proof.eval_set(roots[1], args.size)

        def one_hot(x, y):
            return x, torch.nn.functional.one_hot(torch.as_tensor(y).long(), CLASSES).float()

        with scratch_daemon(1) as (sock, _):
            for s in range(first, last + 1):
                if a.no_batch_op:
                    torch.manual_seed(s)
                    ds = datasets.ImageFolder(root, transform=recipe_proof.recipe(args.size))
                    sampler = recipe_proof.RASampler(len(ds), args.reps, s)
                    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                                                     collate_fn=lambda b: one_hot(*torch.utils.data.default_collate(b)))

                    def tv_epoch(e, sampler=sampler, dl=dl):
                        sampler.epoch = e
                        return dl

                    tv = one_hot_run(tv_epoch, len(dl), s, args, evalset)
                    with stoker.torch.Loader(root, socket=sock, batch_size=args.batch_size, seed=s,
                                             transform=recipe_proof.recipe(args.size), aug_repeats=args.reps,
                                             aug_selected_round=0, drop_last=True, dct_scaling=False) as ld:
                        def st_epoch(e, ld=ld):
                            ld.set_epoch(e)
                            return (one_hot(x, y) for x, y in ld)

                        st = one_hot_run(st_epoch, len(ld), s, args, evalset)
                else:
                    tv = recipe_proof.torchvision_run(root, args, CLASSES, s, evalset)
                    st = recipe_proof.stoker_run(root, sock, args, CLASSES, s, evalset)
                for name, r in (("torchvision", tv), ("stoker", st)):
                    out[name].append({"seed": s, **{m: r[m][0] for m in recipe_proof.METRICS}})
                print(f"seed {s}: top-1 DataLoader {tv['val_top1'][0]:.3f}, stoker {st['val_top1'][0]:.3f}",
                      file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    n = last - first + 1
    print(f"epoch 1 over seeds {first}-{last} ({n} each){', no batch op' if a.no_batch_op else ''}:")
    for m in recipe_proof.METRICS:
        tv = [r[m] for r in out["torchvision"]]
        st = [r[m] for r in out["stoker"]]
        t = stats.ttest_ind(st, tv, equal_var=False)
        sem = [stats.sem(x) for x in (tv, st)]
        print(f"{m}: DataLoader {sum(tv) / n:.4f} +- {sem[0]:.4f}, stoker {sum(st) / n:.4f} +- {sem[1]:.4f} "
              f"(standard errors); Welch t {t.statistic:+.2f}, p {t.pvalue:.3f}")


if __name__ == "__main__":
    main()
