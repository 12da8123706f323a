"""Safety under hard mutual exclusion: one node in its critical section at a time, and entries
that carry strictly increasing token entry numbers (an audit that does not trust the protocol: a
duplicated token shows as a repeated number). On a lossy ring a board may die in its critical
section, or take the last entry number with it (docs/recovery.md): what looks like an overlap or
a repeat then is judged once it is known whether that board restarted."""

SEQ_PERIOD = 1 << 30  # boards' entry numbers wrap here (firmware/protocol.py SEQ_MASK + 1)


class Safety:
    def __init__(self, ledger):
        self.ledger = ledger
        self.listens = () if ledger.soft else ("enter", "exit", "restarted", "events_lost")
        self.last_entry_seq = None
        self._seq_ref = None  # the last entry number seen, unwrapped (see _unwrap_seq)
        self._entry_max = {}  # node -> highest entry number it made since it last restarted
        self._suspect_seqs = []  # [t, node, seq, {boards whose restart would explain it}]
        self._suspect_overlaps = []  # (node that entered, node still in its CS, t)
        self.crashed_in_cs = 0  # critical sections ended by their board's restart
        self.entry_numbers_reused = 0  # after the board that held them restarted

    def enter(self, t, node, seq):
        led = self.ledger
        if led.in_cs is not None:
            if led.faults_at is not None:
                # On a lossy ring the board in its critical section may have died in it
                # (power cycle: its exit never comes). Judged when that is known: it
                # restarts (a crash, forgiven) or it exits (an overlap), or at the end.
                self._suspect_overlaps.append((node, led.in_cs, t))
            else:
                led.unsafe(node, t, "node %d entered the critical section while node %d was in it" % (node, led.in_cs))
        if seq is not None:
            self._entry_number(t, node, self._unwrap_seq(seq))
        led.in_cs = node

    def _entry_number(self, t, node, seq):
        # The token counts entries; a second live token repeats or reverses the count.
        if self.last_entry_seq is not None and seq <= self.last_entry_seq:
            # A board that dies holding the token takes the last entry number with it, and
            # the regenerated token repeats it (docs/recovery.md): forgiven if every board
            # that made a number >= seq restarts before entering again (the survivors rule).
            culprits = [y for y, m in self._entry_max.items() if m >= seq]
            if not culprits:
                # Every board that made such a number has restarted already: the
                # host saw the restart before the repeat.
                self.entry_numbers_reused += 1
            elif self.ledger.faults_at is not None:
                self._suspect_seqs.append([t, node, seq, set(culprits)])  # until they restart
            else:
                self._entry_violation(t, node, seq, self.last_entry_seq)
        for suspect in self._suspect_seqs:
            if node in suspect[3]:  # it is alive: its number was not lost with it
                suspect[3].clear()
                self._entry_violation(suspect[0], suspect[1], suspect[2], None)
        self._suspect_seqs = [x for x in self._suspect_seqs if x[3]]
        self.last_entry_seq = seq if self.last_entry_seq is None else max(seq, self.last_entry_seq)
        if seq > self._entry_max.get(node, -1):
            self._entry_max[node] = seq

    def exit(self, t, node):
        led = self.ledger
        if led.in_cs != node:
            overlapped = [x for x in self._suspect_overlaps if x[1] == node]
            if overlapped:
                # It was alive in its critical section when the other one entered.
                self._suspect_overlaps = [x for x in self._suspect_overlaps if x[1] != node]
                for x, y, tx in overlapped:
                    led.unsafe(x, tx, "node %d entered the critical section while node %d was in it" % (x, y))
                return True  # not the critical section the checker holds open: it stays
            led.unsafe(node, t, "node %d left a critical section it was not in" % node)
        led.in_cs = None
        led.last_exit = t
        return False

    def restarted(self, t, node):
        """A critical section the board was in ended there, and the entry numbers it alone knew
        are gone (docs/recovery.md)."""
        if self.ledger.in_cs == node:
            self.ledger.in_cs = None
            self.crashed_in_cs += 1
        forgiven = [x for x in self._suspect_overlaps if x[1] == node]
        if forgiven:
            self.crashed_in_cs += 1
            self._suspect_overlaps = [x for x in self._suspect_overlaps if x[1] != node]
        self._entry_max.pop(node, None)
        for suspect in self._suspect_seqs:
            suspect[3].discard(node)
            if not suspect[3]:
                self.entry_numbers_reused += 1
        self._suspect_seqs = [x for x in self._suspect_seqs if x[3]]

    def events_lost(self, t, node):
        """A critical section node was in may have ended unseen. Only its own: what the others did
        is still checked against it."""
        if self.ledger.in_cs == node:
            self.ledger.in_cs = None
        self._suspect_overlaps = [x for x in self._suspect_overlaps if x[1] != node]

    def _entry_violation(self, t, node, seq, before):
        self.ledger.unsafe(node, t, "node %d entered with token entry number %d%s: not strictly increasing "
                           "(two tokens?)" % (node, seq, "" if before is None else " after number %d" % before))

    def _unwrap_seq(self, seq):
        """Boards keep entry numbers in 30 bits (firmware/protocol.py SEQ_MASK: no long
        ints on a Pico), so they wrap at 2**30. Placed within half a period of the last
        number seen, every later comparison here is on unwrapped numbers."""
        if self._seq_ref is None:
            self._seq_ref = seq
            return seq
        d = (seq - self._seq_ref) % SEQ_PERIOD
        if d >= SEQ_PERIOD // 2:
            d -= SEQ_PERIOD
        self._seq_ref += d
        return self._seq_ref

    def finish(self):
        for x, y, tx in self._suspect_overlaps:  # the board in its CS neither exited nor restarted
            self.ledger.unsafe(x, tx, "node %d entered the critical section while node %d was in it "
                               "(and node %d never left it)" % (x, y, y))
        self._suspect_overlaps = []
        for t, node, seq, _ in self._suspect_seqs:
            self._entry_violation(t, node, seq, None)
        self._suspect_seqs = []

    def report(self):
        return {"recovery": {"last_entry_seq": self.last_entry_seq,
                             "critical_sections_ended_by_a_restart": self.crashed_in_cs,
                             "entry_numbers_reused_after_a_restart": self.entry_numbers_reused}}
