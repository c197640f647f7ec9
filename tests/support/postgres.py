"""A throwaway PostgreSQL cluster for tests and benchmarks.

    from tests.support.postgres import start_postgres

    with start_postgres(tmp_path) as pg:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = pg.asyncpg_url
        ...

`start_postgres(base_dir)` runs `initdb` and then `postgres` itself (no system service, no
`pg_ctlcluster`): a new cluster listening only on 127.0.0.1 at a free port, its unix socket in its
own directory, and in it one ordinary role (no superuser) owning one database, both "prefect" unless
told, as docs/deploy.md sets up a production server. Authentication is scram-sha-256 with one random
password (the role's and the `postgres` superuser's). It yields a `PostgresServer`:

- `url`: `postgresql://user:password@127.0.0.1:port/database` (psql, psycopg, asyncpg.connect);
- `asyncpg_url`: the same with the `postgresql+asyncpg` scheme SQLAlchemy wants (Prefect's
  `PREFECT_API_DATABASE_CONNECTION_URL`);
- `port`, `data_dir`, `socket_dir`, `log_path` (the server's stdout and stderr), `user`,
  `password`, `database`, `bin_dir`.

On leaving the block (also after an exception) the server gets a fast shutdown (SIGINT), then
SIGQUIT and SIGKILL if it hangs, and the cluster's files are removed; the log stays in `base_dir`.
If the Python process itself dies without cleaning up, the kernel sends the postmaster SIGQUIT
(parent-death signal), so no server outlives the test session.

PostgreSQL refuses to run as root. As root the cluster runs as the unprivileged `postgres` user of
Debian's package (or `run_as`), and its files go into a fresh directory under the system temporary
directory that this user owns, because `base_dir` may sit below a root-only directory (pytest's
/tmp/pytest-of-root is mode 0700). As any other user they go into `base_dir/pgdata` and
`base_dir/pgsocket`.

The binaries are found in `$LENSES_PG_BIN_DIR`, on PATH (`initdb`), or in Debian's
/usr/lib/postgresql/<version>/bin (the newest). The cluster is tuned for throwaway use
(`fsync=off`, `synchronous_commit=off`, `full_page_writes=off`): a crash loses it, which is fine
here and never right in production (docs/deploy.md).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ADMIN = "postgres"  # the cluster's superuser; `user` is an ordinary role
STARTUP_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_THROWAWAY_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",  # a Prefect server and its workers each keep a pool of connections
}


class PostgresError(RuntimeError):
    """PostgreSQL is missing, or the cluster did not start; the message says which and why."""


@dataclass(frozen=True)
class PostgresServer:
    url: str
    asyncpg_url: str
    port: int
    data_dir: Path
    socket_dir: Path
    log_path: Path
    user: str
    password: str
    database: str
    bin_dir: Path


def find_bin_dir() -> Path:
    """The directory holding `initdb`, `postgres`, `pg_isready` and `psql`; PostgresError if there is none."""
    candidates = []
    if os.environ.get("LENSES_PG_BIN_DIR"):
        candidates.append(Path(os.environ["LENSES_PG_BIN_DIR"]))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version_key(p.parent.name))
    candidates.extend(reversed(debian))
    for directory in candidates:
        if all((directory / name).is_file() for name in ("initdb", "postgres", "pg_isready", "psql")):
            return directory
    raise PostgresError(
        "PostgreSQL binaries not found (initdb, postgres, pg_isready, psql): install Debian's "
        "`postgresql` package (`apt-get install -y postgresql`) or set LENSES_PG_BIN_DIR"
    )


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def start_postgres(
    base_dir: Path,
    *,
    database: str = "prefect",
    user: str = "prefect",
    run_as: str = "postgres",
    settings: dict[str, str] | None = None,
) -> Iterator[PostgresServer]:
    """Start a new PostgreSQL cluster, yield its PostgresServer, stop it and remove it (see module doc).

    `settings` are extra `postgres -c name=value` settings (they override the throwaway defaults).
    """
    bin_dir = find_bin_dir()
    base_dir.mkdir(parents=True, exist_ok=True)
    account = pwd.getpwnam(run_as) if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="lenses-pg-")) if account else base_dir
    data_dir, socket_dir = root / "pgdata", root / "pgsocket"
    password = secrets.token_urlsafe(18)
    try:
        socket_dir.mkdir()
        if account:
            for path in (root, socket_dir):
                os.chown(path, account.pw_uid, account.pw_gid)
        _initdb(bin_dir, data_dir, password, account)
        with _running_server(bin_dir, data_dir, socket_dir, base_dir, settings or {}, account) as port:
            _create_role_and_database(bin_dir, port, password, user, database)
            url = f"postgresql://{user}:{password}@127.0.0.1:{port}/{database}"
            yield PostgresServer(
                url=url,
                asyncpg_url=url.replace("postgresql://", "postgresql+asyncpg://", 1),
                port=port,
                data_dir=data_dir,
                socket_dir=socket_dir,
                log_path=base_dir / "postgres.log",
                user=user,
                password=password,
                database=database,
                bin_dir=bin_dir,
            )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(socket_dir, ignore_errors=True)
        if account:
            shutil.rmtree(root, ignore_errors=True)


def _run_kwargs(account: pwd.struct_passwd | None) -> dict:
    """Popen arguments that drop to the unprivileged account (no supplementary groups of root)."""
    if account is None:
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": [], "cwd": "/"}


def _initdb(bin_dir: Path, data_dir: Path, password: str, account: pwd.struct_passwd | None) -> None:
    pwfile = data_dir.parent / "initdb.pw"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    if account:
        os.chown(pwfile, account.pw_uid, account.pw_gid)
    try:
        result = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data_dir), "-U", ADMIN, f"--pwfile={pwfile}"]
            + ["--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"],
            capture_output=True,
            text=True,
            timeout=120,
            **_run_kwargs(account),
        )
    finally:
        pwfile.unlink(missing_ok=True)
    if result.returncode != 0:
        raise PostgresError(f"initdb failed ({result.returncode}): {result.stderr[-2000:]}")


def _die_with_parent() -> None:
    """Runs in the child between fork and exec, after the uid change (which would clear the setting):
    if the test process dies without stopping the server, the kernel sends it SIGQUIT."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT)


