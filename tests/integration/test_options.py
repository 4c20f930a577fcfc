"""libstoker's one table of attach options (stoker_opts_key): every key it
lists is taken by stoker_opts_set() with values of its kind and refused past
its bounds, and the Python binding takes its detection option names from it."""

import ctypes
import errno

import pytest

import stoker

TOKEN = ("stoker-checkpoint-1 epoch=2 batch=5 seed=7 rank=0 world_size=2 batch_size=8 shuffle=1 drop_last=0 "
         "samples=100")

# What each kind accepts, and what it refuses (its bounds, and what does not parse).
GOOD = {
    "u32": ["0", "1", "4294967295"],
    "u64": ["0", "18446744073709551615"],
    "bool": ["true", "false", "1", "0", "yes", "no", "True", "False"],
    "number": ["0", "0.5", "-3", "1e3"],
    "float3": ["0.5,0.4,0.3", "-1,0,1e3"],
    "float3>0": ["0.229,0.224,0.225"],
    "device": ["cpu", "cuda:0", "cuda:1023"],
    "token": [TOKEN, TOKEN + " repeats=4 selected_round=256 selected_ratio=0", TOKEN + " order=shards shuffle_buffer=1000", TOKEN + " rect=1 stride=32 pad=0.5"],
    "text": ["val", "x" * 63],
    "text1024": ["MixUp(alpha=0.2)", "x" * 1024],
    "u32,u32": ["17,3", "[17, 3]", "(4, 2)", "0,0"],
    "u32list": ["0", "1,0,3,2", "[1, 0, 3, 2]", ",".join(["0"] * 1024)],
    "pipeline": ["RandomHorizontalFlip(p=0.5)", "RandomResizedCrop(size=176); RandomHorizontalFlip()",
                 "Resize(size=256)", "RandomResizedCrop(size=176, scale=(0.08, 1)); RandomHorizontalFlip(p=0.5)",
                 'RandomErasing(p=0.1, value="random")', "; ".join(["Resize(size=1)"] * 32)],
}
BAD = {
    "u32": ["4294967296", "-1", "+1", "", "1x", "0x10"],
    "u64": ["18446744073709551616", "-1", "", "1.5"],
    "bool": ["maybe", "", "TRUE", "2"],
    "number": ["nan", "inf", "-inf", "1e999", "0.5x", ""],
    "float3": ["1,2", "1,2,3,4", "1,,2", "nan,1,1", "1,2,1e31", ""],
    "float3>0": ["0,1,1", "-1,1,1", "1,2", "1,nan,1"],
    "device": ["gpu", "cuda:", "cuda:-1", "cuda:1024", "cuda:01", "CPU", ""],
    "token": ["garbage", TOKEN + " repeats=1 selected_round=256 selected_ratio=0", TOKEN + " repeats=3", TOKEN.replace("world_size=2", "world_size=0"), TOKEN + " trailing", ""],
    "text": ["", "x" * 64],
    "text1024": ["", "x" * 1025],
    "u32,u32": ["", "17", "17,3,1", "17,-3", "17,3x", "a,b", "17,4294967296"],
    "u32list": ["", "[]", "1,-1", "1,x", ",".join(["0"] * 1025), "4294967296"],
    "pipeline": ["", "Bogus(", "x" * 5000, ";", "(", "Resize(size=", "Resize size=1", "Resize(=1)",
                 'Resize(size="x)', "; ".join(["Resize(size=1)"] * 33)],
}


def _set(lib, key, value):
    o = ctypes.c_void_p()
    assert lib.stoker_opts_new(ctypes.byref(o)) == 0
    try:
        return lib.stoker_opts_set(o, key.encode(), value.encode())
    finally:
        lib.stoker_opts_free(o)


def _values(kind):
    if "|" in kind:  # a choice: each word, and nothing else
        words = kind.split("|")
        bad = ["bogus", "", words[0][:-1], words[0].upper(), "|".join(words)]
        return words, [b for b in bad if b not in words]
    return GOOD[kind], BAD[kind]


def test_table_lists_every_key_once():
    lib = stoker.load_library()
    keys = stoker.option_keys()
    n = ctypes.c_char_p()
    assert lib.stoker_opts_key(len(keys), ctypes.byref(n), None, None) == -errno.ENOENT
    assert lib.stoker_opts_key(0, None, None, None) == 0
    assert len(keys) >= 40
    for name, (task, kind) in keys.items():
        assert task in ("", "detect"), name
        assert "|" in kind or kind in GOOD, f"{name}: kind {kind!r} has no test values"
    # Keys of every task and detection's own, as stoker.h and the README list them.
    assert {"batch_size", "image_size", "dtype", "device", "resume", "task", "transform"} <= {
        k for k, (t, _) in keys.items() if t == ""}
    assert {"hsv_h", "mosaic", "mixup", "close_mosaic", "max_boxes", "split", "rect", "stride", "pad",
            "resample", "yolo_task", "kpt_shape", "flip_idx"} <= {k for k, (t, _) in keys.items() if t == "detect"}


@pytest.mark.parametrize("name", sorted(stoker.option_keys()))
def test_each_key_takes_its_kind_and_refuses_its_bounds(name):
    lib = stoker.load_library()
    _, kind = stoker.option_keys()[name]
    good, bad = _values(kind)
    for v in good:
        assert _set(lib, name, v) == 0, f"{name}={v!r} refused"
    for v in bad:
        assert _set(lib, name, v) == -errno.EINVAL, f"{name}={v!r} accepted"


def test_unknown_keys_refused():
    lib = stoker.load_library()
    for key in ("", "batch", "Batch_size", "batch_size ", "hsv", "detect"):
        assert _set(lib, key, "1") == -errno.EINVAL, key


def test_loader_takes_detection_names_from_the_table(tmp_path):
    # Refused before any connection: an unknown name, and a detection
    # option for task classify; every detection key passes the name check.
    with pytest.raises(TypeError, match="unknown option"):
        stoker.Loader(str(tmp_path), socket=str(tmp_path / "none.sock"), task="detect", hsv_q=0.1)
    with pytest.raises(TypeError, match="options of task='detect'"):
        stoker.Loader(str(tmp_path), socket=str(tmp_path / "none.sock"), hsv_h=0.1)
    detect = {k for k, (t, _) in stoker.option_keys().items() if t == "detect"}
    for k in sorted(detect):
        with pytest.raises(stoker.StokerError):  # past the name check: no daemon there
            stoker.Loader(str(tmp_path), socket=str(tmp_path / "none.sock"), task="detect", auto_start=False,
                          **{k: None})
