#!/usr/bin/env python3
"""fork_mp LIB: Python multiprocessing with the fork start method after the
parent's first RDMA call (rdma-core's Python suite probes the device in the
parent, then forks its two players). Through ctypes on LIB (libgoiwarp.so):
the parent lists the devices, opens one and allocates a PD; then two
multiprocessing.Process(fork) players each open the device themselves, find
the parent's objects refused with EPERM, and move 1 MiB over an rsocket
(RDMA underneath) from one to the other, content checked; the parent's own
objects still work afterwards."""
import ctypes
import multiprocessing as mp
import os
import socket
import struct
import sys

EPERM = 1
SIZE = 1 << 20


def load(path):
    lib = ctypes.CDLL(path, use_errno=True)
    p, i = ctypes.c_void_p, ctypes.c_int
    for name, res, args in [
        ("ibv_get_device_list", p, [ctypes.POINTER(i)]),
        ("ibv_free_device_list", None, [p]),
        ("ibv_open_device", p, [p]),
        ("ibv_close_device", i, [p]),
        ("ibv_alloc_pd", p, [p]),
        ("ibv_dealloc_pd", i, [p]),
        ("rsocket", i, [i, i, i]),
        ("rbind", i, [i, p, i]),
        ("rlisten", i, [i, i]),
        ("raccept", i, [i, p, p]),
        ("rconnect", i, [i, p, i]),
        ("rgetsockname", i, [i, p, ctypes.POINTER(ctypes.c_uint32)]),
        ("rsend", ctypes.c_ssize_t, [i, p, ctypes.c_size_t, i]),
        ("rrecv", ctypes.c_ssize_t, [i, p, ctypes.c_size_t, i]),
        ("rclose", i, [i]),
    ]:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def open_first(lib):
    n = ctypes.c_int(0)
    devs = lib.ibv_get_device_list(ctypes.byref(n))
    assert devs and n.value >= 1, "no device list"
    ctx = lib.ibv_open_device(ctypes.cast(devs, ctypes.POINTER(ctypes.c_void_p))[0])
    lib.ibv_free_device_list(devs)
    assert ctx, "ibv_open_device: errno %d" % ctypes.get_errno()
    pd = lib.ibv_alloc_pd(ctx)
    assert pd, "ibv_alloc_pd: errno %d" % ctypes.get_errno()
    return ctx, pd


def sin(port):
    """struct sockaddr_in of 127.0.0.1:port (sin_family in host order)."""
    return ctypes.create_string_buffer(
        struct.pack("=H", socket.AF_INET) + struct.pack("!H4s8x", port, socket.inet_aton("127.0.0.1")), 16)


def payload():
    return bytes((i * 7 + i // 251) & 0xFF for i in range(SIZE))


def refuses(lib, parent):
    """The parent's context and PD fail with EPERM here."""
    ctx, pd = parent
    ctypes.set_errno(0)
    assert not lib.ibv_alloc_pd(ctx) and ctypes.get_errno() == EPERM, "alloc_pd on the parent's context"
    assert lib.ibv_dealloc_pd(pd) == EPERM, "dealloc_pd of the parent's PD"


def server(path, parent, q):
    lib = load(path)
    refuses(lib, parent)
    open_first(lib)
    s = lib.rsocket(socket.AF_INET, socket.SOCK_STREAM, 0)
    assert s >= 0, "rsocket: errno %d" % ctypes.get_errno()
    assert lib.rbind(s, sin(0), 16) == 0, "rbind: errno %d" % ctypes.get_errno()
    assert lib.rlisten(s, 1) == 0
    sa, n = ctypes.create_string_buffer(16), ctypes.c_uint32(16)
    assert lib.rgetsockname(s, sa, ctypes.byref(n)) == 0
    q.put(struct.unpack("!H", sa.raw[2:4])[0])
    c = lib.raccept(s, None, None)
    assert c >= 0, "raccept: errno %d" % ctypes.get_errno()
    buf, got = ctypes.create_string_buffer(SIZE), 0
    while got < SIZE:
        r = lib.rrecv(c, ctypes.byref(buf, got), SIZE - got, 0)
        assert r > 0, "rrecv: %d errno %d" % (r, ctypes.get_errno())
        got += r
    assert buf.raw == payload(), "payload differs"
    assert lib.rsend(c, b"ok", 2, 0) == 2
    lib.rclose(c)
    lib.rclose(s)


def client(path, parent, q):
    lib = load(path)
    refuses(lib, parent)
    open_first(lib)
    port = q.get(timeout=30)
    s = lib.rsocket(socket.AF_INET, socket.SOCK_STREAM, 0)
    assert lib.rconnect(s, sin(port), 16) == 0, "rconnect: errno %d" % ctypes.get_errno()
    data, sent = payload(), 0
    while sent < SIZE:
        r = lib.rsend(s, data[sent:], SIZE - sent, 0)
        assert r > 0, "rsend: %d errno %d" % (r, ctypes.get_errno())
        sent += r
    ack = ctypes.create_string_buffer(2)
    assert lib.rrecv(s, ack, 2, 0) == 2 and ack.raw == b"ok"
    lib.rclose(s)


def main():
    path = os.path.abspath(sys.argv[1])
    lib = load(path)
    parent = open_first(lib)  # the parent's first call loads the core
    fork = mp.get_context("fork")
    q = fork.Queue()
    players = [fork.Process(target=f, args=(path, parent, q)) for f in (server, client)]
    for p in players:
        p.start()
    for p in players:
        p.join(60)
        if p.exitcode is None:
            p.kill()
            p.join()
    codes = [p.exitcode for p in players]
    ctx, pd = parent
    ok = codes == [0, 0] and lib.ibv_dealloc_pd(pd) == 0 and lib.ibv_alloc_pd(ctx)
    print("fork_mp: players exited %s; the parent's objects %s: %s" %
          (codes, "work" if ok else "FAIL", "ok" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
