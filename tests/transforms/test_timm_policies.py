"""timm's policy strings beyond rand-/original/v0: the t section of
rand_augment_transform (tweights: _RAND_WEIGHTED_0 chosen without
replacement; any other set name: the default sets; t3a / t3aw refused) and
augment_and_mix_transform (augmix-m-w-d-a-b-mstd). Draws against timm's own
objects (100,000 samples each side); AugMix's mix against timm's own
_apply_basic / _apply_blended fed stoker's draws, on real photos."""

import numpy as np
import pytest

from pixelop_util import RGB_PHOTOS, apply, as_png, draws, refused
from test_pixel_ops import N_DRAWS, TIMM_NAMES, _counts, _timm_ours, _timm_ref, close_freqs, close_values

aa = pytest.importorskip("timm.data.auto_augment")
MEAN = (124, 116, 104)
HP = dict(translate_const=100, img_mean=MEAN)


def test_weighted_set_draws():
    """rand-...-tweights: op frequencies, no op twice in a sample, and the
    ordered pairs, as np.random.choice(replace=False, p=weights) draws them."""
    cfg = "rand-m9-n3-mstd0.5-p1-tweights"
    ours = _timm_ours("rand_augment_transform", {"config_str": cfg, "img_mean": list(MEAN)}, N_DRAWS)
    tf = aa.rand_augment_transform(cfg, dict(HP))
    assert tf.choice_weights is not None
    theirs = _timm_ref(tf, N_DRAWS)
    assert all(len(t) == 3 and len({s[0] for s in t}) == 3 for t in ours)
    close_freqs(_counts(s[0] for t in ours for s in t), _counts(s[0] for t in theirs for s in t), cfg + " ops")
    close_freqs(_counts(t[0][0] for t in ours), _counts(t[0][0] for t in theirs), cfg + " first op")
    close_freqs(_counts((t[0][0], t[1][0]) for t in ours), _counts((t[0][0], t[1][0]) for t in theirs),
                cfg + " first two ops")
    a = [s[1] for t in ours for s in t if s[0] == "Rotate"]
    b = [s[1] for t in theirs for s in t if s[0] == "Rotate"]
    close_values(a, b, cfg + " Rotate", min(min(a), min(b)), max(max(a), max(b)))


def test_other_set_names_are_the_default_sets():
    """rand_augment_choices(): a t section naming no set of its own gives the default (or inc) set."""
    ours = _timm_ours("rand_augment_transform", {"config_str": "rand-m9-n2-tfoo-inc1"}, 20000)
    names = {s[0] for t in ours for s in t}
    assert names == set(aa._RAND_INCREASING_TRANSFORMS), names


def test_refused():
    for cfg, word in [("rand-m9-t3a", "GaussianBlur"), ("rand-m9-n16-tweights", "without replacement"),
                      ("augmix-m3-w0", "w 0"), ("augmix-m3-w17", "w 17"), ("augmix-m3-a0", "a 0"),
                      ("augmix-m3-x1", "unknown section"), ("rand-m9-w2", "unknown section"),
                      ("augmix-m2.5", "m 2.5")]:
        op = "augment_and_mix_transform" if cfg.startswith("augmix") else "rand_augment_transform"
        msg = refused(op, {"config_str": cfg})
        assert msg and op in msg and "config_str" in msg and word in msg, (cfg, msg)


def _augmix_ours(cfg, n):
    """Per sample: (m, weights, chains of (op, arg, resample))."""
    out = []
    for d in draws("augment_and_mix_transform", {"config_str": cfg, "img_mean": list(MEAN)}, n, size="8x8"):
        m, ws, chains, cur = None, [], [], None
        for name, v in d:
            if name == "m":
                m = v
            elif name == "w":
                ws.append(v)
            elif name == "depth":
                chains.append([])
            elif name == "op":
                cur = TIMM_NAMES[int(v)]
            elif name == "arg":
                chains[-1].append([cur, v, None])
            elif name == "resample":
                chains[-1][-1][2] = int(v)
        out.append((m, ws, chains))
    return out


@pytest.mark.parametrize("cfg,width", [("augmix-m5-w4-d2", 4), ("augmix-m3-mstd0.5-a0.5", 3),
                                       ("augmix-m7-w2-b1", 2)])