@contextmanager
def _running_server(
    bin_dir: Path,
    data_dir: Path,
    socket_dir: Path,
    log_dir: Path,
    settings: dict[str, str],
    account: pwd.struct_passwd | None,
) -> Iterator[int]:
    port = free_port()
    options = {
        **_THROWAWAY_SETTINGS,
        **settings,
        "port": str(port),
        "unix_socket_directories": str(socket_dir),
    }
    command = [str(bin_dir / "postgres"), "-D", str(data_dir)]
    command += [arg for name, value in options.items() for arg in ("-c", f"{name}={value}")]
    log_path = log_dir / "postgres.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a prctl call, see _die_with_parent
            **_run_kwargs(account),
        )
    try:
        _wait_until_ready(bin_dir, port, proc, log_path)
        yield port
    finally:
        _stop(proc)


def _wait_until_ready(bin_dir: Path, port: int, proc: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PostgresError(f"postgres exited ({proc.returncode}): {log_path.read_text()[-2000:]}")
        probe = subprocess.run(
            [str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "2"],
            capture_output=True,
        )
        if probe.returncode == 0:
            return
        time.sleep(0.2)
    raise PostgresError(f"postgres not ready in {STARTUP_TIMEOUT_S:.0f} s: {log_path.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """Fast shutdown (SIGINT: disconnect clients, then exit); immediate (SIGQUIT), then SIGKILL."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _create_role_and_database(bin_dir: Path, port: int, password: str, user: str, database: str) -> None:
    """As docs/deploy.md sets up a production server: an ordinary role (no superuser) owning its database."""
    statements = [
        f"CREATE ROLE \"{user}\" LOGIN PASSWORD '{password}'",  # token_urlsafe: nothing to escape
        f'CREATE DATABASE "{database}" OWNER "{user}"',
    ]
    command = [str(bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", ADMIN, "-d", "postgres"]
    command += ["-v", "ON_ERROR_STOP=1", "-q"] + [arg for sql in statements for arg in ("-c", sql)]
    env = {**os.environ, "PGPASSWORD": password}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    if result.returncode != 0:
        raise PostgresError(f"creating role {user} and database {database} failed: {result.stderr[-2000:]}")
