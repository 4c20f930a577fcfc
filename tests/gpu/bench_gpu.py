"""GPU benchmark (tests/gpu/run.sh): a PyTorch training-step loop, torchvision
ResNet-50, channels_last, AMP (float16), batch 256, fed by

  synthetic       the same batch again and again, already on the GPU (the ceiling)
  stoker-device   stoker device="cuda:0", dtype float16: the daemon decodes, the
                  GPU converts; zero-copy CUDA tensors
  stoker-pinned   stoker host batches, dtype float16, pin_memory=True, copied
                  with non_blocking=True on a side stream
  dataloader      torchvision ImageFolder + DataLoader(num_workers=cores,
                  pin_memory=True), RandomResizedCrop + flip + ToTensor + Normalize
  dali            NVIDIA DALI, "mixed" (GPU) decoder, where it is installed

For each: images/s over the timed steps, and the GPU's busy share (nvidia-smi's
utilization.gpu, the share of time a kernel ran, sampled every 100 ms). One
JSON object per feeder on stdout and in OUT/train.json. A measurement, not a
test.

  python3 bench_gpu.py --socket S --data DIR --out DIR [--steps 30] [--warmup 8]
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import torch
import torch.nn as nn
import torchvision

import stoker

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


class BusySampler:
    """nvidia-smi utilization.gpu every 100 ms while active."""

    def __init__(self):
        self.samples, self.proc, self.thread = [], None, None

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", "0",
                 "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()

    def share(self):
        # The first samples can predate the timed steps' start.
        s = self.samples[2:] or self.samples
        return round(sum(s) / len(s) / 100.0, 3) if s else None


def train_steps(feed, steps, warmup, batch):
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    try:
        for _ in range(warmup):
            step(*next(feed))
        torch.cuda.synchronize()
        with BusySampler() as busy:
            t0 = time.perf_counter()
            for _ in range(steps):
                step(*next(feed))
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
    finally:
        feed.close()  # the feeder's loader and workers go now, not during the next row
    return {"images_per_second": round(steps * batch / dt, 1), "gpu_busy": busy.share(), "seconds": round(dt, 2)}


def synthetic(batch):
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    while True:
        yield x, y


def stoker_epochs(loader):
    epoch = 0
    while True:
        for b in loader:
            yield b
        epoch += 1
        loader.set_epoch(epoch)


def stoker_device(a):
    cur = torch.cuda.current_stream()
    ld = stoker.Loader(a.data, socket=a.socket, batch_size=a.batch, image_size=224, dtype="float16",
                       device="cuda:0", stream=cur.cuda_stream, drop_last=True, prefetch=4, seed=1)
    try:
        for b in stoker_epochs(ld):
            x = torch.as_tensor(b.images, device="cuda:0").contiguous(memory_format=torch.channels_last)
            y = torch.from_numpy(b.labels.copy()).cuda(non_blocking=True)
            yield x, y
    finally:
        ld.close()


def stoker_pinned(a):
    torch.cuda.synchronize()  # pin_memory pins in the current context: torch's, made current here
    ld = stoker.Loader(a.data, socket=a.socket, batch_size=a.batch, image_size=224, dtype="float16",
                       pin_memory="required", drop_last=True, prefetch=4, seed=1)
    copy = torch.cuda.Stream()
    try:
        for b in stoker_epochs(ld):
            with torch.cuda.stream(copy):
                x = torch.from_numpy(b.images).cuda(non_blocking=True)
                y = torch.from_numpy(b.labels.copy()).cuda(non_blocking=True)
            torch.cuda.current_stream().wait_stream(copy)
            x.record_stream(torch.cuda.current_stream())
            copy.synchronize()  # the copy out of the ring is done: the slot may go back
            yield x.contiguous(memory_format=torch.channels_last), y
    finally:
        ld.close()


def dataloader(a):
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = torchvision.datasets.ImageFolder(a.data, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.cores, pin_memory=True,
                                     drop_last=True, persistent_workers=True, prefetch_factor=4)
    try:
        while True:
            for x, y in dl:
                yield (x.cuda(non_blocking=True).to(memory_format=torch.channels_last),
                       y.cuda(non_blocking=True))
    finally:
        dl._iterator = None  # shuts the persistent workers down
        del dl


def dali(a):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    @pipeline_def(batch_size=a.batch, num_threads=a.cores, device_id=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.data, random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
                                          mirror=fn.random.coin_flip())
        return images, labels.gpu()

    p = pipe()
    p.build()
    it = DALIGenericIterator([p], ["x", "y"], reader_name="r", auto_reset=True)
    while True:
        for d in it:
            yield (d[0]["x"].contiguous(memory_format=torch.channels_last),
                   d[0]["y"].squeeze(-1).long())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--only", default="synthetic,stoker-device,stoker-pinned,dataloader,dali")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    feeders = {"synthetic": lambda: synthetic(a.batch), "stoker-device": lambda: stoker_device(a),
               "stoker-pinned": lambda: stoker_pinned(a), "dataloader": lambda: dataloader(a),
               "dali": lambda: dali(a)}
    results = []
    for name in a.only.split(","):
        row = {"feeder": name, "gpu": torch.cuda.get_device_name(0), "batch": a.batch, "cores": a.cores}
        try:
            row.update(train_steps(feeders[name](), a.steps, a.warmup, a.batch))
        except ImportError as e:
            row["skipped"] = f"not installed: {e}"
        except Exception as e:  # noqa: BLE001 - one feeder failing must not hide the others
            row["error"] = f"{type(e).__name__}: {e}"
        results.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    top = next((r for r in results if r["feeder"] == "synthetic" and "images_per_second" in r), None)
    for r in results:
        if top and "images_per_second" in r:
            r["of_synthetic"] = round(r["images_per_second"] / top["images_per_second"], 3)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "train.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\n%-14s %12s %9s %13s" % ("feeder", "images/s", "GPU busy", "of synthetic"))
    for r in results:
        val = r.get("images_per_second") or (r.get("skipped") or r.get("error", ""))[:40]
        print("%-14s %12s %9s %13s" % (r["feeder"], val, r.get("gpu_busy", "-"), r.get("of_synthetic", "-")))

if __name__ == "__main__":
    sys.exit(main())
