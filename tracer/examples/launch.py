"""Start the ranks: spawn ``--nproc`` processes, or be one rank under torchrun."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import NoReturn

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from overlapscope.tracer.examples.options import TrainConfig

RankFn = Callable[[TrainConfig, int, int, int], None]


def running_under_torchrun() -> bool:
    """True when a launcher (torchrun) already set this process's rank."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def launch(fn: RankFn, cfg: TrainConfig) -> int:
    """Run ``fn(cfg, rank, world_size, local_rank)`` on every rank; the exit status."""
    if running_under_torchrun():
        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
        _run_rank(fn, cfg, rank, int(os.environ["WORLD_SIZE"]), local_rank)
        return 0
    port = free_port()
    # CPU ranks fork: they inherit this process's imported torch (5 s a rank on a 2-core
    # machine, every rank at once). CUDA ranks spawn, as CUDA requires; this process has not
    # touched CUDA or run an op (no thread pool to inherit half-made) either way.
    start_method = "fork" if cfg.device_type == "cpu" else "spawn"
    try:
        mp.start_processes(_spawned_rank, args=(fn, cfg, port), nprocs=cfg.nproc, start_method=start_method)
    except mp.ProcessRaisedException as err:
        print(str(err).rstrip(), file=sys.stderr)
        print(f"error: rank {err.error_index} failed: {_last_line(str(err))}", file=sys.stderr)
        return 1
    except mp.ProcessExitedException as err:
        print(f"error: rank {err.error_index} exited with code {err.exit_code}", file=sys.stderr)
        return 1
    return 0


def free_port() -> int:
    """A TCP port free right now, so parallel runs on one host do not collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawned_rank(local_rank: int, fn: RankFn, cfg: TrainConfig, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if cfg.device_type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # Ranks share the host's cores, as torchrun's OMP_NUM_THREADS=1 would make them.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.nproc))
    _run_rank(fn, cfg, local_rank, cfg.nproc, local_rank)


def _run_rank(fn: RankFn, cfg: TrainConfig, rank: int, world_size: int, local_rank: int) -> None:
    device_id = torch.device("cuda", local_rank) if cfg.device_type == "cuda" else None
    dist.init_process_group(cfg.backend_name, rank=rank, world_size=world_size, device_id=device_id)
    fn(cfg, rank, world_size, local_rank)
    dist.barrier()  # tear down together
    dist.destroy_process_group()
    _exit_without_interpreter_shutdown()


def _exit_without_interpreter_shutdown() -> NoReturn:
    """End this rank's process now; everything it wrote is closed.

    FSDP keeps its process groups referenced past ``destroy_process_group``,
    so their gloo worker threads live on; one that frees a Python-owned tensor
    of a finished collective while the interpreter shuts down cannot take the
    GIL and aborts the process ("terminate called without an active
    exception", seen with torch 2.13, gloo, FSDP2 and FSDP1).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown error"
