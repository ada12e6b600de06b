"""A rank that trains nothing and never imports torch, for the tests whose claim is the
launcher's (how it reports a failed rank, how it stops its ranks on a signal): what the
rank runs does not change what the launcher does, and this one costs no `import torch`.

    python stand_in_rank.py [--local-rank=R]   (under torchrun, torch.distributed.launch,
                                                run_8p.sh)

It forks one child that only waits, in the rank's process group as a DataLoader worker
is (the launcher stops it with the rank), and that ends within a second of the rank's
end, as a DataLoader worker's watchdog ends the worker of a rank that was killed. Then it
prints "up R" (R: LOCAL_RANK) and sleeps. With
FAULT_KIND=kill or raise (tests/fault_injection first on PYTHONPATH, so that Python loaded
its sitecustomize), local rank FAULT_RANK waits until every other rank of the node is up
(each touches FAULT_STAMP.up<R>), then stamps FAULT_STAMP and SIGKILLs itself or raises
RuntimeError("injected fault"), as the fault injector does in a training rank.
"""

import os
import sys
import time


def main():
    rank = int(os.environ["LOCAL_RANK"])
    parent = os.getpid()
    if os.fork() == 0:  # the stand-in loader worker: it ends when its rank is gone
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)
    print("up", rank, flush=True)
    kind, stamp = os.environ.get("FAULT_KIND"), os.environ.get("FAULT_STAMP")
    if stamp:
        open(f"{stamp}.up{rank}", "w").close()
    if kind in ("kill", "raise") and rank == int(os.environ["FAULT_RANK"]):
        others = [r for r in range(int(os.environ["LOCAL_WORLD_SIZE"])) if r != rank]
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f"{stamp}.up{r}") for r in others):
            if time.monotonic() > deadline:
                sys.exit("stand-in rank: the other ranks never came up")
            time.sleep(0.05)
        sitecustomize = sys.modules["sitecustomize"]  # tests/fault_injection/sitecustomize.py
        sitecustomize._fault_now(rank, int(os.environ["FAULT_AT_STEP"]))
    time.sleep(300)


if __name__ == "__main__":
    main()
