"""User mode: stoker without root (README "Without root", docs/slurm.md).

Where a node has no system daemon (nothing answers at /run/stoker/stoker.sock
and STOKER_SOCKET is unset), the first Loader of a user on the node starts
that user's own stokerd from the wheel (stoker/bin/stokerd) and every other
process of the user attaches to it:

  - its directory is $XDG_RUNTIME_DIR/stoker, or /tmp/stoker-$UID where
    XDG_RUNTIME_DIR is unset (as under Slurm); it must be the user's own
    with mode 0700, or it is refused with the reason and never used;
  - in it: stoker.sock, stokerd.log (the daemon's log) and `lock`: whoever
    connects or starts a daemon holds the lock (flock) meanwhile, so eight
    ranks starting at once make one daemon, a dead daemon's stale socket is
    replaced, and a daemon on its idle way out (it takes the same lock
    before it stops: idle_exit_s, default 60 s) never strands a client;
  - the daemon runs with user_mode = 1 (daemon/loop/usermode.c): it serves
    only its own uid, and takes its settings from
    $XDG_CONFIG_HOME/stoker/stoker.conf (~/.config/stoker/stoker.conf)
    where that exists, never from the system's /etc/stoker.

Loader(auto_start=False) or STOKER_AUTOSTART=0 starts nothing (a running
user daemon is still used); stats(), config() and stokerctl (the wheel's
command) find the daemon the same way and never start one.
"""

import errno
import fcntl
import os
import socket as _socket
import stat
import subprocess
import sys
import time

SYSTEM_SOCKET = "/run/stoker/stoker.sock"
SOCKET_NAME = "stoker.sock"
LOG_NAME = "stokerd.log"
LOCK_NAME = "lock"
# A rank waits this long for the lock (another rank starting the daemon) and
# for a daemon it started to listen.
LOCK_TIMEOUT_S = 120.0
START_TIMEOUT_S = 60.0


class UserModeError(OSError):
    """Raised as stoker.StokerError by the caller (kept apart from __init__)."""


def autostart_wanted(auto_start=None):
    """auto_start None: unless STOKER_AUTOSTART=0."""
    if auto_start is not None:
        return bool(auto_start)
    return os.environ.get("STOKER_AUTOSTART", "1").strip().lower() not in ("0", "false", "no", "off")


def runtime_dir():
    """The user's directory for its daemon (not checked: see checked_dir)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg):
        return os.path.join(xdg, "stoker")
    return "/tmp/stoker-%d" % os.geteuid()


def user_socket():
    return os.path.join(runtime_dir(), SOCKET_NAME)


def checked_dir(create):
    """The runtime directory, created 0700 if asked; refused (EPERM, with the
    reason) unless it is a directory of ours that only we may enter. None if
    it does not exist and create is False."""
    d = runtime_dir()
    if create:
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise UserModeError(e.errno, "cannot make the user-mode directory %s: %s (set XDG_RUNTIME_DIR to a "
                                "directory of yours, or STOKER_SOCKET)" % (d, e.strerror)) from None
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return None
    uid = os.geteuid()
    why = ("not a directory" if not stat.S_ISDIR(st.st_mode) else
           "owned by uid %d, not by you (uid %d)" % (st.st_uid, uid) if st.st_uid != uid else
           "group or others may enter it (mode %04o)" % stat.S_IMODE(st.st_mode) if st.st_mode & 0o077 else None)
    if why:
        raise UserModeError(errno.EPERM, "refusing the user-mode directory %s: %s; it must be your own with "
                            "mode 0700 (remove it, or chmod 700 it if it is yours), or set STOKER_SOCKET" % (d, why))
    return d


def _answers(path):
    """Whether a daemon accepts connections at path (a bare connect)."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class _Lock:
    """flock on DIR/lock, waiting at most LOCK_TIMEOUT_S."""

    def __init__(self, d):
        self.path = os.path.join(d, LOCK_NAME)
        self.fd = -1

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise UserModeError(errno.ETIMEDOUT, "waited %.0f s for %s: another process holds it"
                                        % (LOCK_TIMEOUT_S, self.path))
                time.sleep(0.005)

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the lock


def stokerd_path():
    """The stokerd to start: STOKER_STOKERD, the wheel's, or a checkout's
    build (STOKER_BUILD, or build/ beside client/python)."""
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.environ.get("STOKER_STOKERD"), os.path.join(here, "bin", "stokerd")]
    if os.environ.get("STOKER_BUILD"):
        cands.append(os.path.join(os.environ["STOKER_BUILD"], "stokerd"))
    cands.append(os.path.normpath(os.path.join(here, "..", "..", "..", "build", "stokerd")))
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    return None


