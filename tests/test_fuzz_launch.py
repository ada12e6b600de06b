"""Property-based tests of every launcher variable and launch option devicekit reads: for
any value, resolving who this process is either works (ranks below their sizes, a TCP
port) or is refused with one UsageError line naming the variable or flag. Covered here:
the launchers' variables (torchrun, torch.distributed.launch, a shell loop, DeepSpeed, a
PyTorchJob, Ascend's RANK_ID/RANK_SIZE and rank table, Open MPI, MPICH, Slurm), Slurm's
node lists and tasks-per-node layouts, the rank table file, the init method URL and the
--local-rank argument.

Every example passes its environment explicitly (`environ=`): conftest's fixtures reset
os.environ per test, not per example."""

import itertools
import json
import os
import string

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from devicekit import kinds
from devicekit.environments import (
    ALL_VARIABLES,
    ENVIRONMENTS,
    LaunchOptions,
    detect,
    launcher_of,
    pop_local_rank,
    resolve_launch,
)
from devicekit.environments.hostlist import first_host, hosts
from devicekit.environments.rank_table import read_rank_table
from devicekit.environments.slurm import tasks_per_node
from devicekit.errors import UsageError
from invariant import ENV_TEXT, NUMBER_LIKE, assert_usage_line

CPU = kinds.get("cpu")


