"""Whose credentials read an s3:// data set (issue 18, docs/deploy.md
"Multi-user nodes"): a client's own, sent at attach; the node's only under
shared_remote_prefixes (and for root). Against moto checking SigV4
signatures; the clients run as a user made here (the tests run as root)."""

import json
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

import stoker
from stoker_testutil import STOKERCTL, client_for_users

USER = f"stks3{os.getpid() % 1000000}b"  # this run's own: runs on one machine at once must not share it
CLIENT_ENV = {}  # client processes' environment: the binding's copy for USER
SYSTEM_PYTHON = "/usr/bin/python3"
SANITIZER_ENV = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS")

CLIENT = r"""
import json, sys
import stoker
a = json.loads(sys.argv[1])
try:
    ld = stoker.Loader(a["dataset"], socket=a["socket"], batch_size=4, image_size=32, timeout=60, shuffle=False,
                       transform="center_crop")
except stoker.StokerError as e:
    print(json.dumps({"error": str(e)}))
    sys.exit(0)
idx = [int(i) for b in ld for i in b.indices]
ld.close()
print(json.dumps({"indices": idx}))
"""


@pytest.fixture(scope="module")
def user():
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"):
        pytest.skip("needs root, useradd and setpriv (the test makes a user)")
    # What an interrupted run may have left: the user, its own group.
    subprocess.run(["userdel", USER], capture_output=True)
    subprocess.run(["groupdel", USER], capture_output=True)
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", USER],
                   check=True, capture_output=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        subprocess.run(["userdel", USER], capture_output=True)
        subprocess.run(["groupdel", USER], capture_output=True)


def as_user(d, url, keys=None):
    """One epoch of `url` read by a client process running as USER, with
    `keys` (id, secret) in its environment (None: none)."""
    env = dict(CLIENT_ENV)
    # The sanitizer runs (make check-sanitize) preload their runtime.
    env.update((k, v) for k, v in os.environ.items() if k in SANITIZER_ENV)
    if keys:
        env.update(AWS_ACCESS_KEY_ID=keys[0], AWS_SECRET_ACCESS_KEY=keys[1])
    r = subprocess.run(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", SYSTEM_PYTHON, "-c",
                        CLIENT, json.dumps({"socket": d.socket, "dataset": url})],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_client_credentials_decide(daemon, make_dataset, moto_auth, request, user, monkeypatch):
    root, _ = make_dataset(classes=2, per_class=4)
    # Bucket roots: moto checks a listing's signature only without escaped
    # characters in the query (test_objects.py, test_s3_credentials).
    moto_auth.upload_tree("private-a", "", root)
    moto_auth.upload_tree("shared-sets", "", root)
    # A second key of its own for B, as valid as A's (the node's).
    iam = moto_auth.client("iam")
    iam.create_user(UserName="b")
    iam.put_user_policy(UserName="b", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key_b = iam.create_access_key(UserName="b")["AccessKey"]
    keys_b = (key_b["AccessKeyId"], key_b["SecretAccessKey"])

    # A socket every user can reach (pytest's directories are root's 0700).
    sock_dir = tempfile.mkdtemp(prefix="stoker-s3-", dir="/tmp")
    os.chmod(sock_dir, 0o755)
    request.addfinalizer(lambda: shutil.rmtree(sock_dir, ignore_errors=True))
    CLIENT_ENV.clear()
    CLIENT_ENV.update(client_for_users(os.path.join(sock_dir, "client")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=moto_auth.key_id, AWS_SECRET_ACCESS_KEY=moto_auth.secret)
    d = daemon(workers=2, env=env, socket=os.path.join(sock_dir, "s.sock"),
               extra=["--set", f"s3_endpoint={moto_auth.url}", "--set", "socket_mode=0666",
                      "--set", "cache_bytes=64M", "--set", "shared_remote_prefixes=s3://shared-sets/"])
    private = "s3://private-a/"

    # A (root here: the node's view) reads its private bucket: the cache is warm.
    ld = stoker.Loader(private, socket=d.socket, batch_size=4, image_size=32, timeout=60, shuffle=False,
                       transform="center_crop")
    assert sorted(int(i) for b in ld for i in b.indices) == list(range(8))
    ld.close()

    # B without credentials: refused at attach (unsigned requests: S3 says
    # 403, moto 500), warm cache or not.
    b = as_user(d, private)
    assert "error" in b and "sent none" in b["error"], b
    # B with wrong keys: refused too.
    b = as_user(d, private, (keys_b[0], "wrong-secret"))
    assert "error" in b, b
    # B with its own valid keys reads it.
    b = as_user(d, private, keys_b)
    assert sorted(b["indices"]) == list(range(8)), b
    # A shared prefix: the node's credentials, for B without any.
    b = as_user(d, "s3://shared-sets/")
    assert sorted(b["indices"]) == list(range(8)), b

    # Keys S3 stops accepting are refused at the next attach, even while a
    # session with them keeps the data set's listing open.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys_b[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys_b[1])
    held = stoker.Loader(private, socket=d.socket, batch_size=4, image_size=32, timeout=60)
    try:
        iam.delete_access_key(UserName="b", AccessKeyId=keys_b[0])
        with pytest.raises(stoker.StokerError, match="refused"):
            stoker.Loader(private, socket=d.socket, batch_size=4, image_size=32, timeout=60)
    finally:
        held.close()
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")

    # No secret in the log, the statistics or the configuration.
    cfg = subprocess.run([str(STOKERCTL), "--socket", d.socket, "config"], capture_output=True, text=True,
                         timeout=60).stdout
    assert "shared_remote_prefixes" in cfg
    seen = d.stderr() + json.dumps(stoker.stats(d.socket)) + cfg + stoker.metrics(d.socket)
    for secret in (keys_b[1], moto_auth.secret, "wrong-secret"):
        assert secret not in seen
