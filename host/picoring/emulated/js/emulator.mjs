// picoring's emulated Picos: N RP2040 chips (rp2040js) running the user's MicroPython UF2, UART0 of
// chip i wired to UART0 of chip i+1 (the last to the first), on one clock paced to wall time.
//
//   node emulator.mjs CONFIG_JSON
//   CONFIG_JSON: {"n": 3, "firmware": PATH, "bootrom": PATH, "modules": NODE_MODULES_DIR}
//
// The chips' USB serial ports travel over stdin/stdout in frames (the Python supervisor,
// picoring/emulated/supervisor.py, turns each into a pty): a 4-byte header, kind (one ASCII
// byte), board index, payload length (uint16 little-endian), then the payload.
//   to node:   U board bytes   (host -> the board's USB serial)
//   from node: U board bytes   (the board's USB serial -> host)
//              B board ""      (the board is at its REPL prompt after power-on)
//              S 255 JSON      (every 0.5 s: chip time, wall time, cycles per board)
//              F board TEXT    (the board stopped: HardFault, lockup or an emulator error)
//   to node:   W 255 JSON      (record a window of chip time: {"warm_ns", "window_ns", "tail_ns", "out"};
//                               the frames on every wire and each board's counters go to the file out)
// Node exits when stdin closes: the supervisor's death stops every chip.
//
// rp2040js 1.4.1 with MicroPython 1.28 needs three things supplied here:
//  - UART interrupts: it raises the TX interrupt on every check, so MicroPython (TX interrupt
//    enabled) would never leave its UART handler and UART(0) hangs. The model below raises TX
//    only when the line drains to a few bytes, and RX at a FIFO level or a receive time-out.
//  - Idle USB: its USB host answers every OUT read at once, with an empty packet when there is
//    nothing to send, so an idle chip spins in its USB interrupt. Here a read waits for data.
//  - Flash writes: the ROM's flash_range_erase / flash_range_program do nothing, so littlefs
//    cannot write. Their first instruction becomes a breakpoint and the erase or program is done
//    on the flash array here.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const config = JSON.parse(process.argv[2]);
// rp2040js logs with console.*: keep stdout for the frames.
for (const k of ['log', 'info', 'warn', 'debug']) console[k] = (...a) => process.stderr.write(a.join(' ') + '\n');
const { Simulator, USBCDC } = await import(pathToFileURL(`${config.modules}/rp2040js/dist/esm/index.js`).href);

const NS_PER_CYCLE = 8; // 125 MHz, as MicroPython's rp2 port sets the system clock
const FLASH_BASE = 0x10000000;
const UART_DR = 0x0;
const TX_INT = 1 << 5;
const RX_INT = 1 << 4;
const RT_INT = 1 << 6;
const FIFO_LEVEL = 4;
// A recorded frame keeps its bytes, up to this many, so that a bench can decode it and tell a
// token from the rest (a longer frame is kept cut, and decodes as no frame).
const FRAME_BYTES_KEPT = 64;
const FRAME_GAP = 2; // byte times of silence that end a frame on a wire // pico-sdk programs the FIFO interrupt levels at 1/8 of 32 bytes
const BKPT_ERASE = 0xe0;
const BKPT_PROGRAM = 0xe1;
const HARDFAULT = 3;

// ---- frames on stdio ----
function send(kind, board, payload) {
  const body = typeof payload === 'string' ? Buffer.from(payload) : Buffer.from(payload);
  for (let off = 0; off === 0 || off < body.length; off += 65535) {
    const part = body.subarray(off, off + 65535);
    const head = Buffer.from([kind.charCodeAt(0), board, part.length & 0xff, part.length >> 8]);
    process.stdout.write(Buffer.concat([head, part]));
  }
}