class FakeAccelerator:
    """An accelerator kind with a fixed number of visible devices (bounds device indices)."""

    is_accelerator = True
    name = "npu"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"

    def __init__(self, count: int):
        self.count = count

    def device_count(self) -> int:
        return self.count

    def default_ranks_per_node(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"FakeAccelerator({self.count})"


KINDS = st.one_of(st.just(CPU), st.just(None), st.integers(1, 8).map(FakeAccelerator))

# Every option a script or a trainer passes, as the command line names it and as Python does.
OPTION_FIELDS = (
    "local_rank",
    "gpu",
    "rank",
    "world_size",
    "dist_url",
    "addr",
    "port",
    "multiprocessing_distributed",
    "nproc_per_node",
    "device_list",
)


def option_names(options: LaunchOptions) -> list[str]:
    """How an error may call the options that were given."""
    return [
        options.name(field)
        for field in OPTION_FIELDS
        if getattr(options, field) is not None and getattr(options, field) is not False
    ]


def check_context(ctx, kind) -> None:
    """What any LaunchContext promises, whatever produced it."""
    assert 0 <= ctx.rank < ctx.world_size, ctx
    if ctx.mode == "cli":
        # Processes started by hand: the local rank is the device the process was given
        # (--gpu, local_rank=), which ported scripts use as a device index; the one node
        # of world_size ranks is a guess, so a device beyond it is no contradiction.
        assert ctx.local_rank == ctx.device_index, ctx
    else:
        assert 0 <= ctx.local_rank < ctx.local_world_size, ctx
    assert 0 <= ctx.node_rank < ctx.nnodes, ctx
    assert 1 <= ctx.master_port <= 65535, ctx
    assert ctx.master_addr and ctx.master_addr.isprintable() and " " not in ctx.master_addr, ctx
    assert ctx.device_index >= 0, ctx
    if kind is not None and kind.is_accelerator:
        assert ctx.device_index < kind.device_count(), ctx


def _event(text: str) -> None:
    """Count `text` in --hypothesis-show-statistics (outside a property: nothing)."""
    if currently_in_test_context():
        event(text)


def resolve_or_refuse(options: LaunchOptions | dict, environ: dict[str, str], kind):
    """The context, checked; or None after checking the refusal names an input that was
    given (or one the detected environment reads, when that one is missing). `options` may
    be LaunchOptions' arguments, which it checks when it is made."""
    if isinstance(options, dict):
        try:
            options = LaunchOptions(**options)
        except UsageError as error:
            names = LaunchOptions(cli=options.get("cli", False))
            assert_usage_line(
                error, [names.name(field) for field in options if field in OPTION_FIELDS]
            )
            _event("options refused")
            return None
    env = detect(options, environ)
    try:
        ctx = resolve_launch(options, environ, kind)
    except UsageError as error:
        assert_usage_line(error, set(environ) | set(env.VARIABLES) | set(option_names(options)))
        _event(f"{env.NAME}: refused")
        return None
    _event(f"{env.NAME}: resolved")
    assert ctx.mode == env.NAME
    check_context(ctx, kind)
    return ctx


# -- consistent launcher environments, one value perturbed ------------------------------------

HOSTS = st.one_of(
    st.sampled_from(["10.0.0.1", "node01", "localhost", "::1", "gpu-a07.cluster"]),
    st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
)
PORTS = st.integers(1, 65535)


@st.composite
def shapes(draw) -> tuple[int, int, int, int]:
    """(nodes, processes per node, this node, this local rank)."""
    nnodes, nproc = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    return nnodes, nproc, draw(st.integers(0, nnodes - 1)), draw(st.integers(0, nproc - 1))


LAUNCHERS = (
    "torchrun",
    "launch",
    "env",
    "deepspeed",
    "pytorchjob",
    "ascend",
    "mpi",
    "mpich",
    "slurm",
    "spawn",
    "cli",
    "single",
)


@st.composite
def launcher_runs(draw, launcher: str):
    """(environ, options, expected) as `launcher` (or a script's own arguments) sets them up
    for one process of a consistent run; `expected` is (mode, rank, local_rank, world_size,
    local_world_size, node_rank, nnodes), or None where the reading is not the point."""
    nnodes, nproc, node, local = draw(shapes())
    rank, world = node * nproc + local, nnodes * nproc
    master = {"MASTER_ADDR": draw(HOSTS), "MASTER_PORT": str(draw(PORTS))}
    ranks = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local)}
    cli = draw(st.booleans())
    options: dict = {}
    if launcher in ("torchrun", "launch", "env"):
        environ = dict(ranks, LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK=str(node), **master)
        if launcher == "torchrun":
            environ["TORCHELASTIC_RUN_ID"] = draw(st.sampled_from(["none", "job7", ""]))
        if launcher == "launch":
            options["local_rank"] = local
            if draw(st.booleans()):  # torch 1.x exported no LOCAL_RANK
                del environ["LOCAL_RANK"]
        expected = (launcher, rank, local, world, nproc, node, nnodes)
    elif launcher == "deepspeed":
        environ = dict(
            ranks, LOCAL_SIZE=str(nproc), CROSS_RANK=str(node), CROSS_SIZE=str(nnodes), **master
        )
        if draw(st.booleans()):
            options["local_rank"] = local  # --local_rank=N, unless --no_local_rank
        expected = (launcher, rank, local, world, nproc, node, nnodes)
    elif launcher == "pytorchjob":
        environ = dict(
            RANK=str(node), WORLD_SIZE=str(nnodes), KUBERNETES_SERVICE_HOST="10.96.0.1", **master
        )
        expected = (launcher, node, 0, nnodes, 1, node, nnodes)
    elif launcher == "ascend":
        environ = {"RANK_ID": str(local), "RANK_SIZE": str(nproc)}
        if nnodes > 1 or draw(st.booleans()):
            environ.update(master)
        options.update(rank=node, world_size=nnodes, gpu=draw(st.sampled_from([None, local])))
        expected = (launcher, rank, local, world, nproc, node, nnodes)
    elif launcher in ("mpi", "mpich"):
        names = (
            (
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            )
            if launcher == "mpi"
            else ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
        )
        environ = dict(zip(names, map(str, (rank, world, local, nproc)), strict=False))
        if nnodes > 1 or draw(st.booleans()):
            environ["MASTER_ADDR"] = master["MASTER_ADDR"]
        expected = (launcher, rank, local, world, nproc, node, nnodes) if world > 1 else None
    elif launcher == "slurm":
        layout = draw(
            st.sampled_from([f"{nproc}(x{nnodes})", str(nproc), ",".join([str(nproc)] * nnodes)])
        )
        environ = {
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "SLURM_LOCALID": str(local),
            "SLURM_NODEID": str(node),
            draw(
                st.sampled_from(
                    ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"]
                )
            ): layout,
            "SLURM_JOB_NODELIST": f"node[1-{nnodes}]",
            "SLURM_JOB_ID": str(draw(st.integers(1, 10**8))),
            "SLURM_STEP_ID": "0",
        }
        expected = (launcher, rank, local, world, nproc, node, nnodes) if world > 1 else None
    elif launcher == "spawn":
        environ = master if nnodes > 1 else {}
        options.update(
            multiprocessing_distributed=True, world_size=nnodes, rank=node, nproc_per_node=nproc
        )
        expected = (launcher, node * nproc, 0, world, nproc, node, nnodes)
    elif launcher == "cli":
        environ = draw(st.sampled_from([{}, master]))
        options.update(rank=rank, world_size=world)
        expected = None
    else:
        environ, expected = {}, ("single", 0, 0, 1, 1, 0, 1)
    return environ, dict(options, cli=cli), expected


