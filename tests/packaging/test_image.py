"""The DaemonSet's image as `make image` writes it (make check-image): the
OCI archive's layout checked digest by digest, then read by skopeo and
umoci (independent implementations), then its root file system run as a
container would: stokerd --version, and a real daemon as uid 2000 serving
a client on this machine through the socket, as the DaemonSet's contract
says (socket in /run/stoker, data at the same path for both)."""

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile

import pytest
import stoker

from stoker_fixtures import Daemon
from stoker_testutil import REPO, VERSION

DAEMONSET = REPO / "deploy" / "kubernetes" / "stoker-daemonset.yaml"
MT = "application/vnd.oci.image."


def ref():
    refs = set(re.findall(r"^\s*image:\s*(\S+/stoker:\S+)\s*$", DAEMONSET.read_text(), re.M))
    assert len(refs) == 1, refs
    return refs.pop()


def run(args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def archive(image_dir):
    return image_dir / f"stoker-{VERSION}.oci.tar"


def test_tag_is_the_version():
    assert ref().endswith(f"/stoker:{VERSION}"), f"the DaemonSet names {ref()}; VERSION is {VERSION}"


def test_layout_and_digests(archive):
    with tarfile.open(archive) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    blobs = {n[len("blobs/sha256/"):]: b for n, b in files.items() if n.startswith("blobs/sha256/")}
    for digest, data in blobs.items():
        assert hashlib.sha256(data).hexdigest() == digest, f"blob {digest} does not match its name"

    def blob(desc, media_type):
        assert desc["mediaType"] == media_type, desc
        digest = desc["digest"].split(":", 1)[1]
        assert desc["digest"].startswith("sha256:") and digest in blobs, desc
        assert desc["size"] == len(blobs[digest]), desc
        return blobs[digest]

    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2 and len(index["manifests"]) == 1
    desc = index["manifests"][0]
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == ref()
    assert desc["annotations"]["io.containerd.image.name"] == ref()
    manifest = json.loads(blob(desc, MT + "manifest.v1+json"))
    assert manifest["schemaVersion"] == 2
    config = json.loads(blob(manifest["config"], MT + "config.v1+json"))
    layers = [blob(d, MT + "layer.v1.tar+gzip") for d in manifest["layers"]]
    assert len(layers) == len(config["rootfs"]["diff_ids"]) == 1
    tar_bytes = gzip.decompress(layers[0])
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(tar_bytes).hexdigest()]
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["config"]["User"] == "2000:2000", "the DaemonSet's runAsUser/runAsGroup"
    assert config["config"]["Entrypoint"] == ["/usr/sbin/stokerd"]
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == VERSION
    # Docker's manifest.json names the same blobs.
    docker = json.loads(files["manifest.json"])
    assert docker == [{"Config": "blobs/sha256/" + manifest["config"]["digest"][7:], "RepoTags": [ref()],
                       "Layers": ["blobs/sha256/" + manifest["layers"][0]["digest"][7:]]}]
    # What is in the root file system, and what is not.
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as t:
        names = {m.name.lstrip("./").rstrip("/") for m in t.getmembers()}
        passwd = t.extractfile("./etc/passwd").read().decode()
    for f in ("usr/sbin/stokerd", "usr/bin/stokerctl", "usr/lib/stoker/stoker.conf", "etc/stoker/stoker.conf"):
        assert f in names, f
    assert any(n.endswith("/libstoker.so.0") for n in names)
    for absent in ("usr/bin/gcc", "usr/bin/cc", "usr/include/stoker.h", "usr/share/man/man8/stokerd.8.gz"):
        assert absent not in names, f"{absent} in a slim image"
    assert not [n for n in names if n.endswith(".deb")], "the .debs stay out of the image"
    assert re.search(r"^stoker:x:2000:2000:", passwd, re.M), passwd


def test_skopeo_and_umoci_read_it(archive, tmp_path):
    out = json.loads(run(["skopeo", "inspect", f"oci-archive:{archive}"]).stdout)
    assert out["Architecture"] == "amd64" and out["Labels"]["org.opencontainers.image.version"] == VERSION
    # Copying checks every digest on the way.
    run(["skopeo", "copy", "-q", f"oci-archive:{archive}", f"dir:{tmp_path / 'copy'}"])
    run(["skopeo", "inspect", f"docker-archive:{archive}"])
    layout = tmp_path / "layout"
    layout.mkdir()
    with tarfile.open(archive) as t:
        t.extractall(layout)
    assert ref() in run(["umoci", "ls", "--layout", layout]).stdout.split()
    run(["umoci", "unpack", "--image", f"{layout}:{ref()}", tmp_path / "bundle"])
    spec = json.loads((tmp_path / "bundle" / "config.json").read_text())
    assert spec["process"]["user"]["uid"] == 2000 and spec["process"]["args"] == ["/usr/sbin/stokerd"]


