"""A shared daemon reads for a client only what that client could read itself
(issue 18, docs/deploy.md "Multi-user nodes"): real users made here (the
tests run as root), their clients run as them (setpriv), real files with
modes, symlinks, groups and POSIX ACLs."""

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest
import stoker

from stoker_testutil import client_for_users, expected_samples

# Names of this run's own (runs on one machine at once must not share them).
_RUN = os.getpid() % 1000000
USER_A, USER_B, GROUP = f"stkp{_RUN}a", f"stkp{_RUN}b", f"stkp{_RUN}g"
CLIENT_ENV = {}  # client processes' environment (the `base` fixture's)
SYSTEM_PYTHON = "/usr/bin/python3"  # one every user may run (the test's may sit in /root)
SANITIZER_ENV = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS")

CLIENT = r"""
import hashlib, json, os, sys
import stoker
a = json.loads(sys.argv[1])
opts = dict(batch_size=4, image_size=32, timeout=60, shuffle=False, transform="center_crop")
opts.update(a.get("opts", {}))
try:
    ld = stoker.Loader(a["dataset"], socket=a["socket"], **opts)
except stoker.StokerError as e:
    print(json.dumps({"error": str(e), "errno": e.errno}))
    sys.exit(0)
out = {"indices": [], "labels": [], "hashes": [], "replaced": 0}
for b in ld:
    out["indices"] += [int(i) for i in b.indices]
    out["labels"] += [int(x) for x in b.labels]
    out["hashes"] += [hashlib.sha1(bytes(im)).hexdigest() for im in b.images]
    out["replaced"] += b.replaced
out["names"] = [ld.sample_path(i) for i in range(ld.dataset_samples)]
me = [c for c in stoker.stats(a["socket"])["clients"] if c["pid"] == os.getpid()]
out["unreadable_samples"] = me[0]["unreadable_samples"] if me else None
out["uid"] = os.getuid()
if a.get("hold"):
    print(json.dumps(out), flush=True)
    sys.stdin.read()
ld.close()
print(json.dumps(out))
"""


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True, **kw)


@pytest.fixture(scope="module")
def users():
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"):
        pytest.skip("needs root, useradd and setpriv (the tests make users)")
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip("needs /usr/bin/python3 with numpy")
    # What an interrupted run may have left: the users, their own groups.
    for name in (USER_A, USER_B):
        subprocess.run(["userdel", name], capture_output=True)
    for name in (USER_A, USER_B, GROUP):
        subprocess.run(["groupdel", name], capture_output=True)
    _run(["groupadd", GROUP])
    for name in (USER_A, USER_B):
        _run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name])
    try:
        yield {n: pwd.getpwnam(n) for n in (USER_A, USER_B)}
    finally:
        for name in (USER_A, USER_B):
            subprocess.run(["userdel", name], capture_output=True)
        for name in (USER_A, USER_B, GROUP):
            subprocess.run(["groupdel", name], capture_output=True)


@pytest.fixture(scope="module")
def client_env(users):
    """The binding and libstoker where every user can read them."""
    d = tempfile.mkdtemp(prefix="stoker-perm-client-", dir="/tmp")
    os.chmod(d, 0o755)
    try:
        yield client_for_users(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def base(users, client_env):
    """A directory every user can reach (pytest's own are root's 0700)."""
    d = tempfile.mkdtemp(prefix="stoker-perm-", dir="/tmp")
    os.chmod(d, 0o755)
    CLIENT_ENV.clear()
    CLIENT_ENV.update(client_env)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def chown_tree(path, user, dir_mode=0o755, file_mode=0o644):
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chmod(root, dir_mode)
        for f in files:
            p = os.path.join(root, f)
            os.chown(p, pw.pw_uid, pw.pw_gid)
            os.chmod(p, file_mode)


def copy_dataset(src, dst, owner, dir_mode=0o755, file_mode=0o644, per_class=4):
    """The first per_class photos of each class of src in dst, owned by owner."""
    os.makedirs(dst)
    for cls in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, cls)):
            continue
        os.makedirs(os.path.join(dst, cls))
        for f in sorted(os.listdir(os.path.join(src, cls)))[:per_class]:
            shutil.copy(os.path.join(src, cls, f), os.path.join(dst, cls, f))
    chown_tree(dst, owner, dir_mode, file_mode)
    return [os.path.relpath(p, dst) for p, _ in expected_samples(dst)]


