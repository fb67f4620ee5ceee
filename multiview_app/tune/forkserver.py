"""Fork server for single-process trials: imports the trainer once, then forks one child per trial.

Started by the tune worker (``python -m multiview_app.tune.forkserver``); reads one JSON request per
line on stdin (``{"argv", "log", "env", "exit_file"}``), forks, answers ``{"pid": n}``. The child
starts its own session (so the worker can kill its process group), redirects stdout/stderr to
``log``, replaces its environment by ``env``, runs ``mvapp <argv>`` and writes its exit code to
``exit_file`` before exiting. Children are reaped automatically (SIGCHLD ignored). The server ends
when its stdin closes or the worker thread that started it dies (PR_SET_PDEATHSIG), and every child
dies with the server. The server ignores SIGINT (its worker handles Ctrl-C). Nothing torch-related runs before the fork: each trial builds its own
Accelerate state, as a fresh process would, without paying the imports again (docs/benchmarks.md).

A child that is itself a tune worker (``mvapp tune`` forked from a server, as the tests do) has the
stack imported and has run nothing yet: its own fork server is then a fork of itself
(:func:`claim_fresh_fork`, ``runner.ForkServer``), not a new python process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback

from .process import die_with_parent

_fresh_fork = False  # True in a child until claim_fresh_fork(): the preloaded stack, nothing run yet


def claim_fresh_fork() -> bool:
    """True once in a child of this server that has run nothing but the CLI's argument parsing (it
    can fork a fork server from itself); False afterwards and in every other process."""
    global _fresh_fork
    fresh, _fresh_fork = _fresh_fork, False
    return fresh


def _child(request: dict) -> None:
    global _fresh_fork
    _fresh_fork = True
    os.setsid()
    die_with_parent()  # the server's death ends the trial
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    # closefd=False: when a child of this child rebinds them (a worker's own fork server, its trials),
    # dropping these objects must not close fds 1 and 2 under the new ones
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the server ignores it (serve); a trial acts on it
    code = 1
    try:
        from ..cli import main

        code = int(main(list(request["argv"])) or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the trial log, exit code 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        tmp = request["exit_file"] + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(str(code))
        os.replace(tmp, request["exit_file"])
        os._exit(code)


#: Imported by the server besides every registry's modules: what a trial imports lazily (Accelerate,
#: TensorBoard logging, the val objectives, scikit-learn's bundled data sets, the CLI groups).
PRELOAD_MODULES = (
    "multiview_app.cli",
    "multiview_app.train.cli",
    "multiview_app.train.trainer",
    "multiview_app.tune.objective",
    "multiview_app.eval.linear_probe",
    "multiview_app.eval.sleep_staging",
    "accelerate",
    "accelerate.utils",
    "torch.utils.tensorboard",
    "sklearn.datasets",
)


def preload() -> None:
    """Import everything a trial would otherwise import itself: the modules above and the modules
    that register losses, adapters, view policies, encoders and training callbacks (imports only:
    no torch op, no thread pool, no open file)."""
    import importlib

    for module in PRELOAD_MODULES:
        importlib.import_module(module)
    from multiview_app.data.adapters import ADAPTERS
    from multiview_app.data.views import VIEW_POLICIES
    from multiview_app.losses import LOSSES
    from multiview_app.models.encoders import ENCODERS
    from multiview_app.train.callbacks import TRAIN_CALLBACKS

    for registry in (ADAPTERS, VIEW_POLICIES, LOSSES, ENCODERS, TRAIN_CALLBACKS):
        registry.names()  # imports the registering modules


def serve() -> None:
    """Import the training stack, then answer fork requests until stdin closes.

    Ctrl-C is ignored: the terminal sends it to the whole foreground process group, and the tune
    worker that owns this server handles it (it closes stdin; the trials, in their own sessions,
    then end with the server), so the server prints no KeyboardInterrupt traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # auto-reap children
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # from the first moment (see serve)
    from multiview_app.tune.forkserver import serve as package_serve  # the flag above lives in the package module

    package_serve()
    sys.stdout.flush()
    os._exit(0)  # nothing to clean up: skip the interpreter's slow teardown of the imported stack
