"""The state store: every SQL statement of the project. ``db`` opens the SQLite file (schema,
damage checks), ``migrate`` upgrades an older schema, ``store`` is ``StateStore``.
"""
