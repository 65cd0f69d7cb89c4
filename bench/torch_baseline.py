"""PyTorch baseline for gpu-bench: the same Lloyd iteration written as a PyTorch user would
(||x||^2 - 2 x c^T + ||c||^2, argmin, index_add_ / bincount), exact FP32 (TF32 off), timed with
CUDA events after warm-up (at least 0.25 s of untimed runs; median). With --ours FILE (gpu-bench --json output) it prints speed-ups.

kNN rows give PyTorch twice: with the queries and the answer left on the GPU (cdist + topk
alone), and from and to host memory (NumPy queries up, distances and indices back), which is
what gpu-bench times for ours.

With --whole, the whole job as a PyTorch user writes it, for the k-means cases: greedy
k-means++ with the 2 + ln k trials of a step batched (one [trials, n] distance matrix per step,
torch.multinomial for the draws), then Lloyd to convergence (tol 1e-4 x mean variance, as ours)
and with 20 fixed iterations; wall clock with torch.cuda.synchronize, beside gpu-bench --whole's
rows (--ours) with the inertia of both.

usage: python3 torch_baseline.py [--cases A,B,...] [--reps N] [--ours gpu-bench.jsonl]
                                 [--out results.json] [--whole]
--out writes every row (times, floor, speed-up) as JSON for bench/chart.py.
"""
import argparse
import json
import math
import time

import torch

KNN_CASES = {
    "S": (1200, 32_768, 256, 25),
    "S512": (1200, 32_768, 256, 512),
    "F": (10_000, 1_000_000, 128, 100),
    # The sweep of k on S (with S and S512), run when asked for by name.
    "S1": (1200, 32_768, 256, 1),
    "S100": (1200, 32_768, 256, 100),
    "S1024": (1200, 32_768, 256, 1024),
    "S2048": (1200, 32_768, 256, 2048),
}

CASES = {
    "A": (63_504, 75, 80),
    "B": (1_000_000, 9, 16),
    "C": (1_048_576, 3, 255),
    "C1": (1_048_576, 3, 255),
    "D": (200_000, 128, 1024),
    "E": (10_000_000, 128, 1024),
}


# Cases assigned by the L1 distance (seed 003's segmentation), with means as the update as ours.
L1_CASES = {"C1"}


def lloyd_iteration(x, x2, c, chunk, l1=False):
    n, d = x.shape
    k = c.shape[0]
    c2 = (c * c).sum(1)
    labels = torch.empty(n, dtype=torch.long, device=x.device)
    for s in range(0, n, chunk):
        xs = x[s:s + chunk]
        if l1:
            dist = torch.cdist(xs, c, p=1)
        else:
            dist = x2[s:s + chunk, None] - 2.0 * (xs @ c.T) + c2[None, :]
        labels[s:s + chunk] = dist.argmin(1)
    sums = torch.zeros(k, d, device=x.device).index_add_(0, labels, x)
    counts = torch.bincount(labels, minlength=k).clamp_min(1).to(x.dtype)
    return sums / counts[:, None]


# Untimed work before the timed runs: at least this long (as gpu-bench does), so that the GPU
# has left its idle clocks.
WARMUP_SECONDS = 0.25


def median_ms(f, reps, warmup=3):
    """Median CUDA-event time of f() over `reps` runs, after `warmup` runs and WARMUP_SECONDS."""
    began = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - began < WARMUP_SECONDS:
        f()
        torch.cuda.synchronize()
        done += 1
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def measured_rates():
    """FP32 matrix-product rate (TF32 off) and device-to-device copy bandwidth of this GPU."""
    a = torch.rand(8192, 8192, device="cuda")
    b = torch.rand(8192, 8192, device="cuda")
    src = torch.empty(1 << 30, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)

    flops = 2 * 8192**3 / (median_ms(lambda: a @ b, 10) * 1e-3)
    bandwidth = 2 * src.numel() * 4 / (median_ms(lambda: dst.copy_(src), 10) * 1e-3)
    del a, b, src, dst
    torch.cuda.empty_cache()
    return flops, bandwidth


