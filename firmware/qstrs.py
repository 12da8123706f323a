# The names a token hop looks up, each in a slot of MicroPython's map lookup cache of its own.
#
# MicroPython (the rp2 and unix ports: MICROPY_OPT_MAP_LOOKUP_CACHE) remembers, for every
# interned name's number modulo 64 (a 128-byte table indexed by the name's object word shifted
# right by 2), where that name was last found in any map. A lookup it serves skips the name's
# hash modulo the table's size (a software division on a Cortex-M0+) and the probing; two names
# a hop looks up that share a slot take it from each other on every hop. Which names share one
# follows from the order in which the board interned them, so one name more anywhere in the
# firmware moved S's hop on the emulated Pico from 110.8 to 116.9 us, and four other numberings
# gave 107.0 to 112.7 (docs/performance.md, "The map lookup cache").
#
# place(protocol), from main.py before any other firmware module is loaded, interns the names
# its hop looks up (HOT, most frequent first) so that each takes a slot no other name of the
# list has: a name already interned (MicroPython's own, as count or write, or main.py's) keeps
# its number and its slot is marked; each new one is interned once the next number falls on a
# free slot, with unused names ("_qp<k>") interned to move the numbering on. What it cannot
# place (more names than free slots) is left to chance, as every name was before.
#
# The names are kept in strings longer than 10 characters, which the compiler does not intern
# (MICROPY_ALLOC_PARSE_INTERN_STRING_LEN); a name is asked for as bytes.decode(), which gives
# the interned string when there is one and a new string otherwise, without interning it.

SLOTS = 64
_PAD = "_qp%d"


def _number(name):
    """The interned name's number, or -1 when it is not interned (or the port's object words
    are not MicroPython's usual ones, where interned strings end in binary 010)."""
    s = name.encode().decode()
    w = id(s)
    return w >> 3 if w & 7 == 2 else -1


def _intern(name, into):
    getattr(into, name, None)  # the attribute's name is interned on the way
    return _number(name)


def place(names):
    """Intern names (a string of names, most frequent first) in slots of their own; returns
    (names interned, padding names, names sharing a slot with an earlier one), or None where
    interned strings cannot be told apart (another object model)."""
    taken = bytearray(SLOTS)
    free = SLOTS
    shared = 0
    new = []
    for name in names.split():
        q = _number(name)
        if q < 0:
            new.append(name)
        elif taken[q % SLOTS]:
            shared += 1
        else:
            taken[q % SLOTS] = 1
            free -= 1
    if not new:
        return 0, 0, shared
    into = place  # any object with attributes: getattr of a missing one interns its name
    pads = 1
    last = _intern(_PAD % 0, into)  # the number the board interned last
    if last < 0:
        return None
    for name in new:
        while free and taken[(last + 1) % SLOTS]:
            last = _intern(_PAD % pads, into)
            pads += 1
        q = _intern(name, into)
        if q > last:
            last = q
        if taken[q % SLOTS]:
            shared += 1  # no free slot left, or the name was interned meanwhile
        else:
            taken[q % SLOTS] = 1
            free -= 1
    return len(new), pads, shared


def place_protocol(spec):
    """place() with the hop's names of a protocol spec ("d", "wt:skip=2"), or None for one
    not in HOT."""
    names = HOT.get(spec.split(":")[0])
    return None if names is None else place(names)


