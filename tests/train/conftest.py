"""Shared tiny jobs for the trainer tests (CPU, seconds)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A fixed English text (byte-level fallback): tests that compare one process with two must
# train on the same bytes whatever the documentation says (they did on README.md, and a
# README edit moved one parameter past the two-process tolerance).
CORPUS = Path(__file__).resolve().parent / "data" / "corpus.txt"


def tiny_job(**overrides):
    """A q=1 ladder rung scaled to head_dim 8 on the fixed corpus's bytes."""
    job = {
        "ladder": {"q": 1, "experts": 8, "top_k": 2, "split_factor": 2, "head_dim": 8,
                   "kv_heads": 2},
        "routing": {"mu_b": 1e-2},
        "optim": {"warmup_tokens": 512, "lr": 1e-2},
        "data": {"path": str(CORPUS)},
        "run": {"tokens": 16 * 8 * 32, "seq_len": 32, "global_batch_seqs": 8,
                "micro_batch_seqs": 4, "checkpoint_every": 4, "cpu_threads": 1},
    }
    for block, values in overrides.items():
        job[block] = {**job.get(block, {}), **values}
    return job


@pytest.fixture(autouse=True)
def one_cpu_thread():
    """Tiny tensors: one intra-op thread is fastest, and OpenMP threads spin on busy CI."""
    try:
        import torch
    except ImportError:  # the grid tests run without torch
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
