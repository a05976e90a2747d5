"""Process-group setup for DeepSpeed trials.

Three cases, one function:
- a process group already exists (Ray Train workers make one before our code runs; see
  `BoundTorchConfig` below for one whose store listens on the node's address only): use it;
- rank variables are set with WORLD_SIZE > 1 (torchrun, the deepspeed launcher): DeepSpeed
  initialises from them;
- otherwise (world size 1: a Ray Tune function trainable, `gatesweep train`): make the group
  here, on an in-process `HashStore`, before DeepSpeed looks (its `init_distributed` adopts an
  existing group), so there is no rendezvous server: DeepSpeed's own `env://` path would start a
  TCPStore listening on all interfaces (`*:PORT`, measured) for a group of one. gloo and NCCL
  open their sockets on the loopback interface (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME for the
  group's lifetime: groups DeepSpeed makes later read them too). RANK/WORLD_SIZE/LOCAL_RANK/
  MASTER_ADDR/MASTER_PORT are still set (127.0.0.1, a free port nothing listens on) for code that
  reads them, so DeepSpeed never falls back to MPI discovery (REFERENCE §5). The group is
  destroyed at the end so the next trial in the same process (Ray reuses workers) makes its own.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
from collections.abc import Iterator

import torch

from orchestrator.runtime.netpolicy import is_loopback, loopback_interface


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
#: backends whose single-process group we make ourselves, and the variable naming their interface
_LOOPBACK_IFNAME = {"gloo": ("GLOO_SOCKET_IFNAME",), "nccl": ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")}


def _single_process_group() -> dict[str, str | None]:
    """Make a world-size-1 torch.distributed group without any listener off loopback; return the
    interface variables it changed (old values), to restore once the group is destroyed.
    Backends other than gloo/NCCL (oneCCL's DeepSpeed backend makes its own group) are left to
    DeepSpeed."""
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    backend = get_accelerator().communication_backend_name()
    if backend not in _LOOPBACK_IFNAME:
        return {}
    iface = loopback_interface()
    changed = {k: os.environ.get(k) for k in _LOOPBACK_IFNAME[backend]}
    os.environ.update({k: iface for k in changed})
    try:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    except BaseException:
        _restore(changed)
        raise
    return changed


def _restore(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


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
    ifnames: dict[str, str | None] = {}
    try:
        if os.environ.get("WORLD_SIZE") == "1":  # nobody to meet: no rendezvous server at all
            ifnames = _single_process_group()
        with _quiet_stdout():
            deepspeed.init_distributed(verbose=False)
        yield dist.get_rank(), dist.get_world_size()
    finally:
        _destroy(deepspeed)
        _restore(ifnames)
        if owned_env:
            _restore(saved)


# ---- multi-worker trials (Ray Train) ------------------------------------------------------
# Ray Train's own TorchConfig rendezvous (env:// or tcp://) makes rank 0 start a TCPStore that
# listens on all interfaces (`*:PORT`, measured), whatever MASTER_ADDR says. `BoundTorchConfig`
# (pass it as TorchTrainer(torch_config=...)) makes the group from a store whose listening socket
# rank 0 binds to its node's address only: 127.0.0.1 on a local cluster (where gloo and NCCL are
# put on the loopback interface too), the node's own address on a real cluster.

_STORE_FD: int | None = None  # rank 0's listening socket, until its TCPStore takes it over


def _bind_store_socket() -> tuple[str, int]:
    """Runs in rank 0's worker: listen on this node's address, on a free port."""
    import ray

    global _STORE_FD
    addr = ray.util.get_node_ip_address()
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((addr, 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    _STORE_FD = sock.detach()  # the TCPStore owns (and closes) the descriptor
    return addr, port


def _join_group(backend: str, addr: str, port: int, world_rank: int, world_size: int, timeout_s: float) -> None:
    """Runs in every worker: connect to rank 0's store and make the process group."""
    from datetime import timedelta

    import torch.distributed as dist

    global _STORE_FD
    if is_loopback(addr):
        iface = loopback_interface()
        os.environ.update(GLOO_SOCKET_IFNAME=iface, NCCL_SOCKET_IFNAME=iface)
    if "nccl" in backend:
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port))
    timeout = timedelta(seconds=timeout_s)
    if world_rank == 0:
        fd, _STORE_FD = _STORE_FD, None
        store = dist.TCPStore(addr, port, world_size, True, timeout, master_listen_fd=fd, use_libuv=True)
    else:
        store = dist.TCPStore(addr, port, world_size, False, timeout)
    dist.init_process_group(backend, store=store, rank=world_rank, world_size=world_size, timeout=timeout)


def _ray_train_classes() -> None:
    from dataclasses import dataclass

    import ray
    from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
    from ray.train.torch.config import TorchConfig, _set_torch_distributed_env_vars, _TorchBackend

    class BoundTorchBackend(_TorchBackend):
        def on_start(self, worker_group, backend_config):
            backend = backend_config.backend or ("nccl" if worker_group.get_resources_per_worker().get("GPU", 0) else "gloo")
            addr, port = worker_group.execute_single(0, _bind_store_socket)
            if not isinstance(worker_group, V1WorkerGroup):
                worker_group.execute(_set_torch_distributed_env_vars)
            n = len(worker_group)
            ray.get(
                [
                    worker_group.execute_single_async(
                        i,
                        _join_group,
                        backend=backend,
                        addr=addr,
                        port=port,
                        world_rank=i,
                        world_size=n,
                        timeout_s=backend_config.timeout_s,
                    )
                    for i in range(n)
                ]
            )

    @dataclass
    class BoundTorchConfig(TorchConfig):
        @property
        def backend_cls(self):
            return BoundTorchBackend

    for cls in (BoundTorchBackend, BoundTorchConfig):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__  # pickled by reference
        globals()[cls.__name__] = cls


def __getattr__(name: str):
    """`BoundTorchConfig` / `BoundTorchBackend`, built on first use (importing Ray is slow)."""
    if name in ("BoundTorchConfig", "BoundTorchBackend"):
        _ray_train_classes()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
