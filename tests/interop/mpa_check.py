#!/usr/bin/env python3
"""mpa_check.py PCAP --rev N --crc 0|1 --p2p 0|1 [--siw-ip IP] [--failed-ports P,...]
mpa_check.py PCAP --stalls

Reads the MPA request/reply frames of a capture taken in the siw guest
(tcpdump on eth0) and checks the bits of each handshake against the
configuration: revision (and the RFC 6581 H bit with revision 2), markers
off, no reject, CRC (--crc 1: both sides ask for it, every request and reply
has C set; 0: no frame has it), peer-to-peer (--p2p 1: siw's
requests offer P2P with RTR types and our replies to them echo P and one
offered type; our requests and siw's replies to them do not have P).
Frames from --siw-ip (the guest, 10.0.2.15) are siw's, the others goiwarp's.
Prints one line per connection; exit status 1 when a check fails or either
side sent no request. --failed-ports P,P,...: the responder ports of the
attempts of rows that failed (run.sh gives each attempt its own server
port); a connection to one of them may lack its request or reply (the peer
stalled, a program died: the row's own verdict judges that attempt), but
the bits of every frame it did send are checked like any other.
--stalls lists instead ("STALL <port>") goiwarp's connections to a siw
server that stalled the way the README's siw 6.1 siw_accept() window does:
siw sent its reply, goiwarp sent FPDUs after it, and siw never sent a byte
of payload after its reply. A small parser instead of tshark: Wireshark's
MPA dissector does not decode the RFC 6581 IRD/ORD words.
"""
import argparse
import socket
import struct
import sys

KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"
P2P = 0x8000          # IRD word: peer-to-peer
SEND_RTR = 0x4000     # IRD word: zero-length Send RTR
WRITE_RTR = 0x8000    # ORD word: zero-length Write RTR
READ_RTR = 0x4000     # ORD word: zero-length Read RTR


def packets(path):
    """Yields (src, sport, dst, dport, payload, time) of the TCP/IPv4 packets."""
    with open(path, "rb") as f:
        hdr = f.read(24)
        if len(hdr) < 24:
            return
        magic = struct.unpack("<I", hdr[:4])[0]
        end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        link = struct.unpack(end + "I", hdr[20:24])[0]
        while True:
            ph = f.read(16)
            if len(ph) < 16:
                return
            sec, frac, incl, _ = struct.unpack(end + "IIII", ph)
            ts = sec + frac / (1e9 if magic in (0xA1B23C4D, 0x4D3CB2A1) else 1e6)
            data = f.read(incl)
            if link == 1:            # Ethernet
                if len(data) < 14 or data[12:14] != b"\x08\x00":
                    continue
                ip = data[14:]
            elif link == 113:        # Linux cooked (tcpdump -i any)
                if len(data) < 16 or data[14:16] != b"\x08\x00":
                    continue
                ip = data[16:]
            else:
                continue
            if len(ip) < 20 or ip[9] != 6:
                continue
            ihl = (ip[0] & 15) * 4
            tcp = ip[ihl:]
            if len(tcp) < 20:
                continue
            doff = (tcp[12] >> 4) * 4
            sport, dport = struct.unpack(">HH", tcp[:4])
            yield (socket.inet_ntoa(ip[12:16]), sport, socket.inet_ntoa(ip[16:20]), dport, tcp[doff:], ts)


def frames(path):
    """Yields the MPA request/reply frames found at the start of a payload."""
    for src, sport, dst, dport, pl, _ in packets(path):
        if len(pl) < 20 or pl[:16] not in (KEY_REQ, KEY_REP):
            continue
        flags, rev, pdlen = pl[16], pl[17], struct.unpack(">H", pl[18:20])[0]
        fr = {"req": pl[:16] == KEY_REQ, "src": (src, sport), "dst": (dst, dport),
              "M": flags >> 7 & 1, "C": flags >> 6 & 1, "R": flags >> 5 & 1, "H": flags >> 4 & 1,
              "rev": rev, "pdlen": pdlen, "ird": None, "ord": None}
        if rev == 2 and fr["H"] and pdlen >= 4 and len(pl) >= 24:
            fr["ird"], fr["ord"] = struct.unpack(">HH", pl[20:24])
        yield fr


def stalls(path, siw_ip, idle=5.0):
    """The goiwarp ports of connections to siw stalled after siw's reply:
    goiwarp sent a few FPDUs after it, siw sent no payload, and the
    connection then stayed silent for idle seconds (until its end or the
    capture's)."""
    conn = {}   # (siw addr, goiwarp addr) -> state, from siw's reply on
    last = 0.0
    for src, sport, dst, dport, pl, ts in packets(path):
        last = ts
        siw = src == siw_ip
        k = ((src, sport), (dst, dport)) if siw else ((dst, dport), (src, sport))
        if siw and pl[:16] == KEY_REP:
            conn[k] = {"g": 0, "s": 0, "glast": 0.0, "end": None}
            continue
        c = conn.get(k)
        if c is None or c["end"] is not None:
            continue
        if pl and siw:
            c["s"] += 1
        elif pl:
            c["g"] += 1
            c["glast"] = ts
        elif c["g"] and ts - c["glast"] >= idle:
            c["end"] = ts   # the first packet after the silence (an RST, a FIN)
    out = []
    for k, c in conn.items():
        end = c["end"] if c["end"] is not None else last
        if c["s"] == 0 and 0 < c["g"] <= 4 and end - c["glast"] >= idle:
            out.append(k[1][1])
    return sorted(out)


