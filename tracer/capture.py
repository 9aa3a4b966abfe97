"""The capture injected into a training job by ``overlapscope capture`` (no change to the
script): every rank profiles the same optimizer steps and writes its trace, and rank 0
the run's manifest, as the ``Tracer`` would.

How it follows the job without its code:

- the step clock is the optimizer: ``register_optimizer_step_post_hook`` sees every
  ``optimizer.step()`` of the process; the first optimizer to step is the clock (a job
  with two optimizers steps both once per step);
- the model is found when the capture begins (``gc``): the DistributedDataParallel
  module, else the root FSDP module (FSDP2 ``fully_shard`` or FSDP1);
- DDP's buckets: the tracer's annotating comm hook is registered when the capture
  begins; where the job registered a hook of its own (DDP takes one), the buckets are
  left to the analyzer's inference and the manifest says so (``model.capture``);
- micro-batches: a forward pre-hook on the model counts forwards per optimizer step
  (accumulation), sees DDP's ``no_sync`` (gradient sync off), reads tokens from the
  first input tensor, and marks each micro-batch in the trace
  (``overlapscope:microbatch#<i>``, from its forward to the next one or the optimizer).

Every rank runs the same steps in the same order, so the collectives here (the armed
poll, the rank facts, the calibration) are entered by every rank at the same step.
An error is printed once per rank and the capture stops; training goes on. Files are
written under a temporary name and renamed.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule

from overlapscope.contract.names import TRIGGER_FILE, microbatch_annotation, trace_file_name

ENV = "OVERLAPSCOPE_CAPTURE"


@dataclass(frozen=True)
class CaptureConfig:
    """What ``overlapscope capture`` asked for (the ``OVERLAPSCOPE_CAPTURE`` JSON)."""

    out: str
    steps: int = 3
    skip: int = 5
    calibrate: bool = False
    armed: bool = False
    poll_steps: int = 10
    tokens: int | None = None
    command: str | None = None

    @classmethod
    def from_env(cls) -> "CaptureConfig | None":
        raw = os.environ.get(ENV)
        return cls(**json.loads(raw)) if raw else None


_capture: "Capture | None" = None


def install() -> None:
    """Hook the optimizers of this process (``sitecustomize`` calls it after ``import torch``)."""
    global _capture
    config = CaptureConfig.from_env()
    if config is None or _capture is not None:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    _capture = Capture(config)
    register_optimizer_step_pre_hook(_capture.before_step)
    register_optimizer_step_post_hook(_capture.after_step)


class Capture:
    """One process's capture: dormant until its step, then profiling, then done."""

    def __init__(self, config: CaptureConfig):
        self.config = config
        self.clock = None  # weakref to the optimizer that counts steps
        self.step = 0  # optimizer steps taken
        self.state = "armed" if config.armed else "waiting"  # -> profiling -> waiting/done
        self.handled_trigger_ns = 0  # the command removed a trigger left from an earlier job
        self.session: _Session | None = None

    # the optimizer's hooks ------------------------------------------------------------

    def before_step(self, optimizer, args, kwargs) -> None:
        if self.session is not None and self._is_clock(optimizer):
            self._safely(self.session.end_microbatch)

    def after_step(self, optimizer, args, kwargs) -> None:
        if self.state == "done" or not self._is_clock(optimizer):
            return
        self.step += 1
        self._safely(self._advance)

    def _is_clock(self, optimizer) -> bool:
        if self.clock is None:
            self.clock = weakref.ref(optimizer)
        return self.clock() is optimizer

    def _advance(self) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            return
        if self.session is not None:
            if self.session.advance():
                self.session = None
                self.state = "armed" if self.config.armed else "done"
            return
        if self.state == "waiting" and self.step >= self.config.skip:
            self._begin(Path(self.config.out), self.config.steps)
        elif self.state == "armed" and self.step % self.config.poll_steps == 0:
            self._poll()

    def _poll(self) -> None:
        """Every rank at the same step: the trigger as rank 0 sees it (a file on a shared file
        system reaches the ranks at different moments), handed to every rank through the store,
        so that every rank decides alike (the steps too: a second trigger may land between two
        reads)."""
        folder = Path(self.config.out)
        # agreed through the job's rendezvous store, not a collective: rank 0 reads the folder and
        # sets the poll's key, the others wait for it. A collective here (on the job's group, or a
        # gloo group of the capture's own) made a gloo work whose state holds a Python object;
        # freed by gloo's thread while the main thread, holding the GIL, joins that thread in
        # destroy_process_group, it hung the rank at exit (1 job in 6 on 2 busy cores; 1 in about
        # 20 on a group of its own). The store's keys are deleted two polls later, when every rank
        # has read them (the ranks step together: none is a poll behind another's previous one).
        store = dist.distributed_c10d._get_default_store()
        key = f"{POLL_KEY}/{self.step}"
        if dist.get_rank() == 0:
            store.set(key, f"{_trigger_ns(folder)} {_trigger_steps(folder) or 0}")
            old = f"{POLL_KEY}/{self.step - 2 * self.config.poll_steps}"
            if self.step - 2 * self.config.poll_steps > 0:
                _safe_delete(store, old)
        newest_ns, steps = (int(v) for v in store.get(key).decode().split())
        if newest_ns > self.handled_trigger_ns:
            self.handled_trigger_ns = newest_ns
            self._begin(folder / f"step-{self.step}", steps or self.config.steps)

    def _begin(self, out: Path, steps: int) -> None:
        self.session = _Session(self.config, out, steps, self.step)
        self.state = "profiling"
        self.session.begin()

    def _safely(self, work) -> None:
        """Errors of the capture's own logic: printed, and the capture stops on this rank.
        (Errors of a session's local parts never get here: ``_Session.local``.)"""
        try:
            work()
        except Exception as err:  # the job's training is never the capture's to stop
            _say(f"stopped, training goes on: {type(err).__name__}: {err}")
            if self.session is not None:
                self.session.abandon()
            self.session, self.state = None, "done"


