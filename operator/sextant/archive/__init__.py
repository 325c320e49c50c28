"""The archive: every finished job's record in a database (PostgreSQL in production, SQLite embedded), so that a
job's history outlives its object in etcd (DESIGN.md §9, docs/archive.md).

record.py builds a record from a raw Job (pure); schema.py is the tables, migrations.py their versions (Alembic);
store.py reads and writes them; settings.py the DSN and the caps; command.py `sextant archive migrate`. It imports
nothing of Sextant but resources/ and lifecycle/'s pure rules, so that the operator, the HTTP API and the CLI can
each use it without pulling in one another.
"""
