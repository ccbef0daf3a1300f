"""A datastore that stops taking writes under a running saga (issue 23 item 7): the server's
data dir is on a small tmpfs that the test fills while an attach waits in its sled agent. The
request answers 503 naming the full disk; the saga it leaves is taken up again by the running
server at once and retried with backoff while the disk stays full (never marked stuck for it),
and ends once the disk takes writes again, without a restart. Its Idempotency-Key then answers
the saga's result, and the request's audit entry is completed with it.

SQLite only: the database file must live on the test's disk. Mounting the tmpfs needs root
(skipped without it; CI runs as root)."""

import errno
import os
import subprocess
import threading
import uuid

import pytest

from e2e_helpers import (assert_error, expect, instance_external_ips, list_sagas,
                         running_vm_with_fip, wait_external_ip_agreement, wait_until)

pytestmark = pytest.mark.sqlite_only("the SQLite database must live on the test's small disk")

PROJECT = "outage"
ATTACH_ON_SLED = "PUT /instances/*/external-ips/*"


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs of the test's own, unmounted at teardown (after the server stopped: list
    this fixture before start_rack)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "floatplane-test", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False)


def fill(disk):
    """Takes every free block of `disk`; returns the file that holds them."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as error:
                    assert error.errno == errno.ENOSPC, error
                    break
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return filler


def keyed(key):
    return {"Idempotency-Key": key}


def test_a_saga_stopped_by_a_full_disk_ends_once_the_disk_takes_writes(small_disk, start_rack):
    rack = start_rack(data_dir=small_disk / "data", server_args=["--agent-timeout-ms", "20000"])
    admin, server = rack.admin, rack.server
    vm, fip, sled = running_vm_with_fip(rack, "outage-pool", "198.51.100.90", "198.51.100.99",
                                        PROJECT)

    # The attach waits in the sled agent while the disk fills up, then goes on: the write that
    # records the sled's step is the first to meet the full disk.
    sled.add_fault(ATTACH_ON_SLED, hang=True)
    key = str(uuid.uuid4())
    path, body = f"/v1/floating-ips/{fip['id']}/attach", {"kind": "instance", "parent": vm["id"]}
    answer = {}
    request = threading.Thread(
        target=lambda: answer.update(reply=admin.post(path, body, headers=keyed(key))))
    request.start()
    wait_until(lambda: sled.faults()["held_calls"] == 1, 10.0, "the attach waits in the sled")
    filler = fill(small_disk)
    sled.clear_faults()
    request.join(timeout=30)
    assert not request.is_alive(), "the attach did not answer"
    failed = answer["reply"]
    error = assert_error(failed, 503, "ServiceNotAvailable")
    assert "cannot be written: its disk is full" in error["message"], error
    assert failed.headers.get("Retry-After"), dict(failed.headers)

    # While the disk is full: the saga is unfinished, and the running server keeps trying it.
    [saga] = [s for s in list_sagas(admin) if s["name"] == "ip_attach"]
    assert saga["state"] == "running", saga

    def retried():
        return [r for r in server.log_records()
                if r.get("msg") == "saga recovery failed; trying again later"
                and r.get("saga_id") == saga["id"] and "disk is full" in r.get("error", "")]

    wait_until(lambda: len(retried()) >= 2, 10.0, "two tries of the saga's recovery",
               describe=server.stderr_text)
    assert_error(admin.post(path, body, headers=keyed(key)), 503, "ServiceNotAvailable")

    # The disk takes writes again: the saga ends, with no restart and no request.
    filler.unlink()
    done = wait_until(lambda: [s for s in list_sagas(admin)
                               if s["id"] == saga["id"] and s["state"] != "running"],
                      30.0, "the saga ends", describe=server.stderr_text)
    assert done[0]["state"] == "done", done
    assert [ip["ip"] for ip in instance_external_ips(admin, vm["id"])
            if ip["kind"] == "floating"] == [fip["ip"]]
    wait_external_ip_agreement(rack, [PROJECT])

    # The key answers the saga's result, and the request's audit entry says what happened.
    replay = admin.post(path, body, headers=keyed(key))
    assert expect(replay, 202)["instance_id"] == vm["id"]
    entries = expect(admin.get("/v1/system/audit-log",
                               params={"start_time": "1970-01-01T00:00:00Z", "limit": 1000}),
                     200)["items"]
    [entry] = [e for e in entries if e["request_id"] == failed.headers["x-request-id"]]
    assert entry["result"] == {"kind": "success", "http_status_code": 202}, entry
