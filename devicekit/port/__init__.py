"""`devicekit port`: rewrite CUDA-only (or Ascend-only) PyTorch scripts onto devicekit's
API, so that they run on NVIDIA GPUs, Ascend NPUs and CPUs.

Built on libcst's concrete syntax tree, so comments, formatting and all untouched code
stay byte-for-byte the same. `port_source(bytes)` ports one file's source in memory;
`cli.main(argv)` is the command. Nothing here imports torch.

- names.py: what maps onto devicekit, what is reported for a manual change, what is kept
- facts.py: a first pass (which names and parameters hold ranks, which device counts size
  an mp.spawn)
- branches.py: what a branch's test asks ("is this an accelerator?")
- rule.py: what a rule module holds (the Rule Protocol) and what it may ask of the pass
  (the Port Protocol); registry.py: the rule modules, in the order they are tried
- _plugins/: the rules, one module per idiom (`cuda_method.py`: rule `cuda-method`);
  keyword_arguments.py: the keyword arguments ported in any call, one row each
- transformer.py: the pass that offers each node to the rules and records what they did
- imports.py: `import devicekit` added, orphaned imports and torch_npu's side-effect
  imports removed
- source_bytes.py: a file's bytes read as Python and written back (encoding, line ends,
  the tail); engine.py: parse, port, report one file; report.py: JSON and human summaries
"""

from devicekit.port.engine import port_source
from devicekit.port.source_bytes import ParseFailure

__all__ = ["ParseFailure", "port_source"]
