#!/usr/bin/env python3
"""f16 and bf16 matmul and softmax on tensord against PyTorch on the same
inputs, through a running daemon and tensorctl (TENSORD_ADDR etc. as usual).

    bench/half_vs_torch.py PATH/TO/tensorctl

Inputs are f32 values already representable in the half type; tensord casts
them with `to`, computes, and casts the result back to f32 for download.
PyTorch computes in the half type on CUDA if there is a GPU, else on the CPU.
Prints the largest error relative to max|reference| and checks it against
the conformance suite's tolerances (f16: 2e-3, bf16: 1.6e-2, plus the
accumulation's atol scaled by the reduction length for matmul)."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOL = {"f16": (1e-3, 2e-3), "bf16": (1e-2, 1.6e-2)}
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}


def run(ctl, *args):
    subprocess.run([ctl, *args], check=True, stdout=subprocess.DEVNULL)


def main():
    ctl = sys.argv[1]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    rng = np.random.default_rng(0)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for dt in ("f16", "bf16"):
            for m, k, n in ((256, 512, 384), (1000, 77, 130)):
                a = torch.tensor(rng.uniform(-1, 1, (m, k)), dtype=TORCH[dt])
                b = torch.tensor(rng.uniform(-1, 1, (k, n)), dtype=TORCH[dt])
                np.save(f"{tmp}/a.npy", a.float().numpy())
                np.save(f"{tmp}/b.npy", b.float().numpy())
                run(ctl, "put", "ha", f"{tmp}/a.npy")
                run(ctl, "put", "hb", f"{tmp}/b.npy")
                run(ctl, "call", "to", "ha", "--attr", f"dtype={dt}", "--out", "ha16")
                run(ctl, "call", "to", "hb", "--attr", f"dtype={dt}", "--out", "hb16")
                run(ctl, "call", "matmul", "ha16", "hb16", "--out", "hc16")
                run(ctl, "call", "softmax", "hc16", "--attr", "dim=1", "--out", "hs16")
                run(ctl, "call", "to", "hc16", "--attr", "dtype=f32", "--out", "hc")
                run(ctl, "call", "to", "hs16", "--attr", "dtype=f32", "--out", "hs")
                run(ctl, "get", "hc", f"{tmp}/c.npy")
                run(ctl, "get", "hs", f"{tmp}/s.npy")
                c_ref = (a.to(dev) @ b.to(dev)).float().cpu().numpy()
                # softmax of the *same* half matmul result tensord computed, so
                # both sides see identical inputs.
                c_mine = np.load(f"{tmp}/c.npy")
                s_ref = torch.softmax(torch.tensor(c_mine, dtype=TORCH[dt], device=dev), dim=1).float().cpu().numpy()
                atol, rtol = TOL[dt]
                for name, got, ref, scale in (("matmul", c_mine, c_ref, k), ("softmax", np.load(f"{tmp}/s.npy"), s_ref, 1)):
                    err = np.abs(got - ref)
                    bound = atol * scale + rtol * np.abs(ref)
                    fine = bool((err <= bound).all())
                    ok &= fine
                    print(f"{dt} {name} [{m}x{k}]@[{k}x{n}]: max |err| {err.max():.3g}, "
                          f"relative to max|ref| {err.max() / np.abs(ref).max():.3g}: {'within' if fine else 'OUTSIDE'} tolerance")
            for name in ("ha", "hb", "ha16", "hb16", "hc16", "hs16", "hc", "hs"):
                run(ctl, "rm", name)
    print(f"PyTorch {torch.__version__} on {dev}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
