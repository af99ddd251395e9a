"""One rank of tests/bench/test_emulate_torch.py: an emulated ResNet-50 trained over real gloo.

``python emulated_rank.py OUT_DIR MODE`` with MODE ``schedule`` (the scheduled
engine, SGD lr 1 from zero weights: after one step every weight is minus the
average gradient) or ``ddp`` (plain DDP: after backward every ``.grad`` is the
average). Rank 0 writes ``OUT_DIR/result.json``.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from autobyte.bench.emulate_torch import expected_average, make_emulated
from autobyte.testing import exit_rank


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_emulated("resnet50", 1.0, rank=rank)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    if mode == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
        net().backward()
        got = [p.grad for p in model.parameters()]
    else:
        from autobyte.integrations.torch import schedule

        handle = schedule(model, opt, partition_bytes=4 << 20, credit_bytes=8 << 20)
        opt.zero_grad()
        model().backward()
        opt.step()
        handle.synchronize()
        got = [-p.detach() for p in model.parameters()]
    bad = [i for i, (g, p) in enumerate(zip(got, model.parameters()))
           if g is None or not torch.allclose(g, expected_average(p.numel(), i, world), rtol=1e-5, atol=1e-7)]
    flags = torch.tensor([len(bad)], dtype=torch.int64)
    dist.all_reduce(flags)
    if rank == 0:
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump({"bad_layers": bad, "bad_total": int(flags.item()), "order": model.backward_order,
                       "n_layers": len(list(model.parameters()))}, f)
    if mode != "ddp":
        handle.close()
    dist.barrier()
    dist.destroy_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
