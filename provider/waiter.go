package provider

import "time"

// A thread asleep in ibv_get_cq_event waits on the connections of the QPs
// completing into the channel's armed CQs as well, and reads them itself
// when data comes (verbs.WaitReader; docs/design.md, "Waiting for
// events"): what it waits for is usually in it, and one thread is woken for
// it instead of the engine's and then the application's.
//
// A same-host connection offers its ring's eventfd, which the peer signals
// only while the ring's RX goroutine sleeps (as it does while a CQ of the
// QP is armed: napShm). A TCP connection offers its socket, which it lends
// the waiting threads: the event loop stops hearing its arrivals
// (sock.hearReads), since a loop woken beside the waiter costs a second
// thread and the token changing hands between the two (fio's rdma Sends at
// depth 1 over TCP ran at half the rate so). The lease is kept across
// consecutive waits, each of which would otherwise cost two epoll_ctl
// calls; a watch gives it back once a poller's lease (GOIWARP_POLL_LEASE)
// went by with no wait begun -- the application went on to other work,
// and the loop reads for it again -- or at once when the receive path
// parks for a receive buffer (post_recv then has it read on).

// WaitFD is verbs.WaitReader's: the descriptor a waiting thread polls, or
// -1 where the engine reads for it (the connection is ending, or a
// goroutine of it reads: spinning, closing, parked). begin says a wait
// begins on it: a TCP socket is then lent to the waiters and the muted
// mark of pollers that stopped is lowered (the wait's poll(2) honours
// SO_RCVLOWAT).
func (e *Endpoint) WaitFD(begin bool) int {
	rx := e.rx.Load()
	if rx == nil || e.dead.Load() || e.gone.Load() || rx.finishing.Load() {
		return -1
	}
	if e.shm != nil {
		return e.shm.inDataFd
	}
	if rx.away.Load() {
		return -1
	}
	if begin {
		if rx.muted.Load() {
			rx.tok.Lock()
			rx.louden()
			rx.tok.Unlock()
		}
		if !rx.lend() {
			return -1
		}
		rx.waits.Add(1)
	}
	return e.s.fd
}

// WaitSpin is verbs.WaitReader's: the opt-in spin (GOIWARP_RX_SPIN) holds
// for a thread about to sleep on a TCP connection as for the engine's: it
// looks for arrivals that long before it sleeps, so that a message that
// comes soon (the next Read Request of a peer whose ORD is 1) wakes no
// thread. A same-host ring is spun on by its RX goroutine (rxspin.go),
// which reads what comes while the eventfd the waiter would look at stays
// quiet (the peer signals only a sleeping reader): a waiter spinning beside
// it only took a core from it (ib_send_lat -e with a 200 µs window, one
// run: 88 µs one way without the waiter's spin, 128 with it).
func (e *Endpoint) WaitSpin() time.Duration {
	if rx := e.rx.Load(); rx != nil && e.shm == nil {
		return rx.spinWindow
	}
	return 0
}

// WaitRead is verbs.WaitReader's: a waiting thread found the descriptor
// readable. A same-host ring is read as the RX goroutine would (readShm),
// unless somebody holds the token (it woke too, and reads). A lent socket
// is read under the token, waiting for a holder to finish: nobody else
// hears it, so what a holder leaves is the waiter's to read. The thread
// waits again if it reports true.
func (e *Endpoint) WaitRead() bool {
	rx := e.rx.Load()
	if rx == nil {
		return false
	}
	if e.shm != nil {
		return rx.readShm(false)
	}
	return rx.waitRead()
}

func (rx *rxState) waitRead() bool {
	if rx.away.Load() || !rx.lend() {
		return false
	}
	rx.tok.Lock()
	_, _, on := rx.readLocked(rx.waitCtl)
	return on
}

// lend takes the socket from the event loop for the waiting threads, if it
// is not theirs already; false if it cannot be (closed).
func (rx *rxState) lend() bool {
	if rx.lent.Load() {
		return true
	}
	rx.lendMu.Lock()
	defer rx.lendMu.Unlock()
	if rx.lent.Load() {
		return true
	}
	if rx.e.s.hearReads(false) != nil {
		return false
	}
	rx.lent.Store(true)
	if rx.away.Load() {
		// A goroutine of the connection took it meanwhile (parked, say,
		// whose reclaim came before this lease): it is not the waiters'.
		rx.reclaimLocked()
		return false
	}
	rx.lendSeen = rx.waits.Load()
	rx.lendT.Reset(rx.lease)
	return true
}

// onLendWatch keeps the lease while waits begin, and else gives the socket
// back.
func (rx *rxState) onLendWatch() {
	rx.lendMu.Lock()
	if !rx.lent.Load() {
		rx.lendMu.Unlock()
		return
	}
	if n := rx.waits.Load(); n != rx.lendSeen && !rx.finishing.Load() {
		rx.lendSeen = n
		rx.lendT.Reset(rx.lease)
		rx.lendMu.Unlock()
		return
	}
	was := rx.reclaimLocked()
	rx.lendMu.Unlock()
	if was {
		rx.onReadable()
	}
}

// reclaim gives a lent socket back to the event loop.
func (rx *rxState) reclaim() {
	if !rx.lent.Load() {
		return
	}
	rx.lendMu.Lock()
	was := rx.reclaimLocked()
	rx.lendMu.Unlock()
	if was {
		go rx.onReadable()
	}
}

// reclaimLocked has the loop hear the socket again; the caller then reads
// what came while it was lent, as the loop would (the loop may not be told:
// a loop that holds a single socket never takes it off the set's ready
// list, and epoll then reports no change of interest).
func (rx *rxState) reclaimLocked() bool {
	if !rx.lent.Load() {
		return false
	}
	rx.lent.Store(false)
	_ = rx.e.s.hearReads(true)
	rx.lendT.Stop()
	return true
}
