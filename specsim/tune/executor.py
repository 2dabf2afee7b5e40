"""The executor seam: where a study's simulations run. Each maps a pure function over configurations and
returns the results in their order, so a study's trials are the same whatever runs them.

- :class:`LocalExecutor`: this process (one job) or a pool of processes on this machine, as
  ``specsim serve --jobs`` (:func:`specsim.serve.compare.local_pool`);
- :class:`RayExecutor`: Ray tasks (the ``tune`` extra), on an existing cluster (``address``: ``auto`` or
  ``HOST:PORT``; its nodes need this specsim installed) or, without one, a local cluster of ``workers``
  CPUs that this executor starts, whose workers import the specsim this process imports, and stops.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.serve.compare import local_pool

EXECUTORS = ("local", "ray")
RAY_INSTALL = "python -m pip install -e '.[tune]'"


class LocalExecutor:
    """``jobs`` processes on this machine (1: this process); a context manager holding the pool."""

    def __init__(self, jobs: int = 1):
        self.jobs = int(jobs)
        self._pool = None

    def __enter__(self) -> LocalExecutor:
        self._pool = local_pool(self.jobs).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._pool.__exit__(*exc)
        self._pool = None

    def map(self, fn: Callable, items: Sequence) -> list:
        return list(self._pool.map(fn, items)) if items else []

    def describe(self) -> str:
        return f"local ({self.jobs} process{'es' if self.jobs > 1 else ''})"


class RayExecutor:
    """Ray tasks of one CPU each: on the cluster at ``address``, or on a local one of ``workers`` CPUs."""

    def __init__(self, address: str | None = None, workers: int = 2):
        self.address, self.workers = address, int(workers)
        self._started = False
        self._ray = None
        self._tasks: dict = {}  # fn -> its Ray remote function, exported once

    def __enter__(self) -> RayExecutor:
        ray = require_ray()
        if not ray.is_initialized():
            if self.address is None:
                root = str(Path(__file__).resolve().parents[2])  # the folder this specsim imports from
                path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
                ray.init(
                    address="local",
                    num_cpus=self.workers,
                    include_dashboard=False,
                    log_to_driver=False,
                    runtime_env={"env_vars": {"PYTHONPATH": path}},
                )
            else:
                try:
                    ray.init(address=self.address, log_to_driver=False)
                except (ConnectionError, ValueError, RuntimeError) as err:  # no cluster there, or refused
                    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                    raise SpecsimError(f"--ray-address {self.address}: {first}") from None
            self._started = True
        self._ray = ray
        return self

    def __exit__(self, *exc) -> None:
        if self._started:
            self._ray.shutdown()
        self._started = False

    def map(self, fn: Callable, items: Sequence) -> list:
        if not items:
            return []
        if fn not in self._tasks:
            self._tasks[fn] = self._ray.remote(num_cpus=1)(fn)
        task = self._tasks[fn]
        return self._ray.get([task.remote(x) for x in items])

    def describe(self) -> str:
        where = f"cluster {self.address}" if self.address else f"local cluster, {self.workers} workers"
        return f"ray ({where})"


def require_ray():
    """The ``ray`` module; SpecsimError naming what to install when it is absent."""
    try:
        import ray
    except ImportError:
        raise SpecsimError(
            f"--executor ray: needs the tune extra (ray is not installed): {RAY_INSTALL}"
        ) from None
    return ray


def make_executor(kind: str, *, jobs: int = 1, ray_address: str | None = None):
    """The executor ``kind`` names (``local`` or ``ray``), not yet entered."""
    if kind == "local":
        if ray_address is not None:
            raise SpecsimError("--ray-address: applies with --executor ray")
        return LocalExecutor(jobs)
    if kind == "ray":
        if ray_address is not None:
            check_ray_address(ray_address)
        require_ray()
        return RayExecutor(ray_address, jobs)
    raise SpecsimError(f"--executor: expected one of {list(EXECUTORS)}, got {kind!r}")


_HOST_PORT = re.compile(r"(?:ray://)?(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})")


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """SpecsimError unless ``address`` is ``auto`` or a HOST:PORT (``ray://`` for Ray Client) that accepts a
    connection within ``timeout_s``: Ray retries an unanswered address for minutes, and its errors are
    tracebacks."""
    if address == "auto":
        return
    m = _HOST_PORT.fullmatch(address)
    if m is None or not 0 < int(m["port"]) < 65536:
        raise SpecsimError(f"--ray-address: expected auto or HOST:PORT (ray://HOST:PORT for Ray Client), got "
                           f"{address!r}")  # fmt: skip
    try:
        socket.create_connection((m["host"].strip("[]"), int(m["port"])), timeout=timeout_s).close()
    except OSError as err:
        raise SpecsimError(
            f"--ray-address {address}: nothing answers there ({err.strerror or type(err).__name__}); "
            "start the cluster (ray start --head) or give --ray-address auto on one of its nodes"
        ) from None
