"""CLIENT REPLY OFF and SKIP against a real redis-server, byte for byte: pushes are not
replies, so a subscriber under REPLY OFF still gets its (un)subscribe confirmations and its
messages, in RESP2 and RESP3 (Redis's CLIENT_PUSHING); the replies proper are dropped."""

import socket
import time

import pytest

from test_differential import real_redis  # noqa: F401  (the fixture)


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(0.15)
    return sock


def drain(sock):
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            return out
        if not data:
            return out
        out += data


SCENARIOS = [
    # REPLY OFF, then (P)SUBSCRIBE: the confirmations come; PING's reply does not.
    [b"CLIENT REPLY OFF\r\nSUBSCRIBE ch\r\nPSUBSCRIBE p*\r\nPING\r\n"],
    # SKIP drops the next reply, but a confirmation is no reply.
    [b"CLIENT REPLY SKIP\r\nSUBSCRIBE ch\r\nPING\r\n"],
    # UNSUBSCRIBE's confirmations under REPLY OFF, then REPLY ON.
    [b"SUBSCRIBE a b\r\n", b"CLIENT REPLY OFF\r\nUNSUBSCRIBE b a\r\nCLIENT REPLY ON\r\nPING\r\n"],
]


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("scenario", range(len(SCENARIOS)))
def test_pushes_get_past_client_reply(server, real_redis, protocol, scenario):  # noqa: F811
    def run(port):
        sock = connect(port)
        if protocol == 3:
            sock.sendall(b"HELLO 3\r\n")
            drain(sock)
        got = b""
        for chunk in SCENARIOS[scenario]:
            sock.sendall(chunk)
            got += drain(sock)
        # A message published now reaches a subscriber, whatever CLIENT REPLY says.
        publisher = connect(port)
        publisher.sendall(b"PUBLISH ch hello\r\n")
        drain(publisher)
        time.sleep(0.05)
        got += drain(sock)
        return got
    assert run(server.port) == run(real_redis)
