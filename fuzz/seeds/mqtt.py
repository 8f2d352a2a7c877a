#!/usr/bin/env python3
"""Writes the seed corpus of the `mqtt` target: a flag byte, then what a
broker would send (MQTT 5): CONNACK, one SUBACK per fixture filter, then
PUBLISHes to linked and unlinked topics, good and bad payloads, acks,
PINGRESP, DISCONNECT. Run from fuzz/: python3 seeds/mqtt.py"""
import os

FILTERS = 9  # fixture::ROUTES, each filter once


def rl(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def pkt(first, body):
    return bytes([first]) + rl(len(body)) + body


def s(t):
    return len(t).to_bytes(2, "big") + t


CONNACK = pkt(0x20, b"\x00\x00\x00")
CONNACK_PRESENT = pkt(0x20, b"\x01\x00\x00")
CONNACK_REFUSED = pkt(0x20, b"\x00\x87\x00")


def suback(pid, code=1):
    return pkt(0x90, pid.to_bytes(2, "big") + b"\x00" + bytes([code]))


SUBACKS = b"".join(suback(i + 1) for i in range(FILTERS))


def publish(topic, payload, qos=0, pid=1):
    body = s(topic)
    if qos:
        body += pid.to_bytes(2, "big")
    body += b"\x00" + payload
    return pkt(0x30 | (qos << 1), body)


PUBS = [
    publish(b"cmd/led", b"\x01"),
    publish(b"cmd/level", b"\x07"),
    publish(b"sensors/k/temp", b"\x05"),
    publish(b"sensors/status", b"\xd5\x00"),
    publish(b"$SYS/x", b"\x02"),
    publish(b"a/b/c/d", b"\x04"),
    publish(b"dev/k1/value", b"\x2a"),
    publish(b"k1/x/cfg", b"\x01\x01"),
    publish(b"nope/none", b"\x01"),
    publish(b"cmd/led", b"\x02"),
    publish(b"cmd/led", b"\x01", qos=1, pid=5),
    publish(b"cmd/led", b"\x00", qos=2, pid=6),
]
PUBACK = pkt(0x40, b"\x00\x01")
PUBREC = pkt(0x50, b"\x00\x01")
PUBCOMP = pkt(0x70, b"\x00\x01")
PUBREL = pkt(0x62, b"\x00\x06")
PINGRESP = pkt(0xD0, b"")
DISCONNECT = pkt(0xE0, b"\x00\x00")

SEEDS = {
    "connack_only": bytes([0]) + CONNACK,
    "refused": bytes([0]) + CONNACK_REFUSED,
    "session_present": bytes([0]) + CONNACK_PRESENT + PUBS[0],
    "subscribed": bytes([0]) + CONNACK + SUBACKS,
    "suback_fail": bytes([0]) + CONNACK + suback(1, 0x80),
    "all_pubs": bytes([0]) + CONNACK + SUBACKS + b"".join(PUBS),
    "all_pubs_chunk1": bytes([1 << 2]) + CONNACK + SUBACKS + b"".join(PUBS),
    "all_pubs_chunk7": bytes([7 << 2 | 0x80]) + CONNACK + SUBACKS + b"".join(PUBS),
    "qos1_puback": bytes([1]) + CONNACK + SUBACKS + PUBACK + PUBS[1],
    "qos2_flow": bytes([2]) + CONNACK + SUBACKS + PUBREC + PUBCOMP + PUBS[6],
    "inbound_qos2": bytes([0]) + CONNACK + SUBACKS + PUBS[11] + PUBREL,
    "ping_disconnect": bytes([0x80]) + CONNACK + SUBACKS + PINGRESP + PUBS[2] + DISCONNECT,
    "pub_during_subscribe": bytes([0]) + CONNACK + suback(1) + PUBS[0] + SUBACKS[6:],
}
# Two connections (flag 0x40; the next byte splits the rest).
first = CONNACK + SUBACKS + PUBS[0]
second = CONNACK + SUBACKS + PUBS[1] + PUBACK
for name, flag, a, b in [
    ("reconnect", 0x40, first, second),
    ("reconnect_qos1", 0x41, first, second),
    ("reconnect_present", 0x40, first, CONNACK_PRESENT + PUBS[2]),
]:
    body = a + b
    at = (len(a) * 256 + len(body) - 1) // len(body)  # rest.len() * at / 256 == len(a)
    assert len(body) * at // 256 == len(a)
    SEEDS[name] = bytes([flag, at]) + body
for i, p in enumerate(PUBS):
    SEEDS[f"pub_{i:02}"] = bytes([0]) + CONNACK + SUBACKS + p

os.makedirs("corpus/mqtt", exist_ok=True)
for name, data in SEEDS.items():
    with open(f"corpus/mqtt/seed_{name}", "wb") as f:
        f.write(data)
print(f"{len(SEEDS)} seeds in corpus/mqtt")
