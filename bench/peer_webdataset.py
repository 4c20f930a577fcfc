#!/usr/bin/env python3
"""WebDataset peer: webdataset's own loader over the same tar shards
(shards shuffled through a buffer of 100, a sample shuffle buffer of 1000, PIL decode), torchvision
RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor (uint8), batched
by a PyTorch DataLoader with num_workers = cores, persistent workers, batch
256, as WebDataset's documentation sets it up.

    peer_webdataset.py --dataset 'DIR/train-{000000..000NNN}.tar' --cores N --samples S ...

The shards are split over the workers (webdataset.split_by_worker), so every
sample comes once an epoch when there are at least as many shards as
workers; the count is checked.
"""

import sys

from _common import epoch_reader, log_to_stderr, measure, peer_arguments, result, unavailable


def main():
    p = peer_arguments()
    p.add_argument("--cores", type=int, required=True)
    p.add_argument("--samples", type=int, required=True, help="samples in the shards")
    a = p.parse_args()
    log = log_to_stderr("webdataset")

    try:
        import torch
        import torchvision
        import webdataset as wds
        from torchvision import transforms as T
    except ImportError as e:
        unavailable("not installed", f"{e} (bench/install-peers.sh)")

    tf = T.Compose([T.RandomResizedCrop(a.image_size), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = (wds.WebDataset(a.dataset, shardshuffle=100, nodesplitter=wds.single_node_only,
                         workersplitter=wds.split_by_worker)
          .shuffle(1000).decode("pil").to_tuple("jpg;jpeg;png", "cls").map_tuple(tf, int)
          .batched(a.batch_size, partial=True))
    torch.manual_seed(0)
    loader = wds.WebLoader(ds, batch_size=None, num_workers=a.cores, persistent_workers=True)
    seen = {}
    r = measure(epoch_reader(loader, a.samples, seen), a.epochs, a.min_seconds, log)
    r.update(batch_size=a.batch_size, num_workers=a.cores, output=seen,
             versions={"webdataset": getattr(wds, "__version__", "?"), "torch": torch.__version__,
                       "torchvision": torchvision.__version__})
    result(**r)


if __name__ == "__main__":
    sys.exit(main())