def _option_values(field: str):
    if field in ("dist_url", "addr"):
        return st.one_of(ENV_TEXT, HOSTS.map(lambda h: f"tcp://{h}:{29500}"))
    if field == "multiprocessing_distributed":
        return st.booleans()
    if field == "device_list":
        return st.one_of(
            st.none(), st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True).map(tuple)
        )
    return st.one_of(st.none(), st.integers(-2, 20), st.integers(), NUMBER_LIKE)


@st.composite
def perturbed_runs(draw, launcher: str):
    """A consistent run of `launcher` with (usually) one thing changed: a variable set to
    any text or number, a variable removed, or one option changed."""
    environ, options, expected = draw(launcher_runs(launcher))
    environ = dict(environ)
    change = draw(st.sampled_from(["none", "set", "set", "remove", "option"]))
    if change == "set":
        name = draw(
            st.one_of(
                st.sampled_from(sorted(environ)) if environ else st.nothing(),
                st.sampled_from(ALL_VARIABLES),
            )
        )
        environ[name] = draw(st.one_of(ENV_TEXT, st.integers(-2, 40).map(str)))
    elif change == "remove" and environ:
        del environ[draw(st.sampled_from(sorted(environ)))]
    elif change == "option":
        field = draw(st.sampled_from(OPTION_FIELDS))
        options = dict(options, **{field: draw(_option_values(field))})
    else:
        return environ, options, expected
    return environ, options, None


@pytest.mark.parametrize("launcher", LAUNCHERS)
@given(data=st.data(), kind=KINDS)
def test_a_launcher_environment_resolves_or_names_the_variable(launcher, data, kind):
    environ, options, expected = data.draw(perturbed_runs(launcher), label="run")
    ctx = resolve_or_refuse(options, environ, kind)
    if expected is not None and (kind is None or not kind.is_accelerator):
        assert (
            ctx is not None
            and (
                ctx.mode,
                ctx.rank,
                ctx.local_rank,
                ctx.world_size,
                ctx.local_world_size,
                ctx.node_rank,
                ctx.nnodes,
            )
            == expected
        )


# What the properties above found, minimised.
SHELL_LOOP = {
    "RANK": "0",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "n1",
    "MASTER_PORT": "29500",
}


def refusal(options: LaunchOptions, environ: dict[str, str]) -> str:
    """The one line that refuses `options` in `environ`."""
    with pytest.raises(UsageError) as raised:
        resolve_launch(options, environ, CPU)
    return assert_usage_line(raised.value, list(environ) + option_names(options))


