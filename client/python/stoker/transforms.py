"""torchvision (v2 and v1) and timm transforms as stoker's per-sample
pipeline: the list of (name, {parameter: value}) that stoker.Loader's
`transforms` takes and stokerd runs in C (docs/transforms.md).

    from torchvision.transforms import v2
    import stoker.transforms
    ops = stoker.transforms.translate(v2.Compose([
        v2.RandomResizedCrop(176), v2.RandomHorizontalFlip(), v2.TrivialAugmentWide(),
        v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
        v2.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)), v2.RandomErasing(0.1)]))

stoker.torch.Loader(..., transform=compose) calls translate() itself.

Every op is read from its object's attributes with every parameter; what
stokerd cannot run exactly (a Lambda, an unknown op, a parameter value that
is not built) raises ValueError naming the op and the parameter: nothing is
dropped or approximated silently. The PIL-to-tensor steps (PILToTensor,
ToTensor, ToImage, ToDtype, ConvertImageDtype, timm's MaybeToTensor) say
the output dtype; ToPureTensor changes nothing. timm's RandAugment,
AutoAugment and AugMixAugment objects are given back as their policy
strings (rand_augment_transform / auto_augment_transform /
augment_and_mix_transform).
"""

import math
import numbers

__all__ = ["translate"]

_PIL_INTERP = {0: "nearest", 2: "bilinear", 3: "bicubic", 1: "lanczos", 4: "box", 5: "hamming"}
_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.uint8": "uint8",
           "torch.float": "float32", "torch.half": "float16"}


def _fail(op, param, why):
    name = type(op).__name__
    raise ValueError(f"{name}: {'parameter ' + param + ': ' if param else ''}{why}")


def _interp(op, v, param="interpolation"):
    """InterpolationMode, a PIL constant, or timm's (BILINEAR, BICUBIC) 'random' tuple."""
    if isinstance(v, (tuple, list)):
        names = sorted(_interp(op, x, param) for x in v)
        if names == ["bicubic", "bilinear"]:
            return "random"
        _fail(op, param, f"a random choice of {names} is not built (timm's is bilinear or bicubic)")
    if hasattr(v, "value") and isinstance(v.value, str):  # torchvision's InterpolationMode
        name = v.value
    elif isinstance(v, numbers.Integral):  # PIL.Image.Resampling or its int
        name = _PIL_INTERP.get(int(v), str(v))
    elif isinstance(v, str):
        name = v
    else:
        _fail(op, param, f"{v!r} is not an interpolation")
    if name not in ("nearest", "bilinear", "bicubic"):
        _fail(op, param, f"{name!r} is not built (nearest, bilinear, bicubic)")
    return name


def _numbers(op, param, v):
    if v is None:
        return None
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        return float(v) if isinstance(v, float) else int(v)
    if isinstance(v, (tuple, list)) and all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in v):
        return tuple(float(x) if isinstance(x, float) else int(x) for x in v)
    _fail(op, param, f"{v!r} is not a number or numbers")


def _size(op, v):
    v = _numbers(op, "size", v)
    if isinstance(v, tuple) and len(v) == 1:
        v = v[0]
    return v


def _fill(op, v, param="fill"):
    if isinstance(v, dict):  # v2 keeps a fill per input type; the image's
        try:
            import torch
            from torchvision import tv_tensors
            keys = [k for k in v if k in (tv_tensors.Image, torch.Tensor)] or list(v)
        except ImportError:
            keys = list(v)
        vals = {repr(v[k]) for k in keys}
        if len(vals) > 1:
            _fail(op, param, f"different fills per type {v!r} are not built")
        v = v[keys[0]] if keys else None
    return _numbers(op, param, v)


def _dtype(op, v, param="dtype"):
    if isinstance(v, dict):
        vals = {str(x) for x in v.values()}
        if len(vals) != 1:
            _fail(op, param, f"dtypes per type {v!r} are not built")
        v = next(iter(v.values()))
    name = _DTYPES.get(str(v))
    if not name:
        _fail(op, param, f"{v} is not built (uint8, float32, float16)")
    return name


