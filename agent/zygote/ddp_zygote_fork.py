"""The two forks behind each worker of ddp-zygote (ddp_zygote.py): the child
that becomes the worker's ddp-guard, and the worker it forks before its exec
(docs/agent-preload.md, "Process layout and containment"). They are made on a
request, or ahead of one: the standby, a pair forked while the zygote is idle
and parked until the next request, which then costs no fork of the zygote
(docs/agent-preload.md, "The standby"). Installed beside ddp_zygote.py."""

import array
import ctypes
import fcntl
import json
import os
import signal
import socket
import sys
import termios

PR_SET_PDEATHSIG = 1
SESSION_SHARED = -2  # worker_session.hpp: kSessionShared; -1 a session of its own; 0-2 its terminal's fd
HAND_TIMEOUT_S = 5.0  # for a parked pair to take its request; it only reads, so this is never reached


def set_parent_death_signal(sig):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def enter_session(session):
    """The worker's own group, led by its guard as after a normal spawn, and
    its own session unless told otherwise (worker_session.hpp)."""
    if session == SESSION_SHARED:
        os.setpgid(0, 0)
    else:
        os.setsid()


def install_stdio(fds, session=SESSION_SHARED):
    """The request's stdin, stdout and stderr on fds 0-2; a terminal among
    them becomes the session's controlling terminal (a session leader only)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if 0 <= session <= 2:
        try:
            fcntl.ioctl(session, termios.TIOCSCTTY, 0)
        except OSError:
            pass  # no controlling terminal then, as before: its I/O works all the same


def exec_guard(ctl, zygote_pid, info_w, worker_pid):
    """Becomes `ddp-guard --adopt-pid=WORKER`, which reports on info_w."""
    os.set_inheritable(info_w, True)
    guard = ctl["guard"]
    argv = [guard, "--stop-timeout-ms=%d" % int(ctl.get("stop_timeout_ms", 30000)),
            "--info-fd=%d" % info_w, "--agent-pid=%d" % zygote_pid, "--adopt-pid=%d" % worker_pid]
    # The fence backstop's deadline file (guard_protocol.hpp), from ddprun.
    if os.environ.get("DDP_FENCE_FILE"):
        argv.append("--fence-file=" + os.environ["DDP_FENCE_FILE"])
    os.execv(guard, argv)


def die_in_child(e):
    try:
        os.write(2, ("ddprun: cannot start worker from the preload zygote: %s\n" % e).encode())
    finally:
        os._exit(127)


def wait_for_go(go_r, guard_pid):
    """Waits until the guard has the worker in its cgroup (the zygote closes
    the other end then), so that no user code runs outside it."""
    while os.read(go_r, 1):
        pass
    os.close(go_r)
    if os.getppid() != guard_pid:
        os._exit(128 + signal.SIGKILL)


def session_class(session):
    """Which standby fits a request of `session`; None: none does. A worker at
    a terminal is forked on request: a controlling terminal is a process's
    own, taken by its session leader (TIOCSCTTY) and inherited from it, so a
    worker forked before that has none (no /dev/tty)."""
    if 0 <= session <= 2:
        return None
    return "group" if session == SESSION_SHARED else "session"


def recv_line(sock):
    """One line and the fds sent with it; (None, fds) at EOF before its end."""
    data, fds = bytearray(), []
    while not data.endswith(b"\n"):
        chunk, anc, _flags, _addr = sock.recvmsg(1 << 16, socket.CMSG_SPACE(3 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(memoryview(payload)[:len(payload) - len(payload) % 4].cast("i"))
        if not chunk:
            return None, fds
        data += chunk
    return bytes(data), fds


def park_devnull():
    """A parked process holds none of the zygote's stdio (the agent reads the
    zygote's stdout to its EOF)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class Standby:
    """A guard-to-be and its worker-to-be, parked until the next request."""

    def __init__(self, guard_pid, grouping, to_guard, to_worker, info_r, go_w):
        self.guard_pid = guard_pid
        self.grouping = grouping  # session_class() of the requests it fits
        self.to_guard, self.to_worker = to_guard, to_worker
        self.info_r, self.go_w = info_r, go_w

    def hand(self, raw, fds):
        """Sends the request (its JSON line and stdio) to both; False if they
        could not take it (then they are gone). The zygote keeps info_r and
        go_w, as after its own fork."""
        try:
            for sock in (self.to_worker, self.to_guard):
                sock.settimeout(HAND_TIMEOUT_S)
                # (socket.send_fds is Python 3.9+; the zygote runs on 3.8 too)
                rights = (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))
                sent = sock.sendmsg([raw[:1 << 16]], [rights])
                if sent < len(raw):  # (sendall of nothing still sends: EPIPE once the peer has it all)
                    sock.sendall(raw[sent:])
            return True
        except OSError:
            self.discard()
            return False
        finally:
            self.to_guard.close()
            self.to_worker.close()

    def close(self):
        """Closes this process's ends of the pair's sockets and pipes."""
        self.to_guard.close()
        self.to_worker.close()
        for fd in (self.info_r, self.go_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def discard(self):
        """Ends the pair: both read EOF and exit (the guard-to-be is reaped as
        any child)."""
        self.close()
        try:
            os.kill(self.guard_pid, signal.SIGKILL)
        except OSError:
            pass


def fork_standby(session, forget_zygote):
    """Forks a standby pair for requests of `session`'s class. Returns the
    Standby in the zygote, None where a fork failed, and the request (a dict)
    in the worker once one came and its guard let it go."""
    zygote_pid = os.getpid()
    to_guard, guard_end = socket.socketpair()
    to_worker, worker_end = socket.socketpair()
    info_r, info_w = os.pipe()
    go_r, go_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        guard_pid = os.fork()
    except OSError:
        for s in (to_guard, guard_end, to_worker, worker_end):
            s.close()
        for fd in (info_r, info_w, go_r, go_w):
            os.close(fd)
        return None
    if guard_pid == 0:
        try:
            set_parent_death_signal(signal.SIGKILL)  # a parked pair dies with the zygote
            if os.getppid() != zygote_pid:
                os._exit(0)
            forget_zygote()
            for s in (to_guard, to_worker):
                s.close()
            os.close(info_r)
            os.close(go_w)
            park_devnull()
            enter_session(session)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # kept across exec for the guard
            me = os.getpid()
            worker_pid = os.fork()
            if worker_pid == 0:
                return _parked_worker(me, worker_end, guard_end, info_w, go_r)
            worker_end.close()
            line, fds = recv_line(guard_end)
            guard_end.close()
            if line is None or len(fds) != 3:
                os._exit(0)  # discarded, or the zygote is gone
            body = json.loads(line)
            install_stdio(fds)
            if os.waitpid(worker_pid, os.WNOHANG)[0] == worker_pid:
                # The parked worker was killed: this request's is forked now, as without a standby.
                worker_pid = os.fork()
                if worker_pid == 0:
                    set_parent_death_signal(signal.SIGKILL)
                    os.close(info_w)
                    wait_for_go(go_r, me)
                    return body
            os.close(go_r)
            set_parent_death_signal(0)  # the guard has its own (--agent-pid), as after the zygote's fork
            exec_guard(body, zygote_pid, info_w, worker_pid)
        except BaseException as e:  # noqa: B902 - nothing may return into the zygote's loop
            die_in_child(e)
    guard_end.close()
    worker_end.close()
    os.close(info_w)
    os.close(go_r)
    return Standby(guard_pid, session_class(session), to_guard, to_worker, info_r, go_w)


def _parked_worker(guard_pid, worker_end, guard_end, info_w, go_r):
    try:
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != guard_pid:
            os._exit(0)
        guard_end.close()
        os.close(info_w)
        line, fds = recv_line(worker_end)
        worker_end.close()
        if line is None or len(fds) != 3:
            os._exit(0)
        install_stdio(fds)
        body = json.loads(line)
    except BaseException:  # noqa: B902 - nothing may return into the zygote's loop
        os._exit(127)
    wait_for_go(go_r, guard_pid)
    return body
