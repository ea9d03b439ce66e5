"""Trains a two-layer MLP on a remote tensord, as examples/mlp.cpp does:
Gaussian blobs, 4 classes in 8 dims; AdamW; one round trip per step (the
loss). Connects as tensorctl does (TENSORD_ADDR, TENSORD_TOKEN, ...).

    PYTHONPATH=build/client/python /usr/bin/python3 examples/python/mlp.py --epochs 30
"""

import argparse

import numpy as np

import tensord
from tensord import nn, ops

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=30)
epochs = parser.parse_args().epochs

c = tensord.connect()
tensord.manual_seed(1234)
rng = np.random.default_rng(1234)
centres = rng.choice([-1.5, 1.5], size=(4, 8))                 # class c: a blob around centres[c]
labels = np.arange(256) % 4
points = centres[labels] + rng.normal(0, 0.7, size=(256, 8))
batches = [(c.tensor(points[i:i + 64]), c.tensor(labels[i:i + 64])) for i in range(0, 256, 64)]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden, self.out = nn.Linear(8, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.out(self.hidden(x).relu())


model = MLP()
opt = tensord.optim.AdamW(model.parameters(), lr=1e-2)
for epoch in range(1, epochs + 1):
    total = 0.0
    for x, y in batches:
        opt.zero_grad()
        loss = ops.cross_entropy(model(x), y)
        loss.backward()                  # backward ops, pipelined
        opt.step()                       # one adamw_multi call, in place on the daemon
        total += loss.item()             # the step's one round trip
    print(f"epoch {epoch} loss {total / len(batches):.6f}", flush=True)
