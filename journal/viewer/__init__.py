"""A local, read-only web viewer of a journal store: `journal serve`.

Sessions, a session's timeline, conversation, execution records, middleware
state, any historical checkpoint and diffs between two, the fork tree, a live
tail of new commits and verify on demand, with a JSON API under the pages
(docs/viewer.md). Standard library only (`http.server`); it reads the store
through the public API (`journal`) and the tools interface (`journal.inspect`),
opened read-only: it never takes a lock or writes a byte.

The package, one module per concern: `command` (the `serve` command), `server`
(HTTP: refusals, routing, server-sent events), `params` (query parameters),
`data` (the answers, as JSON), `convo` (transcript items as a conversation),
`html` (escaping and page parts), `pages` and `history` (the pages), `static/`
(the stylesheet and the script).

Importing the package imports none of its modules: `journal serve`'s parser is
built with the command line's, and the server loads only when it runs.
"""
