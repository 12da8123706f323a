# Raspberry Pi Pico (rp2 port). UART per the config:
#   "uart": {"id": 0, "tx": 0, "rx": 1, "rxbuf": 1024, "txbuf": 1024}
# (UART0 may use TX GP0/12/16/28, RX GP1/13/17/29; UART1 TX GP4/8/20/24, RX
# GP5/9/21/25.) "led": 25 on a Pico, "LED" on a Pico W (the LED is on the radio).
# The USB serial is sys.stdin/sys.stdout: the REPL, whose USB stack raises
# KeyboardInterrupt on 0x03 by itself.
# With --resource fram, the I2C bus per the config (boards/*.toml [i2c], docs/fram.md):
#   "i2c": {"id": 0, "sda": 4, "scl": 5, "freq": 100000}
# (I2C0 may use SDA GP0/4/8/12/16/20/28, SCL GP1/5/9/13/17/21; UART0 keeps GP0/GP1.)

import machine
import time

import hal

_RECOVERY_CLOCKS = 9  # a byte's 8 bits and its ACK: a slave mid-byte lets go within nine clocks
_STUCK_US = 1000  # SDA low this long with no clock on SCL: a slave holds it (100 kHz: ~11 byte times)


def recover_bus(sda, scl, Pin=machine.Pin, sleep_us=time.sleep_us, ticks_us=time.ticks_us,
                ticks_diff=time.ticks_diff):
    """Free a bus left stuck by a board that reset in the middle of a transfer: the FRAM may be
    halfway through sending a byte, holding SDA low, and waits for clocks that never come.
    Run before the I2C object is made. If SDA stays low for _STUCK_US while SCL stays high (no
    other master is clocking), clock SCL (open drain) up to nine times with SDA released,
    until the slave lets SDA go, then send a STOP. Returns the clocks sent (0: the bus was
    free, or another master was using it, which is left alone)."""
    sd = Pin(sda, Pin.IN, Pin.PULL_UP)  # released: the external pull-up holds it high when free
    sc = Pin(scl, Pin.IN, Pin.PULL_UP)
    t0 = ticks_us()
    while ticks_diff(ticks_us(), t0) < _STUCK_US:
        if sd.value() or not sc.value():
            return 0  # free, or clocked by another board: not stuck
    sc = Pin(scl, Pin.OPEN_DRAIN, value=1)
    clocks = 0
    while clocks < _RECOVERY_CLOCKS and not sd.value():
        sc.value(0)
        sleep_us(5)  # half a period at 100 kHz
        sc.value(1)
        sleep_us(5)
        clocks += 1
    # STOP (SDA rises while SCL is high; SDA is taken low while SCL is low, so that this
    # is no START): the slave's state machine starts again from idle
    sc.value(0)
    sleep_us(5)
    sd = Pin(sda, Pin.OPEN_DRAIN, value=0)
    sleep_us(5)
    sc.value(1)
    sleep_us(5)
    sd.value(1)
    sleep_us(5)
    return clocks


def open_i2c(cfg):
    """(the I2C bus of the shared resource, the clocks recover_bus sent to free it first).
    (machine.I2C's constructor takes keywords; its transfer methods do not: i2cbus.py.)"""
    icfg = cfg.get("i2c", {})
    sda, scl = icfg.get("sda", 4), icfg.get("scl", 5)
    clocks = recover_bus(sda, scl)
    Pin = machine.Pin
    return machine.I2C(icfg.get("id", 0), sda=Pin(sda), scl=Pin(scl), freq=icfg.get("freq", 100000)), clocks


def open_board(cfg):
    ucfg = cfg.get("uart", {})
    Pin = machine.Pin
    u = machine.UART(
        ucfg.get("id", 0),
        baudrate=cfg.get("baud", 115200),
        tx=Pin(ucfg.get("tx", 0)),
        rx=Pin(ucfg.get("rx", 1)),
        rxbuf=ucfg.get("rxbuf", 1024),
        txbuf=ucfg.get("txbuf", 1024),
        timeout=0,
    )
    led = None
    led_pin = cfg.get("led", 25)
    if led_pin is not None:
        try:
            led = Pin(led_pin, Pin.OUT)
        except (ValueError, TypeError):
            led = None  # a board without that LED still runs
    rx, tx = hal.stdio_streams()
    # The node loop calls the UART's own any() and readinto(buf, n) (C methods: a
    # Python wrapper costs microseconds a pass). It asks for exactly any() bytes:
    # the rp2 read waits timeout_char (>= 1 ms) after each byte for the next one,
    # so asking for more than is there would stall the loop.
    board = hal.Board(u, hal.StreamHost(rx, tx), led, "rp2")
    if cfg.get("resource"):
        board.i2c, board.i2c_clocks = open_i2c(cfg)
    return board
