#!/usr/bin/env bash
# The replication tests again, on Ceph radosgw (Debian's Ceph 16.2 "pacific"): its S3
# differs from SeaweedFS's where it matters (If-Match needs the ETag unquoted; If-Match on
# an absent key is 412), so both servers must pass. .ci/run runs this after scripts/test.sh.
#
# Starts a one-node cluster with scripts/s3-ceph.sh (installing the packages with apt-get
# when missing, as root) into a temporary directory, runs tests/replica against it
# (JOURNAL_TEST_S3_ENV), stops every daemon on exit and returns pytest's status. Fails,
# never skips, when Ceph cannot be installed or started. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "test-ceph: no .venv; run scripts/test.sh first" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/journal-ceph.XXXXXX")
cleanup() {
    bash scripts/s3-ceph.sh stop "$dir" || true
    if [ "${KEEP_CEPH_DIR:-0}" = 1 ]; then echo "test-ceph: kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! bash scripts/s3-ceph.sh start "$dir"; then
    echo "test-ceph: FAILED: Ceph could not be installed or started (see above; logs in $dir/log)" >&2
    KEEP_CEPH_DIR=1
    exit 1
fi
status=0
JOURNAL_TEST_S3_ENV=$dir/s3.env .venv/bin/python -m pytest -q -p no:cacheprovider tests/replica "$@" \
    || status=$?
echo "test-ceph: pytest on Ceph radosgw exited with $status"
exit "$status"
