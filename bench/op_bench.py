#!/usr/bin/env python3
"""Runs op_bench (tensord's kernels on the compute engine, and the same calls
through a daemon op_bench starts) and the same cases with PyTorch on the same
GPU, in one run, and prints a table of ratios.

    bench/op_bench.py BUILD/bench/op_bench [--repeats N] [--filter SUBSTRING]
                      [--tensord PATH | --no-client] [--json FILE]

tensord: N ops enqueued back to back and waited for once, per op (median of
5 trials, each at least 20 ms; wall time on the engine, the submit and the
final wait included). Beside it, per op: the device's time from Vulkan
timestamps ("device"), and the wall time of the same calls made through the
C++ client over loopback, waited for on the device ("client"). PyTorch: N
calls back to back between two CUDA events (device time; over 20 ms the
difference is small), trials as long, median of 5, after a warm-up trial.
Rows where Python issued PyTorch's calls no faster than the device ran them
are marked host-bound. "ratio" is tensord's engine figure over PyTorch's,
"client" the client's; > 1 means tensord is faster. Chain cases (_chainN)
are N calls each on the previous call's output, new outputs each time, per
call on both sides; their rows also show the device memory tensord reserved.
Independent cases (_indepN) are N calls on N distinct sets of tensors, per
call on both sides; PyTorch replays them from a CUDA graph, so its figure is
the device's, not Python's launch rate. With --json FILE the rows also go to
FILE as one JSON document, each with the kernel variants its calls
dispatched ("kernels")."""
import json
import subprocess
import sys
import time

import torch


def chain(op, calls):
    """`calls` calls, each on the previous one's output (add: plus the second input)."""
    def run(*args):
        y = args[0]
        for _ in range(calls):
            y = op(y, *args[1:])
        return y
    return run


def independent(op, calls, make_one):
    """`calls` calls of `op`, each on a set of tensors of its own (from
    `make_one`), captured once into a CUDA graph: (run, make) for torch_cases."""
    sets = []

    def make():
        sets[:] = [make_one() for _ in range(calls)]
        def once():
            for args in sets:
                op(*args)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            once()  # warm-up before capture, as CUDA graphs require
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            once()
        return (graph,)
    return (lambda graph: graph.replay()), make