def _tv_common(op, cls):
    """torchvision ops by class name (v1 and v2 share names and attributes)."""
    a = op.__dict__
    if cls == "RandomResizedCrop":
        return [("RandomResizedCrop", {"size": _size(op, op.size), "scale": _numbers(op, "scale", op.scale),
                                       "ratio": _numbers(op, "ratio", op.ratio),
                                       "interpolation": _interp(op, op.interpolation),
                                       "antialias": bool(a.get("antialias", True) in (True, None))})]
    if cls == "Resize":
        return [("Resize", {"size": _size(op, op.size), "interpolation": _interp(op, op.interpolation),
                            "max_size": op.max_size,
                            "antialias": bool(a.get("antialias", True) in (True, None))})]
    if cls == "CenterCrop":
        return [("CenterCrop", {"size": _size(op, op.size)})]
    if cls == "RandomCrop":
        padding = _numbers(op, "padding", op.padding)
        if padding == 0 or padding == (0,) * (len(padding) if isinstance(padding, tuple) else 0):
            padding = None
        return [("RandomCrop", {"size": _size(op, op.size), "padding": padding,
                                "pad_if_needed": bool(op.pad_if_needed), "fill": _fill(op, op.fill),
                                "padding_mode": str(op.padding_mode)})]
    if cls in ("RandomHorizontalFlip", "RandomVerticalFlip"):
        return [(cls, {"p": float(op.p)})]
    if cls == "Normalize":
        return [("Normalize", {"mean": _numbers(op, "mean", op.mean), "std": _numbers(op, "std", op.std)})]
    if cls == "RandomErasing":
        value = a.get("value", 0)
        if isinstance(value, str):
            if value != "random":
                _fail(op, "value", f"{value!r} is not built")
        elif value is None:
            value = "random"
        else:
            value = _numbers(op, "value", value)
            if isinstance(value, tuple) and len(value) == 1:
                value = value[0]
        return [("RandomErasing", {"p": float(op.p), "scale": _numbers(op, "scale", op.scale),
                                   "ratio": _numbers(op, "ratio", op.ratio), "value": value})]
    if cls in ("PILToTensor", "ToImage"):
        return [("ToDtype", {"dtype": "uint8"})]
    if cls == "ToTensor":
        return [("ToTensor", {})]
    if cls == "ToDtype":
        scale = bool(a.get("scale", False))
        return [("ToDtype", {"dtype": _dtype(op, op.dtype), "scale": scale})]
    if cls == "ConvertImageDtype":
        return [("ToDtype", {"dtype": _dtype(op, op.dtype), "scale": True})]
    if cls == "ToPureTensor":
        return []
    # The colour, blur and policy ops (stokerd's pixelops): their parameters by name.
    if cls == "ColorJitter":
        return [("ColorJitter", {k: _numbers(op, k, getattr(op, k))
                                 for k in ("brightness", "contrast", "saturation", "hue")})]
    if cls in ("RandomGrayscale", "RandomEqualize", "RandomAutocontrast", "RandomInvert"):
        return [(cls, {"p": float(op.p)})]
    if cls == "Grayscale":
        return [("Grayscale", {"num_output_channels": int(op.num_output_channels)})]
    if cls == "GaussianBlur":
        return [("GaussianBlur", {"kernel_size": _numbers(op, "kernel_size", op.kernel_size),
                                  "sigma": _numbers(op, "sigma", op.sigma)})]
    if cls == "RandomPosterize":
        return [("RandomPosterize", {"bits": int(op.bits), "p": float(op.p)})]
    if cls == "RandomSolarize":
        return [("RandomSolarize", {"threshold": _numbers(op, "threshold", op.threshold), "p": float(op.p)})]
    if cls == "RandomAdjustSharpness":
        return [("RandomAdjustSharpness", {"sharpness_factor": _numbers(op, "sharpness_factor",
                                                                          op.sharpness_factor), "p": float(op.p)})]
    if cls == "RandAugment":
        return [("RandAugment", {"num_ops": int(op.num_ops), "magnitude": int(op.magnitude),
                                 "num_magnitude_bins": int(op.num_magnitude_bins),
                                 "interpolation": _interp(op, op.interpolation), "fill": _fill(op, op.fill)})]
    if cls == "TrivialAugmentWide":
        return [("TrivialAugmentWide", {"num_magnitude_bins": int(op.num_magnitude_bins),
                                        "interpolation": _interp(op, op.interpolation),
                                        "fill": _fill(op, op.fill)})]
    if cls == "AutoAugment":
        policy = getattr(op.policy, "value", op.policy)
        return [("AutoAugment", {"policy": str(policy), "interpolation": _interp(op, op.interpolation),
                                 "fill": _fill(op, op.fill)})]
    if cls == "AugMix":
        return [("AugMix", {"severity": int(op.severity), "mixture_width": int(op.mixture_width),
                            "chain_depth": int(op.chain_depth), "alpha": float(op.alpha),
                            "all_ops": bool(op.all_ops), "interpolation": _interp(op, op.interpolation),
                            "fill": _fill(op, op.fill)})]
    return None


