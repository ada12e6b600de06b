"""Who this process is in the run, whatever started it: the launch API in one place.

`resolve_launch` asks the launch environments (devicekit.environments, one module per
launcher, tried in a stated order) and returns the LaunchContext; for
`--multiprocessing-distributed` it answers for the parent, and `for_spawned_rank` gives
each spawned child its own context.
"""

from devicekit.environments import launcher_of, resolve_launch
from devicekit.environments.context import LaunchContext
from devicekit.environments.distributed_launch import pop_local_rank
from devicekit.environments.options import LaunchOptions
from devicekit.environments.reading import REFERENCE_DIST_URL, find_free_port, parse_dist_url

# trainer/options.py checks --dist-url with it before any rank starts.
_parse_dist_url = parse_dist_url

__all__ = ["LaunchContext", "LaunchOptions", "REFERENCE_DIST_URL", "find_free_port",
           "launcher_of", "pop_local_rank", "resolve_launch"]
