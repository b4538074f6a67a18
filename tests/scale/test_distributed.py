"""2 CPU processes (gloo), started as torchrun starts them, against one process on the same batches."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import ddp_worker


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: thread start-up and contention dominate, on a shared 2-core machine especially."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(Path(ddp_worker.__file__)), str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    return out, torch.load(out / "ddp.pt", weights_only=False)


@pytest.mark.parametrize("sparse_loss", [True, False])
@pytest.mark.parametrize("family", ["stair", "sparse-clip"])
def test_two_ranks_give_the_single_process_loss_and_gradients(ddp_results, family, sparse_loss):
    """The ranks run the default loss over the active columns (their union all-reduced, train/active.py);
    the single process runs it too, and the full loss over every column: all equal."""
    _, results = ddp_results
    loss2, flops2, grads2 = results[family]
    torch.set_num_threads(1)
    loss1, flops1, grads1 = ddp_worker.one_step_grads(family, sparse_loss=sparse_loss)
    assert loss2 == pytest.approx(loss1, rel=1e-6)
    # FLOPs on the global batch: per-rank means would give a different (larger) value
    assert flops2 == pytest.approx(flops1, rel=1e-6)
    assert grads1.keys() == grads2.keys() and len(grads1) > 5
    for name in grads1:
        # all-reduced sums round apart from one process's: seen 5.7e-6 on one entry of a gradient whose
        # largest is 29.5 (a fresh machine's torch 2.13 CPU kernels)
        torch.testing.assert_close(grads2[name], grads1[name], rtol=1e-4, atol=2e-5, msg=name)


def test_per_rank_flops_means_would_differ(ddp_results):
    """The pitfall the gather avoids: the mean of per-shard FLOPs is not the global batch's FLOPs."""
    from tokenspace.train.losses import flops_loss

    emb = torch.rand(8, 20) * (torch.rand(8, 20) > 0.7)
    per_rank = 0.5 * (flops_loss(emb[:4]) + flops_loss(emb[4:]))
    assert float(per_rank) > float(flops_loss(emb)) * 1.01


def test_ddp_fit_and_resume_equal_the_single_process_fit(ddp_results, tmp_path):
    out, results = ddp_results
    full2, resumed2 = results["fit"]
    full1, _ = ddp_worker.fits(tmp_path)
    for name in full1:
        # attention key biases have an identically zero true gradient (softmax ignores a constant
        # shift); Adam-type steps turn its float noise, which differs between the batch layouts, into
        # full-size updates, so only the resume comparison (same layout) can check them
        if not name.endswith("in_proj_bias"):
            torch.testing.assert_close(full2[name], full1[name], rtol=1e-4, atol=1e-6, msg=name)
        torch.testing.assert_close(resumed2[name], full2[name], rtol=1e-5, atol=1e-7, msg=name)
    # rank 0 alone wrote the log: one line per step
    lines = (out / "full" / "log.jsonl").read_text().splitlines()
    assert len(lines) == 4
    assert (out / "full" / "model" / "model.safetensors").exists()
    assert not np.isnan([float(x.split('"loss": ')[1].split(",")[0]) for x in lines]).any()
