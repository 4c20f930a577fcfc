"""Data sets over HTTP and S3, against real servers on loopback.

Each test compares what a remote data set delivers with the same files read
from the local disk (same seed, same bytes), and checks the counters that
say what crossed the network.
"""

import os
import threading
import time
from pathlib import Path

import pytest

import stoker
from stoker_testutil import expected_samples, read_epoch

OPTS = dict(batch_size=8, image_size=48, seed=7)


def write_list(root, name="train.txt", absolute=None):
    """A list file of root's ImageFolder samples in torchvision's order (so
    indices agree with the local data set); absolute: a URL prefix to name
    each image by its full URL instead."""
    root = Path(root)
    lines = ["# path label"]
    for path, label in expected_samples(root):
        rel = os.path.relpath(path, root)
        lines.append(f"{absolute + '/' + rel if absolute else rel} {label}")
    (root / name).write_text("\n".join(lines) + "\n")
    return root / name


def epoch(socket, dataset, epochs=1, **opts):
    """Run `epochs` epochs; the list of read_epoch results."""
    out = []
    with stoker.Loader(dataset, socket=socket, **dict(OPTS, **opts)) as loader:
        for e in range(epochs):
            loader.set_epoch(e)
            out.append(read_epoch(loader))
    return out


def same_epoch(a, b):
    assert a["indices"] == b["indices"]
    assert a["labels"] == b["labels"]
    assert a["hashes"] == b["hashes"]


