"""stoker.transforms.translate: the transforms training scripts already
have (torchvision's classification reference presets, v2 and v1; timm's
create_transform for ViT/DeiT and its defaults) into stokerd's pipeline,
every parameter carried; what cannot run exactly raises ValueError naming
the op and parameter; stoker.torch.Loader(transform=compose) end to end."""

import math

import pytest
import torch
import torchvision.transforms as T
from torchvision.transforms import InterpolationMode, v2

import stoker
from stoker.transforms import translate

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def resnet50_v2_train(v=v2):
    """torchvision/references/classification/presets.py ClassificationPresetTrain,
    the ResNet-50 v2 recipe: --train-crop-size 176 --auto-augment ta_wide --random-erase 0.1."""
    ops = [v.RandomResizedCrop(176, interpolation=InterpolationMode.BILINEAR, antialias=True),
           v.RandomHorizontalFlip(0.5),
           v.TrivialAugmentWide(interpolation=InterpolationMode.BILINEAR)]
    if v is v2:
        ops += [v2.PILToTensor(), v2.ToDtype(torch.float, scale=True)]
    else:
        ops += [T.PILToTensor(), T.ConvertImageDtype(torch.float)]
    ops += [v.Normalize(mean=MEAN, std=STD), v.RandomErasing(p=0.1)]
    if v is v2:
        ops.append(v2.ToPureTensor())
    return v.Compose(ops)


RN50_V2 = [
    ("RandomResizedCrop", {"size": (176, 176), "scale": (0.08, 1.0), "ratio": (0.75, 4 / 3),
                           "interpolation": "bilinear", "antialias": True}),
    ("RandomHorizontalFlip", {"p": 0.5}),
    ("TrivialAugmentWide", {"num_magnitude_bins": 31, "interpolation": "bilinear", "fill": None}),
    ("ToDtype", {"dtype": "uint8"}),
    ("ToDtype", {"dtype": "float32", "scale": True}),
    ("Normalize", {"mean": MEAN, "std": STD}),
    ("RandomErasing", {"p": 0.1, "scale": (0.02, 0.33), "ratio": (0.3, 3.3), "value": 0}),
]


def close(a, b):
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-6)
    return a == b


def assert_ops(got, want):
    assert [n for n, _ in got] == [n for n, _ in want], got
    for (n, p), (_, q) in zip(got, want):
        assert p.keys() == q.keys(), f"{n}: {sorted(p)} != {sorted(q)}"
        for k in p:
            assert close(p[k], q[k]), f"{n}.{k}: {p[k]!r} != {q[k]!r}"


def test_resnet50_v2_recipe_v2():
    assert_ops(translate(resnet50_v2_train(v2)), RN50_V2)


def test_resnet50_v2_recipe_v1():
    want = [op if op[0] != "ToDtype" or op[1]["dtype"] == "uint8" else
            ("ToDtype", {"dtype": "float32", "scale": True}) for op in RN50_V2]
    assert_ops(translate(resnet50_v2_train(T)), want)


def test_eval_preset():
    got = translate(v2.Compose([v2.Resize(232, antialias=True), v2.CenterCrop(224), v2.PILToTensor(),
                                v2.ToDtype(torch.float, scale=True), v2.Normalize(MEAN, STD)]))
    assert_ops(got, [("Resize", {"size": 232, "interpolation": "bilinear", "max_size": None, "antialias": True}),
                     ("CenterCrop", {"size": (224, 224)}), ("ToDtype", {"dtype": "uint8"}),
                     ("ToDtype", {"dtype": "float32", "scale": True}), ("Normalize", {"mean": MEAN, "std": STD})])


def test_vit_recipe_rand_augment():
    got = translate(v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                                v2.RandAugment(interpolation=InterpolationMode.BILINEAR)]))
    assert got[2] == ("RandAugment", {"num_ops": 2, "magnitude": 9, "num_magnitude_bins": 31,
                                      "interpolation": "bilinear", "fill": None})


def test_deit_create_transform():
    from timm.data import create_transform
    t = create_transform(224, is_training=True, color_jitter=0.3, auto_augment="rand-m9-mstd0.5-inc1",
                         interpolation="bicubic", re_prob=0.25, re_mode="pixel", re_count=1)
    assert_ops(translate(t), [
        ("RandomResizedCrop", {"size": (224, 224), "scale": (0.08, 1.0), "ratio": (0.75, 4 / 3),
                               "interpolation": "bicubic"}),
        ("RandomHorizontalFlip", {"p": 0.5}),
        ("rand_augment_transform", {"config_str": "rand-m9-n2-mstd0.5-inc1", "img_mean": (124, 116, 104),
                                    "interpolation": "bicubic", "translate_const": 100}),
        ("ToTensor", {}),
        ("Normalize", {"mean": MEAN, "std": STD}),
        ("RandomErasing", {"p": 0.25, "scale": (0.02, 1 / 3), "ratio": (0.3, 1 / 0.3), "value": "pixel",
                           "count": (1, 1)}),
    ])
    ev = create_transform(224, is_training=False, interpolation="bicubic", crop_pct=0.875)
    assert_ops(translate(ev), [("Resize", {"size": 256, "interpolation": "bicubic", "max_size": None,
                                           "antialias": True}),
                               ("CenterCrop", {"size": (224, 224)}), ("ToTensor", {}),
                               ("Normalize", {"mean": MEAN, "std": STD})])


