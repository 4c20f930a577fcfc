"""Repeated augmentation (aug_repeats): each rank's samples against timm's
RepeatAugSampler and torchvision's RASampler for the same n, world size and
repeats; every copy augmented differently; exact resume and coordinated jobs
with a batch op."""

import math
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
timm_sampler = pytest.importorskip("timm.data.distributed_sampler")

import stoker  # noqa: E402

OPTS = dict(image_size=16, batch_size=6, seed=7)


class RASampler:
    """torchvision's references/classification/sampler.py RASampler (its
    __iter__ and sizes, without torch.distributed)."""

    def __init__(self, n, num_replicas, rank, shuffle=True, seed=0, repetitions=3):
        self.n, self.num_replicas, self.rank, self.shuffle, self.seed = n, num_replicas, rank, shuffle, seed
        self.repetitions, self.epoch = repetitions, 0
        self.num_samples = int(math.ceil(n * float(repetitions) / num_replicas))
        self.total_size = self.num_samples * num_replicas
        self.num_selected_samples = int(math.floor(n // 256 * 256 / num_replicas))

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(self.n, generator=g).tolist()
        else:
            indices = list(range(self.n))
        indices = [ele for ele in indices for i in range(self.repetitions)]
        indices += indices[: (self.total_size - len(indices))]
        assert len(indices) == self.total_size
        indices = indices[self.rank: self.total_size: self.num_replicas]
        assert len(indices) == self.num_samples
        return iter(indices[: self.num_selected_samples])


def epoch_indices(dataset, sock, epoch=0, **kw):
    opts = dict(OPTS, socket=sock, **kw)
    with stoker.Loader(dataset, epoch=epoch, **opts) as ld:
        return [int(i) for b in ld for i in b.indices]


def count_shape(indices):
    """How many indices appear k times: independent of the permutation."""
    return sorted(Counter(Counter(indices).values()).items())


@pytest.mark.parametrize("world,repeats,selected_round", [(1, 3, 256), (2, 3, 256), (3, 2, 16), (4, 3, 0),
                                                          (2, 4, 64)])
def test_ranks_equal_repeat_aug_sampler(daemon, dataset, world, repeats, selected_round):
    d = daemon()
    n = 64
    union = Counter()
    for rank in range(world):
        kw = dict(rank=rank, world_size=world, aug_repeats=repeats, aug_selected_round=selected_round)
        ref = timm_sampler.RepeatAugSampler(list(range(n)), num_replicas=world, rank=rank, shuffle=False,
                                            num_repeats=repeats, selected_round=selected_round)
        # unshuffled: the very same list
        assert epoch_indices(dataset, d.socket, shuffle=False, **kw) == list(ref)
        # shuffled: the same counts per rank and per epoch
        for epoch in (0, 1):
            got = epoch_indices(dataset, d.socket, epoch=epoch, **kw)
            ref.shuffle = True
            ref.set_epoch(epoch)
            want = list(ref)
            assert len(got) == len(want) == len(ref)
            assert count_shape(got) == count_shape(want)
            union.update(got)
            ref.shuffle = False
    with stoker.Loader(dataset, socket=d.socket, world_size=world, aug_repeats=repeats,
                       aug_selected_round=selected_round, **OPTS) as ld:
        assert ld.samples_per_epoch == len(ref)
        assert len(ld) == math.ceil(len(ref) / OPTS["batch_size"])


def test_ranks_equal_rasampler(daemon, make_dataset):
    """torchvision's RASampler selects floor(N // 256 * 256 / W): 256 samples."""
    big = make_dataset(classes=4, per_class=64, min_side=48, max_side=96)[0]
    d = daemon()
    for world, repeats in ((2, 4), (3, 3)):
        for rank in range(world):
            kw = dict(rank=rank, world_size=world, aug_repeats=repeats, image_size=16, batch_size=32, seed=0)
            ref = RASampler(256, world, rank, shuffle=False, repetitions=repeats)
            with stoker.Loader(big, socket=d.socket, shuffle=False, **kw) as ld:
                assert [int(i) for b in ld for i in b.indices] == list(ref)
            with stoker.Loader(big, socket=d.socket, **kw) as ld:
                got = [int(i) for b in ld for i in b.indices]
            ref.shuffle = True
            assert count_shape(got) == count_shape(list(ref))


def test_copies_are_augmented_differently(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, shuffle=False, aug_repeats=3, aug_selected_round=0,
                       **OPTS) as ld:
        b = next(iter(ld))
        idx, images = b.indices.copy(), b.images.copy()
    assert list(idx) == [0, 0, 0, 1, 1, 1]
    for g in (0, 3):
        a, b_, c = images[g], images[g + 1], images[g + 2]
        assert not np.array_equal(a, b_) and not np.array_equal(b_, c) and not np.array_equal(a, c)
    # copy 0 is the sample's run without repeats, pixel for pixel
    with stoker.Loader(dataset, socket=d.socket, shuffle=False, **OPTS) as ld:
        plain = next(iter(ld)).images.copy()
    assert np.array_equal(images[0], plain[0]) and np.array_equal(images[3], plain[1])


MIX = ("RandomChoice", {"transforms": [("MixUp", {"alpha": 0.2}), ("CutMix", {"alpha": 1.0})]})


def run(ld, n=None):
    out = []
    for b in ld:
        out.append((b.images.copy(), b.soft_labels.copy(), b.indices.copy(), b.mix.copy()))
        if n is not None and len(out) == n:
            break
    return out


def test_resume_mid_epoch_exact(daemon, dataset):
    d = daemon()
    kw = dict(OPTS, socket=d.socket, aug_repeats=3, aug_selected_round=0, world_size=2, rank=1,
              batch_transform=MIX, dtype="float32")
    with stoker.Loader(dataset, epoch=1, **kw) as ld:
        whole = run(ld)
    assert len(whole) >= 4
    with stoker.Loader(dataset, epoch=1, **kw) as ld:
        head = run(ld, 2)
        state = ld.state_dict()
    with stoker.Loader(dataset, **kw) as ld:
        ld.load_state_dict(state)
        tail = run(ld)
    for got, want in zip(head + tail, whole, strict=True):
        for g, w in zip(got, want):
            assert np.array_equal(g, w)
    assert "repeats=3 selected_round=0 selected_ratio=0" in state["token"]
    # the token carries the repeats: another plan is refused, not served
    other = dict(kw, aug_repeats=2)
    with stoker.Loader(dataset, **other) as ld:
        with pytest.raises(stoker.StokerError, match="aug_repeats 3"):
            ld.load_state_dict(state)


def test_coordinated_jobs_share_mixed_batches(daemon, dataset):
    d = daemon()
    kw = dict(OPTS, socket=d.socket, aug_repeats=2, aug_selected_round=0, batch_transform=MIX, coordinated=True)
    with stoker.Loader(dataset, **kw) as a, stoker.Loader(dataset, **kw) as b:
        for x, y in zip(a, b):
            assert np.array_equal(x.images, y.images) and np.array_equal(x.soft_labels, y.soft_labels)
            assert np.array_equal(x.mix, y.mix) and np.array_equal(x.indices, y.indices)


def test_repeats_refused_where_not_built(daemon, dataset):
    d = daemon()
    with pytest.raises(stoker.StokerError, match="aug_repeats 65 is over 64"):
        stoker.Loader(dataset, socket=d.socket, aug_repeats=65, **OPTS)
