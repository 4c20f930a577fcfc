"""A separate client process for the integration tests.

argv[1] is JSON: {"socket", "dataset", "mode", "opts"}.
  mode "epoch": read one epoch, print a JSON summary on stdout.
  mode "hold":  read one batch, print "READY <pid>", then sleep (to be killed).
  mode "checkpoint": read a["batches"] batches, printing after each a JSON line
                 {"indices", "hashes", "state"} (as a trainer checkpoints),
                 then "READY <pid>", then sleep (to be killed).
"""

import json
import os
import sys
import time

import stoker
from stoker_testutil import digest, read_epoch

a = json.loads(sys.argv[1])
loader = stoker.Loader(a["dataset"], socket=a["socket"], **a["opts"])
if a["mode"] == "hold":
    it = iter(loader)
    next(it)
    print(f"READY {os.getpid()}", flush=True)
    time.sleep(600)
    sys.exit(1)
if a["mode"] == "checkpoint":
    it = iter(loader)
    for _ in range(a["batches"]):
        b = next(it)
        print(json.dumps({"indices": [int(i) for i in b.indices], "hashes": [digest(im) for im in b.images],
                          "state": loader.state_dict()}), flush=True)
    print(f"READY {os.getpid()}", flush=True)
    time.sleep(600)
    sys.exit(1)
r = read_epoch(loader)
r.update(pid=os.getpid(), samples_per_epoch=loader.samples_per_epoch, batches=len(loader),
         dataset_samples=loader.dataset_samples, shape=list(r["shape"] or []))
loader.close()
print(json.dumps(r))