_TIMM_RAND_DEFAULT_MMAX = 10.0


def _timm_hparams(op, hp):
    out = {}
    if "img_mean" in hp:
        out["img_mean"] = _numbers(op, "img_mean", hp["img_mean"])
    if "interpolation" in hp:
        out["interpolation"] = _interp(op, hp["interpolation"])
    else:
        out["interpolation"] = "random"
    if "translate_pct" in hp:
        out["translate_pct"] = float(hp["translate_pct"])
    elif "translate_const" in hp:
        out["translate_const"] = _numbers(op, "translate_const", hp["translate_const"])
    unknown = set(hp) - {"img_mean", "interpolation", "translate_pct", "translate_const", "magnitude_std",
                         "magnitude_max"}
    if unknown:
        _fail(op, "hparams", f"{sorted(unknown)} are not built")
    return out


def _timm_rand_augment(op):
    """timm's RandAugment object back to its config string."""
    from timm.data import auto_augment as aa
    ops = op.ops
    if not ops:
        _fail(op, "ops", "no ops")
    names = [o.name for o in ops]
    weighted = op.choice_weights is not None
    inc = names == list(aa._RAND_INCREASING_TRANSFORMS)
    if weighted:
        ref_names, ref_p = aa._get_weighted_transforms(aa._RAND_WEIGHTED_0)
        if names != list(ref_names) or [float(x) for x in op.choice_weights] != [float(x) for x in ref_p]:
            _fail(op, "choice_weights", "a weighted op set other than timm's tweights (_RAND_WEIGHTED_0) "
                  "is not built (t3a / t3aw: GaussianBlur and Desaturate are not)")
    elif not inc and names != list(aa._RAND_TRANSFORMS):
        _fail(op, "ops", f"the op set {names} is not timm's default or increasing set")
    first = ops[0]
    for o in ops:
        if (o.prob, o.magnitude, o.magnitude_std, o.magnitude_max, o.hparams) != \
                (first.prob, first.magnitude, first.magnitude_std, first.magnitude_max, first.hparams):
            _fail(op, "ops", "ops with different probabilities or magnitudes are not built")
    cfg = [f"rand-m{first.magnitude:g}", f"n{op.num_layers}"]
    if first.magnitude_std:
        cfg.append(f"mstd{first.magnitude_std:g}" if math.isfinite(first.magnitude_std) else "mstd101")
    if first.magnitude_max is not None and first.magnitude_max != _TIMM_RAND_DEFAULT_MMAX:
        cfg.append(f"mmax{first.magnitude_max:g}")
    if first.prob != 0.5:
        cfg.append(f"p{first.prob:g}")
    cfg.append("tweights" if weighted else f"inc{1 if inc else 0}")
    return [("rand_augment_transform", {"config_str": "-".join(cfg), **_timm_hparams(op, first.hparams)})]


def _timm_augmix(op):
    """timm's AugMixAugment back to its augment_and_mix_transform string."""
    from timm.data import auto_augment as aa
    ops = op.ops
    if [o.name for o in ops] != list(aa._AUGMIX_TRANSFORMS):
        _fail(op, "ops", "an op set other than timm's _AUGMIX_TRANSFORMS is not built")
    first = ops[0]
    for o in ops:
        if (o.prob, o.magnitude, o.magnitude_std, o.magnitude_max, o.hparams) != \
                (first.prob, first.magnitude, first.magnitude_std, first.magnitude_max, first.hparams):
            _fail(op, "ops", "ops with different probabilities or magnitudes are not built")
    if first.prob != 1.0:
        _fail(op, "prob", f"{first.prob} (augment_and_mix_transform's ops always apply) is not built")
    if first.magnitude_max is not None:
        _fail(op, "magnitude_max", "augment_and_mix_transform has no mmax section")
    if int(first.magnitude) != first.magnitude or not 1 <= op.width <= 16 or op.depth > 16:
        _fail(op, "magnitude", "m, w (1..16) and d (up to 16) are whole numbers")
    cfg = [f"augmix-m{int(first.magnitude)}", f"w{op.width}", f"a{float(op.alpha)!r}", f"b{1 if op.blended else 0}"]
    if op.depth > 0:
        cfg.append(f"d{op.depth}")
    std = first.magnitude_std
    if math.isfinite(std):
        cfg.append(f"mstd{float(std)!r}")
    return [("augment_and_mix_transform", {"config_str": "-".join(cfg), **_timm_hparams(op, first.hparams)})]


