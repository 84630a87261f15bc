#!/usr/bin/env bash
# The compose cluster, for real: builds the binary and the image, brings up a
# coordinator and three workers (deploy/docker-compose.yml) on a private network,
# submits a Microban level, kills one worker container mid-job and starts it
# again on the same volume, checks that the job still finishes with the push
# count of the local solve (and of tests/data when it lists the level), and
# tears everything down: containers, network, volumes and the image. Before
# the cluster, a solve in a container with a 96 MiB memory limit must spill to
# disk under a budget of half the limit rather than be killed (not with TLS).
#
#   deploy/smoke.sh
#
# Needs a Docker engine, docker compose (v2) or docker-compose (v1), cargo and
# jq. Traffic stays on the compose network and on loopback (the coordinator is
# published on 127.0.0.1, on a free port). Every wait is bounded; the whole run
# takes a few minutes, most of it the release build when nothing is cached.
#
# Environment: SMOKE_TLS=1 runs the cluster with TLS on every connection
# (deploy/docker-compose.tls.yml, a certificate made here with openssl);
# SMOKE_LEVEL (default 93, Microban I); SMOKE_KEEP=1 leaves the cluster and image
# up for a look (tear down by hand: the commands are printed).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

level=${SMOKE_LEVEL:-93}
collection=levels/Microban_155.xsb
truth=tests/data/microban1-push-optimal.tsv

