#!/usr/bin/env python3
"""Delaying DNS proxies for the gathered-SRV benchmark: each listener holds every query for a
fixed delay, then forwards it to its backend and relays the reply at once. UDP and TCP.

    delayproxy.py LISTEN_IP:PORT=BACKEND_IP:PORT@DELAY_MS [...]

One process serves every listener given (asyncio, one event loop), so three legs of 20/40/80 ms
run concurrently. Only loopback addresses are accepted. Runs until killed.
"""

import asyncio
import ipaddress
import socket
import struct
import sys


def hostport(s):
    host, _, port = s.rpartition(":")
    if not ipaddress.ip_address(host).is_loopback:
        sys.exit(f"delayproxy: {host} is not a loopback address")
    return host, int(port)


class UdpLeg(asyncio.DatagramProtocol):
    def __init__(self, backend, delay):
        self.backend = backend
        self.delay = delay
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        asyncio.get_running_loop().create_task(self.forward(data, addr))

    async def forward(self, data, addr):
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.delay)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        try:
            sock.connect(self.backend)
            await loop.sock_sendall(sock, data)
            reply = await asyncio.wait_for(loop.sock_recv(sock, 65535), 2.0)
            self.transport.sendto(reply, addr)
        except (OSError, asyncio.TimeoutError):
            pass
        finally:
            sock.close()


async def tcp_conn(reader, writer, backend, delay):
    try:
        while True:
            hdr = await reader.readexactly(2)
            msg = await reader.readexactly(struct.unpack("!H", hdr)[0])
            await asyncio.sleep(delay)
            br, bw = await asyncio.open_connection(*backend)
            bw.write(hdr + msg)
            await bw.drain()
            rhdr = await br.readexactly(2)
            reply = await br.readexactly(struct.unpack("!H", rhdr)[0])
            bw.close()
            writer.write(rhdr + reply)
            await writer.drain()
    except (asyncio.IncompleteReadError, OSError):
        pass
    finally:
        writer.close()


async def main(specs):
    loop = asyncio.get_running_loop()
    for spec in specs:
        listen, rest = spec.split("=", 1)
        backend, delay_ms = rest.split("@", 1)
        lhost, lport = hostport(listen)
        bk = hostport(backend)
        delay = float(delay_ms) / 1000.0
        await loop.create_datagram_endpoint(lambda bk=bk, d=delay: UdpLeg(bk, d), local_addr=(lhost, lport))
        await asyncio.start_server(
            lambda r, w, bk=bk, d=delay: tcp_conn(r, w, bk, d), lhost, lport, reuse_address=True
        )
    print("delayproxy: listening", " ".join(specs), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1:]))
