"""Fixtures for the object-store tests: real servers on loopback, started here.

- nginx (Debian's), as root with a config of its own: daemon off, one
  worker, listening on 127.0.0.1 at a free port, serving a directory;
- moto's S3 server (PyPI `moto[server]`), with and without signature checks;
- faultserver.py: a small HTTP server that answers 500, stalls, truncates.
The daemon fixtures come from tests/conftest.py (tests/support/stoker_fixtures.py).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, proc, what, attempts=300):
    for _ in range(attempts):
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited {proc.returncode} at start")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} never answered on {url}")


class Nginx:
    """nginx serving `root` on 127.0.0.1:port; kill() and start() again on the same port."""

    def __init__(self, root, workdir):
        self.root = Path(root)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        conf = self.dir / "nginx.conf"
        temp = self.dir / "tmp"
        temp.mkdir(exist_ok=True)
        conf.write_text(f"""
daemon off;
master_process on;
worker_processes 1;
user root root;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log;
events {{ worker_connections 512; }}
http {{
  access_log {self.dir}/access.log;
  client_body_temp_path {temp}/body;
  proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi;
  scgi_temp_path {temp}/scgi;
  default_type application/octet-stream;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root};
  }}
}}
""")
        self.conf = conf

    def start(self):
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([nginx, "-c", str(self.conf), "-p", str(self.dir)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        wait_http(self.url + "/", self.proc, "nginx")

    def kill(self):
        """SIGKILL the master and its worker: connections drop mid-transfer."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def requests(self):
        try:
            return (self.dir / "access.log").read_text().count("\n")
        except OSError:
            return 0


@pytest.fixture
def nginx(tmp_path):
    """nginx(root) -> a started Nginx; stopped at teardown."""
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        pytest.fail("nginx missing: scripts/install-deps.sh installs nginx-light")
    started = []

    def start(root):
        n = Nginx(root, tmp_path / f"nginx{len(started)}")
        n.start()
        started.append(n)
        return n

    yield start
    for n in started:
        n.kill()


class Moto:
    def __init__(self, auth, workdir):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        if auth:
            # The first 3 requests (the IAM user, its policy, its key) go
            # unchecked; every later one must be signed by a real key.
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        else:
            env.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
        self.log = open(Path(workdir) / f"moto-{self.port}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                      str(self.port)], stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, env=env)
        wait_http(self.url + "/moto-api/", self.proc, "moto", attempts=600)
        self.key_id, self.secret = "testing", "testing"
        if auth:
            iam = self.client("iam")
            iam.create_user(UserName="stoker")
            iam.put_user_policy(UserName="stoker", PolicyName="all", PolicyDocument=json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
            key = iam.create_access_key(UserName="stoker")["AccessKey"]
            self.key_id, self.secret = key["AccessKeyId"], key["SecretAccessKey"]

    def client(self, service="s3"):
        import boto3
        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret)

    def upload_tree(self, bucket, prefix, root):
        """Every file under root as prefix + its relative path; returns the keys."""
        from concurrent.futures import ThreadPoolExecutor
        s3 = self.client()
        try:
            s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        files = [Path(d) / f for d, _, fs in os.walk(root) for f in fs]
        with ThreadPoolExecutor(8) as ex:
            keys = list(ex.map(lambda p: (s3.upload_file(str(p), bucket, prefix + str(p.relative_to(root))),
                                          prefix + str(p.relative_to(root)))[1], files))
        return keys

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _need_moto():
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        pytest.fail("moto[server] and boto3 missing: `make check-network` installs them")


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    """An S3 server that checks no signatures."""
    _need_moto()
    m = Moto(False, tmp_path_factory.mktemp("moto"))
    yield m
    m.stop()


@pytest.fixture(scope="session")
def moto_auth(tmp_path_factory):
    """An S3 server that checks SigV4 signatures against its IAM keys."""
    _need_moto()
    m = Moto(True, tmp_path_factory.mktemp("moto-auth"))
    yield m
    m.stop()


class FaultServer:
    def __init__(self, root, workdir):
        self.rules_path = Path(workdir) / "rules.json"
        self.rules_path.write_text("{}")
        self.log_path = Path(workdir) / "requests.log"
        self.proc = subprocess.Popen([sys.executable, str(HERE / "faultserver.py"), str(root),
                                      str(self.rules_path), str(self.log_path)], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}"

    def rules(self, rules):
        tmp = self.rules_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rules))
        tmp.replace(self.rules_path)

    def requests(self):
        try:
            return [line.split() for line in self.log_path.read_text().splitlines()]
        except OSError:
            return []

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def faultserver(tmp_path):
    """faultserver(root) -> a FaultServer serving root."""
    started = []

    def start(root):
        f = FaultServer(root, tmp_path)
        started.append(f)
        return f

    yield start
    for f in started:
        f.stop()
