"""Run by Python at start-up in every process of a job started by ``overlapscope capture``
(its folder is put first on PYTHONPATH): the capture is installed once the process
imports torch, and nothing else happens here. A process that never imports torch (a
launcher's shell, a data loader's helper) pays a check of one environment variable.

It shadows any other ``sitecustomize`` on the path, so it runs that one afterwards.
Nothing here may stop the job: an error is one line on stderr.
"""

import os
import sys

ENV = "OVERLAPSCOPE_CAPTURE"


def _after_torch_import() -> None:
    import importlib.abc
    import importlib.util

    class AfterTorch(importlib.abc.MetaPathFinder):
        """Finds nothing itself: it wraps torch's loader so that the capture installs
        right after ``import torch`` has run (its optimizer hooks exist then)."""

        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            sys.meta_path.remove(self)  # once, and the real finders answer
            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                try:
                    from overlapscope.tracer import capture

                    capture.install()
                except Exception as err:  # never the job's error
                    print(f"overlapscope capture: not capturing in process {os.getpid()}: "
                          f"{type(err).__name__}: {err}", file=sys.stderr)

            spec.loader.exec_module = exec_module
            return spec

    if "torch" not in sys.modules:
        sys.meta_path.insert(0, AfterTorch())


def _chain() -> None:
    """The ``sitecustomize`` this one shadows, if the path has another."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get(ENV):
    try:
        _after_torch_import()
    except Exception as err:
        print(f"overlapscope capture: not capturing in process {os.getpid()}: {err}", file=sys.stderr)
_chain()
