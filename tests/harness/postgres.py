"""A PostgreSQL server of the tests' own (Debian's `postgresql` package; `make postgres` installs it): initdb into
a temporary directory, started with pg_ctl on a free loopback port (its socket in that directory too), trust
authentication for the local user, stopped and removed at the end. Never the system's cluster service.

PostgreSQL refuses to run as root: under root (CI, this machine) its commands run as the `postgres` user the
package creates, and the directory is theirs."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = "the archive's tests need PostgreSQL: run `make postgres` (as root), or apt-get install postgresql"


class PostgresUnavailable(RuntimeError):
    pass


def bin_dir() -> Path:
    """The server's binaries: pg_ctl on PATH, else the newest of Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if not versions:
        raise PostgresUnavailable(INSTALL_HINT)
    return versions[-1].parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Postgres:
    """One server: start(), stop() (and start() again: the fault tests), create_database(), destroy(). durable:
    PostgreSQL's own defaults (fsync on), for a benchmark; else the tests' (no fsync)."""

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.bin = bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="sextant-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user = None if os.geteuid() else "postgres"
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync",
                  "--locale=C.UTF-8")

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        argv = [str(self.bin / tool), *args]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode:
            raise PostgresUnavailable(f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
        return done.stdout

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
                   "-c shared_buffers=128MB -c max_connections=200")
        if not self.durable:  # a test server, thrown away afterwards: nothing to keep through a crash
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        done = subprocess.run([str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                              capture_output=True)
        return done.returncode == 0

    def server_pid(self) -> int:
        """The postmaster's pid (its children, the backends, are the server's CPU too)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "test") -> str:
        """A fresh empty database; its DSN."""
        name = f"{prefix}_{secrets.token_hex(4)}"
        self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-q", "-c",
                  f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
