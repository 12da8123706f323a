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
        '_CRC_TABLE _countdown rx_bytes _lst out_len _rd out record node rot index pending in_cs '
        'SERVED_SLOTS n _fwd fresh out_dst out_kind tx_frames has_token log epoch sv_len _watch seq '
        'ticks_us half sv_age msg_sizes _clocked _mout _mviews starting led fifo_head POLLIN _line '
        '_line_views _mhot _on_msg _poll _taken ipoll running select step sv_node sv_sn _len_bad '
        'known_epoch known_owner msg_least trap_h put30 relay_rotation link send fifo trap_sn '
        '_mfields sn _give _have '),
    'd': (
        '_CRC_TABLE record _countdown _lst node seq state count _taken epoch _rd rx_bytes ticks_us '
        'has_token _watch log pending in_cs tx_frames EV_RECV fresh st flag buf POLLIN _line '
        '_line_views _poll ipoll running select step _fwd link starting _lbuf record_fields _tout '
        'half _SENDS_OF _act _dst sends uart led _wait_since _eraw _token_seen gen_us known_epoch '
        'known_owner regen_us write _show _cs_start audit EV_EXIT _on_request on_request _pass '
        'encode_token n record_token _no_fields '),
    'd-literal': (
        '_CRC_TABLE record _countdown _lst seq node state _taken epoch count _rd rx_bytes ticks_us '
        '_watch has_token tx_frames log pending in_cs fresh EV_RECV st flag link POLLIN _line '
        '_line_views _poll ipoll running select step _fwd buf _lbuf record_fields starting half '
        '_tout _wait_since _token_seen gen_us known_epoch known_owner regen_us _SENDS_OF _act _dst '
        'sends uart led _eraw write record_token _show _cs_start audit EV_EXIT _housekeeping '
        '_read_byte closed line poll _on_request '),
    'dag': (
        '_CRC_TABLE _countdown qlen rx_bytes _lst record node in_cs _rd index log ticks_us seq _fwd '
        'n pending fresh _dst has_token epoch _taken tx_frames out _watch starting _clocked half '
        'led _mout _mviews POLLIN _line _line_views _poll ipoll running select step out_len queue '
        'buf st EV_RECV _SENDS_OF _act _cs_start _show audit sends uart EV_EXIT _lbuf record_fields '
        '_release msg_sizes _dequeue _mhot _on_msg asked out_dst out_kind sign link ticks_diff '),
    'nt': (
        '_CRC_TABLE record _countdown _lst node pending in_cs _rd rx_bytes ticks_us seq log _fwd '
        '_dst fresh epoch tx_frames _taken index has_token _watch _clocked starting _mout _mviews '
        'led POLLIN _line _line_views _poll ipoll out_len running select step half n NIL buf st '
        'EV_RECV _SENDS_OF _act _cs_start _show audit sends uart _lbuf last record_fields EV_EXIT '
        'msg_sizes out out_dst out_kind AT REQUEST _mhot _on_msg link EV_ENTER _cs_due _enter '),
    'q': (
        '_CRC_TABLE record _countdown node _lst seq count in_cs ticks_us _rd _taken rx_bytes '
        'pending _watch epoch log has_token fresh state EV_RECV st tx_frames buf starting led '
        'POLLIN _line _line_views _poll ipoll running select step _fwd link half _lbuf '
        'record_fields _SENDS_OF _act _dst sends uart EV_EXIT _cs_start _show audit _tout '
        '_wait_since _eraw _on_request _token_seen gen_us known_epoch known_owner on_request '
        'regen_us record_token _no_fields _write _clocked EV_ENTER _cs_due _enter '),
    'ra': (
        '_CRC_TABLE _countdown rx_bytes _lst node record _rd in_cs log n _fwd index ticks_us '
        'tx_frames pending _mout _mviews fresh seq _dst has_token _watch _taken half POLLIN _line '
        '_line_views _poll ipoll running select step starting EV_RECV _SENDS_OF _act _clocked sends '
        'uart lv rq clock _mhot _on_msg EV_EXIT _show led epoch out_len _pass_msg_on seal buf st '
        '_cs_start audit oldest_waiting _mfields out out_dst out_kind _lbuf record_fields link '
        'msg_sizes '),
    'random': (
        'POLLIN _line _line_views _poll ipoll running select step _countdown node in_cs _lst _rd '
        'link record _watch pending log st _housekeeping _read_byte closed line poll buf seq '
        'EV_EXIT EV_RECV _SENDS_OF _act _clocked _cs_start _dst _show audit fresh led requests '
        'sends starting ticks_us uart capacity EV_ENTER EV_REQ _cs_due _enter _wait_since busy '
        'cs_us epoch exit_cs half request ticks_diff _encode_line _mv b2a_base64 flush_one write '),
    'raymond': (
        '_CRC_TABLE _countdown qlen rx_bytes _lst record node in_cs _rd index log ticks_us seq _fwd '
        'pending fresh _dst epoch has_token _taken tx_frames n _watch starting _clocked half led '
        '_mout _mviews POLLIN _line _line_views _poll ipoll running select step holder out out_len '
        'queue buf st EV_RECV _SENDS_OF _act _cs_start _show audit sends uart EV_EXIT _lbuf '
        'record_fields _release msg_sizes _mhot _on_msg asked out_dst out_kind link ticks_diff '
        'EV_ENTER '),
    's': (
        '_CRC_TABLE _lst seq epoch _countdown _taken count state link record node _watch ticks_us '
        '_rd rx_bytes tx_frames _lbuf pending st log has_token in_cs fresh _wait_since capacity '
        'write POLLIN _fwd _line _line_views _poll _token_seen gen_us ipoll known_epoch known_owner '
        'regen_us running select step _encode_line _mv b2a_base64 flush_one _housekeeping '
        '_read_byte closed line poll record_fields record_token EV_RECV buf _SENDS_OF _act _dst '
        'sends starting uart EV_EXIT _clocked _cs_start _show _tout '),
    'sk': (
        '_CRC_TABLE _countdown rx_bytes _lst node record _rd in_cs log _fwd index n ticks_us '
        'tx_frames pending _mout _mviews fresh seq _dst qlen has_token _watch _taken half POLLIN '
        '_line _line_views _poll ipoll running select step starting EV_RECV _SENDS_OF _act _clocked '
        'sends uart rn ln _mhot _on_msg EV_EXIT _show led inq q epoch out_len _pass_msg_on seal buf '
        'st _cs_start audit _lbuf _mfields out out_dst out_kind record_fields link '),
    'toy': (
        '_CRC_TABLE _countdown record _lst node _rd rx_bytes index log _fwd rn in_cs n ticks_us '
        'tx_frames pending ln AT _HEADER _mout _mviews fresh seq _dst has_token _taken _watch '
        'POLLIN _line _line_views _poll ipoll running select step half starting EV_RECV _SENDS_OF '
        '_act _clocked sends uart epoch _mhot _on_msg EV_EXIT _show led REQUEST _wants out out_len '
        '_pass_msg_on seal buf st _cs_start audit _lbuf _mfields out_dst out_kind record_fields '),
    'wt': (
        '_CRC_TABLE _countdown node _lst now walk rx_bytes ticks_us _rd fresh has_token in_cs '
        'starting log _watch index wake_at record epoch pending _housekeeping link out out_len '
        'tx_frames _clk _fwd _mout _mviews n half seq _dst _lbuf _mfields _taken out_dst out_kind '
        'put30 record_fields _tick _elapsed NodeLoop POLLIN _line _line_views _poll _read_byte '
        'closed ipoll line msg_sizes poll running select step EV_RECV _SENDS_OF _act _arm _clocked '
        '_show led sends '),
}
