"""The Destination: discover a Source and keep a local copy in step with it.

`discover` finds a Source's documents, `sync` plans and fetches (baseline, incremental, audit),
`state` remembers what was applied, and `mirror` is the one place that writes into the local
tree: it alone maps a URI to a path, refuses what would escape the tree, and puts files in
place atomically after checking their length and hashes.
"""
