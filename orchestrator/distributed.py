"""Process-group setup for DeepSpeed trials.

Three cases, one function:
- a process group already exists (Ray Train workers make one before our code runs): use it;
- rank variables are set (torchrun, the deepspeed launcher): DeepSpeed initialises from them;
- neither (a trial at world size 1, e.g. a Ray Tune function trainable or `gatesweep train`):
  set RANK/WORLD_SIZE/LOCAL_RANK and a free port on 127.0.0.1, so DeepSpeed does not fall back
  to MPI discovery (REFERENCE §5), and destroy the group at the end so the next trial in the
  same process can make its own.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
from typing import Iterator

import torch


def import_deepspeed():
    """Import DeepSpeed quietly, with its CPU accelerator when there is no GPU."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    from deepspeed.utils import logger as ds_logger

    ds_logger.setLevel(logging.WARNING)
    return deepspeed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _destroy(deepspeed) -> None:
    """Tear down the group and DeepSpeed's cached backend, so the next trial in this process
    (Ray reuses worker processes) initialises a fresh one."""
    import deepspeed.comm.comm as ds_comm
    import torch.distributed as dist

    if ds_comm.cdb is not None and ds_comm.cdb.is_initialized():
        deepspeed.comm.destroy_process_group()
    elif dist.is_initialized():
        dist.destroy_process_group()
    ds_comm.cdb = None


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """DeepSpeed prints 'DeepSpeed ... built successfully' when it loads its prebuilt shm op;
    keep everything else it prints."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield
    for line in buf.getvalue().splitlines():
        if "built successfully" not in line:
            print(line)


_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@contextlib.contextmanager
def process_group() -> Iterator[tuple[int, int]]:
    """Yield (rank, world_size) with a torch.distributed group ready for DeepSpeed."""
    import torch.distributed as dist

    deepspeed = import_deepspeed()
    if dist.is_available() and dist.is_initialized():
        yield dist.get_rank(), dist.get_world_size()
        return
    saved = {k: os.environ.get(k) for k in _RANK_VARS}
    owned_env = "RANK" not in os.environ or "WORLD_SIZE" not in os.environ
    if owned_env:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    try:
        with _quiet_stdout():
            deepspeed.init_distributed(verbose=False)
        yield dist.get_rank(), dist.get_world_size()
    finally:
        _destroy(deepspeed)
        if owned_env:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
