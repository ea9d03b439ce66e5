#!/usr/bin/env python3
"""Runs op_bench (tensord's kernels on the compute engine) and the same cases
with PyTorch on the same GPU, in one run, and prints a table of ratios.

    bench/op_bench.py BUILD/bench/op_bench [--repeats N] [--filter SUBSTRING]

tensord: N ops enqueued back to back and waited for once, per op (median of
3). PyTorch: the median of N single calls timed with CUDA events, after one
warm-up. Ratio > 1 means tensord is faster."""
import json
import subprocess
import sys

import torch


def torch_cases():
    f32, f16 = torch.float32, torch.float16
    n = 16 << 20
    big = lambda dt=f32: torch.randn(8192, 8192, device="cuda", dtype=dt)
    mm = lambda m, k, n, dt=f32: ((lambda a, b: a @ b), lambda: (torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)), 0, 2 * m * k * n)
    return {
        "add_f32_64MiB": ((lambda a, b: a + b), lambda: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda")), 3 * 64 * 2**20, 0),
        "relu_f32_64MiB": ((lambda a: torch.relu(a)), lambda: (torch.randn(n, device="cuda"),), 2 * 64 * 2**20, 0),
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
        **{f"matmul_f32_{n}": mm(n, n, n) for n in (1024, 2048, 4096, 8192, 4095)},
        **{f"matmul_f16_{n}": mm(n, n, n, f16) for n in (2048, 4096, 8192)},
        "matmul_bf16_4096": mm(4096, 4096, 4096, torch.bfloat16),
        "matmul_f32_256x65536x256": mm(256, 65536, 256),
        "linear_f32_8192x4096x4096": ((lambda x, w, b: torch.nn.functional.linear(x, w, b)), lambda: (torch.randn(8192, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda"), torch.randn(4096, device="cuda")), 0, 2 * 8192 * 4096 * 4096),
        "linear_f16_8192x4096x4096": ((lambda x, w, b: torch.nn.functional.linear(x, w, b)), lambda: (torch.randn(8192, 4096, device="cuda", dtype=f16), torch.randn(4096, 4096, device="cuda", dtype=f16), torch.randn(4096, device="cuda", dtype=f16)), 0, 2 * 8192 * 4096 * 4096),
        "bmm_f32_32x1024x1024": ((lambda a, b: torch.bmm(a, b)), lambda: (torch.randn(32, 1024, 1024, device="cuda"), torch.randn(32, 1024, 1024, device="cuda")), 0, 2 * 32 * 1024**3),
        "conv2d_8x64x56x56_k3": ((lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)), lambda: (torch.randn(8, 64, 56, 56, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda")), 0, 2 * 8 * 64 * 56 * 56 * 64 * 9),
    }


def time_torch(fn, args, repeats):
    fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    binary = sys.argv[1]
    repeats = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 10
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    args = [binary, "--repeats", str(repeats)]
    if "--filter" in sys.argv:
        args += ["--filter", sys.argv[sys.argv.index("--filter") + 1]]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    device = rows[0].get("device", "?")
    print(f"tensord device: {device}; PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; median of {repeats}")
    print(f"{'case':28} {'tensord':>14} {'PyTorch':>14} {'ratio':>7}")
    ref = torch_cases()
    for r in rows[1:]:
        name = r["case"]
        if "error" in r:
            print(f"{name:28} error: {r['error']}")
            continue
        fn, make, nbytes, flops = ref[name]
        t = time_torch(fn, make(), repeats)
        unit = "TFLOP/s" if flops else "GB/s"
        mine = r.get("tflops", r.get("gbps"))
        theirs = flops / t / 1e12 if flops else nbytes / t / 1e9
        print(f"{name:28} {mine:9.1f} {unit:>4} {theirs:9.1f} {unit:>4} {mine / theirs:6.2f}x")


if __name__ == "__main__":
    main()
