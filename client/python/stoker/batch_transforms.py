# SPDX-License-Identifier: MIT
"""Batch ops (MixUp / CutMix) for stoker's Loader: their framework-free form
and the translation of torchvision's and timm's objects into it.

The framework-free form is one op as (name, params):

    ("MixUp", {"alpha": 0.2, "num_classes": 1000})
    ("CutMix", {"alpha": 1.0})
    ("RandomChoice", {"transforms": [("MixUp", {...}), ("CutMix", {...})], "p": [0.5, 0.5]})
    ("timm.Mixup", {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "switch_prob": 0.5, "mode": "batch",
                    "label_smoothing": 0.1, "num_classes": 1000})

or a list holding one such op. `to_text` makes the daemon's text of it
(Attach.batch_transform; the daemon checks every parameter and refuses a bad
one by name). `from_object` takes torchvision.transforms.v2's MixUp, CutMix
and a RandomChoice of them, and timm.data.Mixup (or FastCollateMixup), and
reads every parameter; anything else raises ValueError naming it. No
framework is imported here: objects are recognised by their class's module
and name.
"""

import math

__all__ = ["to_text", "from_object", "normalize"]

_TV_OPS = ("MixUp", "CutMix")
_TIMM_KEYS = ("mixup_alpha", "cutmix_alpha", "cutmix_minmax", "prob", "switch_prob", "mode", "correct_lam",
              "label_smoothing", "num_classes", "multi_label")


def _num(v, what):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"{what} must be a finite number, not {v!r}")
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def _value(v, what):
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, (int, float)):
        return _num(v, what)
    if isinstance(v, str):
        if not v.replace("_", "").isalnum():
            raise ValueError(f"{what}: {v!r} is not a word")
        return v
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_num(x, what) for x in v) + ")"
    raise ValueError(f"{what}: {v!r} is not a number, a word or a tuple of numbers")


def _op_text(name, params):
    if name not in _TV_OPS and name != "timm.Mixup":
        raise ValueError(f"batch_transform: {name} is not a batch op (MixUp, CutMix, RandomChoice, timm.Mixup)")
    args = ", ".join(f"{k}={_value(v, f'{name}.{k}')}" for k, v in params.items())
    return f"{name}({args})"


def normalize(spec):
    """One (name, params) op from a list of one op, an op, or a text."""
    if isinstance(spec, (list, tuple)) and len(spec) == 1 and isinstance(spec[0], (list, tuple)):
        spec = spec[0]
    if not (isinstance(spec, (list, tuple)) and len(spec) == 2 and isinstance(spec[0], str)
            and isinstance(spec[1], dict)):
        raise ValueError(f"batch_transform: expected (name, params) or a list of one, not {spec!r}")
    return spec[0], dict(spec[1])


def to_text(spec):
    """The daemon's text of a batch op (a text is returned as it is)."""
    if isinstance(spec, str):
        return spec
    name, params = normalize(spec)
    if name == "RandomChoice":
        params = dict(params)
        subs = params.pop("transforms", None)
        p = params.pop("p", None)
        if params:
            raise ValueError(f"RandomChoice: unknown parameter(s) {', '.join(sorted(params))}")
        if not subs:
            raise ValueError("RandomChoice: no transforms")
        parts = []
        for sub in subs:
            sname, sparams = normalize(sub)
            if sname not in _TV_OPS:
                raise ValueError(f"RandomChoice: {sname} is not a batch op (MixUp or CutMix)")
            parts.append(_op_text(sname, sparams))
        if p is not None:
            parts.append(f"p={_value(list(p), 'RandomChoice.p')}")
        return f"RandomChoice({', '.join(parts)})"
    return _op_text(name, params)


def _tv_op(t):
    name = type(t).__name__
    getter = getattr(t, "_labels_getter", None)
    # "default" becomes torchvision's own heuristic (_find_labels_default_heuristic)
    if getter is not None and "default" not in getattr(getter, "__name__", ""):
        raise ValueError(f"{name}: labels_getter {getter!r} is not built (only the default)")
    params = {"alpha": float(t.alpha)}
    if t.num_classes is not None:
        params["num_classes"] = int(t.num_classes)
    return (name, params)


def _is(obj, modules, names):
    cls = type(obj)
    return cls.__name__ in names and any(cls.__module__.startswith(m) for m in modules)


def from_object(obj):
    """The (name, params) form of a torchvision v2 MixUp / CutMix /
    RandomChoice of them, or a timm Mixup / FastCollateMixup; a text or a
    framework-free op passes through normalize()."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, (list, tuple)):
        return normalize(obj)
    tv = ("torchvision.transforms.v2",)
    if _is(obj, tv, _TV_OPS):
        return _tv_op(obj)
    if _is(obj, tv, ("RandomChoice",)):
        subs = []
        for t in obj.transforms:
            if not _is(t, tv, _TV_OPS):
                raise ValueError(f"RandomChoice: {type(t).__name__} is not a batch op stoker runs "
                                 "(MixUp or CutMix)")
            subs.append(_tv_op(t))
        return ("RandomChoice", {"transforms": subs, "p": [float(x) for x in obj.p]})
    if _is(obj, ("timm.data",), ("Mixup", "FastCollateMixup")):
        if not getattr(obj, "mixup_enabled", True):
            raise ValueError("timm Mixup: mixup_enabled=False (nothing to run: pass no batch_transform)")
        params = {
            "mixup_alpha": float(obj.mixup_alpha), "cutmix_alpha": float(obj.cutmix_alpha),
            "cutmix_minmax": None if obj.cutmix_minmax is None else tuple(float(v) for v in obj.cutmix_minmax),
            "prob": float(obj.mix_prob), "switch_prob": float(obj.switch_prob), "mode": str(obj.mode),
            "correct_lam": bool(obj.correct_lam), "label_smoothing": float(obj.label_smoothing),
            "num_classes": int(obj.num_classes),
        }
        if getattr(obj, "multi_label", False):
            params["multi_label"] = True  # refused by the daemon, by name
        return ("timm.Mixup", params)
    raise ValueError(f"batch_transform: {type(obj).__module__}.{type(obj).__name__} is not a batch op stoker "
                     "runs (torchvision v2 MixUp, CutMix, RandomChoice of them; timm Mixup)")