def tcp_socket_flags(pid):
    """The open-file flags of each TCP socket process pid holds."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            inodes.update(line.split()[9] for line in list(f)[1:])
    flags = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:[") and link[8:-1] in inodes:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags += [int(line.split()[1], 8) for line in f if line.startswith("flags:")]
        except FileNotFoundError:  # closed meanwhile
            continue
    return flags


def test_http_list_file_same_bytes_cold_then_warm(daemon, make_dataset, nginx):
    """A list file over HTTP gives the local data set's bytes; the second epoch
    comes from the node cache: no request, every sample a cache hit."""
    root, _ = make_dataset(classes=3, per_class=10)
    write_list(root)
    web = nginx(root)
    d = daemon(workers=2)
    local = epoch(d.socket, root, epochs=2)
    served_before = web.requests()
    remote = epoch(d.socket, web.url + "/train.txt", epochs=2)
    for e in range(2):
        same_epoch(local[e], remote[e])
    assert sorted(remote[0]["indices"]) == list(range(30)) and remote[0]["replaced"] == 0
    st = d.stats()
    # Cold: the list and 30 objects, each fetched once (set_epoch's new
    # generation shares the transfers of the one it replaced); warm: none.
    assert st["remote_fetched"] == 30
    assert st["remote_cache_hits"] >= 30
    assert st["net_requests"] == 31 and st["net_errors"] == 0 and st["net_retries"] == 0
    assert web.requests() - served_before == 31
    # The connections kept for reuse are closed on exec.
    flags = tcp_socket_flags(d.proc.pid)
    assert flags and all(f & os.O_CLOEXEC for f in flags)
    sizes = sum(Path(p).stat().st_size for p, _ in expected_samples(root))
    assert st["net_bytes"] == sizes + (root / "train.txt").stat().st_size

    # A second job on the same objects: listing and bytes from this node.
    again = epoch(d.socket, web.url + "/train.txt", seed=8)
    assert sorted(again[0]["indices"]) == list(range(30))
    assert d.stats()["net_requests"] == 31
    r = d.ctl("stats")
    assert "network" in r.stdout and "30 fetched" in r.stdout
    metrics = d.ctl("metrics").stdout
    assert "stoker_net_requests_total 31" in metrics and "stoker_remote_fetched_total 30" in metrics


def test_http_absolute_urls_and_no_cache(daemon, make_dataset, nginx):
    """A list file naming absolute URLs; with no cache every epoch fetches."""
    root, _ = make_dataset(classes=2, per_class=8)
    web = nginx(root)
    write_list(root, "abs.txt", absolute=web.url)
    write_list(root, "rel.txt")
    d = daemon(workers=2, extra=["--set", "cache_bytes=0"])
    local = epoch(d.socket, root / "rel.txt")
    remote = epoch(d.socket, web.url + "/abs.txt", epochs=2)
    same_epoch(local[0], remote[0])
    st = d.stats()
    assert st["remote_fetched"] + st["remote_coalesced"] >= 32 and st["remote_cache_hits"] == 0


def test_http_directory_needs_a_list_file(daemon, nginx, make_dataset):
    root, _ = make_dataset(classes=2, per_class=8)
    web = nginx(root)
    d = daemon(workers=1)
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(web.url + "/", socket=d.socket, **OPTS)
    assert "list file" in str(e.value)
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(web.url + "/missing.txt", socket=d.socket, **OPTS)
    assert "404" in str(e.value)


def test_s3_image_folder_same_bytes(daemon, make_dataset, moto, tmp_path):
    """An S3 prefix in ImageFolder layout, listed over more than one
    ListObjectsV2 page (1000 keys each), gives the local tree's samples,
    labels and bytes."""
    root, _ = make_dataset(classes=3, per_class=10)
    moto.upload_tree("photos", "train/", root)
    # Objects that are not samples, enough to need a second listing page.
    pad = tmp_path / "pad" / "class_00"
    pad.mkdir(parents=True)
    for i in range(1005):
        (pad / f"notes_{i:04d}.txt").write_text("x")
    moto.upload_tree("photos", "train/", tmp_path / "pad")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    d = daemon(workers=2, env=env, extra=["--set", f"s3_endpoint={moto.url}"])
    local = epoch(d.socket, root)
    for url in ("s3://photos/train", "s3://photos/train/"):
        remote = epoch(d.socket, url)
        same_epoch(local[0], remote[0])
    st = d.stats()
    assert st["remote_fetched"] == 30 and st["remote_cache_hits"] >= 30
    # A list file kept in the bucket, naming keys relative to itself.
    write_list(root, "list.txt")
    moto.client().upload_file(str(root / "list.txt"), "photos", "train/list.txt")
    same_epoch(local[0], epoch(d.socket, "s3://photos/train/list.txt")[0])
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader("s3://photos/nothing-here/", socket=d.socket, **OPTS)
    assert "no class folders" in str(e.value)


def test_s3_credentials(daemon, make_dataset, moto_auth, tmp_path):
    """Signed requests (SigV4) with keys from the environment or a profile
    of a credentials file; wrong keys are refused at attach with S3's
    reason."""
    root, _ = make_dataset(classes=2, per_class=8)
    moto_auth.upload_tree("signed", "", root)
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n"
                     f"[train]\naws_access_key_id = {moto_auth.key_id}\n"
                     f"aws_secret_access_key = {moto_auth.secret}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    endpoint = ["--set", f"s3_endpoint={moto_auth.url}"]
    # moto checks a query's signature against its decoded form, so only a
    # listing without escaped characters (the bucket's root) passes there;
    # objects and the rest of the signing are checked in full.
    good = daemon(workers=2, env=dict(base, AWS_ACCESS_KEY_ID=moto_auth.key_id,
                                      AWS_SECRET_ACCESS_KEY=moto_auth.secret), extra=endpoint)
    local = epoch(good.socket, root)
    same_epoch(local[0], epoch(good.socket, "s3://signed/")[0])

    profile = daemon(workers=1, env=dict(base, AWS_PROFILE="train", AWS_SHARED_CREDENTIALS_FILE=str(creds)),
                     extra=endpoint)
    same_epoch(local[0], epoch(profile.socket, "s3://signed/")[0])

    wrong = daemon(workers=1, env=dict(base, AWS_ACCESS_KEY_ID=moto_auth.key_id, AWS_SECRET_ACCESS_KEY="wrong"),
                   extra=endpoint)
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader("s3://signed/", socket=wrong.socket, **OPTS)
    assert "403" in str(e.value) and "SignatureDoesNotMatch" in str(e.value)

    # A session token goes out (signed) with the keys: moto refuses a bogus one.
    token = daemon(workers=1, env=dict(base, AWS_ACCESS_KEY_ID=moto_auth.key_id,
                                       AWS_SECRET_ACCESS_KEY=moto_auth.secret, AWS_SESSION_TOKEN="bogus"),
                   extra=endpoint)
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader("s3://signed/", socket=token.socket, **OPTS)
    assert "InvalidToken" in str(e.value)

    unknown = daemon(workers=1, env=dict(base, AWS_SHARED_CREDENTIALS_FILE=str(creds)), extra=endpoint)
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader("s3://signed/", socket=unknown.socket, **OPTS)
    assert "403" in str(e.value) and "InvalidAccessKeyId" in str(e.value)

    missing = daemon(workers=1, env=dict(base, AWS_SHARED_CREDENTIALS_FILE=str(creds)),
                     extra=endpoint + ["--set", "s3_profile=absent"])
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader("s3://signed/", socket=missing.socket, **OPTS)
    assert "[absent]" in str(e.value)


def test_network_dropin_without_credentials_file(daemon, make_dataset, moto, tmp_path):
    """The systemd drop-in (deploy/stoker-network.conf) points stokerd at its
    credential "aws"; without /etc/stoker/aws-credentials that credential is
    the drop-in's SetCredential= fallback, which stokerd must read as "no
    keys" (unsigned requests), not as an error."""
    dropin = (Path(__file__).resolve().parents[2] / "deploy/stoker-network.conf").read_text()
    fallback = next(line.split(":", 1)[1] for line in dropin.splitlines() if line.startswith("SetCredential=aws:"))
    assert "%" not in fallback and "\\" not in fallback  # systemd would expand those
    creds = tmp_path / "aws"
    creds.write_text(fallback)
    root, _ = make_dataset(classes=2, per_class=6)
    s3 = moto.client()
    for key in moto.upload_tree("public", "train/", root):  # anonymous reads: a public bucket
        s3.put_object_acl(Bucket="public", Key=key, ACL="public-read")
    s3.put_bucket_acl(Bucket="public", ACL="public-read")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    d = daemon(workers=1, env=dict(base, AWS_SHARED_CREDENTIALS_FILE=str(creds)),
               extra=["--set", f"s3_endpoint={moto.url}"])
    same_epoch(epoch(d.socket, root)[0], epoch(d.socket, "s3://public/train/")[0])


