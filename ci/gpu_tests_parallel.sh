#!/usr/bin/env bash
# The GPU test run, one pytest process per test file, JOBS at a time (kernel compiles are CPU-bound and
# single-threaded, the GPU host has 16 cores). Logs go to $LOGDIR (default /tmp/gpu_test_logs); the
# summary lists every file's last line and the exit status is non-zero if any file failed.
#   JOBS=12 LOGDIR=$OUT/logs ci/gpu_tests_parallel.sh packages/cudnn-gemm/tests packages/cudnn-sdpa/tests -- -q -rf
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh
JOBS="${JOBS:-12}"
LOGDIR="${LOGDIR:-/tmp/gpu_test_logs}"
mkdir -p "$LOGDIR"
paths=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do paths+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#paths[@]} -eq 0 ] && paths=(packages)
export PYTEST_EXTRA="$*" LOGDIR FILE_TIMEOUT="${FILE_TIMEOUT:-540}"
find "${paths[@]}" -name 'test_*.py' | sort | xargs -P "$JOBS" -I{} bash -c '
  f="{}"; log="$LOGDIR/$(echo "$f" | tr / _).log"; start=$(date +%s)
  timeout "$FILE_TIMEOUT" python3 -m pytest -p no:cacheprovider $PYTEST_EXTRA "$f" > "$log" 2>&1; rc=$?
  echo "rc=$rc wall=$(( $(date +%s) - start ))s" >> "$log"'
status=0
for log in "$LOGDIR"/*.log; do
  rc=$(tail -1 "$log" | sed -n "s/^rc=\([0-9]*\).*/\1/p")
  summary=$(grep -E "(passed|failed|skipped|error|no tests ran)" "$log" | tail -1)
  printf '%-80s %s | %s\n' "$(basename "$log" .log)" "$(tail -1 "$log")" "$summary"
  [ "${rc:-1}" != 0 ] && [ "${rc:-1}" != 5 ] && status=1
done
exit $status
