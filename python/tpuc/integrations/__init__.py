"""Integrations with third-party projects, one package each; none edits
third-party files. `_hooks` patches a module right after it is first
imported, so a shim applies whether the user imports the project before or
after torch."""
