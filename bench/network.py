#!/usr/bin/env python3
"""Epochs over HTTP and S3 from a loopback server: stoker (cold and warm node
cache, and with one transfer at a time) against PyTorch's DataLoader reading
the same objects with fsspec (HTTP) and boto3 (S3), at several round-trip
times.

    sudo make bench-network [BENCH_NETWORK_ARGS="--rtt 0 1 5 10 --images 512"]

Latency: the bench makes two network namespaces joined by a veth pair
(namespace-private addresses 10.254.N.1/.2, nothing on the host's network)
and shapes each end with `tc netem delay RTT/2`; nginx and moto run in one,
stokerd and the DataLoader in the other. Where the kernel has no netem
(sch_netem), it says so and falls back to a delay proxy on loopback that
holds each chunk RTT/2 in each direction and each new connection one RTT
(a round trip per request, as netem gives; no bandwidth limit). Results:
a table on stdout and bench/out/network.json.
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("STOKER_BUILD") or REPO / "build").resolve()
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(REPO / "tests" / "support"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WAIT = r'''
import sys, time, urllib.error, urllib.request
for _ in range(600):
    try:
        urllib.request.urlopen(sys.argv[1], timeout=1).close()
        sys.exit(0)
    except urllib.error.HTTPError:
        sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit("no answer from " + sys.argv[1])
'''


def wait_http_in(prefix, url):
    subprocess.run(prefix + [sys.executable, "-c", WAIT, url], check=True)


# ---- latency: netem in namespaces, or a delay proxy ----

class Netns:
    """Two namespaces, a veth pair, netem on both ends."""

    def __init__(self):
        tag = os.getpid() % 250
        self.srv, self.cli = f"stkb-srv-{os.getpid()}", f"stkb-cli-{os.getpid()}"
        self.srv_ip, self.cli_ip = f"10.254.{tag}.1", f"10.254.{tag}.2"
        self.made = []
        for ns in (self.srv, self.cli):
            self.ip("netns", "add", ns)
            self.made.append(ns)
            self.ip("-n", ns, "link", "set", "lo", "up")
        self.ip("link", "add", "stkb0", "type", "veth", "peer", "name", "stkb1")
        self.ip("link", "set", "stkb0", "netns", self.srv)
        self.ip("link", "set", "stkb1", "netns", self.cli)
        self.ip("-n", self.srv, "addr", "add", self.srv_ip + "/30", "dev", "stkb0")
        self.ip("-n", self.cli, "addr", "add", self.cli_ip + "/30", "dev", "stkb1")
        self.ip("-n", self.srv, "link", "set", "stkb0", "up")
        self.ip("-n", self.cli, "link", "set", "stkb1", "up")
        self.qdisc = False
        self.set_rtt(1.0)  # fails here when the kernel has no netem

    @staticmethod
    def ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def set_rtt(self, rtt_ms):
        verb = "change" if self.qdisc else "add"
        for ns, dev in ((self.srv, "stkb0"), (self.cli, "stkb1")):
            r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", verb, "dev", dev, "root", "netem",
                                "delay", f"{rtt_ms / 2:.3f}ms"], capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(r.stderr.strip())
        self.qdisc = True

    def server_prefix(self):
        return ["ip", "netns", "exec", self.srv]

    def client_prefix(self):
        return ["ip", "netns", "exec", self.cli]

    def close(self):
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class DelayProxy:
    """A TCP proxy on loopback adding rtt/2 each way (and one RTT per connect)."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.port = free_port()
        self.delay = 0.0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait()

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def pump(reader, writer, delay):
            q = asyncio.Queue()

            async def sender():
                while True:
                    due, data = await q.get()
                    if data is None:
                        break
                    wait = due - self.loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    writer.write(data)
                    await writer.drain()
                writer.close()
            task = asyncio.ensure_future(sender())
            try:
                while True:
                    data = await reader.read(65536)
                    if not data:
                        break
                    q.put_nowait((self.loop.time() + delay, data))
            except ConnectionError:
                pass
            q.put_nowait((0, None))
            await task

        async def handle(cr, cw):
            await asyncio.sleep(2 * self.delay)  # the handshake's round trip
            try:
                ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream)
            except OSError:
                cw.close()
                return
            await asyncio.gather(pump(cr, uw, self.delay), pump(ur, cw, self.delay), return_exceptions=True)

        async def start():
            await asyncio.start_server(handle, "127.0.0.1", self.port, backlog=1024)
            self.ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def set_rtt(self, rtt_ms):
        self.delay = rtt_ms / 2000.0


