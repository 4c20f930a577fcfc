"""The recipe proof, short: a small CNN on a small real-photo ImageFolder
with torchvision's ResNet-50 v2 data recipe (RandomResizedCrop, flip,
TrivialAugmentWide, erasing 0.1, RandomChoice(MixUp 0.2, CutMix 1.0),
label smoothing 0.1, repeated augmentation), once with torchvision's
DataLoader (RASampler, the batch op in collate_fn as the reference's
train.py) and once with stoker, three seeds each (PROOF_SEEDS): stoker's
last epochs' loss lies within the DataLoader's run-to-run spread, and every
run learns (the last epoch's loss below the first's). Small (64 photos, 16
epochs of a 3-layer CNN): it catches a broken recipe, not a subtle bias."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2")
datasets = pytest.importorskip("torchvision.datasets")

import stoker.torch  # noqa: E402

SIZE, BATCH, EPOCHS, REPS, CLASSES = 32, 16, 16, 2, 4
SEEDS = tuple(int(s) for s in __import__("os").environ.get("PROOF_SEEDS", "1,2,3").split(","))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def recipe():
    return v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip(),
                       v2.TrivialAugmentWide(), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD), v2.RandomErasing(0.1)])


def mix():
    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)])


class RASampler(torch.utils.data.Sampler):
    """torchvision's references RASampler on one rank, selecting n of the
    n * reps positions (as stoker's aug_selected_round=0 on one rank)."""

    def __init__(self, n, reps, seed):
        self.n, self.reps, self.seed, self.epoch = n, reps, seed, 0

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return iter([i for i in torch.randperm(self.n, generator=g).tolist() for _ in range(self.reps)][: self.n])

    def __len__(self):
        return self.n


def model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(64, CLASSES))


def train(batches_of_epoch, seed):
    torch.manual_seed(seed)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    curve = []
    for epoch in range(EPOCHS):
        total, n = 0.0, 0
        for images, targets in batches_of_epoch(epoch):
            loss = loss_fn(net(images.float()), targets.float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + loss.item() * len(images), n + len(images)
        curve.append(total / n)
    return np.array(curve)


def torchvision_curve(root, seed):
    torch.manual_seed(seed)
    ds = datasets.ImageFolder(str(root), transform=recipe())
    sampler = RASampler(len(ds), REPS, seed)
    m = mix()
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=sampler, drop_last=True,
                                         collate_fn=lambda b: m(*torch.utils.data.default_collate(b)))

    def epoch(e):
        sampler.epoch = e
        return loader

    return train(epoch, seed)


def stoker_curve(root, sock, seed):
    with stoker.torch.Loader(root, socket=sock, batch_size=BATCH, seed=seed, transform=recipe(),
                             batch_transform=mix(), aug_repeats=REPS, aug_selected_round=0, drop_last=True,
                             dct_scaling=False) as ld:
        def epoch(e):
            ld.set_epoch(e)
            return ld

        return train(epoch, seed)


def test_recipe_training_curves_within_the_dataloaders_spread(daemon, dataset):
    d = daemon()
    ref = [torchvision_curve(dataset, s) for s in SEEDS]
    got = [stoker_curve(dataset, d.socket, s) for s in SEEDS]
    print("torchvision", [c.round(3).tolist() for c in ref], "stoker", [c.round(3).tolist() for c in got])
    for c in ref + got:
        assert c[-1] < c[0]  # it learns
    # the last three epochs' mean loss: stoker's runs within the DataLoader's
    # spread (its two seeds' difference, widened by itself and a floor)
    tail = lambda c: c[-3:].mean()  # noqa: E731
    lo, hi = min(map(tail, ref)), max(map(tail, ref))
    spread = max(hi - lo, abs(tail(got[0]) - tail(got[1])), 0.05)
    for c in got:
        assert lo - 2 * spread <= tail(c) <= hi + 2 * spread
