"""Replication of a store's sessions to an S3 object store (the `journal[s3]` extra).

The object layout is FORMAT.md section 14. Nothing here is imported by the core
unless a store is opened with `replica=` or a replica command runs.
"""