def knn_search(q, x, x2, k, chunk):
    """Exact kNN the PyTorch way: squared distances by GEMM, then topk, query rows chunked."""
    out_d, out_i = [], []
    for s in range(0, q.shape[0], chunk):
        qs = q[s:s + chunk]
        dist = (qs * qs).sum(1)[:, None] - 2.0 * (qs @ x.T) + x2[None, :]
        d, i = dist.topk(k, dim=1, largest=False)
        out_d.append(d)
        out_i.append(i)
    return torch.cat(out_d), torch.cat(out_i)


def knn_search_host(q_host, x, x2, k, chunk):
    """The same search from and to host memory, as a caller with NumPy queries runs it (and as
    gpu-bench times ours): the queries go up, the distances and (int64) indices come back."""
    d, i = knn_search(torch.from_numpy(q_host).cuda(), x, x2, k, chunk)
    return d.cpu().numpy(), i.cpu().numpy()


def kmeans_plus_plus(x, k, gen):
    """Greedy k-means++ with each step's trials batched: sklearn's algorithm on the GPU."""
    n = x.shape[0]
    trials = 2 + int(math.log(k))
    first = torch.randint(n, (1,), device=x.device, generator=gen)
    centres = [first]
    closest = ((x - x[first]) ** 2).sum(1)
    x2 = (x * x).sum(1)
    for _ in range(1, k):
        cand = torch.multinomial(closest, trials, replacement=True, generator=gen)
        d = x2[None, :] - 2.0 * (x[cand] @ x.T) + x2[cand][:, None]
        d = torch.minimum(d.clamp_min_(0), closest[None, :])
        best = d.sum(1).argmin()
        closest = d[best]
        centres.append(cand[best:best + 1])
    return x[torch.cat(centres)].clone()


def lloyd(x, c, max_iter, tol, chunk):
    x2 = (x * x).sum(1)
    for it in range(1, max_iter + 1):
        new = lloyd_iteration(x, x2, c, chunk)
        shift = ((new - c) ** 2).sum().item()
        c = new
        if shift <= tol:
            break
    c2 = (c * c).sum(1)
    inertia = 0.0
    for s in range(0, x.shape[0], chunk):
        xs = x[s:s + chunk]
        d = x2[s:s + chunk, None] - 2.0 * (xs @ c.T) + c2[None, :]
        inertia += d.min(1).values.clamp_min(0).sum().item()
    return c, it, inertia


