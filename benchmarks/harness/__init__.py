"""The side-by-side harness behind `run.py`: stores, fixtures, workloads, the table.

config.py    sizes of the full and the quick run
sides.py     the stores under test behind one adapter (journal, mobius, tuned)
report.py    rows, ratios against each baseline and the floor, the printed table
measure.py   timing helpers, the floors, paging loops
disk.py      allocated bytes (du) and journal's parts of them
core.py      the Harness: fixtures (histories, long session, catalogs), running a section
writes.py    append, threads, save workloads
costs.py     the opaque 50 KiB save, bulk creation, disk of many sessions, state
reads.py     event pages, open, bytes, memory
later.py     catalog pages, transcript/execution pages, recent executions, fork, delete
process.py   fresh processes: cold open, start-up, RSS (they run child.py)
child.py     what such a fresh process does (a script)
combine.py   several runs' --json files as one table of medians and spreads (a script)
"""
