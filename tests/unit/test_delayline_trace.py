"""The delay line's packet trace (``LAB_DELAYLINE_TRACE``): reading a packet's headers and
writing the trace. The queues themselves need root and a namespace: the integration test
``test_the_delay_line_traces_the_packets_it_holds``."""

from __future__ import annotations

import socket
import struct

from runners.real import delayline


def _packet(payload: int, src: int = 40000, dst: int = 5204, ihl: int = 5, doff: int = 8,
            proto: int = socket.IPPROTO_TCP) -> bytes:  # fmt: skip
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + doff * 4 + payload, 0, 0, 64,
                     proto, 0, b"\x0a\0\0\1", b"\x0a\0\0\2") + b"\0" * (ihl * 4 - 20)  # fmt: skip
    tcp = struct.pack("!HHIIBBHHH", src, dst, 0, 0, doff << 4, 0x18, 0, 0, 0)
    return (ip + tcp + b"\0" * (doff * 4 - 20))[: delayline.TRACE_COPY]


def test_a_tcp_packet_gives_its_ports_and_payload():
    assert delayline.tcp_fields(_packet(1)) == (40000, 5204, 1)
    # a GSO super-packet's IP length is the whole one's, beyond the bytes copied
    assert delayline.tcp_fields(_packet(60_000, src=5204, dst=41000)) == (5204, 41000, 60_000)
    assert delayline.tcp_fields(_packet(0, ihl=6, doff=5)) == (40000, 5204, 0)  # an ACK


def test_anything_else_gives_none():
    assert delayline.tcp_fields(b"") is None
    assert delayline.tcp_fields(_packet(10, proto=socket.IPPROTO_UDP)) is None
    assert delayline.tcp_fields(b"\x60" + _packet(10)[1:]) is None  # IPv6
    assert delayline.tcp_fields(_packet(10)[:30]) is None  # cut inside the TCP header


def test_the_trace_is_every_node_s_packets_by_arrival(tmp_path):
    a = delayline.Queue(sock=None, trace=[(2.0, 1, 2, 100), (4.0, 1, 2, 0)])  # type: ignore[arg-type]
    b = delayline.Queue(sock=None, trace=[(3.0, 2, 1, 7)])  # type: ignore[arg-type]
    path = tmp_path / "trace.csv"
    delayline.write_trace(str(path), [a, b])
    lines = path.read_text().splitlines()
    assert lines[0] == delayline.TRACE_HEADER
    assert [line.split(",")[:2] for line in lines[1:]] == [
        ["2.000000", "0"], ["3.000000", "1"], ["4.000000", "0"],
    ]  # fmt: skip
    assert lines[2].endswith(",2,1,7") and not list(tmp_path.glob("*.tmp"))
