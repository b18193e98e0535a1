#!/usr/bin/env bash
# One DynamoDB Local for a whole go test lane: every test package that would
# start its own JVM (shared/testsvc, SharedDynamo) uses it through
# STARLOG_TEST_DYNAMO_ENDPOINT instead; table names carry the test process's pid,
# so packages never meet. A JVM start costs seconds of CPU and ~210 MB.
#
#   .ci/dynamo-local.sh start STATE   starts it, prints its endpoint
#   .ci/dynamo-local.sh stop STATE    stops the one started with STATE
#
# STATE is a path prefix: STATE.pid, STATE.log.
set -euo pipefail
cmd=${1:?usage: dynamo-local.sh start|stop STATE}
state=${2:?usage: dynamo-local.sh start|stop STATE}

case $cmd in
stop)
  [ -f "$state.pid" ] || exit 0
  pid=$(cat "$state.pid")
  rm -f "$state.pid"
  kill -TERM "$pid" 2>/dev/null || exit 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  ;;
start)
  emulator=${STARLOG_NODE_TOOLS:?STARLOG_NODE_TOOLS unset}/amplify-dynamodb-simulator/emulator
  [ -f "$emulator/DynamoDBLocal.jar" ] || { echo "DynamoDB Local not installed at $emulator (run make tools)" >&2; exit 1; }
  listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
  # Ports below the kernel's ephemeral range (as shared/testsvc picks
  # them), so no connection's source port takes it meanwhile.
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 8000))
    listening "$port" && continue
    (cd "$emulator" && exec java -Djava.library.path=DynamoDBLocal_lib -jar DynamoDBLocal.jar \
      -inMemory -sharedDb -port "$port" -disableTelemetry) >"$state.log" 2>&1 &
    pid=$!
    echo "$pid" >"$state.pid"
    # Bounded: a JVM start takes 3-4 s idle, over 20 s on a loaded 2-core
    # machine (testsvc allows 2 minutes).
    for _ in $(seq 1200); do
      if listening "$port"; then echo "http://127.0.0.1:$port"; exit 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    "$0" stop "$state"
  done
  echo "DynamoDB Local did not start; see $state.log" >&2
  exit 1
  ;;
*) echo "usage: dynamo-local.sh start|stop STATE" >&2; exit 2 ;;
esac
