"""start_postgres: a real cluster that answers SQL with the credentials it hands out, and leaves no
process or files behind, also when the block fails."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg
import pytest

from tests.support.postgres import PostgresError, find_bin_dir, start_postgres


async def _who_am_i(url: str) -> tuple[str, str, str, bool]:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "select current_user, current_database(), current_setting('port'), rolsuper"
            " from pg_roles where rolname = current_user"
        )
        return row[0], row[1], row[2], row[3]
    finally:
        await conn.close()


async def _login_refused(url: str) -> bool:
    try:
        await (await asyncpg.connect(url)).close()
    except asyncpg.InvalidPasswordError:
        return True
    return False


def _postmaster_alive(data_dir: Path) -> bool:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_serves_its_database_and_is_gone_after_the_block(tmp_path):
    with start_postgres(tmp_path, database="lensesdb", user="lenses") as pg:
        assert asyncio.run(_who_am_i(pg.url)) == ("lenses", "lensesdb", str(pg.port), False)
        assert pg.asyncpg_url.startswith("postgresql+asyncpg://lenses:")
        assert asyncio.run(_login_refused(pg.url.replace(pg.password, "wrong")))
        assert _postmaster_alive(pg.data_dir)
        pid = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not pg.data_dir.exists() and not pg.socket_dir.exists()
    assert "database system is shut down" in pg.log_path.read_text()


def test_cluster_is_stopped_when_the_block_raises(tmp_path):
    with pytest.raises(KeyError), start_postgres(tmp_path) as pg:
        pid = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
        raise KeyError("the test failed")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not pg.data_dir.exists()


def test_missing_binaries_are_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("LENSES_PG_BIN_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(Path, "glob", lambda self, pattern: iter(()))
    with pytest.raises(PostgresError, match="apt-get install -y postgresql"):
        find_bin_dir()
