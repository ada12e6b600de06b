"""Imported by the forkserver of `devicekit.worker_context()` as it starts, before it forks
any DataLoader worker: the server then dies with the rank that started it, however the rank
dies. Its children, the workers, see their parent gone and leave within seconds (torch's
worker loop checks). Without it a SIGKILLed rank left the server and its workers running
for good: every worker holds a copy of the pipe end whose closing tells the server that
the rank is gone. Import it nowhere else: the importing process dies with its parent."""

from devicekit.processes import die_with_parent

die_with_parent()