// ---- the boot ROM, with the two flash routines trapped ----
function bootrom(path) {
  const raw = readFileSync(path);
  let words;
  if (raw.length === 16384) words = new Uint32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + 16384));
  else {
    const text = raw.toString('latin1');
    const hex = text.slice(text.indexOf('Uint32Array')).match(/0x[0-9a-fA-F]{1,8}/g) || [];
    words = Uint32Array.from(hex, (h) => parseInt(h, 16));
  }
  if (words.length !== 4096) throw new Error(`boot ROM ${path}: not 4096 words`);
  const get16 = (a) => (words[a >> 2] >>> ((a & 2) << 3)) & 0xffff;
  const set16 = (a, v) => {
    const shift = (a & 2) << 3;
    words[a >> 2] = ((words[a >> 2] & ~(0xffff << shift)) | (v << shift)) >>> 0;
  };
  // The ROM's function table (its address at 0x14): pairs of a two-letter code and an address.
  const table = {};
  for (let a = get16(0x14); get16(a); a += 4) table[String.fromCharCode(get16(a) & 0xff, get16(a) >> 8)] = get16(a + 2) & ~1;
  set16(table.RE, 0xbe00 | BKPT_ERASE); // flash_range_erase
  set16(table.RP, 0xbe00 | BKPT_PROGRAM); // flash_range_program
  return words;
}

function uf2Blocks(path) {
  const data = readFileSync(path);
  const blocks = [];
  for (let off = 0; off + 512 <= data.length; off += 512) {
    const addr = data.readUInt32LE(off + 12);
    const size = data.readUInt32LE(off + 16);
    blocks.push([addr - FLASH_BASE, data.subarray(off + 32, off + 32 + size)]);
  }
  return blocks;
}

const ROM = bootrom(config.bootrom);
const FIRMWARE = uf2Blocks(config.firmware);

const quietLogger = {
  debug() {},
  info() {},
  warn() {},
  error(component, message) {
    throw new Error(`[${component}] ${message}`);
  },
};

const byteNanos = (uart) => {
  const baud = uart.baudRate;
  return (10 * 1e9) / (isFinite(baud) && baud > 0 ? baud : 115200);
};

class Chip {
  constructor(index) {
    this.index = index;
    this.name = String(index);
    this.sim = new Simulator();
    this.mcu = this.sim.rp2040;
    this.clock = this.sim.clock;
    this.mcu.logger = quietLogger;
    this.mcu.loadBootrom(ROM);
    for (const [off, bytes] of FIRMWARE) this.mcu.flash.set(bytes, off);
    this.cycles = 0;
    this.usbBytesOut = 0; // what the board wrote to its USB serial, for the window's bytes per hop
    this.wireLog = null; // while a window records: this chip's frames on its UART0 wire, [start, end, bytes]
    this.wireFrames = 0; // frames and bytes this chip sent on its UART0 wire
    this.wireBytes = 0;
    this.txFrameStart = -1;
    this.rxFrameEnd = -1;
    this.turnaroundNs = 0;
    this.turnarounds = 0;
    this.stopped = null;
    this.booted = false;
    this.tail = '';
    this.hostBytes = [];
    this.usbOut = []; // sent in one frame after each run of slices
    this.heldRead = null;
    this.setUpUsb();
    this.setUpFlashTraps();
    this.mcu.core.PC = FLASH_BASE; // boot2 at the start of flash
  }

  setUpUsb() {
    const cdc = (this.cdc = new USBCDC(this.mcu.usbCtrl));
    cdc.onDeviceConnected = () => this.writeUsb(Buffer.from('\r\n')); // ask for a fresh prompt
    cdc.onSerialData = (data) => {
      this.usbBytesOut += data.length;
      this.usbOut.push(Buffer.from(data));
      if (!this.booted) {
        this.tail = (this.tail + Buffer.from(data).toString('latin1')).slice(-8);
        if (this.tail.endsWith('>>> ')) {
          this.booted = true;
          this.flushUsb();
          send('B', this.index, '');
        }
      }
    };
    const usb = this.mcu.usbCtrl;
    const answerRead = usb.onEndpointRead;
    this.answerRead = answerRead;
    usb.onEndpointRead = (ep, size) => {
      if (ep === cdc.outEndpoint && cdc.txFIFO.empty) this.heldRead = [ep, size]; // an idle host sends nothing
      else answerRead(ep, size);
    };
  }

  writeUsb(bytes) {
    for (const b of bytes) this.hostBytes.push(b);
    this.pumpUsb();
  }

  pumpUsb() {
    const fifo = this.cdc.txFIFO;
    let i = 0;
    while (i < this.hostBytes.length && !fifo.full) this.cdc.sendSerialByte(this.hostBytes[i++]);
    if (i) this.hostBytes.splice(0, i);
    if (this.heldRead && !fifo.empty) {
      const [ep, size] = this.heldRead;
      this.heldRead = null;
      this.answerRead(ep, size);
    }
  }