def start(daemon, base, *sets):
    extra = ["--set", "socket_mode=0666"]
    for s in sets:
        extra += ["--set", s]
    return daemon(workers=2, socket=os.path.join(base, "stoker.sock"), extra=extra)


def client(user, d, dataset, hold=False, **opts):
    """One epoch read by a client process running as `user`."""
    env = dict(CLIENT_ENV)
    # The sanitizer runs (make check-sanitize) preload their runtime.
    env.update((k, v) for k, v in os.environ.items() if k in SANITIZER_ENV)
    cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", SYSTEM_PYTHON, "-c", CLIENT,
           json.dumps({"socket": d.socket, "dataset": str(dataset), "opts": opts, "hold": hold})]
    if hold:
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        line = p.stdout.readline()
        assert line, p.stderr.read()
        return p, json.loads(line)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_private_dataset_refused_at_attach(daemon, dataset, base, users):
    home_a = os.path.join(base, "home-a")
    os.makedirs(home_a)
    names = copy_dataset(dataset, os.path.join(home_a, "private"), USER_A)
    chown_tree(home_a, USER_A)
    os.chmod(home_a, 0o700)
    d = start(daemon, base)
    r = client(USER_A, d, os.path.join(home_a, "private"))
    assert "error" not in r, r
    assert sorted(set(r["indices"])) == list(range(len(names)))
    assert r["unreadable_samples"] == 0
    b = client(USER_B, d, os.path.join(home_a, "private"))
    uid_b = users[USER_B].pw_uid
    assert "permission denied" in b["error"].lower() and f"uid {uid_b}" in b["error"], b
    assert os.path.join(home_a, "private") in b["error"]
    # A name that does not exist in there is refused alike: B learns
    # nothing about what A's directory holds.
    b = client(USER_B, d, os.path.join(home_a, "nothing-here"))
    assert "permission denied" in b["error"].lower(), b
    assert f"uid {uid_b}" in d.stderr()


def test_symlinks_into_private_data_give_nothing(daemon, dataset, base, users):
    home_a = os.path.join(base, "home-a")
    os.makedirs(home_a)
    a_names = copy_dataset(dataset, os.path.join(home_a, "private"), USER_A)
    chown_tree(home_a, USER_A)
    os.chmod(home_a, 0o700)
    # B's tree: its own class, and symlinks to A's class directories.
    tree = os.path.join(base, "tree-b")
    own = copy_dataset(dataset, tree, USER_B, per_class=1)
    for cls in sorted({n.split("/")[0] for n in a_names}):
        os.symlink(os.path.join(home_a, "private", cls), os.path.join(tree, "z-" + cls))
    d = start(daemon, base)
    b = client(USER_B, d, tree)
    assert "error" not in b, b
    n_own = len(own)
    # Samples 0..n_own-1 are B's own files (their classes sort first).
    assert b["indices"] and set(b["indices"]) <= set(range(n_own)), b["indices"]
    assert b["unreadable_samples"] == len(a_names)
    a_files = {os.path.basename(n) for n in a_names}
    for name in b["names"]:
        assert not any(f in name for f in a_files if f not in {os.path.basename(o) for o in own}), name
    assert all(name.endswith("/") for name in b["names"][n_own:]), b["names"]
    # The administrator is told, by name.
    assert "not readable by uid %d" % users[USER_B].pw_uid in d.stderr()


CACHES = {
    "no cache": (),
    "encoded": ("cache_bytes=256M",),
    "decoded": ("cache_bytes=256M", "cache_decoded_side=64"),
}


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_one_unreadable_file_replaced_and_counted(daemon, dataset, base, users, cache):
    tree = os.path.join(base, "shared")
    names = copy_dataset(dataset, tree, USER_A)
    secret = 5
    os.chmod(os.path.join(tree, names[secret]), 0o600)
    d = start(daemon, base, *CACHES[cache])
    # A reads everything first: its bytes (and pixels) are in the cache.
    opts = {"transform": "random_resized_crop"} if cache == "decoded" else {}
    a = client(USER_A, d, tree, **opts)
    assert sorted(set(a["indices"])) == list(range(len(names)))
    b = client(USER_B, d, tree, **opts)
    assert secret not in b["indices"]
    assert set(b["indices"]) == set(range(len(names))) - {secret}
    assert b["replaced"] == 1 and b["unreadable_samples"] == 1
    # In its place the next file (the same pixels as where it is planned).
    assert b["indices"][secret] == secret + 1
    assert b["hashes"][secret] == b["hashes"][secret + 1]
    assert a["hashes"][secret] not in b["hashes"]
    assert b["names"][secret].endswith("/") and os.path.basename(names[secret]) not in b["names"][secret]
    assert b["names"][secret + 1].endswith(names[secret + 1])
    # Named for the administrator; counted per client in the metrics.
    assert names[secret] in d.stderr()
    assert "stoker_client_unreadable_samples_total" in stoker.metrics(d.socket)


