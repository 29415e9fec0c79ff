#!/usr/bin/env bash
# `vllm-codemod tune` on a GPU box, end to end, against the patched corex-0.8.3 fixture.
#
# The fixture holds only the files the codemods target, so `import vllm` fails there and
# tune would skip prefix prefill.  To time the tree's real prefix_prefill.py kernels, this
# script writes the two modules that file imports around it: a one-line vllm/__init__.py
# and a vllm/platforms package whose current_platform answers from torch.cuda.  The
# tree's _custom_ops still needs vllm._C, so the vendor V1 kernel is reported unavailable.
#
#   OUT=/tmp/out BUDGET=150 [SHAPES="--shape 32/8/128 ..."] bash benchmarks/tune_session.sh
set -euo pipefail
OUT=${OUT:-/tmp/vllm-codemod-tune}
BUDGET=${BUDGET:-150}
SHAPES=${SHAPES:---shape 32/8/128 --shape 16/2/256 --shape 40/40/128:alibi}
mkdir -p "$OUT"
SITE="$(mktemp -d)/site"
cp -r vendor_fixtures/bi-v100/corex-0.8.3 "$SITE"
vllm-codemod apply --site-packages "$SITE"
echo 'from .version import __version__, __version_tuple__' >"$SITE/vllm/__init__.py"
mkdir -p "$SITE/vllm/platforms"
cat >"$SITE/vllm/platforms/__init__.py" <<'EOF'
"""Stand-in for vllm.platforms: what the tree's prefix_prefill.py asks of it."""
import torch


class _Cuda:
    def get_device_capability(self, device_id=0):
        return tuple(torch.cuda.get_device_capability(device_id))

    def has_device_capability(self, capability, device_id=0):
        major, minor = self.get_device_capability(device_id)
        if isinstance(capability, int):
            return major * 10 + minor >= capability
        return (major, minor) >= tuple(capability)

    def fp8_dtype(self):
        return torch.float8_e4m3fn


current_platform = _Cuda()
EOF
# shellcheck disable=SC2086
vllm-codemod tune --site-packages "$SITE" $SHAPES --max-num-seqs 1 --max-model-len 131072 \
    --budget "$BUDGET" --output "$OUT/tuning.json" 2>&1 | tee "$OUT/tune.log"
vllm-codemod apply --site-packages "$SITE" --tuning "$OUT/tuning.json" 2>&1 | tee -a "$OUT/tune.log"
vllm-codemod check --site-packages "$SITE" 2>&1 | tee -a "$OUT/tune.log"
vllm-codemod verify --site-packages "$SITE" 2>&1 | tee -a "$OUT/tune.log"