def test_augmix_draws(cfg, width):
    ours = _augmix_ours(cfg, N_DRAWS)
    tf = aa.augment_and_mix_transform(cfg, dict(HP))
    theirs = _timm_ref(tf, N_DRAWS)
    flat = [tuple(s) for _, _, chains in ours for ch in chains for s in ch]
    close_freqs(_counts(s[0] for s in flat), _counts(s[0] for t in theirs for s in t), cfg + " ops")
    close_freqs(_counts(sum(len(ch) for ch in c) for _, _, c in ours), _counts(len(t) for t in theirs),
                cfg + " ops per sample")
    close_freqs(_counts(s[2] for s in flat if s[2] is not None),
                _counts(s[2] for t in theirs for s in t if s[2] is not None), cfg + " resample")
    for name in ("Rotate", "ColorIncreasing", "PosterizeIncreasing", "SolarizeIncreasing"):
        a = [s[1] for s in flat if s[0] == name]
        b = [s[1] for t in theirs for s in t if s[0] == name]
        if name in ("Rotate", "ColorIncreasing"):
            close_values(a, b, f"{cfg} {name}", min(min(a), min(b)), max(max(a), max(b)))
        else:
            close_freqs(_counts(round(x, 6) for x in a), _counts(round(float(x), 6) for x in b), f"{cfg} {name}")
    # the weights and m: the lines of AugMixAugment.__call__
    alpha = tf.alpha
    rs = np.random.RandomState(1)
    w_ref = [np.float32(rs.dirichlet([alpha] * width))[0] for _ in range(20000)]
    m_ref = [np.float32(rs.beta(alpha, alpha)) for _ in range(20000)]
    assert all(len(ws) == width and abs(sum(ws) - 1) < 1e-5 for _, ws, _ in ours)
    close_values([ws[0] for _, ws, _ in ours], w_ref, cfg + " weight 0", 0, 1)
    close_values([m for m, _, _ in ours], m_ref, cfg + " m", 0, 1)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("photos")
    return [as_png(tmp, name) for name in RGB_PHOTOS[:3]]


@pytest.mark.parametrize("cfg", ["augmix-m5-w3", "augmix-m9-w4-d2-mstd0.5", "augmix-m4-w3-b1"])
def test_augmix_mix_equals_timm(photos, cfg, monkeypatch):
    """stoker's AugMix output on a photo equals timm's _apply_basic /
    _apply_blended run with stoker's draws (weights, m, depths, ops and their
    arguments and resamples) through timm's own op functions."""
    tf = aa.augment_and_mix_transform(cfg, dict(HP))
    samples = _augmix_ours(cfg, 6)
    worst = 0
    for i, (m, ws, chains) in enumerate(samples):
        for path, im in photos:
            got = apply("augment_and_mix_transform", {"config_str": cfg, "img_mean": list(MEAN)}, path, index=i)
            queue = list(chains)

            def op_fn(step):
                name, arg, rs = step

                def run(img):
                    kw = dict(fillcolor=MEAN, resample=rs if rs is not None else aa._RANDOM_INTERPOLATION)
                    if name in ("AutoContrast", "Equalize", "Invert"):
                        return aa.NAME_TO_OP[name](img, **kw)
                    if name.startswith("Posterize") or name.startswith("Solarize"):
                        arg_ = int(arg)
                    else:
                        arg_ = arg
                    return aa.NAME_TO_OP[name](img, arg_, **kw)
                return run

            monkeypatch.setattr(aa.np.random, "randint", lambda lo, hi: len(queue[0]))
            monkeypatch.setattr(aa.np.random, "choice",
                                lambda ops, depth, replace=True: [op_fn(s) for s in queue.pop(0)])
            weights = np.asarray(ws, dtype=np.float32)
            if tf.blended:
                want = tf._apply_blended(im, weights, np.float32(m))
            else:
                want = tf._apply_basic(im, weights, np.float32(m))
            monkeypatch.undo()
            want = np.asarray(want)
            assert got.shape == want.shape
            d = int(np.abs(got.astype(int) - want.astype(int)).max())
            worst = max(worst, d)
    print(f"timm AugMix {cfg}: max |diff| {worst}")
    assert worst <= 1


@pytest.mark.parametrize("aug,want", [
    ("augmix-m5-w4-d2", ("augment_and_mix_transform", "augmix-m5-w4-a1.0-b0-d2")),
    ("augmix-m3-mstd0.5-b1", ("augment_and_mix_transform", "augmix-m3-w3-a1.0-b1-mstd0.5")),
    ("rand-m9-n3-mstd0.5-tweights", ("rand_augment_transform", "rand-m9-n3-mstd0.5-tweights")),
])
def test_create_transform_translates(aug, want):
    """timm's create_transform(auto_augment=...) objects back to their strings, accepted by the daemon."""
    import stoker
    from timm.data import create_transform
    from stoker.transforms import translate
    from tpipe_util import check
    ops = translate(create_transform(224, is_training=True, auto_augment=aug, interpolation="bicubic"))
    policy = [(name, p) for name, p in ops if name == want[0]]
    assert len(policy) == 1 and policy[0][1]["config_str"] == want[1], ops
    assert policy[0][1]["img_mean"] == MEAN and policy[0][1]["interpolation"] == "bicubic"
    assert check(stoker.transforms_text(ops))[0]


def test_create_transform_3a_raises():
    from timm.data import create_transform
    from stoker.transforms import translate
    with pytest.raises(ValueError) as e:
        translate(create_transform(224, is_training=True, auto_augment="rand-m9-t3a"))
    assert "choice_weights" in str(e.value) or "ops" in str(e.value)
