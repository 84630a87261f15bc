#!/usr/bin/env bash
# A cluster job on W local worker processes, measured: the result, each worker's
# peak RSS (VmHWM) and peak disk (from `status --json`, polled every second),
# and the keys and bytes the workers sent each other.
#
#   deploy/scale-bench.sh W MEM FILE LEVEL [submit flags...]
#   deploy/scale-bench.sh 3 1MiB levels/Microban_155.xsb 144 --no-bound --objective pushes
#
# Uses $SOKOSHARD_BINARY (default target/release/sokoshard) and a fresh
# temporary folder ($SCALE_DIR to keep it elsewhere), on loopback ports from
# $SCALE_PORT (default 7601) up. docs/benchmarks.md has the figures.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,12p' "$0"; exit 2; }
W=$1; MEM=$2; FILE=$(realpath "$3"); LEVEL=$4; shift 4
B=$(realpath "${SOKOSHARD_BINARY:-target/release/sokoshard}")
D=${SCALE_DIR:-$(mktemp -d)}
P=${SCALE_PORT:-7601}
mkdir -p "$D"
cd "$D"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
"$B" coordinator --listen 127.0.0.1:$P --token t --data-dir c --heartbeat-ms 500 --min-workers "$W" 2> c.log &
pids+=($!)
workers=()
for i in $(seq 0 $((W - 1))); do
  "$B" worker --join 127.0.0.1:$P --listen 127.0.0.1:$((P + 10 + i)) --token t --mem "$MEM" --data-dir "w$i" 2> "w$i.log" &
  pids+=($!); workers+=($!)
done
T0=$(date +%s.%N)
"$B" submit "$FILE" --level "$LEVEL" --coordinator 127.0.0.1:$P --token t --json "$@" > out.json &
S=$!
: > status.jsonl
while kill -0 $S 2>/dev/null; do
  "$B" status --coordinator 127.0.0.1:$P --token t --json >> status.jsonl 2>/dev/null && echo >> status.jsonl || true
  sleep 1
done
wait $S || echo "submit exited with $?"
T1=$(date +%s.%N)
echo "wall $(echo "$T1 - $T0" | bc) s"
for p in "${workers[@]}"; do echo "worker $p peak RSS $(awk '/VmHWM/{print $2, $3}' /proc/$p/status)"; done
python3 - <<'PY'
import json
v = json.load(open('out.json'))
print({k: v.get(k) for k in ['status', 'pushes', 'moves', 'states', 'generated', 'seconds', 'disk_bytes', 'objective']})
peak, ex = {}, None
for line in open('status.jsonl'):
    line = line.strip()
    if not line:
        continue
    try:
        s = json.loads(line)
    except ValueError:
        continue
    for w in s['workers']:
        peak[w['node_id']] = max(peak.get(w['node_id'], 0), w['store_disk_bytes'])
    for j in s['jobs']:
        if j.get('keys_exchanged'):
            ex = (j['keys_exchanged'], j['bytes_exchanged'])
print('peak disk per worker (MiB):', [round(b / 2**20, 1) for b in peak.values()])
if ex:
    print('keys sent between workers:', ex[0], 'bytes:', ex[1], 'bytes per key: %.2f' % (ex[1] / max(1, ex[0])))
PY