def test_a_group_rank_beyond_the_nodes_is_named():
    environ = dict(
        SHELL_LOOP, RANK="11", WORLD_SIZE="16", LOCAL_RANK="3", LOCAL_WORLD_SIZE="8", GROUP_RANK="5"
    )
    assert refusal(LaunchOptions(), environ).startswith(
        "GROUP_RANK=5 is not below the 2 node(s) of WORLD_SIZE=16 / LOCAL_WORLD_SIZE=8"
    )
    assert refusal(LaunchOptions(), dict(SHELL_LOOP, NODE_RANK="1")).startswith(
        "NODE_RANK=1 is not below the 1 node(s)"
    )


@pytest.mark.parametrize(
    "environ",
    [
        # Found by the long profile: the message named gpu=1, which was not given.
        {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "1",
        },
        {"RANK_ID": "0", "RANK_SIZE": "1"},
    ],
)
def test_a_device_list_entry_beyond_the_visible_devices_names_the_list(environ):
    with pytest.raises(UsageError) as raised:
        resolve_launch(LaunchOptions(device_list=(1,)), environ, FakeAccelerator(1))
    assert str(raised.value).startswith("device_list=1 but only 1 npu device(s) are visible")


@pytest.mark.parametrize("addr", [" 0 ", "a b", "n1\nn2", "10.0.0.1 172.17.0.1"])
def test_a_master_address_with_a_blank_is_named(addr):
    assert refusal(LaunchOptions(), dict(SHELL_LOOP, MASTER_ADDR=addr)).startswith(
        f"MASTER_ADDR={addr!r} is not a host name or IP address: set it to the address of node 0"
    )
    assert refusal(LaunchOptions(rank=1, world_size=2, dist_url=f"tcp://{addr}:80"), {}).startswith(
        f"init_method host={addr!r} is not a host name"
    )
    assert refusal(LaunchOptions(rank=1, world_size=2, addr=addr, cli=True), {}).startswith(
        f"--addr={addr!r} is not a host name"
    )


def test_a_count_in_other_digits_does_not_make_a_launcher():
    # "²" passes str.isdigit() but not int(): detection raised ValueError.
    assert launcher_of({"OMPI_COMM_WORLD_SIZE": "²"}) is None
    assert launcher_of({"SLURM_NTASKS": "²", "SLURM_PROCID": "0"}) is None


def test_a_local_rank_argument_beyond_the_node_names_the_argument():
    environ = {name: SHELL_LOOP[name] for name in SHELL_LOOP if name != "LOCAL_RANK"}
    assert refusal(LaunchOptions(local_rank=3, cli=True), environ).startswith(
        "--local-rank=3 is not below LOCAL_WORLD_SIZE=2"
    )


def test_ranks_started_by_hand_keep_the_device_they_were_given_as_local_rank():
    ctx = resolve_launch(LaunchOptions(rank=0, world_size=2, gpu=3), {}, CPU)
    assert (ctx.mode, ctx.rank, ctx.local_rank, ctx.device_index) == ("cli", 0, 3, 3)


def test_options_given_as_text_are_read_as_numbers():
    environ = {name: SHELL_LOOP[name] for name in SHELL_LOOP if name != "LOCAL_RANK"}
    # Was TypeError: '>=' not supported between instances of 'str' and 'int'.
    ctx = resolve_launch(LaunchOptions(local_rank=" 1"), environ, CPU)
    assert (ctx.mode, ctx.local_rank) == ("launch", 1)
    ctx = resolve_launch(LaunchOptions(rank="1", world_size="2", port="1234"), {}, CPU)
    assert (ctx.rank, ctx.world_size, ctx.master_port) == (1, 2, 1234)


@pytest.mark.parametrize(
    "options, says",
    [
        (dict(rank="x"), "rank='x' is not an integer"),
        (dict(rank="1\n2", cli=True), "--rank '1\\n2' is not an integer"),
        (dict(gpu=1.5), "gpu=1.5 is not an integer"),
        (dict(world_size=True), "world_size=True is not an integer"),
        (dict(device_list=[0, 0]), "device_list=[0, 0] must list distinct device ids"),
        (dict(device_list="0,-1", cli=True), "--device-list 0,-1 must list distinct device ids"),
    ],
)
def test_options_that_are_not_integers_are_named(options, says):
    with pytest.raises(UsageError) as raised:
        LaunchOptions(**options)
    assert assert_usage_line(raised.value, [says]).startswith(says)