def _timm_auto_augment(op):
    from timm.data import auto_augment as aa
    first = op.policy[0][0]
    for name in ("v0", "original"):
        ref = aa.auto_augment_policy(name, hparams=first.hparams)
        if [[(o.name, o.prob, o.magnitude) for o in sp] for sp in ref] == \
                [[(o.name, o.prob, o.magnitude) for o in sp] for sp in op.policy]:
            cfg = name
            std = first.hparams.get("magnitude_std", 0)
            if std:
                # auto_augment_transform("original-mstd0.5") keeps it in hparams.
                cfg += f"-mstd{float(std):g}" if math.isfinite(std) else "-mstd101"
            mmax = first.hparams.get("magnitude_max", _TIMM_RAND_DEFAULT_MMAX)
            if mmax != _TIMM_RAND_DEFAULT_MMAX:
                _fail(op, "magnitude_max", f"{mmax} (timm's auto_augment_transform has no mmax section) is not built")
            return [("auto_augment_transform", {"config_str": cfg, **_timm_hparams(op, first.hparams)})]
    _fail(op, "policy", "not timm's original or v0 policy")


def _timm(op, cls):
    mod = type(op).__module__
    if not mod.startswith("timm."):
        return None
    if cls == "RandomResizedCropAndInterpolation":
        return [("RandomResizedCrop", {"size": _size(op, op.size), "scale": _numbers(op, "scale", op.scale),
                                       "ratio": _numbers(op, "ratio", op.ratio),
                                       "interpolation": _interp(op, op.interpolation)})]
    if cls in ("MaybeToTensor", "ToTensor"):
        return [("ToTensor", {})]
    if cls == "MaybePILToTensor":
        return [("ToDtype", {"dtype": "uint8"})]
    if cls == "RandAugment":
        return _timm_rand_augment(op)
    if cls == "AutoAugment":
        return _timm_auto_augment(op)
    if cls == "AugMixAugment":
        return _timm_augmix(op)
    if cls == "RandomErasing":
        if op.num_splits:
            _fail(op, "num_splits", f"{op.num_splits} (split batches) is not built")
        value = {"pixel": "pixel", "rand": "rand", "const": 0}.get(op.mode)
        if value is None:
            _fail(op, "mode", f"{op.mode!r} is not built")
        lo, hi = op.log_aspect_ratio
        return [("RandomErasing", {"p": float(op.probability), "scale": (float(op.min_area), float(op.max_area)),
                                   "ratio": (math.exp(lo), math.exp(hi)), "value": value,
                                   "count": (int(op.min_count), int(op.max_count))})]
    if cls == "ToNumpy":
        _fail(op, None, "ToNumpy (timm's prefetcher path) is not built: use create_transform(..., use_prefetcher=False)")
    return None


def translate(transform):
    """The pipeline of a torchvision (v2 or v1) Compose, a timm
    create_transform(...) result, a single op or a list of them, as
    [(name, {parameter: value})]. ValueError for what stokerd cannot run
    exactly, naming the op and parameter."""
    out = []
    stack = [transform]
    flat = []
    while stack:
        t = stack.pop(0)
        if isinstance(t, (list, tuple)):
            stack[:0] = list(t)
            continue
        if type(t).__name__ == "Compose" and hasattr(t, "transforms"):
            stack[:0] = list(t.transforms)
            continue
        flat.append(t)
    for op in flat:
        cls = type(op).__name__
        if isinstance(op, tuple) or (isinstance(op, str)):
            raise ValueError(f"{op!r} is not a transform object")
        got = _timm(op, cls)
        if got is None and type(op).__module__.startswith("torchvision."):
            got = _tv_common(op, cls)
        if got is None:
            why = ("a Lambda runs arbitrary Python, which stokerd cannot" if cls == "Lambda"
                   else "not a transform stokerd runs (docs/transforms.md lists them)")
            raise ValueError(f"{cls}: {why}")
        out += got
    if not out:
        raise ValueError("the transform has no op stokerd runs")
    return out
