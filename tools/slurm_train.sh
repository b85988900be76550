#!/usr/bin/env bash
# Train on a SLURM cluster, one task per GPU:
#   bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [extra tools/train.py arguments]
# Environment: GPUS (total, default 8), GPUS_PER_NODE (default 8), CPUS_PER_TASK (default 5),
# PORT (MASTER_PORT of the job, default 29500), SRUN_ARGS (extra srun arguments).
# Fault tolerance: MAX_RESTARTS=N (default 0) starts one torchrun per node instead, which
# restarts the workers up to N times after a failure, and turns --auto-resume on. RDZV=c10d
# (the default with MAX_RESTARTS) or static picks its rendezvous; RDZV=c10d without
# MAX_RESTARTS runs torchrun too, without restarts.
set -euo pipefail
if [ "$#" -lt 4 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [train.py arguments...]" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
shift 4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
PYTHON=${PYTHON:-python3}
MAX_RESTARTS=${MAX_RESTARTS:-0}
if ! [[ "$MAX_RESTARTS" =~ ^[0-9]+$ ]]; then
    echo "error: MAX_RESTARTS: expected an integer >= 0, got '$MAX_RESTARTS'" >&2
    exit 2
fi
if [ "$MAX_RESTARTS" -gt 0 ]; then
    RDZV=${RDZV:-c10d}
else
    RDZV=${RDZV:-}
fi
case "$RDZV" in
"" | static | c10d) ;;
*)
    echo "error: RDZV: expected static or c10d, got '$RDZV'" >&2
    exit 2
    ;;
esac
export MASTER_PORT=${PORT:-29500}
TRAIN="$(dirname "$0")/train.py"
if [ -z "$RDZV" ]; then
    # SRUN_ARGS is split into words on purpose.
    # shellcheck disable=SC2086
    srun -p "$PARTITION" \
        --job-name="$JOB_NAME" \
        --gres="gpu:$GPUS_PER_NODE" \
        --ntasks="$GPUS" \
        --ntasks-per-node="$GPUS_PER_NODE" \
        --cpus-per-task="$CPUS_PER_TASK" \
        --kill-on-bad-exit=1 \
        ${SRUN_ARGS:-} \
        "$PYTHON" -u "$TRAIN" "$CONFIG" --work-dir="$WORK_DIR" --launcher slurm "$@"
    exit
fi
NODES=$(((GPUS + GPUS_PER_NODE - 1) / GPUS_PER_NODE))
NPROC=$((GPUS < GPUS_PER_NODE ? GPUS : GPUS_PER_NODE))
RESUME=""
if [ "$MAX_RESTARTS" -gt 0 ]; then
    RESUME="--auto-resume"
fi
# One torchrun per node. The node list is known only inside the step: each node reads the
# first host there. c10d without a shared store: every restart gets a fresh one (pytorch#135712).
# shellcheck disable=SC2016,SC2086
srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres="gpu:$GPUS_PER_NODE" \
    --nodes="$NODES" \
    --ntasks="$NODES" \
    --ntasks-per-node=1 \
    --cpus-per-task=$((CPUS_PER_TASK * NPROC)) \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS:-} \
    env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 bash -c '
        PYTHON=$1 RDZV=$2 NODES=$3 NPROC=$4 MAX_RESTARTS=$5
        shift 5
        HEAD=$("$PYTHON" -c "import os, sys; sys.path.insert(0, os.getcwd()); from mmpar.dist.slurm import slurm_first_host; print(slurm_first_host(os.environ[\"SLURM_STEP_NODELIST\"]))")
        if [ "$RDZV" = c10d ]; then
            LAUNCH=(--rdzv-backend=c10d --rdzv-endpoint="$HEAD:$MASTER_PORT" --rdzv-id="${SLURM_JOB_ID:-mmpar}")
        else
            LAUNCH=(--node_rank="$SLURM_NODEID" --master_addr="$HEAD" --master_port="$MASTER_PORT")
        fi
        exec "$PYTHON" -u -m torch.distributed.run --nnodes="$NODES" --nproc_per_node="$NPROC" \
            --max-restarts="$MAX_RESTARTS" "${LAUNCH[@]}" "$@"
    ' bash "$PYTHON" "$RDZV" "$NODES" "$NPROC" "$MAX_RESTARTS" \
    "$TRAIN" "$CONFIG" --work-dir="$WORK_DIR" --launcher pytorch $RESUME "$@"
