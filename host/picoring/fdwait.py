"""Waiting on file descriptors, whatever their numbers.

select.select takes no descriptor above 1023 (FD_SETSIZE): "ValueError: filedescriptor out of
range in select()". A host with a few hundred virtual boards, or their serial ports, open gets
there. poll has no such limit, but its timeout is whole milliseconds, and the virtual ring's
relay times its wake-ups in microseconds; so select is kept where every descriptor fits in it,
and poll takes over where one does not.
"""

import select

FD_SETSIZE = 1024  # Linux's and macOS's: select.select refuses a descriptor at or above it

_IN = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR if hasattr(select, "poll") else 0
_OUT = select.POLLOUT | select.POLLHUP | select.POLLERR if hasattr(select, "poll") else 0


def _fd(f):
    return f if isinstance(f, int) else f.fileno()


def wait(readers, writers=(), timeout=None):
    """(ready to read, ready to write) of readers and writers (descriptors, or objects with a
    fileno(), returned as given), after at most timeout seconds (None: until one is ready), as
    select.select's first two lists: a descriptor whose other end has gone counts as ready."""
    readers, writers = list(readers), list(writers)
    if all(_fd(f) < FD_SETSIZE for f in readers + writers) or not hasattr(select, "poll"):
        ready, writable, _ = select.select(readers, writers, [], timeout)
        return ready, writable
    poller = select.poll()
    wanted = {}
    for f in readers:
        wanted[_fd(f)] = wanted.get(_fd(f), 0) | _IN
    for f in writers:
        wanted[_fd(f)] = wanted.get(_fd(f), 0) | _OUT
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    got = {}
    for fd, events in poller.poll(None if timeout is None else max(0.0, timeout) * 1000.0):
        if events & select.POLLNVAL:  # what select says of a closed descriptor
            raise OSError(9, "Bad file descriptor: %d" % fd)
        got[fd] = events
    return ([f for f in readers if got.get(_fd(f), 0) & _IN], [f for f in writers if got.get(_fd(f), 0) & _OUT])


def allow_high_fd(ser):
    """A pyserial port of this OS whose descriptor select.select cannot take gets a read that
    waits with wait() (pyserial's own waits with select; its PosixPollSerial's read fails on a
    timeout with nothing read: "cannot access local variable 'fd'", pyserial 3.5). Returns ser."""
    try:
        from serial import serialposix
    except ImportError:  # not a POSIX system: no FD_SETSIZE to mind
        return ser
    if type(ser) is serialposix.Serial and ser.fileno() >= FD_SETSIZE:
        ser.__class__ = _high_fd_serial()
    return ser


_HIGH_FD_SERIAL = []


def _high_fd_serial():
    """serialposix.Serial with pyserial 3.5's read, waiting with wait() instead of select."""
    if _HIGH_FD_SERIAL:
        return _HIGH_FD_SERIAL[0]
    import errno
    import os

    from serial import serialposix
    from serial.serialutil import PortNotOpenError, SerialException, Timeout

    class HighFdSerial(serialposix.Serial):
        def read(self, size=1):
            if not self.is_open:
                raise PortNotOpenError()
            read = bytearray()
            timeout = Timeout(self._timeout)
            while len(read) < size:
                try:
                    ready, _ = wait([self.fd, self.pipe_abort_read_r], (), timeout.time_left())
                    if self.pipe_abort_read_r in ready:
                        os.read(self.pipe_abort_read_r, 1000)
                        break
                    if not ready:
                        break  # timeout
                    buf = os.read(self.fd, size - len(read))
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EALREADY, errno.EWOULDBLOCK, errno.EINPROGRESS, errno.EINTR):
                        raise SerialException("read failed: {}".format(e))
                else:
                    if not buf:  # a disconnected device: ready to read, and nothing to read
                        raise SerialException("device reports readiness to read but returned no data "
                                              "(device disconnected or multiple access on port?)")
                    read.extend(buf)
                if timeout.expired():
                    break
            return bytes(read)

    _HIGH_FD_SERIAL.append(HighFdSerial)
    return HighFdSerial
