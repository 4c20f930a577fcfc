#!/usr/bin/env python3
"""PyTorch DataLoader peer: torchvision ImageFolder + RandomResizedCrop(224)
+ RandomHorizontalFlip, uint8 (PILToTensor) or float32 (ToTensor +
ImageNet Normalize), num_workers = cores, persistent workers, batch 256.

    peer_torch.py --dataset DIR --cores N [--dtype uint8|float32] ...
"""

import sys

from _common import epoch_reader, log_to_stderr, measure, peer_arguments, result, unavailable

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def main():
    p = peer_arguments()
    p.add_argument("--cores", type=int, required=True)
    p.add_argument("--dtype", default="uint8", choices=["uint8", "float32"])
    a = p.parse_args()
    log = log_to_stderr(f"torch {a.dtype}")

    try:
        import torch
        import torchvision
        from torchvision import datasets, transforms as T
    except ImportError as e:
        unavailable("not installed", f"{e} (bench/install-peers.sh)")

    tail = ([T.PILToTensor()] if a.dtype == "uint8"
            else [T.ToTensor(), T.Normalize(MEAN, STD)])
    tf = T.Compose([T.RandomResizedCrop(a.image_size), T.RandomHorizontalFlip()] + tail)
    ds = datasets.ImageFolder(a.dataset, transform=tf)
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.cores,
                                         persistent_workers=True, drop_last=False)
    seen = {}
    r = measure(epoch_reader(loader, len(ds), seen), a.epochs, a.min_seconds, log)
    r.update(batch_size=a.batch_size, num_workers=a.cores, output=seen,
             versions={"torch": torch.__version__, "torchvision": torchvision.__version__})
    result(**r)


if __name__ == "__main__":
    sys.exit(main())
