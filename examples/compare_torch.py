#!/usr/bin/env python3
"""Replays a training example in PyTorch from the same initial weights and data
and compares the losses step by step.

    example_mlp --epochs 3 --dump DIR      # tensord: writes DIR/*.npy
    python3 examples/compare_torch.py mlp DIR [--steps N] [--rtol R]

Each model here mirrors the C++ example of the same name (examples/*.cpp):
same layers, same optimizer and hyperparameters, same batch order. The
losses must agree within --rtol (relative) for the first --steps steps
(default 1e-4 over 10 steps; f32 rounding differs between the two, as
reductions sum in different orders, and the difference grows with the
steps compared). Needs numpy and torch (Debian: python3-torch), CPU is enough.
"""
import argparse
import glob
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def load(d, name):
    return torch.from_numpy(np.load(os.path.join(d, name + ".npy")))


def batches(d):
    n = len(glob.glob(os.path.join(d, "x*.npy")))
    return [(load(d, f"x{b}"), load(d, f"y{b}")) for b in range(n)]


def params(d, names):
    return {n: load(d, n).clone().requires_grad_(True) for n in names}


def mlp(d):
    p = params(d, ["w1", "b1", "w2", "b2"])
    opt = torch.optim.AdamW(p.values(), lr=1e-2)

    def loss(x, y):
        h = F.relu(F.linear(x, p["w1"], p["b1"]))
        return F.cross_entropy(F.linear(h, p["w2"], p["b2"]), y)

    return opt, loss


def cnn(d):
    p = params(d, ["conv_w", "conv_b", "bn_w", "bn_b", "fc_w", "fc_b"])
    running_mean, running_var = load(d, "running_mean").clone(), load(d, "running_var").clone()
    opt = torch.optim.Adam(p.values(), lr=1e-2)

    def loss(x, y):
        h = F.conv2d(x, p["conv_w"], p["conv_b"], padding=1)
        h = F.batch_norm(h, running_mean, running_var, p["bn_w"], p["bn_b"], training=True)
        h = F.max_pool2d(F.relu(h), 2).flatten(1)
        return F.cross_entropy(F.linear(h, p["fc_w"], p["fc_b"]), y)

    return opt, loss


def transformer(d):
    names = ["tok_emb", "pos_emb", "ln1_w", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
             "ln2_w", "ln2_b", "w1", "b1", "w2", "b2", "wout", "bout"]
    p = params(d, names)
    opt = torch.optim.AdamW([p[n] for n in names], lr=1e-2, weight_decay=0.0)
    E, Hh = p["wq"].shape[0], 2

    def loss(x, y):
        B, T = x.shape
        heads = lambda t: t.reshape(B, T, Hh, E // Hh).transpose(1, 2)
        h = F.embedding(x, p["tok_emb"]) + p["pos_emb"]
        a = F.layer_norm(h, (E,), p["ln1_w"], p["ln1_b"])
        q, k, v = (heads(F.linear(a, p["w" + n], p["b" + n])) for n in "qkv")
        s = q @ k.transpose(-1, -2) / math.sqrt(E // Hh)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        att = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, E)
        h = h + F.linear(att, p["wo"], p["bo"])
        m = F.layer_norm(h, (E,), p["ln2_w"], p["ln2_b"])
        h = h + F.linear(F.gelu(F.linear(m, p["w1"], p["b1"])), p["w2"], p["b2"])
        return F.cross_entropy(F.linear(h, p["wout"], p["bout"]).reshape(B * T, -1), y)

    return opt, loss


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.manual_seed(0)
    tensord_losses = np.load(os.path.join(a.dir, "losses.npy"))
    data = batches(a.dir)
    opt, loss_fn = MODELS[a.model](a.dir)
    worst, step = 0.0, 0
    while step < min(a.steps, len(tensord_losses)):
        for x, y in data:
            if step >= min(a.steps, len(tensord_losses)):
                break
            opt.zero_grad()
            loss = loss_fn(x, y)
            loss.backward()
            opt.step()
            ours, theirs = float(tensord_losses[step]), float(loss)
            rel = abs(ours - theirs) / max(abs(theirs), 1e-12)
            worst = max(worst, rel)
            print(f"step {step + 1}: tensord {ours:.6f} torch {theirs:.6f} rel {rel:.2e}")
            step += 1
    ok = worst <= a.rtol
    print(f"{a.model}: {step} steps, worst relative difference {worst:.2e} ({'within' if ok else 'OVER'} {a.rtol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