def test_timm_defaults_and_random_interpolation():
    from timm.data import create_transform
    got = translate(create_transform(160, is_training=True, interpolation="random", auto_augment="rand-m6-mstd0.5-inc1"))
    assert got[0][1]["interpolation"] == "random"
    assert got[2] == ("rand_augment_transform", {"config_str": "rand-m6-n2-mstd0.5-inc1", "img_mean": (124, 116, 104),
                                                 "interpolation": "random", "translate_const": 72})
    got = translate(create_transform(224, is_training=True))
    assert got[2] == ("ColorJitter", {"brightness": (0.6, 1.4), "contrast": (0.6, 1.4), "saturation": (0.6, 1.4),
                                      "hue": None})
    got = translate(create_transform(224, is_training=True, auto_augment="original"))
    assert got[2][0] == "auto_augment_transform" and got[2][1]["config_str"] == "original"
    # The magnitude noise of an AutoAugment policy string is carried, not dropped.
    got = translate(create_transform(224, is_training=True, auto_augment="v0-mstd0.5"))
    assert got[2][0] == "auto_augment_transform" and got[2][1]["config_str"] == "v0-mstd0.5"


@pytest.mark.parametrize("t,words", [
    (T.Compose([T.RandomResizedCrop(224), T.Lambda(lambda x: x)]), ["Lambda"]),
    (v2.Compose([v2.RandomResizedCrop(224, interpolation=InterpolationMode.LANCZOS)]),
     ["RandomResizedCrop", "interpolation", "lanczos"]),
    (v2.Compose([v2.RandomApply([v2.RandomHorizontalFlip()], p=0.3)]), ["RandomApply"]),
    (v2.Compose([v2.RandomResizedCrop(224), torch.nn.Identity()]), ["Identity"]),
    (v2.Compose([v2.ToDtype(torch.float64, scale=True)]), ["ToDtype", "dtype", "float64"]),
])
def test_untranslatable_raise(t, words):
    with pytest.raises(ValueError) as e:
        translate(t)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_torch_loader_takes_a_compose(daemon, make_dataset):
    import stoker.torch
    root, _ = make_dataset(classes=2, per_class=4, min_side=120, max_side=300, seed=6)
    d = daemon()
    compose = T.Compose([T.RandomResizedCrop(64, scale=(0.5, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(),
                         T.Normalize(MEAN, STD)])
    with stoker.torch.Loader(root, socket=d.socket, batch_size=4, transform=compose) as ld:
        images, labels = next(iter(ld))
        assert images.shape == (4, 3, 64, 64) and images.dtype == torch.float32
        assert -2.2 < float(images.min()) and float(images.max()) < 2.7
        shown = [c.get("transforms") for c in stoker.stats(socket=d.socket)["clients"]]
        assert any(s and s.startswith("RandomResizedCrop(size=(64, 64), scale=(0.5, 1), ratio=(0.75, 1.3333333333333333), "
                                         "interpolation=bilinear, antialias=true)") for s in shown), shown
    with pytest.raises(ValueError):
        stoker.torch.Loader(root, socket=d.socket, batch_size=4, transform=T.Compose([T.Lambda(abs)]))
    # a (h, w) output: the torch batch has that shape
    compose = T.Compose([T.RandomResizedCrop((48, 72)), T.RandomHorizontalFlip(), T.PILToTensor()])
    with stoker.torch.Loader(root, socket=d.socket, batch_size=4, transform=compose) as ld:
        images, labels = next(iter(ld))
        assert images.shape == (4, 3, 48, 72) and images.dtype == torch.uint8


def test_doc_recipes_are_accepted():
    """docs/transforms.md's ready-to-copy pipelines pass the daemon's validation."""
    import re
    from pathlib import Path
    from tpipe_util import REPO, check
    doc = (REPO / "docs" / "transforms.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    found = 0
    for block in blocks:
        if "train = [" not in block:
            continue
        ns = {"MEAN": MEAN, "STD": STD}
        exec("\n".join(line for line in block.splitlines() if not line.startswith("loader =")), ns)
        for name in ("train", "val"):
            r = check(stoker.transforms_text(ns[name]))
            assert r[0], f"{name} of a recipe refused: {r[1]}"
            found += 1
    assert found == 8
