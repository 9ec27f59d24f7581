#!/usr/bin/env python3
"""torch-peak.py SIZES TIME: PyTorch's pinned-memory copy bandwidth.

Run by gpu-check.sh on a GPU host whose Python has torch, beside
`ompalloc bench`, so that ompalloc's transfers can be compared with
PyTorch's in the same run. SIZES is a comma-separated list (4K,64M,1G) or
"default" (4 KiB .. 1 GiB in powers of 4, as the bench); TIME is the
measuring time per case as a Go duration (200ms, 1s). For each direction and
size it copies between a pin_memory() host tensor and a device tensor with
copy_(non_blocking=True) followed by torch.cuda.synchronize(), as a PyTorch
program with a pinned staging tensor does, and prints JSON on stdout:

  {"schema": "ompalloc-torch/1", "torch": VERSION, "device": NAME,
   "results": [{"group": "h2d"|"d2h", "series": "torch pinned",
                "size_bytes": N, "gb_per_s": X, "iterations": K}, ...]}

Without CUDA it prints {"schema": ..., "error": "..."} and exits 1.
"""
import json
import sys
import time

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(s):
    s = s.strip().upper().removesuffix("IB").removesuffix("B")
    mult = UNITS.get(s[-1:], 1)
    if s[-1:] in UNITS:
        s = s[:-1]
    n = int(s) * mult
    if n <= 0:
        raise ValueError(f"size {s!r}: want a positive size")
    return n


def parse_duration(s):
    for suffix, mult in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("s", 1.0), ("m", 60.0)):
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    raise ValueError(f"duration {s!r}: want a Go duration such as 200ms")


def sizes_of(arg):
    if arg == "default":
        out, v = [], 4 << 10
        while v <= 1 << 30:
            out.append(v)
            v *= 4
        return out
    return [parse_size(x) for x in arg.split(",") if x.strip()]


def measure(budget, op):
    """Seconds per op: one untimed op, then growing rounds, as the bench."""
    op()
    n, spent = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(n):
            op()
        el = max(time.perf_counter() - start, 1e-9)
        spent += el
        if el >= budget / 3 or spent >= budget:
            return el / n, n
        n = max(n * 2, min(int((budget / 2) / (el / n)), n * 100))


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sizes, budget = sizes_of(argv[1]), parse_duration(argv[2])
    import torch

    report = {"schema": "ompalloc-torch/1", "torch": torch.__version__}
    if not torch.cuda.is_available():
        report["error"] = "torch.cuda.is_available() is False"
        print(json.dumps(report, indent=2))
        return 1
    report["device"] = torch.cuda.get_device_name(0)
    big = max(sizes)
    host = torch.empty(big, dtype=torch.uint8).pin_memory()
    dev = torch.empty(big, dtype=torch.uint8, device="cuda")
    results = []
    for group in ("h2d", "d2h"):
        for n in sizes:
            h, d = host[:n], dev[:n]
            if group == "h2d":
                def op():
                    d.copy_(h, non_blocking=True)
                    torch.cuda.synchronize()
            else:
                def op():
                    h.copy_(d, non_blocking=True)
                    torch.cuda.synchronize()
            per, iters = measure(budget, op)
            results.append({"group": group, "series": "torch pinned", "size_bytes": n,
                            "gb_per_s": n / per / 1e9, "iterations": iters})
    report["results"] = results
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
