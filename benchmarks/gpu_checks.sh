#!/usr/bin/env bash
# The GPU checks of docs/benchmarks.md section 4, on a lent GPU machine (one GPU; torch with CUDA; no pip there):
#   bash benchmarks/gpu_checks.sh wire OUT    # -m gpu tests, then DDP, DDP + bf16_compress_hook and the engine at fp32/bf16
#   bash benchmarks/gpu_checks.sh tuner OUT   # the tuner from ByteScheduler's default over 1000 iterations, beside static runs;
#                                             # then wire="auto" over 1000 iterations beside the default at 16 bits
# Each writes OUT/<part>/bench_gpu.{json,md} and OUT/<part>.log; run from the repository root.
set -u
part=${1:?usage: gpu_checks.sh wire|tuner OUT}
out=${2:?usage: gpu_checks.sh wire|tuner OUT}
mkdir -p "$out"
export PYTHONPATH=$PWD
py=$(command -v python3 || command -v python)
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} > "$out/$part.log" 2>&1
case "$part" in
  wire)
    timeout 200 $py -m pytest -q -m gpu -p no:cacheprovider tests/integrations/test_torch_wire.py \
      tests/integrations/test_torch_grouped_updates.py tests/integrations/test_torch_engine.py >> "$out/$part.log" 2>&1
    echo "pytest -m gpu exit $?" >> "$out/$part.log"
    timeout 300 $py benchmarks/bench_gpu.py --out "$out/wire" --batch-size 96 --rounds 3 --iters 12 --warmup 4 \
      --grid 16M:2 --wire bf16 --tuners none --profile-iters 0 >> "$out/$part.log" 2>&1
    echo "bench_gpu exit $?" >> "$out/$part.log" ;;
  tuner)
    timeout 560 $py benchmarks/bench_gpu.py --out "$out/tuner" --batch-size 96 --rounds 1 --iters 12 --warmup 4 \
      --grid 16M:2 --wire bf16 --tuners static:300,autobyte:1000,static:300,static@bf16:300,autobyte@auto:1000 \
      --profile-iters 0 >> "$out/$part.log" 2>&1
    echo "bench_gpu exit $?" >> "$out/$part.log" ;;
  *) echo "gpu_checks.sh: the part must be wire or tuner, but got '$part'" >&2; exit 2 ;;
esac
tail -40 "$out/$part.log"
