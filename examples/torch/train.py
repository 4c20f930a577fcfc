#!/usr/bin/env python3
"""Train a torchvision classifier with DDP, fed by stoker.

    stokerd --socket /tmp/stoker.sock &
    STOKER_SOCKET=/tmp/stoker.sock torchrun --nproc_per_node=8 examples/torch/train.py \\
        --data /data/imagenet/train --val-data /data/imagenet/val --arch resnet18 \\
        --epochs 90 --batch-size 256 --lr 0.1 --checkpoint ckpt.pt

Each rank attaches to the node's stokerd with torch.distributed's rank and
world size (stoker.torch does that by default) and receives its
DistributedSampler share of every epoch, decoded and augmented
(RandomResizedCrop + flip; validation: Resize + CenterCrop) by the daemon.
There is no DataLoader and there are no worker processes here: `--workers`
is accepted for scripts written for torchvision's reference and ignored
(the daemon's `--workers` sets the decode threads).

--resume continues exactly where the checkpoint was taken, mid-epoch
included: the model, the optimiser, the scheduler and every rank's
stoker.torch.Loader state_dict() are in it.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision

# Run from a checkout without installing: the package is in client/python.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(1, os.path.normpath(os.path.join(_HERE, "..", "..", "client", "python")))
import stoker.torch  # noqa: E402

# ImageNet's, as torchvision's reference scripts normalise.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="training set as stokerd sees it (ImageFolder or list file)")
    p.add_argument("--val-data", help="validation set (center_crop), evaluated after each epoch")
    p.add_argument("--socket", help="stokerd's socket (default: $STOKER_SOCKET, else /run/stoker/stoker.sock)")
    p.add_argument("--arch", default="resnet18", help="a torchvision.models classifier")
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("-b", "--batch-size", type=int, default=256, help="per rank")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--wd", "--weight-decay", dest="weight_decay", type=float, default=1e-4)
    p.add_argument("--lr-step", type=int, default=30, help="StepLR: divide the lr by 10 every N epochs")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--dtype", choices=("float32", "uint8"), default="float32",
                   help="float32: the daemon normalises (NCHW); uint8: channels_last, normalised here")
    p.add_argument("-j", "--workers", type=int, default=None, help="ignored: decoding runs in stokerd")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="default: cuda:LOCAL_RANK when CUDA is there, else cpu")
    p.add_argument("--checkpoint", help="save model, optimiser and loader state here after each epoch")
    p.add_argument("--save-every", type=int, default=0, help="also save every N steps (0: only at epoch ends)")
    p.add_argument("--resume", help="checkpoint to continue from (mid-epoch included)")
    p.add_argument("--max-steps", type=int, default=0, help="stop (saving a checkpoint) after N steps of this run")
    p.add_argument("--print-freq", type=int, default=10)
    p.add_argument("--step-log", help="append one JSON line per step to STEP_LOG.rankN (step, loss, sample indices)")
    return p.parse_args(argv)


def setup():
    """Process group from torchrun's environment (or a single process)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))
    return 0, 1, 0


def save(path, state):
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash while saving leaves the old checkpoint


