"""Write checkpoints with devicekit.checkpoint_files.save_atomic in a loop until killed.

    python checkpoint_writer.py TARGET PROGRESS_LOG [MEGABYTES [WRITERS]]

Each write is a dict {"epoch": e, "weights": float32 tensor of MEGABYTES MB, every element
e, "last": tensor([e])}: a file that loads but mixes two writes is caught by comparing
them. A writer starts at the epoch after the one in TARGET, when it exists (as a resumed
run would), and logs "ready EPOCH PID", "start E" and "done E" (each with time.time()) to
PROGRESS_LOG through an unbuffered O_APPEND descriptor, so a SIGKILL loses none of them.

"{rank}" in TARGET and PROGRESS_LOG stands for the RANK variable (0 when unset), so that
the ranks of a launcher each write their own file.

Without WRITERS this process is the writer. With WRITERS it imports torch once and then
forks that many writers one after another, each as soon as the previous one has died, so
that a test can SIGKILL many writers without paying for the import each time.
"""

import os
import sys
import time

import torch

from devicekit import checkpoint_files


def write_forever(target, log, megabytes):
    def say(*words):
        os.write(log, (" ".join(map(str, words + (repr(time.time()),))) + "\n").encode())

    epoch = int(checkpoint_files.load(target)["epoch"]) if os.path.exists(target) else 0
    numel = int(megabytes) * (1 << 20) // 4
    say("ready", epoch, os.getpid())
    while True:
        epoch += 1
        state = {
            "epoch": epoch,
            "weights": torch.full((numel,), float(epoch)),
            "last": torch.tensor([epoch]),
        }
        say("start", epoch)
        checkpoint_files.save_atomic(state, target)
        say("done", epoch)


def main(target, progress, megabytes=20, writers=None):
    rank = os.environ.get("RANK", "0")
    target, progress = target.format(rank=rank), progress.format(rank=rank)
    log = os.open(progress, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if writers is None:
        write_forever(target, log, megabytes)
    for _ in range(int(writers)):
        pid = os.fork()
        if pid == 0:
            try:
                write_forever(target, log, megabytes)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        os.write(log, f"died {pid} {status} {time.time()!r}\n".encode())


if __name__ == "__main__":
    main(*sys.argv[1:])
