"""HTTPS on the API server (issue 24, item 1): a certificate chain from the test's own CA, TLS
1.2 and 1.3 only, the CLI through --cacert, a certificate read again on SIGHUP without dropping
the connections that are open, and handshakes that hold no worker. The admission tests
(test_admission.py) run over HTTPS as well."""

import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from e2e_helpers import expect, wait_until

pytestmark = pytest.mark.engine_independent(
    "TLS termination, certificate reloads and handshakes live in the HTTP server")


def https(server, tls, **kwargs):
    return http.client.HTTPSConnection("127.0.0.1", server.port, context=tls, timeout=10,
                                       **kwargs)


def peer_common_name(connection):
    subject = dict(item[0] for item in connection.sock.getpeercert()["subject"])
    return subject["commonName"]


def ping(connection):
    connection.request("GET", "/v1/ping")
    answer = connection.getresponse()
    body = answer.read()
    assert answer.status == 200, body
    return answer


def run_cli(server, *args, cacert=None):
    return subprocess.run(
        [str(server.binary), *(["--cacert", str(cacert)] if cacert else []), *args],
        capture_output=True, text=True, timeout=60, check=False,
        env=dict(os.environ, OXIDE_HOST=f"https://127.0.0.1:{server.port}",
                 OXIDE_TOKEN=server.admin_token))


def test_the_api_is_served_over_https_with_a_chain_the_cli_trusts_through_cacert(
        start_server, test_ca):
    tls = test_ca.client_context()
    server = start_server(extra_args=test_ca.server_args(), tls=tls)
    assert f"listening on https://127.0.0.1:{server.port}" in server.stdout_lines
    # The client trusts the root only: the intermediate came from the server's chain file.
    expect(server.admin.post("/v1/projects", {"name": "tls", "description": "over https"}), 201)
    listed = run_cli(server, "project", "list", "--format", "table:name", "--no-header",
                     cacert=test_ca.root)
    assert (listed.returncode, listed.stdout.split()) == (0, ["tls"]), listed.stderr
    # Without the CA the CLI says what is wrong and what to do.
    refused = run_cli(server, "project", "list")
    assert refused.returncode != 0 and refused.stdout == ""
    assert "certificate" in refused.stderr and "--cacert FILE" in refused.stderr, refused.stderr
    # A console session's cookie is Secure over HTTPS: the browser never sends it in the clear.
    expect(server.admin.post("/v1/system/identity-providers/local/users",
                             {"external_id": "erin", "password": {"mode": "password",
                                                                  "value": "a password over tls"}},
                             params={"silo": "default"}), 201)
    connection = https(server, tls)
    connection.request("POST", "/v1/login/default/local",
                       body=b'{"username": "erin", "password": "a password over tls"}',
                       headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    answer.read()
    assert answer.status == 204
    assert "; Secure" in answer.headers["Set-Cookie"] and "HttpOnly" in answer.headers["Set-Cookie"]
    connection.close()
    # Plain HTTP on the HTTPS port gets no answer in clear text.
    plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        plain.request("GET", "/v1/ping")
        plain.getresponse()
    plain.close()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3],
                         ids=["tls1.2", "tls1.3"])
def test_tls_1_2_and_1_3_are_offered_and_older_versions_are_not(start_server, test_ca, version):
    server = start_server(extra_args=test_ca.server_args(), tls=test_ca.client_context())
    tls = test_ca.client_context()
    tls.minimum_version = tls.maximum_version = version
    connection = https(server, tls)
    ping(connection)
    assert connection.sock.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2",
                                         ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    connection.close()
    # A client that speaks at most TLS 1.1 (allowed on its side) is refused by the server.
    old = test_ca.client_context()
    old.set_ciphers("ALL:@SECLEVEL=0")
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError, match="(?i)protocol version|alert"):
        ping(https(server, old))