def describe(fr):
    s = "%s rev %d M%d C%d R%d H%d" % ("req" if fr["req"] else "rep", fr["rev"], fr["M"], fr["C"], fr["R"], fr["H"])
    if fr["ird"] is not None:
        s += " ird 0x%04x ord 0x%04x" % (fr["ird"], fr["ord"])
    return s


def check(frs, rev, crc, p2p, siw_ip, failed_ports=()):
    """Checks the handshakes of frames frs; returns (lines, problems)."""
    conns = {}  # (initiator addr, responder addr) -> [request, reply]
    for fr in frs:
        k = (fr["src"], fr["dst"]) if fr["req"] else (fr["dst"], fr["src"])
        conns.setdefault(k, [None, None])[0 if fr["req"] else 1] = fr
    lines, bad = [], []
    nreq = {"siw": 0, "goiwarp": 0}
    for (ini, resp), (req, rep) in sorted(conns.items()):
        who = "siw" if ini[0] == siw_ip else "goiwarp"
        errs, notes = [], []
        missing = notes if resp[1] in failed_ports else errs
        if req is None:
            missing.append("no request captured")
        else:
            nreq[who] += 1
        if rep is None:
            missing.append("no reply captured")
        for fr in (req, rep):
            if fr is None:
                continue
            sender = "siw" if fr["src"][0] == siw_ip else "goiwarp"
            name = "%s's %s" % (sender, "request" if fr["req"] else "reply")
            if fr["rev"] != rev:
                errs.append("%s: revision %d, want %d" % (name, fr["rev"], rev))
            if fr["H"] != (1 if rev == 2 else 0):
                errs.append("%s: H %d" % (name, fr["H"]))
            if fr["M"] or fr["R"]:
                errs.append("%s: M or R set" % name)
            # Requests: C as configured. Replies echo the request's C (siw
            # 6.1 sets C in a reply of its own accord only with
            # mpa_crc_strict).
            want_c = crc if fr["req"] or req is None else req["C"]
            if fr["C"] != want_c:
                errs.append("%s: C %d, want %d" % (name, fr["C"], want_c))
            if rev == 2 and fr["ird"] is None:
                errs.append("%s: no IRD/ORD words" % name)
        if rev == 2 and req and rep and req["ird"] is not None and rep["ird"] is not None:
            offered = p2p and who == "siw"
            if bool(req["ird"] & P2P) != bool(offered):
                errs.append("request P %d, want %d" % (req["ird"] & P2P and 1, offered))
            if offered:
                rtr_req = (req["ird"] & SEND_RTR, req["ord"] & (WRITE_RTR | READ_RTR))
                rtr_rep = (rep["ird"] & SEND_RTR, rep["ord"] & (WRITE_RTR | READ_RTR))
                nbits = bin(rtr_rep[0]).count("1") + bin(rtr_rep[1]).count("1")
                if not rep["ird"] & P2P or nbits != 1 or \
                        rtr_rep[0] & ~rtr_req[0] or rtr_rep[1] & ~rtr_req[1]:
                    errs.append("reply does not echo P2P with one offered RTR type")
            elif rep["ird"] & P2P:
                errs.append("reply has P without a P2P request")
        lines.append("%-7s %s:%d -> %s:%d  %s | %s%s%s" % (
            who, ini[0], ini[1], resp[0], resp[1], describe(req) if req else "-", describe(rep) if rep else "-",
            "  BAD: " + "; ".join(errs) if errs else "",
            "  (attempt failed, not counted: " + "; ".join(notes) + ")" if notes else ""))
        bad += errs
    for who, n in nreq.items():
        if n == 0:
            bad.append("no request from %s captured" % who)
            lines.append("BAD: no request from %s captured" % who)
    lines.append("mpa_check: %d connections, %d problems" % (len(conns), len(bad)))
    return lines, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--rev", type=int, default=2)
    ap.add_argument("--stalls", action="store_true")
    ap.add_argument("--crc", type=int, default=0)
    ap.add_argument("--p2p", type=int, default=0)
    ap.add_argument("--siw-ip", default="10.0.2.15")
    ap.add_argument("--failed-ports", default="")
    a = ap.parse_args()
    if a.stalls:
        for port in stalls(a.pcap, a.siw_ip):
            print("STALL %d" % port)
        return 0
    failed = {int(p) for p in a.failed_ports.split(",") if p}
    lines, bad = check(frames(a.pcap), a.rev, a.crc, a.p2p, a.siw_ip, failed)
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
