"""run.py's group `gpu` (skipped without a CUDA device): rows (b) and (c) on the GPU, at
ResNet-50, 224 px, batch 256 (benchmarks/gpu.sh runs it)."""

from process import PY, environ, run
from rates import baseline_args, main_py, result_of
from stats import interleaved, ratio_row


def measure(pairs):
    """On a CUDA device: rows (b) and (c) at resnet50, 224 px, batch 256, 8 workers."""
    import torch

    if not torch.cuda.is_available():
        return {"gpu": {"what": "no CUDA device on this machine", "verdict": "skipped"}}, {}
    args = [
        "--dummy",
        "--device",
        "cuda",
        "-a",
        "resnet50",
        "--image-size",
        "224",
        "-b",
        "256",
        "-j",
        "8",
        "--epochs",
        "1",
        "--steps-per-epoch",
        "30",
        "--val-steps",
        "1",
        "-p",
        "1",
    ]
    name = torch.cuda.get_device_name()
    runs = interleaved(
        {
            "reference-style loop, AMP fp16 + channels_last": lambda: result_of(
                run(
                    [
                        PY,
                        "benchmarks/reference_loop.py",
                        *baseline_args("resnet50", 224, 256),
                        "--workers",
                        "8",
                        "--steps",
                        "30",
                        "--device",
                        "cuda",
                        "--amp",
                        "--channels-last",
                    ]
                )
            ),
            "main.py --amp --channels-last": lambda: main_py(
                [PY], environ(), ["main.py", *args, "--amp", "--channels-last"]
            ),
            "main.py fp32 NCHW": lambda: main_py(
                [PY], environ(), ["main.py", *args, "--no-amp", "--no-channels-last"]
            ),
        },
        pairs,
    )
    return {
        "gpu b. AMP + channels_last": ratio_row(
            runs,
            "main.py fp32 NCHW",
            "main.py --amp --channels-last",
            None,
            f"main.py AMP + channels_last / fp32 NCHW, resnet50 224 px, batch 256, {name}",
        ),
        "gpu c. vs reference step": ratio_row(
            runs,
            "reference-style loop, AMP fp16 + channels_last",
            "main.py --amp --channels-last",
            None,
            f"main.py / reference-style step, both AMP + channels_last, resnet50 224 px, "
            f"batch 256, {name}",
        ),
    }, runs
