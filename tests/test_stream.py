"""ring/stream.py's BoardStream before the run: what a board's start-up did to the token is
counted for the report, and its start-up frames stay out of the run's counts."""

from picoring.ring.hostlink import BoardEvent
from picoring.ring.stream import BoardStream


class Link:
    """What BoardStream asks of a link before the run: its port and clock offset."""

    port = "/dev/ttyTEST0"
    offset = 0
    index = 0

    @staticmethod
    def host_time(tick_us):
        return tick_us


class Merger:
    def __init__(self):
        self.pushed = []

    def push(self, board, t, event, counted=True):
        self.pushed.append((event.ev, counted))


def test_a_board_start_up_regenerations_and_discards_are_counted_and_its_run_start_kept():
    merger = Merger()
    s = BoardStream(0, Link(), 3, merger, record=None, lost_frames=None, t0=1_000)
    ev = [BoardEvent(0, 1, 10, "timeout"), BoardEvent(0, 2, 20, "regen", kind="token"),
          BoardEvent(0, 3, 30, "send", kind="token"), BoardEvent(0, 4, 40, "discard", kind="token"),
          BoardEvent(0, 5, 50, "regen", kind="token")]
    s.before_run(900, BoardEvent(0, 0, 5, "regen"), False, False)  # before its hello: another incarnation's
    s.before_run(950, None, True, False)  # its hello
    for e in ev:
        s.before_run(960, e, False, False)
    assert s.start_up == {} and s.run_from_us is None  # (only once the run began for it)
    s.before_run(1_450, None, False, True)  # its flush reply: 450 us into the run
    assert s.in_run
    assert s.start_up == {"timeout": 1, "regen": 2, "discard": 1}
    assert s.run_from_us == 450
    # placed, uncounted: the token's send pairs its link (PAIRED_FROM_BOOT), the rest are the forming's
    assert merger.pushed == [("timeout", False), ("regen", False), ("send", False), ("discard", False),
                             ("regen", False)]
