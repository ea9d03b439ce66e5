#!/usr/bin/env python3
"""The reference for bench/collective_bench: the same f32 allreduce (sum)
through torch.distributed with the gloo backend, N processes on loopback.

    bench/torch_gloo_allreduce.py --ranks N --sizes BYTES,BYTES,... [--iters N] [--seconds S]

Prints one JSON line per size on stdout, from rank 0:
    {"ranks": N, "bytes": B, "iters": I, "seconds": per-op time}
The per-op time of a size is the slowest rank's wall time of I back-to-back
allreduces (after one warm-up and a barrier), divided by I. I is --iters, or
with --seconds as many as fit in about S seconds (at least 2), measured the
way bench/collective_bench.cpp does."""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iterations(args, seconds_one):
    if args.iters:
        return args.iters
    return max(2, min(200, int(args.seconds / max(seconds_one, 1e-6))))


def worker(rank, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    for size in args.sizes:
        t = torch.full((size // 4,), float(rank + 1), dtype=torch.float32)
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(t)  # warm-up, and the estimate the iteration count comes from
        one = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(one, op=dist.ReduceOp.MAX)
        iters = iterations(args, one.item())
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(json.dumps({"ranks": args.ranks, "bytes": size, "iters": iters,
                              "seconds": elapsed.item() / iters}), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--sizes", required=True, help="comma-separated byte counts (multiples of 4)")
    parser.add_argument("--iters", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.ranks < 2 or any(s <= 0 or s % 4 for s in args.sizes):
        sys.exit("--ranks must be at least 2 and every size a positive multiple of 4")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(worker, args=(args, free_port()), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
