# Raspberry Pi Pico (rp2 port). UART per the config:
#   "uart": {"id": 0, "tx": 0, "rx": 1, "rxbuf": 1024, "txbuf": 1024}
# (UART0 may use TX GP0/12/16/28, RX GP1/13/17/29; UART1 TX GP4/8/20/24, RX
# GP5/9/21/25.) "led": 25 on a Pico, "LED" on a Pico W (the LED is on the radio).
# The USB serial is sys.stdin/sys.stdout: the REPL, whose USB stack raises
# KeyboardInterrupt on 0x03 by itself.

import machine

import hal


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
    return hal.Board(u, hal.StreamHost(rx, tx), led, "rp2")
