"""The Python training examples (examples/python/) train against a daemon
from this build, and the one-liner of the README's Python section works."""

import os
import re
import subprocess
import sys

from conftest import source_dir


def run(daemon, *args):
    env = dict(os.environ, TENSORD_ADDR=daemon.address, TENSORD_TOKEN=daemon.token)
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return done.stdout


def losses(output):
    found = [(int(e), float(loss)) for e, loss in re.findall(r"^epoch (\d+) loss ([0-9.eE+-]+)$", output, re.M)]
    assert found, output
    assert [e for e, _ in found] == list(range(1, len(found) + 1))
    return [loss for _, loss in found]


def test_mlp_example_trains(daemon):
    curve = losses(run(daemon, str(source_dir() / "examples" / "python" / "mlp.py"), "--epochs", "30"))
    assert len(curve) == 30
    assert curve[-1] < curve[0] / 10, curve


def test_cnn_example_trains(daemon):
    curve = losses(run(daemon, str(source_dir() / "examples" / "python" / "cnn.py"), "--epochs", "15"))
    assert len(curve) == 15
    assert curve[-1] < curve[0] / 2, curve


def test_readme_one_liner(daemon):
    code = "import tensord; c = tensord.connect(); print((c.tensor([[1., 2.]]) @ c.tensor([[3.], [4.]])).numpy())"
    assert run(daemon, "-c", code) == "[[11.]]\n"


def test_readme_python_example(daemon):
    text = (source_dir() / "README.md").read_text()
    section = text[text.index("\n## Python\n"):]
    section = section[:section.index("\n## ", 1)]
    code = section[section.index("```python\n") + 10:]
    code = code[:code.index("```")]
    lines = run(daemon, "-c", code).splitlines()
    assert [line.split()[0] for line in lines[:100]] == [str(step) for step in range(100)]
    assert len(lines) > 100  # then the softmax rows