def test_coordinated_groups_share_only_equal_views(daemon, dataset, base, users):
    tree = os.path.join(base, "shared")
    names = copy_dataset(dataset, tree, USER_A)
    secret = 2
    os.chmod(os.path.join(tree, names[secret]), 0o600)
    d = start(daemon, base)
    # A holds its ring full of finished batches, its sample 2 among them.
    p, a = client(USER_A, d, tree, hold=True, coordinated=True, prefetch=8)
    try:
        b = client(USER_B, d, tree, coordinated=True, prefetch=8)
        assert secret not in b["indices"] and b["unreadable_samples"] == 1
        assert a["hashes"][secret] not in b["hashes"]
        # A second A-like client may still share with A.
        a2 = client(USER_A, d, tree, coordinated=True, prefetch=8)
        assert a2["hashes"] == a["hashes"]
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def test_posix_acl_grants_read(daemon, dataset, base, users):
    if not shutil.which("setfacl"):
        pytest.skip("setfacl missing (package acl: scripts/install-deps.sh)")
    tree = os.path.join(base, "acl")
    names = copy_dataset(dataset, tree, USER_A, dir_mode=0o700, file_mode=0o600)
    d = start(daemon, base)
    b = client(USER_B, d, tree)
    assert "permission denied" in b["error"].lower(), b
    subprocess.run(["setfacl", "-R", "-m", f"u:{USER_B}:rX", tree], check=True)
    b = client(USER_B, d, tree)
    assert "error" not in b, b
    assert sorted(set(b["indices"])) == list(range(len(names))) and b["unreadable_samples"] == 0


def test_group_added_after_start_honoured_at_next_attach(daemon, dataset, base, users):
    tree = os.path.join(base, "grouped")
    names = copy_dataset(dataset, tree, USER_A)
    secret = os.path.join(tree, names[0])
    os.chown(secret, users[USER_A].pw_uid, grp.getgrnam(GROUP).gr_gid)
    os.chmod(secret, 0o640)
    d = start(daemon, base)
    b = client(USER_B, d, tree)
    assert 0 not in b["indices"] and b["unreadable_samples"] == 1
    _run(["usermod", "-a", "-G", GROUP, USER_B])
    try:
        b = client(USER_B, d, tree)
        assert 0 in b["indices"] and b["unreadable_samples"] == 0
    finally:
        _run(["gpasswd", "-d", USER_B, GROUP])


def test_detection_label_file_is_part_of_the_sample(daemon, base, users, make_yolo):
    """A detection sample is its image and its label file: a client that may
    read the image but not its label file (the boxes, polygons, keypoints
    another user keeps private) gets the sample replaced and counted, as
    for an unreadable image; the owner reads every box."""
    src, _, _ = make_yolo(kind="scenes", images=8, min_side=64, max_side=96, seed=4)
    tree = os.path.join(base, "yolo")
    shutil.copytree(src, tree)
    chown_tree(tree, USER_A)
    images = sorted(os.listdir(os.path.join(tree, "images", "train")))
    secret = 3
    label = os.path.join(tree, "labels", "train", os.path.splitext(images[secret])[0] + ".txt")
    assert os.path.getsize(label) > 0
    os.chmod(label, 0o600)
    d = start(daemon, base)
    opts = dict(task="detect", transform="letterbox", image_size=64, batch_size=4)
    a = client(USER_A, d, os.path.join(tree, "images", "train"), **opts)
    assert sorted(a["indices"]) == list(range(len(images))) and a["replaced"] == 0
    b = client(USER_B, d, os.path.join(tree, "images", "train"), **opts)
    assert secret not in b["indices"] and b["replaced"] == 1 and b["unreadable_samples"] == 1
    assert b["labels"][:secret] == a["labels"][:secret]
    assert os.path.basename(images[secret]) not in " ".join(b["names"])
    assert os.path.basename(label) in d.stderr() or images[secret] in d.stderr()