  setUpFlashTraps() {
    const mcu = this.mcu;
    const core = mcu.core;
    mcu.onBreak = (code) => {
      const r = core.registers;
      if (code === BKPT_ERASE) {
        mcu.flash.fill(0xff, r[0], r[0] + r[1]); // (offset, count, block size, block command)
      } else if (code === BKPT_PROGRAM) {
        for (let i = 0; i < r[2]; i++) mcu.flash[r[0] + i] &= mcu.readUint8(r[1] + i); // NOR: bits only clear
      } else {
        // rp2040js runs UDF (an undefined instruction, a HardFault on a Cortex-M0+) as a breakpoint;
        // pico-sdk's HardFault handler is a BKPT.
        const op = mcu.readUint16(core.PC - 2); // (the PC has moved past it)
        const why = core.IPSR === HARDFAULT ? 'HardFault' : (op & 0xff00) === 0xde00 ? 'HardFault (undefined instruction)' : `breakpoint ${code}`;
        this.stop(`${why} at PC 0x${(core.PC >>> 0).toString(16)}`);
        return;
      }
      core.PC = core.LR & ~1; // return from the routine
    };
  }

  flushUsb() {
    if (this.usbOut.length) send('U', this.index, Buffer.concat(this.usbOut.splice(0)));
  }

  stop(why) {
    if (this.stopped) return;
    this.stopped = why;
    send('F', this.index, why);
  }

  /** Runs this chip until its clock reads `target` ns. */
  runUntil(target) {
    const core = this.mcu.core;
    const clock = this.clock;
    if (this.hostBytes.length) this.pumpUsb();
    let cycles = 0;
    try {
      while (clock.nanos < target) {
        if (this.stopped) {
          clock.tick(target - clock.nanos);
        } else if (core.waiting) {
          const next = clock.nextAlarm;
          const step = next && next.nanos < target ? Math.max(0, next.nanos - clock.nanos) : target - clock.nanos;
          clock.tick(step);
        } else {
          const c = core.executeInstruction();
          cycles += c;
          clock.tick(c * NS_PER_CYCLE);
        }
      }
    } catch (e) {
      this.stop(`emulator error at PC 0x${(core.PC >>> 0).toString(16)}: ${e.message}`);
      clock.tick(Math.max(0, target - clock.nanos));
    }
    if (!this.stopped && core.IPSR === HARDFAULT && cycles > 0) this.stop(`HardFault at PC 0x${(core.PC >>> 0).toString(16)}`);
    this.cycles += cycles;
  }
}

/** UART0 of `src` sends into UART0 of `dst`, a byte taking 10 bit times at the receiver's baud. */
function wire(src, dst) {
  const tx = src.mcu.uart[0];
  const rx = dst.mcu.uart[0];
  const pending = []; // [byte, due ns] on the wire, not yet in the receiver's FIFO
  let lineFreeAt = 0;
  const deliver = dst.clock.createAlarm(() => {
    const now = dst.clock.nanos;
    while (pending.length && pending[0][1] <= now) {
      if (rx.rxFIFO.full) {
        pending[0][1] = now + byteNanos(rx); // a real FIFO would overrun; this one holds the byte
        break;
      }
      receive(rx, pending.shift()[0]);
    }
    if (pending.length) deliver.schedule(pending[0][1] - now);
  });
  const txDrained = src.clock.createAlarm(() => {
    tx.interruptStatus |= TX_INT;
    tx.checkInterrupts();
  });
  tx.onByte = (b) => {
    const now = src.clock.nanos;
    const t = byteNanos(rx);
    const start = Math.max(now, lineFreeAt);
    // Frames from the bytes' timing alone (any firmware): a pause of more than FRAME_GAP byte
    // times on the wire ends one. The sender's turnaround: from the last byte of the frame it
    // received last to the first byte of the frame it sends next.
    const log = src.wireLog;
    if (start - lineFreeAt > FRAME_GAP * t || src.wireFrames === 0) {
      if (log) log.push([start, start + t, 0, []]);
      src.wireFrames++;
      if (src.rxFrameEnd > src.txFrameStart) {
        src.turnaroundNs += start - src.rxFrameEnd;
        src.turnarounds++;
      }
      src.txFrameStart = start;
    }
    src.wireBytes++;
    if (log) {
      if (!log.length) log.push([start, start + t, 0, []]); // (recording began inside a frame)
      const f = log[log.length - 1];
      f[1] = start + t; // the frame's last byte so far lands in the receiver's FIFO then
      f[2]++;
      if (f[3].length < FRAME_BYTES_KEPT) f[3].push(b);
    }
    lineFreeAt = start + t;
    dst.rxFrameEnd = lineFreeAt; // (the frame's last byte so far)
    pending.push([b, lineFreeAt]);
    if (pending.length === 1) deliver.schedule(lineFreeAt - dst.clock.nanos);
    // TX interrupt when the FIFO drains to its level: FIFO_LEVEL bytes before the line is free.
    txDrained.schedule(Math.max(0, lineFreeAt - FIFO_LEVEL * t - now));
  };
}