# ---- servers ----

def start_nginx(root, workdir, host, port, prefix):
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "nginx.conf"
    conf.write_text(f"""daemon off; worker_processes 2; user root root; pid {workdir}/nginx.pid;
error_log {workdir}/error.log; events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {workdir}/b; proxy_temp_path {workdir}/p;
fastcgi_temp_path {workdir}/f; uwsgi_temp_path {workdir}/u; scgi_temp_path {workdir}/s;
keepalive_requests 1000000; default_type application/octet-stream;
server {{ listen {host}:{port}; root {root}; }} }}
""")
    return subprocess.Popen(prefix + [shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(conf), "-p",
                                      str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def start_moto(host, port, prefix, log):
    env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
    return subprocess.Popen(prefix + [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                            stdout=log, stderr=log, env=env, start_new_session=True)


def kill(proc):
    if proc and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# ---- the peer: PyTorch DataLoader reading objects ----

PEER = r'''
import io, json, sys, time
import torch, torchvision
from PIL import Image
from torchvision import transforms as T
kind, base, listing, workers, batch, size = sys.argv[1:7]
items = json.loads(open(listing).read())
tf = T.Compose([T.RandomResizedCrop(int(size)), T.RandomHorizontalFlip(), T.PILToTensor()])

class Objects(torch.utils.data.Dataset):
    def __init__(self):
        self.client = None
    def __len__(self):
        return len(items)
    def __getitem__(self, i):
        key, label = items[i]
        if self.client is None:  # one per worker process
            if kind == "s3":
                import boto3
                self.client = boto3.client("s3", endpoint_url=base, region_name="us-east-1",
                                           aws_access_key_id="testing", aws_secret_access_key="testing")
            else:
                import fsspec
                self.client = fsspec.filesystem("http")
        if kind == "s3":
            data = self.client.get_object(Bucket="bench", Key=key)["Body"].read()
        else:
            data = self.client.cat_file(base + "/" + key)
        return tf(Image.open(io.BytesIO(data)).convert("RGB")), label

loader = torch.utils.data.DataLoader(Objects(), batch_size=int(batch), shuffle=True, num_workers=int(workers),
                                     persistent_workers=True)
# The first epoch starts the workers and their clients; the second is timed
# (every object is fetched again: the DataLoader keeps nothing).
for epoch in range(2):
    t = time.perf_counter(); n = 0
    for x, y in loader:
        n += len(y)
print(json.dumps({"images": n, "seconds": time.perf_counter() - t}))
'''


def run_peer(kind, base, listing, args, prefix):
    r = subprocess.run(prefix + [sys.executable, "-c", PEER, kind, base, str(listing), str(args.workers),
                                 str(args.batch_size), str(args.image_size)],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {"images_per_second": out["images"] / out["seconds"], "seconds": out["seconds"]}


# ---- stoker rows ----

class Stokerd:
    def __init__(self, workdir, args, extra, prefix):
        self.sock = str(workdir / f"s{time.monotonic_ns()}.sock")
        env = dict(os.environ, STOKER_CONFIG_ROOT="/nonexistent", AWS_ACCESS_KEY_ID="testing",
                   AWS_SECRET_ACCESS_KEY="testing")
        self.err = open(workdir / "stokerd.err", "ab")
        self.proc = subprocess.Popen(prefix + [str(BUILD / "stokerd"), "--socket", self.sock, "--workers",
                                               str(args.workers)] + extra, env=env, stdout=self.err,
                                     stderr=self.err)
        for _ in range(400):
            if os.path.exists(self.sock):
                break
            time.sleep(0.025)
        time.sleep(0.1)

    def stats(self):
        r = subprocess.run([str(BUILD / "stokerctl"), "--socket", self.sock, "stats", "--json"],
                           capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def stoker_epochs(d, url, args, epochs=2):
    """Seconds per epoch: the first cold (nothing cached), the next warm."""
    import stoker
    out = []
    with stoker.Loader(url, socket=d.sock, batch_size=args.batch_size, image_size=args.image_size,
                       seed=1, prefetch=args.prefetch) as loader:
        for e in range(epochs):
            loader.set_epoch(e)
            t = time.perf_counter()
            n = sum(len(b.labels) for b in loader)
            out.append({"images_per_second": n / (time.perf_counter() - t), "images": n})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rtt", type=float, nargs="+", default=[0, 1, 5, 10], help="round trips to test (ms)")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--no-s3", action="store_true", help="skip the S3 (moto) rows")
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "network.json"))
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/network.py: run as root (network namespaces, nginx)")

    work = Path(tempfile.mkdtemp(prefix="stoker-bench-net-"))
    classes = 8
    per_class = max(1, args.images // classes)
    subprocess.run([sys.executable, str(REPO / "scripts" / "mkdataset.py"), str(work / "ds"), "--classes",
                    str(classes), "--per-class", str(per_class)], check=True, capture_output=True)
    from stoker_testutil import expected_samples
    samples = [(os.path.relpath(path, work / "ds"), label) for path, label in expected_samples(work / "ds")]
    (work / "ds" / "train.txt").write_text("".join(f"{k} {v}\n" for k, v in samples))
    listing = work / "items.json"
    listing.write_text(json.dumps(samples))
    size = sum((work / "ds" / k).stat().st_size for k, _ in samples)

    netns = proxy_http = proxy_s3 = None
    how = ""
    try:
        netns = Netns()
        how = "tc netem in two network namespaces (veth)"
    except (RuntimeError, subprocess.CalledProcessError, FileNotFoundError) as e:
        reason = getattr(e, "stderr", None) or str(e)
        if netns is None:
            # Netns() failed midway: remove what it made.
            subprocess.run("for n in $(ip netns list | awk '/stkb-/{print $1}'); do ip netns del $n; done",
                           shell=True, capture_output=True)
        netns = None
        how = f"delay proxy on loopback (tc netem unavailable: {str(reason).strip()})"
    print(f"latency: {how}", flush=True)

    srv_prefix = netns.server_prefix() if netns else []
    cli_prefix = netns.client_prefix() if netns else []
    host = netns.srv_ip if netns else "127.0.0.1"
    http_port, s3_port = free_port(), free_port()
    nginx = start_nginx(work / "ds", work / "nginx", host, http_port, srv_prefix)
    moto_log = open(work / "moto.log", "wb")
    moto = None if args.no_s3 else start_moto(host, s3_port, srv_prefix, moto_log)
    rows = []
    try:
        if netns:
            netns.set_rtt(0.001)
        # Answering, seen from the client's side.
        wait_http_in(cli_prefix, f"http://{host}:{http_port}/train.txt")
        if moto:
            wait_http_in(cli_prefix, f"http://{host}:{s3_port}/moto-api/")
            up = subprocess.run(cli_prefix + [sys.executable, "-c", UPLOAD, f"http://{host}:{s3_port}",
                                              str(work / "ds"), str(listing)], capture_output=True, text=True)
            if up.returncode:
                raise RuntimeError(up.stderr)
        if not netns:
            proxy_http = DelayProxy(http_port)
            proxy_s3 = DelayProxy(s3_port) if moto else None
        for rtt in args.rtt:
            if netns:
                netns.set_rtt(max(rtt, 0.001))
                http_base, s3_base = f"http://{host}:{http_port}", f"http://{host}:{s3_port}"
            else:
                proxy_http.set_rtt(rtt)
                http_base = f"http://127.0.0.1:{proxy_http.port}"
                if proxy_s3:
                    proxy_s3.set_rtt(rtt)
                s3_base = f"http://127.0.0.1:{proxy_s3.port}" if proxy_s3 else ""
            print(f"-- RTT {rtt} ms", flush=True)

            def row(name, result, **kw):
                r = dict(rtt_ms=rtt, row=name, **kw, **result)
                rows.append(r)
                print(f"   {name:44s} {r.get('images_per_second', 0):8.1f} images/s  {r.get('error', '')}",
                      flush=True)

            for label, extra in (("stoker HTTP", []), ("stoker HTTP, 1 transfer at a time",
                                                       ["--set", "fetch_max_inflight=1"])):
                d = Stokerd(work, args, extra, cli_prefix)
                try:
                    ep = stoker_epochs(d, http_base + "/train.txt", args, epochs=2 if not extra else 1)
                    st = d.stats()
                finally:
                    d.stop()
                row(label + " cold", ep[0], net_requests=st.get("net_requests"), net_bytes=st.get("net_bytes"))
                if len(ep) > 1:
                    row(label + " warm (node cache)", ep[1], net_requests=st.get("net_requests"))
            row("PyTorch DataLoader + fsspec HTTP", run_peer("http", http_base, listing, args, cli_prefix),
                num_workers=args.workers)
            if moto:
                d = Stokerd(work, args, ["--set", f"s3_endpoint={s3_base}"], cli_prefix)
                try:
                    ep = stoker_epochs(d, "s3://bench/", args)
                finally:
                    d.stop()
                row("stoker S3 cold", ep[0])
                row("stoker S3 warm (node cache)", ep[1])
                row("PyTorch DataLoader + boto3 S3", run_peer("s3", s3_base, listing, args, cli_prefix),
                    num_workers=args.workers)
    finally:
        kill(nginx)
        kill(moto)
        moto_log.close()
        if netns:
            netns.close()
        shutil.rmtree(work, ignore_errors=True)

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"latency": how, "images": len(samples), "bytes": size,
                                          "batch_size": args.batch_size, "image_size": args.image_size,
                                          "workers": args.workers, "rows": rows}, indent=1))
    print(f"\n{len(samples)} images ({size / len(samples) / 1024:.0f} KiB mean), batch {args.batch_size}, "
          f"random_resized_crop {args.image_size}, {args.workers} workers; latency: {how}")
    rtts = sorted({r["rtt_ms"] for r in rows})
    names = list(dict.fromkeys(r["row"] for r in rows))
    print(f"{'images/s':44s}" + "".join(f"{f'RTT {x:g} ms':>12s}" for x in rtts))
    for n in names:
        cells = []
        for x in rtts:
            r = next((r for r in rows if r["row"] == n and r["rtt_ms"] == x), None)
            cells.append(f"{r['images_per_second']:12.0f}" if r and "images_per_second" in r else f"{'—':>12s}")
        print(f"{n:44s}" + "".join(cells))
    print(f"results: {args.out}")


UPLOAD = r'''
import json, sys
from concurrent.futures import ThreadPoolExecutor
import boto3
url, root, listing = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                  aws_secret_access_key="testing")
for _ in range(400):
    try:
        s3.list_buckets()
        break
    except Exception:
        import time
        time.sleep(0.05)
s3.create_bucket(Bucket="bench")
items = json.loads(open(listing).read())
with ThreadPoolExecutor(8) as ex:
    list(ex.map(lambda kv: s3.upload_file(root + "/" + kv[0], "bench", kv[0]), items))
'''

if __name__ == "__main__":
    main()
