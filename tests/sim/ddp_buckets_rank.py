"""One rank of tests/sim/test_ddp.py: real DDP buckets on gloo, printed as JSON by rank 0."""

import gc
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    # tensors of many sizes: 2.4 MB, 1.4 MB, 0.26 MB, 0.02 MB weights and their biases
    model = nn.Sequential(nn.Linear(1000, 600), nn.ReLU(), nn.Linear(600, 600), nn.ReLU(), nn.Linear(600, 110),
                          nn.ReLU(), nn.Linear(110, 50), nn.Linear(50, 10))
    cases = [{"bucket_cap_mb": None}, {"bucket_cap_mb": 0.25}, {"bucket_cap_mb": 2}, {"bucket_cap_mb": 25}]
    import inspect

    if "bucket_cap_mb_list" in inspect.signature(nn.parallel.DistributedDataParallel).parameters:
        cases += [{"bucket_cap_mb_list": [0.25, 2]}, {"bucket_cap_mb_list": [1, 0.25]}]
    out = []
    for kw in cases:
        d = nn.parallel.DistributedDataParallel(model, **kw)
        for _ in range(3):  # the first iteration runs one bucket; DDP rebuilds its buckets after it
            d(torch.randn(4, 1000)).sum().backward()
        ld = d._get_ddp_logging_data()
        sizes = [int(s) for s in str(ld["rebuilt_bucket_sizes"]).split(",")]
        idx = [[int(i) for i in b.split()] for b in str(ld["rebuilt_per_bucket_param_indices"]).split(",")]
        out.append({"kw": kw, "sizes": sizes, "indices": idx})
        del d
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps({"cases": out, "tensor_bytes": [p.numel() * 4 for p in model.parameters()]}))
    gc.collect()  # the DDP reducers go before their process group
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # Skip interpreter teardown: gloo/DDP objects destroyed there at random order sometimes abort the
    # process ("terminate called without an active exception", 1 run in ~6 here) after all work is done.
    os._exit(0)