say() { printf '[smoke %3ds] %s\n' $((SECONDS - started)) "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }

tls=${SMOKE_TLS:-0}
for tool in docker cargo jq $([ "$tls" = 1 ] && echo openssl); do
  command -v "$tool" >/dev/null || die "'$tool' is needed"
done
docker info >/dev/null 2>&1 || die "no Docker engine (docker info fails)"
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose=(docker-compose)
else
  die "neither 'docker compose' nor 'docker-compose' is installed"
fi

# unique names, so that two runs (or another project) never share anything
run_id="$(date +%s)-$$"
project="sokoshard-smoke-$run_id"
tag="sokoshard:smoke-$run_id"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sokoshard-smoke.XXXXXX")
submit_pid=
up=0
cleanup() {
  local rc=$?
  set +e
  if [ -n "$submit_pid" ]; then kill "$submit_pid" 2>/dev/null; wait "$submit_pid" 2>/dev/null; fi
  if [ "$rc" != 0 ] && [ "$up" = 1 ]; then
    say "logs of the cluster (last 40 lines each):"
    dc logs --no-color --tail 40 >&2
    [ -s "$tmp/submit.err" ] && { say "submit's stderr:"; tail -20 "$tmp/submit.err" >&2; }
  fi
  if [ "${SMOKE_KEEP:-}" = 1 ]; then
    say "SMOKE_KEEP=1: left up; tear down with:"
    say "  ${compose[*]} -p $project ${files[*]} down -v; docker rmi $tag; rm -rf $tmp"
  else
    if [ "$up" = 1 ]; then
      dc down --volumes --remove-orphans --timeout 5 >"$tmp/down.log" 2>&1 || cat "$tmp/down.log" >&2
    fi
    docker image rm "$tag" >/dev/null 2>&1
    rm -rf "$tmp"
  fi
  if [ "$rc" = 0 ]; then say "PASS (${SECONDS}s)"; else say "FAILED (exit $rc)"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
files=(-f deploy/docker-compose.yml)
[ "$tls" = 1 ] && files+=(-f deploy/docker-compose.tls.yml)
dc() { "${compose[@]}" -p "$project" "${files[@]}" "$@"; }
# the compose file's variables: this run's image, token file and a free port
token=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
printf 'SOKOSHARD_TOKEN=%s\n' "$token" >"$tmp/cluster.env"
export SOKOSHARD_TOKEN=$token
export SOKOSHARD_IMAGE=$tag SOKOSHARD_ENV_FILE=$tmp/cluster.env SOKOSHARD_BIND=127.0.0.1 SOKOSHARD_PORT= SOKOSHARD_HTTP_PORT=
# client flags for the host side (TLS: trust the cluster's certificate by name)
client=()
if [ "$tls" = 1 ]; then
  mkdir -m 755 "$tmp/tls"
  # one certificate for the name `sokoshard`; not a CA (rustls refuses a CA
  # certificate as a server's own)
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=sokoshard -addext subjectAltName=DNS:sokoshard -addext basicConstraints=critical,CA:FALSE \
    -keyout "$tmp/tls/tls.key" -out "$tmp/tls/tls.crt" 2>"$tmp/openssl.log" || { cat "$tmp/openssl.log" >&2; die "openssl failed"; }
  # the image's user (uid 10001) reads them through the bind mount
  chmod 644 "$tmp/tls/tls.key" "$tmp/tls/tls.crt"
  export SOKOSHARD_TLS_DIR=$tmp/tls
  client=(--tls-ca "$tmp/tls/tls.crt" --tls-domain sokoshard)
fi

# waits until the command succeeds: wait_for SECONDS WHAT COMMAND...
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.5
  done
}

# ------------------------------------------------------------------ build
# SOKOSHARD_BINARY=PATH uses a binary already built (CI passes the one
# `cargo test` just built, which saves a second full build of every dependency)
if [ -n "${SOKOSHARD_BINARY:-}" ]; then
  say "using the binary $SOKOSHARD_BINARY"
  cp "$SOKOSHARD_BINARY" "$tmp/sokoshard"
else
  say "building the release binary"
  cargo build --release --locked --bin sokoshard
  # a private copy: the target directory may be shared with other builds
  cp "${CARGO_TARGET_DIR:-target}/release/sokoshard" "$tmp/sokoshard"
fi
bin=$tmp/sokoshard
say "building the image $tag (FROM scratch, nothing pulled)"
SOKOSHARD_BINARY=$bin deploy/build-image.sh "$tag"

say "local solve of Microban I #$level for reference"
reference=$("$bin" solve "$collection" --level "$level" --json | jq -r '.pushes') || die "the local solve of level $level failed"
[[ "$reference" =~ ^[0-9]+$ ]] || die "the local solve found no solution"
expected=$(awk -F'\t' -v l="$level" '$1 == l { print $2 }' "$truth")
if [ -n "$expected" ]; then
  [ "$reference" = "$expected" ] || die "local solve found $reference pushes, $truth says $expected"
  say "local solve: $reference pushes, as $truth says"
else
  say "local solve: $reference pushes (the level is not in $truth)"
fi

# a solve in a container with a memory limit takes half of it as its budget
# and spills the rest, where it used to take half the host's memory and be
# killed by the limit with nothing printed (exit 137)
if [ "$tls" != 1 ]; then
  say "a solve in a container limited to 96 MiB spills instead of being killed"
  limited=$(docker run --rm --memory 96m --memory-swap 96m "$tag" solve /usr/share/sokoshard/XSokoban_90.xsb \
    --level 4 --timeout 30 --objective pushes --json 2>"$tmp/limited.err") && code=0 || code=$?
  [ "$code" = 1 ] || { tail -5 "$tmp/limited.err" >&2; die "the limited solve exited $code (137: killed by its memory limit), not 1 (timeout)"; }
  jq -e '.status == "timeout" and .memory_budget_bytes == 50331648 and .disk_bytes > 0' <<<"$limited" >/dev/null \
    || die "the limited solve did not spill under a 48 MiB budget: $limited"
  say "limited solve: $(jq -r '"\(.states) states, \(.disk_bytes) bytes on disk, peak RSS \(.peak_rss_bytes)"' <<<"$limited")"
fi

# ------------------------------------------------------------------ up
up=1
say "bringing up the cluster (project $project$([ "$tls" = 1 ] && echo ", TLS"))"
dc up -d >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log" >&2; die "compose up failed"; }

healthy() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$(dc ps -q "$1")")" = healthy ]; }
for svc in coordinator worker1 worker2 worker3; do
  wait_for 90 "$svc to be healthy" healthy "$svc"
done
addr=$(dc port coordinator 7400)
addr=${addr/0.0.0.0/127.0.0.1}
say "all four containers healthy; coordinator published at $addr"
status() { "$bin" status --coordinator "$addr" --json "${client[@]}"; }
alive_workers() { [ "$(status | jq '[.workers[] | select(.alive)] | length')" = 3 ]; }
wait_for 30 "three workers alive at the coordinator" alive_workers
status | jq -r '.workers[] | "  worker \(.node_id) at \(.address)"' >&2
# the workers advertise their service names, not container addresses
[ "$(status | jq -r '[.workers[].address] | sort | join(",")')" = "worker1:7401,worker2:7401,worker3:7401" ] \
  || die "workers advertise $(status | jq -c '[.workers[].address]')"
nodes_before=$(status | jq -r '[.workers[].node_id] | sort | join(",")')
# a wrong token is refused
if SOKOSHARD_TOKEN=wrong "$bin" status --coordinator "$addr" "${client[@]}" >/dev/null 2>"$tmp/wrong.err"; then
  die "the coordinator accepted a wrong token"