@given(
    st.sampled_from(["local_rank", "gpu", "rank", "world_size"]),
    st.integers(max_value=-2) | st.integers(max_value=-2).map(str),
    st.booleans(),
)
def test_a_negative_rank_index_or_count_other_than_minus_one_is_named(field, value, cli):
    """-1 is the argparse default for "not given"; -2 and below are a mistake."""
    with pytest.raises(UsageError) as raised:
        LaunchOptions(cli=cli, **{field: value})
    name = LaunchOptions(cli=cli).name(field)
    line = assert_usage_line(raised.value, [name])
    assert line.startswith(f"{name}{' ' if cli else '='}") and "or -1 for not given" in line


# -- any subset of the variables, any values ---------------------------------------------------

VALUES = st.one_of(ENV_TEXT, st.integers(-2, 40).map(str))


@st.composite
def options_anyhow(draw) -> dict:
    """LaunchOptions' arguments as any caller could give them (mostly none)."""
    given_fields = draw(st.sets(st.sampled_from(OPTION_FIELDS), max_size=3))
    return dict(
        cli=draw(st.booleans()), **{field: draw(_option_values(field)) for field in given_fields}
    )


@given(
    st.dictionaries(st.sampled_from(ALL_VARIABLES), VALUES, max_size=12), options_anyhow(), KINDS
)
@example({"SLURM_NTASKS": "²", "SLURM_PROCID": "0"}, {}, CPU)
@example(
    {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "0",
        "SLURM_TASKS_PER_NODE": "1(x99999999999999)",
    },
    {},
    CPU,
)
def test_any_launcher_variables_resolve_or_name_one(environ, options, kind):
    assert launcher_of(environ) in {env.NAME for env in ENVIRONMENTS} | {None}
    resolve_or_refuse(options, environ, kind)


# -- Slurm: node lists and tasks-per-node layouts ----------------------------------------------

NAME_CHARS = string.ascii_letters + string.digits + ".-_"


@st.composite
def bracket_groups(draw) -> tuple[str, list[str]]:
    """`[01-03,7]` and the numbers it stands for, zero padding kept."""
    items, numbers = [], []
    for _ in range(draw(st.integers(1, 3))):
        low = draw(st.integers(0, 120))
        width = draw(st.integers(len(str(low)), len(str(low)) + 2))
        high = draw(st.one_of(st.none(), st.integers(low, low + 4)))
        if high is None:
            items.append(f"{low:0{width}d}")
            numbers.append(f"{low:0{width}d}")
        else:
            items.append(f"{low:0{width}d}-{high:0{width}d}")
            numbers += [f"{n:0{width}d}" for n in range(low, high + 1)]
    return "[" + ",".join(items) + "]", numbers


@st.composite
def node_lists(draw) -> tuple[str, list[str]]:
    """A Slurm node list such as `node[01-04,7],gpu-[1-2]` and the hosts it names."""
    entries, expected = [], []
    for _ in range(draw(st.integers(1, 3))):
        text, choices = "", []
        for place in range(draw(st.integers(1, 3))):
            literal = draw(st.text(NAME_CHARS, min_size=0 if place else 1, max_size=6))
            text += literal
            choices.append([literal])
            if draw(st.booleans()):
                group, numbers = draw(bracket_groups())
                text += group
                choices.append(numbers)
        entries.append(text)
        expected += ["".join(parts) for parts in itertools.product(*choices)]
    return ",".join(entries), expected


@given(node_lists())
@example(
    ("node[01-04,7],gpu-[1-2]", ["node01", "node02", "node03", "node04", "node7", "gpu-1", "gpu-2"])
)
@example(("rack[1-2]-n[09-10]", ["rack1-n09", "rack1-n10", "rack2-n09", "rack2-n10"]))
@example(("n[9-10]", ["n9", "n10"]))
def test_a_node_list_expands_to_its_hosts(node_list):
    text, expected = node_list
    assert list(hosts("SLURM_JOB_NODELIST", text)) == expected
    assert first_host("SLURM_JOB_NODELIST", text) == expected[0]


