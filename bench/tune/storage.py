"""The database a study lives in (`tune --storage`), and the one line that says why it cannot be
used: the URL not a database URL, its driver not installed, or the server not reached. The line
names the URL with its password hidden."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

from bench.util.errors import first_line

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

HEARTBEAT_S = 10
# What installs the driver a study's `postgresql://` opens with (`engine_url`).
DRIVERS = {"psycopg": 'pip install -e ".[cluster]" (the package psycopg[binary])'}


class StorageError(ValueError):
    """A study's database that cannot be used, in one line."""


def heartbeat_s(grace_s: int) -> int:
    """Seconds between a running trial's heartbeats: HEARTBEAT_S, or half the grace where
    that is shorter, so that a trial still running is never taken for a dead worker's."""
    return max(1, min(HEARTBEAT_S, grace_s // 2))


def rdb_storage(url: str, grace_s: int) -> RDBStorage:
    """Optuna's storage at `url`, with heartbeats: a RUNNING trial silent for `grace_s` seconds
    is failed and retried (up to 3 times) with the same parameters and the validation scores
    it had reported (the pruner's view of it; its runs resume from their checkpoints)."""
    from sqlalchemy.exc import ArgumentError

    check_kept(url)
    try:
        storage = RDBStorage(
            engine_url(url),
            heartbeat_interval=heartbeat_s(grace_s),
            grace_period=grace_s,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                max_retry=3, inherit_intermediate_values=True
            ),
        )
    except ArgumentError as err:
        raise StorageError(f"--storage {shown(url)}: {first_line(err)}") from None
    except ImportError as err:
        raise StorageError(missing_driver(url, err)) from None
    if storage.engine.dialect.name == "sqlite":
        serialize_sqlite(storage.engine)
    return storage


def serialize_sqlite(engine: Engine) -> None:
    """Every transaction on this SQLite engine takes the database's write lock from its start
    (BEGIN IMMEDIATE; SQLAlchemy's recipe for pysqlite), where SQLite ignores Optuna's SELECT
    ... FOR UPDATE: two workers taking a queued trial (the default, a retry) then both read it
    WAITING, both ran it, and the second failed at its end ("Cannot tell a COMPLETE trial").
    The connections Optuna opened already are closed; the next ones begin so."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def no_implicit_begin(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # pysqlite's own BEGIN, deferred, is off

    @event.listens_for(engine, "begin")
    def begin_immediate(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()


def check_kept(url: str) -> None:
    """Refuse an SQLite database in memory (`sqlite://`, `sqlite:///:memory:`): it would keep
    no trial after the process, nor share them with another worker; and a server's URL that
    names no database (`postgresql://`), which the server would refuse as "the database None"."""
    parsed = parsed_url(url)
    if parsed is None:
        return  # not a URL: RDBStorage names what is wrong
    if parsed.get_backend_name() != "sqlite" and not parsed.database:
        backend = parsed.get_backend_name()
        raise StorageError(
            f"--storage {shown(url)} names no database; give one after the server, e.g. "
            f"{backend}://USER:PASSWORD@HOST:PORT/DATABASE, or leave --storage out "
            "(RESULTS/tune/studies.db)"
        )
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise StorageError(
            f"--storage {url} is a database in memory, which keeps no trial after tune ends "
            "and shares none with other workers: give a file, e.g. sqlite:///tune/studies.db, "
            "or leave --storage out (RESULTS/tune/studies.db)"
        )


def engine_url(url: str) -> str:
    """`url` as SQLAlchemy opens it: `postgresql://` with the driver psycopg (3), the one the
    extra `cluster` installs, where SQLAlchemy 2.0 would load psycopg2 (2.1 loads psycopg
    itself); a URL that names its driver (`postgresql+psycopg2://`), or no URL, as given."""
    parsed = parsed_url(url)
    if parsed is None or parsed.drivername != "postgresql":
        return url
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def parsed_url(url: str) -> URL | None:
    """SQLAlchemy's URL object of `url`; None where `url` is not a database URL."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except ArgumentError:
        return None


@contextmanager
def storage_errors(url: str) -> Iterator[None]:
    """A database error while opening or using the study (the server down or unreachable, the
    credentials refused, the database missing or not writable) as one StorageError line."""
    from sqlalchemy.exc import DatabaseError, InterfaceError, OperationalError, ProgrammingError

    try:
        yield
    except (OperationalError, InterfaceError, ProgrammingError, DatabaseError) as err:
        raise StorageError(unreachable(url, err)) from None


def shown(url: str) -> str:
    """The URL as it may be printed: its password, if any, as ***."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: nothing in it to hide
        return url


def missing_driver(url: str, err: ImportError) -> str:
    module = getattr(err.__cause__, "name", None) or err.name or "its driver"
    install = DRIVERS.get(module, f"install the Python module {module}")
    return f"--storage {shown(url)} needs the database driver {module}, not installed: {install}"


def unreachable(url: str, err: Exception) -> str:
    """'the study's database URL cannot be used: WHY; check ...', without the password."""
    from sqlalchemy.engine import make_url

    why = first_line(getattr(err, "orig", None) or err)
    parsed = make_url(url)
    if parsed.password:
        why = why.replace(str(parsed.password), "***")
    if parsed.get_backend_name() == "sqlite" and "not a database" in why:
        check = "that the file is a study's SQLite database, or give --storage another file"
    elif parsed.get_backend_name() == "sqlite":
        check = "that its folder exists and can be written, on a local disk"
    else:
        where = f"{parsed.host or 'localhost'}:{parsed.port or 'the default port'}"
        check = (
            f"that the server is running and reachable at {where}, the user name and password, "
            f"and that the database {parsed.database} exists and the user may create tables in it"
        )
    return f"the study's database {shown(url)} cannot be used: {why}; check {check}"