fi
grep -qi 'token' "$tmp/wrong.err" || die "a wrong token failed without saying so: $(cat "$tmp/wrong.err")"
# with TLS on, a plain-text client gets nowhere
if [ "$tls" = 1 ] && "$bin" status --coordinator "$addr" >/dev/null 2>&1; then
  die "the coordinator answered a client without TLS"
fi

# ------------------------------------------------------------------ submit, kill, restart
say "submitting Microban I #$level"
timeout 300 "$bin" submit --coordinator "$addr" "$collection" --level "$level" --json "${client[@]}" \
  >"$tmp/submit.out" 2>"$tmp/submit.err" &
submit_pid=$!

job() { status | jq -c '.jobs | max_by(.id)'; }
# mid-job: running, a few layers done
deadline=$((SECONDS + 60))
while :; do
  j=$(job 2>/dev/null || true)
  if [ -n "$j" ] && [ "$j" != null ]; then
    jq -e 'select(.state == "running" and .layer >= 2)' <<<"$j" >/dev/null && break
    case $(jq -r .state <<<"$j") in
      finished | failed | cancelled) die "the job ended before a worker could be killed: $j" ;;
    esac
  fi
  [ "$SECONDS" -lt "$deadline" ] || die "timed out after 60s waiting for the job to run: $j"
  sleep 0.2
done
victim=worker2
vid=$(dc ps -q "$victim")
before=$(job)
docker kill "$vid" >/dev/null
say "killed $victim mid-job at $(jq -r '"\(.side) layer \(.layer), \(.stored) states"' <<<"$before")"
jq -e 'select(.state == "running")' <<<"$before" >/dev/null || die "the job was no longer running when $victim was killed"

# the coordinator notices: the job pauses (or the worker is marked lost)
noticed() {
  status | jq -e --arg a "$victim:7401" \
    '(.jobs | max_by(.id) | .state == "paused") or any(.workers[]; .address == $a and (.alive | not))' >/dev/null
}
wait_for 30 "the coordinator to notice the lost worker" noticed
say "coordinator: $(job | jq -r '"job \(.state): \(.message)"')"
finished_early=$(job | jq -r '.state')
[ "$finished_early" != finished ] || die "the job finished while $victim was down"

docker start "$vid" >/dev/null
say "started $victim again (same container, same volume)"
wait_for 60 "$victim to be healthy again" healthy "$victim"
wait_for 30 "three workers alive again" alive_workers
# same volume, same identity: the restarted worker is the one the job waits for
nodes_after=$(status | jq -r '[.workers[].node_id] | sort | join(",")')
[ "$nodes_after" = "$nodes_before" ] || die "worker identities changed across the restart: $nodes_before -> $nodes_after"

deadline=$((SECONDS + 240))
while kill -0 "$submit_pid" 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || die "the job did not finish within 240s of the restart: $(job)"
  sleep 1
done
set +e
wait "$submit_pid"
rc=$?
set -e
submit_pid=
[ "$rc" = 0 ] || die "submit exited $rc: $(cat "$tmp/submit.out" "$tmp/submit.err")"

# ------------------------------------------------------------------ check
result=$(tail -1 "$tmp/submit.out")
pushes=$(jq -r '.pushes' <<<"$result")
solution=$(jq -r '.solution' <<<"$result")
[ "$(jq -r '.status' <<<"$result")" = solved ] || die "submit: $result"
[ "$pushes" = "$reference" ] || die "the cluster found $pushes pushes, the local solve $reference"
"$bin" verify "$collection" --level "$level" --solution "$solution" --json | jq -e ".valid and .pushes == $reference" >/dev/null \
  || die "the cluster's solution does not verify"
final=$(job)
jq -e 'select(.state == "finished")' <<<"$final" >/dev/null || die "status shows the job as $(jq -r .state <<<"$final")"
started_at=$(docker inspect -f '{{.State.StartedAt}}' "$vid")
say "job $(jq -r .id <<<"$final") finished in $(jq -r '.seconds | floor' <<<"$final")s with $pushes pushes (local: $reference); the solution verifies"
say "$victim restarted at $started_at and rejoined as the same node"
# what the nodes said about the resume (informational)
dc logs --no-color coordinator 2>/dev/null | grep -E 'resumes|lost' | sed 's/^/  /' >&2 || true
dc logs --no-color "$victim" 2>/dev/null | grep -E 'job (loaded|kept)' | sed 's/^/  /' >&2 || true
"$bin" status --coordinator "$addr" "${client[@]}" >&2
