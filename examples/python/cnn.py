"""Trains a small CNN on a remote tensord, as examples/cnn.cpp does: 8x8
images of four patterns (a horizontal bar, a vertical bar, a diagonal, a
ring) with noise; conv2d, relu, max_pool2d, linear, cross_entropy; Adam.
Connects as tensorctl does (TENSORD_ADDR, TENSORD_TOKEN, ...).

    PYTHONPATH=build/client/python /usr/bin/python3 examples/python/cnn.py --epochs 15
"""

import argparse

import numpy as np

import tensord
from tensord import nn, ops

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=15)
epochs = parser.parse_args().epochs

c = tensord.connect()
tensord.manual_seed(1234)
rng = np.random.default_rng(1234)


def pattern(cls, shift):
    image = np.zeros((8, 8), dtype=np.float32)
    if cls == 0:
        image[2 + shift, :] = 1                                  # horizontal bar
    elif cls == 1:
        image[:, 2 + shift] = 1                                  # vertical bar
    elif cls == 2:
        np.fill_diagonal(image, 1)                               # diagonal
    else:
        image[[1, 6], :] = image[:, [1, 6]] = 1                  # ring
    return image


labels = np.arange(128) % 4
images = np.stack([pattern(k, rng.integers(0, 4)) for k in labels])[:, None] + rng.normal(0, 0.3, (128, 1, 8, 8))
batches = [(c.tensor(images[i:i + 32]), c.tensor(labels[i:i + 32])) for i in range(0, 128, 32)]


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 8, 3, padding=1), nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):
        h = ops.max_pool2d(self.conv(x).relu(), kernel_size=2)  # [N, 8, 4, 4]
        return self.fc(h.flatten(1))


model = CNN()
opt = tensord.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(1, epochs + 1):
    total = 0.0
    for x, y in batches:
        opt.zero_grad()
        loss = ops.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        total += loss.item()
    print(f"epoch {epoch} loss {total / len(batches):.6f}", flush=True)
