"""Connection admission against hostile and bursty clients (issue 10, defect 1).

Another loopback address (127.0.0.2) stands for the attacking client, so that the server's
bound per client address applies to it and not to the well-behaved client on 127.0.0.1.
Each test runs over plain HTTP and over HTTPS (issue 24): TLS handshakes go through the same
event loop and bounds, and hold no worker either.
"""

import http.client
import selectors
import socket
import ssl
import threading
import time

import pytest

from e2e_helpers import SANITIZED, metric

pytestmark = pytest.mark.engine_independent(
    "connection admission happens in the HTTP server, before any request reaches the datastore")

ATTACKER = "127.0.0.2"


@pytest.fixture(params=["http", "https"])
def tls(request, test_ca):
    """None for plain HTTP; for HTTPS, the client side (the server is given test_ca's
    certificate)."""
    return test_ca.client_context() if request.param == "https" else None


def server_args(tls, test_ca):
    return test_ca.server_args() if tls else []


def connect_from(source, port, tls=None):
    """A non-blocking connection from `source`; over TLS, once its handshake is done."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    if tls is not None:
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        s = tls.wrap_socket(s, server_hostname="127.0.0.1")
        s.setblocking(False)
        return s
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    return s


def receive(s):
    """What a non-blocking socket has: bytes, b"" once closed or reset, None if nothing yet."""
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk
            # TLS may hold more than the socket shows as readable.
            if not isinstance(s, ssl.SSLSocket) or not s.pending():
                return data
    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return data or None
    except OSError:
        return data


class SlowLoris:
    """Holds `count` connections from ATTACKER that each send one header line every
    `interval` seconds and never finish their request; a connection the server closes is
    opened again at once. Records the status line of every answer the server gave."""

    def __init__(self, port, count, interval, tls=None):
        self.port, self.count, self.interval, self.tls = port, count, interval, tls
        self.statuses = []
        self.reconnects = 0
        self.stop = threading.Event()
        self.ready = threading.Event()  # every connection opened once
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        selector = selectors.DefaultSelector()
        lines = {}

        def open_one():
            try:
                s = connect_from(ATTACKER, self.port, self.tls)
            except OSError:
                return  # over TLS, refused while the handshake ran: tried again next round
            # The request begins at once: the request timeout, not the idle one, is what cuts
            # it off.
            try:
                s.send(b"GET /v1/ping HTTP/1.1\r\n")
            except OSError:
                pass
            lines[s] = 1
            selector.register(s, selectors.EVENT_READ)

        for _ in range(self.count):
            open_one()
        self.ready.set()
        next_trickle = time.monotonic()
        while not self.stop.is_set():
            for key, _ in selector.select(timeout=0.05):
                s = key.fileobj
                data = receive(s)
                if data is None:
                    continue
                if data.startswith(b"HTTP/1.1 "):
                    self.statuses.append(int(data[9:12]))
                if not data or data.startswith(b"HTTP/1.1 "):
                    selector.unregister(s)
                    del lines[s]
                    s.close()
                    self.reconnects += 1
                    open_one()
            if time.monotonic() >= next_trickle:
                next_trickle += self.interval
                for s in list(lines):
                    line = b"X-Slow-%d: y\r\n" % lines[s]
                    try:
                        s.send(line)
                        lines[s] += 1
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        pass  # reset: the read side notices and reconnects
        for s in lines:
            s.close()


def test_slow_clients_cannot_starve_other_clients(start_server, tls, test_ca):
    # Over HTTP: more slow connections than the old server's whole capacity (1,024), and more
    # than the attacker's own bound (1,024 per client address by default).
    # Over TLS the attack opens its connections one handshake after another (a few ms each on a
    # loaded machine): to exceed its bound it must open more of them than the bound before the
    # first are cut off, so the bound is lower there and the request timeout longer. (With the
    # default bound, a debug build on a busy CI machine cut the first off at 4 s before the
    # 1,025th was open, and the attack never met the bound.)
    # Under sanitizers (several times slower) both take the TLS shape with a longer timeout: at
    # full size the attack's own churn took the whole server (CI, 2026-12-02: a request of the
    # good client waited 4.3 s, and 300 handshakes took longer than 4 s).
    small = tls is not None or SANITIZED
    timeout_ms = (8000 if SANITIZED else 4000) if small else 1000
    count = 600 if small else 1500
    bound_args = ["--max-connections-per-client", "300"] if small else []
    server = start_server(
        extra_args=["--request-timeout-ms", str(timeout_ms), *bound_args,
                    *server_args(tls, test_ca)], tls=tls)
    loris = SlowLoris(server.port, count=count, interval=0.3, tls=tls)
    loris.thread.start()
    try:
        assert loris.ready.wait(30), "the attack did not open its connections"
        # The other client keeps working while the attack stands at its full size and outlives
        # the request timeout (its connections are cut off and it reconnects): a new connection
        # per ping, and an authenticated write.
        start_of_attack = time.monotonic()
        checked = 0
        slowest = 0.0
        while (time.monotonic() - start_of_attack < 2.5 or 408 not in loris.statuses or
               loris.reconnects < count) and time.monotonic() - start_of_attack < 45:
            start = time.monotonic()
            conn = (http.client.HTTPSConnection("127.0.0.1", server.port, timeout=5, context=tls)
                    if tls else http.client.HTTPConnection("127.0.0.1", server.port, timeout=5))
            conn.request("GET", "/v1/ping")
            answer = conn.getresponse()
            assert answer.status == 200, answer.read()
            answer.read()
            conn.close()
            reply = server.admin.post("/v1/projects",
                                      {"name": f"busy-{checked}", "description": ""})
            assert reply.status == 201, reply.body
            slowest = max(slowest, time.monotonic() - start)
            checked += 1
        # A bound with room for a loaded test machine; the old server reset these connections.
        assert slowest < (3.0 if SANITIZED else 2.0), f"a request of the well-behaved client took {slowest:.2f} s"
    finally:
        loris.stop.set()
        loris.thread.join()
    # The attacker was told why: 503 beyond its bound, 408 when its requests timed out; no
    # connection of the attack ever reached a handler.
    assert 503 in loris.statuses
    assert 408 in loris.statuses
    assert set(loris.statuses) <= {503, 408}
    assert loris.reconnects >= count, "the attack was never cut off and reconnected"


def test_a_burst_beyond_the_bound_gets_answers_not_silent_closes(start_server, tls, test_ca):
    # Over TLS the burst's 2,000 handshakes, one after another, take this client seconds: the
    # connections it holds must not reach the request timeout before they send their request.
    server = start_server(
        extra_args=[*server_args(tls, test_ca), *(["--request-timeout-ms", "60000"] if tls else [])],
        tls=tls)
    # 2,000 connections at once from one client (the old server closed 976 of such a burst
    # without a word). The server holds the first 1,024, the default bound per client, and
    # answers each of the others 503 with Retry-After at once.
    sockets = [connect_from(ATTACKER, server.port, tls) for _ in range(2000)]
    deadline = time.monotonic() + 20
    while metric(server, 'floatplane_http_refused_total{reason="per_client"}') < 976:
        assert time.monotonic() < deadline, "the server did not take in the burst"
        time.sleep(0.05)
    # Then each sends a whole request: the held ones are served.
    answers = {s: b"" for s in sockets}
    selector = selectors.DefaultSelector()
    for s in sockets:
        selector.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    pending = set(sockets)
    while pending and time.monotonic() < deadline:
        for key, events in selector.select(timeout=0.1):
            s = key.fileobj
            if events & selectors.EVENT_READ:
                data = receive(s)
                if data:
                    answers[s] += data
                elif data == b"":
                    selector.unregister(s)
                    pending.discard(s)
                    continue
            if events & selectors.EVENT_WRITE:
                if not answers[s]:
                    try:
                        s.send(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    except OSError:
                        pass
                selector.modify(s, selectors.EVENT_READ)
    for s in sockets:
        s.close()
    assert not pending, f"{len(pending)} connections neither answered nor closed in time"
    statuses = [int(a[9:12]) if a.startswith(b"HTTP/1.1 ") else None for a in answers.values()]
    assert None not in statuses, f"{statuses.count(None)} connections closed without an answer"
    assert (statuses.count(200), statuses.count(503)) == (1024, 976)
    # Every refusal is counted, under its reason.
    assert metric(server, 'floatplane_http_refused_total{reason="per_client"}') == 976
    for answer in answers.values():
        if answer.startswith(b"HTTP/1.1 503"):
            assert b"\r\nRetry-After: 1\r\n" in answer
            assert b"too many open connections from 127.0.0.2 (limit 1024)" in answer
