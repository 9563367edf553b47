#!/usr/bin/env bash
# Cluster-job check on this machine: start a one-node Ray cluster on 127.0.0.1, submit a
# 2-iteration efx_mappo training with `ray job submit`, wait for SUCCEEDED, stop Ray.
# Needs the `cluster` extra (Ray's job server): pip install -c constraints.txt -e ".[cluster]"
set -euo pipefail
cd "$(dirname "$0")/.."

DASHBOARD_PORT=${DASHBOARD_PORT:-8265}
export RAY_ADDRESS="http://127.0.0.1:${DASHBOARD_PORT}"
# Ray 2.60 clusters require token auth; the CLI reads the token from ~/.ray/auth_token.
export RAY_AUTH_MODE=token
cleanup() { ray stop --force >/dev/null 2>&1 || true; }
trap cleanup EXIT

ray stop --force >/dev/null 2>&1 || true
ray start --head --node-ip-address=127.0.0.1 --port=6390 --num-cpus=2 \
    --include-dashboard=true --dashboard-host=127.0.0.1 --dashboard-port="${DASHBOARD_PORT}" \
    --disable-usage-stats

submission=$(ray job submit --no-wait --working-dir . -- \
    marllib-ext train efx_mappo --env toy:coordination --stop-iters 2 \
    --set num_env_runners=1 --local-dir /tmp/marllib_ext_cluster_runs 2>&1)
echo "${submission}"
job_id=$(echo "${submission}" | grep -oE "raysubmit_[A-Za-z0-9]+" | head -n 1)
[ -n "${job_id}" ] || { echo "no job id in the submit output"; exit 1; }

status=""
for _ in $(seq 1 60); do
    status=$(ray job status "${job_id}" 2>&1 | grep -ioE "succeeded|failed|stopped|running|pending" \
        | tail -n 1 | tr '[:lower:]' '[:upper:]' || true)
    case "${status}" in SUCCEEDED|FAILED|STOPPED) break ;; esac
    sleep 5
done
echo "----- job logs -----"
ray job logs "${job_id}" | grep -E "^(training|iter|progress|checkpoint)" || true
echo "----- job ${job_id}: ${status} -----"
[ "${status}" = "SUCCEEDED" ]
