#!/usr/bin/env python3
"""Misbehaving DNS servers for the meshdns end-to-end faults (UDP and TCP).

  faultdns.py servfail ADDR[:PORT]                 every query gets SERVFAIL
  faultdns.py drop     ADDR[:PORT]                 queries are read and never answered
  faultdns.py delay    ADDR[:PORT] UPSTREAM[:PORT] MS
                                                    each query is forwarded to UPSTREAM
                                                    (same transport) after MS milliseconds

Listens only where told (the e2e suite uses 127.0.x.y). Runs until killed.
"""
import socket
import socketserver
import struct
import sys
import threading
import time

import dns.message
import dns.rcode


def hostport(text, default=53):
    host, _, port = text.partition(":")
    return host, int(port or default)


def servfail(wire):
    try:
        query = dns.message.from_wire(wire)
    except Exception:  # not even a header: drop, like a real server
        return None
    reply = dns.message.make_response(query)
    reply.set_rcode(dns.rcode.SERVFAIL)
    return reply.to_wire()


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def forward_udp(upstream, wire):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(wire, upstream)
        data, _ = s.recvfrom(65535)
        return data


def forward_tcp(upstream, wire):
    with socket.create_connection(upstream, timeout=3) as s:
        s.sendall(struct.pack("!H", len(wire)) + wire)
        (n,) = struct.unpack("!H", recv_exact(s, 2))
        return recv_exact(s, n)


def main():
    mode = sys.argv[1]
    listen = hostport(sys.argv[2])
    if mode == "delay":
        upstream = hostport(sys.argv[3])
        delay = int(sys.argv[4]) / 1000.0
    elif mode not in ("servfail", "drop"):
        sys.exit("unknown mode %r" % mode)

    def answer(wire, tcp):
        if mode == "servfail":
            return servfail(wire)
        if mode == "drop":
            return None
        time.sleep(delay)
        try:
            return (forward_tcp if tcp else forward_udp)(upstream, wire)
        except Exception:
            return None

    class TCPHandler(socketserver.BaseRequestHandler):
        def handle(self):
            try:
                while True:
                    (n,) = struct.unpack("!H", recv_exact(self.request, 2))
                    reply = answer(recv_exact(self.request, n), True)
                    if reply is None:
                        time.sleep(30)  # keep the connection open, answer nothing
                        return
                    self.request.sendall(struct.pack("!H", len(reply)) + reply)
            except (EOFError, OSError, struct.error):
                return

    class TCPServer(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    tcp = TCPServer(listen, TCPHandler)
    threading.Thread(target=tcp.serve_forever, daemon=True).start()

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    udp.bind(listen)

    def serve_one(wire, peer):
        reply = answer(wire, False)
        if reply is not None:
            udp.sendto(reply, peer)

    while True:
        wire, peer = udp.recvfrom(65535)
        threading.Thread(target=serve_one, args=(wire, peer), daemon=True).start()


if __name__ == "__main__":
    main()
