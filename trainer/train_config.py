"""TrainConfig: a run's settings, one typed field per flag of main.py, as trainer.options
gives them after merging the YAML config and checking every value."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The settings of one run of main.py, read-only once checked.

    One field per flag, named as the flag's destination (``--wd`` is ``weight_decay``),
    holding the value argparse gave it, with what other flags imply filled in: ``data_dir``
    is ``DIR`` or ``--data``, ``amp`` follows ``--opt-level`` and ``--loss-scale`` unless
    ``--amp``/``--no-amp`` is given, and ``device`` is ``cpu`` with ``--no-accel``. None
    means "not given" where the flag has no default: the device's choice for ``amp`` and
    ``channels_last``, no cap for ``steps_per_epoch`` and ``val_steps``, and so on. Only
    trainer.options.parse_args makes one (the fields' values are those it checked).
    """

    # data
    data_dir: str | None
    data: str | None
    workers: int
    dummy: bool
    image_size: int
    crop_scale: tuple[float, float] | list[float]  # the default tuple, or the flag's list
    flip: bool
    augment: bool
    # model
    arch: str
    pretrained: str | None
    num_classes: int
    channels_last: bool | None
    compile: bool
    # training
    epochs: int
    start_epoch: int
    batch_size: int  # of the node, all its processes together
    lr: float
    momentum: float
    weight_decay: float
    evaluate: bool
    seed: int
    warmup: int
    label_smoothing: float
    steps_per_epoch: int | None
    val_steps: int | None
    lr_schedule: str
    grad_accum: int
    clip_grad: float | None
    # precision
    amp: bool | None
    loss_scale: float | str | None  # an initial scale, "dynamic", or None
    opt_level: str | None
    # devices and processes
    world_size: int
    rank: int
    dist_url: str | None
    dist_backend: str | None
    gpu: int | None
    no_accel: bool
    multiprocessing_distributed: bool
    local_rank: int | None
    addr: str | None
    port: int | None
    device: str
    device_list: list[int] | None
    nproc_per_node: int | None
    dist_timeout: float | None
    shard: bool
    # checkpoints and output
    resume: str
    output_dir: str
    save_every: int | None
    # observability
    print_freq: int
    tensorboard: str | None
    profile_steps: int | None
    # the YAML file the flags were merged with
    config: str | None