def main(argv=None):
    args = parse_args(argv)
    rank, world, local_rank = setup()
    distributed = world > 1 or dist.is_initialized()
    if args.device:
        device = torch.device(args.device)
    elif torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)

    # rank and world_size: from the process group, by default.
    common = dict(socket=args.socket, batch_size=args.batch_size, image_size=args.image_size, seed=args.seed,
                  dtype=args.dtype)
    if args.dtype == "float32":
        common.update(mean=MEAN, std=STD)
    train = stoker.torch.Loader(args.data, transform="random_resized_crop", shuffle=True, **common)
    val = (stoker.torch.Loader(args.val_data, transform="center_crop", shuffle=False, **common)
           if args.val_data else None)
    num_classes = train.num_classes
    if rank == 0:
        print(f"stoker: {train.dataset_samples} samples, {num_classes} classes, {len(train)} batches "
              f"per epoch per rank, {world} rank(s), device {device}", flush=True)

    model = torchvision.models.get_model(args.arch, num_classes=num_classes)
    memory_format = torch.channels_last if args.dtype == "uint8" else torch.contiguous_format
    model = model.to(device, memory_format=memory_format)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                    else None)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step, gamma=0.1)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def prepare(images):
        # The batch is a read-only view, valid until the next one is taken:
        # never written to (normalising makes a new tensor), and done with
        # once the step's backward pass has run.
        x = images.to(device, non_blocking=True)
        if args.dtype == "uint8":
            x = (x.float() - mean) / std  # still channels_last
        return x

    start_epoch, step = 0, 0
    if args.resume:
        ckpt = torch.load(args.resume, map_location=device, weights_only=False)
        (model.module if distributed else model).load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if len(ckpt["loader"]) != world:
            raise SystemExit(f"{args.resume} was taken with {len(ckpt['loader'])} ranks, this run has {world}")
        train.load_state_dict(ckpt["loader"][rank])  # this rank's place in its share
        start_epoch, step = ckpt["loader"][rank]["epoch"], ckpt["step"]
        if rank == 0:
            print(f"resumed from {args.resume}: epoch {start_epoch}, batch "
                  f"{ckpt['loader'][rank]['batches_taken']}, step {step}", flush=True)

    def checkpoint():
        states = [None] * world
        if distributed:
            dist.all_gather_object(states, train.state_dict())
        else:
            states = [train.state_dict()]
        if rank == 0 and args.checkpoint:
            save(args.checkpoint, {"model": (model.module if distributed else model).state_dict(),
                                   "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                                   "loader": states, "step": step, "args": vars(args)})

    log = open(f"{args.step_log}.rank{rank}", "a") if args.step_log else None
    steps_this_run = 0
    for epoch in range(start_epoch, args.epochs):
        if not (args.resume and epoch == start_epoch):
            train.set_epoch(epoch)  # a resumed epoch goes on from its checkpoint
        model.train()
        t0 = time.monotonic()
        for batch in train:
            images, labels = batch
            x, y = prepare(images), labels.to(device, non_blocking=True)
            loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            steps_this_run += 1
            value = loss.item()
            if not math.isfinite(value):
                raise SystemExit(f"rank {rank}: loss is {value} at step {step}")
            if log:
                log.write(json.dumps({"step": step, "epoch": epoch, "loss": value,
                                      "indices": batch.indices.tolist()}) + "\n")
                log.flush()
            if rank == 0 and args.print_freq and step % args.print_freq == 0:
                print(f"epoch {epoch} step {step} loss {value:.4f}", flush=True)
            stop = args.max_steps and steps_this_run >= args.max_steps
            if stop or (args.save_every and step % args.save_every == 0):
                checkpoint()
            if stop:
                if rank == 0:
                    print(f"stopped after {steps_this_run} steps (epoch {epoch})", flush=True)
                return 0
        scheduler.step()
        checkpoint()
        if rank == 0:
            print(f"epoch {epoch} done in {time.monotonic() - t0:.1f} s", flush=True)
        if val is not None:
            evaluate(model, val, prepare, device, distributed, rank, epoch)
    return 0


def evaluate(model, loader, prepare, device, distributed, rank, epoch):
    model.eval()
    correct = torch.zeros(2, dtype=torch.float64, device=device)
    loader.set_epoch(0)
    with torch.no_grad():
        for images, labels in loader:
            pred = model(prepare(images)).argmax(1)
            correct[0] += (pred == labels.to(device)).sum()
            correct[1] += len(labels)
    if distributed:
        dist.all_reduce(correct)
    if rank == 0:
        print(f"epoch {epoch} val top1 {100 * correct[0] / correct[1]:.2f}% ({int(correct[1])} images)",
              flush=True)


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    sys.exit(rc)