def user_config():
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    path = os.path.join(base, "stoker", "stoker.conf")
    return path if os.path.isfile(path) else os.devnull


def _log_tail(path, lines=8):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return "(unreadable: %s)" % e.strerror
    return " | ".join(text.strip().splitlines()[-lines:]) or "(empty)"


def _alive(pid):
    """A process that is neither gone nor a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def start_daemon(d):
    """Start the user's stokerd in d (under the lock) and wait until it
    listens. Its log is d/stokerd.log."""
    sock, log = os.path.join(d, SOCKET_NAME), os.path.join(d, LOG_NAME)
    exe = stokerd_path()
    if not exe:
        raise UserModeError(errno.ENOENT, "no stokerd to start for user mode: this stoker package carries "
                            "none (install the wheel `make wheel` builds, or set STOKER_STOKERD)")
    args = [exe, "--config", user_config(), "--socket", sock, "--set", "user_mode=1"]
    # Through a shell that puts it in the background and exits, so that it
    # is nobody's child here (no zombie in the trainer) and in a session of
    # its own (a Ctrl-C to the job's terminal does not reach it).
    shell = 'umask 077; "$@" </dev/null >>"$STOKER_USERD_LOG" 2>&1 & echo $!'
    env = dict(os.environ, STOKER_USERD_LOG=log)
    r = subprocess.run(["/bin/sh", "-c", shell, "sh"] + args, stdout=subprocess.PIPE, env=env, cwd="/",
                       start_new_session=True, check=True)
    pid = int(r.stdout.split()[-1])
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(sock):
        if not _alive(pid):
            raise UserModeError(errno.EIO, "the user-mode stokerd (%s, pid %d) exited before listening on %s; "
                                "its log %s ends: %s" % (exe, pid, sock, log, _log_tail(log)))
        if time.monotonic() > deadline:
            raise UserModeError(errno.ETIMEDOUT, "the user-mode stokerd (%s, pid %d) did not listen on %s in "
                                "%.0f s; its log: %s" % (exe, pid, sock, START_TIMEOUT_S, log))
        time.sleep(0.01)
    return pid


_GONE = (errno.ENOENT, errno.ECONNREFUSED)


def connect(connect_fn, start):
    """connect_fn(path) -> handle, raising OSError; path None means
    libstoker's own default (STOKER_SOCKET, else the system socket).

    With STOKER_SOCKET set: that, nothing else. Else the system daemon when
    one answers; else the user's daemon, started when `start` and none runs."""
    if os.environ.get("STOKER_SOCKET"):
        return connect_fn(None)
    system_error = None
    if os.path.exists(SYSTEM_SOCKET):
        try:
            return connect_fn(None)
        except OSError as e:
            if e.errno not in _GONE:
                raise  # refused, not in the socket's group: the administrator's rule stands
            system_error = e
    d = checked_dir(create=start)
    if d is None:  # no user daemon has run here, and none may be started
        raise system_error or UserModeError(errno.ENOENT, "no stokerd: nothing at %s (the system daemon) nor at %s "
                                            "(a user-mode daemon)%s" % (SYSTEM_SOCKET, user_socket(),
                                            "" if start else "; auto-start is off"))
    sock = os.path.join(d, SOCKET_NAME)
    with _Lock(d):
        try:
            return connect_fn(sock)
        except OSError as e:
            if e.errno not in _GONE or not start:
                raise
        start_daemon(d)
        return connect_fn(sock)


def stokerctl_main():
    """The wheel's `stokerctl` command: the bundled binary, pointed at the
    daemon this package would use (never starting one)."""
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "stokerctl")
    if not os.access(exe, os.X_OK):
        sys.exit("stokerctl: this stoker package carries no stokerctl (install the wheel `make wheel` builds)")
    args = sys.argv[1:]
    explicit = any(a in ("-s", "--socket") or a.startswith("--socket=") for a in args)
    env = dict(os.environ)
    if not explicit and not env.get("STOKER_SOCKET") and not _answers(SYSTEM_SOCKET):
        try:
            d = checked_dir(create=False)
        except OSError as e:
            sys.exit("stokerctl: %s" % e.strerror)
        if d:
            env["STOKER_SOCKET"] = os.path.join(d, SOCKET_NAME)
    os.execve(exe, [exe] + args, env)