def test_podman_loads_it(archive, tmp_path):
    """podman load, into a store of the test's own (vfs: no kernel overlay needed)."""
    run_root = tempfile.mkdtemp(prefix="stoker-podman-", dir="/tmp")  # podman wants it short
    podman = ["podman", "--root", tmp_path / "root", "--runroot", run_root, "--storage-driver", "vfs"]
    r = run(podman + ["load", "-i", archive])
    assert f"Loaded image: {ref()}" in r.stdout + r.stderr, r.stdout + r.stderr
    images = json.loads(run(podman + ["images", "--format", "json"]).stdout)
    assert [n for i in images for n in i.get("Names", [])] == [ref()], images
    with tarfile.open(archive) as t:
        index = json.load(t.extractfile("index.json"))
        manifest = json.load(t.extractfile("blobs/sha256/" + index["manifests"][0]["digest"][7:]))
    assert images[0]["Id"] == manifest["config"]["digest"][7:], images
    shutil.rmtree(tmp_path / "root", ignore_errors=True)
    shutil.rmtree(run_root, ignore_errors=True)


@pytest.fixture(scope="module")
def rootfs(archive, tmp_path_factory):
    """The image's root file system, unpacked from the archive's layer."""
    root = tmp_path_factory.mktemp("rootfs")
    with tarfile.open(archive) as t:
        index = json.load(t.extractfile("index.json"))
        manifest = json.load(t.extractfile("blobs/sha256/" + index["manifests"][0]["digest"][7:]))
        layer = t.extractfile("blobs/sha256/" + manifest["layers"][0]["digest"][7:]).read()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as t:
        t.extractall(root, numeric_owner=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_stokerd_runs_inside(rootfs):
    for user in ("0:0", "2000:2000"):
        r = run(["chroot", f"--userspec={user}", rootfs, "/usr/sbin/stokerd", "--version"])
        assert r.stdout.strip() == f"stokerd {VERSION}", r.stdout + r.stderr
    r = run(["chroot", "--userspec=2000:2000", rootfs, "/usr/bin/stokerctl", "--version"])
    assert r.stdout.strip().endswith(VERSION)


def test_daemon_in_the_image_serves_a_client_here(rootfs, dataset, tmp_path):
    """As a pod: its own mount namespace with /proc, uid 2000, the socket in
    /run/stoker (the hostPath), the data set at /data in both."""
    (rootfs / "run/stoker").mkdir(parents=True, exist_ok=True)
    os.chown(rootfs / "run/stoker", 2000, 2000)
    shutil.copytree(dataset, rootfs / "data", dirs_exist_ok=True)
    run(["chmod", "-R", "a+rX", rootfs / "data"])  # readable by uid 2000, as a data set on a node is
    sock = rootfs / "run/stoker/stoker.sock"
    script = ('mount -t proc proc "$0/proc" && exec chroot --userspec=2000:2000 "$0" '
              '/usr/sbin/stokerd --socket /run/stoker/stoker.sock --workers 2')
    env = {"PATH": os.environ["PATH"], "STOKER_SOCKET": "/run/stoker/stoker.sock"}
    d = Daemon(sock, tmp_path / "stokerd.err", ["unshare", "--mount", "sh", "-c", script, rootfs], env=env)
    try:
        d.wait_ready()
        ld = stoker.Loader(dataset="/data", socket=str(sock), batch_size=8, image_size=32)
        labels = [int(x) for _, ls in ld for x in ls]
        ld.close()
        assert sorted(labels) == sorted(x for x in range(4) for _ in range(16)), labels
        # The configuration the image's daemon read: the package's layers.
        config = run([REPO / "build/stokerctl", "--socket", sock, "config"]).stdout
        assert "/usr/lib/stoker/stoker.conf" in config and "/etc/stoker/stoker.conf" in config, config
    finally:
        assert d.stop() == 0, d.stderr()