def test_server_killed_and_restarted_mid_epoch(daemon, make_dataset, nginx):
    """nginx is SIGKILLed after the first batch and comes back a second
    later: the retries cover it, and the epoch is the local one, each
    sample once, none replaced."""
    root, _ = make_dataset(classes=3, per_class=16)
    write_list(root)
    web = nginx(root)
    d = daemon(workers=2, prefetch=1, extra=["--set", "cache_bytes=0"])
    local = epoch(d.socket, root, batch_size=4)[0]
    got = {"indices": [], "labels": [], "hashes": [], "replaced": 0}
    restarted = threading.Event()

    def restart():
        time.sleep(1.0)
        web.start()
        restarted.set()

    with stoker.Loader(web.url + "/train.txt", socket=d.socket, **dict(OPTS, batch_size=4, prefetch=1)) as loader:
        t = None
        for b in loader:
            part = read_epoch([b])
            for k in ("indices", "labels", "hashes"):
                got[k] += part[k]
            got["replaced"] += part["replaced"]
            if t is None:
                web.kill()
                t = threading.Thread(target=restart)
                t.start()
        t.join()
    assert restarted.is_set()
    assert got["replaced"] == 0
    same_epoch(local, got)
    st = d.stats()
    assert st["net_retries"] > 0 and st["net_errors"] == 0 and st["decode_errors"] == 0


def test_faults_500_stall_truncated_then_served(daemon, make_dataset, faultserver):
    """Objects that first answer 500, stall, or send half their body are
    retried and arrive whole: the epoch is the local one."""
    root, _ = make_dataset(classes=2, per_class=8)
    write_list(root)
    srv = faultserver(root)
    names = ["/" + os.path.relpath(p, root) for p, _ in expected_samples(root)]
    srv.rules({names[0]: ["500", "500", "ok"], names[1]: ["stall", "ok"], names[2]: ["truncate", "ok"],
               names[3]: ["hang", "ok"]})
    d = daemon(workers=2, extra=["--set", "fetch_stall_timeout_ms=1000", "--set", "fetch_backoff_ms=50"])
    local = epoch(d.socket, root)[0]
    remote = epoch(d.socket, srv.url + "/train.txt")[0]
    same_epoch(local, remote)
    assert remote["replaced"] == 0
    st = d.stats()
    assert st["net_retries"] == 5 and st["net_errors"] == 0
    log = srv.requests()
    for name, n in ((names[0], 3), (names[1], 2), (names[2], 2), (names[3], 2), (names[4], 1)):
        assert sum(1 for p, _ in log if p == name) == n, name