def torch_cases():
    f32, f16 = torch.float32, torch.float16
    n = 16 << 20
    gib = 256 << 20
    big = lambda dt=f32: torch.randn(8192, 8192, device="cuda", dtype=dt)
    # conv2d of [n, c, hw, hw] by [o, c, k, k]; flops 2 * n * o * out^2 * c * k^2.
    def conv(n, c, hw, o, k, stride, pad, dt=f32):
        out = (hw + 2 * pad - k) // stride + 1
        return ((lambda x, w: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)),
                lambda: (torch.randn(n, c, hw, hw, device="cuda", dtype=dt), torch.randn(o, c, k, k, device="cuda", dtype=dt)),
                0, 2 * n * o * out * out * c * k * k)
    mm = lambda m, k, n, dt=f32: ((lambda a, b: a @ b), lambda: (torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)), 0, 2 * m * k * n)
    return {
        "add_f32_64MiB": ((lambda a, b: a + b), lambda: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda")), 3 * 64 * 2**20, 0),
        "relu_f32_64MiB": ((lambda a: torch.relu(a)), lambda: (torch.randn(n, device="cuda"),), 2 * 64 * 2**20, 0),
        "mul_f32_64MiB": ((lambda a, b: a * b), lambda: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda")), 3 * 64 * 2**20, 0),
        "gelu_f32_64MiB": ((lambda a: torch.nn.functional.gelu(a)), lambda: (torch.randn(n, device="cuda"),), 2 * 64 * 2**20, 0),
        # Chains: bytes per call, times divided by the calls (see main).
        "relu_f32_1MiB_chain10": (chain(torch.relu, 10), lambda: (torch.randn(1 << 18, device="cuda"),), 2 * 2**20, 0),
        "relu_f32_64MiB_chain10": (chain(torch.relu, 10), lambda: (torch.randn(n, device="cuda"),), 2 * 64 * 2**20, 0),
        "relu_f32_1GiB_chain10": (chain(torch.relu, 10), lambda: (torch.randn(gib, device="cuda"),), 2 * 2**30, 0),
        "add_f32_1GiB_chain10": (chain(torch.add, 10), lambda: (torch.randn(gib, device="cuda"), torch.randn(gib, device="cuda")), 3 * 2**30, 0),
        "exp_f16_32MiB": ((lambda a: torch.exp(a)), lambda: (torch.randn(n, device="cuda", dtype=f16),), 2 * 32 * 2**20, 0),
        "sum_all_8192x8192": ((lambda a: a.sum()), lambda: (big(),), 4 * 8192 * 8192, 0),
        "sum_rows_8192x8192": ((lambda a: a.sum(1)), lambda: (big(),), 4 * 8192 * 8192, 0),
        "sum_cols_8192x8192": ((lambda a: a.sum(0)), lambda: (big(),), 4 * 8192 * 8192, 0),
        "sum_64x4M_rows": ((lambda a: a.sum(1)), lambda: (torch.randn(64, 1 << 22, device="cuda"),), 4 * 64 * 2**22, 0),
        "amax_all_8192x8192": ((lambda a: a.amax()), lambda: (big(),), 4 * 8192 * 8192, 0),
        "mean_rows_8192x8192": ((lambda a: a.mean(1)), lambda: (big(),), 4 * 8192 * 8192, 0),
        "mean_cols_8192x8192": ((lambda a: a.mean(0)), lambda: (big(),), 4 * 8192 * 8192, 0),
        "mean_64x4M_rows": ((lambda a: a.mean(1)), lambda: (torch.randn(64, 1 << 22, device="cuda"),), 4 * 64 * 2**22, 0),
        "amax_rows_8192x8192": ((lambda a: a.amax(1)), lambda: (big(),), 4 * 8192 * 8192, 0),
        "amax_cols_8192x8192": ((lambda a: a.amax(0)), lambda: (big(),), 4 * 8192 * 8192, 0),
        "sum_rows_131072x512": ((lambda a: a.sum(1)), lambda: (torch.randn(131072, 512, device="cuda"),), 4 * 8192 * 8192, 0),
        "sum_f16_all_8192x8192": ((lambda a: a.sum()), lambda: (big(f16),), 2 * 8192 * 8192, 0),
        "argmax_all_8192x8192": ((lambda a: a.argmax()), lambda: (big(),), 4 * 8192 * 8192, 0),
        "var_rows_8192x8192": ((lambda a: a.var(1)), lambda: (big(),), 4 * 8192 * 8192, 0),
        "softmax_4096x4096": ((lambda a: torch.softmax(a, -1)), lambda: (torch.randn(4096, 4096, device="cuda"),), 2 * 4 * 4096 * 4096, 0),
        "layer_norm_8192x1024": ((lambda a: torch.nn.functional.layer_norm(a, (1024,))), lambda: (torch.randn(8192, 1024, device="cuda"),), 2 * 4 * 8192 * 1024, 0),
        "rms_norm_8192x1024": ((lambda a: torch.nn.functional.rms_norm(a, (1024,))), lambda: (torch.randn(8192, 1024, device="cuda"),), 2 * 4 * 8192 * 1024, 0),
        **{f"matmul_f32_{n}": mm(n, n, n) for n in (1024, 2048, 4096, 8192, 4095)},
        "matmul_f32_4096_nan": ((lambda a, b: a @ b), lambda: (torch.full((4096, 4096), float("nan"), device="cuda"), torch.randn(4096, 4096, device="cuda")), 0, 2 * 4096**3),
        **{f"matmul_f16_{n}": mm(n, n, n, f16) for n in (1024, 2048, 4096, 8192)},
        "matmul_f16_4095": mm(4095, 4095, 4095, f16),
        "matmul_f16_1023": mm(1023, 1023, 1023, f16),
        "matmul_f16_255": mm(255, 255, 255, f16),
        "linear_f16_8192x768x50257": ((lambda x, w: torch.nn.functional.linear(x, w)), lambda: (torch.randn(8192, 768, device="cuda", dtype=f16), torch.randn(50257, 768, device="cuda", dtype=f16)), 0, 2 * 8192 * 768 * 50257),
        "matmul_f16_512x32768x512": mm(512, 32768, 512, f16),
        "matmul_f16_1024x16384x1024": mm(1024, 16384, 1024, f16),
        "matmul_f16_64x576x100352": mm(64, 576, 100352, f16),
        **{f"matmul_bf16_{n}": mm(n, n, n, torch.bfloat16) for n in (1024, 2048, 4096, 8192)},
        "matmul_f32_8192x1024x4096": mm(8192, 1024, 4096),
        "matmul_f16_8192x1024x4096": mm(8192, 1024, 4096, f16),
        "bmm_f32_32x512x64x512": ((lambda a, b: torch.bmm(a, b)), lambda: (torch.randn(32, 512, 64, device="cuda"), torch.randn(32, 64, 512, device="cuda")), 0, 2 * 32 * 512 * 64 * 512),
        "bmm_f16_32x512x64x512": ((lambda a, b: torch.bmm(a, b)), lambda: (torch.randn(32, 512, 64, device="cuda", dtype=f16), torch.randn(32, 64, 512, device="cuda", dtype=f16)), 0, 2 * 32 * 512 * 64 * 512),
        "matmul_f32_256x65536x256": mm(256, 65536, 256),
        "matmul_f32_512x32768x512": mm(512, 32768, 512),
        "matmul_f32_1024x16384x1024": mm(1024, 16384, 1024),
        "linear_f32_8192x4096x4096": ((lambda x, w, b: torch.nn.functional.linear(x, w, b)), lambda: (torch.randn(8192, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda"), torch.randn(4096, device="cuda")), 0, 2 * 8192 * 4096 * 4096),
        "linear_f16_8192x4096x4096": ((lambda x, w, b: torch.nn.functional.linear(x, w, b)), lambda: (torch.randn(8192, 4096, device="cuda", dtype=f16), torch.randn(4096, 4096, device="cuda", dtype=f16), torch.randn(4096, device="cuda", dtype=f16)), 0, 2 * 8192 * 4096 * 4096),
        "linear_f16_64x4096x4096": ((lambda x, w, b: torch.nn.functional.linear(x, w, b)), lambda: (torch.randn(64, 4096, device="cuda", dtype=f16), torch.randn(4096, 4096, device="cuda", dtype=f16), torch.randn(4096, device="cuda", dtype=f16)), 0, 2 * 64 * 4096 * 4096),
        "bmm_f32_32x1024x1024": ((lambda a, b: torch.bmm(a, b)), lambda: (torch.randn(32, 1024, 1024, device="cuda"), torch.randn(32, 1024, 1024, device="cuda")), 0, 2 * 32 * 1024**3),
        "conv2d_8x64x56x56_k3": ((lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)), lambda: (torch.randn(8, 64, 56, 56, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda")), 0, 2 * 8 * 64 * 56 * 56 * 64 * 9),
        "conv2d_32x64x56x56_k3": conv(32, 64, 56, 64, 3, 1, 1),
        "conv2d_32x128x28x28_k3": conv(32, 128, 28, 128, 3, 1, 1),
        "conv2d_32x256x14x14_k3": conv(32, 256, 14, 256, 3, 1, 1),
        "conv2d_32x256x56x56_k1_to64": conv(32, 256, 56, 64, 1, 1, 0),
        "conv2d_32x64x56x56_k1_to256": conv(32, 64, 56, 256, 1, 1, 0),
        "conv2d_32x512x28x28_k1_to128": conv(32, 512, 28, 128, 1, 1, 0),
        "conv2d_32x1024x14x14_k1_to256": conv(32, 1024, 14, 256, 1, 1, 0),
        "conv2d_32x2048x7x7_k1_to512": conv(32, 2048, 7, 512, 1, 1, 0),
        "conv2d_32x3x224x224_k7s2": conv(32, 3, 224, 64, 7, 2, 3),
        "conv2d_f16_32x64x56x56_k3": conv(32, 64, 56, 64, 3, 1, 1, f16),
        "conv2d_f16_32x128x28x28_k3": conv(32, 128, 28, 128, 3, 1, 1, f16),
        "conv2d_f16_32x256x14x14_k3": conv(32, 256, 14, 256, 3, 1, 1, f16),
        "conv2d_bf16_32x64x56x56_k3": conv(32, 64, 56, 64, 3, 1, 1, torch.bfloat16),
        "conv2d_f16_32x256x56x56_k1_to64": conv(32, 256, 56, 64, 1, 1, 0, f16),
        "add_f32_256KiB_indep64": (*independent(lambda a, b, c: torch.add(a, b, out=c), 64, lambda: tuple(torch.randn(64 << 10, device="cuda") for _ in range(3))), 3 * 256 * 1024, 0),
        "add_f32_64B_indep64": (*independent(lambda a, b, c: torch.add(a, b, out=c), 64, lambda: tuple(torch.randn(16, device="cuda") for _ in range(3))), 3 * 64, 0),
        "add_f32_4MiB_indep64": (*independent(lambda a, b, c: torch.add(a, b, out=c), 64, lambda: tuple(torch.randn(1 << 20, device="cuda") for _ in range(3))), 3 * 4 * 2**20, 0),
        "layer_norm_256x1024_indep64": (*independent(lambda a: torch.nn.functional.layer_norm(a, (1024,)), 64, lambda: (torch.randn(256, 1024, device="cuda"),)), 2 * 4 * 256 * 1024, 0),
        "conv_transpose2d_32x128x28x28_k4s2": ((lambda x, w: torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1)), lambda: (torch.randn(32, 128, 28, 28, device="cuda"), torch.randn(128, 64, 4, 4, device="cuda")), 0, 2 * 32 * 128 * 28 * 28 * 64 * 16),
    }


def time_torch(fn, args, repeats, min_trial=0.02):
    """Per call, as op_bench times tensord: n calls back to back between two
    CUDA events, n at least `repeats` and enough for a trial of `min_trial`
    seconds, after a warm-up trial as long; the median of 5 trials. (Single
    calls timed one at a time include each call's launch in its time, and
    read short ops up to 2x slow.) Returns (seconds per call, whether the
    host took as long to issue the calls as the device to run them: then
    the figure is Python's launch rate, not the GPU's)."""
    def trial(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        issued = time.perf_counter() - t0
        end.record()
        torch.cuda.synchronize()
        device = start.elapsed_time(end) / 1e3
        return device / n, issued >= 0.9 * device

    fn(*args)
    torch.cuda.synchronize()
    n = max(repeats, 1)
    first, _ = trial(n)
    if first * n < min_trial:
        n = max(n, min(int(min_trial / first) + 1, 100000))
    trial(n)  # warm-up, as long as a trial
    times = sorted(trial(n) for _ in range(5))
    return times[2]


def option(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    binary = sys.argv[1]
    repeats = int(option("--repeats", 10))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # tensord sums f16 and bf16 products (split K's slices too) in f32.
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    args = [binary, "--repeats", str(repeats)]
    for name in ("--filter", "--tensord"):
        if name in sys.argv:
            args += [name, option(name)]
    if "--no-client" in sys.argv:
        args.append("--no-client")
    # op_bench exits 1 when a case failed; its rows say which, and the rest stand.
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    if not rows:
        sys.exit(f"{binary} printed nothing (exit status {run.returncode})")
    device = rows[0].get("device", "?")
    print(f"tensord device: {device}; PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; median of {repeats}")
    print(f"{'case':28} {'tensord':>14} {'device':>9} {'client':>9} {'PyTorch':>14} {'ratio':>7} {'client':>7}")
    doc = {"bench": "op", "device": device, "torch": torch.__version__, "torch_device": torch.cuda.get_device_name(),
           "repeats": repeats, "device_time": rows[0].get("device_time", False), "client": rows[0].get("client", False),
           "rows": []}
    ref = torch_cases()
    for r in rows[1:]:
        name = r["case"]
        if "error" in r:
            print(f"{name:28} error: {r['error']}")
            doc["rows"].append({"case": name, "error": r["error"]})
            continue
        if name not in ref:
            print(f"{name:28} error: no PyTorch reference for this case in {sys.argv[0]}")
            doc["rows"].append({"case": name, "error": "no PyTorch reference"})
            continue
        fn, make, nbytes, flops = ref[name]
        t, host_bound = time_torch(fn, make(), repeats)
        calls = int(name.rsplit("_chain", 1)[1]) if "_chain" in name else 1
        calls = int(name.rsplit("_indep", 1)[1]) if "_indep" in name else calls
        t /= calls
        unit = "TFLOP/s" if flops else "GB/s"
        work = flops / 1e12 if flops else nbytes / 1e9
        mine = work / r["seconds"]
        theirs = work / t
        dev = work / r["device_seconds"] if "device_seconds" in r else None
        cli = work / r["client_seconds"] if "client_seconds" in r else None
        extra = ""
        if "peak_reserved_bytes" in r:
            grown = (r["peak_reserved_bytes"] - r["reserved_before_bytes"]) / 2**20
            extra = f"  (reserved {grown:.0f} MiB more at peak; cold {r['cold_seconds'] * 1e3:.2f} ms per call)"
        if host_bound:
            extra += "  (PyTorch host-bound: its calls took as long to issue as to run)"
        if "client_error" in r:
            extra += f"  (client: {r['client_error']})"
        out = {"case": name, "unit": unit, "tensord": mine, "pytorch": theirs, "ratio": mine / theirs,
               "device": dev, "client": cli, "client_ratio": cli / theirs if cli else None,
               "tensord_seconds_per_call": r["seconds"], "device_seconds_per_call": r.get("device_seconds"),
               "client_seconds_per_call": r.get("client_seconds"), "pytorch_seconds_per_call": t,
               "host_bound": host_bound}
        out.update({k: r[k] for k in ("peak_reserved_bytes", "reserved_before_bytes", "cold_seconds", "client_error",
                                      "kernels")
                    if k in r})
        doc["rows"].append(out)
        fmt = lambda v, scale=1: f"{v * scale:9.1f}" if v is not None else f"{'-':>9}"
        cratio = f"{cli / theirs:6.2f}x" if cli else f"{'-':>7}"
        if not flops and theirs < 10:
            # A tiny op's GB/s rounds to nothing: its time per call says more.
            us = lambda key: r[key] * 1e6 if key in r else None
            print(f"{name:28} {r['seconds'] * 1e6:6.2f} us/call {fmt(us('device_seconds'))} {fmt(us('client_seconds'))} "
                  f"{t * 1e6:6.2f} us/call {mine / theirs:6.2f}x {cratio}{extra}")
            continue
        print(f"{name:28} {mine:9.1f} {unit:>4} {fmt(dev)} {fmt(cli)} {theirs:9.1f} {unit:>4} {mine / theirs:6.2f}x "
              f"{cratio}{extra}")
    if "--json" in sys.argv:
        with open(option("--json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 1 if run.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