NODE_LIST_TEXT = st.one_of(
    ENV_TEXT,
    st.text("node[]-,0123 \n9x(", max_size=20),
    node_lists().map(lambda pair: pair[0] + "]"),
)


@given(NODE_LIST_TEXT, st.sampled_from(["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"]))
@example("node[\n]", "SLURM_JOB_NODELIST")
@example("node[1-" + "9" * 5000 + "]", "SLURM_JOB_NODELIST")
@example("node[٣]", "SLURM_JOB_NODELIST")
def test_any_node_list_gives_hosts_or_names_the_variable(text, variable):
    try:
        first = first_host(variable, text)
        listed = list(itertools.islice(hosts(variable, text), 1000))
    except UsageError as error:
        assert_usage_line(error, [variable])
        return
    assert first == listed[0] and all(set(host) <= set(NAME_CHARS) for host in listed)
    # Slurm's node 0 is the first host of the list.
    environ = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS_PER_NODE": "1",
        variable: text,
    }
    assert resolve_launch(LaunchOptions(), environ, CPU).master_addr == first


LAYOUT_TEXT = st.one_of(
    ENV_TEXT,
    st.lists(
        st.tuples(st.integers(-1, 10), st.one_of(st.none(), st.integers(-1, 10**15))),
        min_size=1,
        max_size=3,
    ).map(lambda items: ",".join(str(n) if x is None else f"{n}(x{x})" for n, x in items)),
)


@given(LAYOUT_TEXT, st.integers(1, 10**15))
@example("1(x99999999999999)", 99999999999999)
@example("²", 2)
def test_any_tasks_per_node_layout_reads_or_names_the_variable(layout, ntasks):
    environ = {
        "SLURM_PROCID": str(ntasks - 1),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_LOCALID": "0",
        "SLURM_TASKS_PER_NODE": layout,
        "SLURM_JOB_NODELIST": "n1",
        "MASTER_ADDR": "n1",
    }
    try:
        counts = tasks_per_node("SLURM_TASKS_PER_NODE", layout)
    except UsageError as error:
        assert_usage_line(error, ["SLURM_TASKS_PER_NODE"])
    else:
        assert all(count >= 1 for count, _ in counts)
    resolve_or_refuse(LaunchOptions(), environ, CPU)


# -- Ascend's rank table ------------------------------------------------------------------------


def rank_table(servers: list[int], v12: bool = False) -> dict:
    """A valid rank table: `servers[s]` devices on server s, every value a string."""
    ranks = itertools.count()
    server_list = []
    for s, devices in enumerate(servers):
        server = {
            "server_id": f"server-{s}",
            "device": [
                {"device_id": str(d), "device_ip": f"192.168.{s}.{d}", "rank_id": str(next(ranks))}
                for d in range(devices)
            ],
        }
        if v12:
            server["host_ip"] = f"10.0.0.{s + 1}"
        server_list.append(server)
    return {
        "status": "completed",
        "version": "1.2" if v12 else "1.0",
        "server_count": str(len(servers)),
        "server_list": server_list,
    }


JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.sampled_from(["0", "1", "completed", "2", " 1"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    [
                        "status",
                        "server_count",
                        "server_list",
                        "server_id",
                        "host_ip",
                        "device",
                        "device_id",
                        "device_ip",
                        "rank_id",
                    ]
                ),
                st.text(max_size=5),
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=20,
)


def _places(value, path=()):
    """Every (path, value) inside a JSON value."""
    yield path, value
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        yield from _places(child, path + (key,))