def test_faults_that_persist_replace_the_sample(daemon, make_dataset, faultserver):
    """An object that keeps failing (500 after every retry, a body always
    cut short) or is gone (404) is replaced as an unreadable file is: the
    next sample in data-set order stands in, and it is counted."""
    root, _ = make_dataset(classes=2, per_class=8)
    write_list(root)
    srv = faultserver(root)
    samples = expected_samples(root)
    names = ["/" + os.path.relpath(p, root) for p, _ in samples]
    srv.rules({names[3]: ["500"], names[7]: ["truncate"], names[11]: ["404"]})
    d = daemon(workers=2, extra=["--set", "fetch_retries=2", "--set", "fetch_backoff_ms=20"])
    remote = epoch(d.socket, srv.url + "/train.txt", shuffle=False)[0]
    log = d.stderr()
    assert f"{srv.url}{names[3]}): cannot read: an error answer" in log
    assert f"{srv.url}{names[7]}): cannot read: a truncated or malformed answer" in log
    assert f"{srv.url}{names[11]}): cannot read: not found (HTTP 404); replaced\n" in log
    assert remote["replaced"] == 3
    # Each failed sample's place holds its successor, which also appears in its own place.
    assert remote["indices"][3] == 4 and remote["indices"][7] == 8 and remote["indices"][11] == 12
    assert [i for n, i in enumerate(remote["indices"]) if n not in (3, 7, 11)] == \
        [n for n in range(16) if n not in (3, 7, 11)]
    st = d.stats()
    # (set_epoch's new generation may try a failed object again.)
    assert st["net_errors"] >= 3 and st["decode_errors"] >= 3
    log = srv.requests()
    # 1 + 2 retries for each attempt at a store failure; a 404 is final.
    assert sum(1 for p, _ in log if p == names[3]) % 3 == 0
    assert sum(1 for p, _ in log if p == names[7]) % 3 == 0
    n404 = sum(1 for p, _ in log if p == names[11])
    assert n404 in (1, 2)
    # The 404 marks the object bad (skipped from now on); the store's
    # failures do not: the next epoch tries them again, and they now work.
    srv.rules({names[11]: ["404"]})
    again = epoch(d.socket, srv.url + "/train.txt", shuffle=False)[0]
    assert again["replaced"] == 1 and again["indices"][11] == 12
    assert sum(1 for p, _ in srv.requests() if p == names[11]) == n404


def test_tar_shards_over_http_and_s3(daemon, make_dataset, nginx, moto, tmp_path):
    """WebDataset shards named by a brace pattern of URLs: indexed through
    range requests, each sample's member fetched by its range; the same
    samples and bytes as the local shards, warm from the node cache."""
    import subprocess
    import sys
    from stoker_testutil import REPO
    root, _ = make_dataset(classes=3, per_class=10)
    out = tmp_path / "shards"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "mkshards.py"), "imagefolder", str(root), str(out),
                        "--maxcount", "7"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pattern = r.stdout.strip()
    name = os.path.basename(pattern)
    shards = sorted(p.name for p in out.glob("*.tar"))
    assert len(shards) == 5
    # A list of shards: names relative to the list, and a pattern.
    rest = name.replace("{000000..000004}", "{000002..000004}")
    assert rest != name
    (out / "shards.txt").write_text(f"# shards\n{shards[0]}\n{shards[1]}\n{rest}\n")
    web = nginx(out)
    moto.upload_tree("tars", "sh/", out)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    d = daemon(workers=2, env=env, extra=["--set", f"s3_endpoint={moto.url}"])
    local = epoch(d.socket, pattern, epochs=2)
    before = web.requests()
    remote = epoch(d.socket, f"{web.url}/{name}", epochs=2)
    for e in range(2):
        same_epoch(local[e], remote[e])
    assert sorted(remote[0]["indices"]) == list(range(30)) and remote[0]["replaced"] == 0
    st = d.stats()
    # Indexing: one HEAD and one read-ahead range per (small) shard; then
    # one range request per sample, once: the second epoch is warm.
    assert st["remote_fetched"] == 30 and st["remote_cache_hits"] >= 30
    assert web.requests() - before == 5 * 2 + 30
    one = epoch(d.socket, f"{web.url}/{shards[2]}")[0]
    assert sorted(one["indices"]) == list(range(7))
    s3 = epoch(d.socket, "s3://tars/sh/" + name)
    same_epoch(local[0], s3[0])
    # A prefix holding .tar objects is a shard data set, as a directory of them is.
    same_epoch(local[0], epoch(d.socket, "s3://tars/sh/")[0])
    same_epoch(local[0], epoch(d.socket, f"{web.url}/shards.txt")[0])
    same_epoch(local[0], epoch(d.socket, "s3://tars/sh/shards.txt")[0])
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(f"{web.url}/missing-{{0..1}}.tar", socket=d.socket, **OPTS)
    assert "404" in str(e.value) or "No such file" in str(e.value)
