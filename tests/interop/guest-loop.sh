#!/bin/sh
# The siw guest's command (run-guest.sh -c): a job queue driven by the host
# through the shared directory /host, so that one boot (15 s of TCG) serves
# every row of a configuration. The host writes jobs/N.sh (renamed into
# place, never seen half-written); the guest runs them in order and writes
# jobs/N.out and jobs/N.rc (renamed: rc present = job over). A job that
# starts a siw server touches jobs/N.listening once siw listens. The host
# ends the loop with /host/quit. With CAPTURE=1 tcpdump records the MPA
# exchanges (start of every connection) on eth0 into /host/guest.pcap.
S=/host
# run-guest.sh's -e settings (init sources them but does not export them)
[ -f /guest/env ] && . /guest/env
mkdir -p $S/jobs
if [ "${CAPTURE:-0}" = 1 ]; then
    # Only SYN/FIN/RST and segments with 1-399 bytes of payload (MPA
    # requests and replies, small FPDUs): all of a bandwidth test, or its
    # ACKs, make the emulated tcpdump drop packets. 200 bytes per packet
    # hold the headers, the MPA header and the RFC 6581 IRD/ORD words. -U:
    # written as captured, so a guest that dies still leaves what it saw.
    tcpdump -i eth0 -s 200 -U -w $S/guest.pcap \
        'tcp and (tcp[tcpflags] & (tcp-syn|tcp-fin|tcp-rst) != 0 or
          (ip[2:2] < 440 and ip[2:2] - ((ip[0] & 0xf) << 2) - ((tcp[12] & 0xf0) >> 2) > 0))' \
        >$S/tcpdump.log 2>&1 &
    tdp=$!
    i=0
    while [ $i -lt 50 ] && ! grep -q listening $S/tcpdump.log; do sleep 0.1; i=$((i + 1)); done
fi
# siw 6.1 reassembles an MPA trailer (pad and CRC) that arrives split over
# two socket buffers wrongly: siw_get_trailer copies the second part over
# the first, so with CRC on a valid FPDU fails its CRC check. Its debug
# line for each trailer read ("expected E, available A") is the evidence
# run.sh's quirk() looks for right before a "crc error".
if [ "${TRAILER_DEBUG:-0}" = 1 ]; then
    echo 'func siw_get_trailer +p' >/sys/kernel/debug/dynamic_debug/control ||
        echo "[guest-loop] no dynamic debug for siw_get_trailer"
fi
echo GUEST-READY
touch $S/ready
n=1
while [ ! -f $S/quit ]; do
    if [ -f $S/jobs/$n.sh ]; then
        echo "[guest-loop] job $n"
        JOB=$S/jobs/$n sh $S/jobs/$n.sh >$S/jobs/$n.out 2>&1
        rc=$?
        # The kernel's words during the job: siw/iw_cm lines, and of the
        # trailer debug only the two reads before each CRC error.
        dmesg -c 2>/dev/null | awk '
            /siw_get_trailer/ { t2 = t1; t1 = $0; next }
            /crc error/ { if (t2 != "") print t2; if (t1 != "") print t1 }
            /siw|iw_cm|rdma/ { print }' >$S/jobs/$n.kmsg
        echo $rc >$S/jobs/$n.rc.tmp
        mv $S/jobs/$n.rc.tmp $S/jobs/$n.rc
        n=$((n + 1))
    else
        sleep 0.2
    fi
done
# tcpdump lags behind on the emulated CPU: give it time to write what the
# filter already took before it is stopped.
[ -n "${tdp:-}" ] && sleep 3 && kill $tdp && wait $tdp
echo GUEST-LOOP-END
