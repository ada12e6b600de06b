"""`devicekit port`: rewrite CUDA-only (or Ascend-only) PyTorch scripts onto devicekit's
API, so that they run on NVIDIA GPUs, Ascend NPUs and CPUs.

Built on libcst's concrete syntax tree, so comments, formatting and all untouched code
stay byte-for-byte the same. `port_source(bytes)` ports one file's source in memory;
`cli.main(argv)` is the command. Nothing here imports torch.

- names.py: what maps onto devicekit, what is reported for a manual change, what is kept
- facts.py: a first pass (which names and parameters hold ranks, which device counts size
  an mp.spawn)
- branches.py: what a branch's test asks ("is this an accelerator?")
- transformer.py: the pass that offers each node to the rewrites and records what they did
- _plugins/: the rewrites, one module per idiom (`cuda_method.py`: rule `cuda-method`),
  and their registry
- imports.py: `import devicekit` added, orphaned imports and torch_npu's side-effect
  imports removed
- engine.py: parse, port, report one file; report.py: JSON and human summaries
"""

from devicekit.port.engine import ParseFailure, port_source

__all__ = ["ParseFailure", "port_source"]
