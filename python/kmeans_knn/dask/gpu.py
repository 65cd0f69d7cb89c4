"""A local Dask cluster with one worker per GPU."""

import os

from distributed import Nanny, Scheduler, SpecCluster

from .. import _engine


def visible_gpus():
    """The GPUs this process sees, as CUDA_VISIBLE_DEVICES entries (indices or UUIDs)."""
    count = _engine.gpu_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(count)]
    return [d.strip() for d in listed.split(",") if d.strip()][:count]


def local_gpu_cluster(devices=None, *, threads_per_worker=None, dashboard_address=":0", **kwargs):
    """A `distributed.SpecCluster` on this host with one worker process per GPU, each pinned to
    its GPU (its ``CUDA_VISIBLE_DEVICES`` is that GPU alone, so ``device="auto"`` there means
    that GPU). No dask-cuda needed.

    devices : CUDA_VISIBLE_DEVICES entries, one worker each (default: every visible GPU; a
        RuntimeError when there is none). threads_per_worker : default the host's cores divided
        among the workers (also each worker's RAYON_NUM_THREADS, for its CPU work).
    dashboard_address : the scheduler's dashboard and HTTP endpoints (default a free port).
        Other keyword arguments go to SpecCluster. Use it as ``Client(local_gpu_cluster())``.
    """
    devices = visible_gpus() if devices is None else [str(d) for d in devices]
    if not devices:
        raise RuntimeError("no CUDA GPU is visible: local_gpu_cluster needs one per worker")
    threads = threads_per_worker or max(1, (os.cpu_count() or 1) // len(devices))
    workers = {
        f"gpu-{device}": {
            "cls": Nanny,
            "options": {
                "nthreads": threads,
                "env": {"CUDA_VISIBLE_DEVICES": device, "RAYON_NUM_THREADS": str(threads)},
            },
        }
        for device in devices
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": dashboard_address}}
    return SpecCluster(workers=workers, scheduler=scheduler, **kwargs)
