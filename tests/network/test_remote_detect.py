"""Detection (YOLO) data sets over HTTP and S3, against real servers on
loopback: a data.yaml fetched from the server, its `path` and splits
resolved against its URL, image lists and S3 prefixes, label files by
Ultralytics' images/ -> labels/ rule. Each remote data set must give the
same images and boxes as the same files on the local disk, for the same
seed, with the same label faults counted.
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import stoker

OPTS = dict(batch_size=8, image_size=64, task="detect", seed=5)
IMAGES = 150


def detect_epoch(socket, dataset, split, **kw):
    """(per batch: indices, image digest, boxes), label errors, class names."""
    opts = dict(OPTS, **kw)
    out = []
    with stoker.Loader(str(dataset), socket=socket, split=split, **opts) as ld:
        for b in ld:
            out.append((np.array(b.indices).tolist(), hashlib.sha256(np.array(b.images).tobytes()).hexdigest(),
                        np.array(b.boxes).tolist()))
        return out, ld.label_errors, ld.class_names


@pytest.fixture
def served(make_yolo, tmp_path):
    """A YOLO tree to serve, laid out so the yaml's paths need resolving:
    srv/ds/{images,labels}/train/ (some labels missing, some bad, some
    polygons), srv/ds/train.txt and val.txt ("./images/..." lines, val a
    shuffled half), srv/cfg/{http,s3}.yaml with `path: ../ds`. The same
    yaml files serve as the local data sets. Returns (srv, names of the
    label files missing, bad label lines)."""
    # More images than the scan keeps label requests in flight (64).
    src, manifest, printed = make_yolo(kind="scenes", images=IMAGES, min_side=64, max_side=160, bad_labels=3,
                                       no_labels_for=3, polygons=3, seed=21)
    srv = tmp_path / "srv"
    shutil.copytree(src / "images", srv / "ds" / "images")
    shutil.copytree(src / "labels", srv / "ds" / "labels")
    images = sorted(p.name for p in (srv / "ds/images/train").iterdir())
    (srv / "ds/train.txt").write_text("".join(f"./images/train/{n}\n" for n in images))
    (srv / "ds/val.txt").write_text("# val\n" + "".join(f"./images/train/{n}\n" for n in images[::-2]))
    names = "names:\n" + "".join(f"  {i}: class_{i:02d}\n" for i in range(8))
    (srv / "cfg").mkdir()
    (srv / "cfg/http.yaml").write_text(f"path: ../ds\ntrain: train.txt\nval: ./val.txt\n{names}")
    (srv / "cfg/s3.yaml").write_text(f"path: ../ds\ntrain: images/train\nval: val.txt\n{names}")
    missing = [e for e in manifest["images"] if e["role"] == "missing"]
    assert len(missing) == 3 and len(printed) >= 3
    return srv, printed


def same(local, remote):
    assert any(batch[2] for batch in local[0]), "no boxes to compare"
    assert remote[0] == local[0]          # indices, pixels, boxes, batch by batch
    assert remote[1] == local[1]          # label errors
    assert remote[2] == local[2]          # class names


def test_http_yaml_lists_and_labels_same_as_local(daemon, served, nginx):
    srv, printed = served
    web = nginx(srv)
    d = daemon(workers=2)
    for split in ("train", "val"):
        for kw in (dict(transform="mosaic", shuffle=True), dict(transform="letterbox", shuffle=False),
                   dict(transform="letterbox", rect=True)):     # rect: the images' sizes, fetched at attach
            local = detect_epoch(d.socket, srv / "cfg/http.yaml", split, **kw)
            remote = detect_epoch(d.socket, web.url + "/cfg/http.yaml", split, **kw)
            same(local, remote)
            assert local[1] == len(printed) or split == "val"
            assert sum(len(b[0]) for b in local[0]) == (IMAGES if split == "train" else IMAGES // 2)
    # A list given directly, without a yaml: names relative to the list.
    same(detect_epoch(d.socket, srv / "ds/train.txt", "train", transform="letterbox"),
         detect_epoch(d.socket, web.url + "/ds/train.txt", "train", transform="letterbox"))
    log = d.stderr()
    for line in printed:   # the bad lines, named by their label URL
        name = line.rsplit(":", 1)[0].rsplit("/", 1)[-1]
        assert f"{web.url}/ds/labels/train/{name}" in log, log
    # HTTP has no listing: a directory split is refused, saying why.
    (srv / "cfg/dir.yaml").write_text("path: ../ds\ntrain: images/train\n")
    with pytest.raises(stoker.StokerError) as e:
        detect_epoch(d.socket, web.url + "/cfg/dir.yaml", "train")
    assert "no listing" in str(e.value)
    with pytest.raises(stoker.StokerError) as e:
        detect_epoch(d.socket, web.url + "/cfg/absent.yaml", "train")
    assert "404" in str(e.value)


def test_s3_prefix_and_list_same_as_local(daemon, served, moto):
    srv, printed = served
    moto.upload_tree("yolo", "sets/", srv)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    d = daemon(workers=2, env=env, extra=["--set", f"s3_endpoint={moto.url}"])
    for split in ("train", "val"):
        local = detect_epoch(d.socket, srv / "cfg/s3.yaml", split, transform="mosaic", shuffle=True)
        remote = detect_epoch(d.socket, "s3://yolo/sets/cfg/s3.yaml", split, transform="mosaic", shuffle=True)
        same(local, remote)
    # A prefix given directly: every image under it, sorted by key.
    same(detect_epoch(d.socket, srv / "ds/images/train", "train", transform="letterbox"),
         detect_epoch(d.socket, "s3://yolo/sets/ds/images/train/", "train", transform="letterbox"))


def test_label_fetch_failures_counted(daemon, served, faultserver):
    """A label file the server fails on (500 after every retry) is a label
    error: logged with its URL and counted; the image is served without
    objects. A 404 is a missing label file, as on a disk: no error."""
    srv, printed = served
    fs = faultserver(srv)
    labels = sorted(p.name for p in (srv / "ds/labels/train").iterdir())
    failing = f"/ds/labels/train/{labels[0]}"
    fs.rules({failing: ["500"]})
    d = daemon(workers=1, extra=["--set", "fetch_retries=1", "--set", "fetch_backoff_ms=1"])
    local = detect_epoch(d.socket, srv / "cfg/http.yaml", "train", transform="letterbox", shuffle=False)
    remote = detect_epoch(d.socket, fs.url + "/cfg/http.yaml", "train", transform="letterbox", shuffle=False)
    assert remote[1] == local[1] + 1
    assert fs.url + failing in d.stderr()
    # Only that image's boxes are gone.
    lb, rb = [b for batch in local[0] for b in batch[2]], [b for batch in remote[0] for b in batch[2]]
    assert len(rb) < len(lb) and all(b in lb for b in rb)
    assert [b[0] for b in local[0]] == [b[0] for b in remote[0]]
    statuses = [action for path, action in fs.requests() if path == failing]
    assert statuses == ["500", "500"]      # the first try and one retry


def test_detection_shards_over_http(daemon, served, nginx, tmp_path):
    """YOLO tar shards (scripts/mkshards.py) served over HTTP, named by a
    brace pattern or by a yaml fetched beside them: the same images and
    boxes as the loose local files."""
    srv, printed = served
    mkshards = Path(__file__).resolve().parents[2] / "scripts" / "mkshards.py"
    r = subprocess.run([sys.executable, str(mkshards), "yolo", str(srv / "ds/images/train"), str(srv / "ysh"),
                        "--maxcount", "6"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pattern = os.path.basename(r.stdout.strip())
    (srv / "cfg/shards.yaml").write_text(f"path: ../ysh\ntrain: {pattern}\nnames: [a, b, c, d, e, f, g, h]\n")
    web = nginx(srv)
    idx = tmp_path / "idx"
    idx.mkdir()
    d = daemon(workers=2, extra=["-o", f"shard_index_dir={idx}"])
    kw = dict(transform="mosaic", shuffle=True)
    local = detect_epoch(d.socket, srv / "ds/images/train", "train", **kw)
    by_pattern = detect_epoch(d.socket, f"{web.url}/ysh/{pattern}", "train", **kw)
    by_yaml = detect_epoch(d.socket, f"{web.url}/cfg/shards.yaml", "train", **kw)
    assert by_pattern[0] == local[0] and by_yaml[0] == local[0]
    assert by_pattern[1] == local[1] == by_yaml[1] == len(printed)
    assert by_yaml[2] == list("abcdefgh")
