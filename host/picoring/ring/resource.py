"""The shared resource's counter, through a board (--resource fram, docs/fram.md).

Only a board reaches the FRAM (it sits on the boards' I2C bus), so the host sets the counter
before a run and reads it after with a board's `!res` command, between critical sections.
Each access is also a res event in the board's stream (op set, op count), so the trace holds
the counter's start and end beside every critical section's read and write, and
`picoring check` judges a trace as `run` judged the run."""

from .link import HarnessError


def set_counter(link, value=0):
    """Set the counter to value through the board of `link`; HarnessError if the board cannot
    (no resource configured, or the FRAM does not answer: the run would prove nothing)."""
    _, reply = link.command("res", "set", value)
    errno = reply.fields.get("errno")
    if errno:
        raise HarnessError("%s: the FRAM counter could not be set: OSError %s on the I2C bus (is the FRAM wired to "
                           "the board's SDA/SCL with pull-ups and power? wiring/README.md)" % (link.port, errno))
    return reply.fields


def read_counter(link, notices):
    """The counter as the board of `link` reads it ({"value", "errno", "clocks"}), or None when it
    could not be asked (said in notices; the audit then reports the count missing)."""
    try:
        _, reply = link.command("res")
    except HarnessError as e:
        notices.append("%s: the FRAM counter could not be read after the run: %s" % (link.port, e))
        return None
    return reply.fields
