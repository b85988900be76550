#!/usr/bin/env bash
# Train on a SLURM cluster, one task per GPU:
#   bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [extra tools/train.py arguments]
# Environment: GPUS (total, default 8), GPUS_PER_NODE (default 8), CPUS_PER_TASK (default 5),
# PORT (MASTER_PORT of the job, default 29500), SRUN_ARGS (extra srun arguments).
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
export MASTER_PORT=${PORT:-29500}
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
    "$PYTHON" -u "$(dirname "$0")/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher slurm "$@"
