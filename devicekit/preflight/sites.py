"""Whose code a frame is, and the user's line a call came from (its site, the user's frames
outwards, the installed library it came through): torch's, devicekit's, the standard
library's and installed packages' frames are never the user's."""

import os
import site
import sysconfig
from types import CodeType, FrameType

import torch

import devicekit

# torch's and devicekit's own folders: every call goes through them, so they are never
# the library a finding came through.
_OURS = tuple(os.path.dirname(path) + os.sep for path in (torch.__file__, devicekit.__file__))
# Where installed packages live: this interpreter's site folders, and any site-packages or
# dist-packages folder (a virtual environment's, `pip install --target`'s, a distribution's).
_INSTALLED_ROOTS = tuple(
    dict.fromkeys(
        folder + os.sep
        for folder in (
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
            *site.getsitepackages(),
            site.getusersitepackages(),
        )
    )
)
_INSTALLED_FOLDERS = tuple(os.sep + name + os.sep for name in ("site-packages", "dist-packages"))
# Frames in these folders are not the user's: a finding names the innermost frame outside
# (torch, devicekit, the standard library and installed packages: never advice to edit one).
_NOT_USER = _OURS + (sysconfig.get_paths()["stdlib"] + os.sep,) + _INSTALLED_ROOTS + ("<frozen ",)
# torch code whose tensors have the parameters' shapes and stay put on the host where
# torch keeps them (optimizer step counts): not the user's shapes, nor a sync of theirs.
_PARAMETER_CODE = tuple(
    os.path.join(os.path.dirname(torch.__file__), *part) + os.sep
    for part in (("optim",), ("nn", "parallel"), ("nn", "utils"), ("distributed",))
)
STACK_DEPTH = 8

Site = tuple[str, int]  # (file, line)


_user_code: dict[CodeType, bool] = {}


def is_user_file(filename: str) -> bool:
    """Whether `filename` is the user's code (not torch's, devicekit's, the standard
    library's or an installed package's)."""
    return not filename.startswith(_NOT_USER) and not any(
        folder in filename for folder in _INSTALLED_FOLDERS
    )


def library_path(filename: str) -> str | None:
    """`filename` as a path inside the installed packages ("timm/utils/cuda.py"), or None
    where it is no installed library's (the user's, the standard library's, or torch's or
    devicekit's own, which every call goes through)."""
    if filename.startswith(_OURS):
        return None
    for root in _INSTALLED_ROOTS:
        if filename.startswith(root):
            return filename[len(root) :]
    for folder in _INSTALLED_FOLDERS:
        at = filename.rfind(folder)
        if at >= 0:
            return filename[at + len(folder) :]
    return None


def _is_user(code: CodeType) -> bool:
    mine = _user_code.get(code)
    if mine is None:
        mine = _user_code[code] = is_user_file(code.co_filename)
    return mine


class Where:
    """The user's frame a call came from (its site), whether it came through torch code
    that works on parameters, optimizer state or gradient buckets on the way (`internal`),
    and the user's frames outwards, built only when a finding needs them."""

    __slots__ = ("frame", "internal", "site", "start")

    def __init__(self, frame: FrameType | None) -> None:
        self.start = frame
        internal = False
        while frame is not None and not _is_user(frame.f_code):
            if frame.f_code.co_filename.startswith(_PARAMETER_CODE):
                internal = True
            frame = frame.f_back
        self.frame, self.internal = frame, internal
        self.site: Site = (
            ("<unknown>", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)
        )

    def stack(self) -> tuple[str, ...]:
        """The user's frames as "file:line", innermost first (at most STACK_DEPTH)."""
        stack: list[str] = []
        frame = self.frame
        while frame is not None and len(stack) < STACK_DEPTH:
            if _is_user(frame.f_code):
                stack.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
            frame = frame.f_back
        return tuple(stack)

    def via(self) -> str:
        """The innermost line of an installed library between the call and the user's
        frame, as "timm/utils/cuda.py:42"; "" when the user's code called torch itself."""
        frame = self.start
        while frame is not None and frame is not self.frame:
            path = library_path(frame.f_code.co_filename)
            if path is not None:
                return f"{path}:{frame.f_lineno}"
            frame = frame.f_back
        return ""