HOT = {  # (tests/hot_names.py --write)
    'bs': (
        '_CRC_TABLE _taken _countdown out_len out record node pending _lst msg_sizes _rd _mhot '
        'out_dst out_kind rx_bytes tx_frames rot SERVED_SLOTS log has_token _watch epoch in_cs '
        'index ticks_us seq fresh starting led POLLIN _delivered _fwd _line _line_views _msg_bad '
        '_poll half ipoll running select step _len_bad msg_least open_epoch relay_rotation sv_len '
        'sv_age link n capacity fifo_head write sv_node sv_sn st trap_h put30 _encode_line _mv '
        'b2a_base64 flush_one send _mfields fifo '),
    'd': (
        '_countdown node _lst in_cs _rd _CRC_TABLE record link _watch log seq pending st state '
        'count ticks_us has_token _taken epoch tx_frames rx_bytes EV_RECV buf flag write '
        '_housekeeping _read_byte closed line poll _fwd fresh starting _SENDS_OF _act _dst sends '
        'uart led capacity POLLIN _enter _line _line_views _poll active_budget ipoll n open_epoch '
        'running select step _wait_since half _show _encode_line _mv b2a_base64 flush_one _lbuf '
        'record_fields request _clocked _cs_start '),
    'd-literal': (
        '_countdown node _lst in_cs _rd _CRC_TABLE record link _watch seq log pending st state '
        'ticks_us _taken epoch count has_token tx_frames rx_bytes EV_RECV buf flag write '
        '_housekeeping _read_byte closed line poll _fwd fresh starting _SENDS_OF _act _dst capacity '
        'sends uart led POLLIN _enter _line _line_views _poll _wait_since active_budget ipoll n '
        'open_epoch running select step _encode_line _mv b2a_base64 flush_one _lbuf half _show '
        'record_fields request gen_us regen_us '),
    'dag': (
        '_countdown node _lst in_cs _rd qlen _CRC_TABLE link record log _watch pending st _taken '
        'ticks_us has_token seq write _housekeeping _read_byte closed line poll out_len tx_frames '
        'rx_bytes index fresh starting _dst buf led msg_sizes out _mhot epoch EV_RECV _SENDS_OF '
        '_act _show sends uart capacity _encode_line _mv b2a_base64 flush_one out_dst out_kind n '
        'queue asked requests _clocked _cs_start audit half EV_EXIT sign _lbuf record_fields POLLIN '
        '_line _line_views '),
    'nt': (
        '_countdown node _lst in_cs _rd _CRC_TABLE link record log pending _watch st _taken '
        'ticks_us seq NIL last write _housekeeping _read_byte closed line poll out_len tx_frames '
        'rx_bytes fresh starting _dst has_token buf led msg_sizes _mhot epoch EV_RECV _SENDS_OF '
        '_act _show sends uart capacity _encode_line _mv b2a_base64 flush_one out out_dst out_kind '
        'requests _clocked _cs_start audit half EV_EXIT _lbuf record_fields POLLIN _line '
        '_line_views _poll index ipoll running '),
    'q': (
        '_countdown node in_cs _lst _rd record link _CRC_TABLE _watch log st pending seq ticks_us '
        'count buf has_token EV_RECV _housekeeping _read_byte closed line poll epoch tx_frames '
        '_taken rx_bytes fresh starting write led _SENDS_OF _act _dst sends uart capacity _show '
        '_encode_line _mv b2a_base64 flush_one state _fwd request requests _clocked EV_EXIT '
        '_cs_start audit _wait_since half POLLIN _enter _line _line_views _poll ipoll n open_epoch '
        'running select step request_out '),
    'ra': (
        '_countdown _lst node in_cs _rd _CRC_TABLE record link log _watch ticks_us pending st '
        '_taken tx_frames rx_bytes write _dst has_token seq _fwd fresh starting _lbuf record_fields '
        'rq _housekeeping _read_byte closed line poll _mhot clock out_len index _clocked EV_RECV '
        '_SENDS_OF _act _show led sends uart buf msg_sizes half capacity lv n POLLIN _line '
        '_line_views _poll ipoll running select step _encode_line _mv b2a_base64 flush_one _mfields '
        'out out_dst '),
    'random': (
        '_countdown node in_cs _lst _rd link record _watch pending log st _housekeeping _read_byte '
        'closed line poll buf seq EV_EXIT EV_RECV _SENDS_OF _act _clocked _cs_start _dst _show '
        'audit fresh led requests sends starting ticks_us uart capacity EV_ENTER EV_REQ _cs_due '
        '_enter _wait_since busy cs_us epoch exit_cs half request ticks_diff _encode_line _mv '
        'b2a_base64 flush_one write POLLIN _line _line_views _poll ipoll running select step '),
    'raymond': (
        '_countdown node _lst in_cs _rd _CRC_TABLE qlen link record log _watch pending st _taken '
        'ticks_us seq has_token write _housekeeping _read_byte closed line poll out_len tx_frames '
        'rx_bytes fresh starting _dst buf led index msg_sizes _mhot epoch EV_RECV _SENDS_OF _act '
        '_show sends uart capacity _encode_line _mv b2a_base64 flush_one out out_dst out_kind '
        'holder queue asked requests _clocked _cs_start audit half EV_EXIT _lbuf record_fields '
        'POLLIN _line _line_views _poll '),
    's': (
        '_CRC_TABLE _lst seq epoch _countdown _taken count state link record node _watch ticks_us '
        '_rd rx_bytes tx_frames _lbuf pending st log has_token in_cs write _fwd _wait_since '
        'capacity POLLIN _enter _line _line_views _poll _token_seen gen_us ipoll open_epoch '
        'regen_us running select step _encode_line _mv b2a_base64 flush_one _housekeeping '
        '_read_byte closed line poll record_fields record_token EV_RECV buf _SENDS_OF _act _dst '
        'fresh sends starting uart EV_EXIT _clocked _cs_start _show audit '),
    'sk': (
        '_countdown _lst node in_cs _rd _CRC_TABLE record link log _watch ticks_us pending st '
        '_taken tx_frames rx_bytes write _dst has_token seq _fwd fresh starting _lbuf record_fields '
        'rn qlen _housekeeping _read_byte closed line poll _mhot out_len index _clocked EV_RECV '
        '_SENDS_OF _act _show led sends uart buf msg_sizes half capacity ln POLLIN _line '
        '_line_views _poll ipoll running select step _encode_line _mv b2a_base64 flush_one _mfields '
        'out out_dst out_kind '),
    'toy': (
        '_countdown _lst node in_cs _rd _CRC_TABLE record link log rn _watch ticks_us pending st '
        '_taken tx_frames rx_bytes index ln write _dst has_token seq _fwd fresh starting _lbuf '
        'record_fields _housekeeping _read_byte closed line poll _mhot out_len AT _HEADER _clocked '
        'EV_RECV _SENDS_OF _act _show led sends uart buf msg_sizes half out epoch capacity _wants '
        'POLLIN _line _line_views _poll ipoll running select step _encode_line _mv b2a_base64 '
        'flush_one '),
    'wt': (
        '_countdown node _lst _rd in_cs link _housekeeping ticks_us now _watch _CRC_TABLE wake_at '
        '_clk _tick NodeLoop _read_byte closed line poll fresh starting walk _wait_since ticks_diff '
        'gen_us regen_us log _taken write has_token record pending epoch rx_bytes tx_frames out '
        'out_len st _mhot msg_sizes capacity half _encode_line _mv b2a_base64 flush_one seq _lbuf '
        'record_fields _mfields index out_dst out_kind put30 _dst _elapsed POLLIN _fwd _line '
        '_line_views _msg_bad _poll ipoll running '),
}
