#!/usr/bin/env bash
# An S3 server for the replication tests: a one-node Ceph cluster (one mon, one memstore
# OSD, radosgw; no mgr, no systemd) from Debian's packages, on 127.0.0.1 only.
#
#   scripts/s3-ceph.sh start DIR    # installs ceph-mon ceph-osd radosgw when missing (root)
#   scripts/s3-ceph.sh stop DIR     # ends every daemon start began, by its pid
#
# start writes DIR/s3.env (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION; S3_KIND=ceph) once radosgw answers with the S3 user it creates. It fails
# (non-zero, with the reason) when the packages cannot be installed or a daemon does not
# come up: it never leaves a half-started cluster running. The mon's and radosgw's ports
# are picked free; the OSD takes the first free ports of Ceph's 6800-7300 range itself.
# Settings that matter (learned on Ceph 16.2 "pacific"):
#   ms mon client mode = crc   radosgw insists on a "secure" mon connection otherwise,
#                              which auth none cannot give (it loops on "-13")
#   tcp_nodelay=1 (beast)      without it every GET waits ~40 ms for delayed ACKs
# STORE_BYTES caps the memstore OSD (RAM; default 2 GiB).
set -euo pipefail

die() { echo "s3-ceph: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 start|stop DIR"
cmd=$1 dir=$2
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

stop() {
    local pids=() f pid
    for f in "$dir"/run/*.pid; do
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" && pids+=("$pid"); fi
        rm -f "$f"
    done
    for pid in ${pids[@]+"${pids[@]}"}; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "s3-ceph: pid $pid still alive after 10 s, SIGKILL" >&2; kill -KILL "$pid" || true
        fi
    done
    echo "s3-ceph: stopped ${#pids[@]} daemons (${pids[*]-})"
}

install_packages() {
    local missing=() p
    for p in ceph-mon ceph-osd radosgw ceph-common; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    command -v curl >/dev/null || missing+=(curl)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || die "Ceph is not installed (missing: ${missing[*]}) and this is not root:" \
        "run 'apt-get install ${missing[*]}' as root"
    command -v apt-get >/dev/null || die "Ceph is not installed (missing: ${missing[*]}) and there is no apt-get"
    local t0; t0=$(now)
    echo "s3-ceph: installing ${missing[*]} ..."
    apt-get -o DPkg::Lock::Timeout=300 update -q >"$dir/apt.log" 2>&1 \
        || { tail -20 "$dir/apt.log" >&2; die "apt-get update failed (log: $dir/apt.log)"; }
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
        --no-install-recommends "${missing[@]}" >>"$dir/apt.log" 2>&1 \
        || { tail -20 "$dir/apt.log" >&2; die "apt-get install ${missing[*]} failed (log: $dir/apt.log)"; }
    echo "s3-ceph: installed in $(since "$t0") s"
}

free_ports() {  # N distinct ports free on 127.0.0.1 now
    python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll COMMAND every 0.25 s
    local secs=$1 what=$2; shift 2
    local end; end=$(( $(date +%s) + secs ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || { stop >&2; die "$what did not come up in $secs s (logs: $dir/log)"; }
        sleep 0.25
    done
}

start() {
    mkdir -p "$dir"
    [ -n "$(ls "$dir"/run/*.pid 2>/dev/null)" ] && die "a cluster started in $dir still has pid files; stop it first"
    install_packages
    for b in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool python3 curl; do
        command -v "$b" >/dev/null || die "'$b' is missing after the install"
    done
    local t0; t0=$(now)
    rm -rf "$dir"/{mon,osd,rgw,run,log,ceph.conf,monmap,s3.env}
    mkdir -p "$dir"/{mon/ceph-a,osd,rgw,run,log}
    local conf=$dir/ceph.conf fsid osd_uuid osd_id mon2 mon1 rgw access secret
    read -r mon2 mon1 rgw <<<"$(free_ports 3)"
    fsid=$(cat /proc/sys/kernel/random/uuid)
    cat >"$conf" <<EOF
[global]
fsid = $fsid
mon initial members = a
mon host = [v2:127.0.0.1:$mon2,v1:127.0.0.1:$mon1]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
public network = 127.0.0.0/8
ms bind ipv6 = false
ms mon client mode = crc
auth cluster required = none
auth service required = none
auth client required = none
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mon osd full ratio = .99
mon osd backfillfull ratio = .99
mon osd nearfull ratio = .99
osd failsafe full ratio = .995
mon max pg per osd = 1000
[mon]
mon data = $dir/mon/ceph-\$id
[osd]
osd data = $dir/osd/ceph-\$id
osd objectstore = memstore
memstore device bytes = ${STORE_BYTES:-2147483648}
osd memory target = 939524096
osd op num shards = 1
osd op num threads per shard = 2
osd max object name len = 460
osd max object namespace len = 64
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$rgw tcp_nodelay=1
rgw data = $dir/rgw
rgw thread pool size = 64
rgw dns name = localhost
rgw enable usage log = false
EOF
    export CEPH_CONF=$conf
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon2,v1:127.0.0.1:$mon1]" "$dir/monmap" \
        >"$dir/log/monmap.log" 2>&1 || die "monmaptool failed: $(cat "$dir/log/monmap.log")"
    ceph-mon --mkfs -i a --monmap "$dir/monmap" -c "$conf" >"$dir/log/mon-mkfs.log" 2>&1 \
        || die "ceph-mon --mkfs failed: $(tail -5 "$dir/log/mon-mkfs.log")"
    ceph-mon -i a -c "$conf" >>"$dir/log/daemons.log" 2>&1 || { stop >&2; die "ceph-mon did not start"; }
    wait_for 60 "the monitor" ceph -c "$conf" --connect-timeout 5 mon stat
    echo "s3-ceph: mon up after $(since "$t0") s"

    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    osd_id=$(ceph -c "$conf" --connect-timeout 10 osd new "$osd_uuid") || { stop >&2; die "'ceph osd new' failed"; }
    mkdir -p "$dir/osd/ceph-$osd_id"
    ceph-osd -i "$osd_id" -c "$conf" --mkfs --osd-uuid "$osd_uuid" >"$dir/log/osd-mkfs.log" 2>&1 \
        || { stop >&2; die "ceph-osd --mkfs failed: $(tail -5 "$dir/log/osd-mkfs.log")"; }
    ceph-osd -i "$osd_id" -c "$conf" >>"$dir/log/daemons.log" 2>&1 || { stop >&2; die "ceph-osd did not start"; }
    osd_up() { ceph -c "$conf" --connect-timeout 5 osd dump | grep -q "^osd.$osd_id up"; }
    wait_for 90 "osd.$osd_id" osd_up
    echo "s3-ceph: osd.$osd_id up after $(since "$t0") s"

    radosgw -n client.rgw.a -c "$conf" >>"$dir/log/daemons.log" 2>&1 || { stop >&2; die "radosgw did not start"; }
    wait_for 180 "radosgw on 127.0.0.1:$rgw" curl -fsS -o /dev/null "http://127.0.0.1:$rgw/"
    echo "s3-ceph: radosgw answers after $(since "$t0") s"

    access=journaltest$RANDOM$RANDOM
    secret=$(python3 -c 'import secrets; print(secrets.token_hex(20))')
    radosgw-admin -c "$conf" -n client.admin user create --uid=journal --display-name=journal \
        --access-key="$access" --secret-key="$secret" >"$dir/log/user-create.log" 2>&1 \
        || { stop >&2; die "radosgw-admin user create failed: $(tail -5 "$dir/log/user-create.log")"; }
    cat >"$dir/s3.env" <<EOF
S3_KIND=ceph
AWS_ENDPOINT_URL=http://127.0.0.1:$rgw
AWS_ACCESS_KEY_ID=$access
AWS_SECRET_ACCESS_KEY=$secret
AWS_REGION=us-east-1
EOF
    echo "s3-ceph: S3 at http://127.0.0.1:$rgw after $(since "$t0") s (env: $dir/s3.env)"
}

case $cmd in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop DIR" ;;
esac