@st.composite
def broken_tables(draw) -> dict:
    """A valid rank table with one field removed, retyped or set to any value."""
    table = rank_table(
        draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)), draw(st.booleans())
    )
    places = [path for path, _ in _places(table) if path]
    path = draw(st.sampled_from(places))
    parent = table
    for key in path[:-1]:
        parent = parent[key]
    how = draw(st.sampled_from(["remove", "retype", "any"]))
    if how == "remove":
        del parent[path[-1]]
    elif how == "retype":
        old = parent[path[-1]]
        parent[path[-1]] = (
            int(old)
            if isinstance(old, str) and old.isdigit()
            else [old]
            if not isinstance(old, list)
            else {"0": old}
        )
    else:
        parent[path[-1]] = draw(JSON)
    return table


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
    """One file, rewritten by each example."""
    return str(tmp_path_factory.mktemp("rank_table") / "rank_table.json")


def _resolve_table(path: str, rank_id: str):
    return resolve_or_refuse(LaunchOptions(), {"RANK_TABLE_FILE": path, "RANK_ID": rank_id}, CPU)


def _write_table(path: str, table) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(table, handle)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.booleans(), st.data())
def test_a_valid_rank_table_places_every_rank(table_path, servers, v12, data):
    _write_table(table_path, rank_table(servers, v12))
    rank = data.draw(st.integers(0, sum(servers) - 1))
    ctx = _resolve_table(table_path, str(rank))
    node = next(s for s in range(len(servers)) if rank < sum(servers[: s + 1]))
    assert (ctx.rank, ctx.world_size, ctx.node_rank, ctx.nnodes, ctx.local_world_size) == (
        rank,
        sum(servers),
        node,
        len(servers),
        servers[node],
    )
    assert ctx.master_addr == ("10.0.0.1" if v12 else "server-0") or len(servers) == 1


@given(st.one_of(broken_tables(), JSON), st.sampled_from(["0", "1", "5"]))
@example({"status": "completed", "server_count": "²", "server_list": [{}]}, "0")
def test_any_rank_table_json_places_the_rank_or_names_the_file(table_path, table, rank_id):
    _write_table(table_path, table)
    try:
        read_rank_table(table_path)
    except UsageError as error:
        assert_usage_line(error, ["RANK_TABLE_FILE"])
    _resolve_table(table_path, rank_id)


@given(st.binary(max_size=200))
@example(b"[" * 100000)
@example(b"\xff\xfe{}")
@example(b'{"server_count": 1' + b"0" * 5000 + b"}")
def test_a_rank_table_of_any_bytes_is_read_or_named(table_path, data):
    with open(table_path, "wb") as handle:
        handle.write(data)
    try:
        read_rank_table(table_path)
    except UsageError as error:
        assert_usage_line(error, ["RANK_TABLE_FILE"])
    _resolve_table(table_path, "0")


def test_a_rank_table_that_is_not_a_readable_file_is_named(tmp_path):
    fifo = tmp_path / "table.fifo"
    os.mkfifo(fifo)  # opening it would wait forever for a writer
    cases = [
        (tmp_path, "is not a file"),
        (fifo, "is not a file"),
        (tmp_path / "missing.json", "cannot be read (No such file or directory)"),
    ]
    if os.geteuid() != 0:  # root reads any file
        unreadable = tmp_path / "unreadable.json"
        unreadable.write_text("{}")
        unreadable.chmod(0)
        cases.append((unreadable, "cannot be read (Permission denied)"))
    for path, says in cases:
        with pytest.raises(UsageError) as raised:
            resolve_launch(LaunchOptions(), {"RANK_TABLE_FILE": str(path), "RANK_ID": "0"}, CPU)
        assert assert_usage_line(raised.value, ["RANK_TABLE_FILE"]).startswith(
            f"RANK_TABLE_FILE={str(path)!r} {says}: point RANK_TABLE_FILE at the rank table"
        )


# -- the init method URL, --addr and --port -----------------------------------------------------


