#!/usr/bin/env bash
# Train with one process per device through torchrun:
#   bash tools/dist_train.sh CONFIG NPROC [extra tools/train.py arguments]
# Environment: PORT (default 29500; give each concurrent job on a machine its own),
# NNODES (default 1; with RDZV=c10d also MIN:MAX), NODE_RANK (default 0, static only),
# MASTER_ADDR (default 127.0.0.1; with RDZV=c10d the rendezvous host, the same on every node).
# Fault tolerance: MAX_RESTARTS=N (default 0) lets torchrun restart the workers up to N times
# after a failure, and turns --auto-resume on: each restart resumes from the newest checkpoint.
# RDZV=static (default) or c10d (elastic rendezvous, for several nodes; RDZV_ID names the job,
# default mmpar): c10d gives every restart a fresh store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1).
set -euo pipefail
if [ "$#" -lt 2 ]; then
    echo "usage: $0 CONFIG NPROC [train.py arguments...]" >&2
    exit 2
fi
CONFIG=$1
NPROC=$2
shift 2
PYTHON=${PYTHON:-python3}
MAX_RESTARTS=${MAX_RESTARTS:-0}
RDZV=${RDZV:-static}
if ! [[ "$MAX_RESTARTS" =~ ^[0-9]+$ ]]; then
    echo "error: MAX_RESTARTS: expected an integer >= 0, got '$MAX_RESTARTS'" >&2
    exit 2
fi
LAUNCH=(--nnodes="${NNODES:-1}" --nproc_per_node="$NPROC" --max-restarts="$MAX_RESTARTS")
case "$RDZV" in
static)
    LAUNCH+=(--node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}"
        --master_port="${PORT:-29500}")
    ;;
c10d)
    # torch (2.4 to 2.13 at least) shares the agent's store with the workers and keeps it
    # across restarts, where a restarted worker can read the previous attempt's addresses
    # (pytorch#135712); without sharing, rank 0 hosts a fresh store in every round.
    export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
    LAUNCH+=(--rdzv-backend=c10d --rdzv-endpoint="${MASTER_ADDR:-127.0.0.1}:${PORT:-29500}"
        --rdzv-id="${RDZV_ID:-mmpar}")
    ;;
*)
    echo "error: RDZV: expected static or c10d, got '$RDZV'" >&2
    exit 2
    ;;
esac
RESUME=()
if [ "$MAX_RESTARTS" -gt 0 ]; then
    RESUME=(--auto-resume)
fi
exec "$PYTHON" -m torch.distributed.run "${LAUNCH[@]}" \
    "$(dirname "$0")/train.py" "$CONFIG" --launcher pytorch "${RESUME[@]}" "$@"
