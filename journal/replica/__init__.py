"""Replication of a store's sessions to an S3 object store (the `journal[s3]` extra).

The object layout is FORMAT.md section 14; docs/replication.md tells the whole
story. Nothing here is imported by the core unless a store is opened with
`replica=` or a replica command runs; boto3 is imported when a bucket is first
opened. This package's own interface (what the command line uses) is below.
"""

from .listing import BucketPage, list_bucket_sessions
from .objects import ObjectStore, open_object_store
from .prune import PruneReport, prune
from .restore import RestoreReport, restore
from .sidecar import Follower
from .status import ReplicaStatus, replica_status
from .target import ReplicaTarget, parse_replica_url

__all__ = [
    "BucketPage",
    "Follower",
    "ObjectStore",
    "PruneReport",
    "ReplicaStatus",
    "ReplicaTarget",
    "RestoreReport",
    "list_bucket_sessions",
    "open_object_store",
    "parse_replica_url",
    "prune",
    "replica_status",
    "restore",
]