function receive(uart, b) {
  uart.rxFIFO.push(b);
  if (uart.rxFIFO.itemCount >= FIFO_LEVEL) uart.interruptStatus |= RX_INT;
  uart.rxTimeout.schedule(3.2 * byteNanos(uart)); // 32 bit times without a new byte
  uart.checkInterrupts();
}

function uartModel(chip) {
  const uart = chip.mcu.uart[0];
  const proto = Object.getPrototypeOf(uart);
  uart.checkInterrupts = function () {
    this.rp2040.setInterrupt(this.irq, !!(this.interruptStatus & this.interruptMask));
  };
  uart.rxTimeout = chip.clock.createAlarm(() => {
    if (!uart.rxFIFO.empty) {
      uart.interruptStatus |= RT_INT;
      uart.checkInterrupts();
    }
  });
  uart.readUint32 = function (offset) {
    if (offset !== UART_DR) return proto.readUint32.call(this, offset);
    const value = this.rxFIFO.pull();
    if (this.rxFIFO.itemCount < FIFO_LEVEL) this.interruptStatus &= ~RX_INT;
    if (this.rxFIFO.empty) this.interruptStatus &= ~RT_INT;
    this.checkInterrupts();
    return value;
  };
  uart.writeUint32 = function (offset, value) {
    if (offset === UART_DR) this.onByte?.(value & 0xff);
    else proto.writeUint32.call(this, offset, value);
  };
}

// UART1 is not wired, but MicroPython may use it: its TX interrupt too is raised per byte and
// cleared when acknowledged, not on every check.
function uart1Model(chip) {
  const uart = chip.mcu.uart[1];
  const proto = Object.getPrototypeOf(uart);
  uart.checkInterrupts = function () {
    this.rp2040.setInterrupt(this.irq, !!(this.interruptStatus & this.interruptMask));
  };
  uart.writeUint32 = function (offset, value) {
    proto.writeUint32.call(this, offset, value);
    if (offset === UART_DR) {
      this.interruptStatus |= TX_INT;
      this.checkInterrupts();
    }
  };
}

// ---- the ring ----
const n = config.n;
const chips = [...Array(n).keys()].map((i) => new Chip(i));
chips.forEach((c) => {
  uartModel(c);
  uart1Model(c);
});
for (let i = 0; i < n; i++) wire(chips[i], chips[(i + 1) % n]);

const MAX_SLICE = 250_000;
// A slice never exceeds one byte time at the fastest baud, so a byte sent in a slice lands in a later one.
const sliceNanos = () => Math.max(1000, Math.min(MAX_SLICE, ...chips.map((c) => byteNanos(c.mcu.uart[0]))));

let chipNanos = 0;
let paceWall = performance.now();
let paceChip = 0;
const MAX_LAG = 100e6; // chip time more than 0.1 s behind wall time does not catch up later
const wall0 = performance.now();

let slice = sliceNanos();
let baudChanged = false;
for (const c of chips) c.mcu.uart[0].onBaudRateChange = () => (baudChanged = true);

function runFor(ms) {
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    if (baudChanged) {
      baudChanged = false;
      slice = sliceNanos();
    }
    const ahead = chipNanos - paceChip - (performance.now() - paceWall) * 1e6;
    if (ahead > 0) return false;
    if (ahead < -MAX_LAG) {
      paceWall = performance.now();
      paceChip = chipNanos;
    }
    chipNanos += slice;
    for (const c of chips) c.runUntil(chipNanos);
    if (recording) windowTick();
  }
  return true;
}

