"""Database adapters: connection pool, migrations and the embedded default server."""
