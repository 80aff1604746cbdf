"""Same seed, same numbers: a few AdamCosine steps on a TinyTransformer give bitwise-identical weights whatever
thread count the runner's environment advertises, because setup_torch fixes the count (threads=1)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = r"""
import hashlib, torch
from paperkit.device import setup_torch
from paperkit.nn.tiny_transformer import TinyConfig, TinyTransformer
from paperkit.training import AdamCosine
setup_torch("cpu", threads=1)
torch.manual_seed(0)
model = TinyTransformer(TinyConfig(vocab=11, d_model=32, n_heads=2, n_layers=2, max_len=16))
opt = AdamCosine(model.parameters(), lr=3e-3, steps=4)
g = torch.Generator().manual_seed(1)
for _ in range(4):
    x = torch.randint(0, 11, (16, 16), generator=g)
    out = model(x)
    logits = out[0] if isinstance(out, tuple) else out
    opt.step(torch.nn.functional.cross_entropy(logits.reshape(-1, 11), x.reshape(-1)))
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
print(h.hexdigest())
"""


def _run(threads: str) -> str:
    env = dict(os.environ, PAPERKIT_THREADS=threads, NUMBA_NUM_THREADS=threads, OMP_NUM_THREADS=threads,
               PYTHONPATH=str(ROOT / "lib") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_training_is_bitwise_identical_under_both_runner_environments():
    assert _run("1") == _run("2")
