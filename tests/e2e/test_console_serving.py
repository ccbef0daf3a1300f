"""The web console served beside the API (issue 24, items 3 and 5): `server --console-dir`,
the pages and files it answers, and what it refuses. The console itself is tested in a
browser by console/e2e (scripts/console e2e); these run without Node.js, on a stand-in
console directory."""

import http.client
import socket
import subprocess

import pytest

from e2e_helpers import wait_until

pytestmark = pytest.mark.engine_independent(
    "the console's files are served from a directory, not the datastore")

INDEX = b"<!doctype html><title>console</title><div id=root></div>"


def fetch(server, path, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def console_dir(tmp_path):
    root = tmp_path / "console"
    (root / "dist" / "assets").mkdir(parents=True)
    (root / "dist" / "index.html").write_bytes(INDEX)
    (root / "dist" / "assets" / "index-a1b2c3.js").write_text("console.log('hi')")
    (root / "secret.txt").write_text("not for the web")
    return root / "dist"


def test_the_console_is_served_beside_the_api_with_types_caching_and_safety_headers(
        start_server, tmp_path):
    server = start_server(extra_args=["--console-dir", str(console_dir(tmp_path))])
    # The dev banner says where the console is.
    wait_until(lambda: any("Web console: " in line for line in server.stdout_lines), 10,
               "the dev banner", describe=lambda: server.stdout_lines)
    assert any(f"Web console: http://127.0.0.1:{server.port}/" in line
               for line in server.stdout_lines), server.stdout_lines

    # Every page of the app is its index.html, revalidated on each visit.
    for page in ("/", "/login", "/projects/web/floating-ips", "/system/ip-pools/public-v4"):
        status, headers, body = fetch(server, page)
        assert (status, body) == (200, INDEX), page
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert headers["cache-control"] == "no-cache"
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy, policy
        assert "unsafe-inline" not in policy, policy
        assert headers["x-content-type-options"] == "nosniff"
    status, headers, body = fetch(server, "/assets/index-a1b2c3.js")
    assert (status, body) == (200, b"console.log('hi')")
    assert headers["content-type"] == "text/javascript; charset=utf-8"
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    # A browser that has the file gets 304 and no body.
    status, _, body = fetch(server, "/assets/index-a1b2c3.js", {"If-None-Match": headers["etag"]})
    assert (status, body) == (304, b"")

    # The API is untouched, and its answers forbid framing and sniffing too.
    status, headers, body = fetch(server, "/v1/ping")
    assert status == 200 and b"ok" in body
    assert headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert headers["x-content-type-options"] == "nosniff"
    assert server.admin.get("/v1/projects").status == 200

    # Nothing outside the directory, however the path is spelled.
    for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/assets/..%2f..%2fsecret.txt",
                 "/assets/%2e%2e/%2e%2e/secret.txt", "/assets/missing.js"):
        status, _, body = fetch(server, path)
        assert status == 404, path
        assert b"not for the web" not in body, path


def test_head_gets_the_headers_of_get_and_no_body_and_the_connection_goes_on(start_server,
                                                                          tmp_path):
    server = start_server(extra_args=["--console-dir", str(console_dir(tmp_path))])
    # Page, asset, and an API answer (an error), pipelined on one connection with a GET after
    # them: each HEAD answer is headers only, so the bytes after it are the next answer.
    heads = (("/projects", "200 OK", len(INDEX)), ("/assets/index-a1b2c3.js", "200 OK", 17),
             ("/v1/nothing", "404 Not Found", None))
    wire = b"".join(f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for path, _, _ in heads)
    wire += b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(wire)
        received = b""
        while chunk := s.recv(65536):
            received += chunk
    answers = received.split(b"\r\n\r\n")
    # Three header blocks with nothing after them, then the GET's headers and its body.
    assert len(answers) == 5, received
    for (path, status, length), answer in zip(heads, answers):
        assert answer.startswith(f"HTTP/1.1 {status}".encode()), (path, received)
        if length is not None:
            assert f"Content-Length: {length}".encode() in answer, (path, answer)
    assert answers[3].startswith(b"HTTP/1.1 200 OK") and b"ok" in answers[4], received

    # A 304 has no Content-Length.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", "/assets/index-a1b2c3.js")
        first = connection.getresponse()
        first.read()
        connection.request("GET", "/assets/index-a1b2c3.js",
                           headers={"If-None-Match": first.getheader("etag")})
        revalidated = connection.getresponse()
        assert revalidated.status == 304 and revalidated.read() == b""
        assert revalidated.getheader("content-length") is None
    finally:
        connection.close()


def test_a_console_dir_that_cannot_be_served_is_refused_naming_it(floatplane_bin, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for directory, why in ((tmp_path / "missing", "not a directory"),
                           (empty, "holds no index.html")):
        completed = subprocess.run(
            [str(floatplane_bin), "server", "--dev", "--data-dir", str(tmp_path / "data"),
             "--listen", "127.0.0.1:0", "--console-dir", str(directory)],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, check=False)
        assert completed.returncode == 2, completed.stderr
        assert f"--console-dir: {directory}: {why}" in completed.stderr, completed.stderr


def test_without_a_console_the_root_says_how_to_serve_one(server):
    status, headers, body = fetch(server, "/")
    assert status == 404
    assert b"--console-dir" in body
    assert headers["content-type"].startswith("text/plain")