def _say(message: str) -> None:
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else "?"
    print(f"overlapscope capture (rank {rank}): {message}", file=sys.stderr)


class _Session:
    """One bundle: the profiler over ``steps`` optimizer steps, then the rank's files.

    Every rank goes through the same steps and enters the same collectives (the rank
    facts, the calibration) whatever fails on it: a failure of this rank's own part (its
    profiler, its file) is printed once and that part is left out (``local``), never a
    reason to skip a collective that the other ranks would wait in."""

    def __init__(self, config: CaptureConfig, out: Path, steps: int, first_step: int):
        self.config, self.out, self.steps, self.first_step = config, out, steps, first_step
        self.rank = dist.get_rank()
        self.model = None
        self.tracer = None
        self.profiler: profile | None = None
        self.failed = False
        self.taken = 0  # optimizer steps since the start: one warm-up, then the profiled ones
        self.forwards: list[int] = []  # forwards seen in each profiled step
        self.forward_count = 0
        self.no_sync = False
        self.tokens: int | None = config.tokens
        self.micro_batch_size: int | None = None
        self.range = None  # the open micro-batch range
        self.handles = []
        self.notes: dict = {"captured_by": "overlapscope capture"}
        self.start_time = ""

    def local(self, work, *args):
        """``work(*args)``, this rank's alone: a failure is printed once and the bundle of
        this rank is given up; the session's steps and collectives go on."""
        if self.failed:
            return None
        try:
            return work(*args)
        except Exception as err:
            self.failed = True
            _say(f"this rank's bundle is given up, training goes on: {type(err).__name__}: {err}")
            self.abandon()
            return None

    def begin(self) -> None:
        self.start_time = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.local(self._begin)

    def _begin(self) -> None:
        from overlapscope.tracer.ddp_buckets import annotate_buckets
        from overlapscope.tracer.profiling import ProfileConfig
        from overlapscope.tracer.session import TraceConfig, Tracer

        self.out.mkdir(parents=True, exist_ok=True)
        self.model = _find_model()
        if self.model is not None:
            profiled = ProfileConfig(wait_steps=max(1, self.first_step), warmup_steps=1, active_steps=self.steps)
            self.tracer = Tracer(self.model, TraceConfig(self.out, profile=profiled, calibrate=self.config.calibrate))
            if isinstance(self.model, DistributedDataParallel):
                try:
                    self.tracer._buckets = annotate_buckets(self.model)
                    self.notes["ddp_buckets"] = "annotated"
                except RuntimeError:  # the job's own comm hook: DDP takes one
                    self.notes["ddp_buckets"] = "inferred: the job registered its own DDP comm hook"
            self.handles.append(self.model.register_forward_pre_hook(self._forward))
        else:
            self.notes["model"] = "no DistributedDataParallel or FSDP module found"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        steps = schedule(wait=0, warmup=1, active=self.steps, repeat=1)
        self.profiler = profile(activities=activities, schedule=lambda n: steps(max(0, n - self.first_step)),
                                on_trace_ready=self._write, record_shapes=True, with_flops=True, profile_memory=True)
        self.profiler.step_num = self.first_step  # ProfilerStep#N: the job's own step numbers
        self.profiler.start()

    def _forward(self, module, args) -> None:
        self.end_microbatch()
        if self.profiler is None:
            return
        if isinstance(module, DistributedDataParallel) and not module.require_backward_grad_sync:
            self.no_sync = True
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None and first.dim() >= 1:
            self.micro_batch_size = self.micro_batch_size or int(first.shape[0])
            if self.config.tokens is None and not first.is_floating_point() and first.dim() >= 2:
                self.tokens = self.tokens or int(first.numel())  # token ids: batch x sequence
        self.range = torch.profiler.record_function(microbatch_annotation(self.forward_count))
        self.range.__enter__()
        self.forward_count += 1

    def end_microbatch(self) -> None:
        if self.range is not None:
            self.range.__exit__(None, None, None)
            self.range = None

    def advance(self) -> bool:
        """One optimizer step ended; True once this bundle is done (written or given up)."""
        self.local(self.end_microbatch)
        if self.taken >= 1:  # the warm-up step's forwards are not counted
            self.forwards.append(self.forward_count)
        self.forward_count = 0
        if self.profiler is not None:
            self.local(self.profiler.step)  # the last active step's writes the trace (_write)
        self.taken += 1
        if self.taken < self.steps + 1:
            return False
        if self.profiler is not None:
            self.local(self.profiler.stop)
            self.profiler = None
        for handle in self.handles:
            handle.remove()
        self._finish()
        return True

    def _write(self, prof) -> None:
        final = self.out / trace_file_name(self.rank)
        partial = self.out / f".{final.name}.{os.getpid()}.partial.json.gz"  # gzipped for its .gz ending
        prof.export_chrome_trace(str(partial))
        os.replace(partial, final)

    def _finish(self) -> None:
        """Every rank: calibration and the rank facts (collectives), then rank 0's manifest.
        A rank without the model (none found) skips them all, as every rank does then."""
        if self.tracer is None:
            return
        from overlapscope.tracer.calibration import calibrate
        from overlapscope.tracer.facts import gather_rank_facts
        from overlapscope.tracer.manifest import RunFacts, write_manifest

        tracer = self.tracer
        if self.config.calibrate:
            param_dtype, reduce_dtype = tracer._dtypes()
            tracer.calibration = calibrate(tracer.config.calibration, tracer._comm_targets(), tracer.device,
                                           param_dtype, reduce_dtype)
        ranks = gather_rank_facts(tracer.device)
        accumulation = max(set(self.forwards), key=self.forwards.count) if self.forwards else 1
        tracer.facts = RunFacts(tokens_per_microbatch=self.tokens, micro_batch_size=self.micro_batch_size,
                                accumulation_steps=max(1, accumulation), no_sync=self.no_sync,
                                model={"capture": self.notes}, command_line=self.config.command)
        tracer._start_time = self.start_time
        profiled = list(range(self.first_step + 1, self.first_step + 1 + self.steps))
        if self.rank == 0:
            self.local(lambda: write_manifest(self.out, tracer._manifest(ranks, profiled)))

    def abandon(self) -> None:
        self.range = None
        for handle in self.handles:
            handle.remove()
        self.handles = []
        if self.profiler is not None:
            try:
                self.profiler.stop()
            except Exception:
                pass
            self.profiler = None