def test_sighup_reads_the_certificate_again_and_open_connections_stay(start_server, test_ca,
                                                                     tmp_path):
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(test_ca.cert, cert)
    shutil.copy(test_ca.key, key)
    tls = test_ca.client_context()
    server = start_server(extra_args=["--tls-cert", str(cert), "--tls-key", str(key)], tls=tls)
    kept = https(server, tls)
    ping(kept)
    assert peer_common_name(kept) == "server-1"

    # The operator renews the certificate and signals the server.
    renewed_cert, renewed_key = test_ca.issue("server-2")
    shutil.copy(renewed_cert, cert)
    shutil.copy(renewed_key, key)
    server.process.send_signal(signal.SIGHUP)
    assert server.wait_for_log(lambda r: r.get("msg") == "SIGHUP: TLS certificate read again"
                               and "CN=server-2" in r.get("certificate", ""))
    fresh = https(server, tls)
    ping(fresh)
    assert peer_common_name(fresh) == "server-2"
    # The connection opened before the reload is still served, on its first session.
    socket_before = kept.sock
    ping(kept)
    assert kept.sock is socket_before and peer_common_name(kept) == "server-1"

    # A broken file changes nothing: the error is logged, the server goes on with server-2.
    cert.write_text("not a certificate\n")
    server.process.send_signal(signal.SIGHUP)
    assert server.wait_for_log(
        lambda r: r.get("msg") == "SIGHUP: cannot read the TLS certificate again; still "
        "serving the old one" and str(cert) in r.get("error", "") and
        "no start line" in r.get("error", ""))
    again = https(server, tls)
    ping(again)
    assert peer_common_name(again) == "server-2"
    for connection in (kept, fresh, again):
        connection.close()


def test_handshakes_that_never_come_end_at_the_request_timeout_while_others_are_served(
        start_server, test_ca):
    tls = test_ca.client_context()
    server = start_server(extra_args=[*test_ca.server_args(), "--request-timeout-ms", "1000"],
                          tls=tls)
    # Connections that say nothing, and ones that stop halfway through their ClientHello.
    silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
    halfway = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
    for s in halfway:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    # Meanwhile everyone else is served at once.
    for _ in range(20):
        connection = https(server, tls)
        ping(connection)
        connection.close()
    # Then they are closed (no HTTP answer: there is no TLS session to carry one).
    started = time.monotonic()
    for s in silent + halfway:
        s.settimeout(10)
        assert s.recv(100) == b""
        s.close()
    assert time.monotonic() - started < 5.0


def test_a_certificate_and_key_that_cannot_be_used_stop_the_server_with_the_reason(
        start_server, test_ca, tmp_path):
    other_cert, other_key = test_ca.issue("other")
    del other_cert
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    cases = [
        (["--tls-cert", str(test_ca.cert)], "--tls-cert needs --tls-key"),
        (["--tls-cert", str(not_pem), "--tls-key", str(test_ca.key)],
         f"cannot use the certificate file {not_pem}: no start line"),
        (["--tls-cert", str(test_ca.cert), "--tls-key", str(other_key)],
         f"the private key in {other_key} does not belong to the certificate in {test_ca.cert}"),
    ]
    for args, message in cases:
        server = start_server(extra_args=args, start=False)
        with pytest.raises(AssertionError, match="before listening"):
            server.start()
        assert server.wait_for_exit() == 2
        assert message in server.stderr_text(), server.stderr_text()
    # The dev server without these flags serves plain HTTP, as before.
    plain = start_server()
    assert any(line.startswith("listening on http://") for line in plain.stdout_lines)
    wait_until(lambda: plain.admin.get("/v1/ping").status == 200, 5.0, "plain HTTP ping")


def test_a_client_that_stops_inside_a_tls_record_holds_no_worker(start_server, test_ca):
    # After an answer, the client sends the first bytes of a record and stops: the server must
    # wait for the socket (not spin on what TLS holds), hand the connection back to its event
    # loop, and close it at the idle timeout.
    tls = test_ca.client_context()
    server = start_server(extra_args=[*test_ca.server_args(), "--idle-timeout-ms", "1500"],
                          tls=tls)
    stalled = tls.wrap_socket(socket.create_connection(("127.0.0.1", server.port)),
                              server_hostname="127.0.0.1")
    stalled.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert stalled.recv(4096).startswith(b"HTTP/1.1 200")
    # Four bytes of an application-data record's header, under the TLS layer.
    beneath = socket.socket(fileno=os.dup(stalled.fileno()))
    beneath.send(b"\x17\x03\x03\x00")
    began = time.monotonic()
    for _ in range(10):  # served meanwhile
        connection = https(server, tls)
        ping(connection)
        connection.close()
    stalled.settimeout(10)
    assert stalled.recv(4096) == b""  # closed by the server
    assert time.monotonic() - began < 5.0
    beneath.close()
    stalled.close()