// A window of chip time recorded for `picoring bench ring --emulated`: from the request's chip time
// plus warm_ns, window_ns long; tail_ns more so that the frames answering the window's last ones
// are there too. Each board's USB bytes and cycles are read at the window's two ends (the first
// slice boundary at or after each: at most one byte time late).
// With req.feed ({boards, period_ns, hex}): those bytes go to the boards' USB serial in turn, one
// board every period_ns of chip time from the request on, until the window's end; a host's feed
// would follow wall time, which follows how fast this machine runs the chips.
let recording = null;

function startWindow(req) {
  const t0 = chipNanos + req.warm_ns;
  const feed = req.feed ? { ...req.feed, bytes: Buffer.from(req.feed.hex, 'hex'), due: chipNanos, sent: 0 } : null;
  recording = { req, t0, t1: t0 + req.window_ns, at0: null, at1: null, feed };
  for (const c of chips) c.wireLog = [];
}

function feedTick(f, until) {
  while (f.due <= chipNanos && f.due < until) {
    chips[f.boards[f.sent % f.boards.length]].writeUsb(f.bytes);
    f.sent += 1;
    f.due += f.period_ns;
  }
}

function counters() {
  return { chip_ns: chipNanos, usb_bytes: chips.map((c) => c.usbBytesOut), cycles: chips.map((c) => c.cycles) };
}

function windowTick() {
  const w = recording;
  if (w.feed) feedTick(w.feed, w.t1);
  if (!w.at0 && chipNanos >= w.t0) w.at0 = counters();
  if (!w.at1 && chipNanos >= w.t1) w.at1 = counters();
  if (chipNanos < w.t1 + w.req.tail_ns) return;
  const result = {
    start_ns: w.at0.chip_ns,
    end_ns: w.at1.chip_ns,
    start: w.at0,
    end: w.at1,
    baud: chips.map((c) => c.mcu.uart[0].baudRate),
    stopped: chips.map((c) => c.stopped),
    fed: w.feed ? w.feed.sent : null,
    // wires[i]: chip i -> chip i + 1; each frame [start, end, bytes, its first bytes in hex]
    wires: chips.map((c) => c.wireLog.map(([s, e, n, data]) => [s, e, n, Buffer.from(data).toString('hex')])),
  };
  for (const c of chips) c.wireLog = null;
  recording = null;
  writeFileSync(w.req.out + '.tmp', JSON.stringify(result));
  renameSync(w.req.out + '.tmp', w.req.out);
}

let running = true;
function loop() {
  if (!running) return;
  const more = runFor(20);
  for (const c of chips) c.flushUsb();
  if (more) setImmediate(loop);
  else setTimeout(loop, 1);
}

setInterval(() => {
  send('S', 255, JSON.stringify({
    chip_s: chipNanos / 1e9,
    wall_s: (performance.now() - wall0) / 1e3,
    cycles: chips.map((c) => c.cycles),
    frames: chips.map((c) => c.wireFrames),
    wire_bytes: chips.map((c) => c.wireBytes),
    turnaround_ns: chips.map((c) => c.turnaroundNs),
    turnarounds: chips.map((c) => c.turnarounds),
    stopped: chips.map((c) => c.stopped),
  }));
}, 500);

// ---- frames from the supervisor ----
let inbuf = Buffer.alloc(0);
process.stdin.on('data', (d) => {
  inbuf = inbuf.length ? Buffer.concat([inbuf, d]) : d;
  while (inbuf.length >= 4) {
    const len = inbuf[2] | (inbuf[3] << 8);
    if (inbuf.length < 4 + len) break;
    const kind = String.fromCharCode(inbuf[0]);
    const board = inbuf[1];
    const payload = inbuf.subarray(4, 4 + len);
    inbuf = inbuf.subarray(4 + len);
    if (kind === 'U' && chips[board]) chips[board].writeUsb(payload);
    else if (kind === 'W') startWindow(JSON.parse(payload.toString()));
  }
});
const quit = () => {
  running = false;
  process.exit(0);
};
process.stdin.on('end', quit);
process.stdin.on('error', quit);
process.stdout.on('error', quit);
process.on('SIGTERM', quit);
process.on('SIGINT', quit);
setImmediate(loop);
