"""Lines: a Unix socket from the client to each worker that shares its host, for a fit's rounds.

On one 4 × H200 host Dask's comm took 1.1–1.4 ms to bring a step's request to a worker and
1.9 ms to bring its reply back, of a 75 ms step. The messages are small (their large bytes are
in files of the client's folder in shared memory, `_resident._SharedFolder`), so a socket in
that folder carries them in microseconds. Only the client's user can reach it: the folder is
made with mode 0700.

A worker opens one line per resident set of objects (`open_line`); the client connects once
(`Lines`) and then sends each round's messages to every worker at once and takes the replies as
they arrive. Each message is the argument tuple that `_resident._answer` takes, pickled as Dask
pickles; each reply is `(True, result)` or `(False, exception)`.
"""

import os
import socket
import threading
import uuid
from multiprocessing.connection import Connection, wait

from distributed.protocol.pickle import dumps, loads

# How often a line whose client has not connected yet checks that it is still wanted.
_ACCEPT_POLL_S = 0.5


def open_line(folder, answer, wanted):
    """Worker side: a socket at a new path in `folder` (returned), served by a daemon thread that
    accepts one connection and answers each message `m` with `answer(*m)` until the client closes
    it; it gives up waiting for the client once `wanted()` is false."""
    path = os.path.join(folder, f"line-{uuid.uuid4().hex[:16]}")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
        server.listen(1)
    except OSError:
        server.close()
        raise
    server.settimeout(_ACCEPT_POLL_S)
    threading.Thread(
        target=_serve, args=(server, answer, wanted), name="kmeans-knn line", daemon=True
    ).start()
    return path


def _serve(server, answer, wanted):
    with server:
        while True:
            try:
                sock, _ = server.accept()
                break
            except socket.timeout:
                if not wanted():
                    return
            except OSError:
                return
    sock.setblocking(True)
    with Connection(sock.detach()) as conn:
        while True:
            try:
                message = conn.recv_bytes()
            except (EOFError, OSError):
                return
            conn.send_bytes(_reply_bytes(answer, message))


def _reply_bytes(answer, message):
    try:
        return dumps((True, answer(*loads(message))))
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the client
        try:
            return dumps((False, error))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            return dumps((False, RuntimeError(f"{type(error).__name__}: {error}")))


class Lines:
    """Client side: a connection to each worker's line (`paths`: worker address -> socket path).
    A worker whose line cannot be reached is left out; rounds to it go through Dask."""

    def __init__(self, paths):
        self._conns = {}
        for address, path in paths.items():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
                continue
            self._conns[address] = Connection(sock.detach())

    def reach(self, addresses):
        """Whether every worker of `addresses` has a line."""
        return bool(self._conns) and all(a in self._conns for a in addresses)

    def round(self, messages, received):
        """Sends `messages[address]` to each of those workers at once and returns their replies
        by address, each made `received(reply)` as it arrives. Every reply is taken before a
        worker's exception (or one of `received`) is raised, so the lines stay in step. A line
        that breaks is an error, and the lines close: later rounds go through Dask."""
        # Every message is pickled before any is sent: a round goes to all of them or to none.
        payloads = {address: dumps(message) for address, message in messages.items()}
        pending, address = {}, None
        try:
            for address, payload in payloads.items():
                conn = self._conns[address]
                conn.send_bytes(payload)
                pending[conn] = address
            replies, error = {}, None
            while pending:
                for conn in wait(list(pending)):
                    address = pending.pop(conn)
                    ok, value = loads(conn.recv_bytes())
                    if not ok:
                        error = error or value
                    elif error is None:
                        try:
                            replies[address] = received(value)
                        except Exception as e:  # noqa: BLE001 - raised below, once all are in
                            error = e
        except (EOFError, OSError) as broken:
            self.close()
            raise RuntimeError(
                f"the line to the worker at {address} broke during a round (was it restarted?)"
            ) from broken
        if error is not None:
            raise error
        return replies

    def close(self):
        for conn in self._conns.values():
            conn.close()
        self._conns = {}
