#!/usr/bin/env bash
# The GPU rows, on a machine with an NVIDIA GPU and the project's Python dependencies (or
# wheels of the missing ones in .whl/, as the device machines here need): the NCCL rank test,
# inner-step throughput and MFU in bf16 (eager and compiled), and how far GPU training lands
# from CPU replays (bench.replay_tolerance). Output goes to $OUT (default: gpu-check/).
#     ./scripts/gpu_check.sh [nccl] [mfu] [mfu-nondeterministic] [mfu-compiled] [tolerance]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
PEAK=${PEAK_TFLOPS:-989}  # H100/H200 SXM dense bf16, the datasheet's
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
# Without an install (the device machines): the top-level folders linked in as dilochain's
# subpackages for this run, and a metadata stub for dilochain.__version__.
if ! python3 -c "import dilochain.chain" 2>/dev/null; then
    meta=$(mktemp -d)
    mkdir "$meta/dilochain-0.0.0.dist-info"
    printf 'Metadata-Version: 2.1\nName: dilochain\nVersion: %s\n' \
        "$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)" \
        >"$meta/dilochain-0.0.0.dist-info/METADATA"
    links=()
    for d in protocol chain genesis node training artifacts verifier; do
        ln -s "../$d" "dilochain/$d" && links+=("dilochain/$d")
    done
    trap 'rm -f "${links[@]}"' EXIT
    export PYTHONPATH="$PWD:$meta:${PYTHONPATH:-}"
fi
export PYTHONUNBUFFERED=1
parts=" $* "  # the parts to run (all when none is named)
run() {  # name, seconds, command...
    local name=$1 limit=$2
    shift 2
    [ "$parts" = "  " ] || [[ $parts == *" $name "* ]] || return 0
    echo "== $name"
    COLUMNS=160 timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]}"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$OUT/gpu.txt"
run nccl 90 python3 -m pytest -q -p no:cacheprovider tests/test_distributed.py -k nccl
run mfu 90 python3 -m bench.train_throughput --device cuda --sizes 125m,1b --steps 8 \
    --seq-len 1024 --batch 16 --peak-tflops "$PEAK"
run mfu-nondeterministic 60 python3 -m bench.train_throughput --device cuda --sizes 1b \
    --steps 8 --seq-len 1024 --batch 16 --peak-tflops "$PEAK" --nondeterministic
run mfu-compiled 120 python3 -m bench.train_throughput --device cuda --sizes 1b --steps 8 \
    --seq-len 1024 --batch 16 --peak-tflops "$PEAK" --compile
run tolerance 180 python3 -m bench.replay_tolerance --hosts cuda,cuda-compiled
