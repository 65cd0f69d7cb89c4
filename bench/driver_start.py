"""The CUDA driver's start, piece by piece, with nothing of ours loaded (ctypes only).

What a fresh GPU process pays before its first kernel: loading libcuda, cuInit (which grows with
the GPUs the driver sees), what can be asked of a device without a context, the primary
context, and loading a module (our sm_90 cubin, or any cubin given). `--exit fast` ends with
os._exit, skipping the driver's teardown at exit, so that the wall clock of two runs tells what
the teardown costs.

    python3 bench/driver_start.py [--cubin host/ptx/kernels_sm90a.cubin] [--exit normal|fast]
"""

import argparse
import ctypes
import json
import os
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubin", default=None)
    ap.add_argument("--exit", choices=["normal", "fast"], default="normal")
    a = ap.parse_args()
    t = {}
    clock = time.perf_counter
    start = clock()

    def mark(name):
        t[name] = round((clock() - start) * 1e3, 2)

    cuda = ctypes.CDLL("libcuda.so.1")
    mark("dlopen_ms")

    def call(name, *args):
        rc = getattr(cuda, name)(*args)
        if rc != 0:
            raise SystemExit(f"{name} failed: {rc}")

    call("cuInit", 0)
    mark("cuInit_ms")
    count = ctypes.c_int()
    call("cuDeviceGetCount", ctypes.byref(count))
    dev = ctypes.c_int()
    call("cuDeviceGet", ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", name, 256, dev)
    total = ctypes.c_size_t()
    call("cuDeviceTotalMem_v2", ctypes.byref(total), dev)
    value = ctypes.c_int()
    for attribute in (75, 76, 16, 97):  # compute capability, SMs, opt-in shared memory
        call("cuDeviceGetAttribute", ctypes.byref(value), attribute, dev)
    mark("device_queries_ms")
    ctx = ctypes.c_void_p()
    call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    call("cuCtxSetCurrent", ctx)
    mark("primary_context_ms")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    mark("mem_info_ms")
    if a.cubin:
        image = open(a.cubin, "rb").read()
        module = ctypes.c_void_p()
        call("cuModuleLoadData", ctypes.byref(module), image)
        mark("module_load_ms")
    t.update(gpus=count.value, name=name.value.decode(), visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    print(json.dumps(t), flush=True)
    if a.exit == "fast":
        os._exit(0)


if __name__ == "__main__":
    main()
