#!/usr/bin/env bash
# `star read` from seq 0 of a 1 GiB stream of 1 KiB records against `star
# dev`, to /dev/null (issue 31 item 3; docs/bench.md, "`star read` against
# `star dev`"). The stream is written once per state into a data folder
# kept under the work folder (and reused while READ_CLI_RECORDS is the
# same): "transit" is written with the auditor off, so every record is
# read from its slot object through span refs; "settled" is written and
# then left to the auditor until nothing is unsettled, so every record is
# read from settled objects. Each run starts the star of one binary on the
# folder with the auditor off (nothing moves under the reads), reads one
# record (the leadership's trim scan), times one `star read` of the same
# binary, and stops it; the binaries alternate
# within a run and swap order each run, so a before/after pair shares
# the machine's load. Then one profiled run each: the star's CPU profile
# from its pprof listener, the client's from `star read --cpuprofile`.
#
#   bash .ci/bench-read-cli.sh LABEL=STAR_BINARY [LABEL=STAR_BINARY ...]
#
# Knobs: READ_CLI_RUNS (5), READ_CLI_RECORDS (1048576: 1 GiB metered of
# 1016-byte bodies), READ_CLI_FROM ("transit settled"), READ_CLI_WORK
# (build/bench-read-cli), READ_CLI_PORT (27480; it and the next port),
# READ_CLI_SETTLE_TIMEOUT (900 s). The log is $READ_CLI_WORK/log, the
# profiles $READ_CLI_WORK/profiles/<state>-<label>-{star,client}.pprof.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
RUNS=${READ_CLI_RUNS:-5}
RECORDS=${READ_CLI_RECORDS:-1048576}
STATES=${READ_CLI_FROM:-transit settled}
WORK=${READ_CLI_WORK:-build/bench-read-cli}
PORT=${READ_CLI_PORT:-27480}
IPORT=$((PORT + 1))
SETTLE_TIMEOUT=${READ_CLI_SETTLE_TIMEOUT:-900}
BODY=1016 # metered size 1 KiB: 8 bytes of overhead, no headers
STREAM=rd
[ $# -ge 1 ] || { echo "usage: $0 LABEL=STAR_BINARY ..." >&2; exit 2; }
labels=() bins=()
for a in "$@"; do
  labels+=("${a%%=*}") bins+=("$(realpath "${a#*=}")")
done
mkdir -p "$WORK/profiles"
WORK=$(realpath "$WORK")
LOG=$WORK/log
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

pid=
# start_star BIN DIR AUDITOR_INTERVAL: a star dev on DIR, ready within 120 s.
start_star() {
  "$1" dev --data "$2" --listen 127.0.0.1:$PORT --internal-listen 127.0.0.1:$IPORT --kafka-listen "" \
    --auditor-interval "$3" --append-stream-mib-per-sec 0 >>"$WORK/star.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    if curl -sf -o /dev/null "http://127.0.0.1:$PORT/health"; then
      export S2_ACCOUNT_ENDPOINT=http://127.0.0.1:$PORT S2_BASIN_ENDPOINT=http://127.0.0.1:$PORT S2_BASIN=starlog-dev
      S2_ACCESS_TOKEN=$(cat "$2/dev-token")
      export S2_ACCESS_TOKEN
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "star dev exited; see $WORK/star.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "star dev not ready in 120 s; see $WORK/star.log" >&2
  exit 1
}
# stop_star: SIGTERM, then SIGKILL after 60 s.
stop_star() {
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
}
trap stop_star EXIT
# cpu PID: the process's user+system CPU in seconds.
cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"; }
unsettled() {
  STARLOG_INTERNAL_KEY_FILE="$1/dev-internal-key" "${bins[0]}" status --endpoint "http://127.0.0.1:$IPORT" --json 2>/dev/null |
    tr -d ' \n' | grep -o '"unsettled_bytes":[0-9]*' | cut -d: -f2 | awk '{ s += $1 } END { print (NR ? s : -1) }'
}

# fill STATE DIR: the stream written once (with the first binary).
fill() {
  local state=$1 dir=$2 aud=0
  [ -f "$dir/.filled-$RECORDS" ] && { say "$state: reusing $dir ($RECORDS records)"; return; }
  rm -rf "$dir" && mkdir -p "$dir"
  [ "$state" = settled ] && aud=2s
  start_star "${bins[0]}" "$dir" $aud
  local line t0
  line=$(head -c $BODY /dev/zero | tr '\0' x)
  t0=$(date +%s.%N)
  { yes "$line" || true; } | head -n "$RECORDS" | "${bins[0]}" append $STREAM >/dev/null
  say "$state: wrote $RECORDS records in $(echo "$(date +%s.%N) - $t0" | bc) s (load $(load))"
  local tail
  tail=$("${bins[0]}" check-tail $STREAM | cut -f1)
  [ "$tail" = "$RECORDS" ] || { echo "$state: tail $tail after the fill, want $RECORDS" >&2; exit 1; }
  if [ "$state" = settled ]; then
    # The auditor settles all but the last few MiB (the era still open
    # when the writes stopped): wait until the unsettled bytes are below
    # a tenth of the stream and have not moved for 30 s.
    t0=$(date +%s)
    local u last=-1 same=0
    while :; do
      u=$(unsettled "$dir")
      if [ "$u" = "$last" ]; then same=$((same + 1)); else same=0 last=$u; fi
      [ "$u" = 0 ] && break
      ((u > 0 && u < RECORDS * 1024 / 10 && same >= 6)) && break
      (($(date +%s) - t0 < SETTLE_TIMEOUT)) || { echo "settled: $u bytes still unsettled after ${SETTLE_TIMEOUT}s" >&2; exit 1; }
      sleep 5
    done
    say "$state: settled in $(($(date +%s) - t0)) s but for $u bytes"
  fi
  stop_star
  touch "$dir/.filled-$RECORDS"
}

# read_once I STATE DIR [PROFILE]: one timed read; appends a result line.
read_once() {
  local i=$1 state=$2 dir=$3 prof=${4:-} bin=${bins[$1]} label=${labels[$1]}
  start_star "$bin" "$dir" 0
  # The first read of a leadership scans the stream's records above its
  # settled rows for trim commands (reader.TrimInRecords) before it
  # serves: a one-record read pays that outside the timed one.
  "$bin" read $STREAM --count 1 >/dev/null
  local args=() curlpid=
  if [ -n "$prof" ]; then
    args=(--cpuprofile "$WORK/profiles/$state-$label-client.pprof")
    curl -s -o "$WORK/profiles/$state-$label-star.pprof" "http://127.0.0.1:$IPORT/debug/pprof/profile?seconds=$prof" &
    curlpid=$!
    sleep 0.3
  fi
  local l s0 t0 t1 s1
  l=$(load)
  s0=$(cpu "$pid")
  t0=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$WORK/time" "$bin" read $STREAM "${args[@]}" >/dev/null
  t1=$(date +%s.%N)
  s1=$(cpu "$pid")
  [ -n "$curlpid" ] && wait "$curlpid"
  stop_star
  read -r cu cs <"$WORK/time"
  awk -v st="$state" -v lb="$label" -v p="${prof:+profiled}" -v n="$RECORDS" -v w="$(echo "$t1 - $t0" | bc)" \
    -v c="$(echo "$cu + $cs" | bc)" -v s="$(echo "$s1 - $s0" | bc)" -v l="$l" 'BEGIN {
      gib = n * 1024 / 2^30
      printf "result %s %s %.1f MiB/s %.2f s client %.2f star %.2f CPU-s/GiB load %s %s\n", st, lb, gib * 1024 / w, w, c / gib, s / gib, l, p
    }' | tee -a "$LOG"
}

for state in $STATES; do
  dir=$WORK/data-$state
  fill "$state" "$dir"
  for r in $(seq "$RUNS"); do
    order=$(seq 0 $((${#bins[@]} - 1)))
    ((r % 2 == 0)) && order=$(echo "$order" | tac)
    for i in $order; do read_once "$i" "$state" "$dir"; done
  done
  for i in $(seq 0 $((${#bins[@]} - 1))); do
    # The star's profile spans the read: the median wall and a margin.
    w=$(grep "^result $state ${labels[$i]} " "$LOG" | awk '{ print $6 }' | sort -n | awk '{ a[NR] = $1 } END { print int(a[int((NR + 1) / 2)] + 3) }')
    read_once "$i" "$state" "$dir" "$w"
    # Every record read, once per binary (not timed).
    start_star "${bins[$i]}" "$dir" 0
    got=$("${bins[$i]}" read $STREAM | wc -l)
    stop_star
    [ "$got" = "$RECORDS" ] || { echo "$state/${labels[$i]}: read $got records, want $RECORDS" >&2; exit 1; }
  done
done

say ""
say "medians of $RUNS runs (MiB/s of metered bytes; CPU-s per GiB), ratio to ${labels[0]}:"
for state in $STATES; do
  base=
  for label in "${labels[@]}"; do
    grep "^result $state $label " "$LOG" | grep -v profiled | awk -v st="$state" -v lb="$label" '
      function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
      { n++; m[n] = $4; all = all (n > 1 ? ", " : "") $4; c[n] = $9; s[n] = $11; l[n] = $14 }
      END { printf "%s %s %.1f MiB/s (%s) client %.2f star %.2f CPU-s/GiB, load %s\n", st, lb, med(m, n), all, med(c, n), med(s, n), med(l, n) }'
  done | while read -r line; do
    mib=$(echo "$line" | awk '{ print $3 }')
    [ -z "$base" ] && base=$mib
    say "$line, ×$(echo "scale=2; $mib / $base" | bc)"
  done
done
for f in "$WORK"/profiles/*.pprof; do
  say ""
  say "== $(basename "$f")"
  "$GO" tool pprof -top -nodecount=25 "$f" 2>/dev/null | sed -n '4,40p' | tee -a "$LOG" >/dev/null
done