def whole_jobs(args, whole_ours):
    print(f"{'case':<4} {'whole job':<28} {'torch init ms':>13} {'torch fit ms':>12} "
          f"{'torch inertia':>14} {'ours init ms':>12} {'ours fit ms':>11} {'ours inertia':>13}")
    # (The L1 cases have no PyTorch whole fit here: its k-means++ and Lloyd are squared L2.)
    for name in [c for c in args.cases.split(",") if c in CASES and c not in L1_CASES]:
        n, d, k = CASES[name]
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.rand(n, d, device="cuda", generator=g)
        chunk = max(1, min(n, (2 << 30) // (4 * k)))
        tol = 1e-4 * x.var(0).mean().item()
        for label, max_iter, t in [("to convergence", 300, tol), ("20 iterations", 20, 0.0)]:
            gen = torch.Generator(device="cuda").manual_seed(0)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            c = kmeans_plus_plus(x, k, gen)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            _, iters, inertia = lloyd(x, c, max_iter, t, chunk)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            ours_row = next((r for (case, job), r in whole_ours.items()
                             if case == name and job.startswith("fit") and label.split()[0] in job), {})
            oi, of, oin = (ours_row.get("init_ms"), ours_row.get("fit_ms"), ours_row.get("inertia"))
            fmt = lambda v, w, p: f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}}"
            print(f"{name:<4} {'kmeans++, ' + label:<28} {1e3 * (t1 - t0):13.1f} "
                  f"{1e3 * (t2 - t0):12.1f} {inertia:14.6e} {fmt(oi, 12, 1)} {fmt(of, 11, 1)} "
                  f"{oin if oin is not None else '-':>13}", flush=True)
        del x
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="A,B,C,C1,D,E,S,S512,F")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--ours")
    ap.add_argument("--out")
    ap.add_argument("--whole", action="store_true")
    args = ap.parse_args()
    results = {"kmeans": [], "knn": []}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ours, whole_ours = {}, {}
    if args.ours:
        with open(args.ours) as f:
            for line in f:
                r = json.loads(line)
                if "whole_job" in r:
                    whole_ours[(r["case"], r["whole_job"])] = r
                else:
                    ours[r["case"]] = r
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    fp32, bandwidth = measured_rates()
    results["fp32_flops"], results["bandwidth"] = fp32, bandwidth
    results["gpu"] = torch.cuda.get_device_name()
    print(f"measured: FP32 {fp32 / 1e12:.1f} TFLOP/s, copy {bandwidth / 1e12:.2f} TB/s")
    print("floor = max(2·n·k·d / FP32 rate, n·d·4 bytes / bandwidth)")
    if args.whole:
        whole_jobs(args, whole_ours)
    print(f"{'case':<4} {'torch ms':>10} {'ours ms':>10} {'speed-up':>9} {'floor ms':>9} {'ours/floor':>10}")
    for name in [c for c in args.cases.split(",") if c in CASES]:
        n, d, k = CASES[name]
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.rand(n, d, device="cuda", generator=g)
        c = x[:k].clone()
        x2 = (x * x).sum(1)
        chunk = max(1, min(n, (2 << 30) // (4 * k)))
        t = median_ms(lambda: lloyd_iteration(x, x2, c, chunk, name in L1_CASES), args.reps)
        o = ours.get(name, {}).get("median_ms")
        floor = 1e3 * max(2 * n * k * d / fp32, n * d * 4 / bandwidth)
        ratio = f"{t / o:9.2f}" if o else f"{'-':>9}"
        o_str = f"{o:10.3f}" if o else f"{'-':>10}"
        vs_floor = f"{o / floor:10.2f}" if o else f"{'-':>10}"
        print(f"{name:<4} {t:10.3f} {o_str} {ratio} {floor:9.3f} {vs_floor}")
        results["kmeans"].append(
            {"case": name, "n": n, "d": d, "k": k, "torch_ms": t, "ours_ms": o, "floor_ms": floor})
        del x, x2, c
        torch.cuda.empty_cache()

    knn = [c for c in args.cases.split(",") if c in KNN_CASES]
    if knn:
        print(f"{'knn':<5} {'torch ms':>10} {'host→host':>10} {'ours ms':>10} {'speed-up':>9} "
              f"{'vs host→host':>12}")
    for name in knn:
        m, n, d, k = KNN_CASES[name]
        g = torch.Generator(device="cuda").manual_seed(2)
        x = torch.rand(n, d, device="cuda", generator=g)
        q = torch.rand(m, d, device="cuda", generator=g)
        x2 = (x * x).sum(1)
        chunk = max(1, min(m, (2 << 30) // (4 * n)))
        # As gpu-bench: searches of 10^9 distances or more take tens of milliseconds, five suffice.
        reps = min(args.reps, 5) if m * n >= 1_000_000_000 else args.reps
        t = median_ms(lambda: knn_search(q, x, x2, k, chunk), reps, warmup=2)
        # Ours is timed from and to host memory; this is PyTorch doing the same.
        q_host = q.cpu().numpy()
        th = median_ms(lambda: knn_search_host(q_host, x, x2, k, chunk), reps, warmup=2)
        o = ours.get(name, {}).get("median_ms")
        ratio = f"{t / o:9.2f}" if o else f"{'-':>9}"
        ratio_host = f"{th / o:12.2f}" if o else f"{'-':>12}"
        o_str = f"{o:10.3f}" if o else f"{'-':>10}"
        print(f"{name:<5} {t:10.3f} {th:10.3f} {o_str} {ratio} {ratio_host}")
        results["knn"].append({"case": name, "m": m, "n": n, "d": d, "k": k, "torch_ms": t,
                               "torch_host_ms": th, "ours_ms": o})
        del x, q, x2
        torch.cuda.empty_cache()

    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
