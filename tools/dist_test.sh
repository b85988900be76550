#!/usr/bin/env bash
# Test a checkpoint with one process per device through torchrun:
#   bash tools/dist_test.sh CONFIG CHECKPOINT NPROC [extra tools/test.py arguments, e.g. --eval]
# Environment: PORT (default 29500), NNODES (default 1), NODE_RANK (default 0),
# MASTER_ADDR (default 127.0.0.1).
set -euo pipefail
if [ "$#" -lt 3 ]; then
    echo "usage: $0 CONFIG CHECKPOINT NPROC [test.py arguments...]" >&2
    exit 2
fi
CONFIG=$1
CHECKPOINT=$2
NPROC=$3
shift 3
PYTHON=${PYTHON:-python3}
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" \
    --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --master_port="${PORT:-29500}" \
    --nproc_per_node="$NPROC" \
    "$(dirname "$0")/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "$@"
