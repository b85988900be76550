#!/usr/bin/env bash
# Train with one process per device through torchrun:
#   bash tools/dist_train.sh CONFIG NPROC [extra tools/train.py arguments]
# Environment: PORT (default 29500; give each concurrent job on a machine its own),
# NNODES (default 1), NODE_RANK (default 0), MASTER_ADDR (default 127.0.0.1).
set -euo pipefail
if [ "$#" -lt 2 ]; then
    echo "usage: $0 CONFIG NPROC [train.py arguments...]" >&2
    exit 2
fi
CONFIG=$1
NPROC=$2
shift 2
PYTHON=${PYTHON:-python3}
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" \
    --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --master_port="${PORT:-29500}" \
    --nproc_per_node="$NPROC" \
    "$(dirname "$0")/train.py" "$CONFIG" --launcher pytorch "$@"
