#!/usr/bin/env python3
"""stoker end to end: build a small real-photo data set, start build/stokerd on
a private socket, train-loop over 2 epochs with stoker.Loader, print images/s
and the daemon's statistics, stop the daemon. Exit 0 only if all went well.

    python3 scripts/demo.py [--classes 8] [--per-class 64] [--epochs 2] [--keep DIR]
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("STOKER_BUILD") or os.path.join(REPO, "build"))
os.environ.setdefault("STOKER_BUILD", BUILD)
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import stoker  # noqa: E402

sys.stdout.reconfigure(line_buffering=True)  # interleave sensibly with stokerd's stderr


def wait_for_socket(proc, path, attempts=400):
    for _ in range(attempts):
        if proc.poll() is not None:
            raise RuntimeError(f"stokerd exited with status {proc.returncode} while starting")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return
        except OSError:
            time.sleep(0.025)
        finally:
            s.close()
    raise RuntimeError(f"stokerd did not accept connections on {path}")


def detect_demo(sock, data, images):
    """YOLO training batches: mosaic 640 on real-photo scenes."""
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "mkyolo.py"), data, "--kind", "photos",
                    "--images", str(images)], check=True, stdout=subprocess.DEVNULL)
    with stoker.Loader(os.path.join(data, "data.yaml"), socket=sock, task="detect", transform="mosaic",
                       image_size=640, batch_size=16, seed=0) as loader:
        n, boxes, t0 = 0, 0, time.monotonic()
        for batch in loader:
            n += len(batch.images)
            boxes += len(batch.boxes)
            if len(batch.boxes) and not (0 <= batch.boxes[:, 2:].min() and batch.boxes[:, 2:].max() <= 1):
                raise RuntimeError("a box outside the image")
        dt = time.monotonic() - t0
        if n != loader.samples_per_epoch:
            raise RuntimeError(f"detection: {n} samples, expected {loader.samples_per_epoch}")
        print(f"demo: detection (mosaic 640): {n} images, {boxes} boxes in {dt:.2f}s = {n / dt:.0f} images/s, "
              f"{loader.num_classes} classes, {loader.label_errors} label errors")


def main():
    p = argparse.ArgumentParser(description="stoker demo")
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--per-class", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=0, help="stokerd workers (0: daemon default)")
    p.add_argument("--detect-images", type=int, default=64,
                   help="real-photo YOLO scenes for the detection part (0: skip it)")
    p.add_argument("--keep", metavar="DIR", help="build the data set here and keep it")
    a = p.parse_args()

    stokerd = os.path.join(BUILD, "stokerd")
    if not os.access(stokerd, os.X_OK):
        print(f"demo: {stokerd} not found; run make", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="stoker-demo-") as tmp:
        data = a.keep or os.path.join(tmp, "data")
        t0 = time.monotonic()
        subprocess.run([sys.executable, os.path.join(REPO, "scripts", "mkdataset.py"), data,
                        "--classes", str(a.classes), "--per-class", str(a.per_class)], check=True)
        print(f"demo: data set built in {time.monotonic() - t0:.1f}s: {data}")

        sock = os.path.join(tmp, "stoker.sock")
        cmd = [stokerd, "--socket", sock]
        if a.workers:
            cmd += ["--workers", str(a.workers)]
        daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        ok = False
        try:
            wait_for_socket(daemon, sock)
            with stoker.Loader(data, socket=sock, batch_size=a.batch_size, image_size=a.image_size,
                               transform="random_resized_crop", seed=0) as loader:
                print(f"demo: {loader.dataset_samples} samples, {loader.num_classes} classes, "
                      f"{len(loader)} batches/epoch")
                for epoch in range(a.epochs):
                    loader.set_epoch(epoch)
                    n, checksum, t0 = 0, 0, time.monotonic()
                    for images, labels in loader:
                        n += len(labels)
                        checksum += int(images[:, ::16, ::16].sum()) + int(labels.sum())  # touch pixels
                    dt = time.monotonic() - t0
                    if n != loader.samples_per_epoch:
                        raise RuntimeError(f"epoch {epoch}: {n} samples, expected {loader.samples_per_epoch}")
                    print(f"demo: epoch {epoch}: {n} images in {dt:.2f}s = {n / dt:.0f} images/s "
                          f"(checksum {checksum})")
            if a.detect_images:
                detect_demo(sock, os.path.join(a.keep or tmp, "yolo"), a.detect_images)
            s = stoker.stats(sock)
            print("demo: stokerd stats:")
            for k, v in s.items():
                if k != "clients":
                    print(f"  {k}: {v}")
            print(f"  clients: {len(s.get('clients', []))}")
            ok = True
        except (stoker.StokerError, RuntimeError) as e:
            print(f"demo: FAILED: {e}", file=sys.stderr)
        finally:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
                    print("demo: stokerd did not stop on SIGTERM", file=sys.stderr)
                    ok = False
            if daemon.returncode != 0:
                print(f"demo: stokerd exited with status {daemon.returncode}", file=sys.stderr)
                ok = False
    print("demo: OK" if ok else "demo: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