@given(
    st.one_of(HOSTS, st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", fullmatch=True)),
    PORTS,
    st.booleans(),
)
def test_a_tcp_init_method_gives_its_host_and_port(host, port, cli):
    shown = f"[{host}]" if ":" in host else host
    options = LaunchOptions(rank=1, world_size=2, dist_url=f"tcp://{shown}:{port}", cli=cli)
    ctx = resolve_launch(options, {}, CPU)
    assert (ctx.master_addr, ctx.master_port) == (host, port)
    assert ctx.init_method == f"tcp://{shown}:{port}"


DIST_URLS = st.one_of(
    ENV_TEXT,
    st.builds(
        "{}{}{}:{}".format,
        st.sampled_from(["tcp://", "TCP://", "env://", "file://", ""]),
        st.sampled_from(["", "[", "]"]),
        st.one_of(HOSTS, ENV_TEXT),
        NUMBER_LIKE,
    ),
)


@given(DIST_URLS, st.booleans(), st.booleans())
@example("tcp:// 0 :1", False, False)
@example("tcp://a\nb:80", True, False)
@example("tcp://host:٣٣", False, False)
@example("tcp://host:" + "9" * 5000, False, False)
def test_any_init_method_is_understood_or_named(url, cli, spawning):
    options = dict(
        rank=0, world_size=2, dist_url=url, cli=cli, multiprocessing_distributed=spawning
    )
    resolve_or_refuse(options, {}, CPU)


@given(
    st.one_of(st.none(), ENV_TEXT, HOSTS),
    st.one_of(st.none(), st.integers(), NUMBER_LIKE),
    st.dictionaries(st.sampled_from(["MASTER_ADDR", "MASTER_PORT"]), VALUES),
    st.booleans(),
)
@example(" 0 ", None, {}, False)
@example("\n", None, {}, True)
def test_any_master_address_and_port_work_or_are_named(addr, port, environ, cli):
    options = dict(rank=1, world_size=2, addr=addr, port=port, cli=cli)
    resolve_or_refuse(options, environ, CPU)


# -- torch.distributed.launch's --local-rank argument -------------------------------------------

LOCAL_RANK_FLAGS = st.sampled_from(["--local-rank", "--local_rank"])
OTHER_ARGS = st.lists(
    st.one_of(
        st.sampled_from(["--epochs", "3", "-b", "--lr=0.1", "data"]),
        ENV_TEXT.filter(lambda a: not a.startswith("--local")),
    ),
    max_size=4,
)


@given(OTHER_ARGS, OTHER_ARGS, LOCAL_RANK_FLAGS, st.integers(0, 1000), st.booleans())
def test_the_local_rank_argument_is_taken_out_of_argv(before, after, flag, value, joined):
    given_args = [f"{flag}={value}"] if joined else [flag, str(value)]
    remaining, local_rank = pop_local_rank(before + given_args + after)
    assert (remaining, local_rank) == (before + after, value)


@given(
    st.lists(
        st.one_of(
            LOCAL_RANK_FLAGS,
            LOCAL_RANK_FLAGS.map(lambda f: f + "="),
            st.builds("{}={}".format, LOCAL_RANK_FLAGS, ENV_TEXT),
            ENV_TEXT,
            NUMBER_LIKE,
        ),
        max_size=5,
    )
)
@example(["--local-rank"])
@example(["--local_rank=²"])
def test_any_local_rank_argument_is_a_number_or_named(argv):
    try:
        remaining, local_rank = pop_local_rank(argv)
    except UsageError as error:
        assert_usage_line(error, ["--local-rank", "--local_rank"])
        return
    assert local_rank is None or local_rank >= 0
    assert not any(arg.partition("=")[0] in ("--local-rank", "--local_rank") for arg in remaining)


@given(st.dictionaries(st.sampled_from(ALL_VARIABLES), VALUES), options_anyhow())
def test_detection_never_raises(environ, options):
    try:
        options = LaunchOptions(**options)
    except UsageError:
        options = LaunchOptions()
    assert detect(options, environ) in ENVIRONMENTS
    assert launcher_of(environ) in {env.NAME for env in ENVIRONMENTS} | {None}