def _find_model() -> nn.Module | None:
    """The job's data-parallel model: a DistributedDataParallel module, else the outermost
    FSDP module (one no other FSDP module contains)."""
    from overlapscope.tracer.fsdp_units import FSDP1, FSDPModule

    # type(), not isinstance(): isinstance reads __class__, which some objects warn on
    modules = [o for o in gc.get_objects() if issubclass(type(o), nn.Module)]
    ddp = [m for m in modules if isinstance(m, DistributedDataParallel)]
    if ddp:
        return max(ddp, key=lambda m: sum(p.numel() for p in m.parameters()))
    sharded = [m for m in modules if isinstance(m, (FSDPModule, FSDP1))]
    inner = {id(sub) for m in sharded for sub in m.modules() if sub is not m}
    roots = [m for m in sharded if id(m) not in inner]
    return max(roots, key=lambda m: sum(p.numel() for p in m.parameters())) if roots else None


POLL_KEY = "overlapscope/capture/poll"  # the store's key of each poll: POLL_KEY/<step>


def _safe_delete(store, key: str) -> None:
    try:
        store.delete_key(key)
    except Exception:  # a store without deletion (FileStore, HashStore): the keys stay, a few bytes each
        pass


def _trigger_ns(folder: Path) -> int:
    try:
        return (folder / TRIGGER_FILE).stat().st_mtime_ns
    except OSError:
        return 0


def _trigger_steps(folder: Path) -> int | None:
    try:
        steps = json.loads((folder / TRIGGER_FILE).read_text() or "{}").get("steps")
        return int(steps) if steps else None
    except (OSError, ValueError, AttributeError):
        return None

