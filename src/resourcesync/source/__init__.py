"""The Source side: where resources come from, the state of the last publication, the
documents and packages written from it, and the server that makes them available."""
